#!/usr/bin/env bash
# mq-consume -G --exec --batch N --parallel K, at least once: a batch whose
# handler failed is split (each message handled alone); when its partition
# is revoked (a member joins) or its member stops (SIGTERM) partway
# through the split, the messages already handled alone are committed
# (format-spec/group.md §14.3, R72), so no message is handled twice
# without a crash.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }

# 2 partitions of 30 messages, each partition one record batch.
produce -t s --create --partitions 2 </dev/null
for p in 0 1; do seq 0 29 | produce -t s -p "$p" --batch-bytes 1m; done
"$C" -t s -e -f '%p %o\n' | sort >"$WORK/all"
# The handler fails every batch of more than one message (so each is
# split) and handles a message alone: works a while, then logs it. It
# ignores SIGTERM (it finishes its work when asked to stop: its message
# counts as handled).
# shellcheck disable=SC2016
HANDLER='trap "" TERM; [ "$MQ_COUNT" = 1 ] || exit 1; sleep 0.1; echo "$MQ_PARTITION $MQ_OFFSET" >>"$RUN/handled.$MEMBER"'
export RUN="$WORK/run"
mkdir "$RUN"
FLAGS=(-t s -G g -v --batch 6 --parallel 2 --max-attempts 1 --retry-backoff 1)
start_member() {
  MEMBER=$1 "$C" "${FLAGS[@]}" --member-id "$1" --exec sh -c "$HANDLER" 2>"$RUN/err.$1" &
  PIDS+=($!)
  eval "pid_$1=$!"
}
count() { cat "$RUN"/handled.* 2>/dev/null | sort -u | wc -l; }
wait_count() {  # wait_count N: until N messages were handled (up to 30 s)
  for _ in $(seq 1 300); do (($(count) >= $1)) && return; sleep 0.1; done
  fail "$(count) messages handled, waited for $1"
}
start_member a
wait_count 3
# b joins while a's handlers work through split batches of both
# partitions: one partition moves to b partway through a split.
start_member b
wait_count 30
# a stops (SIGTERM) partway through a split: b takes its partition.
kill -TERM "$pid_a"
wait "$pid_a" 2>/dev/null || true
wait_count 60
kill -TERM "$pid_b"
wait "$pid_b" 2>/dev/null || true
grep -q ': released$' "$RUN/err.a" || fail "no partition moved from a to b: $(cat "$RUN/err.a")"
sort "$RUN"/handled.* >"$WORK/got"
missing=$(comm -23 "$WORK/all" <(sort -u "$WORK/got") | wc -l)
twice=$(uniq -d "$WORK/got")
echo "split batches: $(wc -l <"$WORK/got") handler runs for 60 messages, $missing not handled, $(printf '%s' "$twice" | grep -c . || true) handled twice"
((missing == 0)) || fail "$missing messages not handled"
[[ -z $twice ]] || fail "handled twice without a crash: $(echo "$twice" | tr '\n' ',')"
echo "consume_group_exec_split: ok"
