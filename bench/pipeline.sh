#!/usr/bin/env bash
# mq-consume --to-topic (an effectively-once pipeline) against plain
# --exec with the same handler, measured in the same run (not a test).
#
#   bench/pipeline.sh [BUILD_DIR] [MESSAGES] [RUNS]   (BUILD_DIR default $MQ_BIN)
#
# Appends MESSAGES (default 2000) 100-byte messages to a 2-partition topic,
# then, RUNS times (default 5), back to back, each with a new group:
#   exec cat          mq-consume -G eN -t S -e --exec cat            (output to /dev/null)
#   pipeline cat      mq-consume -G pN -t S -e --to-topic oN --exec cat
#   pipeline --fsync  the same with --fsync batch (one fsync per output batch)
#   ... --parallel 2  both pipelines again with --parallel 2 (the transforms of
#                     the 2 source partitions at once)
# and prints the median messages/s of each and its ratio to exec cat's.
# Both run one handler process per message: the ratio is what the pipeline
# adds (capturing the output, one append per message, the tail read at start).
set -euo pipefail
BUILD=${1:-${MQ_BIN:-build}}
N=${2:-2000}
RUNS=${3:-5}
P="$BUILD/mq-produce"
C="$BUILD/mq-consume"
for tool in "$P" "$C"; do [ -x "$tool" ] || { echo "no $tool (build first)" >&2; exit 1; }; done
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench-pipeline.XXXXXX")
trap 'rm -rf "$W"' EXIT
export MQ_DIR="$W/data"

awk -v n="$N" 'BEGIN {
  pad = ""
  while (length(pad) < 89) pad = pad "the quick brown fox jumps over the lazy dog "
  pad = substr(pad, 1, 89)
  for (i = 0; i < n; i++) printf "%010d%s\n", i, pad
}' | "$P" -t S --create --partitions 2 -q
"$C" -t S -e >/dev/null  # page cache

seconds() {  # seconds CMD...: wall time of CMD, output to /dev/null
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}
exec_s=() pipe_s=() sync_s=() ppar_s=() spar_s=()
for r in $(seq 1 "$RUNS"); do
  exec_s+=("$(seconds "$C" -t S -G "e$r" -e -q --exec cat)")
  pipe_s+=("$(seconds "$C" -t S -G "p$r" -e -q --to-topic "o$r" --exec cat)")
  sync_s+=("$(seconds "$C" -t S -G "f$r" -e -q --to-topic "f$r" --fsync batch --exec cat)")
  ppar_s+=("$(seconds "$C" -t S -G "q$r" -e -q --to-topic "q$r" --parallel 2 --exec cat)")
  spar_s+=("$(seconds "$C" -t S -G "s$r" -e -q --to-topic "s$r" --fsync batch --parallel 2 --exec cat)")
  for o in "o$r" "q$r" "s$r"; do
    [[ $("$C" -t "$o" -e | wc -l) == "$N" ]] || { echo "pipeline run $r: wrong output in $o" >&2; exit 1; }
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
e=$(median "${exec_s[@]}") p=$(median "${pipe_s[@]}") f=$(median "${sync_s[@]}")
pp=$(median "${ppar_s[@]}") sp=$(median "${spar_s[@]}")

echo "mq-consume --to-topic: $N 100-byte messages, 2 partitions, median of $RUNS runs; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-60s %9s %10s %9s\n' case wall_s msgs/s vs_exec
row() { awk -v c="$1" -v n="$N" -v w="$2" -v we="$e" 'BEGIN { printf "%-60s %9.3f %10.0f %9.3f\n", c, w, n / w, we / w }'; }
row "-G --exec cat (baseline)" "$e"
row "-G --to-topic OUT --exec cat" "$p"
row "-G --to-topic OUT --fsync batch --exec cat" "$f"
row "-G --to-topic OUT --parallel 2 --exec cat" "$pp"
row "-G --to-topic OUT --fsync batch --parallel 2 --exec cat" "$sp"
