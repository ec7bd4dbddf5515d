#!/usr/bin/env bash
# Partitions moving between live members (joins, SIGTERM leaves; no crash)
# hand over exactly what was handed out, counted message by message:
# --at-most-once loses nothing and repeats nothing when printing (the
# messages it committed ahead and did not print are handed back) and
# with --exec (a member stopped by SIGTERM lets its running handlers
# finish, and hands back what did not start); the default mode
# (printing, --exec) and --parallel lose nothing and repeat nothing (a
# handler that finished is committed before its partition moves, and one
# that exits 0 after SIGTERM counts as handled). Serially, a SIGKILLed
# member's partition is handled by the survivor before the rest of the
# batch it was handling. Seeded: MQ_TEST_SEED repeats a run's timings.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
SEED=${MQ_TEST_SEED:-$RANDOM}
echo "consume_group_handover: seed $SEED (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED

# pause PREFIX: waits until the files $RUN/PREFIX.* hold 5 more lines than
# they did (members are at work, however loaded the machine; up to 10 s:
# at the end there may be nothing left), then 100-399 ms more, from the
# seed.
pause() {
  local before now
  before=$(cat "$RUN/$1".* 2>/dev/null | wc -l || true)
  for _ in $(seq 1 200); do
    now=$(cat "$RUN/$1".* 2>/dev/null | wc -l || true)
    ((now >= before + 5)) && break
    sleep 0.05
  done
  sleep "0.$((100 + RANDOM % 300))"
}

# tally NAME EXPECTED FILE...: counts the "PARTITION OFFSET" lines of the
# files against the EXPECTED list; sets lost and dups.
tally() {
  local name=$1 expected=$2
  shift 2
  cat "$@" 2>/dev/null | grep -E '^[0-9]+ [0-9]+$' | sort >"$WORK/$name.got" || true
  lost=$(comm -23 "$expected" <(sort -u "$WORK/$name.got") | wc -l)
  dups=$(($(wc -l <"$WORK/$name.got") - $(sort -u "$WORK/$name.got" | wc -l)))
  echo "$name: $(wc -l <"$WORK/$name.got") delivered, $lost lost, $dups twice"
}

# --- printing: joins and SIGTERM leaves ------------------------------------------------
# 6 partitions of 500 messages of 4,000 bytes, about 250 per record batch
# (at most once, a batch is committed before its first message is
# printed). Each member prints through a reader that takes about 500 lines
# a second, so that members are in the middle of a batch when partitions
# move (their 1 MB output buffer holds about one batch).
produce -t amo --create --partitions 6 </dev/null
VALUE=$(printf 'v%.0s' $(seq 1 4000))
for p in 0 1 2 3 4 5; do
  seq 0 499 | awk -v v="$VALUE" '{print v}' | produce -t amo -p "$p" --batch-bytes 1m
done
"$C" -t amo -e -f '%p %o\n' | sort >"$WORK/amo.all"
# shellcheck disable=SC2016
READER='
import sys, time
out = open(sys.argv[1], "w")
for n, line in enumerate(sys.stdin.buffer):
    f = line.split(b" ", 2)
    out.write(f[0].decode() + " " + f[1].decode() + "\n")
    if n % 5 == 4:
        out.flush()
        time.sleep(0.01)
