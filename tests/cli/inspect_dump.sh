#!/usr/bin/env bash
# mq-inspect dumps the Kafka test vectors (kafka-format.md §10) exactly as
# kafka-dump-log prints them: batch lines, record lines, data, headers,
# control markers, JSON Lines, and a quiet exit when the reader goes away.
source "$(dirname "$0")/lib/common.bash"

V1=00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063cffffffffffffffffffffffffffff0000000112000000010631323300
V2=0000000000000001000000400000000202c85cbd230000000000010000015dff7cdd6c0000015dff7cde14ffffffffffffffffffffffffffff000000020c0000000100000e00d00202010000
V3=00000000000000000000004500000000025cd8ef520000000000000000016585b6f3c10000016585b6f3c1ffffffffffffffffffffffffffff000000012600000001066864720208686b6579086876616c
V6=000000000000000a000000420000000302809c88c40030000000000000018bcfe568000000018bcfe5680000000000000003e80002ffffffff000000012000000008000000010c00000000000700
V7=000000000000002a0000004f00000005023bb28b760000000000020000018bcfe568000000018bcfe56800000000000000000700000000006400000003120000000106616263001200000201066162630012000004010661626300

# --- V1 alone, exactly -------------------------------------------------------
mkdir "$WORK/v1"
LOG1="$WORK/v1/00000000000000000000.log"
hex2bin "$V1" >"$LOG1"
[[ $(stat -c %s "$LOG1") == 71 ]] || fail "V1 fixture is not 71 bytes"

out="$("$INSPECT" "$LOG1")" || fail "dump of V1 exited $?"
expect_eq "V1 batch line" "Dumping $LOG1
Log starting offset: 0
baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1503229838908 size: 71 magic: 2 compresscodec: none crc: 51946096 isvalid: true" "$out"

out="$("$INSPECT" --records "$LOG1")" || fail "records dump of V1 exited $?"
expect_eq "V1 record line" "Dumping $LOG1
Log starting offset: 0
baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1503229838908 size: 71 magic: 2 compresscodec: none crc: 51946096 isvalid: true
| offset: 0 CreateTime: 1503229838908 keySize: -1 valueSize: 3 sequence: -1 headerKeys: []" "$out"

# --deep-iteration is --records; --print-data-log adds the payload (no key:
# the key is null).
out2="$("$INSPECT" --deep-iteration "$LOG1")"
expect_eq "--deep-iteration equals --records" "$out" "$out2"
out="$("$INSPECT" --print-data-log "$LOG1" | tail -n 1)"
expect_eq "V1 print-data-log" "| offset: 0 CreateTime: 1503229838908 keySize: -1 valueSize: 3 sequence: -1 headerKeys: [] payload: 123" "$out"
out="$("$INSPECT" -d --skip-record-metadata "$LOG1" | tail -n 1)"
expect_eq "V1 skip-record-metadata" "| payload: 123" "$out"

# --- V1 + V2 in one segment (offsets 0, then 1-2) ------------------------------
mkdir "$WORK/v12"
LOG12="$WORK/v12/00000000000000000000.log"
{ hex2bin "$V1"; hex2bin "$V2"; } >"$LOG12"
out="$("$INSPECT" -r "$LOG12" | tail -n 3)"
expect_eq "V1+V2 records" "baseOffset: 1 lastOffset: 2 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 2 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 71 CreateTime: 1503229959700 size: 76 magic: 2 compresscodec: none crc: 3361520931 isvalid: true
| offset: 1 CreateTime: 1503229959532 keySize: -1 valueSize: 0 sequence: -1 headerKeys: []
| offset: 2 CreateTime: 1503229959700 keySize: -1 valueSize: 0 sequence: -1 headerKeys: []" "$out"
n=$("$INSPECT" "$LOG12" | grep -c '^baseOffset: ')
[[ $n == 2 ]] || fail "V1+V2: expected 2 batch lines, got $n"

# --- V3: a header ----------------------------------------------------------------
mkdir "$WORK/v3"
LOG3="$WORK/v3/00000000000000000000.log"
hex2bin "$V3" >"$LOG3"
out="$("$INSPECT" -d -H "$LOG3" | tail -n 1)"
expect_eq "V3 headers" "| offset: 0 CreateTime: 1535546684353 keySize: -1 valueSize: 3 sequence: -1 headerKeys: [hkey] payload: hdr headers: [hkey=hval]" "$out"

# --- V6: a COMMIT marker; V7: an idempotent batch, in one segment at base 10 ---
mkdir "$WORK/v67"
LOG67="$WORK/v67/00000000000000000010.log"
{ hex2bin "$V6"; hex2bin "$V7"; } >"$LOG67"
out="$("$INSPECT" -d "$LOG67")" || fail "dump of V6+V7 exited $?"
expect_eq "V6+V7" "Dumping $LOG67
Log starting offset: 10
baseOffset: 10 lastOffset: 10 count: 1 baseSequence: -1 lastSequence: -1 producerId: 1000 producerEpoch: 2 partitionLeaderEpoch: 3 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 78 magic: 2 compresscodec: none crc: 2157742276 isvalid: true
| offset: 10 CreateTime: 1700000000000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7
baseOffset: 42 lastOffset: 44 count: 3 baseSequence: 100 lastSequence: 102 producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 5 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 78 CreateTime: 1700000000000 size: 91 magic: 2 compresscodec: none crc: 1001556854 isvalid: true
| offset: 42 CreateTime: 1700000000000 keySize: -1 valueSize: 3 sequence: 100 headerKeys: [] payload: abc
| offset: 43 CreateTime: 1700000000000 keySize: -1 valueSize: 3 sequence: 101 headerKeys: [] payload: abc
| offset: 44 CreateTime: 1700000000000 keySize: -1 valueSize: 3 sequence: 102 headerKeys: [] payload: abc" "$out"
# Offsets 10 then 42 are not consecutive: reported on stderr, like kafka-dump-log.
err="$("$INSPECT" -r "$LOG67" 2>&1 >/dev/null)"
grep -q "^Non-consecutive offsets in $LOG67" <<<"$err" || fail "no non-consecutive report: $err"
grep -q "10 is followed by 42" <<<"$err" || fail "gap 10 -> 42 not listed: $err"

