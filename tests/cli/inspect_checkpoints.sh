#!/usr/bin/env bash
# mq-inspect dumps and verifies a partition's replica checkpoints
# (format-spec/replication.md §16): the worked examples byte for byte, line
# and JSON output, R35 at every truncation, a high watermark of another
# partition (R38), --verify of a partition holding them (or not; inside a
# partition they are checked against its log: R37, R38), and a
# symlink in place of one.
source "$(dirname "$0")/lib/common.bash"

D="$WORK/data"
seq 1 5 | "$P" -q -C "$D" -t orders --create
PD="$D/orders-0"
E="$PD/leader-epoch-checkpoint"
H="$PD/replication-offset-checkpoint"

# A partition without checkpoints verifies (they are optional).
run "$INSPECT" --verify "$PD"
expect_rc 0 "verify of a partition without checkpoints"
files_before=$(sed -n 's/.*(\([0-9]*\) files,.*/\1/p' "$WORK/out")
[[ -n $files_before ]] || fail "verify said no file count: $(cat "$WORK/out")"

# The worked examples of §16.2 and §16.3.
hex2bin 300a320a3020300a33203132300a >"$E"
hex2bin 300a310a6f72646572732030203432 >"$H"
printf '\n' >>"$H"
[[ $(stat -c %s "$E") == 14 && $(stat -c %s "$H") == 16 ]] || fail "the examples' sizes"

# --- dump ---------------------------------------------------------------------
run "$INSPECT" "$E" "$H"
expect_rc 0 "dump of the examples"
expect_eq "line dump" "Dumping $E
version: 0 entries: 2
epoch: 0 startOffset: 0
epoch: 3 startOffset: 120
Dumping $H
version: 0 entries: 1
topic: orders partition: 0 offset: 42" "$(cat "$WORK/out")"

