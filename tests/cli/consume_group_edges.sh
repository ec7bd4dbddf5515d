#!/usr/bin/env bash
# Consumer-group edges: a member following an idle topic exits (status 0)
# once the reader of its standard output has gone, and lets its partitions
# go, in every commit mode; group files of the wrong kind are refused
# (exit 77) naming their full path; --reset-offsets --to-offset -5 is a
# usage error that says what an offset is; --describe's total lag never
# claims 0 over partitions whose lag is unknown; -v counts no message whose
# write failed; a member resumes where the log was cut below its committed
# offset (its truncation history), not at the log end.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
G="$MQ_DIR/groups"

# owners GROUP TOPIC: the CONSUMER-ID of each partition row ("null": none).
owners() {
  "$C" --describe -G "$1" -t "$2" -J | jq -r 'select(.type == "partition") | .consumer_id' |
    tr '\n' ' '
}

# --- a member whose reader went away -------------------------------------------------
# `mq-consume -G g | (sleep 1)` on an idle topic: once the subshell exits, the
# member must stop (status 0) and leave its partitions. The timeout only
# stops a member that never does (status 124).
produce -t idle --create --partitions 2 </dev/null
for mode in plain alo amo ack; do
  flags=(-G "g$mode")
  case $mode in
    plain) flags=() ;;
    amo) flags+=(--at-most-once) ;;
    ack) flags+=(--ack-fd 3) ;;
  esac
  set +e
  timeout 60 bash -c '"$@" 3</dev/null | (sleep 1); exit "${PIPESTATUS[0]}"' _ \
    "$C" -t idle "${flags[@]}" 2>"$WORK/err"
  rc=$?
  set -e
  expect_rc 0 "reader gone ($mode)"
  if [[ $mode != plain ]]; then
    [[ $(owners "g$mode" idle) == "null null " ]] ||
      fail "reader gone ($mode): partitions still owned: $(owners "g$mode" idle)"
  fi
done

# --- group files of the wrong kind: refused, named with their full path ------------
produce -t t --create --partitions 2 </dev/null
seq 1 6 | produce -t t
# A directory where the staging file of a new offsets file goes (R87: the
# group's first commit writes one; later ones write in place).
mkdir -m 0750 "$G/tmpdir"
mkdir "$G/tmpdir/offsets.tmp"
run "$C" -t t -G tmpdir -e
expect_rc 77 "offsets.tmp a directory"
grep -qF "$G/tmpdir/offsets.tmp: is a directory, not a regular file; refused" "$WORK/err" ||
  fail "offsets.tmp a directory: $(cat "$WORK/err")"
rmdir "$G/tmpdir/offsets.tmp"

mkdir -m 0750 "$G/memfile"
: >"$G/memfile/members"
run "$C" -t t -G memfile -e
expect_rc 77 "members a file"
grep -qF "$G/memfile/members: is a file, not a directory; refused" "$WORK/err" ||
  fail "members a file: $(cat "$WORK/err")"

mkdir -m 0750 "$WORK/elsewhere"
ln -s "$WORK/elsewhere" "$G/linked"
run "$C" -t t -G linked -e
expect_rc 77 "group a symlink"
grep -qF "$G/linked: is a symlink; refused" "$WORK/err" || fail "group a symlink: $(cat "$WORK/err")"

D2="$WORK/data2"
produce -C "$D2" -t t --create </dev/null
: >"$D2/groups"
run "$C" -C "$D2" -t t -G g -e
expect_rc 77 "groups a file"
grep -qF "$D2/groups: is a file, not a directory; refused" "$WORK/err" ||
  fail "groups a file: $(cat "$WORK/err")"

# --- --reset-offsets --to-offset with a negative offset ----------------------------
run "$C" --reset-offsets -G tmpdir -t t --to-offset -5
expect_rc 64 "--to-offset -5"
grep -q "to-offset.*expected an offset (an integer >= 0), got '-5'" "$WORK/err" ||
  fail "--to-offset -5: $(cat "$WORK/err")"
if grep -q "1797693" "$WORK/err"; then fail "--to-offset -5: a floating-point range: $(cat "$WORK/err")"; fi

