#!/usr/bin/env bash
# A consumer group member (-G) of a topic deleted under it (mq-topic delete
# --force, R83): a member that reads only that topic stops with a message
# naming the group and the topic, exit 66, as a follower (mq-consume -f)
# does; a member that reads several topics stops reading the deleted one,
# says so, and goes on reading the others.
source "$(dirname "$0")/lib/common.bash"
T="$BIN/mq-topic"
D="$WORK/data"
"$T" -C "$D" create one --partitions 2 >/dev/null
"$T" -C "$D" create two >/dev/null
"$T" -C "$D" create three >/dev/null
seq 1 4 | "$P" -C "$D" -t one -q
seq 1 3 | "$P" -C "$D" -t two -q

# Waits until group $1 has a live member.
member_up() {
  for _ in $(seq 1 200); do
    [[ -n "$(ls "$D/groups/$1/members" 2>/dev/null)" ]] && return 0
    sleep 0.1
  done
  fail "group $1: no member came up"
}
# Waits for process $1 to exit (at most 30 s); its status in $wrc.
wait_exit() {
  set +e
  timeout 30 tail --pid="$1" -f /dev/null
  wait "$1"
  wrc=$?
  set -e
}

# --- one topic: the member stops, exit 66 --------------------------------------------
"$C" -C "$D" -t one -G solo >"$WORK/solo.out" 2>"$WORK/solo.err" &
solo=$!
PIDS+=($solo)
member_up solo
for _ in $(seq 1 200); do [[ $(wc -l <"$WORK/solo.out") -ge 4 ]] && break; sleep 0.1; done
[[ $(wc -l <"$WORK/solo.out") == 4 ]] || fail "solo read: $(cat "$WORK/solo.out")"
run "$T" -C "$D" delete one
expect_rc 75 "delete while the member reads it"
run "$T" -C "$D" delete one --force
expect_rc 0 "forced delete"
wait_exit "$solo"
[[ $wrc == 66 ]] || fail "the member of a deleted topic exited $wrc, want 66 (stderr: $(cat "$WORK/solo.err"))"
grep -q 'group solo: topic "one" was deleted' "$WORK/solo.err" || fail "solo: $(cat "$WORK/solo.err")"
grep -q 'this member stops reading it' "$WORK/solo.err" || fail "solo: $(cat "$WORK/solo.err")"
[[ -z "$(ls "$D/groups/solo/members" 2>/dev/null)" ]] || fail "the member left its membership: $(ls "$D/groups/solo/members")"

# --- several topics: the deleted one is no longer read, the others are ---------------
"$C" -C "$D" -t two -t three -G multi >"$WORK/multi.out" 2>"$WORK/multi.err" &
multi=$!
PIDS+=($multi)
member_up multi
for _ in $(seq 1 200); do [[ $(wc -l <"$WORK/multi.out") -ge 3 ]] && break; sleep 0.1; done
run "$T" -C "$D" delete two --force
expect_rc 0 "forced delete of two"
for _ in $(seq 1 200); do grep -q 'topic two was deleted' "$WORK/multi.err" && break; sleep 0.1; done
grep -q 'group multi: topic two was deleted (or removed): no longer read by this member' \
  "$WORK/multi.err" || fail "multi: $(cat "$WORK/multi.err")"
kill -0 "$multi" 2>/dev/null || fail "the member of two topics stopped: $(cat "$WORK/multi.err")"
echo x | "$P" -C "$D" -t three -q
for _ in $(seq 1 200); do grep -qx x "$WORK/multi.out" && break; sleep 0.1; done
grep -qx x "$WORK/multi.out" || fail "three is not read after two was deleted: $(cat "$WORK/multi.out")"
kill "$multi"
wait "$multi" 2>/dev/null || true
echo "topic_delete_group: ok"
