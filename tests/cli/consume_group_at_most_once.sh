#!/usr/bin/env bash
# --at-most-once when printing (format-spec/group.md R67): a member commits
# once per write of its output buffer, not once per batch, and what a
# crash loses is exactly the messages of the write under way: those in the
# output buffer (1 MiB of output) that had not reached the reader.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
# committed GROUP TOPIC: partition 0's committed offset ("-": none).
committed() {
  "$C" --describe -G "$1" -t "$2" -J |
    jq -r 'select(.type == "partition" and .partition == 0) | .current_offset // "-"'
}
# generation GROUP: writes of the group's offsets file so far.
generation() {
  "$INSPECT" "$MQ_DIR/groups/$1/offsets" | sed -n 's/^generation: \([0-9]*\) .*/\1/p'
}

# --- one commit per write, not per batch ------------------------------------------
# 2,000 messages in 2,000 batches (--batch-bytes 64: one record each), about
# 9 KB of output: one write at the end, so one commit, besides the count of
# the member's first rebalance (the first write of the file).
produce -t m --create </dev/null
seq 1 2000 | produce -t m --batch-bytes 64
batches=$("$INSPECT" "$MQ_DIR"/m-0/*.log | grep -c '^baseOffset')
((batches == 2000)) || fail "setup: $batches batches, not 2000"
run "$C" -t m -G one -e --at-most-once --commit-interval 86400000
expect_rc 0 "one commit per write"
expect_eq "one commit per write: output" "$(seq 1 2000)" "$(cat "$WORK/out")"
[[ $(committed one m) == 2000 ]] || fail "one commit per write: committed $(committed one m), not 2000"
gen=$(generation one)
((gen == 2)) || fail "one commit per write: the offsets file was written $gen times for 2000 batches, not 2 (the rebalance count and one commit)"

# --- a crash loses the write under way, and nothing else ----------------------------
# 200,000 messages printed as '%o\n': the first 1 MiB buffer ends with the
# first message whose line takes the output to 1,048,576 bytes or more (K
# messages). The member commits offset K before it writes that buffer into
# a pipe nobody reads (no commit comes earlier: --commit-interval and
# --commit-every are out of the way), and blocks once the pipe is full; it
# is SIGKILLed there. The reader then gets what the pipe held: the first D
# messages.
# Lost are exactly offsets D..K-1 (the rest of the write); a rerun prints K
# onwards; nothing is printed twice.
produce -t w --create </dev/null
seq 1 200000 | produce -t w
K=$("$C" -t w -e -f '%o\n' | awk '{ s += length($0) + 1 } s >= 1048576 { print NR; exit }')
mkfifo "$WORK/pipe"
"$C" -t w -G crash -f '%o\n' --at-most-once --commit-interval 86400000 --commit-every 0 >"$WORK/pipe" \
  2>"$WORK/crash.err" &
member=$!
PIDS+=("$member")
exec 3<"$WORK/pipe"
for _ in $(seq 1 600); do
  [[ $(committed crash w) != - ]] && break
  sleep 0.1
done
[[ $(committed crash w) == "$K" ]] ||
  fail "crash: committed $(committed crash w) before the first write, not $K (the messages of the first 1 MiB of output)"
# The write under way (its commit made, the pipe full): let it block.
sleep 0.5
kill -KILL "$member"
wait "$member" 2>/dev/null || true
cat <&3 >"$WORK/got"
exec 3<&-
# A partial last line did not reach the reader whole: not delivered.
if [[ -n $(tail -c1 "$WORK/got") ]]; then sed -i '$d' "$WORK/got"; fi
D=$(wc -l <"$WORK/got")
expect_eq "crash: what reached the reader" "$(seq 0 $((D - 1)))" "$(cat "$WORK/got")"
((D < K)) || fail "crash: the reader got $D messages, the whole first write of $K"
[[ $(committed crash w) == "$K" ]] || fail "crash: committed $(committed crash w) after the kill, not $K"
run "$C" -t w -G crash -e -f '%o\n' --at-most-once
expect_rc 0 "crash: the rerun"
expect_eq "crash: the rerun prints from the end of the lost write" "$(seq "$K" 199999)" "$(cat "$WORK/out")"
echo "at-most-once crash: $D of the first write's $K messages delivered, $((K - D)) lost, none repeated"
