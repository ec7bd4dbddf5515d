#!/usr/bin/env bash
# The replica checkpoints hold what the log implies (format-spec/
# replication.md §16, R37, R38), wherever they are read:
#  - a truncation lowers the high watermark with the log: after an unclean
#    election the returning old leader's high watermark is at its new log
#    end, never above it;
#  - a high watermark above the log end, or a leader-epoch checkpoint that
#    is not the one the log implies, is corruption (exit 65 naming the file,
#    position and rule) for mq-inspect --verify, a consumer, a producer and
#    a follower, and a producer refuses before it appends anything;
#  - a damaged high-watermark (R61, or an older mq's checkpoint) or
#    fetch-positions file stops mq-produce before it appends, mq-isr
#    --check treats every damaged checkpoint alike, and --verify names
#    the byte position;
#  - a failed append's error is printed once.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

# fresh NAME MIN_ISR: a cluster of three roots NAME/r0..r2 with topic t.
fresh() {
  mkdir -p "$1"
  run "$ISR" --cluster "$WORK/$1/cl" create -t t --partitions 1 \
    --replicas "$WORK/$1/r0,$WORK/$1/r1,$WORK/$1/r2" --min-insync-replicas "$2" \
    -X replica.lag.time.max.ms=500
  expect_rc 0 "create $1"
}
# log_bytes ROOT: the size of the partition's (one) segment.
log_bytes() { stat -c %s "$1/t-0/00000000000000000000.log"; }
# produce_replicated NAME FILE: FILE's lines on NAME/r0 with acks=1, then
# NAME/r1 and NAME/r2 caught up twice (the second round reports their
# log ends: the high watermark reaches the log end).
produce_replicated() {
  run "$P" -C "$1/r0" -t t --acks 1 "$2"
  expect_rc 0 "produce $2"
  for i in 1 2; do
    for r in r1 r2; do
      run "$REP" -C "$1/$r" -q
      expect_rc 0 "catch up $r"
    done
  done
}
hw_of() { "$INSPECT" "$1/t-0/high-watermark" | awk '/^topic:/ { print $6 }'; }
# one_line WHAT: stderr holds exactly one line.
one_line() {
  [[ $(wc -l <"$WORK/err") == 1 ]] || fail "$1: stderr is not one line: $(cat "$WORK/err")"
}

# --- a failed append's error is printed once ----------------------------------
fresh once 2
mv once/r1 once/r1.away
mv once/r2 once/r2.away
sleep 0.7
# The first acks=all append waits, the ISR shrinks (80); the next is
# refused (79).
run "$P" -C once/r0 -t t --acks all --ack-timeout 5000 <<<"x"
[[ $rc == 80 || $rc == 81 ]] || fail "acks=all with the followers gone: exit $rc, want 80 or 81"
one_line "exit $rc"
run "$ISR" --cluster "$WORK/once/cl" --check
# Input of more than one append: the failed append stops the input, and
# closing the producer returns the same error.
seq 1 100000 >many
echo x >one
for input in one many; do
  run "$P" -C once/r0 -t t --acks all "$input"
  expect_rc 79 "acks=all below min.insync.replicas"
  grep -q NOT_ENOUGH_REPLICAS "$WORK/err" || fail "exit 79 without its message: $(cat "$WORK/err")"
  one_line "exit 79"
done
run "$P" -C once/r1.away -t t --acks 1 <<<"x"
expect_rc 64 "a root moved away from its cluster-state name"
one_line "a root under another name"

# --- a truncation lowers the high watermark -----------------------------------
fresh unclean 1
CL="$WORK/unclean/cl"
seq 0 9 | sed 's/^/a-/' >in10
produce_replicated unclean in10
# Five more only on r0; the followers fall out of the ISR, so r0's high
# watermark counts them (the append after the shrink moves it).
seq 1 4 | sed 's/^/old-/' | "$P" -C unclean/r0 -t t --acks 1
sleep 0.7
run "$ISR" --cluster "$CL" --check
echo old-5 | "$P" -C unclean/r0 -t t --acks 1
[[ $(hw_of unclean/r0) == 15 ]] || fail "r0's HW before the failover: $(hw_of unclean/r0), want 15"
mv unclean/r0 unclean/r0.away
run "$ISR" --cluster "$CL" elect --unclean
expect_rc 0 "unclean election"
mv unclean/r0.away unclean/r0
run "$REP" -C unclean/r0 -v
expect_rc 0 "the old leader follows"
grep -q "truncated to offset 10" "$WORK/err" || fail "r0 was not truncated: $(cat "$WORK/err")"
[[ $(hw_of unclean/r0) -le 10 ]] ||
  fail "after the truncation to 10, r0's high watermark is $(hw_of unclean/r0)"
run "$INSPECT" --verify unclean/r0/t-0
expect_rc 0 "verify after the truncation"
run "$C" -C unclean/r0 -t t -e -f '%o %s\n'
expect_rc 0 "consume r0 after the truncation"
! grep -q old- "$WORK/out" || fail "a consumer of r0 reads cut records: $(cat "$WORK/out")"

# --- forged and damaged checkpoints -------------------------------------------
# A replicated partition of 20 records in epoch 0 on r0, r1 and r2.
fresh forged 1
seq 0 19 >in20
produce_replicated forged in20
[[ $(hw_of forged/r0) == 20 ]] || fail "HW before forging: $(hw_of forged/r0)"
cp -a forged/r0 pristine

