#!/usr/bin/env bash
# Consumer groups (mq-consume -G): resume from committed offsets, a work
# queue split among members with each partition owned by one member,
# takeover after SIGKILL, at-least-once and at-most-once under random
# kills (seeded: MQ_TEST_SEED repeats a run, MQ_GROUP_KILLS sets the kills
# per mode), --ack-fd, a committed offset past a truncated log's end, and
# bad input.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
consume() { "$BIN/mq-consume" "$@"; }
SEED=${MQ_TEST_SEED:-$RANDOM}
KILLS=${MQ_GROUP_KILLS:-15}
echo "consume_group: seed $SEED, $KILLS kills per mode (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED

# wait_lines FILE... N: up to 60 s until the files hold N lines together.
wait_lines() {
  local n=${*: -1} files=("${@:1:$#-1}") got=0
  for _ in $(seq 1 600); do
    # (A member's file may not exist yet: not a failure, nor a silent exit.)
    got=$({ cat "${files[@]}" 2>/dev/null || true; } | wc -l)
    ((got >= n)) && return 0
    sleep 0.1
  done
  fail "expected $n lines in ${files[*]}, got $got"
}

# --- resume: a second run reads only what the first did not ----------------------
produce -t t --create --partitions 4 </dev/null
seq 1 100 | awk '{print "k"$1"\tv"$1}' | produce -t t -K '\t'
run "$BIN/mq-consume" -t t -G g1 -e
expect_rc 0 "first run"
[[ $(wc -l <"$WORK/out") == 100 ]] || fail "first run: $(wc -l <"$WORK/out") lines"
seq 101 130 | awk '{print "k"$1"\tv"$1}' | produce -t t -K '\t'
run "$BIN/mq-consume" -t t -G g1 -e
expect_rc 0 "second run"
[[ $(sort "$WORK/out" | tr '\n' ' ') == "$(seq 101 130 | sed 's/^/v/' | sort | tr '\n' ' ')" ]] ||
  fail "second run printed: $(tr '\n' ' ' <"$WORK/out")"
run "$BIN/mq-inspect" -J "$MQ_DIR/groups/g1/offsets"
expect_rc 0 "inspect offsets"
total=$(jq -s '[.[] | select(.type == "group_offset") | .offset] | add' "$WORK/out")
[[ $total == 130 ]] || fail "committed offsets add up to $total, not 130"

# --reset latest: a new group starts at the end.
run "$BIN/mq-consume" -t t -G g2 --reset latest -e
expect_rc 0 "reset latest"
[[ ! -s "$WORK/out" ]] || fail "--reset latest printed $(wc -l <"$WORK/out") lines"
echo 'knew	vnew' | produce -t t -K '\t'
run "$BIN/mq-consume" -t t -G g2 -e
[[ $(cat "$WORK/out") == vnew ]] || fail "--reset latest then a message: $(cat "$WORK/out")"

# --- a work queue: three members share 12 partitions ------------------------------
produce -t q --create --partitions 12 </dev/null
for m in a b c; do
  "$C" -t q -G work --member-id "$m" -f '%p %o %s\n' >"$WORK/q.$m" 2>"$WORK/q.$m.err" &
  PIDS+=($!)
  eval "pid_$m=$!"
