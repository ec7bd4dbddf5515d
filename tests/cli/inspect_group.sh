#!/usr/bin/env bash
# mq-inspect dumps and verifies consumer-group offsets files
# (format-spec/group.md §14.2): the worked example, line and JSON output,
# R29 at every truncation, and --verify of a data directory's groups/.
source "$(dirname "$0")/lib/common.bash"

# The worked example of group.md §14.2 (92 bytes).
EXAMPLE=4d51474f000100005b30a5d300000001
EXAMPLE+=00000000000000010000018bcfe568000000000000000000ffffffffffffffff
EXAMPLE+=00066f726465727300000000000000000000002a00000000
EXAMPLE+=0000018bcfe56800000000000000000000026d31

# A data directory by hand (layout.md §1.2), with one group.
D="$WORK/data"
mkdir -m 750 "$D" "$D/topics"
printf '# mq data directory (format-spec/layout.md section 1)\nlayout.version=1\n' >"$D/meta.properties"
mkdir -p "$D/groups/g"
F="$D/groups/g/offsets"
hex2bin "$EXAMPLE" >"$F"
[[ $(stat -c %s "$F") == 92 ]] || fail "the example is not 92 bytes"

# --- dump ---------------------------------------------------------------------
run "$INSPECT" "$F"
expect_rc 0 "dump of the example"
expect_eq "line dump" "Dumping $F
generation: 1 updateTimestamp: 1700000000000 rebalances: 0 lastRebalanceTimestamp: -1 deadLetters: 0 partitions: 1
topic: orders partition: 0 offset: 42 leaderEpoch: 0 commitTimestamp: 1700000000000 memberId: m1 deadLetters: 0" "$(cat "$WORK/out")"

run "$INSPECT" -J "$F"
expect_rc 0 "JSON dump of the example"
expect_eq "JSON dump" "{\"type\":\"file\",\"file\":\"$F\",\"kind\":\"group_offsets\",\"base_offset\":null}
{\"type\":\"group_offsets\",\"file\":\"$F\",\"generation\":1,\"update_timestamp\":1700000000000,\"rebalances\":0,\"last_rebalance_timestamp\":-1,\"dead_letters\":0,\"partitions\":1}
{\"type\":\"group_offset\",\"file\":\"$F\",\"topic\":\"orders\",\"partition\":0,\"offset\":42,\"leader_epoch\":0,\"commit_timestamp\":1700000000000,\"member_id\":\"m1\",\"dead_letters\":0}" "$(cat "$WORK/out")"
$PY -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$WORK/out" || fail "JSON dump is not JSON Lines"

# --- verify a file ------------------------------------------------------------
run "$INSPECT" --verify "$F"
expect_rc 0 "verify of the example"
grep -q "^$F: ok (1 group(s), 1 files, .* 92 bytes)$" "$WORK/out" || fail "verify ok line: $(cat "$WORK/out")"

# Every truncation is R29 corruption naming the file and a position, exit
# 65, in both forms; never an empty group.
T="$WORK/cut/offsets"
mkdir "$WORK/cut"
for n in 0 1 11 12 47 48 49 60 91; do
  head -c "$n" "$F" >"$T"
  run "$INSPECT" "$T"
  expect_rc 65 "dump of the file cut at $n"
  grep -q "^$T: position [0-9]*: R29: " "$WORK/err" || fail "cut at $n: $(cat "$WORK/err")"
  grep -q "^topic:" "$WORK/out" && fail "cut at $n: entries were printed"
  run "$INSPECT" --verify -J "$T"
  expect_rc 65 "verify of the file cut at $n"
  grep -q '"type":"problem".*"rule":"R29".*"kind":"corruption"' "$WORK/out" || fail "cut at $n: $(cat "$WORK/out")"
done
head -c 60 "$F" >"$T"
run "$INSPECT" "$T"
grep -q "truncated" "$WORK/err" || fail "a cut file is not called truncated: $(cat "$WORK/err")"

# A flipped byte in an entry: the crc (R29, position 8).
cp "$F" "$T"
flip_byte "$T" 70
run "$INSPECT" --verify "$T"
expect_rc 65 "verify of a damaged file"
grep -q "^$T: position 8: R29: crc " "$WORK/err" || fail "damaged: $(cat "$WORK/err")"

# A later version (3; 2 is the file written in place, R86) is unsupported,
# exit 65, never guessed at.
hex2bin "${EXAMPLE:0:8}0003${EXAMPLE:12}" >"$T"
run "$INSPECT" "$T"
expect_rc 65 "dump of version 3"
grep -q "unsupported version 3" "$WORK/err" || fail "version 3: $(cat "$WORK/err")"

# --- verify a data directory: groups/ is verified too --------------------------
mkdir "$D/groups/idle" "$D/groups/~deleted-1-0"
run "$INSPECT" --verify "$D"
expect_rc 0 "verify of a data directory with groups"
grep -q "^$D: ok (2 group(s), " "$WORK/out" || fail "data verify: $(cat "$WORK/out")"
run "$INSPECT" --verify -J "$D"
grep -q '"groups":2' "$WORK/out" || fail "data verify JSON: $(cat "$WORK/out")"

touch "$D/groups/stray"
run "$INSPECT" --verify "$D"
expect_rc 0 "a stray file in groups/ is a note"
grep -q "^$D/groups/stray: position 0: R12: note: " "$WORK/err" || fail "stray: $(cat "$WORK/err")"
rm "$D/groups/stray"

flip_byte "$F" 91
run "$INSPECT" --verify "$D"
expect_rc 65 "verify of a data directory with a damaged group"
grep -q "^$F: position 8: R29: " "$WORK/err" || fail "damaged group: $(cat "$WORK/err")"

# A symlink in place of the offsets file is refused (77), never followed.
rm "$F"
ln -s /etc/passwd "$F"
run "$INSPECT" --verify "$D"
expect_rc 77 "a symlinked offsets file"
grep -q "symlink" "$WORK/err" || fail "symlink: $(cat "$WORK/err")"

echo "inspect_group: ok"
