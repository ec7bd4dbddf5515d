#!/usr/bin/env bash
# The idempotent producer's headline: kill -9 an `mq-produce --producer-id`
# run at a random moment, run it again with the same name and input, and
# every input message is in the log exactly once, in input order per
# partition. Seeds are printed; rerun one with SEED=<n>.
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
ROUNDS=${ROUNDS:-6}
N=300000

seq -f 'message %.0f with some padding to make it longer' 1 "$N" >"$T/in"
# Keyed input: key<i%7> TAB line.
awk '{print "key" (NR % 7) "\t" $0}' "$T/in" >"$T/keyed"

check() {  # check DIR TOPIC PARTITIONS INPUT-VALUES
  local dir=$1 topic=$2 parts=$3 values=$4
  : >"$T/all"
  for p in $(seq 0 $((parts - 1))); do
    "$C" -C "$dir" -t "$topic" -p "$p" -e -q >"$T/part"
    # Input order within the partition: the values are numbered.
    awk '{print $2}' "$T/part" | sort -c -n 2>/dev/null || fail "$topic-$p: out of input order"
    cat "$T/part" >>"$T/all"
  done
  sort "$T/all" >"$T/got"
  sort "$values" >"$T/want"
  if ! cmp -s "$T/want" "$T/got"; then
    echo "lost: $(comm -23 "$T/want" "$T/got" | wc -l)" \
      "duplicated or extra: $(comm -13 "$T/want" "$T/got" | wc -l)" >&2
    return 1
  fi
}

midway=0  # rounds in which a kill landed in the middle of the input
for round in $(seq 1 "$ROUNDS"); do
  seed=${SEED:-$((RANDOM * 32768 + RANDOM))}
  RANDOM=$seed
  D="$T/data.$round"
  parts=$((1 + RANDOM % 3))
  mode=$((RANDOM % 2))        # 0: unkeyed (index mod n), 1: keyed
  fsync=none
  [ $((RANDOM % 2)) = 0 ] || fsync=batch
  input=$T/in flags=()
  [ "$mode" = 1 ] && { input=$T/keyed; flags=(-K '\t'); }
  echo "round $round: seed $seed, $parts partitions, keyed=$mode, fsync=$fsync"
  "$P" -C "$D" -t t --create --partitions "$parts" -q </dev/null
  kills=0
  for attempt in 1 2 3; do
    # Small batches and appends make a run last long enough to be killed.
    "$P" -C "$D" -t t --producer-id ingest-7 -q "${flags[@]}" --fsync "$fsync" \
      --batch-bytes 512 --append-bytes 1024 "$input" &
    pid=$!
    # Kill at a random moment within the first ~0.8 s of the run.
    sleep "0.$(printf '%03d' $((RANDOM % 800)))"
    if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
    wait "$pid" 2>/dev/null || true
  done
  # The final run completes; it must skip what the killed runs appended.
  "$P" -C "$D" -t t --producer-id ingest-7 -v "${flags[@]}" --fsync "$fsync" "$input" \
    2>"$T/summary" || fail "seed $seed: the re-run failed: $(cat "$T/summary")"
  cat "$T/summary"
  skipped=$(grep -o '[0-9]* skipped' "$T/summary" | cut -d' ' -f1)
  [ -n "$skipped" ] && [ "$skipped" -lt "$N" ] && midway=$((midway + 1))
  values=$input
  [ "$mode" = 1 ] && { cut -f2- "$T/keyed" >"$T/keyed.values"; values=$T/keyed.values; }
  check "$D" t "$parts" "$values" || fail "seed $seed: not exactly once after $kills kills"
  # A further run appends nothing.
  "$P" -C "$D" -t t --producer-id ingest-7 -q "${flags[@]}" "$input"
  check "$D" t "$parts" "$values" || fail "seed $seed: a complete re-run appended again"
  rm -rf "$D"
done
# The test only means something if kills interrupt runs part-way.
[ "$midway" -gt 0 ] || fail "no kill landed in the middle of a run: make runs slower"
echo "ok: produce_resume ($ROUNDS rounds, $midway resumed part-way)"
