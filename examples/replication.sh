#!/usr/bin/env bash
# The replication scenarios of mq(7), run with the real tools on three log
# roots of one host, printing real offsets:
#   1. acks=1: the leader acknowledges, dies before a follower fetched, a
#      follower is elected: the acknowledged message is gone, and mq says so.
#   2. acks=all with min.insync.replicas=2: the same failure loses nothing
#      acknowledged.
#   3. The ISR shrinks to the leader alone: acks=all with min ISR 2 is
#      refused; with min ISR 1 it silently degrades to acks=1.
#   4. A returning old leader truncates its divergent tail.
#
#   MQ_BIN=build examples/replication.sh     (./build.sh demo runs it too)
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${MQ_BIN:-$SRC/build}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mq-replication.XXXXXX")
if [[ ${MQ_DEMO_KEEP:-0} == 1 ]]; then
  echo "demo directory: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
cd "$WORK"
export PATH="$BIN:$PATH"

if [[ -t 1 ]]; then BOLD=$'\e[1m' PLAIN=$'\e[0m'; else BOLD='' PLAIN=''; fi
section() { printf '\n%s## %s%s\n' "$BOLD" "$*" "$PLAIN"; }
# Prints a command, then runs it; prints its exit status when not 0.
run() {
  printf '$ %s\n' "$1"
  set +e
  eval "$1"
  local rc=$?
  set -e
  ((rc == 0)) || echo "(exit $rc)"
  return 0
}
# The scenario's own check: stops the demo when mq did not do what it says.
expect() { eval "$1" || { echo "replication demo: expected: $1" >&2; exit 70; }; }

for tool in mq-isr mq-replicate mq-produce mq-consume; do
  command -v "$tool" >/dev/null || { echo "demo: $tool not found in $BIN (build first)" >&2; exit 69; }
done

# A fresh cluster of three roots for a scenario; min.insync.replicas $2.
fresh() {
  rm -rf "$1"
  mkdir -p "$1"
  mq-isr --cluster "$PWD/$1/cluster" create -t orders --partitions 1 \
    --replicas "$PWD/$1/r0,$PWD/$1/r1,$PWD/$1/r2" --min-insync-replicas "$2" \
    -X replica.lag.time.max.ms=500 >/dev/null
}

section "1. acks=1: acknowledged by the leader, lost with it"
fresh s1 1
run "echo first | mq-produce -C s1/r0 -t orders --acks 1 --print-offsets"
run "mq-replicate -C s1/r1 -v; mq-replicate -C s1/r2 -v"
run "echo second | mq-produce -C s1/r0 -t orders --acks 1 --print-offsets   # acknowledged: offset 1"
echo "# the leader's root is lost before any follower fetched 'second'"
run "mv s1/r0 s1/r0.lost"
run "mq-isr --cluster \$PWD/s1/cluster elect"
run "mq-replicate -C s1/r2   # the new leader's HW moves once its ISR fetched"
run "mq-consume -C s1/r1 -t orders -e -f '%o %s\n'"
expect "! mq-consume -C s1/r1 -t orders -e | grep -q second"
echo "# 'second' was acknowledged at offset 1 and is gone: acks=1 trusts one copy"

section "2. acks=all, min.insync.replicas=2: the same failure loses nothing acknowledged"
fresh s2 2
mq-replicate -C s2/r1 --follow -q & f1=$!
mq-replicate -C s2/r2 --follow -q & f2=$!
run "echo first | mq-produce -C s2/r0 -t orders --acks all --print-offsets"
run "echo second | mq-produce -C s2/r0 -t orders --acks all --print-offsets"
kill $f1 $f2; wait $f1 $f2 2>/dev/null || true
run "mv s2/r0 s2/r0.lost"
run "mq-isr --cluster \$PWD/s2/cluster elect"
run "mq-replicate -C s2/r2"
run "mq-consume -C s2/r1 -t orders -e -f '%o %s\n'"
expect "mq-consume -C s2/r1 -t orders -e | grep -q second"
echo "# every acknowledged message is on the new leader"

section "3. The ISR shrinks to the leader: acks=all is refused with min ISR 2, degrades with 1"
fresh s3 2
echo "# no follower runs: after replica.lag.time.max.ms (500 ms) the ISR shrinks"
run "echo one | mq-produce -C s3/r0 -t orders --acks all --ack-timeout 2000   # 80: ISR fell below 2"
run "mq-isr --cluster \$PWD/s3/cluster describe -t orders"
run "echo two | mq-produce -C s3/r0 -t orders --acks all   # 79: NOT_ENOUGH_REPLICAS, nothing appended"
expect "! mq-consume -C s3/r0 -t orders -e | grep -q two"
fresh s3b 1
run "echo one | mq-produce -C s3b/r0 -t orders --acks all --ack-timeout 2000 --print-offsets"
run "mq-isr --cluster \$PWD/s3b/cluster describe -t orders"
echo "# with min.insync.replicas=1 the ISR is the leader alone: acks=all acknowledged what one copy holds"

section "4. A returning old leader truncates its divergent tail"
fresh s4 1
run "printf 'a\nb\n' | mq-produce -C s4/r0 -t orders --acks 1 --print-offsets"
run "mq-replicate -C s4/r1 && mq-replicate -C s4/r2"
run "echo only-on-r0 | mq-produce -C s4/r0 -t orders --acks 1 --print-offsets   # offset 2, on r0 alone"
run "mv s4/r0 s4/r0.away"
run "mq-isr --cluster \$PWD/s4/cluster elect"
run "echo new-leader | mq-produce -C s4/r1 -t orders --acks 1 --print-offsets   # offset 2 again, epoch 1"
run "mq-replicate -C s4/r2"
run "mv s4/r0.away s4/r0"
run "mq-replicate -C s4/r0 -v"
run "mq-consume -C s4/r0 -t orders -e -f '%o %s\n'"
expect "! mq-consume -C s4/r0 -t orders -e | grep -q only-on-r0"
expect "mq-consume -C s4/r0 -t orders -e | grep -q new-leader"
echo "# r0 cut offset 2 ('only-on-r0', epoch 0) and fetched the new leader's offset 2"