# --- V5: a gzip batch from kafkajs: its records decode, and verify ---------------
mkdir "$WORK/v5"
LOG5="$WORK/v5/00000000000000000000.log"
hex2bin "$(tr -d '[:space:]' <"${MQ_SRC:?}/tests/data/kafka/v5_kafkajs_gzip.hex")" >"$LOG5"
out="$("$INSPECT" "$LOG5")" || fail "batch-level dump of a gzip batch exited $?"
grep -q "LogAppendTime: 1597425188809 size: 125 magic: 2 compresscodec: gzip crc: 3837994149 isvalid: true$" <<<"$out" \
  || fail "gzip batch line: $out"
out="$("$INSPECT" -d "$LOG5" | tail -n 1)" || fail "records of a gzip batch exited $?"
expect_eq "V5 record" "| offset: 0 LogAppendTime: 1597425188809 keySize: 5 valueSize: 32 sequence: 0 headerKeys: [] key: key-0 payload: value-0-2020-08-14T17:13:08.682Z" "$out"
"$INSPECT" --verify "$LOG5" >/dev/null || fail "verify of a gzip batch exited $?"

# --- JSON Lines -------------------------------------------------------------------
for f in "$LOG1" "$LOG12" "$LOG3" "$LOG67"; do
  "$INSPECT" -J -d -H "$f" >"$WORK/out.json" || fail "-J dump of $f exited $?"
  "$PY" -c '
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
assert objs[0]["type"] == "file" and objs[0]["kind"] == "log", objs[0]
assert all(o["type"] in ("file", "batch", "record") for o in objs), objs
batches = [o for o in objs if o["type"] == "batch"]
records = [o for o in objs if o["type"] == "record"]
assert batches and all(b["is_valid"] for b in batches)
assert sum(b["count"] for b in batches) == len(records), (batches, records)
' "$WORK/out.json" || fail "JSON from $f: $(cat "$WORK/out.json")"
done
"$INSPECT" -J -d "$LOG1" | "$PY" -c '
import json, sys
objs = [json.loads(l) for l in sys.stdin]
b, r = objs[1], objs[2]
assert b["crc"] == 51946096 and b["size"] == 71 and b["delete_horizon_ms"] is None, b
assert r["offset"] == 0 and r["key"] is None and r["payload"] == "123", r
assert "value" not in r, r
' || fail "V1 JSON fields"
"$INSPECT" -J -d "$LOG67" | "$PY" -c '
import json, sys
objs = [json.loads(l) for l in sys.stdin]
c = [o for o in objs if o["type"] == "record" and "control" in o]
assert len(c) == 1 and c[0]["control"] == {"type": "COMMIT", "type_id": 1, "coordinator_epoch": 7}, c
' || fail "V6 JSON control marker"
# --- bytes that are not text: escaped on a line, base64 in JSON -------------------------
# V1 with its value "123" replaced by ff 5c 0a (not UTF-8, a backslash, a
# newline), the CRC recomputed.
mkdir "$WORK/bin"
LOGB="$WORK/bin/00000000000000000000.log"
"$PY" - "$V1" "$LOGB" <<'EOF'
import sys
b = bytearray(bytes.fromhex(sys.argv[1]))
b[67:70] = b"\xff\x5c\x0a"
crc = 0xFFFFFFFF
for x in b[21:]:
    crc ^= x
    for _ in range(8):
        crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
b[17:21] = (crc ^ 0xFFFFFFFF).to_bytes(4, "big")
open(sys.argv[2], "wb").write(b)
EOF
out="$("$INSPECT" -d "$LOGB" | tail -n 1)" || fail "dump of a binary value exited $?"
expect_eq "binary value escaped" '| offset: 0 CreateTime: 1503229838908 keySize: -1 valueSize: 3 sequence: -1 headerKeys: [] payload: \xff\\\x0a' "$out"
"$INSPECT" -J -d "$LOGB" | "$PY" -c '
import json, sys
r = [json.loads(l) for l in sys.stdin][2]
assert r["key"] is None and "payload" not in r and r["payload_b64"] == "/1wK", r
' || fail "binary value as payload_b64"

# --- a closed pipe is a quiet exit 0 ------------------------------------------------
BIG="$WORK/big/00000000000000000000.log"
mkdir "$WORK/big"
# 3000 copies of V1 at offsets 0, 1, 2, ... (baseOffset is outside the CRC).
"$PY" -c '
import sys
v1 = bytes.fromhex(sys.argv[1])
with open(sys.argv[2], "wb") as f:
    for i in range(3000):
        f.write(i.to_bytes(8, "big") + v1[8:])
' "$V1" "$BIG"
set +e
"$INSPECT" -r "$BIG" 2>"$WORK/err" | head -n 1 >/dev/null
rc=${PIPESTATUS[0]}
set -e
[[ $rc == 0 ]] || fail "| head -1: exit $rc"
[[ ! -s "$WORK/err" ]] || fail "| head -1 printed on stderr: $(cat "$WORK/err")"

echo "ok"