done
# wait_owners GROUP TOPIC MEMBERS: up to 60 s until every partition of TOPIC
# is owned, MEMBERS members own them, and the split is balanced (counts
# differ by at most one), per mq-consume --describe -J. An owner's name in
# a lock file can lag a takeover for an instant: balance is what shows that
# every member has seen the same membership. A member just started may not
# have created the group yet (--describe: exit 66): that is one more look,
# not the end of the test (set -e, pipefail).
wait_owners() {
  local counts=""
  for _ in $(seq 1 600); do
    # A group that no member has created yet is 66; any other failure is
    # said (a failing command substitution would end the test in silence
    # under set -e).
    local drc=0
    "$C" --describe -G "$1" -t "$2" -J >"$WORK/describe.out" 2>"$WORK/describe.err" || drc=$?
    if ((drc == 66)) && grep -q "no group" "$WORK/describe.err"; then
      sleep 0.1
      continue
    fi
    ((drc == 0)) || fail "group $1: --describe -t $2 exited $drc: $(cat "$WORK/describe.err")"
    counts=$(jq -r 'select(.type == "partition") | .consumer_id // "-"' "$WORK/describe.out" |
      sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')
    if [[ $counts != *"-="* ]] && awk -v want="$3" '{
         n = split($0, kv, " "); if (n != want) exit 1
         for (i = 1; i <= n; i++) { split(kv[i], p, "="); c = p[2] + 0
           if (i == 1 || c < lo) lo = c; if (i == 1 || c > hi) hi = c }
         exit (hi - lo > 1) }' <<<"$counts"; then
      return 0
    fi
    sleep 0.1
  done
  fail "group $1: partitions of $2 not settled on $3 balanced owners: $counts"
}
wait_owners work q 3
seq 1 3000 | awk '{print "k"$1"\tv"$1}' | produce -t q -K '\t'
wait_lines "$WORK"/q.{a,b,c} 3000
sleep 0.5
cat "$WORK"/q.{a,b,c} | awk '{print $3}' | sort >"$WORK/q.all"
[[ $(wc -l <"$WORK/q.all") == 3000 ]] || fail "work queue: $(wc -l <"$WORK/q.all") deliveries for 3000"
[[ $(sort -u "$WORK/q.all" | wc -l) == 3000 ]] || fail "work queue: duplicates"
for m in a b c; do
  n=$(awk '{print $1}' "$WORK/q.$m" | sort -u | wc -l)
  [[ $n == 4 ]] || fail "member $m read $n partitions, not 4 of 12"
done
overlap=$(for m in a b c; do awk '{print $1}' "$WORK/q.$m" | sort -u; done | sort | uniq -d)
[[ -z $overlap ]] || fail "partitions read by two members: $overlap"

# SIGKILL one member: the others take its partitions and read what comes next.
kill -KILL "$pid_b"
wait "$pid_b" 2>/dev/null || true
seq 3001 3600 | awk '{print "k"$1"\tv"$1}' | produce -t q -K '\t'
new_after_kill() { cat "$@" | awk '{n = substr($3, 2) + 0} n > 3000'; }
for _ in $(seq 1 600); do
  got=$(new_after_kill "$WORK"/q.{a,b,c} | wc -l)
  ((got >= 600)) && break
  sleep 0.1
done
((got == 600)) || fail "after a member was killed: $got of 600 new messages consumed"
[[ $(new_after_kill "$WORK"/q.{a,b,c} | awk '{print $3}' | sort -u | wc -l) == 600 ]] ||
  fail "after a member was killed: duplicates"
for m in a c; do
  n=$(new_after_kill "$WORK/q.$m" | awk '{print $1}' | sort -u | wc -l)
  [[ $n == 6 ]] || fail "after the kill member $m reads $n partitions, not 6"
done
kill "$pid_a" "$pid_c"
wait "$pid_a" "$pid_c" 2>/dev/null || true
run "$BIN/mq-inspect" -J "$MQ_DIR/groups/work/offsets"
total=$(jq -s '[.[] | select(.type == "group_offset") | .offset] | add' "$WORK/out")
[[ $total == 3600 ]] || fail "work queue: committed offsets add up to $total, not 3600"

