#!/usr/bin/env bash
# A topic removed from the data directory (its topics/<t>.conf and
# partition directories gone) leaves its committed offsets in the group's
# offsets file (format-spec/group.md §14.4): mq-consume --describe shows
# them as no-topic rows that are no lag (not counted among the unknown
# lags), with a note saying how to remove them (--describe -t of the
# removed topic exits 66, saying so), and --delete-offsets -t
# removes them even while an absent static member that read the topic is
# in its session (it cannot read it any more); a topic it still reads
# stays refused (exit 75).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
"$P" -q -t a --create --partitions 2 </dev/null
"$P" -q -t b --create --partitions 2 </dev/null
seq 1 5 | "$P" -q -t a
seq 1 7 | "$P" -q -t b
# s, static (a session of a minute), reads a and b to their ends and stops:
# absent, its session holding.
run "$C" -G g --member-id s --session-timeout 60000 -t a -t b -e -q
expect_rc 0 "s reads a and b"
rm -rf "$MQ_DIR/topics/b.conf" "$MQ_DIR"/b-*

run "$C" -G g --describe
expect_rc 0 "--describe with b removed"
grep -qE '^g +b +0 +[0-9]+ +- +- +- +- +- +no-topic$' "$WORK/out" ||
  fail "b-0's row: $(cat "$WORK/out")"
grep -qx 'total lag: 0' "$WORK/out" || fail "the total lag counts b: $(cat "$WORK/out")"
grep -q '^note: b-0: topic b does not exist (any more): no lag; .*mq-consume -G g --delete-offsets -t b' \
  "$WORK/out" || fail "no note on b's offsets: $(cat "$WORK/out")"
run "$C" -G g --describe -J
expect_rc 0 "--describe -J with b removed"
jq -e -s '[.[] | select(.type == "partition" and .topic == "b" and .note == "no-topic" and .lag == null)] | length == 2' \
  "$WORK/out" >/dev/null || fail "b's rows -J: $(cat "$WORK/out")"
jq -e -s '.[-1].total_lag == 0' "$WORK/out" >/dev/null || fail "total_lag -J: $(cat "$WORK/out")"
# Described alone, the removed topic is no input (66), as for a member of
# it: said, naming the group and the offsets left over (the whole group's
# description above shows them); so is a topic that neither exists nor
# has offsets.
for json in "" -J; do
  run "$C" -G g --describe -t b $json
  expect_rc 66 "--describe -t b $json with b removed"
  [[ -s $WORK/out ]] && fail "--describe -t b $json printed rows: $(cat "$WORK/out")"
  grep -q '^mq-consume: group g: .*no topic "b" (.*/topics/b.conf not found): the topic was deleted or removed, nothing to describe; the group.s 2 committed offsets of it are left over until mq-consume -G g --delete-offsets -t b removes them$' \
    "$WORK/err" || fail "--describe -t b $json: $(cat "$WORK/err")"
done
run "$C" -G g --describe -t nosuch
expect_rc 66 "--describe -t of a topic neither there nor committed"
grep -q 'no topic "nosuch"' "$WORK/err" || fail "$(cat "$WORK/err")"

# s still reads a: its offsets wait for it; b's do not.
run "$C" -G g --delete-offsets -t a
expect_rc 75 "--delete-offsets of a topic the absent member reads"
grep -q 'static member s is not running' "$WORK/err" || fail "$(cat "$WORK/err")"
run "$C" -G g --delete-offsets -t b
expect_rc 0 "--delete-offsets of the removed topic"
grep -qE '^g +b +0 +deleted$' "$WORK/out" && grep -qE '^g +b +1 +deleted$' "$WORK/out" ||
  fail "b's offsets not deleted: $(cat "$WORK/out")"
run "$C" -G g --describe
expect_rc 0 "--describe after the delete"
grep -qE '^g +b ' "$WORK/out" && fail "b's rows are left: $(cat "$WORK/out")"
grep -qE '^g +a +0 ' "$WORK/out" || fail "a's rows are gone: $(cat "$WORK/out")"
echo "consume_group_removed_topic: ok"
