#!/usr/bin/env bash
# Consumers never hand out records that a failover cuts, and a consumer
# group never skips the records that replaced them (format-spec/
# replication.md §16.3, segment.md §9.4, group.md §14.3, mq-isr(1)).
#
# 1. The old leader appends above its high watermark (acks=1, its
#    followers dead); a consumer and a group member follow it; its root
#    goes away, another replica is elected and takes other records at
#    those offsets; the old leader returns, cuts its tail and fetches them.
#    The readers had the cut records read ahead, and print the log's
#    records once the high watermark passes them, never the cut ones.
# 2. An unclean election cuts records a group had read and committed on
#    the old leader (its committed offset is no higher than the log end
#    after the new records): back on the old leader, the group starts
#    where its committed leader epoch ends in the log (KIP-320), reads the
#    new records and commits past them; a consumer that followed u0 across
#    it prints the new records after the cut ones, saying so.
# After each, every root's groups have committed offsets valid on the final
# leader (lib/failover_checks.bash; in 2, before the member ran on u0, the
# check sees the diverged one), and the new records, appended one at a
# time by a --producer-id ingestion resumed each time, are there once.
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/failover_checks.bash"
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
follow() {  # NAME: starts a following replicator of root $WORK/NAME; its pid in $!
  "$REP" -C "$WORK/$1" -t t --follow -q 2>>"$WORK/replicate-$1.err" &
  PIDS+=($!)
}
follow r1
f1=$!
follow r2
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
"$C" -C "$r0" -t t -G g -f '%o %s\n' >group-consumed 2>group.err &
member=$!
PIDS+=("$member")
# a-1..a-5; old-* are read and held above the high watermark
lines_in consumed 5
lines_in group-consumed 5

# Failover: r0's root goes away, the followers return, another is elected
# and takes new-* at offsets 5..9.
mv "$r0" "$r0.away"
follow r1
f1=$!
follow r2
f2=$!
run "$ISR" --cluster "$cl" elect
expect_rc 0 "elect"
leader=$(leader_of)
[[ $leader == 1 || $leader == 2 ]] || fail "elected: $leader"
printf 'new-%s\n' 1 2 3 4 5 >new
for i in 1 2 3 4 5; do
  run "$P" -C "$WORK/r$leader" -t t -p 0 --acks all --producer-id ing1 < <(head -n "$i" new)
  expect_rc 0 "acks=all new-$i"
done
# r0 returns: it cuts old-* and fetches new-*; its high watermark passes them.
mv "$r0.away" "$r0"
for pass in 1 2 3; do
  run "$REP" -C "$r0" -t t -q
  expect_rc 0 "catch up r0 (pass $pass)"
done
lines_in consumed 10
lines_in group-consumed 10
kill "$consumer" "$member"
wait "$consumer" "$member" 2>/dev/null || true

run "$C" -C "$r0" -t t -e -f '%o %s\n'
expect_rc 0 "read r0"
want=$(printf '%s\n' "0 a-1" "1 a-2" "2 a-3" "3 a-4" "4 a-5" "5 new-1" "6 new-2" "7 new-3" \
  "8 new-4" "9 new-5")
expect_eq "r0's log after the failover" "$want" "$(cat "$WORK/out")"
expect_eq "what the following consumer printed" "$want" "$(head -10 consumed)"
expect_eq "what the group member printed" "$want" "$(head -10 group-consumed)"
# r0 leads again: the group has read everything and reads nothing more.
# r0 is in the ISR right after a fetch; on a loaded machine more than
# replica.lag.time.max.ms may pass before the election looks, so fetch and
# elect again, a bounded number of times.
for try in 1 2 3 4 5 6 7 8 9 10; do
  run "$REP" -C "$r0" -t t -q
  expect_rc 0 "r0 fetches before the preferred election"
  run "$ISR" --cluster "$cl" elect --preferred
  expect_rc 0 "preferred election"
  [[ $(leader_of) == 0 ]] && break
done
[[ $(leader_of) == 0 ]] || fail "r0 does not lead again after $try tries: $(leader_of)"
run "$C" -C "$r0" -t t -G g -e -f '%o %s\n'
expect_rc 0 "the group on r0"
expect_eq "the group on r0 after the failover" "" "$(cat "$WORK/out")"
run "$C" -C "$r0" --describe -G g -J
expect_rc 0 "describe the group"
grep -q '"current_offset":10,' "$WORK/out" || fail "the group's offset: $(cat "$WORK/out")"
final_log "$r0" final1
check_ingestion "the ingestion of new-*" final1 new
for r in "$r0" "$r1" "$r2"; do check_group_offsets "the groups after the failover" "$r" "$r0"; done

# ---- 2. an unclean election under a group's committed offset ----------------
r0="$WORK/u0" r1="$WORK/u1" r2="$WORK/u2" cl="$WORK/ucl"
run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1,$r2" \
  --min-insync-replicas 1 -X replica.lag.time.max.ms=500
expect_rc 0 "create (2)"
follow u1
f1=$!
follow u2
f2=$!
for i in 1 2 3 4 5; do
  run "$P" -C "$r0" -t t -p 0 --acks all <<<"a-$i"
  expect_rc 0 "acks=all a-$i (2)"
