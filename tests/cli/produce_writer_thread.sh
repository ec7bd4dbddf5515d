#!/usr/bin/env bash
# mq-produce appends on threads of their own when it may run on two CPUs or
# more (partition p on thread p mod their number), and on its reading thread
# otherwise (man mq-produce, Batching).
# Both ways give the same log: the same messages in the same partitions and
# order; an append that fails stops the run with the same status, starts
# no append after it, and a --producer-id re-run appends exactly what is
# missing. The one-CPU runs are pinned with taskset; the others may use
# every CPU this test may use.
source "$(dirname "$0")/lib/common.bash"
command -v taskset >/dev/null || fail "taskset (util-linux) is missing"
cpus=$(nproc)
echo "CPUs: $cpus (the threaded path runs only with 2 or more)"

# lines N: N lines of 100 bytes, keys k0..k6 before a tab.
lines() {
  awk -v n="$1" 'BEGIN { pad = sprintf("%85s", ""); gsub(/ /, "x", pad)
    for (i = 0; i < n; i++) printf "k%d\t%010d%s\n", i % 7, i, pad }'
}
lines 60000 >"$WORK/in"
cut -f2 "$WORK/in" >"$WORK/values"

# 1. Keyed into 3 partitions and unkeyed into 1, under one CPU and under
# all: per partition, the same values in the same order.
for mode in one all; do
  pin=()
  [[ $mode == one ]] && pin=(taskset -c 0)
  D="$WORK/$mode"
  "${pin[@]}" "$P" -C "$D" -t keyed --create --partitions 3 -K '\t' -q "$WORK/in"
  "${pin[@]}" "$P" -C "$D" -t plain --create -q "$WORK/values"
  for p in 0 1 2; do "$C" -C "$D" -t keyed -p "$p" -e -q >"$WORK/$mode.keyed.$p"; done
  "$C" -C "$D" -t plain -e -q | cmp - "$WORK/values" || fail "$mode CPU(s): one partition is not byte-exact"
  # Compressed: built plain and compressed by the appending thread when
  # there is one; the same messages, and batches that really are compressed.
  for z in zstd lz4 gzip snappy; do
    "${pin[@]}" "$P" -C "$D" -t "z$z" --create -z "$z" -q "$WORK/values"
    "$C" -C "$D" -t "z$z" -e -q | cmp - "$WORK/values" || fail "$mode CPU(s): -z $z is not byte-exact"
    size=$(cat "$D/z$z-0"/*.log | wc -c)
    ((size < $(wc -c <"$WORK/values") / 4)) || fail "$mode CPU(s): -z $z log is $size bytes: not compressed"
  done
  # A slow codec level: the writer falls behind and the reading thread
  # compresses some jobs itself; the log is the same.
  "${pin[@]}" "$P" -C "$D" -t zslow --create -z zstd --zstd-level 15 -q "$WORK/values"
  "$C" -C "$D" -t zslow -e -q | cmp - "$WORK/values" || fail "$mode CPU(s): -z zstd --zstd-level 15 is not byte-exact"
  # An fsync per append: the writer falls behind and the reading thread
  # gives some batches their CRC itself (--verify below checks every CRC).
  "${pin[@]}" "$P" -C "$D" -t synced --create --fsync batch -q "$WORK/values"
  "$C" -C "$D" -t synced -e -q | cmp - "$WORK/values" || fail "$mode CPU(s): --fsync batch is not byte-exact"
  "$INSPECT" --verify "$D" >/dev/null || fail "$mode CPU(s): the data directory does not verify"
done
for p in 0 1 2; do
  cmp "$WORK/one.keyed.$p" "$WORK/all.keyed.$p" || fail "keyed partition $p differs between one CPU and all"
done

# 1b. Many partitions, more than may stay open under the open-file limit:
# the threads each close their least recently used partitions; per
# partition, the same values in the same order either way.
awk '{ printf "k%d\t%s\n", NR % 997, $0 }' "$WORK/values" >"$WORK/wide.in"
for mode in one all; do
  pin=()
  [[ $mode == one ]] && pin=(taskset -c 0)
  D="$WORK/wide-$mode"
  (ulimit -n 64; exec "${pin[@]}" "$P" -C "$D" -t wide --create --partitions 50 -K '\t' -q --append-bytes 65536 "$WORK/wide.in") ||
    fail "$mode CPU(s): 50 partitions under ulimit -n 64 failed"
  for p in $(seq 0 49); do "$C" -C "$D" -t wide -p "$p" -e -q; echo "-- $p"; done >"$WORK/wide.$mode"
done
cmp "$WORK/wide.one" "$WORK/wide.all" || fail "50 partitions: the partitions differ between one CPU and all"
n=$(grep -vc '^-- ' "$WORK/wide.all")
((n == 60000)) || fail "50 partitions: $n messages, want 60000"
n=$(cat "$WORK"/all.keyed.* | wc -l)
((n == 60000)) || fail "keyed: $n messages, want 60000"

# 2. An append that fails (the segment reaches the file-size limit, with
# SIGXFSZ ignored so that write() says EFBIG): the same status and message
# both ways, nothing appended after it, and a re-run with the same
# producer id appends exactly what is missing.
for mode in one all; do
  pin=()
  [[ $mode == one ]] && pin=(taskset -c 0)
  D="$WORK/efbig-$mode"
  "$P" -C "$D" -t t --create --partitions 3 -q </dev/null
  set +e
  (trap '' XFSZ; ulimit -f 1024; exec "${pin[@]}" "$P" -C "$D" -t t --producer-id job -q "$WORK/values") \
    2>"$WORK/err"
  rc=$?
  set -e
  expect_rc 65 "$mode CPU(s): append past the file-size limit"
  grep -q "append: .*\.log: write at .*: File too large" "$WORK/err" ||
    fail "$mode CPU(s): the failed append is not named: $(cat "$WORK/err")"
  "$INSPECT" --verify "$D" >/dev/null || fail "$mode CPU(s): the log does not verify after EFBIG"
  # Unkeyed with a producer id: message i goes to partition i % 3, so each
  # partition must hold a prefix of its share of the input. (With several
  # append threads one may have stopped a partition before its first
  # append: some partition holds messages, none holds all.)
  held=0
  for p in 0 1 2; do
    "$C" -C "$D" -t t -p "$p" -e -q >"$WORK/got"
    awk -v p="$p" '(NR - 1) % 3 == p' "$WORK/values" >"$WORK/share"
    got=$(wc -l <"$WORK/got")
    held=$((held + got))
    ((got < $(wc -l <"$WORK/share"))) || fail "$mode CPU(s): partition $p holds its whole share despite the failure"
    head -n "$got" "$WORK/share" | cmp - "$WORK/got" ||
      fail "$mode CPU(s): partition $p is not a prefix of its share after a failed append"
  done
  ((held > 0)) || fail "$mode CPU(s): nothing appended before the failure"
  "${pin[@]}" "$P" -C "$D" -t t --producer-id job -q "$WORK/values"
  for p in 0 1 2; do
    awk -v p="$p" '(NR - 1) % 3 == p' "$WORK/values" >"$WORK/share"
    "$C" -C "$D" -t t -p "$p" -e -q | cmp - "$WORK/share" ||
      fail "$mode CPU(s): partition $p after the re-run is not exactly its share"
  done
done

# 3. --print-offsets waits for its appends: one line per message, offsets
# 0..N-1 of each partition in input order.
"$P" -C "$WORK/all" -t po --create --partitions 3 -K '\t' -q --print-offsets "$WORK/in" >"$WORK/offsets"
$PY - "$WORK/offsets" <<'PY'
import sys
nxt = {}
lines = open(sys.argv[1]).read().split("\n")[:-1]
assert len(lines) == 60000, len(lines)
for l in lines:
    p, o = map(int, l.split())
    assert o == nxt.get(p, 0), (p, o, nxt.get(p, 0))
    nxt[p] = o + 1
PY
# 4. --print-offsets into one partition appends on the reading thread (each
# append is waited for: a thread of its own would only add wake-ups); into
# several the append threads stay. Counted in /proc after the first offset
# came back, while the producer waits for more input on a pipe.
threads_after_first_offset() { # topic [flags...]
  local t=$1
  shift
  coproc PRODUCER { exec "$P" -C "$WORK/all" -t "$t" -q --print-offsets "$@"; }
  local pid=$PRODUCER_PID
  printf 'k1\tfirst\n' >&"${PRODUCER[1]}"
  local line
  read -r -t 30 line <&"${PRODUCER[0]}" || fail "$t: no offset printed for the first message"
  n=$(ls "/proc/$pid/task" | wc -l)
  exec {PRODUCER[1]}>&-
  wait "$pid" || fail "$t: mq-produce failed"
  echo "$n"
}
"$P" -C "$WORK/all" -t po1 --create -q </dev/null
n=$(threads_after_first_offset po1 --fsync batch)
((n == 1)) || fail "--print-offsets into one partition: $n threads, want 1"
n=$(threads_after_first_offset po -K '\t' -p 1)
((n == 1)) || fail "--print-offsets -p 1: $n threads, want 1"
if ((cpus >= 2)); then
  n=$(threads_after_first_offset po -K '\t')
  ((n >= 2)) || fail "--print-offsets into 3 partitions on $cpus CPUs: $n threads, want the append threads too"
fi

echo "produce_writer_thread: ok"
