#!/usr/bin/env bash
# Follow mode: mq-consume without a stop condition sees messages appended
# after it started (one partition and several), -c ends a follow, and
# `mq-consume | head -1` exits 0 quietly.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
# wait_for FILE PATTERN: up to 10 s for a line matching PATTERN in FILE.
wait_for() {
  for _ in $(seq 1 200); do
    grep -qx -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "no line '$2' in $1 after 10 s (got: $(tr '\n' ' ' <"$1"))"
}

# --- one partition: appends made after the consumer started -----------------------
produce -t one --create </dev/null
"$BIN/mq-consume" -t one >"$WORK/one.out" 2>"$WORK/one.err" &
PIDS+=($!)
echo first | produce -t one
wait_for "$WORK/one.out" first
echo second | produce -t one
wait_for "$WORK/one.out" second
[[ "$(cat "$WORK/one.out")" == "$(printf 'first\nsecond')" ]] || fail "one partition: $(cat "$WORK/one.out")"

# --- several partitions, some never written before the consumer started -------------
produce -t many --create --partitions 4 </dev/null
"$BIN/mq-consume" -t many -f '%p:%s\n' >"$WORK/many.out" 2>"$WORK/many.err" &
PIDS+=($!)
echo to-two | produce -t many -p 2
wait_for "$WORK/many.out" 2:to-two
echo to-zero | produce -t many -p 0
wait_for "$WORK/many.out" 0:to-zero
echo to-three | produce -t many -p 3
wait_for "$WORK/many.out" 3:to-three
echo again-two | produce -t many -p 2
wait_for "$WORK/many.out" 2:again-two
[[ $(wc -l <"$WORK/many.out") == 4 ]] || fail "several partitions: $(cat "$WORK/many.out")"

# --- -o end shows only what is appended later ------------------------------------
printf 'old1\nold2\n' | produce -t late --create
"$BIN/mq-consume" -t late -o end >"$WORK/late.out" &
PIDS+=($!)
# The consumer's start is not observable from outside: append until it shows one.
for i in $(seq 1 100); do
  echo "new$i" | produce -t late
  [[ -s "$WORK/late.out" ]] && break
  sleep 0.1
done
sleep 0.2
grep -q old "$WORK/late.out" && fail "-o end printed old messages: $(cat "$WORK/late.out")"
grep -q '^new' "$WORK/late.out" || fail "-o end printed nothing new"

# --- -c ends a follow once enough messages arrived -----------------------------------
produce -t count --create </dev/null
"$BIN/mq-consume" -t count -c 2 >"$WORK/count.out" &
cpid=$!
printf 'a\nb\nc\n' | produce -t count
for _ in $(seq 1 200); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.05; done
kill -0 "$cpid" 2>/dev/null && fail "-c 2 did not exit after two messages"
wait "$cpid" || fail "-c 2 exited non-zero"
[[ "$(cat "$WORK/count.out")" == "$(printf 'a\nb')" ]] || fail "-c 2: $(cat "$WORK/count.out")"

# --- | head -1: exit 0, nothing on stderr ---------------------------------------------
seq 1 200000 | produce -t big --create
for args in "-e" "" "-J -e" "-p 0"; do
  # shellcheck disable=SC2086
  out="$(timeout 10 "$BIN/mq-consume" -t big $args 2>"$WORK/head.err" | head -1; echo "rc=${PIPESTATUS[0]}")"
  [[ "$out" == *"rc=0" ]] || fail "mq-consume $args | head -1: $out"
  [[ ! -s "$WORK/head.err" ]] || fail "mq-consume $args | head -1 wrote to stderr: $(cat "$WORK/head.err")"
done
# A follower whose reader leaves while it waits for appends exits too.
out="$(timeout 10 "$BIN/mq-consume" -t one 2>"$WORK/head.err" | head -1; echo "rc=${PIPESTATUS[0]}")"
[[ "$out" == "first"$'\n'"rc=0" ]] || fail "idle follower | head -1: $out"
[[ ! -s "$WORK/head.err" ]] || fail "idle follower | head -1 wrote to stderr"

# --- SIGINT ends a follow: output written, -v summary printed, status 130 ----------
"$BIN/mq-consume" -t one -v >"$WORK/int.out" 2>"$WORK/int.err" &
ipid=$!
wait_for "$WORK/int.out" second
kill -INT "$ipid"
set +e
wait "$ipid"
rc=$?
set -e
[[ $rc == 130 ]] || fail "SIGINT: exit $rc, want 130"
grep -qx "Processed a total of 2 messages" "$WORK/int.err" || fail "SIGINT: summary: $(cat "$WORK/int.err")"

[[ ! -s "$WORK/one.err" && ! -s "$WORK/many.err" ]] || fail "followers wrote to stderr"
echo "ok"
