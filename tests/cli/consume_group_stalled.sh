#!/usr/bin/env bash
# A printing member whose reader stops reading gives up within
# --max-poll-interval (exit 75), as a member with a stuck handler does: its
# partitions go to a member that joined meanwhile, and nothing is lost (what
# it had not written is not committed and is printed by the next owner;
# what it wrote is read by its reader once it reads again).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
VALUE=$(printf 'x%.0s' $(seq 1 200))
"$P" -q -t t --create --partitions 2 </dev/null
for p in 0 1; do
  seq 1 2000 | awk -v v="$VALUE" '{print v}' | "$P" -q -t t -p "$p"
done
"$C" -t t -e -f '%p %o\n' | sort >"$WORK/all"

# wait_for WHAT ERR CMD...: until CMD succeeds (up to 30 s: a loaded
# machine); else fails, showing the file ERR.
wait_for() {
  local what=$1 err=$2
  shift 2
  for _ in $(seq 1 600); do
    "$@" && return 0
    sleep 0.05
  done
  fail "$what (stderr: $(cat "$err"))"
}

# a prints into a FIFO whose reader reads nothing until $WORK/go exists.
mkfifo "$WORK/fifo"
sh -c 'while [ ! -e "$1" ]; do sleep 0.05; done; exec cat' sh "$WORK/go" <"$WORK/fifo" >"$WORK/a.out" &
reader=$!
PIDS+=($reader)
"$C" -t t -G g --member-id a --max-poll-interval 1000 -v -f '%p %o %s\n' >"$WORK/fifo" 2>"$WORK/a.err" &
a=$!
PIDS+=($a)
wait_for "a takes both partitions" "$WORK/a.err" \
  grep -q 'this member (a) is assigned partitions 0,1$' "$WORK/a.err"

# b joins: one partition is assigned to it, which a cannot let go while
# its output is blocked; once a gives up, b takes both.
"$C" -t t -G g --member-id b -v -f '%p %o %s\n' >"$WORK/b.out" 2>"$WORK/b.err" &
b=$!
PIDS+=($b)
for _ in $(seq 1 600); do
  kill -0 "$a" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$a" 2>/dev/null && fail "a still runs 30 s after its reader stopped (stderr: $(cat "$WORK/a.err"))"
rc=0
wait "$a" || rc=$?
[[ $rc == 75 ]] || fail "a: exit $rc, want 75 (stderr: $(cat "$WORK/a.err"))"
grep -q "mq-consume: group g: standard output took nothing for 1000 ms (--max-poll-interval 1000): its reader stopped reading; giving up this member's partitions" \
  "$WORK/a.err" || fail "a's message: $(cat "$WORK/a.err")"
touch "$WORK/go"
wait "$reader"

# Every message reaches a reader whole: a's (what it wrote before it gave
# up; the last one may be cut) or b's.
complete() { grep -hE "^[01] [0-9]+ $VALUE\$" "$@" | cut -d' ' -f1,2 | sort -u; }
lost() { comm -23 "$WORK/all" <(complete "$WORK/a.out" "$WORK/b.out") | wc -l; }
for _ in $(seq 1 600); do
  (($(lost) == 0)) && break
  sleep 0.05
done
kill -TERM "$b"
wait "$b" || true
echo "a wrote $(complete "$WORK/a.out" | wc -l) messages, b $(complete "$WORK/b.out" | wc -l); $(lost) lost"
(($(lost) == 0)) || fail "$(lost) messages lost (b: $(cat "$WORK/b.err"))"
for p in 0 1; do
  grep -q "^$p " "$WORK/b.out" || fail "b printed nothing of partition $p: a kept it (b: $(cat "$WORK/b.err"))"
done
grep -q 'this member (b) is assigned partitions 0,1$' "$WORK/b.err" || fail "b: $(cat "$WORK/b.err")"

# --- at most once: the write that stalled partway was committed ahead (R67) --
# a2 gives up as a did; what its reader gets of the stalled write is never
# printed again by b2 (lost as at a crash, not repeated).
mkfifo "$WORK/fifo2"
sh -c 'while [ ! -e "$1" ]; do sleep 0.05; done; exec cat' sh "$WORK/go2" <"$WORK/fifo2" >"$WORK/a2.out" &
reader=$!
PIDS+=($reader)
"$C" -t t -G g2 --member-id a --at-most-once --max-poll-interval 1000 -v -f '%p %o %s\n' \
  >"$WORK/fifo2" 2>"$WORK/a2.err" &
a=$!
PIDS+=($a)
wait_for "a2 takes both partitions" "$WORK/a2.err" \
  grep -q 'this member (a) is assigned partitions 0,1$' "$WORK/a2.err"
"$C" -t t -G g2 --member-id b --at-most-once -v -f '%p %o %s\n' >"$WORK/b2.out" 2>"$WORK/b2.err" &
b=$!
PIDS+=($b)
rc=0
wait "$a" || rc=$?
[[ $rc == 75 ]] || fail "a2: exit $rc, want 75 (stderr: $(cat "$WORK/a2.err"))"
touch "$WORK/go2"
wait "$reader"
wait_for "b2 takes both partitions" "$WORK/b2.err" \
  grep -q 'this member (b) is assigned partitions 0,1$' "$WORK/b2.err"
wait_for "b2 resumes both" "$WORK/b2.err" \
  test "$(grep -cE ': resuming at|: no committed offset' "$WORK/b2.err")" -ge 2
sleep 1  # b2 prints what it resumed at
kill -TERM "$b"
wait "$b" || true
twice=$(cat <(complete "$WORK/a2.out") <(complete "$WORK/b2.out") | sort | uniq -d | wc -l)
echo "at most once: a wrote $(complete "$WORK/a2.out" | wc -l) messages, b $(complete "$WORK/b2.out" | wc -l); $twice printed twice"
((twice == 0)) || fail "$twice messages printed by a2 and again by b2"
(($(complete "$WORK/a2.out" | wc -l) > 0)) || fail "a2 wrote nothing before it gave up"
echo "consume_group_stalled: ok"