# --- rebalancing while producing: 3 members, then 5, then 2 (SIGTERM) -------------
# Without kills nothing may repeat: a member commits a partition before it
# lets go, and the next owner starts there.
produce -t r --create --partitions 12 </dev/null
start_member() {
  "$C" -t r -G rb --member-id "$1" -f '%p %o\n' >"$WORK/r.$1" 2>"$WORK/r.$1.err" &
  eval "rpid_$1=$!"
  PIDS+=($!)
}
feed() { seq "$1" "$2" | awk '{print "k"$1"\tv"$1}' | produce -t r -K '\t'; }
for m in m1 m2 m3; do start_member "$m"; done
wait_owners rb r 3
feed 1 2000
for m in m4 m5; do start_member "$m"; done
feed 2001 4000
wait_owners rb r 5
feed 4001 6000
kill -TERM "$rpid_m1" "$rpid_m2" "$rpid_m3"
wait "$rpid_m1" "$rpid_m2" "$rpid_m3" 2>/dev/null || true
feed 6001 8000
wait_owners rb r 2
wait_lines "$WORK"/r.m{1,2,3,4,5} 8000
sleep 0.5
cat "$WORK"/r.m{1,2,3,4,5} | sort >"$WORK/r.all"
[[ $(wc -l <"$WORK/r.all") == 8000 ]] || fail "rebalancing: $(wc -l <"$WORK/r.all") deliveries of 8000 messages"
[[ $(sort -u "$WORK/r.all" | wc -l) == 8000 ]] || fail "rebalancing: messages delivered twice"
for m in m1 m2 m3 m4 m5; do
  # Within one member, each partition's offsets only go up.
  awk '{ if (($1 in last) && $2 <= last[$1]) { print "partition " $1 ": " $2 " after " last[$1]; exit 1 } last[$1] = $2 }' \
    "$WORK/r.$m" || fail "rebalancing: member $m went back in a partition"
done
kill "$rpid_m4" "$rpid_m5"
wait "$rpid_m4" "$rpid_m5" 2>/dev/null || true

# --- a partition taken over starts at its owner's last commit ---------------------
# The owner a is held up writing to a full pipe (its reader sleeps 1 s), its
# 40,000 messages printed and not yet committed, when b joins. b waits 3 s
# before taking its partition (MQ_TEST_PAUSE, mq(7)); meanwhile a's write
# completes, and a commits, sees b, commits again and lets the partition go.
# b must start where a's last commit says, read once it holds the partition,
# not from what the group held when b joined (nothing: everything again).
produce -t to --create --partitions 2 </dev/null
seq 1 40000 | awk '{print "k"$1"\tv"$1}' | produce -t to -K '\t'
"$C" -t to -G tog --member-id a -f '%p %o\n' > >(sleep 1; cat >"$WORK/to.a") 2>"$WORK/to.a.err" &
to_a=$!
PIDS+=("$to_a")
wait_owners tog to 1
sleep 0.3
MQ_TEST_PAUSE=acquire:3000 "$C" -t to -G tog --member-id b -f '%p %o\n' >"$WORK/to.b" \
  2>"$WORK/to.b.err" &
to_b=$!
PIDS+=("$to_b")
sleep 4
# (Started from what it read before: it hands over again what a handed over,
# and its first commit is then below a's and refused, R31.)
kill -0 "$to_b" 2>/dev/null ||
  fail "takeover: the member that took over exited: $(cat "$WORK/to.b.err"); it printed $(wc -l <"$WORK/to.b")"
wait_owners tog to 2
sleep 0.5
kill "$to_a" "$to_b"
wait "$to_a" "$to_b" 2>/dev/null || true
wait_lines "$WORK/to.a" "$WORK/to.b" 40000
sleep 0.2
got=$(cat "$WORK/to.a" "$WORK/to.b" | wc -l)
((got == 40000)) || fail "takeover: $got deliveries of 40000 messages ($(wc -l <"$WORK/to.b") by the member that took over)"

