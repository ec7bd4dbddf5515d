#!/usr/bin/env bash
# mq-consume -G GROUP --exec: at-least-once handling under random SIGKILLs
# of the member (seeded: MQ_TEST_SEED repeats a run, MQ_GROUP_KILLS sets the
# number of kills), never two live handlers for one partition while members
# are killed and added (handlers leave a child running after a kill: it
# holds the partition's ownership lock), per-partition order in what each
# member's handlers saw, a poison message with and without --dlq (the dead
# letter counted in the commit; a crash between its append and the commit
# neither appends nor counts it twice; groups sharing a dead-letter topic
# each get their own), and a stuck handler past
# --max-poll-interval (exit 75).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
SEED=${MQ_TEST_SEED:-$RANDOM}
KILLS=${MQ_GROUP_KILLS:-20}
echo "consume_group_exec: seed $SEED, $KILLS kills (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED

# committed GROUP TOPIC PARTITION: the group's committed offset (- if none).
committed() {
  "$C" --describe -G "$1" -t "$2" -J |
    jq -r --argjson p "$3" 'select(.type == "partition" and .partition == $p) | .current_offset // "-"'
}
# dead_letters GROUP: the group's dead-letter count.
dead_letters() { "$C" --describe -G "$1" -J | jq -r 'select(.type == "summary") | .dead_letters'; }

# --- at-least-once: every message handled, none skipped, under random SIGKILLs ----------
produce -t alo --create --partitions 3 </dev/null
seq 1 600 | awk '{print "k"$1"\tv"$1}' | produce -t alo -K '\t'
export LOG="$WORK/alo.log"
: >"$LOG"
# Every other run hands messages over in batches of 4 (pending messages of
# a batch are not handled yet: their offsets must not be committed).
# shellcheck disable=SC2016
LOGIDS='i=$MQ_OFFSET; while [ "$i" -le "${MQ_LAST_OFFSET:-$MQ_OFFSET}" ]; do
  echo "$MQ_TOPIC/$MQ_PARTITION/$i"; i=$((i + 1)); done >>"$LOG"'
for i in $(seq 1 "$KILLS"); do
  batch=()
  ((i % 2 == 0)) && batch=(--batch 4)
  "$C" -t alo -G alo -e -q --commit-every 10 "${batch[@]}" --exec sh -c "$LOGIDS" \
    2>>"$WORK/alo.err" &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
run "$C" -t alo -G alo -e --commit-every 10 --exec sh -c "$LOGIDS"
expect_rc 0 "at-least-once: the last run"
"$C" -t alo -e -f 'alo/%p/%o\n' | sort >"$WORK/alo.want"
missing=$(comm -23 "$WORK/alo.want" <(sort -u "$LOG") | wc -l)
dups=$(($(wc -l <"$LOG") - $(sort -u "$LOG" | wc -l)))
echo "at-least-once with --exec: $KILLS kills, $missing skipped, $dups handled twice"
((missing == 0)) || fail "at-least-once --exec skipped $missing messages (seed $SEED)"
# A kill repeats at most what was handled since the last commit: the up to
# 10 messages handed out since (--commit-every 10), those pending in
# batches of 3 partitions then (3 x 3), and the run it interrupted (4).
((dups <= KILLS * 23)) || fail "at-least-once --exec: $dups handled twice, more than 23 per kill (seed $SEED)"
(($(committed alo alo 0) + $(committed alo alo 1) + $(committed alo alo 2) == 600)) ||
  fail "at-least-once --exec: committed $(committed alo alo 0) $(committed alo alo 1) $(committed alo alo 2)"

