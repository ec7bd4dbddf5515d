#!/usr/bin/env bash
# A member whose process is stopped (SIGSTOP) does not hold its partitions
# forever (format-spec/group.md R69): once its heartbeat is overdue (no poll
# for its deadline plus 5 s, confirmed a second later), the other member
# kills it (SIGKILL through a pidfd), takes its partitions and delivers the
# rest; the stopped process is gone, so it prints nothing when continued.
# Printing and with --exec; and a member that is only slow (each handler
# run within --max-poll-interval) is never killed.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
"$P" -q -t t --create --partitions 2 </dev/null
produce() {  # produce FROM TO: messages FROM..TO to each partition
  for p in 0 1; do seq "$1" "$2" | sed "s/^/m/" | "$P" -q -t t -p "$p"; done
}
produce 1 50

# wait_for WHAT ERR CMD...: until CMD succeeds (up to 40 s: a loaded
# machine); else fails, showing the file ERR.
wait_for() {
  local what=$1 err=$2
  shift 2
  for _ in $(seq 1 800); do
    "$@" && return 0
    sleep 0.05
  done
  fail "$what (stderr: $(cat "$err"))"
}
# Every message of the topic, as "PARTITION OFFSET".
all() { "$C" -t t -e -f '%p %o\n' | sort; }
# lost FILE...: messages of the topic in none of the files.
lost() { comm -23 <(all) <(cut -d' ' -f1,2 "$@" | sort -u) | wc -l; }
# The member the stopped one was: gone (killed), so nothing continues it.
expect_killed() {  # expect_killed PID NAME ERR
  local rc=0
  wait "$1" || rc=$?
  [[ $rc == 137 ]] || fail "$2: exit $rc, want 137 (killed by SIGKILL) (stderr: $(cat "$3"))"
  kill -CONT "$1" 2>/dev/null && fail "$2 still exists after it was killed"
  return 0
}

# --- printing ---------------------------------------------------------------
"$C" -t t -G g --member-id a --max-poll-interval 1000 -v -f '%p %o %s\n' >"$WORK/a.out" 2>"$WORK/a.err" &
a=$!
PIDS+=($a)
wait_for "a joins" "$WORK/a.err" grep -q 'this member (a) is assigned' "$WORK/a.err"
"$C" -t t -G g --member-id b --max-poll-interval 1000 -v -f '%p %o %s\n' >"$WORK/b.out" 2>"$WORK/b.err" &
b=$!
PIDS+=($b)
wait_for "a and b share the partitions" "$WORK/b.err" \
  grep -qE 'members a,b; this member \(b\) is assigned partitions [01]$' "$WORK/b.err"
mine=$(sed -nE 's/.*members a,b; this member \(b\) is assigned partitions ([01])$/\1/p' "$WORK/b.err" | tail -1)
theirs=$((1 - mine))
wait_for "a prints its partition" "$WORK/a.err" grep -q "^$theirs 49 " "$WORK/a.out"
kill -STOP "$a"
stopped_at=$EPOCHREALTIME
produce 51 100
# a's partition is taken by b: every message is delivered.
wait_for "b delivers a's partition once a is stopped" "$WORK/b.err" \
  grep -q "^$theirs 99 " "$WORK/b.out"
