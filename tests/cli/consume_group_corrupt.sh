#!/usr/bin/env bash
# A corrupt batch in one partition stops that partition, not the group
# member (format-spec/group.md §14.7): in print mode, --at-most-once and
# --exec, the member delivers every other partition, names the damage on
# stderr (file, byte position, rule, as mq-inspect --verify does), commits
# up to the batch, and exits 65 at the end; --describe shows the partition
# as corrupt (exit 65); a following member goes on delivering the other
# partitions' appends; a member of several topics names the topic-partition.
# --skip-corrupt skips the batch, says so, commits past it and exits 1.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }

# Four partitions of three batches (one message each); partition 2's second
# batch fails its CRC (R4).
produce -t t --create --partitions 4 </dev/null
for p in 0 1 2 3; do
  for i in 1 2 3; do echo "p$p-m$i" | produce -t t -p "$p"; done
done
SEG="$MQ_DIR/t-2/00000000000000000000.log"
BATCH=$(($(stat -c %s "$SEG") / 3))
flip_byte "$SEG" $((2 * BATCH - 5))
all_but_2() { for p in 0 1 3; do for i in 1 2 3; do echo "p$p-m$i"; done; done; echo p2-m1; }
WANT=$(all_but_2 | sort)
# said_stopped WHAT: stderr names partition 2, the file, the byte position and R4.
said_stopped() {
  grep -q "group [a-z0-9]*: partition 2 stopped at offset 1: $SEG: position $BATCH: R4: " "$WORK/err" ||
    fail "$1: the stop is not said with file, position and rule: $(cat "$WORK/err")"
}
# current GROUP PARTITION: its committed offset (--describe -J).
current() {
  "$C" --describe -G "$1" -t t -J 2>/dev/null |
    jq -r "select(.type == \"partition\" and .partition == $2) | .current_offset"
}

# --- print mode, at least once and at most once ------------------------------------
for mode in alo amo; do
  flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  run "$C" -t t -G "g$mode" -e "${flags[@]}"
  expect_rc 65 "$mode: a corrupt batch in partition 2"
  expect_eq "$mode: every other partition delivered" "$WANT" "$(sort "$WORK/out")"
  said_stopped "$mode"
  for p in 0 1 3; do
    [[ $(current "g$mode" $p) == 3 ]] || fail "$mode: partition $p committed $(current "g$mode" $p)"
  done
  [[ $(current "g$mode" 2) == 1 ]] || fail "$mode: partition 2 committed $(current "g$mode" 2), not 1"
  # --describe: partition 2 is corrupt (and said, with the damage), exit 65.
  run "$C" --describe -G "g$mode" -t t
  expect_rc 65 "$mode: --describe"
  grep -q "^g$mode  *t  *2  *1  *3  *2  *- .* corrupt$" "$WORK/out" ||
    fail "$mode: --describe row: $(cat "$WORK/out")"
  grep -q "^g$mode  *t  *0  *3  *3  *0 .* -$" "$WORK/out" || fail "$mode: --describe: $(cat "$WORK/out")"
  grep -q "t-2: stopped at offset 1: $SEG: position $BATCH: R4: " "$WORK/err" ||
    fail "$mode: --describe does not name the damage: $(cat "$WORK/err")"
  run "$C" --describe -G "g$mode" -t t -J
  expect_rc 65 "$mode: --describe -J"
  jq -se '.[] | select(.type == "partition" and .partition == 2) | .note == "corrupt" and
          (.error | contains("R4"))' "$WORK/out" >/dev/null ||
    fail "$mode: --describe -J: $(cat "$WORK/out")"
  # A second run stops at once: nothing again, 65 again.
  run "$C" -t t -G "g$mode" -e "${flags[@]}"
  expect_rc 65 "$mode: the run after"
  [[ ! -s "$WORK/out" ]] || fail "$mode: the run after printed $(cat "$WORK/out")"
  said_stopped "$mode: the run after"
done
# -q silences the report, not the status.
run "$C" -t t -G gq -e -q
expect_rc 65 "-q"
[[ ! -s "$WORK/err" ]] || fail "-q: $(cat "$WORK/err")"

