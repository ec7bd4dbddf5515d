#!/usr/bin/env bash
# mq-produce reads a regular file (man mq-produce INPUT): the same messages
# as through a pipe, from the file offset standard input is at, with bounded
# memory on a large file, the same refusals, and a clear end (exit 74) when
# another process truncates the file under it.
source "$(dirname "$0")/lib/common.bash"
D="$WORK/data"
TIME=/usr/bin/time
[[ -x $TIME ]] || fail "$TIME is missing (GNU time measures peak memory)"
"$P" -C "$D" -t T --create -q </dev/null

# lines N: N lines of 100 bytes.
lines() {
  awk -v n="$1" 'BEGIN { pad = sprintf("%89s", ""); gsub(/ /, "x", pad)
    for (i = 0; i < n; i++) printf "%010d%s\n", i, pad }'
}

# 1. A large file (80 MB): byte-exact, with a peak RSS far below the
# file's size.
lines 800000 >"$WORK/big"
"$TIME" -o "$WORK/time" -f %M "$P" -C "$D" -t big --create -q "$WORK/big"
kb=$(tail -1 "$WORK/time")
"$C" -C "$D" -t big -e -q | cmp - "$WORK/big" || fail "large file: not byte-exact"
((kb < 48 * 1024)) || fail "large file: peak RSS $kb KB for an 80 MB file (want < 48 MB)"

# 2. Standard input redirected from a file starts where its offset is (here
# after `head` read two lines and put the offset back), not at byte 0; the
# offset is not page aligned.
lines 5000 >"$WORK/small"
{ head -n 2 >/dev/null; "$P" -C "$D" -t off --create -q; } <"$WORK/small"
"$C" -C "$D" -t off -e -q | cmp - <(tail -n +3 "$WORK/small") ||
  fail "stdin from a file: did not start at the file offset"

# 3. The same refusal as through a pipe: a line over the maximum message
# size names the input, the line number and its byte offset.
{ lines 3; head -c 3000 /dev/zero | tr '\0' y; echo; lines 2; } >"$WORK/long"
run "$P" -C "$D" -t T --max-message-bytes 2000 "$WORK/long"
expect_rc 65 "long line in a file"
grep -q "$WORK/long: line 4 at byte offset 300 is larger than the maximum" "$WORK/err" ||
  fail "long line in a file: $(cat "$WORK/err")"
run "$P" -C "$D" -t T --max-message-bytes 2000 - <"$WORK/long"
expect_rc 65 "long line from a file on stdin"
grep -q "<stdin>: line 4 at byte offset 300 is larger" "$WORK/err" ||
  fail "long line from a file on stdin: $(cat "$WORK/err")"

# 4. A multi-byte delimiter and a last message without one.
{ for i in $(seq 1 300); do printf 'm%d::' "$i"; done; printf 'last'; } >"$WORK/multi"
"$P" -C "$D" -t multi --create -q -D '::' "$WORK/multi"
"$C" -C "$D" -t multi -e -q -D '::' >"$WORK/multi.out"
{ cat "$WORK/multi"; printf '::'; } | cmp - "$WORK/multi.out" || fail "multi-byte delimiter"

# Read ahead (sections 5 and 6) the file is read on a thread of its own, or,
# on two CPUs where appends do not fsync, on the appending thread between
# its appends (man mq-produce, INPUT). Both are run on two CPUs (the first
# two this test may use): page-cache appends read on the appending thread,
# --fsync batch on a thread of its own.
two_cpus=$("$PY" -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0))[:2])))')
[[ $two_cpus == *,* ]] || fail "sections 5 and 6 need two CPUs to read ahead; this test may use only $two_cpus"
pin=(taskset -c "$two_cpus")
echo "read ahead on CPUs $two_cpus"

