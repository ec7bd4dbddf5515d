#!/usr/bin/env bash
# R90: retention.protect, retention.protect.max.ms and file.delete.delay.ms
# are topic keys: set by mq-topic create and alter (-X, with units),
# shown by mq-topic config with their source, refused when invalid
# (nothing changed), honoured by mq-compact, and replaced for one run by
# its flags (--protect, --protect-group, --protect-max-ms,
# --delete-delay-ms).
source "$(dirname "$0")/lib/common.bash"

K="$BIN/mq-compact"
T="$BIN/mq-topic"
D="$WORK/data"
export MQ_DIR="$D"
logs() { (cd "$D/$1" && ls -- *.log 2>/dev/null | sort) || true; }
deleted() { (cd "$D/$1" && ls -- *.deleted 2>/dev/null | sort) || true; }
cfg() {
  "$T" config "$1" --json | jq -r --arg k "$2" '.configs[] | select(.key == $k) | "\(.value) \(.source)"'
}

# --- create, config, alter, validation ------------------------------------------------
run "$T" create lag -X segment.bytes=1024 -X retention.bytes=2000 -X retention.protect=slow \
  -X retention.protect.max.ms=7d -X file.delete.delay.ms=0s
expect_rc 0 "create with the retention keys"
expect_eq "retention.protect" "slow topic" "$(cfg lag retention.protect)"
expect_eq "retention.protect.max.ms" "604800000 topic" "$(cfg lag retention.protect.max.ms)"
expect_eq "file.delete.delay.ms (0: not the default)" "0 topic" "$(cfg lag file.delete.delay.ms)"
grep -qx 'retention.protect=slow' "$D/topics/lag.conf" || fail "conf: $(cat "$D/topics/lag.conf")"
"$T" create plain >/dev/null
expect_eq "default retention.protect" " default" "$(cfg plain retention.protect)"
# What an empty or special value means, the same in text and --json.
meaning() {
  "$T" config "$1" --json | jq -r --arg k "$2" '.configs[] | select(.key == $k) | .meaning // ""'
}
text_value() { "$T" config "$1" | awk -v k="$2" '$1 == k { $1 = ""; $NF = ""; gsub(/^ +| +$/, ""); print }'; }
expect_eq "retention.protect empty: --json meaning" "none: no group" "$(meaning plain retention.protect)"
expect_eq "retention.protect empty: text" '"" (none: no group)' "$(text_value plain retention.protect)"
expect_eq "retention.protect.max.ms -1: text" "-1 (no limit)" "$(text_value plain retention.protect.max.ms)"
expect_eq "retention.protect.max.ms -1: --json" "no limit" "$(meaning plain retention.protect.max.ms)"
expect_eq "retention.protect=slow means what it says" "" "$(meaning lag retention.protect)"
expect_eq "retention.protect=slow: text" "slow" "$(text_value lag retention.protect)"
expect_eq "default file.delete.delay.ms" "60000 default" "$(cfg plain file.delete.delay.ms)"
grep -q 'protect\|file.delete' "$D/topics/plain.conf" && fail "defaults written: $(cat "$D/topics/plain.conf")"
cp "$D/topics/lag.conf" "$WORK/conf.before"
for bad in "retention.protect=a,,b" "retention.protect=no/slash" "retention.protect=*,a" \
  "retention.protect.max.ms=-2" "retention.protect.max.ms=3y" "file.delete.delay.ms=-1"; do
  run "$T" alter lag -X "$bad"
  expect_rc 64 "alter -X $bad"
  grep -q "${bad%%=*}" "$WORK/err" || fail "alter -X $bad: $(cat "$WORK/err")"
  cmp -s "$WORK/conf.before" "$D/topics/lag.conf" || fail "a refused alter ($bad) changed the .conf"
done

# --- mq-compact honours the topic's keys --------------------------------------------
seq 0 399 | sed 's/^/m/' | "$P" -t lag --batch-bytes 200 -q
"$C" -t lag -G slow -c 150 -f '' >/dev/null
"$C" -t lag -G other -c 5 -f '' >/dev/null
before="$(logs lag-0)"
run "$K" -t lag --execute
expect_rc 3 "the topic's retention.protect keeps slow's unread messages"
grep -q "^protected group slow partition lag-0" "$WORK/out" || fail "$(cat "$WORK/out")"
grep -q "^loss group other partition lag-0" "$WORK/out" || fail "other is not protected: $(cat "$WORK/out")"
first="$("$C" -t lag -e -c 1 -f '%o')"
(( first <= 150 )) || fail "the log starts at $first, above slow's committed 150"
(( first > 0 )) || fail "nothing was deleted below slow's committed 150"
# file.delete.delay.ms=0: the next run unlinks the .deleted files.
[[ -n "$(deleted lag-0)" ]] || fail "no .deleted files after the run"
run "$K" -t lag --execute
[[ -z "$(deleted lag-0)" ]] || fail ".deleted files left with file.delete.delay.ms=0: $(deleted lag-0)"

# --- the flags replace the topic's keys for one run -----------------------------------
"$T" alter lag -X file.delete.delay.ms=1h >/dev/null
run "$K" -t lag --protect-group nobody
expect_rc 0 "--protect-group nobody replaces the topic's slow"
grep -q "^loss group slow partition lag-0" "$WORK/out" || fail "slow still protected: $(cat "$WORK/out")"
sleep 0.05
run "$K" -t lag --protect-max-ms 1 --execute
expect_rc 0 "--protect-max-ms replaces retention.protect.max.ms"
grep -q "slow .*not protected" "$WORK/out" || fail "$(cat "$WORK/out")"
[[ -n "$(deleted lag-0)" ]] || fail "no .deleted files after the run"
run "$K" -t lag --execute
[[ -n "$(deleted lag-0)" ]] || fail "file.delete.delay.ms=1h: .deleted files were unlinked"
run "$K" -t lag --execute --delete-delay-ms 0
[[ -z "$(deleted lag-0)" ]] || fail "--delete-delay-ms 0 left $(deleted lag-0)"
run "$INSPECT" --verify -C "$D" lag
expect_rc 0 "verify"
echo "compact_topic_keys: ok"