# expect_corrupt WHAT RULE: the last run exited 65 naming RULE.
expect_corrupt() {
  expect_rc 65 "$1"
  grep -q "$2" "$WORK/err" || fail "$1: the message does not name $2: $(cat "$WORK/err")"
}
# restore: r0 back to its pristine copy.
restore() { rm -rf forged/r0 && cp -a pristine forged/r0; }

# A high watermark above the log end (R38), in the checkpoint an older mq
# kept it in (read while high-watermark is missing, R61).
rm forged/r0/t-0/high-watermark
printf '0\n1\nt 0 1000\n' >forged/r0/t-0/replication-offset-checkpoint
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, HW 1000 over a log end of 20" R38
grep -q "replication-offset-checkpoint" "$WORK/out" "$WORK/err" ||
  fail "verify does not name the checkpoint: $(cat "$WORK/out" "$WORK/err")"
run "$C" -C forged/r0 -t t -e
expect_corrupt "consumer, HW 1000 over a log end of 20" R38
run "$P" -C forged/r0 -t t --acks 1 <<<"late"
expect_corrupt "producer, HW 1000 over a log end of 20" R38
[[ $(log_bytes forged/r0) == $(log_bytes pristine) ]] || fail "the producer appended before it failed"
one_line "producer, HW 1000"

# Damaged files an append depends on: nothing is appended (R7).
for f in high-watermark replication-offset-checkpoint fetch-positions; do
  for bytes in 'garbage' '0\n1\nt 0\n' '0\n2\nt 0 5\n'; do
    restore
    [[ $f == replication-offset-checkpoint ]] && rm forged/r0/t-0/high-watermark
    printf "$bytes" >"forged/r0/t-0/$f"
    for acks in 1 all; do
      run "$P" -C forged/r0 -t t --acks "$acks" <<<"late"
      expect_rc 65 "produce --acks $acks with a damaged $f ($bytes)"
      [[ $(log_bytes forged/r0) == $(log_bytes pristine) ]] ||
        fail "--acks $acks with a damaged $f: appended before failing"
    done
    run "$ISR" --cluster "$WORK/forged/cl" --check
    expect_rc 65 "mq-isr --check with a damaged $f"
  done
done
# The leader's fetch positions (R60): a file of another size, or whose
# copies both fail their CRC, is named by verify with the byte position.
restore
printf 'garbage' >forged/r0/t-0/fetch-positions
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, a 7-byte fetch-positions" R60
grep -q "fetch-positions.*7" "$WORK/out" "$WORK/err" ||
  fail "verify does not name fetch-positions at byte 7: $(cat "$WORK/out" "$WORK/err")"
restore
head -c 4096 /dev/zero >forged/r0/t-0/fetch-positions
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, a fetch-positions of zeros" R60
# The high watermark (R61): likewise, with the byte position; a copy
# whose CRC fails beside a whole one is a write not finished, no breach.
restore
printf 'garbage' >forged/r0/t-0/high-watermark
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, a 7-byte high-watermark" R61
grep -q "high-watermark: position 7: R61" "$WORK/out" "$WORK/err" ||
  fail "verify does not name high-watermark at byte 7: $(cat "$WORK/out" "$WORK/err")"
head -c 1024 /dev/zero >forged/r0/t-0/high-watermark
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, a high-watermark of zeros" R61
grep -q "high-watermark: position 508: R61" "$WORK/out" "$WORK/err" ||
  fail "verify does not name high-watermark at byte 508: $(cat "$WORK/out" "$WORK/err")"
restore
printf 'x' | dd of=forged/r0/t-0/high-watermark bs=1 seek=600 conv=notrunc status=none
run "$INSPECT" --verify forged/r0/t-0
expect_rc 0 "verify, a high-watermark with one copy torn"
hw=$(hw_of forged/r0)  # the other copy's: the last one stored, or the one before
[[ -n $hw && $hw -le 20 ]] || fail "HW with one copy torn: '$hw'"
restore
printf 'garbage' >forged/r0/t-0/leader-epoch-checkpoint
run "$ISR" --cluster "$WORK/forged/cl" --check
expect_rc 65 "mq-isr --check with a damaged leader-epoch-checkpoint"

# A leader-epoch checkpoint the log does not imply (R37): epoch 9 from
# offset 15 on a log of epoch 0 only.
restore
printf '0\n2\n0 0\n9 15\n' >forged/r0/t-0/leader-epoch-checkpoint
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, a forged epoch 9 from offset 15" R37
grep -q "leader-epoch-checkpoint" "$WORK/out" "$WORK/err" ||
  fail "verify does not name the epoch checkpoint: $(cat "$WORK/out" "$WORK/err")"
# An entry the log implies that the checkpoint lacks.
printf '0\n0\n' >forged/r0/t-0/leader-epoch-checkpoint
run "$INSPECT" --verify forged/r0/t-0
expect_corrupt "verify, an epoch checkpoint without the log's epoch 0" R37
restore
run "$INSPECT" --verify forged/r0/t-0
expect_rc 0 "verify of the pristine copy"

# The same forgery on a caught-up follower: it stops (65) and refetches
# nothing, where it truncated to 0 and fetched the log again.
cp -a forged/r1 r1-pristine
printf '0\n2\n0 0\n9 15\n' >forged/r1/t-0/leader-epoch-checkpoint
run "$REP" -C forged/r1 -v
expect_corrupt "a follower with a forged epoch checkpoint" R37
grep -q "truncated" "$WORK/err" && fail "a follower truncated after a forged checkpoint: $(cat "$WORK/err")"
cmp forged/r1/t-0/00000000000000000000.log r1-pristine/t-0/00000000000000000000.log ||
  fail "the follower's log changed"
echo "ok"
