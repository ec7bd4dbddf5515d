#!/usr/bin/env bash
# mq-compact (format-spec/retention.md, R73-R79): retention by size and by
# time deletes exactly the expected segments (oldest first, never the
# active one unless rolled), only with --execute; the log start moves and
# readers, verify and new appends agree; delete-records; a lagging group is
# reported and, protected, keeps its unread data (exit 3); a second run
# exits 75 while one holds the lock; a follower reading during deletion
# sees every message it is handed intact and in order.
source "$(dirname "$0")/lib/common.bash"

K="$BIN/mq-compact"
D="$WORK/data"
export MQ_DIR="$D"

# Small batches, so that 1024-byte segments hold a few each.
produce() { "$P" --batch-bytes 200 "$@"; }
# Segment .log files of a partition, sorted.
logs() { (cd "$D/$1" && ls -- *.log 2>/dev/null | sort) || true; }
# Lines "m<i>" for i in [from, to).
msgs() { seq "$1" $(($2 - 1)) | sed 's/^/m/'; }
# Every message read from the beginning is "m<offset>".
check_intact() {
  local t="$1" lines
  lines="$("$C" -t "$t" -e -f '%o %s\n')"
  [[ -z "$lines" ]] && return 0
  awk '{ if ($2 != "m" $1) { print "garbage: " $0; exit 1 } }' <<<"$lines" || fail "$t: $lines"
}
verify_ok() {
  run "$INSPECT" --verify -C "$D" "$1"
  expect_rc 0 "mq-inspect --verify $1"
}

# --- help, version, SYNOPSIS, usage errors ---------------------------------------------
MAN="$SRC/man/man1/mq-compact.1"
run "$K" --version
expect_rc 0 "--version"
grep -qE '^mq-compact [0-9]+\.[0-9]+\.[0-9]+$' "$WORK/out" || fail "--version: $(cat "$WORK/out")"
"$K" --help | sed -n '1,/^$/p' | sed -e '/^$/d' -e 's/^Usage: //' -e 's/^ *//' >"$WORK/usage"
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$MAN" | sed -e '/^\./d' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' \
  >"$WORK/synopsis"
diff "$WORK/synopsis" "$WORK/usage" >&2 || fail "usage lines differ from the man page SYNOPSIS"
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$WORK/usage" | sort -u); do
  grep -q -- "$opt" "$MAN" || fail "man page does not document $opt"
done
for args in "--no-such-flag" "--delete-before -1" "-p 10000" "--protect-max-ms x"; do
  run "$K" $args
  expect_rc 64 "mq-compact $args"
done
run "$K" -C "$WORK/nowhere"
expect_rc 66 "no data directory"

# --- by size: exactly the oldest segments beyond retention.bytes ------------------------
msgs 0 400 | produce -t sized --create -X segment.bytes=1024 -X retention.bytes=3000 -q
before="$(logs sized-0)"
n=$(wc -l <<<"$before")
(( n >= 6 )) || fail "want at least 6 segments, got $n"
# The model (R75): oldest first while what stays holds >= 3000 bytes; the
# active (last) segment's committed bytes count, it never goes.
expect_gone=()
total=0
for f in $before; do total=$((total + $(stat -c %s "$D/sized-0/$f"))); done
for f in $before; do
  [[ $f == "$(tail -1 <<<"$before")" ]] && break
  s=$(stat -c %s "$D/sized-0/$f")
  (( total - s >= 3000 )) || break
  total=$((total - s))
  expect_gone+=("$f")
