#!/usr/bin/env bash
# mq-consume -G GROUP --exec --parallel N: handlers of different partitions
# run at once (more than one, at most N), never two of one partition, each
# partition in offset order, every message handled and committed; without
# --parallel, one at a time. Members with --parallel moving partitions
# (a member added, one SIGKILLed): a revoked partition's running handler
# finishes before the partition moves, never two live handlers of one
# partition, every message handled.
# At-least-once under random SIGKILLs with --parallel (seeded:
# MQ_TEST_SEED repeats a run, MQ_GROUP_KILLS sets the number of kills).
# A failed dead-letter append stops the member without committing past it.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
SEED=${MQ_TEST_SEED:-$RANDOM}
KILLS=${MQ_GROUP_KILLS:-10}
echo "consume_group_parallel: seed $SEED, $KILLS kills (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED

# committed GROUP TOPIC PARTITION: the group's committed offset (- if none).
committed() {
  "$C" --describe -G "$1" -t "$2" -J |
    jq -r --argjson p "$3" 'select(.type == "partition" and .partition == $p) | .current_offset // "-"'
}

# 6 partitions of 5 messages (keys k<p>-<i>), one record per batch.
produce -t par --create --partitions 6 </dev/null
for p in 0 1 2 3 4 5; do
  seq 0 4 | awk -v p="$p" '{print "k" p "-" $1 "\tv" $1}' | produce -t par -p "$p" -K '\t' --batch-bytes 64
done

# The handler: marks its partition running (set -C: a second live handler
# of the partition finds the mark and says so in collisions), marks itself
# in $RUN/now/, logs "partition offset key handlers-running-now", and works
# a while. The first handler of each partition waits (up to 20 s) until
# another handler runs beside it: with --parallel > 1 one soon does;
# serially none ever does (WAIT=0 turns the wait off).
# shellcheck disable=SC2016
HANDLER='m="$RUN/running.$MQ_PARTITION"; me="$RUN/now/$$"
  if ! (set -C; : >"$m") 2>/dev/null; then
    echo "two live handlers of partition $MQ_PARTITION (offset $MQ_OFFSET)" >>"$RUN/collisions"; exit 1
  fi
  trap '"'"'rm -f "$m" "$me"; exit 143'"'"' TERM
  : >"$me"
  n=$(ls "$RUN/now" | wc -l)
  if [ "$MQ_OFFSET" = 0 ] && [ "$WAIT" = 1 ]; then
    i=0
    while [ "$(ls "$RUN/now" | wc -l)" -lt 2 ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
    n2=$(ls "$RUN/now" | wc -l); [ "$n2" -gt "$n" ] && n=$n2
  fi
  echo "$MQ_PARTITION $MQ_OFFSET $MQ_KEY $n" >>"$RUN/log"
  sleep 0.05
  rm -f "$me" "$m"'
export RUN
run_case() {  # run_case NAME WAIT FLAGS...: one member handles topic par to the end
  local name=$1
  export WAIT=$2
  shift 2
  RUN="$WORK/$name"
  mkdir -p "$RUN/now"
  run "$C" -t par -G "$name" -e "$@" --exec sh -c "$HANDLER"
  expect_rc 0 "$name"
  [[ ! -e $RUN/collisions ]] || fail "$name: $(cat "$RUN/collisions")"
  [[ $(wc -l <"$RUN/log") == 30 ]] || fail "$name: $(wc -l <"$RUN/log") handler runs, want 30"
  [[ $(awk '{print $1 " " $2}' "$RUN/log" | sort -u | wc -l) == 30 ]] ||
    fail "$name: not every message handled: $(cat "$RUN/log")"
  # Per partition, offsets in order, and so the keys.
  awk '{ if (($1 in last) && $2 != last[$1] + 1) { print "partition " $1 ": offset " $2 " after " last[$1]; bad = 1 }
         if (!($1 in last) && $2 != 0) { print "partition " $1 " began at " $2; bad = 1 }
         if ($3 != "k" $1 "-" $2) { print "partition " $1 " offset " $2 ": key " $3; bad = 1 }
         last[$1] = $2 } END { exit bad }' "$RUN/log" >"$WORK/order" ||
    fail "$name: out of order: $(cat "$WORK/order")"
  for p in 0 1 2 3 4 5; do
    [[ $(committed "$name" par "$p") == 5 ]] || fail "$name: partition $p committed $(committed "$name" par "$p")"
  done
  MAX=$(awk '$4 > m {m = $4} END {print m + 0}' "$RUN/log")
}

