#!/usr/bin/env bash
# Group members that read several topics and topic patterns
# (format-spec/group.md R64, as kcat -G group t1 t2 ^pattern.*): -t
# repeated, and -t '^REGEX' matched against the data directory's topics at
# every poll, so that a topic created later is read too. Each topic's
# partitions go to the members that read it; every message of every topic
# is read once; --describe shows every partition of the group's topics with
# its lag; %t names each message's topic.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"

for t in a b; do
  "$P" -q -t "$t" --create --partitions 4 </dev/null
  for p in 0 1 2 3; do seq 1 20 | sed "s/^/$t$p-/" | "$P" -q -t "$t" -p "$p"; done
done

# --- one member, two topics, -e ---------------------------------------------------------
run "$C" -G one -t a -t b -e -f '%t %p %o %s\n'
expect_rc 0 "-t a -t b"
[[ $(wc -l <"$WORK/out") == 160 ]] || fail "read $(wc -l <"$WORK/out") of 160 (stderr: $(cat "$WORK/err"))"
for t in a b; do
  for p in 0 1 2 3; do
    [[ $(grep -c "^$t $p [0-9]* $t$p-" "$WORK/out") == 20 ]] || fail "$t-$p: $(cat "$WORK/out")"
  done
done
# Committed per topic-partition: a second run has nothing left.
run "$C" -G one -t b -t a -e
expect_rc 0 "rerun"
[[ ! -s "$WORK/out" ]] || fail "the rerun read again: $(cat "$WORK/out")"

# --- usage: what several topics do not go with ------------------------------------------
run "$C" -t a -t b -e
expect_rc 64 "several topics without -G"
grep -q "need a consumer group" "$WORK/err" || fail "no -G: $(cat "$WORK/err")"
run "$C" -G one -t a -t '^(' -e
expect_rc 64 "a pattern that does not compile"
grep -q 'topic pattern "^("' "$WORK/err" || fail "bad pattern: $(cat "$WORK/err")"
run "$C" -G one -t a -t b --dlq b --exec cat
expect_rc 64 "--dlq one of the topics read"
grep -q -- "must differ from the topics read" "$WORK/err" || fail "--dlq b: $(cat "$WORK/err")"
run "$C" -G one -t '^a' -t b --to-topic b --exec cat
expect_rc 64 "--to-topic one of the topics read"
grep -q -- "must differ from the topics read" "$WORK/err" || fail "--to-topic b: $(cat "$WORK/err")"
run "$C" --describe -G one -t a -t b
expect_rc 64 "--describe with two topics"
run "$C" -G one -t a -t nosuch -e
expect_rc 66 "a named topic that does not exist"

# wait_for WHAT CMD...: up to 60 s until CMD succeeds.
wait_for() {
  local what=$1
  shift
  for _ in $(seq 1 600); do
    "$@" && return 0
    sleep 0.1
  done
  fail "waited 60 s for $what"
}
# settled GROUP N: N partitions of the group's topics owned, lag 0 on each.
settled() {
  "$C" --describe -G "$1" -J >"$WORK/desc" 2>/dev/null || return 1
  jq -e -s --argjson n "$2" '[.[] | select(.type == "partition")] as $r |
      ($r | length) == $n and ($r | all(.consumer_id != null and .lag == 0))' \
    "$WORK/desc" >/dev/null
}
# owner GROUP TOPIC: the owners of TOPIC's partitions, one a line.
owners() {
  "$C" --describe -G "$1" -t "$2" -J | jq -r 'select(.type == "partition") | .consumer_id'
}

# --- x reads a and b, y reads b: overlapping subscriptions --------------------------------
"$C" -G g -t b --member-id y -f '%t %p %o %s\n' >"$WORK/y.out" 2>"$WORK/y.err" &
PIDS+=($!)
pid_y=$!
"$C" -G g -t a -t b --member-id x -f '%t %p %o %s\n' >"$WORK/x.out" 2>"$WORK/x.err" &
PIDS+=($!)
pid_x=$!
wait_for "a and b read to their ends" settled g 8
# More while both read.
for t in a b; do seq 21 60 | sed "s/^/$t-/" | "$P" -q -t "$t"; done
wait_for "the new messages read" settled g 8
run "$C" --describe -G g
expect_rc 0 "describe g"
for t in a b; do
  for p in 0 1 2 3; do
    grep -q "^g  *$t  *$p  *[0-9][0-9]*  *[0-9][0-9]*  *0  *[xy]  " "$WORK/out" ||
      fail "row $t-$p: $(cat "$WORK/out")"
  done