done
(( ${#expect_gone[@]} >= 2 )) || fail "the model deletes ${#expect_gone[@]} segments"
expect_kept="$(comm -23 <(echo "$before") <(printf '%s\n' "${expect_gone[@]}"))"

run "$K" -t sized
expect_rc 0 "plan by size"
expect_eq "the plan deletes nothing" "$before" "$(logs sized-0)"
planned="$(sed -n 's/^delete sized-0 \([0-9]*\.log\) .*(size)$/\1/p' "$WORK/out")"
expect_eq "planned segments" "$(printf '%s\n' "${expect_gone[@]}")" "$planned"
grep -q "plan only: nothing deleted" "$WORK/err" || fail "no plan-only notice: $(cat "$WORK/err")"

run "$K" -t sized --execute
expect_rc 0 "execute by size"
expect_eq "segments kept by size" "$expect_kept" "$(logs sized-0)"
start=$((10#${expect_kept%%.log*}))
grep -q "^sized-0 log start 0 -> $start: ${#expect_gone[@]} segments" "$WORK/out" ||
  fail "summary: $(cat "$WORK/out")"
for f in "${expect_gone[@]}"; do
  [[ -f "$D/sized-0/$f.deleted" ]] || fail "$f.deleted missing (R77)"
done
verify_ok sized
check_intact sized
first="$("$C" -t sized -e -c 1 -f '%o')"
expect_eq "first offset read" "$start" "$first"
# -o below the log start reads from the log start (retention.md §20.1).
expect_eq "-o 0 after retention" "$start" "$("$C" -t sized -o 0 -e -c 1 -f '%o' 2>"$WORK/oor.err")"
grep -q "partition 0: offsets 0\.\.$((start - 1)) were deleted by retention before they were read" \
  "$WORK/oor.err" || fail "-o 0 below the log start: no warning: $(cat "$WORK/oor.err")"
# A second run: nothing more by size; the .deleted files stay (delay) ...
run "$K" -t sized --execute
expect_rc 0 "second run"
grep -q "^sized-0 log start $start -> $start: 0 segments" "$WORK/out" || fail "$(cat "$WORK/out")"
[[ -n "$(ls "$D/sized-0" | grep '\.deleted$')" ]] || fail ".deleted files purged before their delay"
# ... until their delay has passed.
run "$K" -t sized --execute --delete-delay-ms 0
expect_rc 0 "purge"
[[ -z "$(ls "$D/sized-0" | grep '\.deleted$' || true)" ]] || fail ".deleted files left: $(ls "$D/sized-0")"
# Appends go on after retention.
msgs 400 410 | produce -t sized -q
check_intact sized
verify_ok sized

# --- by time: the append time judges (R74), the active segment is rolled (R76) ---------
msgs 0 300 | produce -t timed --create -X segment.bytes=1024 -X retention.ms=3600000 -q
before="$(logs timed-0)"
old=($(head -3 <<<"$before"))
# Producer timestamps are now; the first three segments were appended two
# hours ago (their mtime): min(timestamp, append time) is old.
for f in "${old[@]}"; do touch -d '2 hours ago' "$D/timed-0/$f"; done
run "$K" -t timed --execute
expect_rc 0 "execute by time"
expect_eq "segments kept by time" "$(tail -n +4 <<<"$before")" "$(logs timed-0)"
grep -c '^delete timed-0 .*(time)$' "$WORK/out" | grep -qx 3 || fail "$(cat "$WORK/out")"
verify_ok timed
check_intact timed
# A group that loses nothing yet: how long until retention.ms reaches it.
"$C" -t timed -G h -c 1 -f '' >/dev/null
run "$K" -t timed
expect_rc 0 "plan with a group ahead of retention"
grep -qE "^headroom group h partition timed-0 committed [0-9]+: retention.ms reaches its unread messages in (59m[0-9]+s|1h0m)$" \
  "$WORK/out" || fail "no headroom line: $(cat "$WORK/out")"
# --- headroom by size (R110): bytes to go, and the time at the log's own rate ----------
msgs 0 300 | produce -t hsize --create -X segment.bytes=1024 -q
"$C" -t hsize -G hs -c 1 -f '' >/dev/null
mapfile -t segs < <(logs hsize-0)
n=${#segs[@]}
((n >= 3)) || fail "hsize: $n segments"
ref=$((n > 9 ? n - 9 : 0))  # the reference: 8 segments before the active one at most
after=0
for ((i = ref + 1; i < n; i++)); do after=$((after + $(stat -c %s "$D/hsize-0/${segs[i]}"))); done
# The bytes after the first segment (where the group is) equal those after
# the reference when it is the first; else add the ones between.
seg_after=0
for ((i = 1; i < n; i++)); do seg_after=$((seg_after + $(stat -c %s "$D/hsize-0/${segs[i]}"))); done
# Its last append an hour ago: the rate is `after` bytes an hour; with
# retention.bytes `after` above what follows the group's segment, the
# headroom is an hour.
touch -d '1 hour ago' "$D/hsize-0/${segs[ref]}"
"$BIN/mq-topic" alter hsize -X retention.bytes=$((seg_after + after)) >/dev/null
run "$K" -t hsize
expect_rc 0 "plan with a group ahead of retention by size"
grep -qE "^headroom group hs partition hsize-0 committed 1: retention.bytes reaches its unread messages in (59m59s|1h0m) \($after more bytes at [0-9]+ B/s over the last $((n - 1 - ref)) segments\)$" \
  "$WORK/out" || fail "no size headroom line: $(cat "$WORK/out")"
# One segment: the rate is not known; the bytes to go are given.
msgs 0 5 | produce -t hone --create -X retention.bytes=1MiB -q
"$C" -t hone -G hs -c 1 -f '' >/dev/null
run "$K" -t hone
expect_rc 0 "plan of a one-segment partition"
grep -qx "headroom group hs partition hone-0 committed 1: retention.bytes reaches its unread messages after 1048576 more bytes (append rate not known: no earlier local segment)" \
  "$WORK/out" || fail "no unknown-rate line: $(cat "$WORK/out")"

# Every segment old, the active one too: rolled, then deleted; the log is
# empty and starts at its end.
for f in $(logs timed-0); do touch -d '2 hours ago' "$D/timed-0/$f"; done
run "$K" -t timed --execute
expect_rc 0 "execute with the active segment"
grep -q "active segment rolled" "$WORK/out" || fail "$(cat "$WORK/out")"
expect_eq "only the new active segment" "$(printf '%020d.log' 300)" "$(logs timed-0)"
expect_eq "nothing to read" "" "$("$C" -t timed -e -f '%o %s\n')"
verify_ok timed
msgs 300 305 | produce -t timed -q
expect_eq "appends after the roll" "$(seq 300 304)" "$("$C" -t timed -e -f '%o\n')"
check_intact timed

# --- delete-records ---------------------------------------------------------------------
msgs 0 300 | produce -t recs --create -X segment.bytes=1024 -q
run "$K" -t recs --delete-before 150 --execute
expect_rc 0 "delete-records"
grep -q "^recs-0 log start 0 -> 150:" "$WORK/out" || fail "$(cat "$WORK/out")"
expect_eq "first offset after delete-records" "150" "$("$C" -t recs -e -c 1 -f '%o')"
expect_eq "-o 3 after delete-records" "150" "$("$C" -t recs -o 3 -e -c 1 -f '%o')"
verify_ok recs
check_intact recs
run "$K" -t recs -t sized --delete-before 1
expect_rc 64 "--delete-before with two topics"

# --- the oldest segment removed by hand: the log start follows (R73) ---------------------
msgs 0 200 | produce -t hand --create -X segment.bytes=1024 -q
rm "$D/hand-0/00000000000000000000".*
now_first="$(logs hand-0 | head -1)"
run "$K" -t hand --execute
expect_rc 0 "the log start after a segment removed by hand"
grep -q "^hand-0 log start 0 -> $((10#${now_first%.log})): 0 segments" "$WORK/out" ||
  fail "$(cat "$WORK/out")"
verify_ok hand
check_intact hand

# --- a lagging group: reported, then protected ------------------------------------------
msgs 0 400 | produce -t lag --create -X segment.bytes=1024 -X retention.bytes=2000 -q
"$C" -t lag -G slow -c 37 -f '' >/dev/null
"$C" -t lag -G done -e -f '' >/dev/null
before="$(logs lag-0)"
run "$K" -t lag
expect_rc 0 "plan with a lagging group"
grep -q "^loss group slow partition lag-0 loses [0-9]* unread messages (committed 37, oldest 20" "$WORK/out" ||
  fail "no loss line for slow: $(cat "$WORK/out")"
grep -q "group done" "$WORK/out" && fail "group done read everything: $(cat "$WORK/out")"
run "$K" -t lag --protect-group slow --execute
expect_rc 3 "protected group"
grep -q "^protected group slow partition lag-0" "$WORK/out" || fail "$(cat "$WORK/out")"
grep -q "unread messages of protected groups kept" "$WORK/err" || fail "$(cat "$WORK/err")"
# Only the segments wholly below offset 37 went.
for f in $(comm -23 <(echo "$before") <(logs lag-0)); do
  next=$(grep -A1 -x "$f" <<<"$before" | tail -1)
  (( 10#${next%%.log} <= 37 )) || fail "$f went: it holds offsets at or above 37"
done
first="$("$C" -t lag -e -c 1 -f '%o')"
(( first <= 37 )) || fail "the log starts at $first, above slow's committed 37"
expect_eq "slow reads on from 37" "37" "$("$C" -t lag -G slow -c 1 -f '%o')"
# A bound on how long a dead group pins data.
sleep 0.05
run "$K" -t lag --protect --protect-max-ms 1 --execute
expect_rc 0 "protection expired"
grep -q "not protected" "$WORK/out" || fail "$(cat "$WORK/out")"
verify_ok lag

# --- one run at a time (R79) ------------------------------------------------------------
touch "$D/.mq-compact.lock"
flock "$D/.mq-compact.lock" sleep 3 &
PIDS+=($!)
for _ in $(seq 50); do flock -n "$D/.mq-compact.lock" true 2>/dev/null || break; sleep 0.05; done
run "$K" -t sized --execute
expect_rc 75 "a second run"
grep -q "another mq-compact is running" "$WORK/err" || fail "$(cat "$WORK/err")"
run "$K" -t sized --execute --wait
expect_rc 0 "--wait"

# --- a follower reading while retention deletes -----------------------------------------
msgs 0 50 | produce -t live --create -X segment.bytes=1024 -X retention.bytes=1500 -q
"$C" -t live -o beginning -f '%o %s\n' >"$WORK/follow.out" 2>"$WORK/follow.err" &
fpid=$!
PIDS+=($fpid)
next=50
for round in $(seq 30); do
  msgs $next $((next + 20)) | produce -t live -q
  next=$((next + 20))
  "$K" -t live --execute --delete-delay-ms 0 -q >/dev/null
done
for _ in $(seq 100); do
  [[ "$(tail -1 "$WORK/follow.out" 2>/dev/null)" == "$((next - 1)) m$((next - 1))" ]] && break
  sleep 0.1
done
kill -0 $fpid 2>/dev/null || fail "the follower exited: $(cat "$WORK/follow.err")"
expect_eq "the follower's last message" "$((next - 1)) m$((next - 1))" "$(tail -1 "$WORK/follow.out")"
awk 'BEGIN { prev = -1 } { if ($2 != "m" $1 || $1 <= prev) { print "bad: " $0; exit 1 } prev = $1 }' \
  "$WORK/follow.out" || fail "follower output"
verify_ok live

# --- a follower stopped while retention deletes what it was to read next ----------------
# It goes on at the new log start and says which offsets it never read.
msgs 0 40 | produce -t stalled --create -X segment.bytes=1024 -X retention.bytes=1500 -q
"$C" -t stalled -o beginning -f '%o %s\n' >"$WORK/lag.out" 2>"$WORK/lag.err" &
lpid=$!
PIDS+=($lpid)
for _ in $(seq 100); do
  [[ "$(tail -1 "$WORK/lag.out" 2>/dev/null)" == "39 m39" ]] && break
  sleep 0.1
done
expect_eq "the stopped follower's last message before" "39 m39" "$(tail -1 "$WORK/lag.out")"
kill -STOP $lpid
msgs 40 200 | produce -t stalled -q
"$K" -t stalled --execute --delete-delay-ms 0 -q >/dev/null
"$K" -t stalled --execute --delete-delay-ms 0 -q >/dev/null  # unlinks the .deleted files
lag_start=$("$C" -t stalled -o beginning -e -c 1 -f '%o')
((lag_start > 40)) || fail "retention left the log start at $lag_start"
kill -CONT $lpid
for _ in $(seq 100); do
  [[ "$(tail -1 "$WORK/lag.out" 2>/dev/null)" == "199 m199" ]] && break
  sleep 0.1
done
kill -0 $lpid 2>/dev/null || fail "the follower exited: $(cat "$WORK/lag.err")"
expect_eq "the follower's last message after" "199 m199" "$(tail -1 "$WORK/lag.out")"
awk 'BEGIN { prev = -1 } { if ($2 != "m" $1 || $1 <= prev) { print "bad: " $0; exit 1 } prev = $1 }' \
  "$WORK/lag.out" || fail "follower output"
grep -q "offsets 40\.\.$((lag_start - 1)) were deleted by retention before they were read" \
  "$WORK/lag.err" || fail "the follower passed deleted offsets silently: $(cat "$WORK/lag.err")"
expect_eq "what the follower printed after 39" "$lag_start" \
  "$(awk '$1 > 39 { print $1; exit }' "$WORK/lag.out")"
echo ok