# --- random SIGKILLs: at-least-once never skips, at-most-once never repeats ---------
# At-least-once commits every 1,000 messages (an fsync each: a run over the
# 600,000 takes seconds, so kills land mid-run) and so redelivers at most
# 2,000 per kill (the commit under way in the background may be lost too:
# two commit intervals); at-most-once commits before each batch, on 20,000.
produce -t big --create --partitions 3 </dev/null
seq 1 600000 | awk '{print "k"$1"\tv"$1}' | produce -t big -K '\t'
produce -t k --create --partitions 3 </dev/null
seq 1 20000 | awk '{print "k"$1"\tv"$1}' | produce -t k -K '\t'
# kill_loop TOPIC GROUP FLAGS...: runs a member, SIGKILLed after a random
# 0-250 ms, KILLS times, then once to the end; every run's output in
# $WORK/kill.GROUP.N (a file: what reached it was handed over).
kill_loop() {
  local topic=$1 group=$2
  shift 2
  for i in $(seq 1 "$KILLS"); do
    "$C" -t "$topic" -G "$group" -e -f '%p %o\n' --commit-interval 20 "$@" \
      >"$WORK/kill.$group.$i" 2>>"$WORK/kill.$group.err" &
    local pid=$!
    sleep "0.$(printf '%03d' $((RANDOM % 250)))"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  "$C" -t "$topic" -G "$group" -e -f '%p %o\n' "$@" >"$WORK/kill.$group.last" \
    2>>"$WORK/kill.$group.err" || fail "$group: the last run failed: $(cat "$WORK/kill.$group.err")"
}
# complete_lines FILE...: the newline-terminated lines of each file. A
# SIGKILL can cut a write to a file short (the kernel stops a write when a
# fatal signal is pending), so a killed run's output may end in a partial
# line: not handed over (nothing was committed for it), and it must not be
# glued to the next run's first line.
complete_lines() {
  local f
  for f in "$@"; do
    if [[ -n $(tail -c1 "$f") ]]; then sed '$d' "$f"; else cat "$f"; fi
  done
}
kill_loop big alo --commit-every 1000
complete_lines "$WORK"/kill.alo.[0-9]* "$WORK/kill.alo.last" | grep -E '^[0-9]+ [0-9]+$' | sort >"$WORK/alo.all"
missing=$(comm -23 <("$BIN/mq-consume" -t big -e -f '%p %o\n' | sort) <(sort -u "$WORK/alo.all") | wc -l)
dups=$(( $(wc -l <"$WORK/alo.all") - $(sort -u "$WORK/alo.all" | wc -l) ))
echo "at-least-once: $KILLS kills, $missing skipped, $dups redelivered (within two commit intervals)"
((missing == 0)) || fail "at-least-once skipped $missing messages (seed $SEED)"
((dups <= KILLS * 2000)) || fail "at-least-once redelivered $dups: more than 2,000 per kill, two commit intervals (seed $SEED)"

kill_loop k amo --at-most-once
complete_lines "$WORK"/kill.amo.[0-9]* "$WORK/kill.amo.last" | grep -E '^[0-9]+ [0-9]+$' | sort >"$WORK/amo.all"
dups=$(( $(wc -l <"$WORK/amo.all") - $(sort -u "$WORK/amo.all" | wc -l) ))
lost=$(comm -23 <("$BIN/mq-consume" -t k -e -f '%p %o\n' | sort) <(sort -u "$WORK/amo.all") | wc -l)
echo "at-most-once: $KILLS kills, $dups repeated, $lost lost (committed before output)"
((dups == 0)) || fail "at-most-once delivered $dups messages twice (seed $SEED)"

# --- --ack-fd: only acknowledged offsets are committed ------------------------------
produce -t a --create </dev/null
seq 1 10 | produce -t a
mkfifo "$WORK/acks"
# The worker acknowledges the first 4 messages only.
"$C" -t a -G acked -e -f '%p %o\n' --ack-fd 3 3<"$WORK/acks" |
  awk 'NR <= 4 {print; fflush()}' >"$WORK/acks"
run "$BIN/mq-consume" -t a -G acked -e
[[ $(tr '\n' ' ' <"$WORK/out") == "5 6 7 8 9 10 " ]] || fail "--ack-fd: the rerun printed $(tr '\n' ' ' <"$WORK/out")"

# --- a committed offset past the log end (the log was truncated under the group) -------
# Said on stderr; the member starts at the end, and its next commit lowers
# the offset there (R31's exception), so that what is appended afterwards
# is read, not skipped until the log passes the old offset again. In both
# commit modes.
committed_tr() {
  "$C" --describe -G "$1" -t tr -J | jq -r 'select(.type == "partition") | .current_offset'
}
produce -t tr --create </dev/null
seq 1 10 | produce -t tr
for mode in alo amo; do
  flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  run "$BIN/mq-consume" -t tr -G "tr$mode" -e "${flags[@]}"
  expect_rc 0 "truncation ($mode): first run"
  [[ $(committed_tr "tr$mode") == 10 ]] || fail "truncation ($mode): committed $(committed_tr "tr$mode")"
