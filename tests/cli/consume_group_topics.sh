#!/usr/bin/env bash
# One consumer group whose members read different topics
# (format-spec/group.md §14.6): each topic's partitions are assigned among
# the members that read it, so none is left to a member that never reads
# it, also while members of either topic join and leave (every message
# read once, by a reader of its topic); --describe shows every partition of
# the group's topics, with the backlog of those nobody has committed or
# owns, and each member's topics.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
GROUPS_DIR="$MQ_DIR/groups"

# a and b: 4 partitions of 100 messages each.
for t in a b; do
  "$P" -q -t "$t" --create --partitions 4 </dev/null
  for p in 0 1 2 3; do seq 1 100 | sed "s/^/$t$p-/" | "$P" -q -t "$t" -p "$p"; done
done

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
owns_all_of_b() {
  "$C" --describe -G g -t b >"$WORK/desc" 2>&1 || return 1
  [[ $(grep -c "^g  *b  *[0-3]  .*  y  " "$WORK/desc") == 4 ]]
}

# --- member y reads b, member x reads a, in one group --------------------------------
"$C" -t b -G g --member-id y -v >"$WORK/y.out" 2>"$WORK/y.err" &
PIDS+=($!)
pid_y=$!
wait_for "y to own b" owns_all_of_b
# x alone reads a: every partition of a is x's, none is y's.
run "$C" -t a -G g --member-id x -e -v
expect_rc 0 "member x"
got=$(wc -l <"$WORK/out")
[[ $got == 400 ]] || fail "x read $got of a's 400 messages (stderr: $(cat "$WORK/err"))"
grep -q "this member (x) is assigned partitions 0,1,2,3$" "$WORK/err" ||
  fail "x's assignment: $(cat "$WORK/err")"
# y read all of b and never gave a partition of it up to x.
wait_for "y to read b" bash -c "[[ \$(wc -l <'$WORK/y.out') == 400 ]]"
grep -q "released" "$WORK/y.err" && fail "y released a partition of b: $(cat "$WORK/y.err")"

run "$C" --describe -G g
expect_rc 0 "describe the group"
for p in 0 1 2 3; do
  grep -q "^g  *a  *$p  *100  *100  *0  *-  " "$WORK/out" || fail "row a-$p: $(cat "$WORK/out")"
  grep -q "^g  *b  *$p  .*  *y  " "$WORK/out" || fail "row b-$p: $(cat "$WORK/out")"
done
grep -q "^y  .*  b  *b-0,b-1,b-2,b-3$" "$WORK/out" || fail "member y's topics: $(cat "$WORK/out")"
run "$C" --describe -G g -J
expect_rc 0 "describe -J"
"$PY" - "$WORK/out" <<'EOF' || fail "describe -J: $(cat "$WORK/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
summary = rows[-1]
assert [m["topics"] for m in summary["members"]] == [["b"]], summary
EOF
kill "$pid_y"
rc_y=0
wait "$pid_y" || rc_y=$?
[[ $rc_y == 143 ]] || fail "y exited $rc_y on SIGTERM, not of the signal (143)"

