#!/usr/bin/env bash
# mq-consume's group administration: --list, --describe (lag against the
# produced counts, owners, notes), --reset-offsets (dry-run plan vs
# --execute for each --to-* target, clamping, refusal while a member is
# alive: 75, before anything is read for the plan), --delete, bad group
# names (64), missing groups (66), a corrupt offsets file (65 naming file
# and rule, nothing changed).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
GROUPS_DIR="$MQ_DIR/groups"

# orders: 3 partitions of 10, 20 and 0 messages, timestamps 1000+i (i the
# offset) in partition 0 and 2000+i in partition 1.
for i in $(seq 0 9); do echo "{\"ts\":$((1000 + i)),\"payload\":\"a$i\"}"; done >"$WORK/p0"
for i in $(seq 0 19); do echo "{\"ts\":$((2000 + i)),\"payload\":\"b$i\"}"; done >"$WORK/p1"
"$P" -q -t orders --create --partitions 3 -J -p 0 "$WORK/p0"
"$P" -q -t orders -J -p 1 "$WORK/p1"
seq 1 30 | "$P" -q -t other --create

# A group exists iff its directory does (format-spec/group.md §14.4); a
# member creates it, and there is none in these tests.
make_group() { mkdir -p -m 0750 "$GROUPS_DIR" && mkdir -m 0750 "$GROUPS_DIR/$1"; }

# --- list ---------------------------------------------------------------------------
run "$C" --list
expect_rc 0 "--list without groups"
[[ ! -s "$WORK/out" ]] || fail "--list without groups printed: $(cat "$WORK/out")"
make_group g
make_group h
mkdir -m 0750 "$GROUPS_DIR/~deleted-1-0"  # not a group (§14.4)
run "$C" --list
expect_rc 0 "--list"
[[ "$(cat "$WORK/out")" == $'g\nh' ]] || fail "--list: $(cat "$WORK/out")"
run "$C" --list -J
expect_rc 0 "--list -J"
[[ "$(cat "$WORK/out")" == $'{"group":"g"}\n{"group":"h"}' ]] || fail "--list -J: $(cat "$WORK/out")"

# --- a new group: nothing committed ------------------------------------------------
run "$C" --describe -G g
expect_rc 0 "describe empty group"
grep -q "^GROUP  *TOPIC  *PARTITION  *CURRENT-OFFSET  *LOG-END-OFFSET  *LAG  *CONSUMER-ID  *HOST  *PID  *NOTE$" \
  "$WORK/out" || fail "describe header: $(cat "$WORK/out")"
grep -q "^total lag: 0$" "$WORK/out" || fail "empty group lag: $(cat "$WORK/out")"
grep -q "^members: none live$" "$WORK/out" || fail "empty group members: $(cat "$WORK/out")"
run "$C" --describe -G g -t orders
expect_rc 0 "describe -t, nothing committed"
# Every partition, with '-' offsets and its backlog (log end - log start) as its lag.
[[ $(grep -c "^g  *orders  *[0-2]  *-  *\([0-9]*\)  *\1  *-  *-  *-  *unread$" "$WORK/out") == 3 ]] \
  || fail "describe -t lists every partition with '-' offsets: $(cat "$WORK/out")"
grep -q "^total lag: 30$" "$WORK/out" || fail "backlog not in the total: $(cat "$WORK/out")"

# --- reset: the plan changes nothing; --execute applies it -------------------------
run "$C" --reset-offsets -G g -t orders --to-earliest
expect_rc 0 "dry run"
grep -q "dry run: nothing changed" "$WORK/err" || fail "dry run not said: $(cat "$WORK/err")"
grep -q "^GROUP  *TOPIC  *PARTITION  *CURRENT-OFFSET  *NEW-OFFSET  *NOTE$" "$WORK/out" \
  || fail "plan header: $(cat "$WORK/out")"
