#!/usr/bin/env bash
# Static members in the admin modes (format-spec/group.md §14.4, §14.6, R33,
# R65): mq-consume --describe shows a running static member's session and an
# absent one (not running, its session holding) with the partitions waiting
# for it; --reset-offsets --execute, --delete and --delete-offsets of a
# topic it reads are refused (exit 75, "live members") while its session
# holds (--delete-offsets of another topic is not), a dry run says so,
# and --remove-member removes it (not while it runs). mq-inspect --verify
# checks a single members/<m>.lease file (R65); mq-inspect dumps a lease's
# and a heartbeat's fields (R65, R69).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
G=$MQ_DIR/groups/g
"$P" -q -t t --create --partitions 4 </dev/null
for p in 0 1 2 3; do echo "m-$p" | "$P" -q -t t -p "$p"; done

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
assigned() { sed -n 's/.*this member ([a-z0-9]*) is assigned partitions \(.*\)$/\1/p' "$1" | tail -1; }
start() {  # start NAME FLAGS...: member NAME of group g, its stderr in $WORK/NAME.err
  local name=$1
  shift
  "$C" -t t -G g --member-id "$name" "$@" -v >/dev/null 2>"$WORK/$name.err" &
  PIDS+=($!)
}

# --- a running static member shows its session --------------------------------
start a --session-timeout 60000
a=$!
wait_for "a starts" "$WORK/a.err" grep -q 'this member (a) is assigned partitions 0,1,2,3$' "$WORK/a.err"
start b
b=$!
wait_for "a gives b its share" "$WORK/a.err" grep -q 'members a,b; this member (a)' "$WORK/a.err"
wait_for "b takes its share" "$WORK/b.err" grep -q 'members a,b; this member (b)' "$WORK/b.err"
A=$(assigned "$WORK/a.err")
echo "a owns $A"
run "$C" -G g --describe
expect_rc 0 "--describe with a running static member"
grep -q '^static member a: running (session timeout 60000 ms)$' "$WORK/out" ||
  fail "a not shown static: $(cat "$WORK/out")"
grep -q '^static member b' "$WORK/out" && fail "b shown static: $(cat "$WORK/out")"

# --- killed: a is absent, its partitions wait for it ---------------------------
kill -KILL "$a"
wait "$a" 2>/dev/null || true
run "$C" -G g --describe
expect_rc 0 "--describe with a absent"
grep -q '^members: 2 (1 absent)$' "$WORK/out" || fail "members: $(cat "$WORK/out")"
grep -qE "^a +[^ ]+ +- +t +t-${A//,/,t-}$" "$WORK/out" || fail "a's row: $(cat "$WORK/out")"
grep -qE '^static member a: absent, its session ends at [0-9T:.-]+Z \(timeout 60000 ms\)$' "$WORK/out" ||
  fail "a not shown absent: $(cat "$WORK/out")"
