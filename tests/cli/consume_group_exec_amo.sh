#!/usr/bin/env bash
# mq-consume -G --exec --at-most-once loses a message only at a crash
# (format-spec/group.md §14.3, R31's hand-back, R67): a member stopped by
# SIGTERM lets its running handler finish (it is not passed the signal;
# bounded by --max-poll-interval) and hands back the messages whose
# handlers never started, and a message whose handler failed and waits to
# retry; serially and with --parallel, --batch or not. A handler that dies
# of a signal is not run again (it may have done its work): with --dlq its
# message is dead-lettered after one attempt. A handler still running at
# --max-poll-interval is killed: its message is the one loss without a
# member crash.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
committed() {  # committed GROUP TOPIC PARTITION
  "$C" --describe -G "$1" -t "$2" -J |
    jq -r --argjson p "$3" 'select(.type == "partition" and .partition == $p) | .current_offset // "-"'
}
# 2 partitions of 8 messages, each partition one record batch (committed
# ahead whole before its first handler starts).
produce -t a --create --partitions 2 </dev/null
for p in 0 1; do seq 0 7 | produce -t a -p "$p" --batch-bytes 1m; done
"$C" -t a -e -f '%p %o\n' | sort >"$WORK/all"
export RUN
# The handler logs "start P O", works a while and logs "done P O" (the
# message handled). It does not ignore SIGTERM: stopped, it dies before
# "done". The first run for partition 0 offset 2 fails (exit 1), once.
# shellcheck disable=SC2016
HANDLER='i=$MQ_OFFSET; last=${MQ_LAST_OFFSET:-$i}
  echo "start $MQ_PARTITION $i" >>"$RUN/log"
  if [ "$MQ_PARTITION" = 0 ] && [ "$i" -le 2 ] && [ "$last" -ge 2 ] && [ "$FAIL" = 1 ] &&
     mkdir "$RUN/failed" 2>/dev/null; then exit 1; fi
  sleep 0.4
  while [ "$i" -le "$last" ]; do echo "done $MQ_PARTITION $i" >>"$RUN/log"; i=$((i + 1)); done'
# stop_case NAME WAIT FLAGS...: a member runs until the log has a line
# matching WAIT, is stopped with SIGTERM, and a second run handles the rest
# (-e); each message must be handled exactly once.
stop_case() {
  local name=$1 wait=$2
  shift 2
  RUN="$WORK/$name"
  mkdir "$RUN"
  "$C" -t a -G "$name" --at-most-once --max-poll-interval 30000 "$@" --exec sh -c "$HANDLER" \
    2>"$RUN/err" &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 300); do
    grep -q "$wait" "$RUN/log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  grep -q "$wait" "$RUN/log" || fail "$name: no '$wait': $(cat "$RUN/err")"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  local c0 c1
  c0=$(committed "$name" a 0) c1=$(committed "$name" a 1)
  run "$C" -t a -G "$name" -e --at-most-once "$@" --exec sh -c "$HANDLER"
  expect_rc 0 "$name: the second run"
  awk '$1 == "done" {print $2 " " $3}' "$RUN/log" | sort >"$RUN/got"
  lost=$(comm -23 "$WORK/all" <(sort -u "$RUN/got") | tr '\n' ',')
  twice=$(uniq -d "$RUN/got" | tr '\n' ',')
  echo "$name: stopped with committed offsets $c0 and $c1; lost: ${lost:-none}; handled twice: ${twice:-none}"
  [[ -z $lost ]] || fail "$name: lost without a crash: $lost"
  [[ -z $twice ]] || fail "$name: handled twice at most once: $twice"
}
# Serially: stopped while the handler of partition 0 offset 3 runs.
FAIL=0 stop_case serial "start 0 3"
# Stopped while partition 0 offset 2 waits to retry (its first run failed).
FAIL=1 stop_case retry "start 0 2" --retry-backoff 20000
# --parallel: stopped while handlers of both partitions run.
FAIL=0 stop_case parallel "start 1 3" --parallel 2
# --batch 3 --parallel: stopped while batches of both partitions run.
FAIL=0 stop_case batch "start 1 3" --parallel 2 --batch 3

# --- the bound: a handler still running at --max-poll-interval is killed ---------------
# Its message is lost (the one loss without a member crash), the rest of
# its batch handed back.
RUN="$WORK/bound"
mkdir "$RUN"
# shellcheck disable=SC2016
SLOW='echo "start $MQ_PARTITION $MQ_OFFSET" >>"$RUN/log"; [ "$MQ_OFFSET" != 1 ] || sleep 10
  echo "done $MQ_PARTITION $MQ_OFFSET" >>"$RUN/log"'
"$C" -t a -G bound --at-most-once --max-poll-interval 1000 --exec sh -c "$SLOW" 2>"$RUN/err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 300); do grep -q "^start [01] 1$" "$RUN/log" 2>/dev/null && break; sleep 0.05; done
p=$(awk '$1 == "start" && $3 == 1 {print $2; exit}' "$RUN/log")
[[ -n $p ]] || fail "bound: no handler for offset 1 started: $(cat "$RUN/err")"
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
grep -q "partition $p offset 1: handler made no progress for 1000 ms" "$RUN/err" || fail "bound: $(cat "$RUN/err")"
# Its message was committed ahead: the warning says it is lost, not left
# uncommitted.
grep -qF "giving up this member's partitions (--at-most-once: the message was committed before its handler ran, and is lost)" \
  "$RUN/err" || fail "bound: the stuck handler's message: $(cat "$RUN/err")"
[[ $(committed bound a "$p") == 2 ]] || fail "bound: partition $p committed $(committed bound a "$p"), want 2"
! grep -q "done $p 1" "$RUN/log" || fail "bound: the killed handler finished"
echo "bound: partition $p offset 1 killed at --max-poll-interval and lost; offsets 2 on handed back"

# --- a handler that dies of a signal is not run again -----------------------------------
produce -t k --create </dev/null
seq 0 3 | produce -t k
# shellcheck disable=SC2016
KILLER='echo "$MQ_OFFSET" >>"$WORK/k.runs"; [ "$MQ_OFFSET" != 1 ] || kill -TERM $$'
export WORK
run "$C" -t k -G kg -e --at-most-once --max-attempts 3 --retry-backoff 1 --dlq k.dlq --exec sh -c "$KILLER"
expect_rc 0 "a handler killed by a signal"
expect_eq "a handler killed by a signal: handler runs" "$(printf '0\n1\n2\n3')" "$(cat "$WORK/k.runs")"
dl=$("$C" -t k.dlq -e -f '%h\n')
[[ $dl == *"mq.dlq.offset=1"* && $dl == *"mq.dlq.attempts=1"* && $dl == *"mq.dlq.exit=SIGTERM"* ]] ||
  fail "a handler killed by a signal: dead letter $dl"
echo "consume_group_exec_amo: ok"
