#!/usr/bin/env bash
# Tiered segments (format-spec/retention.md §21, R93-R97, mq-compact(1)):
# mq-compact --tier-dir plans, then with --execute moves the sealed
# segments older than --tier-after; consumers, mq-inspect --verify,
# mq-topic list, retention and a follower fetching from a partly tiered
# leader read them as any segment; an unmounted tier is an error (exit 69),
# never a shorter log.
source "$(dirname "$0")/lib/common.bash"

K="$BIN/mq-compact"
T="$BIN/mq-topic"
D="$WORK/data"
COLD="$WORK/cold"
export MQ_DIR="$D"
mkdir "$COLD"

logs() { (cd "$1" && ls -- *.log 2>/dev/null | sort) || true; }
msgs() { seq "$1" $(($2 - 1)) | sed 's/^/m/'; }
# Every message from the log start is "m<offset>", once, without a gap, to $2.
check_all() {
  "$C" -C "$3" -t "$1" -p 0 -e -f '%o %s\n' | awk -v last="$2" -v what="$1" '
    NR == 1 { prev = $1 - 1 }
    { if ($2 != "m" $1 || $1 != prev + 1) { print what ": bad " $0; exit 1 } prev = $1 }
    END { if (prev != last) { print what ": ends at " prev; exit 1 } }' || fail "$1 in $3"
}
verify_ok() {
  run "$INSPECT" --verify -C "$1" "$2"
  expect_rc 0 "mq-inspect --verify $2 in $1"
}

# --- flags ---------------------------------------------------------------------------------
for args in "--tier-after 1d" "--tier-dir $COLD --tier-after soon"; do
  run "$K" $args
  expect_rc 64 "mq-compact $args"
done

# --- plan, then move: every sealed segment, never the active one ---------------------------
msgs 0 400 | "$P" -t k --create -X segment.bytes=1024 --batch-bytes 200 -q
before="$(logs "$D/k-0")"
n=$(wc -l <<<"$before")
(( n >= 6 )) || fail "only $n segments"
active="$(tail -1 <<<"$before")"
run "$K" -t k --tier-dir "$COLD" --tier-after 1d
expect_rc 0 "plan with --tier-after 1d"
grep -q '^tier ' "$WORK/out" && fail "segments younger than a day planned: $(cat "$WORK/out")"
run "$K" -t k --tier-dir "$COLD" --tier-after 0
expect_rc 0 "plan with --tier-after 0"
expect_eq "the plan moves nothing" "$before" "$(logs "$D/k-0")"
planned="$(sed -n 's/^tier k-0 \([0-9]*\.log\) offsets .* -> .*$/\1/p' "$WORK/out")"
expect_eq "planned: every sealed segment" "$(head -n -1 <<<"$before")" "$planned"
grep -q "plan only: nothing moved (add --execute to move $((n - 1)) segments" "$WORK/err" ||
  fail "no plan-only notice: $(cat "$WORK/err")"
[[ -e "$D/k-0/tier" ]] && fail "a plan wrote the tier pointer"

run "$K" -t k --tier-dir "$COLD" --tier-after 0 --execute
expect_rc 0 "move"
expect_eq "local: the active segment" "$active" "$(logs "$D/k-0")"
expect_eq "tier: the sealed ones" "$(head -n -1 <<<"$before")" "$(logs "$COLD/k-0")"
grep -q "^k-0 tiers: local 1 segments [0-9]* bytes, tier $((n - 1)) segments [0-9]* bytes ($COLD/k-0)$" \
  "$WORK/out" || fail "per-tier report: $(cat "$WORK/out")"
expect_eq "pointer" "dir=$COLD/k-0" "$(grep -v '^#' "$D/k-0/tier")"
[[ -z "$(ls "$COLD/k-0" | grep '\.tmp$' || true)" ]] || fail "copies left: $(ls "$COLD/k-0")"
check_all k 399 "$D"
verify_ok "$D" k
# A seek into a tiered segment, and a consumer group across both tiers.
expect_eq "-o 123" "m123" "$("$C" -t k -o 123 -c 1 -e -f '%s')"
run "$C" -t k -G g -e -f '%o\n'
expect_rc 0 "group"
expect_eq "group reads every offset once" "$(seq 0 399)" "$(cat "$WORK/out")"

# --- mq-topic list: the tier per partition ----------------------------------------------------
run "$T" list
expect_rc 0 "list"
head -1 "$WORK/out" | grep -q 'SEGMENTS  *TIER$' || fail "no TIER column: $(head -1 "$WORK/out")"
grep -qE "^k +0 +0 +400 +[0-9]+ +$n +$((n - 1)) segments [0-9]+ bytes in $COLD/k-0$" "$WORK/out" ||
  fail "list: $(cat "$WORK/out")"
run "$T" describe k --json
expect_rc 0 "describe --json"
"$PY" - "$WORK/out" "$COLD/k-0" $((n - 1)) <<'PY' || fail "describe --json: $(cat "$WORK/out")"
import json, sys
p = json.load(open(sys.argv[1]))["partitions"][0]
assert p["tier"]["dir"] == sys.argv[2] and p["tier"]["segments"] == int(sys.argv[3]), p
PY

