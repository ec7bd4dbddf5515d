#!/usr/bin/env bash
# A following consumer never hands out records that a failover cuts
# (format-spec/replication.md §16.3, segment.md §9.2, mq-isr(1)): the old
# leader appends above its high watermark (acks=1, its followers dead), a
# consumer follows it, the leader's root goes away, another replica is
# elected and takes other records at those offsets; the old leader returns,
# cuts its tail and fetches them. The consumer, which had the cut records in
# its reader's buffer, prints the log's records once the high watermark
# passes them, never the cut ones.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

r0="$WORK/r0" r1="$WORK/r1" r2="$WORK/r2" cl="$WORK/cl"
leader_of() {
  "$ISR" --cluster "$cl" describe -t t | sed -n 's/.*Leader: \(-\{0,1\}[0-9]*\).*/\1/p' | head -1
}
# lines_in FILE N: waits (up to 2 minutes: a hang, no timing) until FILE has N lines.
lines_in() {
  local i
  for ((i = 0; i < 1200; i++)); do
    (($(wc -l <"$1") >= $2)) && return 0
    sleep 0.1
  done
  fail "$1 has $(wc -l <"$1") lines, want $2: $(cat "$1")"
}

run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1,$r2" \
  --min-insync-replicas 1 -X replica.lag.time.max.ms=500
expect_rc 0 "create"
follow() {  # ID: starts a following replicator of replica ID; its pid in $!
  "$REP" -C "$WORK/r$1" -t t --follow -q 2>>"$WORK/replicate-$1.err" &
  PIDS+=($!)
}
follow 1
f1=$!
follow 2
f2=$!
for i in 1 2 3 4 5; do
  run "$P" -C "$r0" -t t -p 0 --acks all <<<"a-$i"
  expect_rc 0 "acks=all a-$i"
done
# The followers die: what r0 appends now is above its high watermark.
{
  kill -KILL "$f1" "$f2"
  wait "$f1" "$f2"
} 2>/dev/null || true
printf 'old-%s\n' 1 2 3 4 5 >old
run "$P" -C "$r0" -t t -p 0 --acks 1 old
expect_rc 0 "acks=1 old-*"

"$C" -C "$r0" -t t -f '%o %s\n' >consumed 2>consume.err &
consumer=$!
PIDS+=("$consumer")
lines_in consumed 5  # a-1..a-5; old-* are read and held above the high watermark

# Failover: r0's root goes away, the followers return, another is elected
# and takes new-* at offsets 5..9.
mv "$r0" "$r0.away"
follow 1
f1=$!
follow 2
f2=$!
run "$ISR" --cluster "$cl" elect
expect_rc 0 "elect"
leader=$(leader_of)
[[ $leader == 1 || $leader == 2 ]] || fail "elected: $leader"
for i in 1 2 3 4 5; do
  run "$P" -C "$WORK/r$leader" -t t -p 0 --acks all <<<"new-$i"
  expect_rc 0 "acks=all new-$i"
done
# r0 returns: it cuts old-* and fetches new-*; its high watermark passes them.
mv "$r0.away" "$r0"
for pass in 1 2 3; do
  run "$REP" -C "$r0" -t t -q
  expect_rc 0 "catch up r0 (pass $pass)"
done
lines_in consumed 10
kill "$consumer"
wait "$consumer" 2>/dev/null || true

run "$C" -C "$r0" -t t -e -f '%o %s\n'
expect_rc 0 "read r0"
want=$(printf '%s\n' "0 a-1" "1 a-2" "2 a-3" "3 a-4" "4 a-5" "5 new-1" "6 new-2" "7 new-3" \
  "8 new-4" "9 new-5")
expect_eq "r0's log after the failover" "$want" "$(cat "$WORK/out")"
expect_eq "what the following consumer printed" "$want" "$(head -10 consumed)"
echo ok
