#!/usr/bin/env bash
# Hostile files: absurd lengths, truncation at every byte, random junk and
# malformed indexes. mq-inspect must answer each with exit 65 and a message
# naming the file and a byte position: never a crash, a hang or a huge
# allocation (the address space is capped below the lengths claimed).
source "$(dirname "$0")/lib/common.bash"

SEED="${SEED:-$RANDOM}"
# 1 GiB of address space: enough to run, far too little to allocate what a
# hostile length claims (up to 4 GiB). Sanitizer builds reserve terabytes of
# shadow memory, so they run without the cap.
VMEM=1048576
if grep -q __asan_init "$INSPECT"; then VMEM=unlimited; fi
echo "SEED=$SEED"

fail() { echo "FAIL (SEED=$SEED): $*" >&2; exit 1; }
# check FILE MODE...: runs mq-inspect on FILE in each mode; each run must exit
# 65 and print something naming FILE (stderr, or stdout under -J).
check() {
  local file="$1" rc
  shift
  for mode in "$@"; do
    set +e
    # shellcheck disable=SC2086
    (ulimit -v "$VMEM"; timeout 60 "$INSPECT" $mode "$file") >"$WORK/out" 2>"$WORK/err"
    rc=$?
    set -e
    [[ $rc == 65 ]] || fail "$mode $file: exit $rc, want 65; stderr: $(head -c 2000 "$WORK/err")"
    grep -qF "$file" "$WORK/err" "$WORK/out" || fail "$mode $file: the file is not named"
  done
}
# A 61-byte header with BATCHLENGTH (8 hex digits) and valid magic.
header_with_length() {
  hex2bin "0000000000000000${1}00000000020000000000000000000000000000000000000000000000000000ffffffffffffffffffffffffffff00000001"
}

V1=00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063cffffffffffffffffffffffffffff0000000112000000010631323300
mkdir "$WORK/p"
LOG="$WORK/p/00000000000000000000.log"

# --- absurd batch lengths: 0, 48, 2^31-1, 0xFFFFFFFF (-1), 0x80000000 (INT32_MIN) ---------
for len in 00000000 00000030 7fffffff ffffffff 80000000; do
  header_with_length "$len" >"$LOG"
  check "$LOG" "" "-r" "-J -d" "--verify"
  grep -q "position 0" "$WORK/err" "$WORK/out" || grep -q "Found 61 invalid bytes" "$WORK/err" ||
    fail "length $len: no byte position in: $(cat "$WORK/err")"
  # The same header after a valid batch: position 71.
  { hex2bin "$V1"; header_with_length "$len"; } >"$LOG"
  check "$LOG" "" "--verify"
  grep -q "position 71\|Found 61 invalid bytes" "$WORK/err" || fail "length $len after V1: $(cat "$WORK/err")"
done

# --- bad magic, and a length past --max-batch-bytes ---------------------------------------
{ hex2bin "${V1:0:32}"; printf '\x07'; hex2bin "${V1:34}"; } >"$LOG"
check "$LOG" "" "--verify"
hex2bin "$V1" >"$LOG"
check "$LOG" "--max-batch-bytes 64" "--verify --max-batch-bytes 64"

# --- V1 cut at every byte: the torn part is reported, the rest is not touched -------------
for ((cut = 1; cut < 71; cut++)); do
  hex2bin "${V1:0:$((2 * cut))}" >"$LOG"
  check "$LOG" ""
  grep -qx "Found $cut invalid bytes at the end of $LOG" "$WORK/err" || fail "cut at $cut: $(cat "$WORK/err")"
  case $cut in
    1 | 16 | 17 | 60 | 61 | 70)
      check "$LOG" "--verify"
      grep -q "$LOG: position 0: " "$WORK/err" || fail "verify cut at $cut: $(cat "$WORK/err")" ;;
  esac
done

# --- random junk, alone and after a valid batch ----------------------------------------------
for i in 1 2 3 4 5 6; do
  "$PY" -c '
import random, sys
random.seed(int(sys.argv[1]))
sys.stdout.buffer.write(bytes(random.getrandbits(8) for _ in range(random.randrange(1, 70000))))
' "$((SEED * 10 + i))" >"$WORK/junk"
  cp "$WORK/junk" "$LOG"
  check "$LOG" "-d" "--verify" "-J -r"
  { hex2bin "$V1"; cat "$WORK/junk"; } >"$LOG"
  check "$LOG" "-d" "--verify"
done
# Zeros after a valid batch (a preallocated or half-written tail).
{ hex2bin "$V1"; head -c 4096 /dev/zero; } >"$LOG"
check "$LOG" "" "--verify"
grep -q "$LOG: position 71: " "$WORK/err" || fail "zero tail: $(cat "$WORK/err")"

# --- records that lie about their lengths (CRC fixed up, so R8 is what catches them) ---------
"$PY" - "$V1" "$WORK/p" <<'EOF'
import sys
v1 = bytearray(bytes.fromhex(sys.argv[1]))
from mqbatch import fix_crc
# Record bytes start at 61: length, attributes, tsDelta, offDelta, keyLen, valueLen, ...
for i, (at, val) in enumerate([(61, 0x7e), (61, 0x01), (65, 0x7e), (66, 0x7e), (66, 0x01),
                                (61, 0xff), (70, 0x7e)]):
    b = bytearray(v1)
    b[at] = val
    fix_crc(b)
    open(f"{sys.argv[2]}/lie{i}.bin", "wb").write(b)
EOF
for f in "$WORK"/p/lie*.bin; do
  cp "$f" "$LOG"
  check "$LOG" "-d" "-J -d" "--verify"
  grep -q "$LOG: position 0: R8\|\"rule\":\"R8\"" "$WORK/err" "$WORK/out" ||
    fail "$(basename "$f"): want R8 at offset 0: $(cat "$WORK/err" "$WORK/out")"
done

# --- malformed indexes ---------------------------------------------------------------------------
hex2bin "$V1" >"$LOG"
head -c 7 /dev/urandom >"$WORK/p/00000000000000000000.index"
check "$WORK/p/00000000000000000000.index" "" "--verify"
grep -q "R13" "$WORK/err" || fail "index of 7 bytes: $(cat "$WORK/err")"
head -c 13 /dev/urandom >"$WORK/p/00000000000000000000.timeindex"
check "$WORK/p/00000000000000000000.timeindex" "" "--verify"
grep -q "R14" "$WORK/err" || fail "time index of 13 bytes: $(cat "$WORK/err")"
# Entries pointing past the end of the log, or at no batch start.
hex2bin 000000007fffffff >"$WORK/p/00000000000000000000.index"
check "$WORK/p/00000000000000000000.index" "--verify"
hex2bin 0000000000000005 >"$WORK/p/00000000000000000000.index"
check "$WORK/p/00000000000000000000.index" "--verify"

# --- a partition directory full of junk ------------------------------------------------------------
mkdir "$WORK/junk-0"
for base in 00000000000000000000 00000000000000000100; do
  head -c 5000 /dev/urandom >"$WORK/junk-0/$base.log"
  head -c 80 /dev/urandom >"$WORK/junk-0/$base.index"
  head -c 96 /dev/urandom >"$WORK/junk-0/$base.timeindex"
done
check "$WORK/junk-0" "--verify" "-J --verify"

echo "ok"
