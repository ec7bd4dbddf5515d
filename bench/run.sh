#!/usr/bin/env bash
# Builds the benchmarks in Release (build-bench/) and prints one table.
# Every ratio is against a baseline measured in the same run. Never run in
# CI: timings depend on the machine and its load.
#
#   bench/run.sh                 default sizes (a few minutes)
#   MQ_BENCH_BYTES=10G bench/run.sh     the memory figure at 10 GB
#   MQ_BENCH_DIR=/mnt/disk bench/run.sh  put the scratch files elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${MQ_BENCH_BUILD:-build-bench}
JOBS=${MQ_JOBS:-$(nproc)}

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
mapfile -t targets < <(cd bench && for f in *.cc; do echo "bench-${f%.cc}"; done)
# The tools too: the shell benchmarks below (bench/*.sh) run them.
targets+=(mq-produce mq-consume mq-inspect mq-isr mq-replicate mq-compact)
ninja -C "$BUILD" -j"$JOBS" "${targets[@]}" >/dev/null

printf '%-46s %-18s %-22s %8s  %s\n' "benchmark" "measured" "baseline" "ratio" "target"
printf '%s\n' "$(printf -- '-%.0s' {1..110})"
"$BUILD/bench/bench-crc"
"$BUILD/bench/bench-log" --bytes="${MQ_BENCH_LOG_BYTES:-256M}"
"$BUILD/bench/bench-open_seek"
"$BUILD/bench/bench-retention"
"$BUILD/bench/bench-open_unsynced" --bytes="${MQ_BENCH_UNSYNCED_BYTES:-1G}"
"$BUILD/bench/bench-fsync"
"$BUILD/bench/bench-memory" --bytes="${MQ_BENCH_BYTES:-1G}"
MQ_BIN=$PWD/$BUILD "$BUILD/bench/bench-group"
# Shell benchmarks others add: bench/*.sh, run with MQ_BIN set.
for script in bench/*.sh; do
  [[ $script == bench/run.sh ]] && continue
  [[ -e $script ]] || continue
  MQ_BIN=$PWD/$BUILD bash "$script"
done
