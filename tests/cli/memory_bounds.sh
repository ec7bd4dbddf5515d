#!/usr/bin/env bash
# Memory bounds (the MEMORY sections of mq-produce(1), mq-consume(1) and
# mq-inspect(1)): buffers grow with the data, never with a size the data
# claims or a topic allows; readers accept what the topic accepts; an
# allocation that fails is exit 71 with a message, never an abort.
#
# Zip bombs come from tests/helpers/zstd_bomb.cc: one zstd batch of RLE
# blocks, 32 KB on disk for 1 GiB decompressed ("real"), or 79 bytes
# claiming 1 GiB and holding 128 KiB ("liar").
source "$(dirname "$0")/lib/common.bash"

BOMB="$BIN/tests/mq-test-zstd-bomb"
[[ -x $BOMB ]] || fail "$BOMB is not built"
TIME=/usr/bin/time
[[ -x $TIME ]] || fail "$TIME is missing (GNU time measures peak memory)"
GiB=1073741824
# Sanitizer builds reserve terabytes of shadow memory: an address-space cap
# cannot apply to them. Say so; the checks without a cap still run.
LIMITED=1
if grep -q __asan_init "$INSPECT"; then
  LIMITED=0
  echo "NOTE: sanitizer build: the ulimit -v checks are not run"
fi

# capped KBYTES CMD...: runs CMD under ulimit -v KBYTES (like run).
capped() {
  local kb="$1"
  shift
  set +e
  (ulimit -v "$kb"; timeout 120 "$@") >"$WORK/out" 2>"$WORK/err"
  rc=$?
  set -e
}
# peak CMD...: runs CMD (like run); sets kb to its peak resident set in KB.
peak() {
  set +e
  timeout 120 "$TIME" -o "$WORK/time" -f %M "$@" >"$WORK/out" 2>"$WORK/err"
  rc=$?
  set -e
  kb=$(tail -1 "$WORK/time")
}
# a_bytes N: N bytes of 'a', no newline.
a_bytes() { head -c "$1" /dev/zero | tr '\0' a; }

"$BOMB" $GiB $GiB --file "$WORK/real.log"
"$BOMB" $GiB 131072 --file "$WORK/liar.log"

# F9, mq-inspect: a frame claiming 1 GiB that holds 128 KiB is R9 at once,
# with a 2 GiB limit, allocating nothing near the claim (before: 1 GiB
# resident, and std::bad_alloc, exit 134, under the cap).
peak "$INSPECT" --verify --max-batch-bytes 2147483647 "$WORK/liar.log"
expect_rc 65 "verify liar"
grep -q "R9" "$WORK/out" "$WORK/err" || fail "verify liar: no R9: $(cat "$WORK/err")"
((kb < 65536)) || fail "verify liar: peak $kb KB, want < 64 MB"
if ((LIMITED)); then
  for mode in --verify -d; do
    capped 1000000 "$INSPECT" $mode --max-batch-bytes 2147483647 "$WORK/liar.log"
    expect_rc 65 "$mode liar under ulimit -v"
    # A real 1 GiB frame under a 1 GB cap: out of memory, exit 71 with a
    # message naming the file and batch (before: abort, 134).
    capped 1000000 "$INSPECT" $mode --max-batch-bytes 2147483647 "$WORK/real.log"
    expect_rc 71 "$mode real bomb under ulimit -v"
    grep -q "real.log: position 0: out of memory" "$WORK/err" ||
      fail "$mode real bomb: message: $(cat "$WORK/err")"
  done
fi
# Under the default limit both are R9, cheaply.
peak "$INSPECT" --verify "$WORK/real.log"
expect_rc 65 "verify real bomb, default limit"
((kb < 65536)) || fail "verify real bomb, default limit: peak $kb KB, want < 64 MB"

# F9, mq-consume: the same batches appended to a topic by its writer.
D="$WORK/d"
"$P" -C "$D" -t bombs --create </dev/null
"$BOMB" $GiB $GiB --append "$D/bombs-0"
"$BOMB" $GiB 131072 --append "$D/bombs-0"
peak "$C" -C "$D" -t bombs -o 1 -e --max-batch-bytes 2147483647
expect_rc 65 "consume liar"
grep -Eq "(offset|position) 32843: R9" "$WORK/err" || fail "consume liar: $(cat "$WORK/err")"
((kb < 65536)) || fail "consume liar: peak $kb KB, want < 64 MB"
if ((LIMITED)); then
  capped 1000000 "$C" -C "$D" -t bombs -e --max-batch-bytes 2147483647
  expect_rc 71 "consume real bomb under ulimit -v"
  grep -q "out of memory" "$WORK/err" || fail "consume real bomb: $(cat "$WORK/err")"
  capped 1000000 "$C" -C "$D" -t bombs -o 1 -e --max-batch-bytes 2147483647
  expect_rc 65 "consume liar under ulimit -v"
fi

# F6: max.message.bytes=1GiB costs nothing until a message that large comes
# (before: 1.05 GB resident for the one-byte message x, and abort under a
# 300 MB cap).
"$P" -C "$D" -t big --create -X max.message.bytes=$GiB </dev/null
echo x >"$WORK/x"
peak "$P" -C "$D" -t big "$WORK/x"
expect_rc 0 "produce x"
((kb < 65536)) || fail "produce x to a 1 GiB max.message.bytes topic: peak $kb KB, want < 64 MB"
if ((LIMITED)); then
  capped 300000 "$P" -C "$D" -t big "$WORK/x"
  expect_rc 0 "produce x under ulimit -v 300000"
  # A 400 MB message under a 300 MB cap: out of memory, exit 71 naming the
  # input and line (before: abort, 134).
  set +e
  (ulimit -v 300000; a_bytes 400000000 | timeout 120 "$P" -C "$D" -t big) >"$WORK/out" 2>"$WORK/err"
  rc=$?
  set -e
  expect_rc 71 "produce 400 MB under ulimit -v 300000"
  grep -q "<stdin>: out of memory for line 1" "$WORK/err" || fail "produce 400 MB: $(cat "$WORK/err")"
fi

# F6: a 100 MB message round trip. Readers take the topic's
# max.message.bytes into account (before: R2 "exceeds 67108864", exit 65
# from mq-consume and --verify).
"$P" -C "$D" -t large --create -X max.message.bytes=$GiB </dev/null
a_bytes 100000000 | "$P" -C "$D" -t large
run "$C" -C "$D" -t large -e
expect_rc 0 "consume 100 MB"
[[ $(stat -c %s "$WORK/out") == 100000001 ]] || fail "consume 100 MB: $(stat -c %s "$WORK/out") bytes"
head -c 100000000 "$WORK/out" | cmp -s - <(a_bytes 100000000) || fail "consume 100 MB: message differs"
run "$INSPECT" --verify "$D/large-0"
expect_rc 0 "verify the 100 MB partition"
run "$INSPECT" "$D/large-0/00000000000000000000.log"
expect_rc 0 "dump the 100 MB segment in its partition"
# A bare copy of the segment keeps --max-batch-bytes.
cp "$D/large-0/00000000000000000000.log" "$WORK/bare.log"
run "$INSPECT" --verify "$WORK/bare.log"
expect_rc 65 "verify a bare copy with the default limit"
grep -q "R2.*exceeds the maximum 67108864" "$WORK/out" "$WORK/err" || fail "bare copy: no R2"
run "$INSPECT" --verify --max-batch-bytes 200000000 "$WORK/bare.log"
expect_rc 0 "verify a bare copy with --max-batch-bytes"

echo "memory_bounds: ok"