# --parallel 4: more than one at once, never more than 4.
run_case par4 1 --parallel 4
((MAX >= 2 && MAX <= 4)) || fail "--parallel 4: at most $MAX handlers ran at once, want 2 to 4"
echo "--parallel 4: up to $MAX handlers at once"
# Default: one at a time (and with --parallel 1).
run_case serial 0
((MAX == 1)) || fail "without --parallel: $MAX handlers ran at once"
run_case par1 0 --parallel 1
((MAX == 1)) || fail "--parallel 1: $MAX handlers ran at once"

# --- a poison message with --parallel: exit 123, the others' work committed -----------
produce -t pp --create --partitions 3 </dev/null
for p in 0 1 2; do seq 1 4 | produce -t pp -p "$p"; done
# shellcheck disable=SC2016
POISON='v=$(cat); if [ "$MQ_PARTITION" = 1 ] && [ "$v" = 2 ]; then exit 1; fi; echo "$MQ_PARTITION $v" >>"$WORK/pp.log"'
export WORK
run "$C" -t pp -G ppg -e --parallel 3 --max-attempts 2 --retry-backoff 1 --exec sh -c "$POISON"
expect_rc 123 "--parallel: poison without --dlq"
grep -q "group ppg: topic pp partition 1 offset 1: handler failed 2 attempts (exit status 1)" "$WORK/err" ||
  fail "--parallel poison: $(cat "$WORK/err")"
[[ $(committed ppg pp 1) == 1 ]] || fail "--parallel poison: partition 1 committed $(committed ppg pp 1), not 1"
for p in 0 2; do  # committed up to what their handlers finished, never past it
  c=$(committed ppg pp "$p")
  h=$(awk -v p="$p" '$1 == p' "$WORK/pp.log" | wc -l)
  [[ $c == - ]] || ((c <= h)) || fail "--parallel poison: partition $p committed $c, handled $h"
done
run "$C" -t pp -G ppg -e --parallel 3 --max-attempts 1 --dlq pp.dlq --exec sh -c "$POISON"
expect_rc 0 "--parallel: poison with --dlq"
for p in 0 1 2; do [[ $(committed ppg pp "$p") == 4 ]] || fail "--parallel --dlq: partition $p committed $(committed ppg pp "$p")"; done
[[ $("$C" --describe -G ppg -J | jq -r 'select(.type == "summary") | .dead_letters') == 1 ]] ||
  fail "--parallel --dlq: dead letters counted $("$C" --describe -G ppg -J | jq -c 'select(.type == "summary")')"
for p in 0 1 2; do
  want=$(if [[ $p == 1 ]]; then echo "1 3 4"; else echo "1 2 3 4"; fi)
  got=$(awk -v p="$p" '$1 == p {print $2}' "$WORK/pp.log" | sort -un | tr '\n' ' ')
  [[ $got == "$want " ]] || fail "--parallel poison: partition $p handled $got, want $want"
done