# 5. Messages around and across the boundaries of the chunks a file is read
# in (read ahead in 256 KiB chunks, and a message of more than 64 KiB so far
# at a chunk's end is joined with the next one in a buffer of its own):
# lengths near both sizes and several chunks long, for newline and a
# two-byte delimiter (which a boundary may cut in two); byte-exact, read on
# either thread. A message several chunks long over the limit is refused
# naming its number and byte offset.
$PY - "$WORK/chunks" <<'PY'
import random, sys
rng = random.Random(7)
out = bytearray()
sizes = [0, 1, 99, 65535, 65536, 65537, 262143, 262144, 262145, 700001, 1 << 20]
while len(out) < 6 << 20:
    n = rng.choice(sizes) if rng.random() < 0.3 else rng.randrange(0, 300)
    out += bytes(rng.randrange(97, 123) for _ in range(min(n, 64))) * (n // 64) + \
        bytes(rng.randrange(97, 123) for _ in range(n % 64)) + b"\n"
open(sys.argv[1], "wb").write(out)
PY
tr '\n' '#' <"$WORK/chunks" | sed 's/#/::/g' >"$WORK/chunks2"
for sync in none batch; do
  "${pin[@]}" "$P" -C "$D" -t "chunks-$sync" --create -q -X max.message.bytes=2000000 \
    --fsync "$sync" "$WORK/chunks"
  "$C" -C "$D" -t "chunks-$sync" -e -q | cmp - "$WORK/chunks" ||
    fail "chunk boundaries (--fsync $sync): not byte-exact"
  "${pin[@]}" "$P" -C "$D" -t "chunks2-$sync" --create -q -X max.message.bytes=2000000 -D '::' \
    --fsync "$sync" "$WORK/chunks2"
  "$C" -C "$D" -t "chunks2-$sync" -e -q -D '::' | cmp - "$WORK/chunks2" ||
    fail "chunk boundaries, two-byte delimiter (--fsync $sync): not byte-exact"
  # Several files, each read ahead in turn (the reading of one ends before
  # the next one's starts).
  "${pin[@]}" "$P" -C "$D" -t "files-$sync" --create -q -X max.message.bytes=2000000 \
    --fsync "$sync" "$WORK/chunks" "$WORK/small" "$WORK/chunks"
  "$C" -C "$D" -t "files-$sync" -e -q | cmp - <(cat "$WORK/chunks" "$WORK/small" "$WORK/chunks") ||
    fail "three files read ahead (--fsync $sync): not byte-exact"
done
{ lines 3000; head -c 1500000 /dev/zero | tr '\0' y; echo; lines 2; } >"$WORK/longer"
for sync in none batch; do
  run "${pin[@]}" "$P" -C "$D" -t T --max-message-bytes 1000000 --fsync "$sync" "$WORK/longer"
  expect_rc 65 "a line of several chunks over the limit (--fsync $sync)"
  grep -q "$WORK/longer: line 3001 at byte offset 300000 is larger than the maximum" "$WORK/err" ||
    fail "a line of several chunks over the limit (--fsync $sync): $(cat "$WORK/err")"
done

# 6. The file is truncated while it is read: exit 74 naming the file; what
# was appended before is a valid log. A slow run gives the truncation time
# to land while the file is read: an fsync per 4 KB append (read on a
# thread of its own), or zstd's slowest level (read on the appending thread).
i=0
for slow in "--fsync batch --append-bytes 4096 --batch-bytes 4096" "-z zstd --zstd-level 19"; do
  i=$((i + 1))
  lines 200000 >"$WORK/shrinks"
  "$P" -C "$D" -t "shrink$i" --create -q </dev/null
  # shellcheck disable=SC2086 # $slow is the options, split on purpose
  "${pin[@]}" "$P" -C "$D" -t "shrink$i" -q $slow "$WORK/shrinks" 2>"$WORK/shrink.err" &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 600); do
    [[ $(stat -c %s "$D/shrink$i-0/00000000000000000000.log" 2>/dev/null || echo 0) -gt 0 ]] && break
    sleep 0.05
  done
  : >"$WORK/shrinks"
  set +e
  wait "$pid"
  rc=$?
  set -e
  [[ $rc == 74 ]] || fail "truncated input ($slow): exit $rc, want 74 ($(cat "$WORK/shrink.err"))"
  grep -q "$WORK/shrinks: the file shrank while it was read" "$WORK/shrink.err" ||
    fail "truncated input ($slow): $(cat "$WORK/shrink.err")"
  "$INSPECT" --verify "$D/shrink$i-0" >/dev/null || fail "truncated input ($slow): log does not verify"
  n=$("$C" -C "$D" -t "shrink$i" -e -q | wc -l)
  ((n > 0 && n < 200000)) || fail "truncated input ($slow): $n messages appended"
  echo "truncated input ($slow): $n of 200000 messages appended, then exit 74"
done
echo "ok"
