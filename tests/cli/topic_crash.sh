#!/usr/bin/env bash
# kill -9 at seeded random points of mq-topic's partition increase and topic
# deletion (R82, R83): the tool kills itself before its Nth call that can
# change the data directory (MQ_TEST_KILL_AT, counted by MQ_TEST_COUNT_CALLS
# on a run without a kill), for N drawn from the seed. After each kill,
# mq-inspect --verify passes and the topic is all there or all gone:
#   increase: the .conf says the old count or the new one, every partition it
#     names has its directory (mq-produce appends to all of them), and every
#     message is still read; running the increase again completes it;
#   deletion: either the topic exists and every message reads back, or it is
#     gone (no .conf); the next mq-topic run finishes the deletion (no
#     directory of the topic left, deleted/ empty); the other topic is intact.
# Runs MQ_TOPIC_CRASH_RUNS seeds of each (default 10, CI); a soak:
#   MQ_TOPIC_CRASH_RUNS=500 MQ_BIN=build MQ_SRC=. bash tests/cli/topic_crash.sh
# MQ_TOPIC_CRASH_SEED fixes the first seed (each run prints its seed).
source "$(dirname "$0")/lib/common.bash"
T="$BIN/mq-topic"
RUNS=${MQ_TOPIC_CRASH_RUNS:-10}
SEED0=${MQ_TOPIC_CRASH_SEED:-$(date +%s)}
MSGS=40

# setup DIR: topic t (3 partitions, MSGS keyed messages) and topic u (5 messages).
setup() {
  "$T" -C "$1" create t --partitions 3 >/dev/null
  printf 'k%s\tv\n' $(seq 1 $MSGS) | "$P" -C "$1" -t t -q -K $'\t'
  seq 1 5 | "$P" -C "$1" -t u --create -q
}
"$P" -C "$WORK/template" -t seed --create -q </dev/null
setup "$WORK/template"

count() { "$C" -C "$1" -t "$2" -e -q | wc -l; }
verify() {  # DIR WHAT
  run "$INSPECT" --verify "$1"
  [[ $rc == 0 ]] || fail "$2: mq-inspect --verify exited $rc: $(cat "$WORK/out" "$WORK/err" | tail -5)"
}
calls() {  # ARGS...: the calls mq-topic ARGS makes on a copy of the template
  rm -rf "$WORK/probe"
  cp -a "$WORK/template" "$WORK/probe"
  MQ_TEST_COUNT_CALLS=1 "$T" -C "$WORK/probe" "$@" 2>&1 >/dev/null |
    sed -n 's/^mq-topic: test: \([0-9]*\) calls$/\1/p'
}

n_inc=$(calls alter t --partitions 7)
n_del=$(calls delete t)
[[ $n_inc -gt 5 && $n_del -gt 5 ]] || fail "call counts: increase $n_inc, delete $n_del"
echo "topic_crash: $RUNS runs each; increase makes $n_inc calls, deletion $n_del; first seed $SEED0"

for ((i = 0; i < RUNS; i++)); do
  seed=$((SEED0 + i))
  RANDOM=$seed
  d="$WORK/run"
  # --- partition increase ---
  rm -rf "$d"; cp -a "$WORK/template" "$d"
  k=$((1 + RANDOM % n_inc))
  set +e; { MQ_TEST_KILL_AT=$k "$T" -C "$d" alter t --partitions 7 >/dev/null; krc=$?; } 2>/dev/null; set -e
  what="increase seed $seed kill at $k/$n_inc"
  [[ $krc == 137 ]] || fail "$what: exited $krc, not killed"
  verify "$d" "$what"
  parts=$(sed -n 's/^partitions=//p' "$d/topics/t.conf")
  [[ $parts == 3 || $parts == 7 ]] || fail "$what: partitions=$parts"
  for ((p = 0; p < parts; p++)); do [[ -d "$d/t-$p" ]] || fail "$what: partitions=$parts without t-$p"; done
  [[ $(count "$d" t) == "$MSGS" ]] || fail "$what: $(count "$d" t) messages, not $MSGS"
  printf 'x%s\tv\n' $(seq 1 20) | "$P" -C "$d" -t t -q -K $'\t' || fail "$what: produce after the kill"
  "$T" -C "$d" alter t --partitions 7 >/dev/null 2>&1 || fail "$what: the increase again"
  [[ $(sed -n 's/^partitions=//p' "$d/topics/t.conf") == 7 ]] || fail "$what: not 7 after the retry"
  verify "$d" "$what, retried"
  [[ $(count "$d" t) == $((MSGS + 20)) ]] || fail "$what: messages lost"
  # --- deletion ---
  rm -rf "$d"; cp -a "$WORK/template" "$d"
  k=$((1 + RANDOM % n_del))
  set +e; { MQ_TEST_KILL_AT=$k "$T" -C "$d" delete t >/dev/null; krc=$?; } 2>/dev/null; set -e
  what="delete seed $seed kill at $k/$n_del"
  [[ $krc == 137 ]] || fail "$what: exited $krc, not killed"
  verify "$d" "$what"
  if [[ -e "$d/topics/t.conf" ]]; then
    [[ $(count "$d" t) == "$MSGS" ]] || fail "$what: the topic exists with $(count "$d" t) messages"
    state=kept
  else
    run "$C" -C "$d" -t t -e -q
    [[ $rc == 66 ]] || fail "$what: a consumer of the deleted topic exited $rc"
    state=gone
  fi
  run "$T" -C "$d" list
  expect_rc 0 "$what: the next run"
  [[ $(count "$d" u) == 5 ]] || fail "$what: topic u damaged"
  if [[ $state == gone ]]; then
    compgen -G "$d/t-*" >/dev/null && fail "$what: the next run left $(ls "$d")"
    [[ -z "$(ls "$d/deleted")" ]] || fail "$what: the next run left deleted/$(ls "$d/deleted")"
  else
    "$T" -C "$d" delete t >/dev/null || fail "$what: deleting again"
  fi
  verify "$d" "$what, finished"
  echo "seed $seed: increase killed at call $((1 + $(RANDOM=$seed; echo $((RANDOM % n_inc))))), delete at call $k ($state)"
done
echo "topic_crash: ok"