# --- never two live handlers for one partition; per-partition order ----------------------
# Each handler's work runs in a child it waits for; when its member is
# SIGKILLed, that child lives on (only the handler gets PR_SET_PDEATHSIG)
# and, finding the member ($PPID) gone, works two seconds longer. It creates running.P exclusively (set -C) and
# removes it at the end: a handler of P that finds it means two live
# handlers of P, and says so in collisions.
produce -t w --create --partitions 12 </dev/null
# One record per batch: a member turns to each of its partitions after
# every message.
seq 1 240 | awk '{print "k"$1"\tv"$1}' | produce -t w -K '\t' --batch-bytes 64
export RUN="$WORK/run"
mkdir "$RUN"
# shellcheck disable=SC2016
HANDLER='( m="$RUN/running.$MQ_PARTITION"
  if ! (set -C; : >"$m") 2>/dev/null; then
    echo "two live handlers of partition $MQ_PARTITION (member $MEMBER, offset $MQ_OFFSET)" >>"$RUN/collisions"
    exit 1
  fi
  echo "$MQ_PARTITION $MQ_OFFSET $MQ_KEY" >>"$RUN/log.$MEMBER"
  sleep 0.1
  kill -0 "$PPID" 2>/dev/null || sleep 2
  rm -f "$m" ) & wait $!'
start_member() {
  MEMBER=$1 "$C" -t w -G wg --member-id "$1" -q --retry-backoff 1 --exec sh -c "$HANDLER" \
    2>>"$RUN/err.$1" &
  PIDS+=($!)
  eval "pid_$1=$!"
}
for m in a b c; do start_member $m; done
# Kill b while one of its handlers runs, then add d.
for _ in $(seq 1 600); do [[ -s $RUN/log.b ]] && break; sleep 0.05; done
[[ -s $RUN/log.b ]] || fail "member b handled nothing"
sleep 0.5
n=$(wc -l <"$RUN/log.b")
for _ in $(seq 1 600); do (($(wc -l <"$RUN/log.b") > n)) && break; sleep 0.01; done
kill -KILL "$pid_b"
wait "$pid_b" 2>/dev/null || true
sleep 0.5
start_member d
for _ in $(seq 1 1200); do
  (($(cat "$RUN"/log.* | awk '{print $1 " " $2}' | sort -u | wc -l) >= 240)) && break
  [[ -e $RUN/collisions ]] && break
  sleep 0.1
done
sleep 0.3
kill "$pid_a" "$pid_c" "$pid_d" 2>/dev/null || true  # a member that stopped is checked below
wait "$pid_a" "$pid_c" "$pid_d" 2>/dev/null || true
[[ ! -e $RUN/collisions ]] || fail "$(cat "$RUN/collisions")"
# (|| true: a member that handled nothing has no log, said below, not a silent stop)
handled=$(cat "$RUN"/log.* | awk '{print $1 " " $2}' | sort -u | wc -l || true)
((handled == 240)) || fail "members and takeover: $handled of 240 messages handled"
for m in a b c d; do
  [[ -s $RUN/log.$m ]] || fail "member $m handled nothing"
  # Within one member, each partition's offsets only go up: keys keep their order.
  awk '{ if (($1 in last) && $2 <= last[$1]) { print "partition " $1 ": offset " $2 " after " last[$1]; bad = 1 }
         last[$1] = $2 } END { exit bad }' "$RUN/log.$m" >"$WORK/order" ||
    fail "member $m handled out of order: $(cat "$WORK/order")"
done
echo "members: $(for m in a b c d; do printf '%s=%s ' $m "$(wc -l <"$RUN/log.$m")"; done)handled; $(($(cat "$RUN"/log.* | wc -l) - 240)) twice"

# --- a poison message without --dlq: exit 123, its offset not committed -----------------
produce -t p --create </dev/null
seq 1 6 | produce -t p
# shellcheck disable=SC2016
POISON='v=$(cat); [ "$v" != 3 ] || { echo "cannot handle $v" >&2; exit 1; }; echo "$v" >>"$HANDLED"'
export HANDLED="$WORK/handled"
run "$C" -t p -G pg -e --max-attempts 2 --retry-backoff 1 --exec sh -c "$POISON"
expect_rc 123 "-G poison without --dlq"
grep -q "group pg: topic p partition 0 offset 2: handler failed 2 attempts (exit status 1)" "$WORK/err" ||
  fail "poison: no message naming it: $(cat "$WORK/err")"
