#!/usr/bin/env bash
# mq-isr --check verifies every replica's whole log each run (its cost
# grows with the logs); --check --no-verify applies the ISR rule and
# reports stopped followers without reading any log, for a cron job that
# runs each minute beside a full --check run less often (mq-isr(1)).
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"
export MQ_CLUSTER="$WORK/cl"

run "$ISR" create -t t --partitions 1 --replicas r0,r1,r2 --min-insync-replicas 1 \
  -X replica.lag.time.max.ms=3600000
expect_rc 0 "create"
for i in 1 2 3; do seq $((i * 10 - 9)) $((i * 10)) | "$P" -q -C r0 -t t --acks 1; done
for r in r1 r2; do
  run "$REP" -q -C $r
  expect_rc 0 "catch up $r"
done
# A bit flipped in the middle of replica 2's log (R4): only a read of its
# bytes finds it.
log=r2/t-0/00000000000000000000.log
flip_byte "$log" $(($(stat -c %s "$log") / 2))

run "$ISR" --check --no-verify
expect_rc 0 "--check --no-verify: $(cat "$WORK/out")"
grep -q "^OK: 1 topic(s), 1 partition(s)" "$WORK/out" || fail "--no-verify: $(cat "$WORK/out")"
[[ $(isr_of .) == 0,1,2 ]] || fail "--no-verify changed the ISR: $(isr_of .)"

run "$ISR" --check
expect_rc 1 "--check"
grep -q "^t-0: replica 2 fails verification: .*$log: position [0-9]*: R4" "$WORK/out" ||
  fail "--check: $(cat "$WORK/out")"
[[ $(isr_of .) == 0,1 ]] || fail "--check kept the damaged replica in the ISR: $(isr_of .)"

# Only with --check.
run "$ISR" describe --no-verify
expect_rc 64 "describe --no-verify"
run "$ISR" --verify-replicas --no-verify
expect_rc 64 "--verify-replicas --no-verify"
grep -q "no-verify goes with --check" "$WORK/err" || fail "usage: $(cat "$WORK/err")"
echo "ok: --check --no-verify reads no log; --check verifies them"
