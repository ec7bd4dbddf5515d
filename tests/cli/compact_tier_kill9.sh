#!/usr/bin/env bash
# mq-compact killed (SIGKILL) at random points of tier moves (format-spec/
# retention.md R94): after each kill the data directory verifies clean
# (mq-inspect --verify exit 0) and every record of every partition reads
# exactly once, in order, without a gap; a complete run then leaves each
# partition's sealed segments in the tier and only its active segment
# local, with no copy left behind. Seeded: each seed is printed, and
# MQ_TIER_KILL_SEEDS (default 10) runs, from MQ_TIER_KILL_FIRST_SEED
# (default 1), set the sample; the soak is
#   MQ_TIER_KILL_SEEDS=50 MQ_BIN=build MQ_SRC=. bash tests/cli/compact_tier_kill9.sh
source "$(dirname "$0")/lib/common.bash"

K="$BIN/mq-compact"
D="$WORK/data"
COLD="$WORK/cold"
export MQ_DIR="$D"
SEEDS=${MQ_TIER_KILL_SEEDS:-10}
FIRST=${MQ_TIER_KILL_FIRST_SEED:-1}
PARTS=4
PER=300  # messages per partition

logs() { (cd "$1" && ls -- *.log 2>/dev/null | sort) || true; }
check_all() {
  "$C" -t k -p "$1" -e -f '%o %s\n' | awk -v per=$PER -v what="$2 k-$1" '
    NR == 1 { if ($1 != 0) { print what ": starts at " $1; exit 1 } prev = -1 }
    { if ($2 != "m" $1 || $1 != prev + 1) { print what ": bad " $0; exit 1 } prev = $1 }
    END { if (prev != per - 1) { print what ": ends at " prev; exit 1 } }' || fail "$2"
}

for seed in $(seq "$FIRST" $((FIRST + SEEDS - 1))); do
  echo "seed $seed"
  RANDOM=$seed
  rm -rf "$D" "$COLD"
  mkdir "$COLD"
  declare -A all=()
  for p in $(seq 0 $((PARTS - 1))); do
    seq 0 $((PER - 1)) | sed 's/^/m/' |
      "$P" -t k --create --partitions $PARTS -X segment.bytes=1024 -p "$p" \
        --batch-bytes $((100 + RANDOM % 300)) -q
    all[$p]="$(logs "$D/k-$p")"
  done
  # A run over these partitions takes tens of milliseconds (an fsync per file).
  delay_us=$(((RANDOM * 32768 + RANDOM) % 80000))
  "$K" -t k --tier-dir "$COLD" --tier-after 0 --execute -q >/dev/null 2>&1 &
  kpid=$!
  sleep "$(printf '0.%06d' "$delay_us")"
  kill -9 $kpid 2>/dev/null || true
  wait $kpid 2>/dev/null || true

  moved=0 tmps=0 both=0
  for p in $(seq 0 $((PARTS - 1))); do
    [[ -d "$COLD/k-$p" ]] || continue
    moved=$((moved + $(logs "$COLD/k-$p" | wc -l)))
    tmps=$((tmps + $(ls "$COLD/k-$p" | grep -c '\.tmp$' || true)))
    both=$((both + $(comm -12 <(logs "$D/k-$p") <(logs "$COLD/k-$p") | wc -l)))
  done
  echo "seed $seed: killed after ${delay_us}us: $moved segments in the tier, $tmps copies unpublished, $both in both"
  run "$INSPECT" --verify -C "$D" k
  expect_rc 0 "seed $seed: verify after kill -9 at ${delay_us}us"
  for p in $(seq 0 $((PARTS - 1))); do check_all "$p" "seed $seed after the kill"; done
  # A complete run finishes the work.
  run "$K" -t k --tier-dir "$COLD" --tier-after 0 --execute -q
  expect_rc 0 "seed $seed: the run after the kill"
  for p in $(seq 0 $((PARTS - 1))); do
    expect_eq "seed $seed: k-$p local" "$(tail -1 <<<"${all[$p]}")" "$(logs "$D/k-$p")"
    expect_eq "seed $seed: k-$p tier" "$(head -n -1 <<<"${all[$p]}")" "$(logs "$COLD/k-$p")"
    [[ -z "$(ls "$COLD/k-$p" | grep '\.tmp$' || true)" ]] || fail "seed $seed: copies left in k-$p"
    [[ -z "$(ls "$D/k-$p" | grep -E '\.(index|timeindex)$' | grep -vF "$(tail -1 <<<"${all[$p]}" | cut -d. -f1)" || true)" ]] ||
      fail "seed $seed: local index files of tiered segments left in k-$p"
    check_all "$p" "seed $seed after the second run"
  done
  run "$INSPECT" --verify -C "$D" k
  expect_rc 0 "seed $seed: verify after the second run"
done
echo ok