[[ $(committed pg p 0) == 2 ]] || fail "poison without --dlq: committed $(committed pg p 0), not 2"
[[ $(tr '\n' ' ' <"$HANDLED") == "1 2 " ]] || fail "poison: handled $(tr '\n' ' ' <"$HANDLED")"
[[ $(dead_letters pg) == 0 ]] || fail "poison without --dlq: dead letters $(dead_letters pg)"
# The member let the partition go: a rerun stops at the same message.
run "$C" -t p -G pg -e --max-attempts 1 --exec sh -c "$POISON"
expect_rc 123 "-G poison without --dlq, rerun"

# --- and with --dlq: appended, committed past, counted ----------------------------------
: >"$HANDLED"
run "$C" -t p -G pg -e --max-attempts 2 --retry-backoff 1 --dlq p.dlq --exec sh -c "$POISON"
expect_rc 0 "-G poison with --dlq"
[[ $(committed pg p 0) == 6 ]] || fail "poison with --dlq: committed $(committed pg p 0), not 6"
[[ $(tr '\n' ' ' <"$HANDLED") == "4 5 6 " ]] || fail "poison with --dlq: handled $(tr '\n' ' ' <"$HANDLED")"
[[ $(dead_letters pg) == 1 ]] || fail "poison with --dlq: the group counts $(dead_letters pg) dead letters, not 1"
run "$INSPECT" -J "$MQ_DIR/groups/pg/offsets"
[[ $(jq -r 'select(.type == "group_offset") | .dead_letters' "$WORK/out") == 1 ]] ||
  fail "offsets file: dead letters $(jq -c 'select(.type == "group_offset")' "$WORK/out")"
run "$C" -t p.dlq -e -f '%s %h\n'
[[ $(cat "$WORK/out") == "3 mq.dlq.topic=p,mq.dlq.partition=0,mq.dlq.offset=2,mq.dlq.attempts=2,mq.dlq.exit=1,mq.dlq.stderr=cannot handle 3"* ]] ||
  fail "dead-letter topic: $(cat "$WORK/out")"

# --- a crash between the dead letter's append and the commit: the rerun appends
# it once and counts it once (MQ_TEST_CRASH=dlq-appended: mq(7)) ---------------------
produce -t q --create </dev/null
seq 1 6 | produce -t q
: >"$HANDLED"
MQ_TEST_CRASH=dlq-appended run "$C" -t q -G qg -e --max-attempts 1 --dlq q.dlq --exec sh -c "$POISON"
expect_rc 137 "crash after the dead letter's append"
[[ $("$C" -t q.dlq -e | wc -l) == 1 ]] || fail "crash: $("$C" -t q.dlq -e | wc -l) dead letters appended"
[[ $(dead_letters qg) == 0 ]] || fail "crash: counted $(dead_letters qg) dead letters before the commit"
[[ $(committed qg q 0) == - || $(committed qg q 0) -le 2 ]] ||
  fail "crash: committed $(committed qg q 0), past the dead letter"
run "$C" -t q -G qg -e --max-attempts 1 --dlq q.dlq --exec sh -c "$POISON"
expect_rc 0 "rerun after the crash"
grep -q "topic q partition 0 offset 2: .*already in dead-letter topic q.dlq partition 0, not appended again" \
  "$WORK/err" || fail "rerun: the dead letter found is not said: $(cat "$WORK/err")"
[[ $("$C" -t q.dlq -e | wc -l) == 1 ]] || fail "rerun: $("$C" -t q.dlq -e | wc -l) dead letters, not 1"
[[ $(dead_letters qg) == 1 ]] || fail "rerun: the group counts $(dead_letters qg) dead letters, not 1"
[[ $(committed qg q 0) == 6 ]] || fail "rerun: committed $(committed qg q 0), not 6"

