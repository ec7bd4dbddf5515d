#!/usr/bin/env bash
# mq-inspect --verify verifies what it is given, whole, and says what it read:
# a data directory (meta.properties, every topic's configuration, every
# partition), a partition, a topic or TOPIC-N of -C DIR, a segment file. A
# path that is none of these is a usage error (64); an empty partition is
# "empty", not "ok"; "ok" carries its evidence (files, batches, records, bytes).
source "$(dirname "$0")/lib/common.bash"
D="$WORK/data"
seq 1 1000 | "$P" -q -C "$D" -t a --create --partitions 3 -p 1
seq 1 100 | "$P" -q -C "$D" -t b --create
"$P" -q -C "$D" -t c --create </dev/null

# --- the whole data directory, with its evidence ---------------------------------------
run "$INSPECT" --verify "$D"
expect_rc 0 "verify of a clean data directory"
grep -q "^$D: ok (3 topic(s), 5 partition(s) (3 empty), [0-9]* files, 2 segments, [0-9]* batches, 1100 records, [0-9]* bytes)$" "$WORK/out" ||
  fail "data directory summary: $(cat "$WORK/out")"
run "$INSPECT" --verify -J "$D"
expect_rc 0 "verify -J of a data directory"
grep -q '"type":"clean".*"topics":3,"partitions":5,"empty_partitions":3,.*"records":1100' "$WORK/out" ||
  fail "data directory JSON summary: $(cat "$WORK/out")"

# --- a corrupt partition anywhere inside makes the data directory corrupt --------------
cp -a "$D" "$WORK/bad"
flip_byte "$WORK/bad/b-0/00000000000000000000.log" 100
run "$INSPECT" --verify "$WORK/bad"
expect_rc 65 "verify of a data directory with a corrupt partition"
grep -q "b-0/00000000000000000000.log: position 0: R4: " "$WORK/err" || fail "not named: $(cat "$WORK/err")"
# A topic configuration that breaks R16 is reported too.
cp -a "$D" "$WORK/badconf"
echo "no.such.key=1" >>"$WORK/badconf/topics/c.conf"
run "$INSPECT" --verify "$WORK/badconf"
expect_rc 65 "verify of a data directory with a bad topic configuration"
grep -q "topics/c.conf.*R16" "$WORK/err" || fail "R16 not reported: $(cat "$WORK/err")"

# --- a topic, TOPIC-N and a partition directory ---------------------------------------
run "$INSPECT" --verify -C "$D" a
expect_rc 0 "verify of a topic"
grep -q "^a: ok (3 partition(s) (2 empty), .* 1000 records" "$WORK/out" || fail "topic: $(cat "$WORK/out")"
MQ_DIR="$D" run "$INSPECT" --verify b-0
expect_rc 0 "verify of TOPIC-N through MQ_DIR"
grep -q "^b-0: ok (.* 100 records" "$WORK/out" || fail "TOPIC-N: $(cat "$WORK/out")"
run "$INSPECT" --verify -C "$WORK/bad" b
expect_rc 65 "verify of a corrupt topic"
run "$INSPECT" --verify -C "$D" a-7
expect_rc 64 "a partition the topic lacks"
run "$INSPECT" --verify -C "$D" nosuch
expect_rc 66 "a missing topic"

# --- empty is not ok -------------------------------------------------------------------
run "$INSPECT" --verify "$D/c-0"
expect_rc 0 "verify of an empty partition"
grep -qx "$D/c-0: empty (no segments)" "$WORK/out" || fail "empty partition: $(cat "$WORK/out")"
mkdir "$WORK/emptydata"
"$P" -q -C "$WORK/emptydata" -t e --create </dev/null
run "$INSPECT" --verify "$WORK/emptydata"
grep -q "^$WORK/emptydata: empty (1 topic(s), 1 partition(s), no segments)$" "$WORK/out" ||
  fail "empty data directory: $(cat "$WORK/out")"

# --- what --verify does not take: 64, saying what it takes -----------------------------
mkdir "$WORK/nothing"
for path in /etc "$WORK/nothing" "$D/meta.properties"; do
  run "$INSPECT" --verify "$path"
  expect_rc 64 "verify of $path"
  grep -q -- "--verify takes a data directory, a partition directory, a segment file" "$WORK/err" ||
    fail "verify of $path: $(cat "$WORK/err")"
  [[ ! -s "$WORK/out" ]] || fail "verify of $path printed: $(cat "$WORK/out")"
done
echo "ok"