took=$(awk -v a="$stopped_at" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "printing: b took a's partition $took s after a was stopped (--max-poll-interval 1000)"
grep -q "group g: member a (pid $a) did not poll for [0-9]* ms past its deadline of 1000 ms (stopped or hung): killed it" \
  "$WORK/b.err" || fail "b's message: $(cat "$WORK/b.err")"
expect_killed "$a" a "$WORK/a.err"
before=$(wc -c <"$WORK/a.out")
produce 101 110
wait_for "b delivers the rest" "$WORK/b.err" grep -q "^$theirs 109 " "$WORK/b.out"
(($(lost "$WORK/a.out" "$WORK/b.out") == 0)) || fail "$(lost "$WORK/a.out" "$WORK/b.out") messages lost"
[[ $(wc -c <"$WORK/a.out") == "$before" ]] || fail "a printed after it was killed"
grep -q 'this member (b) is assigned partitions 0,1$' "$WORK/b.err" || fail "b: $(cat "$WORK/b.err")"
# a's files are gone; b's heartbeat is valid; a damaged one is reported.
members=$MQ_DIR/groups/g/members
[[ -e $members/a.lock || -e $members/a.alive ]] && fail "a's files are left: $(ls "$members")"
[[ -s $members/b.alive ]] || fail "no heartbeat of b: $(ls "$members")"
run "$INSPECT" --verify "$MQ_DIR"
expect_rc 0 "mq-inspect --verify with b's heartbeat"
cp "$members/b.alive" "$members/zz.alive"
flip_byte "$members/zz.alive" 20
run "$INSPECT" --verify "$MQ_DIR"
expect_rc 65 "mq-inspect --verify with a damaged heartbeat"
grep -q 'groups/g/members/zz.alive.*R69' "$WORK/out" "$WORK/err" || fail "$(cat "$WORK/out" "$WORK/err")"
rm "$members/zz.alive"
kill -TERM "$b"
wait "$b" || true
[[ -e $members/b.alive ]] && fail "b left its heartbeat behind: $(ls "$members")"

# --- --exec -----------------------------------------------------------------
# Each handler appends "PARTITION OFFSET" to its member's file. Deadline:
# one attempt of --max-poll-interval 1000 plus the handler's 5 s grace.
handler='echo "$MQ_PARTITION $MQ_OFFSET" >>"$1"'
"$C" -t t -G x --member-id c --max-poll-interval 1000 --max-attempts 1 -v \
  --exec sh -c "$handler" sh "$WORK/c.out" 2>"$WORK/c.err" &
c=$!
PIDS+=($c)
wait_for "c joins" "$WORK/c.err" grep -q 'this member (c) is assigned' "$WORK/c.err"
"$C" -t t -G x --member-id d --max-poll-interval 1000 --max-attempts 1 -v \
  --exec sh -c "$handler" sh "$WORK/d.out" 2>"$WORK/d.err" &
d=$!
PIDS+=($d)
wait_for "c and d share the partitions" "$WORK/d.err" \
  grep -qE 'members c,d; this member \(d\) is assigned partitions [01]$' "$WORK/d.err"
mine=$(sed -nE 's/.*members c,d; this member \(d\) is assigned partitions ([01])$/\1/p' "$WORK/d.err" | tail -1)
theirs=$((1 - mine))
wait_for "c handles its partition" "$WORK/c.err" grep -q "^$theirs 109$" "$WORK/c.out"
kill -STOP "$c"
stopped_at=$EPOCHREALTIME
produce 111 120
wait_for "d handles c's partition once c is stopped" "$WORK/d.err" \
  grep -q "^$theirs 119$" "$WORK/d.out"
took=$(awk -v a="$stopped_at" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "--exec: d took c's partition $took s after c was stopped (deadline 6000 ms)"
grep -q "group x: member c (pid $c) did not poll for [0-9]* ms past its deadline of 6000 ms (stopped or hung): killed it" \
  "$WORK/d.err" || fail "d's message: $(cat "$WORK/d.err")"
expect_killed "$c" c "$WORK/c.err"
(($(lost "$WORK/c.out" "$WORK/d.out") == 0)) || fail "$(lost "$WORK/c.out" "$WORK/d.out") messages lost"
kill -TERM "$d"
wait "$d" || true

# --- slow, not stuck ---------------------------------------------------------
# e's handler takes 0.8 s per message, within --max-poll-interval 2000: e
# polls between them, so its heartbeat is never overdue however long it
# runs (here longer than its deadline of 7 s), and f leaves it be.
slow='sleep 0.8; echo "$MQ_PARTITION $MQ_OFFSET" >>"$1"'
"$C" -t t -G y --member-id e --max-poll-interval 2000 --max-attempts 1 --reset latest -v \
  --exec sh -c "$slow" sh "$WORK/e.out" 2>"$WORK/e.err" &
e=$!
PIDS+=($e)
wait_for "e joins" "$WORK/e.err" grep -q 'this member (e) is assigned' "$WORK/e.err"
"$C" -t t -G y --member-id f --max-poll-interval 1000 --max-attempts 1 --reset latest -v \
  --exec sh -c "$handler" sh "$WORK/f.out" 2>"$WORK/f.err" &
f=$!
PIDS+=($f)
wait_for "e and f share the partitions" "$WORK/f.err" \
  grep -qE 'members e,f; this member \(f\) is assigned partitions [01]$' "$WORK/f.err"
mine=$(sed -nE 's/.*members e,f; this member \(f\) is assigned partitions ([01])$/\1/p' "$WORK/f.err" | tail -1)
theirs=$((1 - mine))
wait_for "e's partition is started" "$WORK/e.err" grep -q "^partition $theirs: " "$WORK/e.err"
produce 121 130
wait_for "e handles its 10 slow messages" "$WORK/e.err" grep -qs "^$theirs 129$" "$WORK/e.out"
kill -0 "$e" || fail "e is gone (stderr: $(cat "$WORK/e.err"))"
grep -q "killed it" "$WORK/f.err" && fail "f killed e, which was slow, not stuck: $(cat "$WORK/f.err")"
[[ $(wc -l <"$WORK/e.out") == 10 ]] || fail "e handled $(wc -l <"$WORK/e.out") messages, want 10"
kill -TERM "$e" "$f"
wait "$e" || true
wait "$f" || true
echo "ok"
