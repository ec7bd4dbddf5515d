#!/usr/bin/env bash
# mq-consume -G GROUP --exec --parallel N while the partition's log is cut
# under the member (a live truncation, format-spec/segment.md §6.6, R59)
# and grown again: a handler of a message that was cut, running when the
# member found the cut, hands over nothing past the cut when it ends
# (group.md §14.3), so that the member, stopped before the messages now
# at the cut offsets were handled, commits none of them: its next owner
# handles them (at least once). Steps are ordered by marks the handler
# leaves, not by timings.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
CUT="$BIN/tests/mq-test-truncate"
RUN="$WORK/run"
mkdir -p "$RUN"
export RUN
# wait_for FILE WORD: until FILE holds the line WORD (up to 30 s).
wait_for() {
  local i
  for ((i = 0; i < 600; i++)); do
    grep -qx -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "never saw $2 in $1: $(cat "$WORK/a.err" 2>/dev/null)"
}

produce -t t --create --partitions 1 </dev/null
seq 1 10 | sed 's/^/v/' | produce -t t -p 0 --batch-bytes 64

# The handler logs the message it starts and, once it ends, handles; v10
# (a message to be cut) waits for gate1, the messages written after the
# cut (w*) for gate2.
# shellcheck disable=SC2016
HANDLER='v=$(cat); echo "$v" >>"$RUN/started"
case $v in
  v10) while [ ! -e "$RUN/gate1" ]; do sleep 0.05; done ;;
  w*) while [ ! -e "$RUN/gate2" ]; do sleep 0.05; done ;;
esac
echo "$v" >>"$RUN/handled"'

"$C" -t t -G g --commit-interval 20 --parallel 2 --exec sh -c "$HANDLER" 2>"$WORK/a.err" &
A=$!
PIDS+=("$A")
wait_for "$RUN/started" v10
# v6..v10 (offsets 5..9) are cut while v10's handler runs; w6..w12 take
# offsets 5..11.
[[ $("$CUT" "$MQ_DIR" t 0 5) == 5 ]] || fail "mq-test-truncate did not cut to 5"
seq 6 12 | sed 's/^/w/' | produce -t t -p 0 --batch-bytes 64
for ((i = 0; i < 600; i++)); do
  grep -q 'truncated to offset 5' "$WORK/a.err" && break
  sleep 0.05
done
grep -q 'truncated to offset 5' "$WORK/a.err" || fail "the member did not see the cut: $(cat "$WORK/a.err")"
# v10's handler ends; w6's starts (and waits): the member stops before
# any w* was handled.
touch "$RUN/gate1"
wait_for "$RUN/started" w6
kill -TERM "$A"
touch "$RUN/gate2"
wait "$A" || true

# The next owner reads on from what was committed.
run "$C" -t t -G g -e --exec sh -c "$HANDLER"
expect_rc 0 "the next owner"
"$C" -t t -e -f '%s\n' | sort >"$WORK/final"
sort -u "$RUN/handled" >"$WORK/handled"
expect_eq "the final log" "v1 v2 v3 v4 v5 w6 w7 w8 w9 w10 w11 w12" "$(sort -V "$WORK/final" | xargs)"
missing=$(comm -23 "$WORK/final" "$WORK/handled" | tr '\n' ' ')
[[ -z $missing ]] || fail "messages of the final log never handled: $missing(member: $(cat "$WORK/a.err"))"
echo "consume_group_parallel_cut: every message of the final log handled"
