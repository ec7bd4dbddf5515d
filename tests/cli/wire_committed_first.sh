#!/usr/bin/env bash
# protocol.md R102: a leader's `mq-replicate --serve` sends what its replica
# holds below its high watermark while its own connection to the
# controller is still being made, and waits for that connection only for
# the rest. The "hosts" (h0, h1 and the controller ctl) are one machine:
# MQ_RSH is a stand-in for ssh that runs the remote command with `sh -c`
# and holds the leader's server's connection to the controller (an
# `mq-isr --serve` started from h0) until $WORK/release exists.
#   1. a follower emptied catches up to the leader's HW (its log holds the
#      committed bytes) while that connection is held, and no further;
#   2. released, the catch-up ends (exit 0) with the leader's whole log,
#      byte-identical, the records above the old HW included.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

cat >"$WORK/rsh" <<'EOS'
#!/bin/sh
# ssh stand-in: rsh HOST 'COMMAND' (see wire_committed_first.sh).
host=$1; shift
if [ "${MQ_TEST_HOST:-}" = h0 ] && [ "$host" = ctl ]; then
  echo held >>"$WORK/held"
  while [ ! -e "$WORK/release" ] && [ -d "$WORK" ]; do sleep 0.05; done
fi
MQ_TEST_HOST=$host
export MQ_TEST_HOST
exec sh -c "$1"
EOS
chmod +x "$WORK/rsh"
export WORK MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
unset MQ_TEST_HOST MQ_CLUSTER MQ_TIMEOUT_MS
on_exit() { touch "$WORK/release"; }  # a held connection goes on at exit
log_bytes() { cat "$1"/t-0/*.log 2>/dev/null | wc -c; }  # ROOT
touch "$WORK/release"  # not held while the cluster is set up

run "$ISR" --cluster "$WORK/cl" create -t t --partitions 1 \
  --replicas "h0:$WORK/r0,h1:$WORK/r1" --min-insync-replicas 1 --controller ctl
expect_rc 0 "create"
seq 1 3000 | sed 's/^/committed-/' >"$WORK/in1"
run env MQ_TEST_HOST=h0 "$P" -C "$WORK/r0" -t t -p 0 -q "$WORK/in1"
expect_rc 0 "produce below the HW"
# The follower fetches everything: the leader's HW reaches its log end.
run env MQ_TEST_HOST=h1 "$REP" -C "$WORK/r1" -q
expect_rc 0 "first catch-up"
committed=$(log_bytes "$WORK/r0")
[[ $(log_bytes "$WORK/r1") == "$committed" ]] || fail "first catch-up: r1 holds $(log_bytes "$WORK/r1") bytes, r0 $committed"
seq 1 500 | sed 's/^/above-/' >"$WORK/in2"
run env MQ_TEST_HOST=h0 "$P" -C "$WORK/r0" -t t -p 0 --acks 1 -q "$WORK/in2"
expect_rc 0 "produce above the HW"
total=$(log_bytes "$WORK/r0")
((total > committed)) || fail "nothing above the HW"

echo "--- 1. committed bytes while the leader's controller connection is held"
rm -f "$WORK/release"
rm -rf "$WORK/r1/t-0"
mkdir "$WORK/r1/t-0"
# Its fetch of what lies above the HW waits for the held connection.
MQ_TEST_HOST=h1 MQ_TIMEOUT_MS=300000 "$REP" -C "$WORK/r1" -q --fetch-max-bytes 4096 2>"$WORK/catchup.err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1200); do  # a guard against a hang, not a timing assertion
  [[ $(log_bytes "$WORK/r1") -ge $committed && -s $WORK/held ]] && break
  sleep 0.1
done
got=$(log_bytes "$WORK/r1")
[[ -s $WORK/held ]] || fail "the leader's server never reached for the controller"
[[ $got == "$committed" ]] ||
  fail "held: r1 holds $got bytes, want the $committed below the leader's HW (R102)"
kill -0 "$pid" 2>/dev/null || fail "the catch-up ended while the leader could not check its epoch"

echo "--- 2. released: the whole log"
touch "$WORK/release"
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 0 ]] || fail "catch-up: exit $rc ($(cat "$WORK/catchup.err"))"
for f in "$WORK"/r0/t-0/*.log; do
  cmp -s "$f" "$WORK/r1/t-0/${f##*/}" || fail "r1 differs from r0 in ${f##*/}"
done
run "$C" -C "$WORK/r1" -t t -p 0 -e -f '%s\n'
expect_rc 0 "consume r1"
expect_eq "r1" "$(cat "$WORK/in1" "$WORK/in2")" "$(cat "$WORK/out")"
echo "ok"
