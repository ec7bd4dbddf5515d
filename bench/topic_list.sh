#!/usr/bin/env bash
# Topic listing (not a test): mq-topic list and list --json of a data
# directory of 10,000 partitions (10 topics of 1,000), each partition
# written once (a segment and a state file), against the target of 1 s.
#
#   MQ_BIN=build bench/topic_list.sh [RUNS]
#
# Prints the medians of RUNS (default 5) wall times in bench/run.sh's table.
# The page cache is warm (a listing run from cron finds it so, mostly): what
# is measured is mq-topic's work, directory listings, stats and the 80-byte
# state files. Set MQ_BENCH_DIR to put the data elsewhere.
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median
BIN=${MQ_BIN:?MQ_BIN is the build directory}
RUNS=${1:-5}
T="$BIN/mq-topic"
[ -x "$T" ] || { echo "no $T (build first)" >&2; exit 1; }
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench-topics.XXXXXX")
trap 'rm -rf "$W"' EXIT

seq 1 3000 | awk '{printf "k%d\tv%d\n", $1, $1}' >"$W/in"
for t in $(seq 0 9); do
  "$T" -C "$W/d" create "topic$t" --partitions 1000 >/dev/null
  "$BIN/mq-produce" -C "$W/d" -t "topic$t" -K '\t' -q "$W/in"
done
parts=$(find "$W/d" -maxdepth 1 -name 'topic*-*' | wc -l)
"$T" -C "$W/d" list >/dev/null  # warm

now() { date +%s%N; }
for run in $(seq 1 "$RUNS"); do
  s=$(now); "$T" -C "$W/d" list >"$W/out"; e=$(now)
  echo $(((e - s) / 1000)) >>"$W/text"
  s=$(now); "$T" -C "$W/d" list --json >"$W/out.json"; e=$(now)
  echo $(((e - s) / 1000)) >>"$W/json"
done
rows=$(($(wc -l <"$W/out") - 1))
[[ $rows == "$parts" ]] || { echo "list printed $rows rows for $parts partitions" >&2; exit 1; }
text=$(median <"$W/text")
json=$(median <"$W/json")
awk -v p="$parts" -v text="$text" -v json="$json" -v runs="$RUNS" 'BEGIN {
  printf "%-46s %-18s %-22s %8.2f  %s\n", "mq-topic list, " p " partitions (med " runs ")",
         sprintf("%.3f s", text / 1e6), "1 s", text / 1e6, "<= 1"
  printf "%-46s %-18s %-22s %8.2f  %s\n", "  the same with --json",
         sprintf("%.3f s", json / 1e6), "1 s", json / 1e6, "<= 1"
}'
