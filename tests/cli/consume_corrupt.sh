#!/usr/bin/env bash
# A batch that fails its CRC stops mq-consume with exit 65 and an error naming
# the file, the byte position and the rule; --skip-corrupt reports each skip on
# stderr, goes on, and ends with exit 1.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"

# Three batches of the same size: one mq-produce run each.
"$BIN/mq-produce" -q -t c --create </dev/null
for m in message-1 message-2 message-3; do
  printf '%s\n' "$m" | "$BIN/mq-produce" -q -t c -k key
done
SEG="$MQ_DIR/c-0/00000000000000000000.log"
SIZE=$(stat -c %s "$SEG")
BATCH=$((SIZE / 3))
(( BATCH * 3 == SIZE )) || fail "batches are not the same size ($SIZE bytes)"
run "$C" -t c -e
[[ $rc == 0 && $(wc -l <"$WORK/out") == 3 ]] || fail "intact topic: exit $rc, $(cat "$WORK/out")"

# Flip one byte inside the second batch's records (covered by the CRC).
flip_byte "$SEG" $((BATCH + BATCH - 5))

run "$C" -t c -e
[[ $rc == 65 ]] || fail "corrupt batch: exit $rc, want 65 (stderr: $(cat "$WORK/err"))"
[[ "$(cat "$WORK/out")" == "message-1" ]] || fail "corrupt batch: output before it: $(cat "$WORK/out")"
grep -q "00000000000000000000.log" "$WORK/err" || fail "error does not name the file: $(cat "$WORK/err")"
grep -q "position $BATCH\b" "$WORK/err" || fail "error does not name byte position $BATCH: $(cat "$WORK/err")"
grep -q "R4" "$WORK/err" || fail "error does not name rule R4: $(cat "$WORK/err")"
[[ $(wc -l <"$WORK/err") == 1 ]] || fail "more than one error line: $(cat "$WORK/err")"

# The same in follow mode, in -J and with the other outputs: stop with 65.
for args in "" "-J -e" "-f %s -e" "-p 0 -c 5"; do
  # shellcheck disable=SC2086
  run "$C" -t c $args
  [[ $rc == 65 ]] || fail "corrupt batch with '$args': exit $rc, want 65"
done

# --skip-corrupt: report the skip, deliver the rest, end with exit 1.
run "$C" -t c -e --skip-corrupt
[[ $rc == 1 ]] || fail "--skip-corrupt: exit $rc, want 1 (stderr: $(cat "$WORK/err"))"
[[ "$(cat "$WORK/out")" == "$(printf 'message-1\nmessage-3')" ]] ||
  fail "--skip-corrupt: output $(cat "$WORK/out")"
grep -q "skipping corrupt batch" "$WORK/err" || fail "--skip-corrupt: no report: $(cat "$WORK/err")"
grep -q "R4" "$WORK/err" && grep -q "position $BATCH\b" "$WORK/err" ||
  fail "--skip-corrupt: report lacks rule or offset: $(cat "$WORK/err")"
grep -q "skipped offsets 1..1 of topic c partition 0" "$WORK/err" ||
  fail "--skip-corrupt: no count of the offsets skipped: $(cat "$WORK/err")"
grep -q "skipped 1 corrupt batch (1 offsets not delivered)" "$WORK/err" ||
  fail "--skip-corrupt: no summary: $(cat "$WORK/err")"
# -q silences the report, not the data.
run "$C" -t c -e --skip-corrupt -q
[[ $rc == 1 && ! -s "$WORK/err" && $(wc -l <"$WORK/out") == 2 ]] || fail "--skip-corrupt -q"

# A corrupt last batch: the messages before it are delivered, then exit 65.
flip_byte "$SEG" $((BATCH + BATCH - 5))          # repair the second batch
flip_byte "$SEG" $((SIZE - 3))                   # break the third
run "$C" -t c -e
[[ $rc == 65 && $(wc -l <"$WORK/out") == 2 ]] || fail "corrupt last batch: exit $rc, $(cat "$WORK/out")"
grep -q "position $((2 * BATCH))\b" "$WORK/err" || fail "corrupt last batch: $(cat "$WORK/err")"
run "$C" -t c -e --skip-corrupt
[[ $rc == 1 && $(wc -l <"$WORK/out") == 2 ]] || fail "corrupt last batch skipped: exit $rc"
echo "ok"
