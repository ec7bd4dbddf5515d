#!/usr/bin/env bash
# mq-inspect --verify checks a partition's truncation history (`truncations`,
# format-spec/segment.md §6.6, R59): a file a writer wrote verifies clean; a
# hostile one (bad values, cuts out of order, too long, a last cut past the
# log end, random junk) is R59 corruption, exit 65, naming the file and the
# byte position of the line; a symbolic link in its place is refused (77).
source "$(dirname "$0")/lib/common.bash"

SEED="${SEED:-$RANDOM}"
echo "SEED=$SEED"
fail() { echo "FAIL (SEED=$SEED): $*" >&2; exit 1; }

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
# Ten batches, a message each; a machine crash cuts the log inside the fifth
# (the boot id changes: the state file's end is not trusted), and the
# recovery of the next append records the cut at 4 (then 5 messages).
produce -t t --create </dev/null
seq -w 1 10 | produce -t t --batch-bytes 64
D="$MQ_DIR/t-0"
seg="$D/00000000000000000000.log"
batch=$(($(stat -c %s "$seg") / 10))
truncate -s $((4 * batch + 5)) "$seg"
seq 11 15 | MQ_TEST_BOOT_ID=00112233-4455-6677-8899-aabbccddeeff produce -t t
T="$D/truncations"
grep -qx "cut=4 [0-9]* [0-9]*" "$T" || fail "the cut is not recorded: $(cat "$T")"
# Published under another boot, the log end (9) is not trusted: a last cut
# past it needs recovery (75), which records the lower cut.
cp "$T" "$WORK/good"
printf '%s\ncut=12 %s\n' "$(head -1 "$T")" "$(date +%s000)" >"$T"
run "$INSPECT" --verify "$D"
expect_rc 75 "a last cut past a log end published before a reboot"
grep -qF "$T: position $(head -1 "$T" | wc -c): R59: needs recovery: " "$WORK/err" ||
  fail "untrusted: $(cat "$WORK/err")"
cp "$WORK/good" "$T"
# One more message on this boot: the log ends at 10, trusted.
echo 16 | produce -t t
run "$INSPECT" --verify "$D"
expect_rc 0 "verify of a history a writer wrote"

# verify_bad TEXT POS WHAT: with TEXT as the history, --verify of the
# partition (and of the data directory) exits 65 naming the file, byte
# position POS and R59.
verify_bad() {
  printf '%b' "$1" >"$T"
  for path in "$D" "$MQ_DIR"; do
    run "$INSPECT" --verify "$path"
    expect_rc 65 "$3 ($path)"
    grep -qF "$T: position $2: R59: " "$WORK/err" || fail "$3 ($path): not named: $(cat "$WORK/err")"
  done
}
H='# mq truncations: log end left, ms (format-spec/segment.md 6.6)\n'
# The header line is 64 bytes: the first cut line starts at byte 64.
verify_bad "${H}cut=x 100\n" 64 "an offset that is no number"
verify_bad "${H}cut=4\n" 64 "a cut without a time"
verify_bad "${H}cut=4 -1\n" 64 "a negative time"
verify_bad "${H}cut=-4 100\n" 64 "a negative offset"
verify_bad "${H}cut=4  100\n" 64 "two spaces"
verify_bad "${H}cut=3 100\ncut=3 200\n" 74 "offsets that do not increase"
verify_bad "${H}cut=3 200\ncut=4 100\n" 74 "times that go back"
verify_bad "${H}cut=3 100\ncut=11 200\n" 74 "a last cut past the log end 10"
verify_bad "${H}cut=99999999999999999999 100\n" 64 "an offset out of range"
# The rewrites value that publishes each cut (lines an earlier mq wrote
# have none): below 2^32, never going back, on every line after the first
# that has one.
verify_bad "${H}cut=4 100 4294967296\n" 64 "a rewrites value out of range"
verify_bad "${H}cut=3 100 5\ncut=4 200 4\n" 76 "rewrites values that go back"
verify_bad "${H}cut=3 100 5\ncut=4 200\n" 76 "a cut without a rewrites value after one with it"
# A cut at the log end, and unknown keys, are fine.
printf '%b' "${H}cut=3 100\ncut=10 200 1\nlater.key=1\n" >"$T"
run "$INSPECT" --verify "$D"
expect_rc 0 "a last cut at the log end"
# More than 8192 bytes: R59, whatever they hold.
{ printf '%b' "$H"; for ((i = 0; i < 700; i++)); do echo "# padding padding"; done; } >"$T"
run "$INSPECT" --verify "$D"
expect_rc 65 "a history past 8192 bytes"
grep -qF "$T: position 8192: R59: " "$WORK/err" || fail "too long: $(cat "$WORK/err")"

# Random junk: 65 naming the file, or a valid history (0); never a crash.
for i in 1 2 3 4 5 6 7 8; do
  "$PY" -c '
import random, sys
random.seed(int(sys.argv[1]))
alphabet = b"cut= 0123456789\n#x-"
n = random.randrange(1, 300)
sys.stdout.buffer.write(bytes(random.choice(alphabet) if random.random() < 0.9
                              else random.getrandbits(8) for _ in range(n)))
' "$((SEED * 10 + i))" >"$T"
  run "$INSPECT" --verify "$D"
  [[ $rc == 0 || $rc == 65 ]] || fail "junk $i: exit $rc: $(cat "$WORK/err")"
  [[ $rc == 0 ]] || grep -qF "$T: position " "$WORK/err" || fail "junk $i: not named: $(cat "$WORK/err")"
done

# A symbolic link in its place is refused, as a writer refuses it.
ln -sf "$WORK/good" "$T.link" && mv -f "$T.link" "$T"
run "$INSPECT" --verify "$D"
expect_rc 77 "a symbolic link"
grep -qF "$T" "$WORK/err" || fail "symlink: not named: $(cat "$WORK/err")"
cp "$WORK/good" "$T.new" && mv -f "$T.new" "$T"
run "$INSPECT" --verify "$D"
expect_rc 0 "the history restored"
echo "inspect_truncations: ok"
