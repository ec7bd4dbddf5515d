#!/usr/bin/env bash
# mq-inspect --verify: clean files exit 0; a flipped bit, a torn tail and an
# index that points at the wrong batch exit 65 naming file, byte position and
# rule; index files dump as kafka-dump-log prints them.
source "$(dirname "$0")/lib/common.bash"

V1=00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063cffffffffffffffffffffffffffff0000000112000000010631323300
V2=0000000000000001000000400000000202c85cbd230000000000010000015dff7cdd6c0000015dff7cde14ffffffffffffffffffffffffffff000000020c0000000100000e00d00202010000
V7=000000000000002a0000004f00000005023bb28b760000000000020000018bcfe568000000018bcfe56800000000000000000700000000006400000003120000000106616263001200000201066162630012000004010661626300

# A segment of V1 (offset 0, 71 bytes) and V2 (offsets 1-2, at byte 71),
# with an offset index entry (2 -> 71) and a time index entry (max timestamp
# of V2 -> offset 2), the per-batch form of kafka-format.md §4.
make_segment() {
  local dir="$1"
  mkdir -p "$dir"
  { hex2bin "$V1"; hex2bin "$V2"; } >"$dir/00000000000000000000.log"
  hex2bin 0000000200000047 >"$dir/00000000000000000000.index"
  hex2bin 0000015dff7cde1400000002 >"$dir/00000000000000000000.timeindex"
}

# --- clean files verify clean --------------------------------------------------------
make_segment "$WORK/clean"
for f in log index timeindex; do
  run "$INSPECT" --verify "$WORK/clean/00000000000000000000.$f"
  expect_rc 0 "verify clean .$f"
  grep -q "^$WORK/clean/00000000000000000000.$f: ok (1 files, " "$WORK/out" || fail "no ok line: $(cat "$WORK/out")"
  [[ ! -s "$WORK/err" ]] || fail "clean .$f printed problems: $(cat "$WORK/err")"
done
# V7 at its own base offset.
mkdir "$WORK/v7"
hex2bin "$V7" >"$WORK/v7/00000000000000000042.log"
run "$INSPECT" --verify "$WORK/v7/00000000000000000042.log"
expect_rc 0 "verify V7"

