#!/usr/bin/env bash
# mq-compact killed (SIGKILL) at random points of a retention run
# (format-spec/retention.md R73, R77): after each kill the data directory
# verifies clean (mq-inspect --verify exit 0), every partition reads intact
# and without a gap from its log start, holds at least the segments
# retention must keep, and a second run leaves exactly the model's segment
# set. Seeded: each seed is printed, and MQ_COMPACT_KILL_SEEDS (default 10)
# runs, from MQ_COMPACT_KILL_FIRST_SEED (default 1), set the sample; the
# soak is
#   MQ_COMPACT_KILL_SEEDS=500 MQ_BIN=build MQ_SRC=. bash tests/cli/compact_kill9.sh
source "$(dirname "$0")/lib/common.bash"

K="$BIN/mq-compact"
D="$WORK/data"
export MQ_DIR="$D"
SEEDS=${MQ_COMPACT_KILL_SEEDS:-10}
FIRST=${MQ_COMPACT_KILL_FIRST_SEED:-1}
PARTS=6
PER=300  # messages per partition

logs() { (cd "$D/$1" && ls -- *.log 2>/dev/null | sort) || true; }

# The model (R75): the segments retention.bytes keeps, from a listing of
# the partition before the run (oldest first while what stays >= limit).
model_kept() {
  local dir="$1" limit="$2" files total=0 f s last dropping=1
  files="$(logs "$dir")"
  last="$(tail -1 <<<"$files")"
  for f in $files; do total=$((total + $(stat -c %s "$D/$dir/$f"))); done
  for f in $files; do
    s=$(stat -c %s "$D/$dir/$f")
    if (( dropping )) && [[ $f != "$last" ]] && (( total - s >= limit )); then
      total=$((total - s))
      continue
    fi
    dropping=0
    echo "$f"
  done
}

for seed in $(seq "$FIRST" $((FIRST + SEEDS - 1))); do
  echo "seed $seed"
  RANDOM=$seed
  rm -rf "$D"
  limit=$((1000 + RANDOM % 3000))
  declare -A kept=()
  for p in $(seq 0 $((PARTS - 1))); do
    seq 0 $((PER - 1)) | sed 's/^/m/' |
      "$P" -t k --create --partitions $PARTS -X segment.bytes=1024 -X retention.bytes=$limit \
        -p "$p" --batch-bytes $((100 + RANDOM % 300)) -q
    kept[$p]="$(model_kept "k-$p" "$limit")"
  done
  # A run over these partitions takes tens of milliseconds.
  delay_us=$(((RANDOM * 32768 + RANDOM) % 60000))
  "$K" -t k --execute --delete-delay-ms 0 -q >/dev/null 2>&1 &
  kpid=$!
  sleep "$(printf '0.%06d' "$delay_us")"
  kill -9 $kpid 2>/dev/null || true
  wait $kpid 2>/dev/null || true

  done_parts=0
  for p in $(seq 0 $((PARTS - 1))); do
    [[ -e "$D/k-$p/00000000000000000000.log" ]] || done_parts=$((done_parts + 1))
  done
  echo "seed $seed: killed after ${delay_us}us, the first segment gone from $done_parts of $PARTS partitions"
  run "$INSPECT" --verify -C "$D" k
  expect_rc 0 "seed $seed: verify after kill -9 at ${delay_us}us"
  for p in $(seq 0 $((PARTS - 1))); do
    now="$(logs "k-$p")"
    # The segments retention keeps are all there ...
    missing="$(comm -23 <(echo "${kept[$p]}") <(echo "$now"))"
    [[ -z "$missing" ]] || fail "seed $seed: k-$p lost $missing (kept: ${kept[$p]})"
    # ... and every message from the log start reads intact, without a gap.
    "$C" -t k -p "$p" -e -f '%o %s\n' | awk -v per=$PER -v what="seed $seed k-$p" '
      NR == 1 { prev = $1 - 1 }
      { if ($2 != "m" $1 || $1 != prev + 1) { print what ": bad " $0; exit 1 } prev = $1 }
      END { if (prev != per - 1) { print what ": ends at " prev; exit 1 } }' || fail "seed $seed"
  done
  # A complete run finishes the work: exactly the model's segments.
  run "$K" -t k --execute --delete-delay-ms 0 -q
  expect_rc 0 "seed $seed: the run after the kill"
  run "$K" -t k --execute --delete-delay-ms 0 -q
  expect_rc 0 "seed $seed: the purge"
  for p in $(seq 0 $((PARTS - 1))); do
    expect_eq "seed $seed: k-$p segments" "${kept[$p]}" "$(logs "k-$p")"
    [[ -z "$(ls "$D/k-$p" | grep '\.deleted$' || true)" ]] || fail "seed $seed: .deleted left in k-$p"
    first="$("$C" -t k -p "$p" -e -c 1 -f '%o')"
    expect_eq "seed $seed: k-$p log start" "$((10#$(head -1 <<<"${kept[$p]}" | cut -d. -f1)))" "$first"
  done
  run "$INSPECT" --verify -C "$D" k
  expect_rc 0 "seed $seed: verify after the second run"
done
echo ok
