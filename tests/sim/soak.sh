#!/usr/bin/env bash
# A long simulator run: N schedules (default 1,000,000) split over MQ_JOBS
# processes (default 2), each its own range of seeds, so any failure's seed
# replays alone. Builds mq-sim first. Extra arguments go to every mq-sim
# (say --plant no_epoch_truncation, or --independent-files). It runs the
# model alone (--model-log: a hundred times the real log's speed); pass
# --real-log for the log that ships.
#
#   tests/sim/soak.sh                      1,000,000 schedules
#   tests/sim/soak.sh 50000 --start 9000000
set -euo pipefail
cd "$(dirname "$0")/../.."
TOTAL=${1:-1000000}
shift || true
START=1
if [[ ${1:-} == --start ]]; then
  START=$2
  shift 2
fi
JOBS=${MQ_JOBS:-2}
BUILD=${MQ_BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD" -j"$JOBS" mq-sim >/dev/null
per=$(( (TOTAL + JOBS - 1) / JOBS ))
pids=()
for ((j = 0; j < JOBS; j++)); do
  first=$((START + j * per))
  count=$per
  (( j == JOBS - 1 )) && count=$((TOTAL - j * per))
  (( count > 0 )) || continue
  "$BUILD/tests/sim/mq-sim" --schedules "$count" --start-seed "$first" --model-log "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit $status