waiting=""
for p in ${A//,/ }; do
  grep -qE "^g +t +$p +[0-9-]+ +[0-9]+ +[0-9-]+ +a +- +- +absent$" "$WORK/out" ||
    fail "partition $p not shown waiting for a: $(cat "$WORK/out")"
  waiting+="${waiting:+,}t-$p"
done
grep -q "^note: static member a is absent (not running) until its session ends at .*: its partitions $waiting wait for it" "$WORK/out" ||
  fail "no note on a: $(cat "$WORK/out")"
run "$C" -G g --describe -J
expect_rc 0 "--describe -J with a absent"
"$PY" - "$WORK/out" "$A" <<'EOF' || fail "--describe -J: $(cat "$WORK/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mine = {int(p) for p in sys.argv[2].split(",")}
for r in rows[:-1]:
    want = "a" if r["partition"] in mine else None
    assert r["held_for"] == want, r
    assert r["note"] == ("absent" if want else None), r
    assert r["consumer_id"] == (None if want else "b"), r
members = {m["consumer_id"]: m for m in rows[-1]["members"]}
a, b = members["a"], members["b"]
assert a["static"] and a["absent"] and a["session_timeout_ms"] == 60000, a
assert a["pid"] is None and a["session_end"] > 0, a
assert {p["partition"] for p in a["partitions"]} == mine, a
assert not b["static"] and not b["absent"] and b["session_end"] is None, b
EOF

# --- no member running: the admin writes are refused while a's session holds --
kill -TERM "$b"
wait "$b" || true
refused() {  # refused WHAT: the last run exited 75 naming a, its lease and the way out
  expect_rc 75 "$1"
  grep -q 'group "g" has live members: static member a is not running and its session holds until .*members/a.lease' "$WORK/err" ||
    fail "$1: $(cat "$WORK/err")"
  grep -qF -- '--remove-member a' "$WORK/err" || fail "$1: no way out said: $(cat "$WORK/err")"
}
run "$C" -G g --reset-offsets -t t --to-earliest --execute
refused "--reset-offsets --execute"
run "$C" -G g --reset-offsets -t t --to-earliest
expect_rc 0 "--reset-offsets dry run"
grep -q -- '--execute would be refused (exit 75): group "g" has live members: static member a ' "$WORK/err" ||
  fail "dry run: $(cat "$WORK/err")"
run "$C" -G g --delete-offsets -t t
refused "--delete-offsets"
# ... of a topic a reads, not of one it does not: u's offsets (committed
# by a member of u that ran while a was away) are deleted.
"$P" -q -t u --create --partitions 2 </dev/null
echo u-0 | "$P" -q -t u -p 0
run "$C" -t u -G g -e -q
expect_rc 0 "a member of u reads it to the end while a is absent"
run "$C" -G g --delete-offsets -t u
expect_rc 0 "--delete-offsets of a topic the absent member does not read"
grep -qE '^g +u +0 +deleted$' "$WORK/out" || fail "u-0 not deleted: $(cat "$WORK/out")"
run "$C" -G g --delete
refused "--delete"
[[ -d $G ]] || fail "--delete removed the group"

# --- --remove-member: not a running member; then a, and the reset goes ahead --
start c
c=$!
wait_for "c starts" "$WORK/c.err" grep -q 'this member (c) is assigned' "$WORK/c.err"
run "$C" -G g --remove-member c
expect_rc 75 "--remove-member of a running member"
grep -q 'member "c" of group "g" is running' "$WORK/err" || fail "$(cat "$WORK/err")"
kill -TERM "$c"
wait "$c" || true
run "$C" -G g --remove-member a
expect_rc 0 "--remove-member a"
[[ -e $G/members/a.lock || -e $G/members/a.lease ]] && fail "a's files are left: $(ls "$G/members")"
run "$C" -G g --remove-member a
expect_rc 66 "--remove-member a again"
run "$C" -G g --describe
grep -q '^members: none live$' "$WORK/out" || fail "members after the removal: $(cat "$WORK/out")"
run "$C" -G g --reset-offsets -t t --to-earliest --execute
expect_rc 0 "--reset-offsets --execute once a is removed"

# --- mq-inspect --verify of one lease file ---------------------------------------
run "$C" -t t -G g --member-id a --session-timeout 60000 -e -q
expect_rc 0 "a reads to the end"
[[ -s $G/members/a.lease ]] || fail "no lease: $(ls "$G/members")"
run "$INSPECT" --verify "$G/members/a.lease"
expect_rc 0 "mq-inspect --verify a.lease"
grep -q 'a.lease: ok (1 files' "$WORK/out" || fail "$(cat "$WORK/out")"
# ... and a dump of its fields (without --verify), text and -J.
run "$INSPECT" "$G/members/a.lease"
expect_rc 0 "mq-inspect a.lease"
grep -qxE 'version: 1 sessionTimeoutMs: 60000 lastSeen: [0-9]+ sessionEnd: [0-9]+' "$WORK/out" ||
  fail "lease dump: $(cat "$WORK/out" "$WORK/err")"
read -r seen end < <(sed -n 's/.*lastSeen: \([0-9]*\) sessionEnd: \([0-9]*\)$/\1 \2/p' "$WORK/out")
((end == seen + 60000)) || fail "session end $end is not last seen $seen + 60000"
run "$INSPECT" -J "$G/members/a.lease"
expect_rc 0 "mq-inspect -J a.lease"
"$PY" - "$WORK/out" "$G/members/a.lease" <<'EOF' || fail "lease -J: $(cat "$WORK/out")"
import json, sys
f, l = [json.loads(x) for x in open(sys.argv[1])]
assert f == {"type": "file", "file": sys.argv[2], "kind": "member_lease", "base_offset": None}, f
assert l["type"] == "member_lease" and l["file"] == sys.argv[2] and l["version"] == 1, l
assert l["session_timeout_ms"] == 60000 and l["session_end"] == l["last_seen"] + 60000, l
EOF
# A running member's heartbeat (R69): its pid, deadline and last poll.
start h --max-poll-interval 7000
h=$!
wait_for "h starts" "$WORK/h.err" grep -q 'this member (h) is assigned' "$WORK/h.err"
run "$INSPECT" "$G/members/h.alive"
expect_rc 0 "mq-inspect h.alive"
grep -qxE "version: 1 pid: $h startTime: [0-9]+ deadlineMs: 7000 lastPoll: [0-9]+" "$WORK/out" ||
  fail "heartbeat dump: $(cat "$WORK/out" "$WORK/err")"
run "$INSPECT" -J "$G/members/h.alive"
expect_rc 0 "mq-inspect -J h.alive"
"$PY" - "$WORK/out" "$G/members/h.alive" "$h" <<'EOF' || fail "heartbeat -J: $(cat "$WORK/out")"
import json, sys
f, b = [json.loads(x) for x in open(sys.argv[1])]
assert f["kind"] == "member_heartbeat" and f["file"] == sys.argv[2], f
assert b["type"] == "member_heartbeat" and b["pid"] == int(sys.argv[3]), b
assert b["version"] == 1 and b["deadline_ms"] == 7000 and b["start_time"] > 0, b
assert b["last_poll"] >= 0, b
EOF
run "$INSPECT" --verify "$G/members/h.alive"
expect_rc 0 "mq-inspect --verify h.alive"
kill -TERM "$h"
wait "$h" || true
flip_byte "$G/members/a.lease" 20
run "$INSPECT" --verify "$G/members/a.lease"
expect_rc 65 "mq-inspect --verify of a damaged a.lease"
grep -q "$G/members/a.lease: position 8: R65: crc" "$WORK/out" "$WORK/err" ||
  fail "$(cat "$WORK/out" "$WORK/err")"
run "$INSPECT" "$G/members/a.lease"
expect_rc 65 "mq-inspect of a damaged a.lease"
grep -q "$G/members/a.lease: position 8: R65: crc" "$WORK/err" || fail "$(cat "$WORK/out" "$WORK/err")"
echo "consume_group_static_admin: ok"
