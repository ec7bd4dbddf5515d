#!/usr/bin/env bash
# Message framing of mq-produce (one-byte delimiters are found 64 bytes at a
# time, man mq-produce): seeded random inputs whose messages are empty,
# short, longer than 64 bytes, or exactly at the size limit, with the
# delimiter at every position of a 64-byte block, read from a regular file,
# a pipe, and a pipe written in small pieces, for newline, -D ',' and -0:
# consumed back byte-exact. A
# message one byte over --max-message-bytes is refused with 65 naming its
# number, and so is the same message with the limit one byte larger
# accepted. MQ_TEST_SEED repeats a run.
source "$(dirname "$0")/lib/common.bash"
SEED=${MQ_TEST_SEED:-$RANDOM}
echo "produce_framing: seed $SEED (MQ_TEST_SEED=$SEED repeats it)"
export MQ_DIR="$WORK/data"
LIMIT=1000

# gen DELIM_OCTAL FILE: 3000 messages of random bytes other than the
# delimiter, lengths drawn to hit every block position and the limit.
gen() {
  $PY - "$SEED" "$1" "$2" "$LIMIT" <<'PY'
import random, sys
seed, delim, path, limit = int(sys.argv[1]), int(sys.argv[2], 8), sys.argv[3], int(sys.argv[4])
rng = random.Random(seed * 1000 + delim)
alphabet = bytes(b for b in range(256) if b != delim)
out = bytearray()
for i in range(3000):
    r = rng.random()
    if r < 0.1:
        n = 0
    elif r < 0.6:
        n = rng.randrange(1, 64)
    elif r < 0.95:
        n = rng.randrange(64, 300)
    else:
        n = limit
    out += bytes(rng.choice(alphabet) for _ in range(n)) + bytes([delim])
open(path, "wb").write(out)
PY
}

n=0
for framing in newline comma nul; do
  case $framing in
    newline) oct=012 flags=() cflags=(-f '%s\n') ;;
    comma) oct=054 flags=(-D ',') cflags=(-f '%s,') ;;
    nul) oct=000 flags=(-0) cflags=(-f '%s\0') ;;
  esac
  gen "$oct" "$WORK/in.$framing"
  for via in file pipe trickle; do
    t="$framing-$via"
    "$P" -t "$t" --create -q </dev/null
    if [[ $via == file ]]; then
      "$P" -t "$t" "${flags[@]}" --max-message-bytes "$LIMIT" -q "$WORK/in.$framing"
    elif [[ $via == pipe ]]; then
      cat "$WORK/in.$framing" | "$P" -t "$t" "${flags[@]}" --max-message-bytes "$LIMIT" -q
    else
      # Random pieces of 1-150 bytes, each written at once: reads end
      # mid-message, and the unfinished message moves to the buffer start.
      $PY -c '
import os, random, sys
data = open(sys.argv[1], "rb").read()
rng = random.Random(int(sys.argv[2]))
at = 0
while at < len(data):
    n = rng.randrange(1, 151)
    os.write(1, data[at:at + n])
    at += n
' "$WORK/in.$framing" "$SEED" | "$P" -t "$t" "${flags[@]}" --max-message-bytes "$LIMIT" -q
    fi
    "$C" -t "$t" -e -q "${cflags[@]}" >"$WORK/out"
    cmp "$WORK/in.$framing" "$WORK/out" || fail "$t: not byte-exact (seed $SEED)"
    n=$((n + 1))
  done
done
echo "ok: $n round trips (3 framings; a regular file, a pipe, a pipe written in small pieces)"

# One byte over the limit: refused with 65, naming message 3; nothing of
# the run is appended past what came before it.
printf 'a\nbb\n%s\nd\n' "$(head -c $((LIMIT + 1)) /dev/zero | tr '\0' x)" >"$WORK/over"
for via in file pipe; do
  "$P" -t "over-$via" --create -q </dev/null
  if [[ $via == file ]]; then
    run "$P" -t "over-$via" --max-message-bytes "$LIMIT" "$WORK/over"
  else
    run bash -c "cat '$WORK/over' | '$P' -t 'over-$via' --max-message-bytes $LIMIT"
  fi
  expect_rc 65 "$via: a line one byte over the limit"
  grep -q "line 3 " "$WORK/err" || fail "$via: the refused line is not named: $(cat "$WORK/err")"
  "$P" -t "ok-$via" --create -q </dev/null
  if [[ $via == file ]]; then
    run "$P" -t "ok-$via" --max-message-bytes $((LIMIT + 1)) "$WORK/over"
  else
    run bash -c "cat '$WORK/over' | '$P' -t 'ok-$via' --max-message-bytes $((LIMIT + 1))"
  fi
  expect_rc 0 "$via: the same line with the limit one byte larger"
done
echo "ok: the size limit, exactly"