# --- --exec -------------------------------------------------------------------------
run "$C" -t t -G gexec -e --exec sh -c "cat >>'$WORK/handled'; echo >>'$WORK/handled'"
expect_rc 65 "--exec"
said_stopped "--exec"
expect_eq "--exec: every other partition handled" "$WANT" "$(grep . "$WORK/handled" | sort)"
[[ $(current gexec 2) == 1 && $(current gexec 3) == 3 ]] || fail "--exec: committed $(current gexec 2)"

# --- a following member goes on with the other partitions ---------------------------
# It ends by itself after 13 messages (-c): the 10 there, then the 3
# appended to partitions 0, 1 and 3 once it has stopped partition 2. (On
# SIGINT or SIGTERM it would die of the signal, as always.)
timeout 120 "$C" -t t -G gfollow -c 13 -f '%p %s\n' >"$WORK/follow.out" 2>"$WORK/follow.err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 600); do
  [[ $(wc -l <"$WORK/follow.out") -ge 10 ]] && grep -q "partition 2 stopped" "$WORK/follow.err" && break
  sleep 0.1
done
for p in 0 1 3; do echo "p$p-later" | produce -t t -p "$p"; done
set +e
wait "$pid"
frc=$?
set -e
[[ $frc == 65 ]] || fail "following member: exit $frc, want 65: $(cat "$WORK/follow.err")"
expect_eq "following member: the appends to 0, 1 and 3" "0 p0-later
1 p1-later
3 p3-later" "$(grep later "$WORK/follow.out" | sort)"
[[ $(grep -c "partition 2 stopped" "$WORK/follow.err") == 1 ]] ||
  fail "following member: the stop said $(grep -c "partition 2 stopped" "$WORK/follow.err") times"
WANT=$( (all_but_2; for p in 0 1 3; do echo "p$p-later"; done) | sort)

# --- --skip-corrupt -----------------------------------------------------------------
for mode in alo amo; do
  flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  run "$C" -t t -G "s$mode" -e --skip-corrupt "${flags[@]}"
  expect_rc 1 "--skip-corrupt ($mode)"
  expect_eq "--skip-corrupt ($mode): everything but the batch" "$( (echo "$WANT"; echo p2-m3) | sort)" \
    "$(sort "$WORK/out")"
  grep -q "group s$mode: skipping corrupt batch: $SEG: position $BATCH: R4: " "$WORK/err" ||
    fail "--skip-corrupt ($mode): the skip is not said: $(cat "$WORK/err")"
  grep -q "group s$mode: skipped offsets 1..1 of topic t partition 2" "$WORK/err" ||
    fail "--skip-corrupt ($mode): the range is not said: $(cat "$WORK/err")"
  [[ $(current "s$mode" 2) == 3 ]] || fail "--skip-corrupt ($mode): committed $(current "s$mode" 2)"
  run "$C" --describe -G "s$mode" -t t
  expect_rc 0 "--skip-corrupt ($mode): --describe"
  grep -q corrupt "$WORK/out" && fail "--skip-corrupt ($mode): --describe: $(cat "$WORK/out")"
  run "$C" -t t -G "s$mode" -e
  expect_rc 0 "--skip-corrupt ($mode): the run after"
  [[ ! -s "$WORK/out" ]] || fail "--skip-corrupt ($mode): read again: $(cat "$WORK/out")"
done
# --- a member of several topics: the stop names the topic-partition ----------------------
produce -t u-x --create --partitions 2 </dev/null
for p in 0 1; do echo "u$p" | produce -t u-x -p "$p"; done
run "$C" -t t -t u-x -G gmulti -e -f '%t %s\n'
expect_rc 65 "several topics"
grep -q "group gmulti: partition t-2 stopped at offset 1: $SEG: position $BATCH: R4: " "$WORK/err" ||
  fail "several topics: the stop is not said: $(cat "$WORK/err")"
expect_eq "several topics: every other partition delivered" \
  "$( (echo "$WANT" | sed 's/^/t /'; echo "u-x u0"; echo "u-x u1") | sort)" "$(sort "$WORK/out")"
echo "consume_group_corrupt: ok"
