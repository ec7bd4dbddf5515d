#!/usr/bin/env bash
# Catch-up replication between two log roots of one host against dd of the
# same bytes, measured in the same run (not a test).
#
#   bench/replication.sh [BUILD_DIR] [MEGABYTES] [RUNS]   (BUILD_DIR default $MQ_BIN)
#
# A replicated topic of one partition on roots r0 (leader) and r1 is filled
# with MEGABYTES (default 1024) of 1000-byte messages through mq-produce,
# then, RUNS times each (default 3), alternating:
#   dd          dd if=SEGMENT of=copy bs=1M for each of the leader's segments
#               (the same bytes read and written through user space)
#   catch-up    mq-replicate -C r1 into an empty replica: fetch, check every
#               batch (R1-R7, CRC, offsets, epochs), append
# and prints the medians and catch-up / dd as a throughput ratio (issue 9's
# target: at least 0.5). Set MQ_BENCH_DIR to put the data elsewhere.
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k
BUILD=${1:-${MQ_BIN:-build}}
BUILD=$(cd "$BUILD" && pwd)  # the script works in a directory of its own
MB=${2:-1024}
RUNS=${3:-3}
for t in mq-produce mq-replicate mq-isr; do
  [ -x "$BUILD/$t" ] || { echo "no $BUILD/$t (build first)" >&2; exit 1; }
done
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"

"$BUILD/mq-isr" --cluster "$W/cl" create -t t --partitions 1 --replicas "$W/r0,$W/r1" \
  --min-insync-replicas 1 >/dev/null
messages_1k "$MB" | "$BUILD/mq-produce" -C "$W/r0" -t t -p 0 -q
bytes=$(cat "$W"/r0/t-0/*.log | wc -c)
echo "leader log: $bytes bytes in $(ls "$W"/r0/t-0/*.log | wc -l) segment(s); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$W"/r0/t-0/*.log >/dev/null  # into the page cache

fresh_follower() {
  rm -rf "$W/r1/t-0"
  mkdir "$W/r1/t-0"
  rm -f "$W/copy"
  sync
}
for run in $(seq 1 "$RUNS"); do
  fresh_follower
  t0=$EPOCHREALTIME
  for f in "$W"/r0/t-0/*.log; do dd if="$f" of="$W/copy" bs=1M status=none oflag=append conv=notrunc; done
  t1=$EPOCHREALTIME
  echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}' >>"$W/dd"
  fresh_follower
  t0=$EPOCHREALTIME
  "$BUILD/mq-replicate" -C "$W/r1" -q --fetch-max-bytes 8M
  t1=$EPOCHREALTIME
  echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}' >>"$W/catch-up"
  cmp -s <(cat "$W"/r0/t-0/*.log) <(cat "$W"/r1/t-0/*.log) || { echo "follower differs" >&2; exit 1; }
done

dd_s=$(median <"$W/dd")
cu_s=$(median <"$W/catch-up")
awk -v b="$bytes" -v d="$dd_s" -v c="$cu_s" 'BEGIN {
  printf "%-9s %9s %10s %8s\n", "case", "median s", "MB/s", "vs dd"
  printf "%-9s %9.3f %10.0f %8.2f\n", "dd", d, b / d / 1e6, 1
  printf "%-9s %9.3f %10.0f %8.2f\n", "catch-up", c, b / c / 1e6, d / c
  printf "target: catch-up >= 0.5 x dd: %s\n", (d / c >= 0.5) ? "met" : "NOT met"
}'
