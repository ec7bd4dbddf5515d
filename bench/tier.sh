#!/usr/bin/env bash
# Tier move (not a test): mq-compact --tier-dir --tier-after 0 --execute
# moving the sealed segments of one partition, against cp(1) of the same
# files to the same file system in the same run, and against cp followed
# by sync(1) of the copies: the ceiling of a durable copy (the move fsyncs
# each file it copies, R94; cp makes nothing durable). Goal >= 0.5 x cp.
# Each run starts from a fresh copy of the partition (not timed).
#
#   MQ_BIN=build [MQ_BIN_BEFORE=other-build] bench/tier.sh [RUNS] [MEGABYTES]
#
# Prints the medians of RUNS (default 5) wall times in bench/run.sh's table,
# with the ratios cp time / move time and cp+sync time / move time (1: as
# fast as the baseline). With MQ_BIN_BEFORE (another build's directory, an
# earlier version of mq-compact), its move is timed in the same runs too,
# and printed with the same baselines and the ratio of the two moves.
# MEGABYTES (default 128) of 1000-byte messages in 8 MiB segments. Set
# MQ_BENCH_DIR to put the data elsewhere (the tier directory is beside it:
# one file system).
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k
BIN=${MQ_BIN:?MQ_BIN is the build directory}
RUNS=${1:-5}
MB=${2:-128}
BEFORE=${MQ_BIN_BEFORE:-}
[ -x "$BIN/mq-compact" ] || { echo "no $BIN/mq-compact (build first)" >&2; exit 1; }
[[ -z $BEFORE || -x "$BEFORE/mq-compact" ]] || { echo "no $BEFORE/mq-compact" >&2; exit 1; }
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench-tier.XXXXXX")
trap 'rm -rf "$W"' EXIT

messages_1k "$MB" | "$BIN/mq-produce" -C "$W/template" -t b --create -X segment.bytes=8MiB -q
sealed=$(cd "$W/template/b-0" && ls -- *.log | sort | head -n -1 | sed 's/\.log$//')
files=()
for s in $sealed; do files+=("$s.log" "$s.index" "$s.timeindex"); done
bytes=$(cd "$W/template/b-0" && du -cb "${files[@]}" | tail -1 | cut -f1)

now() { date +%s%N; }
# move BUILD TIMES: one move with BUILD's mq-compact from a fresh copy of
# the partition, its wall time (us) appended to TIMES.
move() {
  rm -rf "$W/d" "$W/cold"
  cp -a "$W/template" "$W/d"
  mkdir "$W/cold"
  sync
  local s e moved
  s=$(now)
  "$1/mq-compact" -C "$W/d" -t b --tier-dir "$W/cold" --tier-after 0 --execute -q >/dev/null
  e=$(now)
  echo $(((e - s) / 1000)) >>"$2"
  moved=$(cd "$W/cold/b-0" && ls -- *.log | wc -l)
  [[ $moved == $(wc -w <<<"$sealed") ]] || { echo "moved $moved segments" >&2; exit 1; }
}
for run in $(seq 1 "$RUNS"); do
  rm -rf "$W/cp"
  mkdir "$W/cp"
  sync
  s=$(now)
  (cd "$W/template/b-0" && cp -- "${files[@]}" "$W/cp/")
  e=$(now)
  echo $(((e - s) / 1000)) >>"$W/cp.t"
  (cd "$W/cp" && sync -- "${files[@]}")
  e2=$(now)
  echo $(((e2 - s) / 1000)) >>"$W/cpsync.t"
  # The two builds alternate which goes first.
  if [[ -n $BEFORE && $((run % 2)) == 0 ]]; then move "$BEFORE" "$W/before.t"; fi
  move "$BIN" "$W/move.t"
  if [[ -n $BEFORE && $((run % 2)) == 1 ]]; then move "$BEFORE" "$W/before.t"; fi
done
cp_t=$(median <"$W/cp.t")
cpsync_t=$(median <"$W/cpsync.t")
move_t=$(median <"$W/move.t")
before_t=$([[ -n $BEFORE ]] && median <"$W/before.t" || echo 0)
awk -v cp="$cp_t" -v cps="$cpsync_t" -v mv="$move_t" -v bf="$before_t" -v b="$bytes" \
  -v n="$(wc -w <<<"$sealed")" -v runs="$RUNS" 'BEGIN {
  row = "%-46s %-18s %-22s %8.2f  %s\n"
  printf row, "tier move, " n " segments " int(b / 1048576) " MiB (med " runs ")",
         sprintf("%.3f s", mv / 1e6), sprintf("cp %.3f s", cp / 1e6), cp / mv, ">= 0.5"
  printf row, "  against cp + sync (a durable copy: ceiling)",
         sprintf("%.3f s", mv / 1e6), sprintf("cp+sync %.3f s", cps / 1e6), cps / mv, "-"
  if (bf > 0) {
    printf row, "  before (MQ_BIN_BEFORE), against cp", sprintf("%.3f s", bf / 1e6),
           sprintf("cp %.3f s", cp / 1e6), cp / bf, ">= 0.5"
    printf row, "  before, against cp + sync", sprintf("%.3f s", bf / 1e6),
           sprintf("cp+sync %.3f s", cps / 1e6), cps / bf, "-"
    printf row, "  this build against before", sprintf("%.3f s", mv / 1e6),
           sprintf("before %.3f s", bf / 1e6), bf / mv, "-"
  }
}'