grep -q "^g  *orders  *1  *-  *0  *-$" "$WORK/out" || fail "plan row: $(cat "$WORK/out")"
[[ ! -e "$GROUPS_DIR/g/offsets" ]] || fail "a dry run wrote the offsets file"

run "$C" --reset-offsets -G g -t orders --to-offset 4 --execute
expect_rc 0 "--to-offset --execute"
# Clamped to each partition's [log start, end]: 10 and 20 hold 4, empty 2 takes 0.
grep -q "^g  *orders  *0  *-  *4  *-$" "$WORK/out" || fail "p0 plan: $(cat "$WORK/out")"
grep -q "^g  *orders  *2  *-  *0  *clamped-to-log-end$" "$WORK/out" || fail "p2 clamp: $(cat "$WORK/out")"
[[ -s "$GROUPS_DIR/g/offsets" ]] || fail "--execute wrote no offsets file"
"$INSPECT" --verify "$GROUPS_DIR/g/offsets" >/dev/null || fail "the offsets file does not verify"

# Lag = produced - committed: 10-4 + 20-4 + 0-0 = 22.
run "$C" --describe -G g
expect_rc 0 "describe after reset"
grep -q "^g  *orders  *0  *4  *10  *6  *-  *-  *-  *-$" "$WORK/out" || fail "p0 row: $(cat "$WORK/out")"
grep -q "^g  *orders  *1  *4  *20  *16  " "$WORK/out" || fail "p1 row: $(cat "$WORK/out")"
grep -q "^g  *orders  *2  *0  *0  *0  " "$WORK/out" || fail "p2 row: $(cat "$WORK/out")"
grep -q "^total lag: 22$" "$WORK/out" || fail "total lag: $(cat "$WORK/out")"
grep -q "^rebalances: 0$" "$WORK/out" || fail "rebalances: $(cat "$WORK/out")"
grep -q "^dead letters: 0$" "$WORK/out" || fail "dead letters: $(cat "$WORK/out")"
run "$C" --describe -G g -J
expect_rc 0 "describe -J"
"$PY" - "$WORK/out" <<'EOF' || fail "describe -J: $(cat "$WORK/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
parts = [r for r in rows if r["type"] == "partition"]
assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in parts] == \
    [(0, 4, 10, 6), (1, 4, 20, 16), (2, 0, 0, 0)], parts
assert all(r["consumer_id"] is None and r["note"] is None and r["committed_by"] is None for r in parts)
assert rows[-1]["type"] == "summary" and rows[-1]["total_lag"] == 22 and rows[-1]["members"] == []
assert rows[-1]["generation"] == 1 and rows[-1]["last_rebalance_timestamp"] is None
EOF

# --shift-by from the committed offsets, clamped; -p limits the partitions.
run "$C" --reset-offsets -G g -t orders -p 0,1 --shift-by=-6
expect_rc 0 "--shift-by -6"
grep -q "^g  *orders  *0  *4  *0  *clamped-to-log-start$" "$WORK/out" || fail "shift p0: $(cat "$WORK/out")"
grep -q "^g  *orders  *1  *4  *0  *clamped-to-log-start$" "$WORK/out" || fail "shift p1: $(cat "$WORK/out")"
grep -q "orders  *2" "$WORK/out" && fail "-p 0,1 planned partition 2"
run "$C" --reset-offsets -G g -t orders -p 1 --shift-by 5 --execute
expect_rc 0 "--shift-by 5 --execute"
grep -q "^g  *orders  *1  *4  *9  *-$" "$WORK/out" || fail "shift +5: $(cat "$WORK/out")"
run "$C" --reset-offsets -G g -t orders -p 1 --shift-by 100 -J
expect_rc 0 "--shift-by 100 -J"
grep -qF '{"group":"g","topic":"orders","partition":1,"current_offset":9,"new_offset":20,"log_start_offset":0,"log_end_offset":20,"note":"clamped-to-log-end","executed":false}' \
  "$WORK/out" || fail "plan -J: $(cat "$WORK/out")"
