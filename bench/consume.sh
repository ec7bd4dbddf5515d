#!/usr/bin/env bash
# mq-consume throughput against cat, measured in the same run (not a test).
#
#   bench/consume.sh [BUILD_DIR] [MESSAGES] [RUNS]      (BUILD_DIR default $MQ_BIN)
#
# Writes MESSAGES (default 10 M) lines of 100 bytes (99 + newline), appends
# them to a one-partition topic with mq-produce, checks once that
# `mq-consume -e` prints the file back byte for byte, then times, RUNS times
# each (default 5), with the log in the page cache and output to /dev/null:
#   cat         cat FILE > /dev/null        (the ceiling: the same bytes, no framing)
#   value       mq-consume -t T -e          (value per line)
#   json        mq-consume -t T -e -J       (JSON Lines envelope)
#   format      mq-consume -t T -e -f '%p %o %T %s\n'
# and prints per case the median wall time, messages/s, the ratio to cat's
# median wall time, the median CPU time (user + sys), CPU-bound messages/s
# (messages / CPU time: the rate on an idle core) and the peak RSS.
# Set MQ_BENCH_DIR to put the data elsewhere (default: a mktemp under /tmp).
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k, need_timed, run_timed
BUILD=${1:-${MQ_BIN:-build}}
N=${2:-10000000}
RUNS=${3:-5}
P="$BUILD/mq-produce"
C="$BUILD/mq-consume"
for tool in "$P" "$C"; do [ -x "$tool" ] || { echo "no $tool (build first)" >&2; exit 1; }; done
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
"$P" -C "$W/data" -t T --create -q "$W/in"
cat "$W/in" >/dev/null
"$C" -C "$W/data" -t T -e | cmp - "$W/in" || { echo "mq-consume output differs from the input" >&2; exit 1; }
echo "input: $N messages of 100 bytes, log $(du -sh "$W/data" | cut -f1); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"

time_one() {  # time_one NAME CMD...: appends "wall cpu rss_kb" to $W/NAME
  local name=$1; shift
  run_timed "$W/$name" "$@" >/dev/null
}

cases="cat value json format"
for run in $(seq 1 "$RUNS"); do
  time_one cat cat "$W/in"
  time_one value "$C" -C "$W/data" -t T -e
  time_one json "$C" -C "$W/data" -t T -e -J
  time_one format "$C" -C "$W/data" -t T -e -f '%p %o %T %s\n'
done

cat_wall=$(cut -d' ' -f1 "$W/cat" | median)
printf '%-8s %9s %12s %9s %9s %14s %9s\n' case wall_s msgs/s vs_cat cpu_s msgs/cpu_s rss_MB
for c in $cases; do
  wall=$(cut -d' ' -f1 "$W/$c" | median)
  cpu=$(cut -d' ' -f2 "$W/$c" | median)
  rss=$(cut -d' ' -f3 "$W/$c" | sort -n | tail -1)
  awk -v c="$c" -v w="$wall" -v cpu="$cpu" -v r="$rss" -v n="$N" -v cw="$cat_wall" 'BEGIN {
    printf "%-8s %9.2f %12.0f %9.2f %9.2f %14.0f %9.1f\n", c, w, (w > 0 ? n / w : 0),
      (w > 0 ? cw / w : 0), cpu, (cpu > 0 ? n / cpu : 0), r / 1024 }'
done
echo "(median of $RUNS runs; vs_cat = cat's wall time / this wall time; rss = peak)"
