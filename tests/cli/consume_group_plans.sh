#!/usr/bin/env bash
# kafka-consumer-groups' ways of positioning groups, in mq-consume: a reset
# creates a group that does not exist yet (format-spec/group.md §14.4) so
# that its first member starts where it was put; --all-groups and
# --all-topics; --delete-offsets of one topic; offset plans exported as CSV
# (--export) and applied from a file (--from-file).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
GROUPS_DIR="$MQ_DIR/groups"

# a: 2 partitions of 10 messages; b: 1 partition of 5.
"$P" -q -t a --create --partitions 2 </dev/null
for p in 0 1; do seq 0 9 | sed "s/^/a$p-/" | "$P" -q -t a -p "$p"; done
seq 0 4 | sed "s/^/b0-/" | "$P" -q -t b --create

# --- a reset creates the group; its first member starts there ------------------------
run "$C" --reset-offsets -G new -t a --to-offset 7
expect_rc 0 "dry run for a group that does not exist"
grep -q "^new  *a  *0  *-  *7  *-$" "$WORK/out" || fail "plan for a new group: $(cat "$WORK/out")"
[[ ! -e "$GROUPS_DIR/new" ]] || fail "a dry run created the group"
run "$C" --reset-offsets -G new -t nosuch --to-offset 7 --execute
expect_rc 66 "reset of a missing topic"
[[ ! -e "$GROUPS_DIR/new" ]] || fail "a reset of a missing topic created the group"
run "$C" --reset-offsets -G new -t a --to-offset 7 --execute
expect_rc 0 "--execute creates the group"
[[ -d "$GROUPS_DIR/new" ]] || fail "--execute did not create the group"
run "$C" -t a -G new -e
expect_rc 0 "the new group's first member"
expect_eq "first member starts at the reset offsets" "$(printf '%s\n' a0-7 a0-8 a0-9 a1-7 a1-8 a1-9)" \
  "$(sort "$WORK/out")"

# --- --all-groups, --all-topics -------------------------------------------------------
run "$C" -t b -G new -e
expect_rc 0 "new reads b"
run "$C" --reset-offsets -G other -t b --to-offset 2 --execute
expect_rc 0 "group other"
run "$C" --describe --all-groups
expect_rc 0 "describe --all-groups"
grep -q "^new  *a  *1  *10  *10  *0  " "$WORK/out" || fail "all groups: new: $(cat "$WORK/out")"
grep -q "^other  *b  *0  *2  *5  *3  " "$WORK/out" || fail "all groups: other: $(cat "$WORK/out")"
[[ $(grep -c "^GROUP  *TOPIC" "$WORK/out") == 2 ]] || fail "a table per group: $(cat "$WORK/out")"
run "$C" --describe --all-groups -J
expect_rc 0 "describe --all-groups -J"
[[ $(jq -s '[.[] | select(.type == "summary") | .group] | join(",")' "$WORK/out") == '"new,other"' ]] ||
  fail "all groups -J: $(cat "$WORK/out")"
# --all-topics: every topic the group has committed (new: a and b).
run "$C" --reset-offsets -G new --all-topics --to-earliest --execute
expect_rc 0 "--all-topics"
expect_eq "--all-topics plan" "$(printf '%s\n' a,0,0 a,1,0 b,0,0)" \
  "$("$C" --reset-offsets -G new --all-topics --to-earliest --export 2>/dev/null)"
run "$C" --reset-offsets --all-groups -t b --to-latest --execute
expect_rc 0 "--all-groups reset"
grep -q "^new  *b  *0  *0  *5  *-$" "$WORK/out" || fail "all groups reset: new: $(cat "$WORK/out")"
grep -q "^other  *b  *0  *2  *5  *-$" "$WORK/out" || fail "all groups reset: other: $(cat "$WORK/out")"