# No committed offset to shift: refused, as in Kafka.
make_group fresh
run "$C" --reset-offsets -G fresh -t orders --shift-by 1
expect_rc 64 "--shift-by without commits"
grep -q "no committed offset" "$WORK/err" || fail "shift without commits: $(cat "$WORK/err")"

# --to-latest, --to-earliest, --to-datetime (ms and ISO, as -o s@).
run "$C" --reset-offsets -G g -t orders --to-latest --execute
expect_rc 0 "--to-latest"
run "$C" --describe -G g
grep -q "^total lag: 0$" "$WORK/out" || fail "lag after --to-latest: $(cat "$WORK/out")"
run "$C" --reset-offsets -G g -t orders --to-datetime 1005
expect_rc 0 "--to-datetime ms"
grep -q "^g  *orders  *0  *10  *5  *-$" "$WORK/out" || fail "datetime p0: $(cat "$WORK/out")"
grep -q "^g  *orders  *1  *20  *0  *-$" "$WORK/out" || fail "datetime p1: $(cat "$WORK/out")"
grep -q "^g  *orders  *2  *0  *0  *-$" "$WORK/out" || fail "datetime p2: $(cat "$WORK/out")"
run "$C" --reset-offsets -G g -t orders --to-datetime 1970-01-01T00:00:02.010Z --execute
expect_rc 0 "--to-datetime ISO"
grep -q "^g  *orders  *0  *10  *10  *-$" "$WORK/out" || fail "ISO p0 (none later: the end): $(cat "$WORK/out")"
grep -q "^g  *orders  *1  *20  *10  *-$" "$WORK/out" || fail "ISO p1: $(cat "$WORK/out")"
run "$C" --describe -G g
grep -q "^total lag: 10$" "$WORK/out" || fail "lag after --to-datetime: $(cat "$WORK/out")"
run "$C" --reset-offsets -G g -t orders --to-earliest --execute
expect_rc 0 "--to-earliest"
run "$C" --describe -G g -t orders
grep -q "^total lag: 30$" "$WORK/out" || fail "lag after --to-earliest: $(cat "$WORK/out")"
run "$C" --reset-offsets -G g -t orders --to-datetime yesterday
expect_rc 64 "bad --to-datetime"

# --- refused while a member is alive ----------------------------------------------
cp "$GROUPS_DIR/g/offsets" "$WORK/offsets.before"
# A member holds group.lock shared for its life (R33): so does this sleep.
(exec 9>>"$GROUPS_DIR/g/group.lock"; flock -s 9; exec sleep 60) >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  flock -n -x "$GROUPS_DIR/g/group.lock" true 2>/dev/null || break
  sleep 0.05