out.close()'
start_printer() {  # start_printer NAME: a following member of group $GROUP, with $FLAGS
  mkfifo "$RUN/fifo.$1"
  "$PY" -c "$READER" "$RUN/out.$1" <"$RUN/fifo.$1" &
  READERS+=($!)
  PIDS+=($!)
  "$C" -t amo -G "$GROUP" --member-id "$1" "${FLAGS[@]}" -f '%p %o %s\n' -v \
    >"$RUN/fifo.$1" 2>"$RUN/err.$1" &
  PIDS+=($!)
  eval "pid_$1=$!"
}
leave() {  # leave NAME: SIGTERM, and the member's exit status is 143 or 0
  local pid rc=0
  pid=$(eval "echo \$pid_$1")
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  [[ $rc == 143 || $rc == 0 ]] || fail "$1 left with exit $rc: $(cat "$RUN/err.$1" 2>/dev/null)"
}
# print_case NAME FLAGS...: members of group NAME join and leave, then one
# last member prints the rest to the end; sets lost and dups.
print_case() {
  local name=$1 moved
  shift
  GROUP=$name
  FLAGS=("$@")
  RUN="$WORK/$name"
  READERS=()
  mkdir "$RUN"
  start_printer a
  pause out
  start_printer b
  pause out
  start_printer c
  pause out
  leave a
  start_printer d
  pause out
  leave b
  pause out
  leave c
  leave d
  wait "${READERS[@]}"
  "$C" -t amo -G "$name" "$@" -e -f '%p %o\n' >"$RUN/out.last" 2>"$RUN/err.last" ||
    fail "$name: the last member: $(cat "$RUN/err.last")"
  tally "$name" "$WORK/amo.all" "$RUN"/out.*
  moved=$(cat "$RUN"/err.* | grep -c ': released$' || true)
  echo "$name: $moved partitions released by live members"
  ((moved > 0)) || fail "$name: no partition moved between live members"
  ((dups == 0)) || fail "$name: $dups messages printed twice without a crash (seed $SEED)"
  ((lost == 0)) || fail "$name: $lost messages lost without a crash (seed $SEED)"
}
print_case print-amo --at-most-once
print_case print
READERS=()

# --- --exec: joins and SIGTERM leaves, serially and with --parallel ---------------------
# 4 partitions of 40 messages, each partition one record batch. The
# handler ignores SIGTERM (a handler that finishes its work when asked to
# stop: its message counts as handled), logs its message and works a while
# after that, so that partitions move while handlers that logged still run.
produce -t ex --create --partitions 4 </dev/null
for p in 0 1 2 3; do seq 0 39 | produce -t ex -p "$p" --batch-bytes 1m; done
"$C" -t ex -e -f '%p %o\n' | sort >"$WORK/ex.all"
# shellcheck disable=SC2016
HANDLER='trap "" TERM; echo "$MQ_PARTITION $MQ_OFFSET" >>"$RUN/handled.$MEMBER"; sleep 0.02'
export RUN
start_handler() {  # start_handler NAME: a following member of group $GROUP, with $FLAGS
  MEMBER=$1 "$C" -t ex -G "$GROUP" --member-id "$1" -v "${FLAGS[@]}" --exec sh -c "$HANDLER" \
    2>"$RUN/err.$1" &
  PIDS+=($!)
  eval "pid_$1=$!"
}
# exec_case NAME FLAGS...: members of group NAME join and leave as the
# printers do, then one last member handles the rest to the end; fails on
# a message handled twice, sets lost.
exec_case() {
  local name=$1
  shift
  GROUP=$name
  FLAGS=("$@")
  RUN="$WORK/$name"
  mkdir "$RUN"
  start_handler a
  pause handled
  start_handler b
  pause handled
  start_handler c
  pause handled
  leave a
  start_handler d
  pause handled
  leave b
  pause handled
  leave c
  leave d
  MEMBER=last "$C" -t ex -G "$name" -e "$@" --exec sh -c "$HANDLER" 2>"$RUN/err.last" ||
    fail "$name: the last member: $(cat "$RUN/err.last")"
  tally "$name" "$WORK/ex.all" "$RUN"/handled.*
  moved=$(cat "$RUN"/err.* | grep -c ': released$' || true)
  echo "$name: $moved partitions released by live members"
  ((moved > 0)) || fail "$name: no partition moved between live members"
  ((dups == 0)) || fail "$name: $dups messages handled twice without a crash (seed $SEED)"
}
# At most once: what was committed ahead and not handed to a handler is
# handed back, and a leaving member's running handlers finish (they get
# no SIGTERM): nothing is lost.
exec_case exec
((lost == 0)) || fail "exec: lost $lost messages at least once (seed $SEED)"
exec_case exec-amo --at-most-once
((lost == 0)) || fail "exec-amo: --at-most-once lost $lost messages in 4 leaves (seed $SEED)"
# --parallel: a partition's running handler finishes, and is committed,
# before the partition moves; at least once, nothing is lost.
exec_case exec-par --parallel 2
((lost == 0)) || fail "exec-par: lost $lost messages at least once (seed $SEED)"
exec_case exec-par-amo --parallel 2 --at-most-once
((lost == 0)) || fail "exec-par-amo: --at-most-once lost $lost messages in 4 leaves (seed $SEED)"