# --- total lag over partitions without a committed offset --------------------------
# With no commit and no owner a partition is unread: its LAG is its backlog
# and counts. Owned with no commit yet, its LAG is unknown (-): the total
# says how many it leaves out, and is - when it knows none.
produce -t u --create --partitions 2 </dev/null
seq 1 5 | produce -t u -p 0
seq 1 3 | produce -t u -p 1
run "$C" --describe -G tmpdir -t u
expect_rc 0 "describe, nothing committed"
grep -qx "total lag: 8" "$WORK/out" || fail "describe, nothing committed: $(cat "$WORK/out")"
run "$C" --reset-offsets -G tmpdir -t u -p 0 --to-offset 1 --execute
expect_rc 0 "reset of u-0"
run "$C" --describe -G tmpdir -t u
expect_rc 0 "describe, one partition committed"
grep -qx "total lag: 7" "$WORK/out" || fail "describe, one partition committed: $(cat "$WORK/out")"
# A member whose handler never finishes owns both partitions and commits nothing.
"$C" -t u -G held --exec sleep "599.$$" >/dev/null 2>"$WORK/held.err" &
held=$!
for _ in $(seq 1 300); do
  "$C" --describe -G held -t u >"$WORK/out" 2>/dev/null || true
  [[ $(grep -c " $held " "$WORK/out") == 2 ]] && break
  sleep 0.1
done
grep -qx "total lag: - (unknown: 2 partitions with LAG -)" "$WORK/out" ||
  fail "describe, owned and nothing committed: $(cat "$WORK/out")"
[[ $("$C" --describe -G held -t u -J | jq -r 'select(.type == "summary") | .total_lag') == null ]] ||
  fail "describe -J, owned and nothing committed: total_lag not null"
kill -KILL "$held"; wait "$held" 2>/dev/null || true
pkill -KILL -f "^sleep 599.$$$" 2>/dev/null || true

# --- -v counts only messages that reached standard output --------------------------
# 2 MB of output into a pipe whose reader exits without reading: the first
# write of the 1 MB buffer fails (at most a pipe's capacity gets in before
# the reader is gone), so no message was processed.
produce -t big --create </dev/null
seq -f '%0100.0f' 1 20000 | produce -t big
for mode in plain group; do
  flags=()
  [[ $mode == group ]] && flags=(-G gbig)
  set +e
  "$C" -t big -e -v "${flags[@]}" 2>"$WORK/err" | true
  set -e
  grep -qx "Processed a total of 0 messages" "$WORK/err" ||
    fail "-v, reader gone ($mode): $(cat "$WORK/err")"
done
# --- a log cut below the committed offset, then appended to ---------------------------
# Committed 10; a machine crash loses the log's tail from offset 4 (the
# segment cut inside its fifth batch, the boot id changed: the state file's
# end is no longer trusted); 5 messages are appended (the log ends at 9).
# A member starts where the log was cut, 4, not at the log end: the
# messages appended after the truncation are read (R59, mq-consume(1)).
produce -t cut --create </dev/null
seq -w 1 10 | produce -t cut --batch-bytes 64  # a batch per message
run "$C" -t cut -G gcut -e
expect_rc 0 "cut: first run"
seg="$MQ_DIR/cut-0/00000000000000000000.log"
batch=$(($(stat -c %s "$seg") / 10))
truncate -s $((4 * batch + 5)) "$seg"
seq 11 15 | MQ_TEST_BOOT_ID=00112233-4455-6677-8899-aabbccddeeff produce -t cut 2>/dev/null
grep -qx "cut=4 [0-9]* [0-9]*" "$MQ_DIR/cut-0/truncations" || fail "cut: not recorded"
run "$C" --describe -G gcut -t cut
grep -q "^gcut  *cut  *0  *10  *9  *5 .* diverged" "$WORK/out" || fail "cut: describe: $(cat "$WORK/out")"
run "$C" -t cut -G gcut -e
expect_rc 0 "cut: after it"
expect_eq "cut: messages appended after the truncation" "11 12 13 14 15 " "$(tr '\n' ' ' <"$WORK/out")"
grep -q "group gcut: partition 0: the log was truncated to offset 4 after offset 10 was committed" \
  "$WORK/err" || fail "cut: not said: $(cat "$WORK/err")"
run "$C" -t cut -G gcut -e
expect_rc 0 "cut: the run after"
[[ ! -s "$WORK/out" && ! -s "$WORK/err" ]] || fail "cut: read again: $(cat "$WORK/out" "$WORK/err")"
echo "consume_group_edges: ok"