# --- members with --parallel: a member added and one SIGKILLed while handlers run -----
produce -t w --create --partitions 6 </dev/null
seq 1 120 | awk '{print "k"$1"\tv"$1}' | produce -t w -K '\t' --batch-bytes 64
export RUNW="$WORK/w"
mkdir "$RUNW"
# Each handler's work runs in a child it waits for. The child marks its
# partition running (set -C: a second live handler of the partition finds
# the mark and says so in collisions) and clears the mark before it ends:
# on SIGTERM (its member stopped: the handler passes the signal on and
# waits for it, so the mark is gone before the handler ends and the
# partition is released), or when done. The mark holds the child's token
# and is written by a builtin (no subshell), so the SIGTERM trap, which
# runs between commands, clears it exactly when this child made it, even
# one made just before the signal. When its member is SIGKILLed the
# child lives on (only the handler gets PR_SET_PDEATHSIG), holding the
# partition's ownership lock, and works two seconds longer. A handler ended
# by its member's SIGTERM adds "P revoked" to its member's log: its message is not
# committed (it may have been logged already), so the partition's next
# owner, possibly the same member later, handles it again. The member's
# -v lines go to the same log ("partition P: released" once every handler
# of P is gone): a handler that ended by itself just as its member was
# stopped adds no line, and its message counts as handled.
# shellcheck disable=SC2016
WHANDLER='( m="$RUNW/running.$MQ_PARTITION" tok="$MEMBER $MQ_OFFSET $$" have=
  trap '"'"'{ read -r have <"$m"; } 2>/dev/null; [ "$have" != "$tok" ] || rm -f "$m"; echo "$MQ_PARTITION $MQ_OFFSET" >>"$RUNW/stopped.$MEMBER"; exit 143'"'"' TERM
  set -C
  if ! { echo "$tok" >"$m"; } 2>/dev/null; then
    echo "two live handlers of partition $MQ_PARTITION (member $MEMBER, offset $MQ_OFFSET)" >>"$RUNW/collisions"
    exit 1
  fi
  sleep 0.2 & wait $!
  kill -0 "$PPID" 2>/dev/null || sleep 2
  echo "$MQ_PARTITION $MQ_OFFSET $MQ_KEY" >>"$RUNW/log.$MEMBER"
  rm -f "$m" ) & c=$!
  trap '"'"'kill -TERM $c 2>/dev/null; wait $c; echo "$MQ_PARTITION revoked" >>"$RUNW/log.$MEMBER"; exit 143'"'"' TERM
  wait $c'
start_member() {
  MEMBER=$1 "$C" -t w -G wg --member-id "$1" -v --parallel 3 --retry-backoff 1 \
    --exec sh -c "$WHANDLER" 2>>"$RUNW/log.$1" &
  PIDS+=($!)
  eval "pid_$1=$!"
}
# A handler's line in a member's log ("PARTITION OFFSET KEY"), among the
# member's -v lines and "P revoked".
HANDLED_LINE='^[0-9]+ [0-9]+ k[0-9]+$'
# handled FILE...: "PARTITION OFFSET" of each message its handler logged.
handled() { cat "$@" 2>/dev/null | awk -v re="$HANDLED_LINE" '$0 ~ re {print $1 " " $2}' || true; }
start_member a
for _ in $(seq 1 600); do [[ -n $(handled "$RUNW/log.a") ]] && break; sleep 0.05; done
[[ -n $(handled "$RUNW/log.a") ]] || fail "member a handled nothing"
start_member b
for _ in $(seq 1 600); do [[ -n $(handled "$RUNW/log.b") ]] && break; sleep 0.05; done
[[ -n $(handled "$RUNW/log.b") ]] || fail "member b handled nothing"
kill -KILL "$pid_b"
wait "$pid_b" 2>/dev/null || true
start_member c
for _ in $(seq 1 1200); do
  (($(handled "$RUNW"/log.* | sort -u | wc -l) >= 120)) && break
  [[ -e $RUNW/collisions ]] && break
  sleep 0.1
done
kill "$pid_a" "$pid_c" 2>/dev/null || true
wait "$pid_a" "$pid_c" 2>/dev/null || true
[[ ! -e $RUNW/collisions ]] || fail "$(cat "$RUNW/collisions")"
n=$(handled "$RUNW"/log.* | sort -u | wc -l)
((n == 120)) || fail "members with --parallel: $n of 120 messages handled"
for m in a b c; do
  [[ -n $(handled "$RUNW/log.$m") ]] || fail "member $m handled nothing"
  # Offsets increase while the member owns the partition; once it released
  # it, it may get it back at the committed offset.
  awk -v re="$HANDLED_LINE" '/^partition [0-9]+: released$/ { sub(":", "", $2); delete last[$2]; next }
       $0 !~ re { next }
       { if (($1 in last) && $2 <= last[$1]) { print "partition " $1 ": offset " $2 " after " last[$1]; bad = 1 }
         last[$1] = $2 } END { exit bad }' "$RUNW/log.$m" >"$WORK/order" ||
    fail "member $m handled out of order: $(cat "$WORK/order")"
