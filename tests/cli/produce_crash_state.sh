#!/usr/bin/env bash
# The committed end across crashes and reboots (format-spec/segment.md R27,
# R28), through the real binaries. A run that wrote bytes and died before
# publishing them (kill -9, a full disk) leaves them past the committed end:
# the state file is put back to what it held before the run, which is
# exactly what such a run leaves. Then:
#  - the next produce cuts them: only its own message becomes visible;
#  - --verify of that state is clean (notes only) on the same boot;
#  - a segment shorter than the committed end is corruption (65) on the
#    same boot and "needs recovery" (75) after a reboot.
# A reboot is simulated with MQ_TEST_BOOT_ID (R27's test seam).
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
D="$T/data"
PART="$D/t-0"
OTHER_BOOT=0000beef-0000-0000-0000-00000000beef

seq 1 100 | "$P" -C "$D" -q -t t --create -X segment.bytes=100000
cp "$PART/state" "$T/state.before"
# About 600 KB: rolls into new segments.
seq -f 'unpublished message %.0f' 1 25000 | "$P" -C "$D" -q -t t
ls "$PART"/*.log | wc -l | grep -qv '^1$' || fail "the second run did not roll"
cp "$T/state.before" "$PART/state"
[[ $("$C" -C "$D" -q -t t -e | wc -l) == 100 ]] || fail "readers see past the committed end"

# --- F7: verify right after such a crash -------------------------------------------
run "$INSPECT" --verify "$PART"
expect_rc 0 "verify of unpublished bytes past the committed end"
grep -q "^$PART: ok (" "$WORK/out" || fail "no ok line: $(cat "$WORK/out")"
grep -q ": R27: note: .*never published" "$WORK/err" || fail "no R27 note: $(cat "$WORK/err")"
grep -v ": note: " "$WORK/err" | grep -q . && fail "not only notes: $(cat "$WORK/err")"
# After a reboot the bytes past the committed end are the valid prefix
# recovery keeps: nothing to report as damage.
MQ_TEST_BOOT_ID=$OTHER_BOOT run "$INSPECT" --verify "$PART"
expect_rc 0 "verify after a reboot of a log longer than the committed end"

# --- F12: the next produce never publishes what the failed run wrote -------------------
echo one | "$P" -C "$D" -q -t t
"$C" -C "$D" -q -t t -e >"$T/got"
[[ $(wc -l <"$T/got") == 101 ]] || fail "after a failed run, one produce made $(wc -l <"$T/got") messages visible, want 101"
[[ $(tail -1 "$T/got") == one ]] || fail "the last message is $(tail -1 "$T/got")"
[[ $(ls "$PART"/*.log | wc -l) == 1 ]] || fail "unpublished segments left: $(ls "$PART")"
run "$INSPECT" --verify "$PART"
expect_rc 0 "verify after the next produce"
[[ ! -s "$WORK/err" ]] || fail "problems after the next produce: $(cat "$WORK/err")"

# --- R27/R28: a segment shorter than the committed end ---------------------------------
cp -a "$D" "$T/copy"
# endSegmentBase and endPosition (§9.2, native order: little-endian here).
base=$(od -An -t d8 -j 24 -N 8 "$PART/state" | tr -d ' ')
end=$(od -An -t d8 -j 32 -N 8 "$PART/state" | tr -d ' ')
SEG="$T/copy/t-0/$(printf '%020d' "$base").log"
truncate -s $((end - 10)) "$SEG"
run "$INSPECT" --verify "$T/copy/t-0"
expect_rc 65 "verify of committed bytes missing on the same boot"
# Reported where a reader stops, with the rule it names (R1 at the torn batch).
grep -q "$(basename "$SEG"): position [0-9]*: R1: " "$WORK/err" ||
  fail "same boot, short segment: $(cat "$WORK/err")"
run "$C" -C "$T/copy" -t t -e
expect_rc 65 "consume of committed bytes missing on the same boot"
grep -q "R1: " "$WORK/err" || fail "consumer, same boot, short segment: $(cat "$WORK/err")"
MQ_TEST_BOOT_ID=$OTHER_BOOT run "$INSPECT" --verify "$T/copy/t-0"
expect_rc 75 "verify of a short segment after a reboot"
grep -q "state: position 0: R28: needs recovery: committed end" "$WORK/err" ||
  fail "after a reboot, short segment: $(cat "$WORK/err")"
# A reader says the same: needs recovery (75), not corruption.
MQ_TEST_BOOT_ID=$OTHER_BOOT run "$C" -C "$T/copy" -t t -e
expect_rc 75 "consume of a short segment after a reboot"
grep -q "R28: needs recovery" "$WORK/err" || fail "consumer after a reboot: $(cat "$WORK/err")"
MQ_TEST_BOOT_ID=$OTHER_BOOT run "$INSPECT" --verify -J "$T/copy/t-0"
expect_rc 75 "verify -J after a reboot"
grep -q '"rule":"R28".*"kind":"needs_recovery"' "$WORK/out" || fail "JSON kind: $(cat "$WORK/out")"
# The next writer (after the reboot) keeps the valid prefix, and then the
# partition verifies clean.
echo after | MQ_TEST_BOOT_ID=$OTHER_BOOT "$P" -C "$T/copy" -q -t t 2>"$T/warn"
MQ_TEST_BOOT_ID=$OTHER_BOOT run "$INSPECT" --verify "$T/copy/t-0"
expect_rc 0 "verify after recovery"
echo ok