done
run "$C" --reset-offsets -G g -t orders --to-latest --execute
expect_rc 75 "reset with a live member"
grep -q "live members" "$WORK/err" || fail "refusal does not say why: $(cat "$WORK/err")"
[[ ! -s "$WORK/out" ]] || fail "refused reset printed a plan"
cmp -s "$GROUPS_DIR/g/offsets" "$WORK/offsets.before" || fail "refused reset changed the offsets"
# The lock comes before the plan: --execute is refused before it reads
# anything a member could still move (--shift-by's committed offsets). With
# the offsets file made unreadable meanwhile, the refusal is still "live
# members" (75), not the file's corruption (65): nothing was read.
cp "$GROUPS_DIR/g/offsets" "$WORK/offsets.g"
flip_byte "$GROUPS_DIR/g/offsets" 60
run "$C" --reset-offsets -G g -t orders --shift-by=-1 --execute
expect_rc 75 "reset with a live member reads nothing before the lock"
grep -q "live members" "$WORK/err" || fail "refusal before reading: $(cat "$WORK/err")"
cp "$WORK/offsets.g" "$GROUPS_DIR/g/offsets"
run "$C" --reset-offsets -G g -t orders --to-latest
expect_rc 0 "dry run with a live member"
grep -q "live members: --execute would be refused" "$WORK/err" || fail "no warning: $(cat "$WORK/err")"
run "$C" --delete -G g
expect_rc 75 "delete with a live member"
[[ -d "$GROUPS_DIR/g" ]] || fail "refused delete removed the group"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# --- owners and members, from the lock files (format-spec/group.md §14.5) ---------
# A member file held with flock; partitions/orders, a 256-byte slot per
# partition: slot 1's first byte held with an OFD byte-range lock and its
# owner's id at its start; slot 0 names m0 but is not held (released).
mkdir -p -m 0750 "$GROUPS_DIR/g/members" "$GROUPS_DIR/g/partitions"
echo "m1 box 4242" >"$GROUPS_DIR/g/members/m1.lock"
python3 - "$GROUPS_DIR/g" "$WORK/holding" <<'PYEOF' >/dev/null 2>&1 &
import fcntl, os, struct, sys, time
g, ready = sys.argv[1], sys.argv[2]
member = os.open(g + "/members/m1.lock", os.O_RDONLY)
fcntl.flock(member, fcntl.LOCK_EX)
owners = os.open(g + "/partitions/orders", os.O_RDWR | os.O_CREAT, 0o640)
os.pwrite(owners, b"m0\n".ljust(256, b"\0"), 0)
os.pwrite(owners, b"m1\n".ljust(256, b"\0"), 256)
# struct flock: l_type, l_whence, l_start, l_len, l_pid (x86-64 and arm64 layout)
fcntl.fcntl(owners, fcntl.F_OFD_SETLK, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 256, 1, 0))
open(ready, "w").close()
time.sleep(60)
PYEOF
PIDS+=($!)
for _ in $(seq 200); do [[ -e $WORK/holding ]] && break; sleep 0.05; done
[[ -e $WORK/holding ]] || fail "the lock holder did not start"
run "$C" --describe -G g
expect_rc 0 "describe with a member"
grep -q "^g  *orders  *1  *0  *20  *20  *m1  *box  *4242  *-$" "$WORK/out" || fail "owner row: $(cat "$WORK/out")"
grep -q "^g  *orders  *0  *0  *10  *10  *-  *-  *-  *-$" "$WORK/out" || fail "unowned row: $(cat "$WORK/out")"
grep -q "^members: 1$" "$WORK/out" || fail "members: $(cat "$WORK/out")"
# An earlier mq's member file names no topics: '?'.
grep -q "^m1  *box  *4242  *?  *orders-1$" "$WORK/out" || fail "member row: $(cat "$WORK/out")"
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# --- notes: an offset above the log end (format-spec §14.2's worked example:
# orders-0 at 42, topic "orders" of another data directory) ------------------------
make_group example
hex2bin "4d51474f000100005b30a5d300000001" >"$GROUPS_DIR/example/offsets"
hex2bin "00000000000000010000018bcfe568000000000000000000ffffffffffffffff" >>"$GROUPS_DIR/example/offsets"
hex2bin "00066f726465727300000000000000000000002a00000000" >>"$GROUPS_DIR/example/offsets"
hex2bin "0000018bcfe56800000000000000000000026d31" >>"$GROUPS_DIR/example/offsets"
run "$C" --describe -G example
expect_rc 0 "describe above the end"
grep -q "^example  *orders  *0  *42  *10  *0  .*above-log-end$" "$WORK/out" || fail "above row: $(cat "$WORK/out")"
grep -q "^note: orders-0: committed offset 42 is above the log end 10" "$WORK/out" \
  || fail "above note: $(cat "$WORK/out")"

# --- a partition whose log cannot be read: '-' for it, the others complete, exit 1 ----
mv "$MQ_DIR/orders-1/state" "$WORK/orders-1.state"
ln -s "$WORK/orders-1.state" "$MQ_DIR/orders-1/state"  # refused: a symlink
run "$C" --describe -G g -t orders
expect_rc 1 "describe with an unreadable partition"
grep -q "^g  *orders  *1  *[0-9]*  *-  *-  *-  *-  *-  *unreadable$" "$WORK/out" ||
  fail "unreadable row: $(cat "$WORK/out")"
