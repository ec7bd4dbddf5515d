#!/usr/bin/env bash
# R108: tier.after.ms is a topic key: set by mq-topic create and alter (-X,
# with units), shown by mq-topic config with its source, refused when
# invalid (nothing changed); mq-compact --tier-dir without --tier-after
# moves the segments of each topic older than its tier.after.ms (none for a
# topic without it), and --tier-after replaces it for one run.
source "$(dirname "$0")/lib/common.bash"

K="$BIN/mq-compact"
T="$BIN/mq-topic"
D="$WORK/data"
COLD="$WORK/cold"
export MQ_DIR="$D"
mkdir "$COLD"
logs() { (cd "$1" && ls -- *.log 2>/dev/null | sort) || true; }
cfg() {
  "$T" config "$1" --json | jq -r --arg k "$2" '.configs[] | select(.key == $k) | "\(.value) \(.source)"'
}

# --- create, config, alter, validation ------------------------------------------------
run "$T" create old -X segment.bytes=1024 -X tier.after.ms=1h
expect_rc 0 "create with tier.after.ms=1h"
expect_eq "tier.after.ms" "3600000 topic" "$(cfg old tier.after.ms)"
grep -qx 'tier.after.ms=3600000' "$D/topics/old.conf" || fail "conf: $(cat "$D/topics/old.conf")"
run "$T" create plain -X segment.bytes=1024
expect_rc 0 "create plain"
expect_eq "default tier.after.ms" "-1 default" "$(cfg plain tier.after.ms)"
grep -q 'tier' "$D/topics/plain.conf" && fail "default written: $(cat "$D/topics/plain.conf")"
cp "$D/topics/old.conf" "$WORK/conf.before"
for bad in "tier.after.ms=-2" "tier.after.ms=soon" "tier.after.ms=3y" "tier.after.ms="; do
  run "$T" alter old -X "$bad"
  expect_rc 64 "alter -X $bad"
  grep -q "tier.after.ms" "$WORK/err" || fail "alter -X $bad: $(cat "$WORK/err")"
  cmp -s "$WORK/conf.before" "$D/topics/old.conf" || fail "a refused alter ($bad) changed the .conf"
done
run "$T" alter old -X nosuch.key=1
expect_rc 64 "alter with an unknown key"
grep -q "tier.after.ms" "$WORK/err" || fail "the valid keys do not list tier.after.ms: $(cat "$WORK/err")"

# --- mq-compact --tier-dir alone: each topic's tier.after.ms --------------------------
seq 0 199 | sed 's/^/m/' | "$P" -t old --batch-bytes 200 -q
seq 0 199 | sed 's/^/m/' | "$P" -t plain --batch-bytes 200 -q
old_logs="$(logs "$D/old-0")"
plain_logs="$(logs "$D/plain-0")"
(( $(wc -l <<<"$old_logs") >= 4 )) || fail "only $(wc -l <<<"$old_logs") segments"
# Just written: younger than the topic's hour, nothing moves.
run "$K" --tier-dir "$COLD" --execute
expect_rc 0 "--tier-dir alone, segments younger than tier.after.ms"
grep -q '^tier ' "$WORK/out" && fail "moved segments younger than an hour: $(cat "$WORK/out")"
expect_eq "old: nothing moved" "$old_logs" "$(logs "$D/old-0")"
# An hour later for the topic: every sealed segment of old moves, none of
# plain (no tier.after.ms).
run "$T" alter old -X tier.after.ms=0s
expect_rc 0 "alter tier.after.ms=0s"
expect_eq "tier.after.ms=0s" "0 topic" "$(cfg old tier.after.ms)"
run "$K" --tier-dir "$COLD" --execute
expect_rc 0 "--tier-dir alone moves by the topic's key"
expect_eq "old: the sealed segments tiered" "$(head -n -1 <<<"$old_logs")" "$(logs "$COLD/old-0")"
expect_eq "old: the active one local" "$(tail -1 <<<"$old_logs")" "$(logs "$D/old-0")"
expect_eq "plain: nothing moved" "$plain_logs" "$(logs "$D/plain-0")"
[[ -e "$COLD/plain-0" ]] && fail "a tier directory made for plain"
[[ -e "$D/plain-0/tier" ]] && fail "a tier pointer written for plain"
expect_eq "old reads whole" "$(seq 0 199 | sed 's/^/m/')" "$("$C" -t old -e)"
run "$INSPECT" --verify -C "$D" old
expect_rc 0 "verify old"

# --- --tier-after replaces the topic's key for one run ---------------------------------
run "$T" alter old -X tier.after.ms=30d
expect_rc 0 "alter tier.after.ms=30d"
seq 200 399 | sed 's/^/m/' | "$P" -t old --batch-bytes 200 -q
run "$K" -t old --tier-dir "$COLD"
expect_rc 0 "plan by the topic's 30 days"
grep -q '^tier ' "$WORK/out" && fail "planned segments younger than 30 days: $(cat "$WORK/out")"
run "$K" -t old --tier-dir "$COLD" --tier-after 0
expect_rc 0 "plan by --tier-after 0"
grep -q '^tier old-0 ' "$WORK/out" || fail "--tier-after 0 planned nothing: $(cat "$WORK/out")"
run "$K" -t plain --tier-dir "$COLD" --tier-after 0 --execute
expect_rc 0 "--tier-after 0 on a topic without the key"
expect_eq "plain: the sealed segments tiered" "$(head -n -1 <<<"$plain_logs")" "$(logs "$COLD/plain-0")"

# --- --tier-after still needs --tier-dir ------------------------------------------------
run "$K" --tier-after 1d
expect_rc 64 "--tier-after without --tier-dir"
grep -q -- "--tier-after needs --tier-dir" "$WORK/err" || fail "$(cat "$WORK/err")"
echo "compact_tier_topic_key: ok"
