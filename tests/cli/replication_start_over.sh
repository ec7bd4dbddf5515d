#!/usr/bin/env bash
# R92, R111 (format-spec/retention.md §20.5), through the real mq-replicate:
# a follower whose log ends below the leader's log start (retention at the
# leader deleted what it lacks) starts over from it and says so on stderr
# in one line, with the offset its log ended at and the one it starts over
# from; it keeps the producers its old log held, so an ingestion resumed
# on it after an election appends each message once.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
K="$BIN/mq-compact"
cd "$WORK"
export MQ_CLUSTER="$WORK/cl"

run "$ISR" create -t t --partitions 1 --replicas r0,r1 --min-insync-replicas 1 \
  -X replica.lag.time.max.ms=1000 -X segment.bytes=1024 -X retention.bytes=1024
expect_rc 0 "create"
# An ingestion of 100 lines in batches of a few hundred bytes: several
# segments, its last batches after the last roll.
seq 1 100 >in1
run "$P" -C r0 -t t --acks 1 --batch-bytes 200 --producer-id ingest in1
expect_rc 0 "ingest 1-100"
run "$REP" -C r1 -q
expect_rc 0 "r1 catches up"
old_end=$("$BIN/mq-topic" -C r1 describe t --json | jq '.partitions[0].log_end_offset')
expect_eq "r1's log end" "100" "$old_end"

# The leader goes on without r1, which leaves the ISR; retention by size
# deletes past r1's log end, below the HW.
seq 1001 2000 | "$P" -q -C r0 -t t --acks 1 --batch-bytes 200
sleep 1.5
"$ISR" --check >/dev/null || true
[[ $(isr_of .) == 0 ]] || fail "r1 is still in the ISR: $(isr_of .)"
echo 2001 | "$P" -q -C r0 -t t --acks all # the HW follows the ISR of r0 alone
run "$K" -C r0 -t t --execute -q
expect_rc 0 "retention at the leader"
start=$("$BIN/mq-topic" -C r0 describe t --json | jq '.partitions[0].log_start_offset')
((start > old_end)) || fail "the leader's log start $start is not past r1's log end $old_end"

# R92: r1 starts over from the leader's log start and says so.
run "$REP" -C r1
expect_rc 0 "r1 follows again"
line="t-0: behind the leader's log start (this log ended at offset $old_end; retention at the"
line+=" leader deleted what it lacks): starting over from offset $start"
grep -qF "$line" "$WORK/err" || fail "stderr: $(cat "$WORK/err")"
[[ $(grep -c "starting over" "$WORK/err") == 1 ]] || fail "one line: $(cat "$WORK/err")"
run "$REP" -C r1 -q
expect_rc 0 "r1 again"
[[ $(isr_of .) == 0,1 ]] || fail "r1 did not rejoin the ISR: $(isr_of .)"
run "$C" -C r1 -t t -p 0 -e
expect_eq "r1's log is the leader's from its log start" \
  "$("$C" -C r0 -t t -p 0 -e)" "$(cat "$WORK/out")"

# R111: r0 is lost, r1 elected; the ingestion resumed there (150 lines)
# appends 101-150, once, and none of the first 100 again.
mv r0 r0.lost
run "$ISR" elect
expect_rc 0 "elect"
seq 1 150 >in2
run "$P" -C r1 -t t --acks 1 --batch-bytes 200 --producer-id ingest in2
expect_rc 0 "resume the ingestion on r1"
run "$C" -C r1 -t t -p 0 -e
expect_rc 0 "consume r1"
expect_eq "the ingestion's lines on r1: the rest, once" "$(seq 101 150)" \
  "$(grep -xE '[0-9]{1,3}' "$WORK/out")"
echo "ok"