done
rm "$MQ_DIR"/tr-0/*  # a new log in its place, ending at 3
seq 11 13 | produce -t tr
for mode in alo amo; do
  flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  run "$BIN/mq-consume" -t tr -G "tr$mode" -e "${flags[@]}"
  expect_rc 0 "truncation ($mode): the run after it"
  grep -q "group tr$mode: partition 0: committed offset 10 is past the log end 3 (the log was truncated): starting at the end"     "$WORK/err" || fail "truncation ($mode): not said: $(cat "$WORK/err")"
  [[ ! -s "$WORK/out" ]] || fail "truncation ($mode): printed $(tr '\n' ' ' <"$WORK/out")"
  [[ $(committed_tr "tr$mode") == 3 ]] ||
    fail "truncation ($mode): committed $(committed_tr "tr$mode"), not lowered to the log end 3"
done
seq 14 15 | produce -t tr
for mode in alo amo; do
  flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  run "$BIN/mq-consume" -t tr -G "tr$mode" -e "${flags[@]}"
  expect_rc 0 "truncation ($mode): appended after it"
  [[ $(tr '\n' ' ' <"$WORK/out") == "14 15 " ]] ||
    fail "truncation ($mode): appended after the truncation, printed: $(tr '\n' ' ' <"$WORK/out")"
  [[ ! -s "$WORK/err" ]] || fail "truncation ($mode): said again: $(cat "$WORK/err")"
  [[ $(committed_tr "tr$mode") == 5 ]] || fail "truncation ($mode): committed $(committed_tr "tr$mode")"
done

# --- bad input ----------------------------------------------------------------------
run "$BIN/mq-consume" -t t -G 'bad/name'
expect_rc 64 "invalid group name"
grep -q "group" "$WORK/err" || fail "invalid group name: $(cat "$WORK/err")"
run "$BIN/mq-consume" -t t -G g1 -o 5
expect_rc 64 "-G with -o N"
run "$BIN/mq-consume" -t t -G g1 -p 0
expect_rc 64 "-G with -p"
run "$BIN/mq-consume" -t t --member-id x
expect_rc 64 "--member-id without -G"
run "$BIN/mq-consume" -t t -G g1 --ack-fd 9
expect_rc 64 "--ack-fd of a closed descriptor"
run "$BIN/mq-consume" -t t -G g1 -o stored -e
expect_rc 0 "-o stored with -G"
run "$BIN/mq-consume" -t t -o stored
expect_rc 64 "-o stored without -G"

# A live member's id is refused (75).
"$C" -t t -G busy --member-id m1 >/dev/null 2>&1 &
PIDS+=($!)
busy_pid=$!
for _ in $(seq 1 100); do [[ -e "$MQ_DIR/groups/busy/members/m1.lock" ]] && break; sleep 0.05; done
sleep 0.3
run "$BIN/mq-consume" -t t -G busy --member-id m1 -e
expect_rc 75 "a live member's id"
grep -q "in use" "$WORK/err" || fail "member id in use: $(cat "$WORK/err")"
kill "$busy_pid"

# A corrupt offsets file stops the member (65, naming the rule), never resets.
# Both copies of the file written in place (R86) damaged: one damaged copy
# reads as a write cut short, and the other copy is the state.
cp "$MQ_DIR/groups/g1/offsets" "$WORK/offsets.good"
slot=$(( $(stat -c %s "$MQ_DIR/groups/g1/offsets") / 2 ))
flip_byte "$MQ_DIR/groups/g1/offsets" 20
flip_byte "$MQ_DIR/groups/g1/offsets" $((slot + 20))
run "$BIN/mq-consume" -t t -G g1 -e
expect_rc 65 "corrupt offsets file"
grep -q "R86" "$WORK/err" || fail "corrupt offsets: $(cat "$WORK/err")"
[[ ! -s "$WORK/out" ]] || fail "corrupt offsets: printed messages"
truncate -s 30 "$MQ_DIR/groups/g1/offsets"
run "$BIN/mq-consume" -t t -G g1 -e
expect_rc 65 "truncated offsets file"
echo "ok"