# --- --export, --from-file --------------------------------------------------------------
run "$C" --reset-offsets -G new -t a --to-offset 3 --export
expect_rc 0 "--export"
expect_eq "exported plan" "$(printf '%s\n' a,0,3 a,1,3)" "$(cat "$WORK/out")"
printf 'a,0,4\r\na,1,99\nb,0,1\n' >"$WORK/plan.csv"
run "$C" --reset-offsets -G new --from-file "$WORK/plan.csv" --execute
expect_rc 0 "--from-file"
grep -q "^new  *a  *1  *0  *10  *clamped-to-log-end$" "$WORK/out" || fail "from-file clamp: $(cat "$WORK/out")"
expect_eq "offsets from the file" "$(printf '%s\n' a,0,4 a,1,10 b,0,1)" \
  "$("$C" --reset-offsets -G new --all-topics --shift-by 0 --export 2>/dev/null)"
# The group's own lines of a plan of several groups; the plan from standard input.
printf 'other,b,0,4\nnew,b,0,3\n' | "$C" --reset-offsets --all-groups --from-file - --export \
  >"$WORK/out" 2>/dev/null
expect_eq "a plan of several groups" "$(printf '%s\n' new,b,0,3 other,b,0,4)" "$(cat "$WORK/out")"
for bad in 'a,0' 'a,x,1' 'a,0,-1' 'a/b,0,1' $'a,0,1\na,0,2' $'a,0,1\nnew,a,1,1'; do
  printf '%s\n' "$bad" >"$WORK/bad.csv"
  run "$C" --reset-offsets -G new --from-file "$WORK/bad.csv" --execute
  expect_rc 65 "bad plan: $bad"
  grep -q "bad.csv:[12]: offset plan: " "$WORK/err" || fail "bad plan $bad: $(cat "$WORK/err")"
done
printf 'a,5,1\n' >"$WORK/bad.csv"
run "$C" --reset-offsets -G new --from-file "$WORK/bad.csv"
expect_rc 64 "a plan for a partition the topic does not have"

# --- --delete-offsets -----------------------------------------------------------------
run "$C" --delete-offsets -G new -t a -p 1
expect_rc 0 "--delete-offsets -p 1"
grep -q "^new  *a  *1  *deleted$" "$WORK/out" || fail "delete-offsets row: $(cat "$WORK/out")"
run "$C" --describe -G new -t a
grep -q "^new  *a  *0  *4  " "$WORK/out" || fail "a-0 kept: $(cat "$WORK/out")"
grep -q "^new  *a  *1  *-  *10  *10  .*unread$" "$WORK/out" || fail "a-1 deleted: $(cat "$WORK/out")"
run "$C" --delete-offsets -G new -t a -J
expect_rc 0 "--delete-offsets a topic"
[[ $(cat "$WORK/out") == '{"group":"new","topic":"a","partition":0,"status":"deleted"}' ]] ||
  fail "delete-offsets -J: $(cat "$WORK/out")"
run "$C" --reset-offsets -G new --all-topics --shift-by 0 --export
expect_eq "only b is left" "b,0,1" "$(cat "$WORK/out")"
# Refused while a member is alive (R33), like a reset.
(exec 9>>"$GROUPS_DIR/new/group.lock"; flock -s 9; exec sleep 60) >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  flock -n -x "$GROUPS_DIR/new/group.lock" true 2>/dev/null || break
  sleep 0.05
done
run "$C" --delete-offsets -G new -t b
expect_rc 75 "delete-offsets with a live member"
grep -q "live members" "$WORK/err" || fail "refusal: $(cat "$WORK/err")"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# --- usage ------------------------------------------------------------------------------
for args in "--describe --all-groups -G new" "--delete --all-groups" "--reset-offsets -G new --to-earliest" \
            "--reset-offsets -G new -t a --all-topics --to-earliest" "--export -G new -t a" \
            "--reset-offsets -G new --all-topics -p 0 --to-earliest" "--delete-offsets -G new" \
            "--reset-offsets -G new -t a --from-file $WORK/plan.csv" "--all-topics -G new"; do
  # shellcheck disable=SC2086
  run "$C" $args
  expect_rc 64 "usage: $args"
  [[ ! -s "$WORK/out" ]] || fail "usage error printed: $args"
done
echo "consume_group_plans: ok"
