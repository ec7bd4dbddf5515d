# Sourced by every tests/cli/*.sh (not a test itself: it lives below cli/,
# out of the cli/*.sh glob). Strict mode, the tools under test, a scratch
# directory removed at exit, and the helpers the tests share.
#
# A test lists its background processes in PIDS (they are killed at exit)
# and may define on_exit for any other cleanup of its own.
set -euo pipefail

BIN="${MQ_BIN:?MQ_BIN is the build directory}"
SRC="${MQ_SRC:?MQ_SRC is the source directory}"
P="$BIN/mq-produce"
C="$BIN/mq-consume"
INSPECT="$BIN/mq-inspect"
WORK="$(mktemp -d)"
PIDS=()
cleanup_work() {
  local p
  # SIGCONT after SIGTERM: a process a test stopped (SIGSTOP) and left
  # behind gets the signal too.
  for p in "${PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
    kill -CONT "$p" 2>/dev/null || true
  done
  if declare -F on_exit >/dev/null; then on_exit || true; fi
  rm -rf "$WORK"
}
trap cleanup_work EXIT

# The system Python: a version manager's shim can take seconds to start.
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
# Python helpers shared by the tests (lib/mqbatch.py).
export PYTHONPATH="$SRC/tests/cli/lib${PYTHONPATH:+:$PYTHONPATH}"

fail() { echo "FAIL: $*" >&2; exit 1; }
# run CMD...: runs it with stdout and stderr in $WORK/out and $WORK/err; sets
# rc to its exit status. The time limit (MQ_TEST_RUN_TIMEOUT, default 240 s)
# only stops a hang: it is no timing assertion, and a loaded machine (a
# pipeline run forks a transform per message) must not hit it.
run() {
  set +e
  timeout "${MQ_TEST_RUN_TIMEOUT:-240}" "$@" >"$WORK/out" 2>"$WORK/err"
  rc=$?
  set -e
}
# expect_rc STATUS WHAT: the last run exited STATUS.
expect_rc() {
  [[ $rc == "$1" ]] || fail "$2: exit $rc, want $1 (stderr: $(cat "$WORK/err"))"
}
# expect_eq WHAT WANT GOT: the two texts are equal (else their diff, and fail).
expect_eq() {
  if [[ "$2" != "$3" ]]; then
    echo "FAIL: $1" >&2
    diff <(printf '%s\n' "$2") <(printf '%s\n' "$3") >&2 || true
    exit 1
  fi
}
# hex2bin HEX: writes the bytes spelled by a hex string.
hex2bin() {
  local h="$1" i
  for ((i = 0; i < ${#h}; i += 2)); do printf "\\x${h:i:2}"; done
}
# lock_held FILE: some process holds a flock(2) lock on FILE. Read from
# /proc/locks: a probe with flock(1) would take the lock itself for a moment,
# and a tool trying it then (LOCK_NB) would be turned away.
lock_held() {
  local id
  id=$(printf '%02x:%02x:%s' "$(stat -c %Hd "$1")" "$(stat -c %Ld "$1")" "$(stat -c %i "$1")")
  grep -q "^[0-9]*: FLOCK .* $id " /proc/locks
}
# lock_held_by FILE PID: process PID holds a flock(2) lock on FILE.
lock_held_by() {
  local id
  id=$(printf '%02x:%02x:%s' "$(stat -c %Hd "$1")" "$(stat -c %Ld "$1")" "$(stat -c %i "$1")")
  grep -q "^[0-9]*: FLOCK .* $2 $id " /proc/locks
}
# flip_byte FILE POS: overwrites one byte of FILE with its bitwise complement.
flip_byte() {
  local file="$1" pos="$2" old
  old=$(od -An -tu1 -j "$pos" -N1 "$file" | tr -d ' ')
  printf "\\x$(printf %02x $((255 - old)))" | dd of="$file" bs=1 seek="$pos" conv=notrunc status=none
}
# replicas_agree CLUSTER [WHAT]: mq-isr --verify-replicas finds every replica
# of the cluster's partitions holding its leader's batches up to the high
# watermark (R57; a replica behind it agrees up to its log end).
replicas_agree() {
  local out
  out=$(timeout "${MQ_TEST_RUN_TIMEOUT:-240}" "$BIN/mq-isr" --cluster "$1" --verify-replicas 2>&1) &&
    return 0
  fail "${2:-replicas}: mq-isr --verify-replicas exited $?: $out"
}
# replicated_topic NAME ROOTS...: a cluster $WORK/NAME/cl with topic t (one
# partition) over the roots $WORK/NAME/ROOT, min ISR 1, the first root
# leading; 20 records in 4 batches acknowledged by every replica (HW 20).
replicated_topic() {
  local name=$1 roots="" r
  shift
  mkdir -p "$WORK/$name"
  for r in "$@"; do roots+="${roots:+,}$WORK/$name/$r"; done
  run "$BIN/mq-isr" --cluster "$WORK/$name/cl" create -t t --partitions 1 --replicas "$roots" \
    --min-insync-replicas 1
  expect_rc 0 "create $name"
  for i in 1 2 3 4; do seq $((i * 5 - 4)) $((i * 5)) | "$P" -C "$WORK/$name/$1" -t t --acks 1; done
  for i in 1 2; do
    for r in "${@:2}"; do
      run "$BIN/mq-replicate" -C "$WORK/$name/$r" -q
      expect_rc 0 "catch up $r"
    done
  done
}
# isr_of NAME: the ISR of topic t's partition 0 in cluster $WORK/NAME/cl.
isr_of() { "$BIN/mq-isr" --cluster "$WORK/$1/cl" describe | sed -n 's/.*Isr: \([0-9,]*\).*/\1/p'; }