# --- appends, then a second move; a producer reopening after the move -------------------
msgs 400 600 | "$P" -t k --batch-bytes 200 -q
run "$K" -t k --tier-dir "$COLD" --tier-after 0 --execute -q
expect_rc 0 "second move"
expect_eq "local: one segment" 1 "$(logs "$D/k-0" | wc -l)"
check_all k 599 "$D"
verify_ok "$D" k

# --- retention deletes tiered segments (R97), two-phase in the tier directory -------------
run "$T" alter k -X retention.bytes=3000
expect_rc 0 "alter retention.bytes"
tiered_before=$(logs "$COLD/k-0" | wc -l)
run "$K" -t k --execute --delete-delay-ms 0
expect_rc 0 "retention over a tiered partition"
start=$(sed -n 's/^k-0 log start 0 -> \([0-9]*\): .*/\1/p' "$WORK/out")
[[ -n "$start" && "$start" -gt 0 ]] || fail "retention moved no log start: $(cat "$WORK/out")"
(( $(logs "$COLD/k-0" | wc -l) < tiered_before )) || fail "no tiered segment deleted"
[[ -n "$(ls "$COLD/k-0" | grep '\.log\.deleted$')" ]] || fail "no .deleted in the tier (R97)"
expect_eq "first offset after retention" "$start" "$("$C" -t k -e -c 1 -f '%o')"
verify_ok "$D" k
run "$K" -t k --execute --delete-delay-ms 0 -q
expect_rc 0 "purge"
[[ -z "$(ls "$COLD/k-0" | grep '\.deleted$' || true)" ]] || fail ".deleted left in the tier"

# --- an unmounted tier: an error, never a log that starts later ---------------------------
mv "$COLD" "$WORK/cold.away"
run "$C" -t k -e
expect_rc 69 "consume with the tier missing"
grep -q "R96" "$WORK/err" || fail "no R96 in: $(cat "$WORK/err")"
run "$INSPECT" --verify -C "$D" k
[[ $rc != 0 ]] || fail "verify passed with the tier missing"
run "$K" -t k --tier-dir "$COLD" --tier-after 0 --execute
expect_rc 69 "mq-compact with the tier missing"
mv "$WORK/cold.away" "$COLD"
check_all k 599 "$D"

# --- another partition's tier directory is not shared -------------------------------------
msgs 0 200 | "$P" -t other --create -X segment.bytes=1024 --batch-bytes 200 -q
mkdir "$COLD/other-0" && cp "$COLD/k-0/$(logs "$COLD/k-0" | head -1)" "$COLD/other-0/"
run "$K" -t other --tier-dir "$COLD" --tier-after 0 --execute
expect_rc 64 "a tier directory holding another partition's segments"
grep -q "R93" "$WORK/err" || fail "$(cat "$WORK/err")"
[[ -e "$D/other-0/tier" ]] && fail "pointer written"

# --- replication: only below the high watermark; a follower fetches from a partly tiered leader
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
R="$WORK/rep"
mkdir -p "$R/cold"
run "$ISR" --cluster "$R/cl" create -t r --partitions 1 --replicas "$R/r0,$R/r1,$R/r2" \
  --min-insync-replicas 1
expect_rc 0 "mq-isr create"
for r in r0 r1 r2; do
  run "$T" -C "$R/$r" alter r -X segment.bytes=1024
  expect_rc 0 "segment.bytes on $r"
done
msgs 0 300 | "$P" -C "$R/r0" -t r -p 0 --acks 1 --batch-bytes 200 -q
# No follower has fetched: the high watermark is 0, nothing moves (R95).
run "$K" -C "$R/r0" -t r --tier-dir "$R/cold" --tier-after 0 --execute
expect_rc 0 "tier with the high watermark at 0"
grep -q '^tier ' "$WORK/out" && fail "moved above the high watermark: $(cat "$WORK/out")"
for r in r1 r2 r1; do
  run "$REP" -C "$R/$r" -t r -q
  expect_rc 0 "$r fetches"
done
lead_logs="$(logs "$R/r0/r-0")"
run "$K" -C "$R/r0" -t r --tier-dir "$R/cold" --tier-after 0 --execute
expect_rc 0 "tier the leader below its high watermark"
expect_eq "leader: the sealed segments tiered" "$(head -n -1 <<<"$lead_logs")" "$(logs "$R/cold/r-0")"
# r2 starts again from an empty partition and fetches everything from the
# leader, most of it from the tier.
rm -rf "$R/r2/r-0" && mkdir "$R/r2/r-0"
msgs 300 350 | "$P" -C "$R/r0" -t r -p 0 --acks 1 --batch-bytes 200 -q
for r in r2 r1 r2; do
  run "$REP" -C "$R/$r" -t r -q
  expect_rc 0 "$r fetches from a partly tiered leader"
done
check_all r 349 "$R/r2"
check_all r 349 "$R/r0"
verify_ok "$R/r2" r
verify_ok "$R/r0" r
echo ok
