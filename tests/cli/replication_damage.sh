#!/usr/bin/env bash
# A replica whose log is damaged (a flipped bit in a committed batch) is
# never elected while a healthy in-sync replica can lead, and leaves the ISR
# at the election; with no healthy one, nothing is elected (exit 69) and the
# damage is named. mq-replicate --repair cuts the damaged log where its
# valid batches end and fetches the rest again, byte for byte the leader's;
# it refuses on the leader (mq-isr(1) elect, mq-replicate(1) --repair).
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"
SEG=t-0/00000000000000000000.log

leader_of() { "$ISR" --cluster "$WORK/$1/cl" describe | sed -n 's/.*Leader: \([0-9-]*\).*/\1/p'; }

# --- a clean election passes a damaged replica over -----------------------------
replicated_topic a r0 r1 r2
[[ $(isr_of a) == 0,1,2 ]] || fail "ISR before the damage: $(isr_of a)"
flip_byte "a/r1/$SEG" 100
run "$INSPECT" --verify "a/r1/t-0"
expect_rc 65 "verify of the damaged replica"
mv a/r0 a/r0.away
run "$ISR" --cluster "$WORK/a/cl" elect
expect_rc 0 "elect with a damaged in-sync replica"
[[ $(leader_of a) == 2 ]] || fail "the damaged replica 1 was elected: $(cat "$WORK/out")"
[[ $(isr_of a) == 2 ]] || fail "the damaged replica stayed in the ISR: $(isr_of a)"
grep -q "replica 1 cannot lead: $WORK/a/r1/$SEG: position [0-9]*: R4: " "$WORK/err" ||
  fail "elect does not name the damage: $(cat "$WORK/err")"

# --- --repair: refused on the leader, then cut and fetched again ----------------
cp "a/r2/$SEG" leader.before
run "$REP" -C a/r2 --repair
expect_rc 69 "--repair on the leader"
grep -q "this replica leads the partition" "$WORK/err" || fail "--repair on the leader: $(cat "$WORK/err")"
cmp -s "a/r2/$SEG" leader.before || fail "--repair changed the leader's log"
run "$REP" -C a/r1 --repair -v
expect_rc 0 "--repair of the damaged follower"
grep -q "repaired: $WORK/a/r1/$SEG: position [0-9]*: R4: .*; truncated to offset [0-9]*" \
  "$WORK/err" || fail "--repair does not say what it cut: $(cat "$WORK/err")"
cmp "a/r1/$SEG" "a/r2/$SEG" || fail "the repaired log is not the leader's"
run "$INSPECT" --verify "a/r1/t-0"
expect_rc 0 "verify after the repair"
# A healthy log: --repair cuts nothing.
run "$REP" -C a/r1 --repair -v
expect_rc 0 "--repair of a healthy follower"
grep -q "repaired" "$WORK/err" && fail "--repair cut a healthy log: $(cat "$WORK/err")"
run "$C" -C a/r1 -t t -e
expect_eq "the repaired replica's records" "$(seq 1 20)" "$(cat "$WORK/out")"

# --- no healthy in-sync replica: nothing is elected -----------------------------
replicated_topic b r0 r1
flip_byte "b/r1/$SEG" 100
mv b/r0 b/r0.away
run "$ISR" --cluster "$WORK/b/cl" elect
expect_rc 69 "elect with only a damaged in-sync replica"
grep -q "replica 1 cannot lead: .*R4" "$WORK/err" || fail "stuck election: $(cat "$WORK/err")"
[[ $(leader_of b) == 0 ]] || fail "a leader was elected: $(leader_of b)"
echo "ok"
