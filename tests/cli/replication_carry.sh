#!/usr/bin/env bash
# What must follow the leader besides the log (format-spec/replication.md
# §17, mq-replicate(1)): a --producer-id ingestion resumed on the new leader
# after a failover appends only what is missing, and a consumer group keeps
# its position. Also: a follower refuses appends (exit 75 naming the leader),
# consumers read only below the high watermark, and mq-replicate's errors.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

# mq-replicate's usage lines are its man page's SYNOPSIS; every long option
# in --help is documented there.
MAN="$SRC/man/man1/mq-replicate.1"
"$REP" --help | sed -n '1,/^$/p' | sed -e '/^$/d' -e 's/^Usage: //' -e 's/^ *//' >usage
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$MAN" | sed -e '/^\./d' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' \
  -e 's/^ *//' >synopsis
[[ -s synopsis ]] || fail "no SYNOPSIS in $MAN"
diff synopsis usage >&2 || fail "mq-replicate's usage lines differ from its SYNOPSIS"
"$REP" --help >help
for opt in $(grep -oE -- '--[a-z][a-z-]+' help | sort -u); do
  grep -q -- "${opt//-/\\\\-}\|$opt" "$MAN" || fail "mq-replicate(1) does not document $opt"
done
run "$REP" -C "$WORK" --bogus
expect_rc 64 "an unknown option"

r0="$WORK/r0" r1="$WORK/r1" r2="$WORK/r2" cl="$WORK/cl"

run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1,$r2" --min-insync-replicas 2
expect_rc 0 "create"

# A follower refuses appends and names the leader.
run "$P" -C "$r1" -t t -p 0 <<<"x"
expect_rc 75 "append on a follower"
grep -q "not the leader: replica 0 ($r0) leads" "$WORK/err" || fail "follower refusal names the leader: $(cat "$WORK/err")"

# The leader's appends are invisible to consumers until the ISR has them.
seq 1 100 >input
run "$P" -C "$r0" -t t -p 0 --acks 1 --producer-id ingest input
expect_rc 0 "produce 100 with acks=1"
run "$C" -C "$r0" -t t -p 0 -e
expect_rc 0 "consume below the HW"
[[ ! -s "$WORK/out" ]] || fail "a consumer read above the high watermark: $(head -3 "$WORK/out")"
for r in "$r1" "$r2"; do
  run "$REP" -C "$r" -t t -q
  expect_rc 0 "catch up $r"
done
run "$REP" -C "$r1" -t t -q  # reports its LEO again: the HW reaches the log end
run "$C" -C "$r0" -t t -p 0 -e
expect_eq "the leader's partition once the ISR has it" "$(seq 1 100)" "$(cat "$WORK/out")"

# A group consumes 40 on the leader; the followers carry its position.
run "$C" -C "$r0" -t t -G g -c 40 -e
expect_rc 0 "group consumes 40"
for r in "$r1" "$r2"; do
  run "$REP" -C "$r" -t t -q
  expect_rc 0 "carry to $r"
done

# Failover: r0's root is lost; r1 is elected.
mv "$r0" "$WORK/r0.lost"
run "$ISR" --cluster "$cl" elect
expect_rc 0 "elect"
run "$REP" -C "$r2" -t t -q   # the new leader's HW moves once its ISR fetched
expect_rc 0 "r2 follows r1"

# The group resumes where it was, on the new leader.
run "$C" -C "$r1" -t t -G g -e
expect_rc 0 "group resumes on the new leader"
expect_eq "the group's remaining messages" "$(seq 41 100)" "$(cat "$WORK/out")"

# The ingestion resumes on the new leader, acks=all with r2 following:
# 150 lines, the first 100 present.
"$REP" -C "$r2" -t t --follow -q & f=$!
PIDS+=("$f")
seq 1 150 >input
run "$P" -C "$r1" -t t -p 0 --acks all --producer-id ingest input
expect_rc 0 "resume the ingestion on the new leader"
run "$C" -C "$r1" -t t -p 0 -e
expect_eq "exactly once through the failover" "$(seq 1 150)" "$(cat "$WORK/out")"
kill "$f"; wait "$f" || true