# --- two groups sharing one dead-letter topic: each appends its own dead letter of
# the same poison message (mq.dlq.group), and the crash seam leaves one per group ---
# dlq_groups TOPIC: the mq.dlq.group of each dead letter in TOPIC ("-" for none).
dlq_groups() {
  "$C" -t "$1" -e -J | jq -r '[.headers[] | select(.key == "mq.dlq.group") | .value] | last // "-"' |
    sort | tr '\n' ' '
}
produce -t sh --create </dev/null
seq 1 6 | produce -t sh
: >"$HANDLED"
for g in sa sb; do
  run "$C" -t sh -G "$g" -e --max-attempts 1 --dlq sh.dlq --exec sh -c "$POISON"
  expect_rc 0 "shared dead-letter topic: group $g"
  [[ $(dead_letters "$g") == 1 ]] || fail "shared dead-letter topic: group $g counts $(dead_letters "$g") dead letters, not 1"
  [[ $(committed "$g" sh 0) == 6 ]] || fail "shared dead-letter topic: group $g committed $(committed "$g" sh 0)"
done
[[ $("$C" -t sh.dlq -e -f '%s\n' | tr '\n' ' ') == "3 3 " ]] ||
  fail "shared dead-letter topic: dead letters '$("$C" -t sh.dlq -e -f '%s\n' | tr '\n' ' ')', want '3 3 ' (one per group)"
[[ $(dlq_groups sh.dlq) == "sa sb " ]] ||
  fail "shared dead-letter topic: dead letters of groups '$(dlq_groups sh.dlq)', want 'sa sb '"
# A run without -G has its own too (no mq.dlq.group), and a group's rerun
# appends nothing.
run "$C" -t sh -e --max-attempts 1 --dlq sh.dlq --exec sh -c "$POISON"
expect_rc 0 "shared dead-letter topic: without -G"
[[ $(dlq_groups sh.dlq) == "- sa sb " ]] ||
  fail "shared dead-letter topic: without -G: dead letters of '$(dlq_groups sh.dlq)', want '- sa sb '"
run "$C" -t sh -G sa -e --max-attempts 1 --dlq sh.dlq --exec sh -c "$POISON"
expect_rc 0 "shared dead-letter topic: a rerun of group sa"
[[ $(dlq_groups sh.dlq) == "- sa sb " ]] || fail "shared dead-letter topic: a rerun appended: '$(dlq_groups sh.dlq)'"
# Both groups killed between their append and their commit, then rerun:
# still one dead letter per group, each counted once.
produce -t sk --create </dev/null
seq 1 6 | produce -t sk
for g in ka kb; do
  MQ_TEST_CRASH=dlq-appended run "$C" -t sk -G "$g" -e --max-attempts 1 --dlq sk.dlq --exec sh -c "$POISON"
  expect_rc 137 "shared dead-letter topic: group $g killed after its dead letter's append"
  [[ $(dead_letters "$g") == 0 ]] || fail "shared dead-letter topic: group $g counted $(dead_letters "$g") before the commit"
  run "$C" -t sk -G "$g" -e --max-attempts 1 --dlq sk.dlq --exec sh -c "$POISON"
  expect_rc 0 "shared dead-letter topic: group $g rerun after the crash"
  grep -q "topic sk partition 0 offset 2: .*already in dead-letter topic sk.dlq partition 0, not appended again" \
    "$WORK/err" || fail "shared dead-letter topic: group $g: the dead letter found is not said: $(cat "$WORK/err")"
  [[ $(dead_letters "$g") == 1 ]] || fail "shared dead-letter topic: group $g counts $(dead_letters "$g") after the rerun, not 1"
  [[ $(committed "$g" sk 0) == 6 ]] || fail "shared dead-letter topic: group $g committed $(committed "$g" sk 0), not 6"
done
[[ $("$C" -t sk.dlq -e | wc -l) == 2 ]] || fail "shared dead-letter topic, crashes: $("$C" -t sk.dlq -e | wc -l) dead letters, not 2"
[[ $(dlq_groups sk.dlq) == "ka kb " ]] ||
  fail "shared dead-letter topic, crashes: dead letters of groups '$(dlq_groups sk.dlq)', want 'ka kb '"

