#!/usr/bin/env bash
# Static membership with a session (--member-id ID --session-timeout MS,
# format-spec/group.md §14.6, R65): a static member killed and restarted
# within its session timeout takes back exactly its partitions, which the
# other member did not take meanwhile; killed for longer, its partitions
# move to the other member once the session ends. A second live process
# with the id in use is refused (exit 75). mq-inspect --verify checks the
# lease file (R65).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
"$P" -q -t t --create --partitions 4 </dev/null
produce_round() {  # produce_round TAG: a message TAG-P in each partition P
  local p
  for p in 0 1 2 3; do echo "$1-$p" | "$P" -q -t t -p "$p"; done
}
produce_round r1

# wait_for WHAT ERR CMD...: until CMD succeeds (up to 30 s: a loaded
# machine); else fails, showing the file ERR.
wait_for() {
  local what=$1 err=$2
  shift 2
  for _ in $(seq 1 600); do
    "$@" && return 0
    sleep 0.05
  done
  fail "$what (stderr: $(cat "$err"))"
}
# assigned ERR: the partitions the member's last assignment line names.
assigned() { sed -n 's/.*this member ([a-z0-9]*) is assigned partitions \(.*\)$/\1/p' "$1" | tail -1; }
start() {  # start NAME RUN FLAGS...: member NAME of group g, its output in $WORK/RUN.out
  local name=$1 run=$2
  shift 2
  "$C" -t t -G g --member-id "$name" "$@" -v -f '%p %s\n' >"$WORK/$run.out" 2>"$WORK/$run.err" &
  PIDS+=($!)
}
SESSION=(--session-timeout 4000)

start a a1 "${SESSION[@]}"
a1=$!
wait_for "a starts" "$WORK/a1.err" grep -q 'this member (a) is assigned partitions 0,1,2,3$' "$WORK/a1.err"
start b b
b=$!
wait_for "a and b share the partitions" "$WORK/b.err" grep -q 'members a,b; this member (b)' "$WORK/b.err"
wait_for "a gives b its share" "$WORK/a1.err" grep -q 'members a,b; this member (a)' "$WORK/a1.err"
A=$(assigned "$WORK/a1.err")
B=$(assigned "$WORK/b.err")
echo "a owns $A, b owns $B"
[[ -n $A && -n $B ]] || fail "a owns '$A', b owns '$B'"
# b's changes of assignment and of partitions (taken, released).
b_changes() { grep -cE 'is assigned partitions|: resuming at|: no committed offset|: released$' "$WORK/b.err"; }
# Counted once b has taken each of its partitions (a line each for where it
# starts), so that only later changes count.
b_started() { (($(grep -cE ': resuming at|: no committed offset' "$WORK/b.err") >= $(tr ',' '\n' <<<"$B" | wc -l))); }
wait_for "b takes its partitions" "$WORK/b.err" b_started
b_lines=$(b_changes)
wait_for "a prints r1 of its partitions" "$WORK/a1.err" \
  test "$(grep -c '^[0-9] r1-' "$WORK/a1.out")" -ge "$(tr ',' '\n' <<<"$A" | wc -l)"

# --- killed and restarted within the session: a gets its partitions back ------
kill -KILL "$a1"
wait "$a1" 2>/dev/null || true
produce_round r2
sleep 0.5  # b polls 5 times meanwhile
start a a2 "${SESSION[@]}"
a2=$!
wait_for "a restarts" "$WORK/a2.err" grep -q 'this member (a) is assigned partitions' "$WORK/a2.err"
expect_eq "a's partitions after its restart" "$A" "$(assigned "$WORK/a2.err")"
wait_for "a resumes its partitions at r2" "$WORK/a2.err" \
  test "$(grep -c '^[0-9] r2-' "$WORK/a2.out")" -ge "$(tr ',' '\n' <<<"$A" | wc -l)"
grep -q ' r1-' "$WORK/a2.out" && fail "a printed r1 again after its restart: $(cat "$WORK/a2.out")"
grep -q 'static member(s) a not running: their partitions wait for them' "$WORK/b.err" ||
  fail "b did not see a stopped: $(cat "$WORK/b.err")"
expect_eq "b's changes while a was away" "$b_lines" "$(b_changes)"
for p in ${A//,/ }; do
  grep -q "^$p " "$WORK/b.out" && fail "b printed partition $p of a: $(cat "$WORK/b.out")"
done
echo "restart within the session: a resumed $A, b kept $B and took nothing"
run "$INSPECT" --verify "$MQ_DIR"
expect_rc 0 "mq-inspect --verify with a's lease"

# --- two live processes with one id: the second is refused --------------------
run "$C" -t t -G g --member-id a "${SESSION[@]}" -e
expect_rc 75 "a second live member a"
grep -q 'member id "a" is in use by a live member of group "g"' "$WORK/err" || fail "$(cat "$WORK/err")"

# --- killed for longer than the session: its partitions move to b ------------
kill -KILL "$a2"
wait "$a2" 2>/dev/null || true
produce_round r3
wait_for "b takes every partition once a's session ends" "$WORK/b.err" \
  grep -q 'this member (b) is assigned partitions 0,1,2,3$' "$WORK/b.err"
wait_for "b prints r3 of a's partitions" "$WORK/b.err" \
  test "$(grep -c '^[0-9] r3-' "$WORK/b.out")" -eq 4
[[ -e $MQ_DIR/groups/g/members/a.lock || -e $MQ_DIR/groups/g/members/a.lease ]] &&
  fail "a's files are left after its session: $(ls "$MQ_DIR/groups/g/members")"
echo "after the session: b owns 0,1,2,3"

# --- a clean stop keeps the session too; a lease that breaks R65 is reported --
kill -TERM "$b"
wait "$b" || true
start a a3 "${SESSION[@]}"
a3=$!
wait_for "a joins again" "$WORK/a3.err" grep -q 'this member (a) is assigned partitions' "$WORK/a3.err"
kill -TERM "$a3"
wait "$a3" || true
[[ -s $MQ_DIR/groups/g/members/a.lease ]] || fail "no lease after a's SIGTERM: $(ls "$MQ_DIR/groups/g/members")"
flip_byte "$MQ_DIR/groups/g/members/a.lease" 20
run "$INSPECT" --verify "$MQ_DIR"
expect_rc 65 "mq-inspect --verify with a damaged lease"
grep -q 'groups/g/members/a.lease.*R65' "$WORK/out" "$WORK/err" || fail "$(cat "$WORK/out" "$WORK/err")"
echo "consume_group_static: ok"
