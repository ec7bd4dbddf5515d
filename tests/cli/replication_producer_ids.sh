#!/usr/bin/env bash
# Producer ids of a replicated topic come from its cluster (format-spec/
# cluster.md §18.6, producer.md P10): a --producer-id ingestion resumed on a
# new leader whose registry never received the name appends every missing
# message exactly once, and the old leader follows again; a root's own
# registry (its unreplicated topics' producers) never stops a follower.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

r0="$WORK/r0" r1="$WORK/r1" r2="$WORK/r2" cl="$WORK/cluster"
run "$ISR" --cluster "$cl" create -t T --partitions 1 --replicas "$r0,$r1,$r2" \
  --min-insync-replicas 1 -X replica.lag.time.max.ms=500
expect_rc 0 "create"

# Two ingestions on r0: all of A, the first 100 messages of B. Messages of
# 100 bytes, so that a batch is 16 KiB (--batch-bytes' default).
for i in $(seq 1 300); do printf 'a%03d-%095d\n' "$i" 0; done >inputA
for i in $(seq 1 300); do printf 'b%03d-%095d\n' "$i" 0; done >inputB
run "$P" -C "$r0" -t T --producer-id ingestA inputA
expect_rc 0 "ingestA on r0"
head -100 inputB >inputB100
run "$P" -C "$r0" -t T --producer-id ingestB inputB100
expect_rc 0 "the first 100 of ingestB on r0"

# r1 fetches a batch at 1 KiB/s and is killed before it catches up: it
# holds ingestA's first records, and the registry was never carried to it.
"$REP" -C "$r1" -t T --fetch-max-bytes 1 --max-bytes-per-second 1k -q & f=$!
PIDS+=("$f")
for _ in $(seq 600); do
  [[ $(stat -c %s "$r1"/T-0/*.log 2>/dev/null || echo 0) -gt 0 ]] && break
  sleep 0.05
done
kill -9 "$f"; wait "$f" 2>/dev/null || true
[[ $(stat -c %s "$r1"/T-0/*.log) -gt 0 ]] || fail "r1 fetched nothing"

# r0 is lost; r1 is elected and the ingestion of B resumes there.
mv "$r0" "$WORK/r0.away"
run "$ISR" --cluster "$cl" elect
expect_rc 0 "elect"
grep -q "leader 0>1" "$cl/isr-changes" || fail "r1 was not elected: $(cat "$cl/isr-changes")"
run "$P" -C "$r1" -t T --producer-id ingestB inputB
expect_rc 0 "ingestB resumed on r1"
# r2 catches up (twice: the second fetch moves the high watermark to the
# log end), then r1 is read to its end.
for _ in 1 2; do
  run "$REP" -C "$r2" -t T -q
  expect_rc 0 "r2 follows r1"
done
run "$C" -C "$r1" -t T -p 0 -e
expect_rc 0 "consume r1"
cp "$WORK/out" r1.msgs
expect_eq "every message of ingestB exactly once on the new leader" "$(cut -c1-4 inputB)" \
  "$(grep '^b' r1.msgs | cut -c1-4)"
[[ -z $(sort r1.msgs | uniq -d) ]] || fail "duplicates on r1: $(sort r1.msgs | uniq -d | head -3)"

# The old leader comes back and follows r1: it truncates what r1 never
# had and fetches the rest.
mv "$WORK/r0.away" "$r0"
for _ in 1 2; do
  run "$REP" -C "$r0" -t T -q
  expect_rc 0 "the old leader follows the new one"
done
run "$C" -C "$r0" -t T -p 0 -e
expect_rc 0 "consume r0"
expect_eq "the old leader holds the new leader's log" "$(cat r1.msgs)" "$(cat "$WORK/out")"

# A root's own registry names the producers of its unreplicated topics; it
# allocates from 0 as before, and a follower never compares it with the
# leader's: r2 gave ingestB another id for a topic of its own.
run "$P" -C "$r2" -t own --create --producer-id x <<<"x1"
expect_rc 0 "an unreplicated topic on r2"
run "$P" -C "$r2" -t own --producer-id ingestB <<<"y1"
expect_rc 0 "another name on r2's own topic"
expect_eq "r2's registry" "0 1 2" \
  "$(cat "$r2/producers/x.id" "$r2/producers/ingestB.id" "$r2/producers/next-producer-id" | tr '\n' ' ' | sed 's/ $//')"
echo more | "$P" -C "$r1" -t T --producer-id ingestC -q
run "$REP" -C "$r2" -t T -q
expect_rc 0 "r2 follows whatever its own registry holds"
run "$C" -C "$r2" -t own -e
expect_eq "r2's own topic" "$(printf 'x1\ny1')" "$(cat "$WORK/out")"

# The ids are the cluster's, one per name for every root, allocated in the
# order first asked for; no root's registry holds them.
expect_eq "the cluster's ids" "4294967296 4294967297 4294967298" \
  "$(cat "$cl/producers/"ingest{A,B,C}.id | tr '\n' ' ' | sed 's/ $//')"
for r in "$r0" "$r1"; do
  [[ ! -e $r/producers/ingestA.id && ! -e $r/producers/ingestB.id ]] ||
    fail "a replicated topic's id was allocated in $r's registry"
done
replicas_agree "$cl" "after the failovers"
echo "ok"