# --- --at-most-once: a dead letter is counted as soon as it is appended -------------------
# The offsets are committed ahead, so no rerun comes back to count it: a member
# killed later (here by the handler of the next message, no commit due before
# the end) must have committed the count already.
produce -t am --create </dev/null
seq 1 6 | produce -t am
# shellcheck disable=SC2016
KILLER='v=$(cat); [ "$v" != 3 ] || exit 1; [ "$v" != 4 ] || kill -KILL "$PPID"; echo "$v" >>"$HANDLED"'
AM=(-t am -e --at-most-once --commit-interval 86400000 --commit-every 0 --max-attempts 1 --dlq am.dlq)
: >"$HANDLED"
run "$C" -G amg "${AM[@]}" --exec sh -c "$KILLER"
expect_rc 137 "--at-most-once: the member killed by the handler after a dead letter"
[[ $("$C" -t am.dlq -e | wc -l) == 1 ]] || fail "--at-most-once: $("$C" -t am.dlq -e | wc -l) dead letters appended"
[[ $(dead_letters amg) == 1 ]] ||
  fail "--at-most-once: the group counts $(dead_letters amg) dead letters after a later kill, not 1"
[[ $(committed amg am 0) == 6 ]] || fail "--at-most-once: committed $(committed amg am 0), not 6 (ahead)"
# Killed between the append and that commit (MQ_TEST_CRASH=dlq-appended), the
# dead letter stays uncounted: the documented limit (mq-consume(1)).
MQ_TEST_CRASH=dlq-appended run "$C" -G amh "${AM[@]}" --exec sh -c "$POISON"
expect_rc 137 "--at-most-once: crash after the dead letter's append"
run "$C" -G amh "${AM[@]}" --exec sh -c "$POISON"
expect_rc 0 "--at-most-once: rerun after the crash"
[[ $("$C" -t am.dlq -e -J | jq -r '.headers[] | select(.key == "mq.dlq.group") | .value' | grep -c '^amh$') == 1 ]] ||
  fail "--at-most-once: group amh has not one dead letter"
[[ $(dead_letters amh) == 0 && $(committed amh am 0) == 6 ]] ||
  fail "--at-most-once crash: counts $(dead_letters amh), committed $(committed amh am 0): not the documented 0 and 6"

# --- a stuck handler past --max-poll-interval: exit 75, the member gives up -------------
produce -t s --create </dev/null
seq 1 5 | produce -t s
export PIDFILE="$WORK/stuck.pid"
# shellcheck disable=SC2016
STUCK='v=$(cat); if [ "$v" = 3 ]; then echo $$ >"$PIDFILE"; exec sleep 60; fi; echo "$v" >>"$HANDLED"'
: >"$HANDLED"
run "$C" -t s -G sg -e --max-poll-interval 500 --exec sh -c "$STUCK"
expect_rc 75 "stuck handler"
grep -q "group sg: topic s partition 0 offset 2: handler made no progress for 500 ms (--max-poll-interval 500)" \
  "$WORK/err" || fail "stuck handler: message $(cat "$WORK/err")"
[[ $(committed sg s 0) == 2 ]] || fail "stuck handler: committed $(committed sg s 0), not 2"
! kill -0 "$(cat "$PIDFILE")" 2>/dev/null || fail "stuck handler: still running after the member gave up"
# Its partition is free: the next member hands the stuck message over again.
run "$C" -t s -G sg -e --exec sh -c 'cat >>"$HANDLED"; echo >>"$HANDLED"'
expect_rc 0 "after a stuck handler"
[[ $(tr '\n' ' ' <"$HANDLED") == "1 2 3 4 5 " ]] || fail "after a stuck handler: handled $(tr '\n' ' ' <"$HANDLED")"

# --- usage ---------------------------------------------------------------------------
run "$C" -t s --max-poll-interval 500 --exec true
expect_rc 64 "--max-poll-interval without -G"
grep -q -- "--max-poll-interval needs a consumer group" "$WORK/err" || fail "$(cat "$WORK/err")"
run "$C" -t s -G sg --ack-fd 3 --exec true 3</dev/null
expect_rc 64 "--ack-fd with --exec"
grep -q -- "--ack-fd: with --exec a message is handed over when its handler succeeds" "$WORK/err" ||
  fail "$(cat "$WORK/err")"
echo "consume_group_exec: ok"
