#!/usr/bin/env bash
# Kafka's own compressed batches (format-spec/batch.md §5.1): a segment of
# gzip, snappy and lz4 batches written by real clients (sarama, kafkajs;
# tests/data/kafka) reads in mq-consume, mq-inspect -d and --verify. R5: an
# attribute bit Kafka may define later is "unsupported" (exit 65), not
# corruption.
source "$(dirname "$0")/lib/common.bash"
DATA="${MQ_SRC:?}/tests/data/kafka"
export MQ_DIR="$WORK/data"

# One segment: sarama's gzip, snappy and lz4 batches and kafkajs's gzip
# batch (V5), at offsets 0-3 (baseOffset is outside the CRC).
"$P" -q -t k --create </dev/null
SEG="$MQ_DIR/k-0/00000000000000000000.log"
"$PY" - "$DATA" "$SEG" <<'EOF'
import sys
d, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as f:
    for i, name in enumerate(["sarama_gzip", "sarama_snappy", "sarama_lz4", "v5_kafkajs_gzip"]):
        b = bytes.fromhex(open(f"{d}/{name}.hex").read().strip())
        f.write(i.to_bytes(8, "big") + b[8:])
EOF

# mq-consume: every record, key, value and header.
run "$C" -t k -e -J
expect_rc 0 "consume Kafka's compressed batches"
"$PY" - "$WORK/out" <<'EOF' || fail "consumed records: $(cat "$WORK/out")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["offset"] for r in recs] == [0, 1, 2, 3], recs
for r in recs[:3]:  # sarama: binary key 01020304, value 050607, header 08090a=0b0c
    assert r["ts"] == 1479847795005, r
    assert r["key"] == "\u0001\u0002\u0003\u0004" and r["payload"] == "\u0005\u0006\u0007", r
assert recs[3]["key"] == "key-0", recs[3]
assert recs[3]["payload"] == "value-0-2020-08-14T17:13:08.682Z", recs[3]
assert recs[3]["ts"] == 1597425188809 and recs[3]["tstype"] == "logappend", recs[3]
EOF

# mq-inspect -d: each batch line names its codec; records decode.
run "$INSPECT" -d "$SEG"
expect_rc 0 "dump of Kafka's compressed batches"
for c in gzip snappy lz4; do
  grep -q "compresscodec: $c crc: .* isvalid: true$" "$WORK/out" || fail "no $c batch: $(cat "$WORK/out")"
done
[[ $(grep -c '^| offset: ' "$WORK/out") == 4 ]] || fail "dump records: $(cat "$WORK/out")"
grep -q "^| offset: 3 LogAppendTime: 1597425188809 keySize: 5 valueSize: 32 .*payload: value-0-2020-08-14T17:13:08.682Z$" \
  "$WORK/out" || fail "V5 record line: $(cat "$WORK/out")"

# --verify reads every record of every codec.
run "$INSPECT" --verify "$SEG"
expect_rc 0 "verify of Kafka's compressed batches"
grep -q ": ok" "$WORK/out" || fail "verify: $(cat "$WORK/out")"

# A batch damaged inside its compressed records but with its CRC fixed: R9.
"$PY" - "$DATA" "$WORK/r9.log" <<'EOF'
import sys
from mqbatch import fix_crc
b = bytearray(bytes.fromhex(open(f"{sys.argv[1]}/sarama_lz4.hex").read().strip()))
b[61 + 6] ^= 0x5a  # the LZ4 frame header checksum
fix_crc(b)
open(sys.argv[2], "wb").write(b)
EOF
run "$INSPECT" --verify "$WORK/r9.log"
expect_rc 65 "verify of a bad lz4 frame"
grep -q "r9.log: position 0: R9: lz4" "$WORK/out" "$WORK/err" || fail "R9 lz4: $(cat "$WORK/out" "$WORK/err")"

# R5: attribute bit 7 (0x0080), CRC fixed: unsupported, exit 65, in every tool.
"$PY" - "$DATA" "$WORK/r5.log" <<'EOF'
import sys
from mqbatch import fix_crc
b = bytearray(bytes.fromhex(open(f"{sys.argv[1]}/sarama_gzip.hex").read().strip()))
b[21:23] = (0x0081).to_bytes(2, "big")
fix_crc(b)
open(sys.argv[2], "wb").write(b)
EOF
for mode in -d --verify; do
  run "$INSPECT" $mode "$WORK/r5.log"
  expect_rc 65 "mq-inspect $mode of attribute bit 7"
  grep -q "R5: unsupported attributes 0x0081" "$WORK/out" "$WORK/err" ||
    fail "mq-inspect $mode R5: $(cat "$WORK/out" "$WORK/err")"
done
"$P" -q -t r5 --create </dev/null
cp "$WORK/r5.log" "$MQ_DIR/r5-0/00000000000000000000.log"
run "$C" -t r5 -e
expect_rc 65 "mq-consume of attribute bit 7"
grep -q "position 0: R5: unsupported attributes 0x0081" "$WORK/err" || fail "consume R5: $(cat "$WORK/err")"
# A writer never repairs (truncates) what it does not understand.
echo x >"$WORK/x"
run "$P" -t r5 "$WORK/x"
expect_rc 65 "mq-produce to a partition holding attribute bit 7"
grep -q "unsupported" "$WORK/err" || fail "produce R5: $(cat "$WORK/err")"
cmp -s "$WORK/r5.log" "$MQ_DIR/r5-0/00000000000000000000.log" || fail "the R5 segment was changed"
echo "ok: kafka_codecs"
