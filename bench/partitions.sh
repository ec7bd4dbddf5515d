#!/usr/bin/env bash
# Many partitions (not a test): keyed mq-produce of 1 M messages into 1,000
# partitions against the same into 1 partition, measured in the same run,
# and the peak RSS of the same into 10,000 partitions.
#
#   MQ_BIN=build-bench bench/partitions.sh [MESSAGES] [RUNS]
#
# The input is a file in the page cache: "k<i>\tv<i>" lines, -K '\t'. Two
# cases: into a topic whose partitions were written before (the runs append
# to the same topic), and into a freshly created, empty topic (the run
# creates every partition's state and segment files, without fsync under
# the default --fsync none: segment.md R34). Prints the medians of RUNS
# (default 5) wall times in bench/run.sh's table; the last column is the
# target (keyed produce into 1,000 partitions within 3x of 1 partition).
# A third case appends to a topic in steady use: written 12 times before,
# so every partition's active segment holds more than 256 KiB (past
# producer.md §10.2's snapshot threshold).
# Set MQ_BENCH_DIR to put the data elsewhere (default: a mktemp under /tmp).
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k, need_timed, run_timed
BIN=${MQ_BIN:?MQ_BIN is the build directory}
N=${1:-1000000}
RUNS=${2:-5}
P="$BIN/mq-produce"
[ -x "$P" ] || { echo "no $P (build first)" >&2; exit 1; }
need_timed "$BIN"
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench-parts.XXXXXX")
trap 'rm -rf "$W"' EXIT

seq 1 "$N" | awk '{printf "k%d\tv%d\n", $1, $1}' >"$W/in"
cat "$W/in" >/dev/null  # into the page cache

# time_one NAME PARTITIONS fresh|written: one keyed run into topic
# T<PARTITIONS> of $W/<fresh|written>, created empty first when fresh;
# appends "wall cpu rss_kb" to $W/NAME.
time_one() {
  local name=$1 parts=$2 mode=$3
  [[ $mode == fresh ]] && rm -rf "$W/fresh"
  [[ $mode == fresh ]] &&
    "$P" -C "$W/fresh" -t "T$parts" --create --partitions "$parts" -q </dev/null
  sync
  # The wall time with no wrapper process, and the peak RSS (run_timed).
  run_timed "$W/$name" "$P" -C "$W/$mode" -t "T$parts" -K '\t' -q "$W/in"
}

# Written once before the runs that append to them; "aged" 12 times.
"$P" -C "$W/written" -t T1 --create --partitions 1 -K '\t' -q "$W/in"
"$P" -C "$W/written" -t T1000 --create --partitions 1000 -K '\t' -q "$W/in"
"$P" -C "$W/aged" -t T1 --create --partitions 1 -q </dev/null
"$P" -C "$W/aged" -t T1000 --create --partitions 1000 -q </dev/null
for i in $(seq 1 12); do
  "$P" -C "$W/aged" -t T1 -K '\t' -q "$W/in"
  "$P" -C "$W/aged" -t T1000 -K '\t' -q "$W/in"
done
for run in $(seq 1 "$RUNS"); do
  time_one w1 1 written
  time_one w1000 1000 written
  time_one f1 1 fresh
  time_one f1000 1000 fresh
  time_one a1 1 aged
  time_one a1000 1000 aged
done
time_one p10000 10000 fresh

w1=$(cut -d' ' -f1 "$W/w1" | median)
w1000=$(cut -d' ' -f1 "$W/w1000" | median)
f1=$(cut -d' ' -f1 "$W/f1" | median)
f1000=$(cut -d' ' -f1 "$W/f1000" | median)
a1=$(cut -d' ' -f1 "$W/a1" | median)
a1000=$(cut -d' ' -f1 "$W/a1000" | median)
rss=$(cut -d' ' -f3 "$W/p10000")
awk -v n="$N" -v w1="$w1" -v w1000="$w1000" -v f1="$f1" -v f1000="$f1000" -v a1="$a1" -v a1000="$a1000" -v rss="$rss" \
    -v runs="$RUNS" 'BEGIN {
  printf "%-46s %-18s %-22s %8.2f  %s\n", "produce " n " keyed, 1,000 partitions (med " runs ")",
         sprintf("%.3f s", w1000), sprintf("1 partition %.3f s", w1), w1000 / w1, "<= 3"
  printf "%-46s %-18s %-22s %8.2f  %s\n", "  the same into new partitions (first write)",
         sprintf("%.3f s", f1000), sprintf("1 partition %.3f s", f1), f1000 / f1, "-"
  printf "%-46s %-18s %-22s %8.2f  %s\n", "  the same into partitions of 256 KiB and more",
         sprintf("%.3f s", a1000), sprintf("1 partition %.3f s", a1), a1000 / a1, "<= 3"
  printf "%-46s %-18s %-22s %8.2f  %s\n", "produce " n " keyed, 10,000 partitions: peak RSS",
         sprintf("%.1f MB", rss / 1024), "64 MB", rss / 1024 / 64, "<= 1"
}'