done
stopped=$( (cat "$RUNW"/stopped.* 2>/dev/null || true) | wc -l)
echo "members with --parallel 3: $(for m in a b c; do printf '%s=%s ' $m "$(handled "$RUNW/log.$m" | wc -l)"; done)handled; $stopped handler runs stopped by SIGTERM; $(($(handled "$RUNW"/log.* | wc -l) - 120)) twice"

# --- at-least-once with --parallel under random SIGKILLs --------------------------------
produce -t alo --create --partitions 4 </dev/null
seq 1 400 | awk '{print "k"$1"\tv"$1}' | produce -t alo -K '\t'
export LOG="$WORK/alo.log"
: >"$LOG"
# shellcheck disable=SC2016
LOGIDS='i=$MQ_OFFSET; while [ "$i" -le "${MQ_LAST_OFFSET:-$MQ_OFFSET}" ]; do
  echo "$MQ_TOPIC/$MQ_PARTITION/$i"; i=$((i + 1)); done >>"$LOG"'
for i in $(seq 1 "$KILLS"); do
  batch=()
  ((i % 2 == 0)) && batch=(--batch 3)
  "$C" -t alo -G alo -e -q --commit-every 10 --parallel 3 "${batch[@]}" --exec sh -c "$LOGIDS" \
    2>>"$WORK/alo.err" &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
run "$C" -t alo -G alo -e --commit-every 10 --parallel 3 --exec sh -c "$LOGIDS"
expect_rc 0 "at-least-once --parallel: the last run"
"$C" -t alo -e -f 'alo/%p/%o\n' | sort >"$WORK/alo.want"
missing=$(comm -23 "$WORK/alo.want" <(sort -u "$LOG") | wc -l)
dups=$(($(wc -l <"$LOG") - $(sort -u "$LOG" | wc -l)))
echo "at-least-once with --parallel 3: $KILLS kills, $missing skipped, $dups handled twice"
((missing == 0)) || fail "at-least-once --parallel skipped $missing messages (seed $SEED)"
sum=0
for p in 0 1 2 3; do sum=$((sum + $(committed alo alo "$p"))); done
((sum == 400)) || fail "at-least-once --parallel: committed $sum of 400"

# --- a dead letter whose append fails stops the member, serially and with
# --parallel alike: nothing is committed past its message ---------------------------
produce -t df --create </dev/null
seq 1 6 | produce -t df
produce -t df.dlq --create </dev/null
rm -rf "$MQ_DIR/df.dlq-0" && : >"$MQ_DIR/df.dlq-0"  # its partition cannot be opened
for n in 1 2; do
  run "$C" -t df -G "df$n" -e --parallel "$n" --max-attempts 1 --dlq df.dlq --exec sh -c 'v=$(cat); [ "$v" != 3 ]'
  ((rc != 0)) || fail "--parallel $n: a dead letter that could not be appended: exit 0"
  grep -q "df.dlq-0" "$WORK/err" || fail "--parallel $n: the failed append is not said: $(cat "$WORK/err")"
  [[ $(committed "df$n" df 0) == 2 ]] ||
    fail "--parallel $n: committed $(committed "df$n" df 0) past the message whose dead letter was not appended, want 2"
done

# --- usage ---------------------------------------------------------------------------
run "$C" -t par --parallel 2 --exec true
expect_rc 64 "--parallel without -G"
grep -q -- "--parallel needs a consumer group" "$WORK/err" || fail "$(cat "$WORK/err")"
run "$C" -t par -G x --parallel 2
expect_rc 64 "--parallel without --exec"
grep -q -- "--parallel needs -G GROUP and --exec" "$WORK/err" || fail "$(cat "$WORK/err")"
for n in 0 257 -1 x; do
  run "$C" -t par -G x --parallel "$n" --exec true
  expect_rc 64 "--parallel $n"
done
echo "consume_group_parallel: ok"