grep -q "^g  *orders  *0  *0  *10  *10  " "$WORK/out" || fail "readable row: $(cat "$WORK/out")"
grep -q "^dead letters: " "$WORK/out" || fail "summary missing: $(cat "$WORK/out")"
grep -q "group g: orders-1: log end and lag unknown: .*orders-1/state: is a symlink" "$WORK/err" ||
  fail "unreadable: file and problem not named: $(cat "$WORK/err")"
run "$C" --describe -G g -t orders -J
expect_rc 1 "describe -J with an unreadable partition"
jq -e -s 'map(select(.type == "partition" and .partition == 1)) | .[0] |
       .note == "unreadable" and .log_end_offset == null and .lag == null and (.error | test("symlink"))' \
  "$WORK/out" >/dev/null || fail "unreadable -J: $(cat "$WORK/out")"
rm "$MQ_DIR/orders-1/state"
mv "$WORK/orders-1.state" "$MQ_DIR/orders-1/state"

# --- a corrupt offsets file: 65 naming file, position and rule; never a reset ------
cp "$GROUPS_DIR/example/offsets" "$WORK/example.offsets"
flip_byte "$GROUPS_DIR/example/offsets" 60
for args in "--describe -G example" "--reset-offsets -G example -t orders --to-earliest" \
            "--reset-offsets -G example -t orders --to-earliest --execute"; do
  # shellcheck disable=SC2086
  run "$C" $args
  expect_rc 65 "corrupt offsets: $args"
  grep -q "groups/example/offsets.*R29" "$WORK/err" || fail "corrupt: file or rule not named: $(cat "$WORK/err")"
  [[ ! -s "$WORK/out" ]] || fail "corrupt: $args printed $(cat "$WORK/out")"
done
head -c 30 "$WORK/example.offsets" >"$GROUPS_DIR/example/offsets"
run "$C" --describe -G example
expect_rc 65 "truncated offsets"
grep -q "R29.*truncated" "$WORK/err" || fail "truncated: $(cat "$WORK/err")"
run "$C" --delete -G example
expect_rc 0 "delete a corrupt group"

# --- delete ---------------------------------------------------------------------------
run "$C" --delete -G h
expect_rc 0 "delete"
[[ ! -e "$GROUPS_DIR/h" ]] || fail "delete left the group"
run "$C" --list
[[ "$(cat "$WORK/out")" == $'fresh\ng' ]] || fail "--list after delete: $(cat "$WORK/out")"

# --- missing groups and topics: 66; bad names and flags: 64 ------------------------
for args in "--describe -G nosuch" "--delete -G nosuch"; do
  # shellcheck disable=SC2086
  run "$C" $args
  expect_rc 66 "missing group: $args"
  grep -q nosuch "$WORK/err" || fail "missing group not named: $(cat "$WORK/err")"
done
run "$C" --describe -G g -t nosuch
expect_rc 66 "describe a missing topic"
for args in "--describe -G a/b" "--describe -G .." "--delete -G bad:name" "--describe" \
            "--reset-offsets -G g -t orders" "--reset-offsets -G g --to-earliest" \
            "--reset-offsets -G g -t orders --to-earliest --to-latest" "--execute -G g" \
            "--describe -G g -e" "--list -G g" "--delete -G g -t orders" "--describe -G g -p 1" \
            "--reset-offsets -G g -t orders -p 7 --to-earliest" "--list --describe -G g"; do
  # shellcheck disable=SC2086
  run "$C" $args
  expect_rc 64 "usage: $args"
  [[ ! -s "$WORK/out" ]] || fail "usage error printed: $args"
done
[[ -d "$GROUPS_DIR/g" ]] || fail "usage errors changed a group"
echo "ok"
