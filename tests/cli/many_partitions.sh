#!/usr/bin/env bash
# 10,000 partitions under an open-file limit far below what holding every
# partition open would take (about six descriptors each): mq-produce and
# mq-consume keep a bounded set open, closing the least recently used
# (mq-produce(1), mq-consume(1): OPEN FILES).
source "$(dirname "$0")/lib/common.bash"
# Ten thousand partitions are some 50,000 small files: on tmpfs when there
# is one, so that creating them (each fsynced) does not take minutes.
T="$WORK"
if [[ -d /dev/shm && -w /dev/shm ]]; then
  T="$(mktemp -d /dev/shm/mq-many.XXXXXX)"
  on_exit() { rm -rf "$T"; }
fi
D="$T/data"
N=200000

seq 1 "$N" | awk '{printf "k%d\tv%d\n", $1, $1}' >"$T/in"
sort "$T/in" | md5sum >"$T/want"

# Keyed: every partition gets messages, in many appends each.
(
  ulimit -n 256
  exec "$P" -C "$D" -t t --create --partitions 10000 -K '\t' -q "$T/in"
) >"$WORK/out" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "produce into 10,000 partitions under ulimit -n 256"
used=$(find "$D/t-"* -maxdepth 1 -name '*.log' -size +0 | wc -l)
[[ $used == 10000 ]] || fail "$used of 10,000 partitions written"

# Read back, all partitions at once, under the same limit.
(
  ulimit -n 256
  exec "$C" -C "$D" -t t -e -q -f '%k\t%s\n'
) >"$T/got" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "consume -e of 10,000 partitions under ulimit -n 256"
[[ $(wc -l <"$T/got") == "$N" ]] || fail "read back $(wc -l <"$T/got") messages, want $N"
sort "$T/got" | md5sum | cmp -s - "$T/want" || fail "messages read back differ from those produced"
echo "ok: $N keyed messages into 10,000 partitions and back under ulimit -n 256"

# A second run appends to partitions that all exist (reopened in turn).
(
  ulimit -n 256
  exec "$P" -C "$D" -t t -K '\t' -q "$T/in"
) >"$WORK/out" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "second produce into 10,000 partitions under ulimit -n 256"
(
  ulimit -n 256
  exec "$C" -C "$D" -t t -e -q -f '%k\t%s\n'
) >"$T/got" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "consume -e after the second run"
[[ $(wc -l <"$T/got") == $((2 * N)) ]] || fail "read back $(wc -l <"$T/got") messages, want $((2 * N))"
sort -u "$T/got" | md5sum | cmp -s - "$T/want" || fail "second run's messages differ"
echo "ok: a second run appends to every partition again"

# Following all of them under the limit: a message appended later arrives.
(
  ulimit -n 256
  exec timeout 60 "$C" -C "$D" -t t -o end -c 1 -q -f '%k\t%s\n'
) >"$T/followed" 2>"$WORK/err" &
follower=$!
PIDS+=("$follower")
# The follower positions 10,000 partitions at their ends before it waits, which
# takes a while under load: a message appended before it reached the late
# key's partition is behind its start. So the message is appended again every
# second until the follower has one (it takes the first with -c 1).
for ((i = 0; i < 55; i++)); do
  sleep 1
  kill -0 "$follower" 2>/dev/null || break
  printf 'late\tmessage\n' | "$P" -C "$D" -t t -K '\t' -q
done
wait "$follower" && rc=0 || rc=$?
expect_rc 0 "follow 10,000 partitions under ulimit -n 256"
[[ $(cat "$T/followed") == $'late\tmessage' ]] || fail "follower printed: $(cat "$T/followed")"
echo "ok: following 10,000 partitions under ulimit -n 256 sees a new message"

# A consumer group member owns all 10,000 partitions through one descriptor
# (format-spec/group.md §14.5): under the same limit it reads every message
# once and commits every partition; a second run finds nothing left.
"$C" -C "$D" -t t -e -q -f '%k\t%s\n' | sort >"$T/all"
(
  ulimit -n 256
  exec "$C" -C "$D" -t t -G many -e -q -f '%k\t%s\n'
) >"$T/got" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "a member owning 10,000 partitions under ulimit -n 256"
[[ $(wc -l <"$T/got") == $(wc -l <"$T/all") ]] ||
  fail "the member read $(wc -l <"$T/got") messages, want $(wc -l <"$T/all")"
sort "$T/got" | cmp -s - "$T/all" || fail "the member's messages differ from the topic's"
committed=$("$C" -C "$D" -t t -G many --describe -J |
  jq -s '[.[] | select(.type == "partition" and .lag == 0)] | length')
[[ $committed == 10000 ]] || fail "$committed of 10,000 partitions committed at the end"
(
  ulimit -n 256
  exec "$C" -C "$D" -t t -G many -e -q -f '%k\t%s\n'
) >"$T/again" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "a second member run"
[[ ! -s $T/again ]] || fail "a second run read $(wc -l <"$T/again") messages again"
echo "ok: a member owns 10,000 partitions under ulimit -n 256, reads each message once and commits"
