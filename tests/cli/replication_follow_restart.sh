#!/usr/bin/env bash
# One `mq-replicate --follow` per root follows every replicated topic of it
# (no -t) and goes on when one of its partitions fails (mq-replicate(1)): a
# partition whose follower stops on an error it does not wait out (here its
# replicate.lock held by another process: exit 75 for a run of its own) is
# started again with backoff, told on standard error, while the root's
# other partitions are followed; once the error is gone it is followed
# too, and a signal stops the run with exit 0. Both ways of following: a
# thread per partition, and rounds (more partitions than `ulimit -n 64`
# keeps open).
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

# same ROOT ROOT TOPIC PARTITION: the partition's log bytes are the same.
same() { cmp -s <(cat "$1/$3-$4"/*.log 2>/dev/null) <(cat "$2/$3-$4"/*.log 2>/dev/null); }
# arrives WHAT TOPIC PARTITION: waits until r1 holds r0's bytes of the
# partition, the follower running.
arrives() {
  for _ in $(seq 600); do  # a guard against a hang, not a timing assertion
    same "$D/r0" "$D/r1" "$2" "$3" && return 0
    kill -0 "$follower" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$follower" 2>/dev/null || {
    set +e
    wait "$follower"
    local frc=$?
    set -e
    fail "$mode: $1: the follower exited with status $frc: $(tail -3 "$D/follow.err")"
  }
  fail "$mode: $1: $2-$3 never reached r1: $(tail -3 "$D/follow.err")"
}

for mode in threads rounds; do
  echo "[${SECONDS}s] $mode"
  D="$WORK/$mode"
  mkdir "$D"
  for t in a b; do
    run "$ISR" --cluster "$D/c" create -t "$t" --partitions $([[ $t == a ]] && echo 1 || echo 4) \
      --replicas "$D/r0,$D/r1" --min-insync-replicas 1
    expect_rc 0 "$mode: create $t"
  done
  # Another process holds r1's a-0/replicate.lock.
  (
    exec 9>"$D/r1/a-0/replicate.lock"
    flock -x 9
    exec sleep 600
  ) </dev/null >/dev/null 2>&1 &
  holder=$!
  PIDS+=("$holder")
  for _ in $(seq 600); do lock_held "$D/r1/a-0/replicate.lock" && break; sleep 0.1; done
  lock_held "$D/r1/a-0/replicate.lock" || fail "$mode: flock never took a-0/replicate.lock"
  (
    [[ $mode == threads ]] || ulimit -n 64
    exec "$REP" -C "$D/r1" --follow
  ) 2>"$D/follow.err" &
  follower=$!
  PIDS+=("$follower")
  # r0 leads a-0, b-0 and b-2; r1 leads b-1 and b-3.
  for p in 0 2; do
    seq -f "b$p-%g" 1 $((5 + RANDOM % 20)) | "$P" -C "$D/r0" -t b -p "$p" --acks 1 -q
    arrives "b while a-0 fails" b "$p"
  done
  for _ in $(seq 600); do grep -q "(started again in" "$D/follow.err" && break; sleep 0.1; done
  grep -q "a-0: .*another mq-replicate follows this partition (started again in [0-9]* ms)" "$D/follow.err" ||
    fail "$mode: a-0's failure was not told: $(cat "$D/follow.err")"
  echo "$mode: $(grep -m1 "started again" "$D/follow.err")"
  # Rounds run on the main thread only; otherwise a thread per partition.
  threads=$(ls "/proc/$follower/task" | wc -l)
  if [[ $mode == rounds ]]; then ((threads == 1)); else ((threads > 5)); fi ||
    fail "$mode: the follower runs $threads threads"
  # The lock released: a-0 is followed too.
  kill "$holder"
  wait "$holder" 2>/dev/null || true
  seq -f "a-%g" 1 $((5 + RANDOM % 20)) | "$P" -C "$D/r0" -t a -p 0 --acks 1 -q
  arrives "a once its lock was released" a 0
  seq -f "b-late-%g" 1 3 | "$P" -C "$D/r0" -t b -p 2 --acks 1 -q
  arrives "b at the end" b 2
  echo "$mode: restarts told: $(grep -c "started again" "$D/follow.err")"
  kill -TERM "$follower"
  set +e
  wait "$follower"
  frc=$?
  set -e
  ((frc == 0)) || fail "$mode: stopped by SIGTERM with a-0 followed again: exit $frc: $(tail -3 "$D/follow.err")"
done
echo ok