done
grep -q "^total lag: 0$" "$WORK/out" || fail "total lag: $(cat "$WORK/out")"
grep -q "^x  .*  a,b  " "$WORK/out" || fail "x's topics: $(cat "$WORK/out")"
grep -q "^y  .*  b  " "$WORK/out" || fail "y's topics: $(cat "$WORK/out")"
# a is x's alone; b is split between its two readers.
[[ $(owners g a | sort -u) == x ]] || fail "owners of a: $(owners g a | tr '\n' ' ')"
[[ $(owners g b | sort | uniq -c | awk '{print $1}' | tr '\n' ' ') == "2 2 " ]] ||
  fail "owners of b: $(owners g b | tr '\n' ' ')"
kill -TERM "$pid_x" "$pid_y"
wait "$pid_x" "$pid_y" 2>/dev/null || true
! grep -q "^a " "$WORK/y.out" || fail "y, a reader of b, read a"
# Every message of every topic once: 80 + 40 per topic.
cat "$WORK/x.out" "$WORK/y.out" >"$WORK/all"
for t in a b; do
  got=$(grep -c "^$t " "$WORK/all" || true)
  uniq=$(grep "^$t " "$WORK/all" | awk '{print $4}' | sort -u | wc -l)
  [[ $got == 120 && $uniq == 120 ]] || fail "topic $t: $got lines, $uniq distinct messages, want 120"
done

# --- at most once, and --ack-fd, per topic-partition ---------------------------------------
run "$C" -G amo -t a -t b --at-most-once -e
expect_rc 0 "--at-most-once"
[[ $(wc -l <"$WORK/out") == 240 ]] || fail "--at-most-once read $(wc -l <"$WORK/out") of 240"
run "$C" -G amo -t a -t b -e
[[ $rc == 0 && ! -s "$WORK/out" ]] || fail "--at-most-once left to read: $(cat "$WORK/out")"
# Acknowledged as TOPIC/PARTITION/OFFSET; a bare "PARTITION OFFSET" names
# no message of a member of several topics and is ignored, said.
mkfifo "$WORK/acks"
set +e
"$C" -G ack -t a -t b -e -f '%t/%p/%o\n' --ack-fd 3 3<"$WORK/acks" 2>"$WORK/ack.err" |
  awk '{print; print "0 0"; fflush()}' >"$WORK/acks"
set -e
grep -q "acknowledge TOPIC/PARTITION/OFFSET" "$WORK/ack.err" || fail "bare ack: $(cat "$WORK/ack.err")"
run "$C" --describe -G ack -J
jq -e -s '[.[] | select(.type == "partition") | .lag] | length == 8 and all(. == 0)' \
  "$WORK/out" >/dev/null || fail "--ack-fd committed: $(cat "$WORK/out")"

# --- a pattern member picks up a topic created after it started ----------------------------
"$P" -q -t ev.one --create --partitions 2 </dev/null
"$P" -q -t other --create --partitions 1 </dev/null
seq 1 5 | sed 's/^/one-/' | "$P" -q -t ev.one
echo other-1 | "$P" -q -t other
"$C" -G h -t '^ev\.' --member-id z -v -f '%t %s\n' >"$WORK/z.out" 2>"$WORK/z.err" &
PIDS+=($!)
pid_z=$!
wait_for "ev.one read" settled h 2
"$P" -q -t ev.two --create --partitions 3 </dev/null
seq 1 6 | sed 's/^/two-/' | "$P" -q -t ev.two
wait_for "ev.two matched and read" settled h 5
run "$C" --describe -G h
expect_rc 0 "describe h"
grep -q "^z  .*  ev.one,ev.two  " "$WORK/out" || fail "z's topics: $(cat "$WORK/out")"
kill -TERM "$pid_z"
wait "$pid_z" 2>/dev/null || true
expect_eq "z's messages" "$(printf 'ev.one one-%s\n' 1 2 3 4 5; printf 'ev.two two-%s\n' 1 2 3 4 5 6)" \
  "$(sort "$WORK/z.out")"
grep -q "topic ev.two matches" "$WORK/z.err" || fail "z -v: $(cat "$WORK/z.err")"

# A pattern that matches nothing yet: -e ends at once, idle.
run "$C" -G none -t '^nothing' -e
expect_rc 0 "a pattern matching nothing"
[[ ! -s "$WORK/out" ]] || fail "read from nothing: $(cat "$WORK/out")"

echo "consume_group_subscription: ok"
