#!/usr/bin/env bash
# Several mq-produce processes on one topic at once: every message lands
# exactly once and whole, offsets are gap-free, and each producer's order is
# kept within each partition. One partition, then four with keys.
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
D="$T/data"
PRODUCERS=8
PER=5000

run_case() {  # run_case TOPIC PARTITIONS MODE: MODE is plain, keyed or idempotent
  local topic=$1 parts=$2 mode=$3
  "$P" -C "$D" -t "$topic" --create --partitions "$parts" -q </dev/null
  local pids=() flags
  for i in $(seq 1 "$PRODUCERS"); do
    # Values "p<i> <n> <padding>"; keyed modes prefix "key<n%5><TAB>".
    seq 1 "$PER" | awk -v i="$i" '{printf "p%d %d %s\n", i, $1, substr("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1, $1 % 40)}' >"$T/want.$i"
    flags=()
    case $mode in
      plain) cp "$T/want.$i" "$T/in.$i" ;;
      keyed | idempotent)
        awk '{print "key" ($2 % 5) "\t" $0}' "$T/want.$i" >"$T/in.$i"
        flags=(-K '\t') ;;
    esac
    [ "$mode" = idempotent ] && flags+=(--producer-id "conc-$i" --fsync batch)
    # Small batches and appends, so the processes' appends interleave.
    "$P" -C "$D" -t "$topic" -q "${flags[@]}" --batch-bytes 512 --append-bytes 512 "$T/in.$i" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || fail "$topic: a producer failed"; done
  for p in $(seq 0 $((parts - 1))); do
    "$C" -C "$D" -t "$topic" -p "$p" -e -q -f '%o %s\n' >"$T/out.$p"
    # Offsets 0..n-1, each once.
    local n
    n=$(wc -l <"$T/out.$p")
    [ "$(cut -d' ' -f1 "$T/out.$p" | tr '\n' ' ')" = "$(seq 0 $((n - 1)) | tr '\n' ' ')" ] ||
      fail "$topic-$p: offsets not gap-free"
    # Each producer's messages in increasing order within the partition.
    cut -d' ' -f2,3 "$T/out.$p" | awk '
      { if (($1 in last) && $2 <= last[$1]) { print "order: " $0; bad = 1 } last[$1] = $2 }
      END { exit bad }' || fail "$topic-$p: a producer's order is broken"
  done
  # Every message exactly once, whole.
  cat "$T"/out.* | cut -d' ' -f2- | sort >"$T/got"
  cat "$T"/want.* | sort >"$T/want"
  cmp -s "$T/want" "$T/got" || { diff "$T/want" "$T/got" | head; fail "$topic: messages lost or duplicated"; }
  rm -f "$T"/out.* "$T"/want.* "$T"/in.*
  echo "ok: $PRODUCERS producers x $PER messages on $topic ($parts partitions, $mode)"
}

run_case one 1 plain
run_case four 4 keyed
run_case idem 3 idempotent