done
# u1 stops following: it leaves the ISR, and old-* reach u0 and u2 only.
{
  kill -KILL "$f1"
  wait "$f1"
} 2>/dev/null || true
for i in 1 2 3 4 5; do
  run "$P" -C "$r0" -t t -p 0 --acks all <<<"old-$i"
  expect_rc 0 "acks=all old-$i"
done
run "$C" -C "$r0" -t t -G g -e -f '%s\n'
expect_rc 0 "the group reads u0"
# A consumer follows u0 through what comes next.
"$C" -C "$r0" -t t -f '%o %s\n' >u-consumed 2>u-consume.err &
consumer=$!
PIDS+=("$consumer")
lines_in u-consumed 10
expect_eq "the group on u0" "$(printf '%s\n' a-1 a-2 a-3 a-4 a-5 old-1 old-2 old-3 old-4 old-5)" \
  "$(cat "$WORK/out")"
{
  kill -TERM "$f2"
  wait "$f2"
} 2>/dev/null || true
# Both ISR members go away: u1, behind at offset 5, is elected uncleanly
# and takes new-* at 5..9.
mv "$r0" "$r0.away"
mv "$r2" "$r2.away"
run "$ISR" --cluster "$cl" elect --unclean
expect_rc 0 "unclean election"
[[ $(leader_of) == 1 ]] || fail "u1 does not lead: $(leader_of)"
for i in 1 2 3 4 5; do
  run "$P" -C "$r1" -t t -p 0 --acks all --producer-id ing2 < <(head -n "$i" new)
  expect_rc 0 "acks=all new-$i (2)"
done
mv "$r0.away" "$r0"
mv "$r2.away" "$r2"
for pass in 1 2; do
  for r in "$r0" "$r2"; do
    run "$REP" -C "$r" -t t -q
    expect_rc 0 "catch up $r (pass $pass)"
  done
done
run "$ISR" --cluster "$cl" elect --preferred
expect_rc 0 "preferred election (2)"
[[ $(leader_of) == 0 ]] || fail "u0 does not lead again: $(leader_of)"
# The following consumer had printed old-*, which are cut: it goes back to
# where its last record's leader epoch ends and prints what is there now.
lines_in u-consumed 15
kill "$consumer"
wait "$consumer" 2>/dev/null || true
expect_eq "what the consumer following u0 printed" \
  "$(printf '%s\n' "0 a-1" "1 a-2" "2 a-3" "3 a-4" "4 a-5" "5 old-1" "6 old-2" "7 old-3" \
    "8 old-4" "9 old-5" "5 new-1" "6 new-2" "7 new-3" "8 new-4" "9 new-5")" "$(cat u-consumed)"
grep -q "offsets 5..9, printed already, were cut from the log" u-consume.err \
  || fail "the consumer does not say what was cut: $(cat u-consume.err)"
run "$C" -C "$r0" -t t -e -f '%s\n'
expect_eq "u0's log" "$(printf '%s\n' a-1 a-2 a-3 a-4 a-5 new-1 new-2 new-3 new-4 new-5)" \
  "$(cat "$WORK/out")"
# The committed offset, 10, is the log end; its leader epoch ends at 5:
# the check of every group's committed offsets sees it.
if out=$(group_offsets_problem "$r0" "$r0"); then
  fail "the committed offsets check passed a diverged group: $out"
fi
[[ $out == *"diverged"* ]] || fail "the committed offsets check: $out"
run "$C" -C "$r0" --describe -G g
expect_rc 0 "describe the diverged group"
grep -q "^g  *t  *0  *10  *10  *5 .* diverged$" "$WORK/out" || fail "describe: $(cat "$WORK/out")"
grep -q "t-0: committed offset 10 follows a record of leader epoch 0, which ends at offset 5" \
  "$WORK/out" || fail "describe's note: $(cat "$WORK/out")"
run "$C" -C "$r0" -t t -G g -e -f '%o %s\n'
expect_rc 0 "the group on u0 after the unclean failover"
expect_eq "what the group reads after the unclean failover" \
  "$(printf '%s\n' "5 new-1" "6 new-2" "7 new-3" "8 new-4" "9 new-5")" "$(cat "$WORK/out")"
grep -q "committed offset 10 follows a record of leader epoch 0, which ends at offset 5 in the log" \
  "$WORK/err" || fail "the member does not say where it starts: $(cat "$WORK/err")"
run "$C" -C "$r0" --describe -G g -J
grep -q '"current_offset":10,.*"note":null' "$WORK/out" || fail "after: $(cat "$WORK/out")"
run "$C" -C "$r0" -t t -G g -e
expect_eq "the group has read everything" "" "$(cat "$WORK/out")"
# The followers carry the group's new commit.
for r in "$r1" "$r2"; do
  run "$REP" -C "$r" -t t -q
  expect_rc 0 "catch up $r after the member ran"
done
final_log "$r0" final2
check_ingestion "the ingestion of new-* (2)" final2 new
for r in "$r0" "$r1" "$r2"; do check_group_offsets "the groups after the unclean failover" "$r" "$r0"; done
replicas_agree "$WORK/cl" "after the failover"
replicas_agree "$cl" "after the unclean failover"
echo ok