# Bad input: a damaged cluster state stops every tool with the file and the
# rule, and nothing is appended.
before=$("$C" -C "$r1" -t t -p 0 -e | wc -l)
cp "$cl/cluster-state" "$WORK/cluster-state.good"
sed -i 's/^partition t 0 /partition t 0  /' "$cl/cluster-state"
run "$P" -C "$r1" -t t -p 0 <<<"x"
expect_rc 65 "produce with a damaged cluster state"
grep -q "$cl/cluster-state.*R4[1-6]" "$WORK/err" || fail "produce: file and rule: $(cat "$WORK/err")"
run "$REP" -C "$r2" -t t
expect_rc 65 "replicate with a damaged cluster state"
grep -q "$cl/cluster-state.*R4[1-6]" "$WORK/err" || fail "replicate: file and rule: $(cat "$WORK/err")"
cp "$WORK/cluster-state.good" "$cl/cluster-state"
[[ $("$C" -C "$r1" -t t -p 0 -e | wc -l) == "$before" ]] || fail "something was appended"
# A follower's damaged leader-epoch checkpoint: refused, named, not replaced.
cp "$r2/t-0/leader-epoch-checkpoint" "$WORK/lec.good"
printf '0\n1\n5 x\n' >"$r2/t-0/leader-epoch-checkpoint"
echo y | "$P" -C "$r1" -t t -p 0 -q
run "$REP" -C "$r2" -t t
expect_rc 65 "replicate onto a damaged leader-epoch checkpoint"
grep -q "leader-epoch-checkpoint.*R3[5-7]" "$WORK/err" || fail "checkpoint: file and rule: $(cat "$WORK/err")"
cmp -s <(printf '0\n1\n5 x\n') "$r2/t-0/leader-epoch-checkpoint" || fail "the damaged checkpoint was replaced"
cp "$WORK/lec.good" "$r2/t-0/leader-epoch-checkpoint"
run "$REP" -C "$r2" -t t
expect_rc 0 "replicate once the checkpoint is mended"
# A root the cluster state does not know under the id its topic names.
sed -i 's/^replica.id=2$/replica.id=0/' "$r2/topics/t.conf"
run "$REP" -C "$r2" -t t
expect_rc 64 "a root whose replica id is another root's"
grep -q "replica id 0 of topic \"t\" is $r0" "$WORK/err" || fail "wrong root: $(cat "$WORK/err")"
sed -i 's/^replica.id=0$/replica.id=2/' "$r2/topics/t.conf"

# mq-isr --check from cron applies the ISR rule: a follower that fetched
# nothing for replica.lag.time.max.ms leaves the ISR.
run "$ISR" --cluster "$WORK/cl2" create -t lag --partitions 1 --replicas "$WORK/q0,$WORK/q1" \
  -X replica.lag.time.max.ms=300
expect_rc 0 "create a topic with a short lag limit"
run "$ISR" --cluster "$WORK/cl2" --check
expect_rc 0 "--check: the leader starts counting"
sleep 0.5  # past replica.lag.time.max.ms: a deadline, not a timing assertion
run "$ISR" --cluster "$WORK/cl2" --check
expect_rc 1 "--check after the lag limit"
grep -q "^lag-0: ISR 0,1 -> 0: not caught up" "$WORK/out" || fail "--check shrink: $(cat "$WORK/out")"
grep -q "reason shrink: replica 1 not caught up" "$WORK/cl2/isr-changes" || fail "isr-changes: $(cat "$WORK/cl2/isr-changes")"
# The follower is back in the ISR once it has fetched; a --check that comes
# more than 300 ms after that fetch (a loaded machine) finds it lagging
# again, so fetch and check again, a bounded number of times.
for try in 1 2 3 4 5 6 7 8 9 10; do
  run "$REP" -C "$WORK/q1" -t lag
  expect_rc 0 "the follower fetches"
  run "$ISR" --cluster "$WORK/cl2" --check
  [[ $rc == 0 ]] && break
done
expect_rc 0 "--check once the follower rejoined ($try tries)"

# Errors.
run "$REP" -C "$WORK/nosuch"
expect_rc 66 "a missing root"
run "$REP" -C "$r1" -t nosuch
expect_rc 66 "a missing topic"
run "$P" -C "$r2" -t plain --create <<<"x"
expect_rc 0 "a topic of one root"
run "$REP" -C "$r2" -t plain
expect_rc 64 "not a replicated topic"
# A topic made --like a replicated one belongs to its root alone.
run "$P" -C "$r1" -t copy --create --like t <<<"x"
expect_rc 0 "a copy of a replicated topic's configuration"
grep -q "^cluster=\|^replica.id=" "$r1/topics/copy.conf" && fail "--like copied the replication link"
# mq-consume's own writers do not append to a replicated topic (yet).
run "$C" -C "$r1" -t copy -G pipe -e --to-topic t --exec cat
expect_rc 64 "--to-topic into a replicated topic"
grep -q -- "--to-topic t: a replicated topic" "$WORK/err" || fail "--to-topic refusal: $(cat "$WORK/err")"
run "$C" -C "$r1" -t copy -e --dlq t --exec false
expect_rc 64 "--dlq into a replicated topic"
grep -q -- "--dlq t: a replicated topic" "$WORK/err" || fail "--dlq refusal: $(cat "$WORK/err")"
run "$REP" -C "$r2" -t t -p 7
expect_rc 64 "a partition out of range"
# Two followers of one partition at once: the second is refused.
"$REP" -C "$r2" -t t --follow -q & f=$!
PIDS+=("$f")
held=false
for _ in $(seq 600); do lock_held "$r2/t-0/replicate.lock" && { held=true; break; }; sleep 0.1; done
$held || fail "the first mq-replicate --follow never took replicate.lock"
run "$REP" -C "$r2" -t t -p 0
expect_rc 75 "a second mq-replicate on one partition"
kill "$f"; wait "$f" || true
echo "ok"