run "$INSPECT" -J "$E" "$H"
expect_rc 0 "JSON dump of the examples"
expect_eq "JSON dump" "{\"type\":\"file\",\"file\":\"$E\",\"kind\":\"leader_epoch_checkpoint\",\"base_offset\":null}
{\"type\":\"leader_epoch_checkpoint\",\"file\":\"$E\",\"version\":0,\"entries\":2}
{\"type\":\"leader_epoch_entry\",\"file\":\"$E\",\"epoch\":0,\"start_offset\":0}
{\"type\":\"leader_epoch_entry\",\"file\":\"$E\",\"epoch\":3,\"start_offset\":120}
{\"type\":\"file\",\"file\":\"$H\",\"kind\":\"replication_offset_checkpoint\",\"base_offset\":null}
{\"type\":\"replication_offset_checkpoint\",\"file\":\"$H\",\"version\":0,\"entries\":1}
{\"type\":\"replication_offset\",\"file\":\"$H\",\"topic\":\"orders\",\"partition\":0,\"offset\":42}" "$(cat "$WORK/out")"
$PY -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$WORK/out" || fail "JSON dump is not JSON Lines"

# --- verify: the files alone, and the partition with them ------------------------
run "$INSPECT" --verify "$E"
expect_rc 0 "verify of the epoch example"
grep -q "^$E: ok (1 files, 0 segments, 0 batches, 0 records, 14 bytes)$" "$WORK/out" ||
  fail "verify ok line: $(cat "$WORK/out")"
# Inside a partition they are checked against its log (R37, R38): the
# examples do not belong to a log of 5 records that no leader stamped.
run "$INSPECT" --verify "$PD"
expect_rc 65 "verify of a partition with the examples' checkpoints"
grep -q "^$H: position 13: R38: high watermark 42 is above the log end 5" "$WORK/err" ||
  fail "R38 against the log: $(cat "$WORK/err")"
grep -q "^$E: position 4: R37: epoch 0 from offset 0, but the log holds no batch" "$WORK/err" ||
  fail "R37 against the log: $(cat "$WORK/err")"
cp "$E" "$WORK/epoch.example"
cp "$H" "$WORK/hw.example"
# The checkpoints this log implies: no epoch, the high watermark at most 5.
printf '0\n0\n' >"$E"
printf '0\n1\norders 0 5\n' >"$H"
run "$INSPECT" --verify "$PD"
expect_rc 0 "verify of a partition with checkpoints"
files_after=$(sed -n 's/.*(\([0-9]*\) files,.*/\1/p' "$WORK/out")
[[ $files_after == $((files_before + 2)) ]] || fail "the checkpoints were not read: $(cat "$WORK/out")"
run "$INSPECT" --verify "$D"
expect_rc 0 "verify of the data directory"
cp "$WORK/epoch.example" "$E"
cp "$WORK/hw.example" "$H"

# --- every truncation is R35 corruption, exit 65, file and position named ---------
mkdir "$WORK/cut"
for f in "$E" "$H"; do
  name=$(basename "$f")
  T="$WORK/cut/$name"
  size=$(stat -c %s "$f")
  for ((n = 1; n < size; n++)); do
    head -c "$n" "$f" >"$T"
    run "$INSPECT" "$T"
    expect_rc 65 "dump of $name cut at $n"
    grep -q "^$T: position [0-9]*: R35: " "$WORK/err" || fail "$name cut at $n: $(cat "$WORK/err")"
    grep -q "^epoch:\|^topic:" "$WORK/out" && fail "$name cut at $n: entries were printed"
    run "$INSPECT" --verify -J "$T"
    expect_rc 65 "verify of $name cut at $n"
    grep -q '"type":"problem".*"rule":"R35".*"kind":"corruption"' "$WORK/out" ||
      fail "$name cut at $n: $(cat "$WORK/out")"
  done
done

# --- corrupt files inside the partition: --verify names file, position, rule -----
cp "$E" "$WORK/epoch.good"
printf '0\n2\n3 0\n2 120\n' >"$E"   # epochs go back
run "$INSPECT" --verify "$PD"
expect_rc 65 "verify of a partition with epochs out of order"
grep -q "^$E: position 8: R36: epoch 2 is not above the epoch before it, 3$" "$WORK/err" ||
  fail "R36: $(cat "$WORK/err")"
printf '0\n1\n0 00\n' >"$E"         # a leading zero
run "$INSPECT" "$E"
expect_rc 65 "dump of a number with a leading zero"
grep -q "^$E: position 6: R35: start offset: leading zero" "$WORK/err" || fail "R35: $(cat "$WORK/err")"
cp "$WORK/epoch.good" "$E"

printf '0\n1\norders 1 42\n' >"$H"  # another partition's high watermark
run "$INSPECT" --verify "$PD"
expect_rc 65 "verify of a partition holding another partition's high watermark"
grep -q "^$H: position 4: R38: the entry names orders-1, not this partition orders-0$" "$WORK/err" ||
  fail "R38: $(cat "$WORK/err")"
run "$INSPECT" --verify -J "$D"
expect_rc 65 "verify of the data directory"
grep -q "\"file\":\"$H\",\"position\":4,\"rule\":\"R38\"" "$WORK/out" || fail "R38 JSON: $(cat "$WORK/out")"
run "$INSPECT" "$H"
expect_rc 65 "dump of another partition's high watermark"

# Outside a directory named TOPIC-N the partition is not checked.
mkdir "$WORK/loose"
cp "$H" "$WORK/loose/"
run "$INSPECT" "$WORK/loose/replication-offset-checkpoint"
expect_rc 0 "dump of a high watermark outside a partition directory"
grep -q "^topic: orders partition: 1 offset: 42$" "$WORK/out" || fail "loose: $(cat "$WORK/out")"

# A zero-byte file (Kafka creates one before its first write) has no entries.
: >"$H"
run "$INSPECT" "$H"
expect_rc 0 "dump of an empty checkpoint"
grep -q "^version: 0 entries: 0$" "$WORK/out" || fail "empty: $(cat "$WORK/out")"

# More than 1 MiB is refused unread.
head -c 1048577 /dev/zero >"$H"
run "$INSPECT" --verify "$PD"
expect_rc 65 "verify of an oversized checkpoint"
grep -q "^$H: position 1048576: R35: 1048577 bytes, more than the 1048576 allowed$" "$WORK/err" ||
  fail "oversized: $(cat "$WORK/err")"

# A symlink in place of a checkpoint is refused (77), never followed.
rm "$H"
ln -s /etc/passwd "$H"
run "$INSPECT" --verify "$PD"
expect_rc 77 "a symlinked checkpoint"
grep -q "symlink" "$WORK/err" || fail "symlink: $(cat "$WORK/err")"
rm "$H"

echo "inspect_checkpoints: ok"