# --- serially, a dead member's partition is handled next --------------------------------
# Two partitions of 200 messages, one record batch each; members a and b
# start together and share them; b is SIGKILLed once it handled a few,
# while a is in the middle of its partition's batch. a takes b's partition and runs its handlers next: the rest of its
# own batch comes after them, not before (no timing is asserted: the order
# of a's handler runs is).
produce -t tk --create --partitions 2 </dev/null
for p in 0 1; do seq 0 199 | produce -t tk -p "$p" --batch-bytes 1m; done
export RUN="$WORK/takeover"
mkdir "$RUN"
# shellcheck disable=SC2016
TK_HANDLER='echo "$MQ_PARTITION $MQ_OFFSET" >>"$RUN/handled.$MEMBER"; sleep 0.01'
start_tk() {
  MEMBER=$1 "$C" -t tk -G tk --member-id "$1" -v --exec sh -c "$TK_HANDLER" 2>"$RUN/err.$1" &
  PIDS+=($!)
  eval "pid_$1=$!"
}
start_tk a
start_tk b
# Once each member is at work on its own partition (one of them may have
# started alone and handled both): the last 3 runs of a are of one
# partition, the last 3 of b of the other, which is the one a takes.
# last3 FILE: the partition of FILE's last 3 lines if they share one.
last3() { { tail -3 "$1" 2>/dev/null || true; } | awk '{p[NR] = $1} END {if (NR == 3 && p[1] == p[2] && p[2] == p[3]) print p[1]}'; }
taken=""
for _ in $(seq 1 1200); do
  own_a=$(last3 "$RUN/handled.a") own_b=$(last3 "$RUN/handled.b")
  if [[ -n $own_a && -n $own_b && $own_a != "$own_b" ]]; then
    taken=$own_b
    break
  fi
  sleep 0.05
done
[[ -n $taken ]] ||
  fail "takeover: members a and b not both at work: $(cat "$RUN/err.a" "$RUN/err.b")"
kill -KILL "$pid_b"
wait "$pid_b" 2>/dev/null || true
echo KILL >>"$RUN/handled.a"
for _ in $(seq 1 1200); do
  (($(sort -u "$RUN"/handled.* | grep -c '^[0-9]') >= 400)) && break
  sleep 0.05
done
kill -TERM "$pid_a"
wait "$pid_a" 2>/dev/null || true
tally takeover <(seq 0 199 | awk '{print "0 " $1; print "1 " $1}' | sort) "$RUN"/handled.*
((lost == 0)) || fail "takeover: lost $lost messages (seed $SEED)"
# After the kill: a's first run of the taken partition, then a run of its
# own partition's batch that was under way.
sed '1,/^KILL$/d' "$RUN/handled.a" | awk -v t="$taken" '
  $1 == t && !seen { seen = NR }
  $1 != t && seen { after = 1 }
  END { exit !(seen && after) }' ||
  fail "takeover: member a finished its own batch before running the taken partition $taken: $(sed '1,/^KILL$/d' "$RUN/handled.a" | awk -v t="$taken" '$1 == t {print NR ": " $0; exit}') (seed $SEED)"
echo "takeover: partition $taken handled by a before the rest of its own batch"
