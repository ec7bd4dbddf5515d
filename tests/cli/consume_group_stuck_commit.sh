#!/usr/bin/env bash
# A member stopped (SIGSTOP) while it holds the group's commit.lock, inside
# its commit (format-spec/group.md R32), does not stop the other members:
# a member whose commit waits for the lock keeps its heartbeat and looks
# for a stuck holder while it waits, as at its polls (R69), kills it, then
# commits, takes its partition and delivers everything. A member waiting
# for the lock ends on SIGTERM.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
"$P" -q -t t --create --partitions 2 </dev/null
# A message to each partition every few ms, until stopped: the members
# keep committing.
producing() {
  while :; do
    for p in 0 1; do echo m | "$P" -q -t t -p "$p"; done
    sleep 0.01
  done
}

# delivered FILE: FILE has the last message of both partitions.
delivered() {
  local p end
  for p in 0 1; do
    end=$("$C" -t t -p "$p" -o -1 -e -f '%o\n')
    grep -q "^$p $end$" "$1" || return 1
  done
}
# wait_for WHAT ERR CMD...: until CMD succeeds (up to 60 s: a loaded
# machine); else fails, showing the file ERR.
wait_for() {
  local what=$1 err=$2
  shift 2
  for _ in $(seq 1 1200); do
    "$@" && return 0
    sleep 0.05
  done
  fail "$what (stderr: $(cat "$err"))"
}
all() { "$C" -t t -e -f '%p %o\n' | sort; }
lost() { comm -23 <(all) <(sort -u "$@") | wc -l; }
# stop_in_commit PID GROUP: stops PID (SIGSTOP) at a moment it holds the
# group's commit.lock; tries again (SIGCONT, a pause) until it does.
stop_in_commit() {
  local lock=$MQ_DIR/groups/$2/commit.lock i
  for i in $(seq 1 400); do
    kill -STOP "$1"
    # Stopped (state T) before /proc/locks is read.
    for _ in $(seq 1 100); do
      [[ $(awk '{print $3}' "/proc/$1/stat") == T ]] && break
      sleep 0.01
    done
    lock_held_by "$lock" "$1" && { echo "stopped $1 inside a commit at try $i"; return 0; }
    kill -CONT "$1"
    sleep "0.0$((RANDOM % 5 + 1))"
  done
  fail "$1 was never stopped holding $lock"
}
# Every message is committed as it is printed: a member spends most of
# its time in commits.
member() {  # member GROUP ID MAX_POLL_INTERVAL
  "$C" -t t -G "$1" --member-id "$2" --max-poll-interval "$3" --commit-every 1 -v \
    -f '%p %o\n' >"$WORK/$2.out" 2>"$WORK/$2.err" &
  PIDS+=($!)
}

# --- the waiting member fences the holder -----------------------------------
producing &
producer=$!
PIDS+=($producer)
member g a 1000
a=${PIDS[-1]}
member g b 1000
b=${PIDS[-1]}
wait_for "a and b share the partitions" "$WORK/b.err" \
  grep -qE 'members a,b; this member \(b\) is assigned partitions [01]$' "$WORK/b.err"
wait_for "a prints" "$WORK/a.err" test -s "$WORK/a.out"
stop_in_commit "$a" g
stopped_at=$EPOCHREALTIME
wait_for "b fences a, stopped inside its commit" "$WORK/b.err" \
  grep -q "group g: member a (pid $a) did not poll for [0-9]* ms past its deadline of 1000 ms (stopped or hung): killed it" \
  "$WORK/b.err"
kill "$producer"
wait "$producer" || true
wait_for "b delivers both partitions" "$WORK/b.err" delivered "$WORK/b.out"
took=$(awk -v a="$stopped_at" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "b delivered everything $took s after a was stopped holding commit.lock (--max-poll-interval 1000)"
rc=0
wait "$a" || rc=$?
[[ $rc == 137 ]] || fail "a: exit $rc, want 137 (killed by SIGKILL) (stderr: $(cat "$WORK/a.err"))"
(($(lost "$WORK/a.out" "$WORK/b.out") == 0)) || fail "$(lost "$WORK/a.out" "$WORK/b.out") messages lost"
# b committed the end of both partitions.
run "$C" --describe -G g
expect_rc 0 "--describe"
[[ $(grep -cE '^g +t +[01] +([0-9]+) +\1 +0 ' "$WORK/out") == 2 ]] || fail "describe: $(cat "$WORK/out")"
kill -TERM "$b"
wait "$b" || true

# --- SIGTERM ends a member waiting for the lock -------------------------------
# d's deadline is a minute: it waits for c (stopped holding the lock) and
# fences no one before the SIGTERM.
producing &
producer=$!
PIDS+=($producer)
member h c 60000
c=${PIDS[-1]}
member h d 60000
d=${PIDS[-1]}
wait_for "c and d share the partitions" "$WORK/d.err" \
  grep -qE 'members c,d; this member \(d\) is assigned partitions [01]$' "$WORK/d.err"
wait_for "c prints" "$WORK/c.err" test -s "$WORK/c.out"
stop_in_commit "$c" h
sleep 0.5
kill -TERM "$d"
ended=no
for _ in $(seq 1 200); do
  kill -0 "$d" 2>/dev/null || { ended=yes; break; }
  sleep 0.05
done
[[ $ended == yes ]] || fail "d did not end on SIGTERM while waiting for commit.lock (stderr: $(cat "$WORK/d.err"))"
rc=0
wait "$d" || rc=$?
[[ $rc == 143 ]] || fail "d: exit $rc, want 143 (SIGTERM) (stderr: $(cat "$WORK/d.err"))"
kill -KILL "$c"
kill "$producer"
echo ok