# --- index dumps ----------------------------------------------------------------------
out="$("$INSPECT" "$WORK/clean/00000000000000000000.index" "$WORK/clean/00000000000000000000.timeindex")"
[[ "$out" == "Dumping $WORK/clean/00000000000000000000.index
offset: 2 position: 71
Dumping $WORK/clean/00000000000000000000.timeindex
timestamp: 1503229959700 offset: 2" ]] || fail "index dump: $out"
# A preallocated index that was never trimmed: the zero entries are not shown.
cp "$WORK/clean/00000000000000000000.index" "$WORK/pre.index"
mkdir "$WORK/pre"
{ cat "$WORK/clean/00000000000000000000.index"; head -c 800 /dev/zero; } >"$WORK/pre/00000000000000000000.index"
out="$("$INSPECT" "$WORK/pre/00000000000000000000.index" | tail -n +2)"
[[ "$out" == "offset: 2 position: 71" ]] || fail "zero tail of a preallocated index shown: $out"
mkdir "$WORK/empty"
: >"$WORK/empty/00000000000000000000.index"
out="$("$INSPECT" "$WORK/empty/00000000000000000000.index" | tail -n 1)"
[[ "$out" == "$WORK/empty/00000000000000000000.index is empty." ]] || fail "empty index: $out"
"$INSPECT" -J "$WORK/clean/00000000000000000000.index" "$WORK/clean/00000000000000000000.timeindex" |
  "$PY" -c '
import json, sys
objs = [json.loads(l) for l in sys.stdin]
e = [o for o in objs if o["type"] == "index_entry"]
t = [o for o in objs if o["type"] == "time_index_entry"]
assert e == [{"type": "index_entry", "file": e[0]["file"], "offset": 2, "position": 71}], e
assert len(t) == 1 and t[0]["timestamp"] == 1503229959700 and t[0]["offset"] == 2, t
' || fail "index JSON"

# --- a flipped bit in V2's records: R4 at byte 71 -----------------------------------------
make_segment "$WORK/flip"
LOG="$WORK/flip/00000000000000000000.log"
flip_byte "$LOG" $((71 + 61 + 2))
run "$INSPECT" --verify "$LOG"
expect_rc 65 "verify after a bit flip"
grep -q "^$LOG: position 71: R4: " "$WORK/err" || fail "bit flip: want '$LOG: position 71: R4: ...', got: $(cat "$WORK/err")"
run "$INSPECT" -J --verify "$LOG"
expect_rc 65 "-J verify after a bit flip"
"$PY" -c '
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
p = [o for o in objs if o["type"] == "problem"]
assert p and p[0]["file"] == sys.argv[2] and p[0]["position"] == 71 and p[0]["rule"] == "R4", objs
' "$WORK/out" "$LOG" || fail "bit flip as JSON: $(cat "$WORK/out")"
# The dump goes on: V1 is valid, V2 shows isvalid: false, the problem is named.
run "$INSPECT" "$LOG"
expect_rc 65 "dump after a bit flip"
grep -q "position: 0 .* isvalid: true$" "$WORK/out" || fail "V1 line missing: $(cat "$WORK/out")"
grep -q "position: 71 .* isvalid: false$" "$WORK/out" || fail "V2 not shown invalid: $(cat "$WORK/out")"
grep -q "^$LOG: position 71: R4: " "$WORK/err" || fail "dump bit flip message: $(cat "$WORK/err")"
# A flip in the header fields the CRC covers (attributes .. recordsCount).
for pos in 21 23 30 44 58; do
  make_segment "$WORK/flip$pos"
  LOG="$WORK/flip$pos/00000000000000000000.log"
  flip_byte "$LOG" $((71 + pos))
  run "$INSPECT" --verify "$LOG"
  expect_rc 65 "verify after a flip at header byte $pos"
  grep -q "^$LOG: position 71: R[0-9]*: " "$WORK/err" || fail "header flip $pos: $(cat "$WORK/err")"
done

# --- a torn tail: V1 and the first 30 bytes of V2 -------------------------------------------
mkdir "$WORK/torn"
LOG="$WORK/torn/00000000000000000000.log"
{ hex2bin "$V1"; hex2bin "${V2:0:60}"; } >"$LOG"
run "$INSPECT" "$LOG"
expect_rc 65 "dump of a torn tail"
grep -qx "Found 30 invalid bytes at the end of $LOG" "$WORK/err" || fail "torn tail: $(cat "$WORK/err")"
[[ $(grep -c '^baseOffset: ' "$WORK/out") == 1 ]] || fail "torn tail: V1 not dumped alone"
run "$INSPECT" --verify "$LOG"
expect_rc 65 "verify of a torn tail"
grep -q "^$LOG: position 71: " "$WORK/err" || fail "verify torn tail: $(cat "$WORK/err")"
run "$INSPECT" -J "$LOG"
"$PY" -c '
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
t = [o for o in objs if o["type"] == "trailing_bytes"]
assert t == [{"type": "trailing_bytes", "file": sys.argv[2], "position": 71, "bytes": 30}], objs
' "$WORK/out" "$LOG" || fail "torn tail as JSON: $(cat "$WORK/out")"

# --- an index entry that points at the wrong batch: R13 -----------------------------------------
make_segment "$WORK/badindex"
hex2bin 0000000100000047 >"$WORK/badindex/00000000000000000000.index"
run "$INSPECT" --verify "$WORK/badindex/00000000000000000000.index"
expect_rc 65 "verify of an inconsistent index"
grep -q "00000000000000000000.index: position 0: R13: " "$WORK/err" || fail "bad index: $(cat "$WORK/err")"
hex2bin 0000015dff7cde1400000001 >"$WORK/badindex/00000000000000000000.timeindex"
run "$INSPECT" --verify "$WORK/badindex/00000000000000000000.timeindex"
expect_rc 65 "verify of an inconsistent time index"
grep -q "00000000000000000000.timeindex: position 0: R14: " "$WORK/err" || fail "bad time index: $(cat "$WORK/err")"

# --- a partition written by liblog verifies clean; a flipped bit in it does not -------------------
WRITER="$MQ_BIN/mq-example-write"
if [[ -x "$WRITER" ]]; then
  # 300 keyed records in 2 partitions with small segments: several segments,
  # zstd batches, headers, index entries.
  "$WRITER" "$WORK/data" events 300 >/dev/null || fail "$WRITER could not write a partition"
  PART="$WORK/data/events-0"
  [[ -d "$PART" ]] || fail "no segment written by $WRITER"
  run "$INSPECT" --verify "$PART"
  expect_rc 0 "verify of a partition written by liblog"
  for f in "$PART"/*.log "$PART"/*.index "$PART"/*.timeindex; do
    [[ -e "$f" ]] || continue
    run "$INSPECT" --verify "$f"
    expect_rc 0 "verify of $f written by liblog"
    run "$INSPECT" -d "$f"
    expect_rc 0 "dump of $f written by liblog"
  done
  SEG="$(find "$PART" -name '*.log' | sort | head -n 1)"
  size=$(stat -c %s "$SEG")
  [[ $size -gt 80 ]] || fail "liblog segment too small to flip: $size"
  flip_byte "$SEG" $((size - 3))
  run "$INSPECT" --verify "$PART"
  expect_rc 65 "verify of a partition with a flipped bit"
  grep -q "$(basename "$SEG"): position [0-9]*: R" "$WORK/err" || fail "partition flip: $(cat "$WORK/err")"
else
  fail "no liblog writer: $WRITER is not built"
fi

echo "ok"