# --- members of both topics join and leave while messages come ------------------------
# Group r: c and d (6 partitions each); members join and leave (SIGTERM)
# on both. Every message of each topic is read once, by a member reading
# that topic, and each topic's partitions are split among its readers only.
for t in c d; do "$P" -q -t "$t" --create --partitions 6 </dev/null; done
feed() {  # feed FROM TO: messages FROM..TO to c and d, keyed
  local t
  for t in c d; do seq "$1" "$2" | awk -v t="$t" '{print "k"$1"\t"t$1}' | "$P" -q -t "$t" -K '\t'; done
}
declare -A rpid
start() {  # start MEMBER TOPIC
  "$C" -t "$2" -G r --member-id "$1" -f '%t %p %o %s\n' >"$WORK/r.$1" 2>"$WORK/r.$1.err" &
  PIDS+=($!)
  rpid[$1]=$!
}
# settled TOPIC N: every partition of TOPIC owned, by N members, balanced.
settled() {
  "$C" --describe -G r -t "$1" -J >"$WORK/rdesc" 2>/dev/null || return 1
  jq -e -s --argjson n "$2" '[.[] | select(.type == "partition") | .consumer_id] as $o |
      ($o | all(. != null)) and ([$o | group_by(.)[] | length] as $c |
      ($c | length) == $n and ($c | max) - ($c | min) <= 1)' "$WORK/rdesc" >/dev/null
}
# lines TOPIC: messages of TOPIC printed by r's members, and by whom.
lines() { grep -h "^$1 " "$WORK"/r.m* 2>/dev/null || true; }
start m1 c
start m2 d
wait_for "c read by m1" settled c 1
wait_for "d read by m2" settled d 1
feed 1 1000
start m3 c
start m4 d
start m5 c
wait_for "c split among 3" settled c 3
wait_for "d split among 2" settled d 2
feed 1001 2000
kill -TERM "${rpid[m1]}" "${rpid[m4]}"
wait "${rpid[m1]}" "${rpid[m4]}" 2>/dev/null || true
wait_for "c split among 2" settled c 2
wait_for "d read by m2" settled d 1
feed 2001 3000
wait_for "every message read" bash -c "[[ \$(cat '$WORK'/r.m* | wc -l) -ge 6000 ]]"
sleep 0.5
for t in c d; do
  got=$(lines "$t" | awk '{print $4}' | sort -u | wc -l)
  [[ $got == 3000 ]] || fail "topic $t: $got of 3000 messages read"
  [[ $(lines "$t" | wc -l) == 3000 ]] || fail "topic $t: messages read twice"
done
for m in m1 m3 m5; do
  ! grep -q "^d " "$WORK/r.$m" || fail "$m, a reader of c, read d"
done
for m in m2 m4; do
  ! grep -q "^c " "$WORK/r.$m" || fail "$m, a reader of d, read c"
done
for m in m2 m3 m5; do kill -TERM "${rpid[$m]}"; done
wait "${rpid[m2]}" "${rpid[m3]}" "${rpid[m5]}" 2>/dev/null || true

# --- describe: every partition of the group's topics ---------------------------------
# Group h has committed only a-0 (at its end): the other partitions of a,
# which no member owns, show their backlog as their lag, counted in the
# total, and say they are unread.
mkdir -m 0750 "$GROUPS_DIR/h"
run "$C" --reset-offsets -G h -t a -p 0 --to-latest --execute
expect_rc 0 "reset a-0"
run "$C" --describe -G h
expect_rc 0 "describe h"
grep -q "^h  *a  *0  *100  *100  *0  *-  *-  *-  *-$" "$WORK/out" || fail "row a-0: $(cat "$WORK/out")"
for p in 1 2 3; do
  grep -q "^h  *a  *$p  *-  *100  *100  *-  *-  *-  *unread$" "$WORK/out" ||
    fail "row a-$p: $(cat "$WORK/out")"
done
grep -q "^total lag: 300$" "$WORK/out" || fail "total lag: $(cat "$WORK/out")"
grep -q "b  *[0-3]" "$WORK/out" && fail "h never read b: $(cat "$WORK/out")"
run "$C" --describe -G h -J
expect_rc 0 "describe h -J"
"$PY" - "$WORK/out" <<'EOF' || fail "describe h -J: $(cat "$WORK/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
parts = [(r["partition"], r["current_offset"], r["lag"], r["note"]) for r in rows if r["type"] == "partition"]
assert parts == [(0, 100, 0, None), (1, None, 100, "unread"), (2, None, 100, "unread"),
                 (3, None, 100, "unread")], parts
assert rows[-1]["total_lag"] == 300, rows[-1]
EOF
echo "consume_group_topics: ok"
