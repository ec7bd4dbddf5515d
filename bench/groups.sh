#!/usr/bin/env bash
# Consumer groups (not a test): what a member costs against plain
# mq-consume, and how fast a killed member's partitions are taken over.
#
#   bench/groups.sh [BUILD_DIR] [MESSAGES] [RUNS] [TAKEOVERS]   (BUILD_DIR default $MQ_BIN)
#
# 1. MESSAGES (default 5 M) 100-byte lines in a 4-partition topic, read to
#    /dev/null RUNS times (default 5) each, back to back:
#      plain   mq-consume -t T -e
#      group   mq-consume -t T -G gN -e     (a new group each run: the same
#              messages, committed every second and at the end)
#    Prints the median wall times and group/plain (target >= 0.5).
# 2. TAKEOVERS (default 20) times: two members of one group follow a
#    12-partition topic; one is SIGKILLed, then one message is appended to
#    each of its partitions; the time from the kill until the survivor has
#    printed them all. Prints p50 and p99 (target < 1 s).
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k
BUILD=${1:-${MQ_BIN:-build}}
N=${2:-5000000}
RUNS=${3:-5}
TAKEOVERS=${4:-20}
P="$BUILD/mq-produce"
C="$BUILD/mq-consume"
for tool in "$P" "$C"; do [ -x "$tool" ] || { echo "no $tool (build first)" >&2; exit 1; }; done
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench.XXXXXX")
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$W"' EXIT
export MQ_DIR="$W/data"

awk -v n="$N" 'BEGIN {
  pad = ""
  while (length(pad) < 89) pad = pad "the quick brown fox jumps over the lazy dog "
  pad = substr(pad, 1, 89)
  for (i = 0; i < n; i++) printf "k%09d\t%s\n", i, pad
}' | "$P" -q -t T --create --partitions 4 -K '\t'
"$C" -t T -e >/dev/null
ms() { echo $(( $(date +%s%N) / 1000000 )); }
for run in $(seq 1 "$RUNS"); do
  t0=$(ms); "$C" -t T -e >/dev/null; t1=$(ms)
  "$C" -t T -G "g$run" -e >/dev/null; t2=$(ms)
  echo $((t1 - t0)) >>"$W/plain"
  echo $((t2 - t1)) >>"$W/group"
done
plain=$(median <"$W/plain")
group=$(median <"$W/group")
echo "groups: $N messages, 4 partitions, $RUNS runs; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %8s ms  %-18s %8s ms  ratio %s  (target >= 0.5)\n' "mq-consume -G g -e > /dev/null" "$group" \
  "plain mq-consume" "$plain" "$(awk -v a="$plain" -v b="$group" 'BEGIN {printf "%.2f", a / b}')"

"$P" -q -t F --create --partitions 12 </dev/null
for i in $(seq 1 "$TAKEOVERS"); do
  "$C" -t F -G "t$i" --member-id a -f '%p %s\n' >"$W/a.$i" 2>/dev/null &
  a=$!
  "$C" -t F -G "t$i" --member-id b -f '%p %s\n' >"$W/b.$i" 2>/dev/null &
  b=$!
  PIDS=("$a" "$b")
  # Both members own their share once each has claimed 6 partitions.
  for _ in $(seq 1 200); do
    n=$(ls "$MQ_DIR/groups/t$i/members" 2>/dev/null | wc -l || true)
    ((n == 2)) && break
    sleep 0.01
  done
  sleep 0.5
  t0=$(ms)
  kill -KILL "$b"
  wait "$b" 2>/dev/null || true
  for p in $(seq 0 11); do echo "m$i" | "$P" -q -t F -p "$p"; done
  while (( $(grep -c "m$i\$" "$W/a.$i" || true) < 12 )); do sleep 0.002; done
  t1=$(ms)
  kill "$a"
  wait "$a" 2>/dev/null || true
  echo $((t1 - t0)) >>"$W/takeover"
done
sort -n "$W/takeover" >"$W/takeover.sorted"
p50=$(awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}' "$W/takeover.sorted")
p99=$(awk '{a[NR] = $1} END {i = int(NR * 0.99 + 0.999); if (i > NR) i = NR; print a[i]}' "$W/takeover.sorted")
printf '%-44s p50 %s ms, p99 %s ms over %s kills (target < 1000 ms; includes 12 mq-produce runs)\n' \
  "takeover after SIGKILL of a member" "$p50" "$p99" "$TAKEOVERS"
