#!/usr/bin/env bash
# Consumers reading while producers append: every read (-e snapshots and a
# follower) is an exact prefix of what was appended, in order, with no
# partial batch and no gap, whatever the moment it looks.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"

TOTAL=60000
"$BIN/mq-produce" -q -t t --create </dev/null
"$BIN/mq-consume" -t t -c "$TOTAL" >"$WORK/follow.out" 2>"$WORK/follow.err" &
follower=$!
PIDS+=("$follower")
# Appends 1..TOTAL in runs of different sizes (batches of many sizes, with
# small batches so that appends are frequent).
(
  i=1
  for chunk in 1 7 300 2000 5 12000 1 45686; do
    seq "$i" $((i + chunk - 1)) | "$BIN/mq-produce" -q -t t --batch-bytes 512
    i=$((i + chunk))
  done
  seq "$i" "$TOTAL" | "$BIN/mq-produce" -q -t t
) &
producer=$!
PIDS+=("$producer")

# While it runs, snapshots with -e must each be 1..k for some k.
snapshots=0
while kill -0 "$producer" 2>/dev/null; do
  "$BIN/mq-consume" -t t -e >"$WORK/snap"
  n=$(wc -l <"$WORK/snap")
  if (( n > 0 )); then
    cmp -s "$WORK/snap" <(seq 1 "$n") || fail "snapshot of $n messages is not 1..$n"
  fi
  snapshots=$((snapshots + 1))
done
wait "$producer" || fail "producer failed"
for _ in $(seq 1 200); do kill -0 "$follower" 2>/dev/null || break; sleep 0.05; done
wait "$follower" || fail "follower exited non-zero: $(cat "$WORK/follow.err")"
cmp -s "$WORK/follow.out" <(seq 1 "$TOTAL") || fail "follower did not print 1..$TOTAL in order"
cmp -s <("$BIN/mq-consume" -t t -e) <(seq 1 "$TOTAL") || fail "final read is not 1..$TOTAL"
echo "ok ($snapshots snapshots)"
