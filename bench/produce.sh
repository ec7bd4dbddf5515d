#!/usr/bin/env bash
# mq-produce throughput against dd, measured in the same run (not a test).
#
#   bench/produce.sh [BUILD_DIR] [MESSAGES] [RUNS]      (BUILD_DIR default $MQ_BIN)
#
# Writes MESSAGES (default 10 M) lines of 100 bytes (99 + newline) to a file
# in the page cache, then times, RUNS times each (default 5), into a fresh
# data directory on the same file system:
#   dd           dd if=FILE of=copy bs=64k (the ceiling: the same bytes read and
#                written through user space, no framing; cat would use
#                copy_file_range and never touch the bytes)
#   page-cache   mq-produce -t T FILE                   (--fsync none)
#   zstd         mq-produce -t T -z zstd FILE
#   fsync-batch  mq-produce -t T --fsync batch FILE     (one fsync per append)
# and prints, per case, the median wall time, messages/s, the ratio to dd's
# median, the median CPU time (user + sys) and the peak RSS, then each ratio
# against its target (issue 7: page-cache >= 0.6 x dd, zstd >= 0.4 x dd).
# Set MQ_BENCH_DIR to put the data elsewhere (default: a mktemp under /tmp).
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k, need_timed, run_timed
BUILD=${1:-${MQ_BIN:-build}}
N=${2:-10000000}
RUNS=${3:-5}
P="$BUILD/mq-produce"
[ -x "$P" ] || { echo "no $P (build first)" >&2; exit 1; }
need_timed "$BUILD"
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT

# 100-byte lines: a 10-digit counter and 89 bytes of text.
awk -v n="$N" 'BEGIN {
  pad = ""
  while (length(pad) < 89) pad = pad "the quick brown fox jumps over the lazy dog "
  pad = substr(pad, 1, 89)
  for (i = 0; i < n; i++) printf "%010d%s\n", i, pad
}' >"$W/in"
cat "$W/in" >/dev/null  # into the page cache
echo "input: $N lines, $(stat -c %s "$W/in") bytes; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"

# time_one NAME CMD...: runs CMD once, appends "wall cpu rss_kb" to $W/NAME.
time_one() {
  local name=$1; shift
  rm -rf "$W/data" "$W/copy"
  "$P" -C "$W/data" -t T --create -q </dev/null
  sync
  run_timed "$W/$name" "$@"
}

cases="dd page-cache zstd fsync-batch"
for run in $(seq 1 "$RUNS"); do
  time_one dd dd if="$W/in" of="$W/copy" bs=64k status=none
  time_one page-cache "$P" -C "$W/data" -t T -q "$W/in"
  time_one zstd "$P" -C "$W/data" -t T -q -z zstd "$W/in"
  time_one fsync-batch "$P" -C "$W/data" -t T -q --fsync batch "$W/in"
done

dd_wall=$(cut -d' ' -f1 "$W/dd" | median)
printf '%-12s %9s %12s %9s %9s %9s\n' case wall_s msgs/s vs_dd cpu_s rss_MB
for c in $cases; do
  wall=$(cut -d' ' -f1 "$W/$c" | median)
  cpu=$(cut -d' ' -f2 "$W/$c" | median)
  rss=$(cut -d' ' -f3 "$W/$c" | sort -n | tail -1)
  awk -v c="$c" -v w="$wall" -v cpu="$cpu" -v r="$rss" -v n="$N" -v cw="$dd_wall" 'BEGIN {
    printf "%-12s %9.3f %12.0f %9.2f %9.2f %9.1f\n", c, w, (w > 0 ? n / w : 0), (w > 0 ? cw / w : 0), cpu, r / 1024 }'
done
echo "(median of $RUNS runs; vs_dd = dd's wall time / this wall time, the ratio of input bytes per second; rss = peak)"
for target in page-cache:0.6 zstd:0.4; do
  c=${target%%:*} want=${target#*:}
  wall=$(cut -d' ' -f1 "$W/$c" | median)
  awk -v c="$c" -v w="$wall" -v cw="$dd_wall" -v want="$want" 'BEGIN {
    r = (w > 0 ? cw / w : 0)
    printf "target %-10s vs_dd %.2f, want >= %.1f: %s\n", c, r, want, (r >= want ? "met" : "NOT met") }'
done
