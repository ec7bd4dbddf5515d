#!/usr/bin/env bash
# A group member of several topics or of a pattern (format-spec/group.md
# R64) with --exec, --dlq and --to-topic: each handler gets its message's own
# topic (MQ_TOPIC), every message of every topic is handled once, at least
# once across SIGKILLs of members, in per-partition order; dead letters of
# every topic go to the one dead-letter topic, told apart by mq.dlq.topic,
# each once across a crash between the append and the commit; a pipeline
# reading two topics (one of them read alone by earlier runs, under the
# same producer ids) appends each source message's outputs exactly once
# across SIGKILLs; the readers of the topics a pattern adds later share the
# open-file budget with the others; a topic removed from the directory
# leaves the members' subscriptions. Seeded: MQ_TEST_SEED repeats a run.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
SEED=${MQ_TEST_SEED:-$RANDOM}
echo "consume_group_exec_topics: seed $SEED (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED
CHECK="$SRC/tests/cli/lib/pipeline_check.py"

# Topics a (3 partitions) and b (2), 60 keyed messages each; every value
# names its topic.
produce -t a --create --partitions 3 </dev/null
produce -t b --create --partitions 2 </dev/null
for t in a b; do seq 1 60 | awk -v t="$t" '{print "k"$1"\t"t"-"$1}' | produce -t "$t" -K '\t'; done
"$C" -t a -e -f 'a/%p/%o\n' >"$WORK/want"
"$C" -t b -e -f 'b/%p/%o\n' >>"$WORK/want"
sort -o "$WORK/want" "$WORK/want"
[[ $(wc -l <"$WORK/want") == 120 ]] || fail "the source holds $(wc -l <"$WORK/want") messages"

# The handler logs "PID TOPIC/PARTITION/OFFSET VALUE" (PID: its member).
# shellcheck disable=SC2016
LOGIT='v=$(cat); echo "$PPID $MQ_TOPIC/$MQ_PARTITION/$MQ_OFFSET $v" >>"$LOG"'
# checks LOG WHAT: each line's value is of its topic, and each member saw
# each partition's messages in offset order.
check_log() {
  awk '{split($2, w, "/"); if (index($3, w[1] "-") != 1) { print "line " NR ": " $0; exit 1 }}' "$1" ||
    fail "$2: a handler got a message of another topic in MQ_TOPIC (seed $SEED)"
  awk '{split($2, w, "/"); k = $1 " " w[1] "/" w[2];
        if (k in last && w[3] + 0 <= last[k]) { print "line " NR ": " $0 " after " last[k]; exit 1 }
        last[k] = w[3] + 0}' "$1" || fail "$2: a member handled a partition out of order (seed $SEED)"
}
handled() { awk '{print $2}' "$1" | sort; }

# --- -t a -t b --exec: every message once, with its own topic ------------------------
export LOG="$WORK/two.log"
: >"$LOG"
run "$C" -G two -t a -t b -e --exec sh -c "$LOGIT"
expect_rc 0 "--exec with two topics"
check_log "$LOG" "two topics"
diff <(handled "$LOG") "$WORK/want" >"$WORK/diff" ||
  fail "--exec with two topics: not every message once: $(head "$WORK/diff")"

# --- -t '^p\.' --exec: the topics a pattern matches, also one created later ----------
produce -t p.x --create --partitions 2 </dev/null
seq 1 40 | awk '{print "p.x-"$1}' | produce -t p.x
export LOG="$WORK/pattern.log"
: >"$LOG"
"$C" -G pat -t '^p\.' -v --parallel 2 --exec sh -c "$LOGIT" 2>"$WORK/pattern.err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 300); do [[ $(wc -l <"$LOG") -ge 40 ]] && break; sleep 0.1; done
produce -t p.y --create --partitions 3 </dev/null
seq 1 60 | awk '{print "p.y-"$1}' | produce -t p.y
for _ in $(seq 1 300); do [[ $(wc -l <"$LOG") -ge 100 ]] && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid" || true
check_log "$LOG" "a pattern"
{ "$C" -t p.x -e -f 'p.x/%p/%o\n'; "$C" -t p.y -e -f 'p.y/%p/%o\n'; } | sort >"$WORK/want.p"
diff <(handled "$LOG") "$WORK/want.p" >"$WORK/diff" ||
  fail "--exec with a pattern: not every message of p.x and p.y once: $(head "$WORK/diff") ($(cat "$WORK/pattern.err"))"

# --- the open-file budget: topics a pattern adds later share it ----------------------
# Under ulimit -n 64 a member following '^q\.' has room for about ten
# readers: q.0 (16 partitions) takes them all, and q.1 to q.3, created
# later, must share them, not get as many again each (which ran out of
# descriptors: exit 74).
produce -t q.0 --create --partitions 16 </dev/null
# 48 keyed messages per topic: in most of its partitions.
fill() { seq 1 48 | awk -v t="$1" '{print "k"$1"\t"t"-"$1}' | produce -t "$1" -K '\t'; }
fill q.0
(
  ulimit -n 64
  exec "$C" -G bud -t '^q\.' -f '%t %s\n'
) >"$WORK/bud.out" 2>"$WORK/bud.err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 300); do [[ $(wc -l <"$WORK/bud.out") -ge 48 ]] && break; sleep 0.1; done
for t in 1 2 3; do
  produce -t "q.$t" --create --partitions 16 </dev/null
  fill "q.$t"
done
for _ in $(seq 1 300); do
  [[ $(wc -l <"$WORK/bud.out") -ge 192 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null ||
  fail "a pattern's later topics under ulimit -n 64: the member died: $(cat "$WORK/bud.err")"
[[ $(sort -u "$WORK/bud.out" | wc -l) == 192 ]] ||
  fail "a pattern's later topics under ulimit -n 64: read $(wc -l <"$WORK/bud.out") of 192 messages: $(cat "$WORK/bud.err")"
kill -TERM "$pid"
wait "$pid" || true

# --- a topic removed from the directory leaves the members' subscriptions ----------------
produce -t r.a --create --partitions 2 </dev/null
produce -t r.b --create --partitions 2 </dev/null
export LOG="$WORK/removed.log"
: >"$LOG"
rpids=()
for m in x y; do
  "$C" -G rm --member-id "$m" -t '^r\.' -v --exec sh -c "$LOGIT" 2>"$WORK/rm.$m.err" &
  rpids+=($!)
  PIDS+=($!)
done
# members_topics: "ID:TOPIC,TOPIC ..." of the group's live members.
members_topics() {
  "$C" --describe -G rm -J | jq -r 'select(.type == "summary") | .members[] | "\(.consumer_id):\(.topics | join(","))"' |
    sort | tr '\n' ' '
}
for _ in $(seq 1 300); do [[ $(members_topics) == "x:r.a,r.b y:r.a,r.b " ]] && break; sleep 0.1; done
[[ $(members_topics) == "x:r.a,r.b y:r.a,r.b " ]] || fail "members of ^r.: $(members_topics)"
rm -rf "$MQ_DIR/topics/r.b.conf" "$MQ_DIR"/r.b-*
for _ in $(seq 1 300); do [[ $(members_topics) == "x:r.a y:r.a " ]] && break; sleep 0.1; done
[[ $(members_topics) == "x:r.a y:r.a " ]] ||
  fail "a removed topic stays in the members' subscriptions: $(members_topics) ($(cat "$WORK/rm.x.err"))"
# The members go on with the topics left.
seq 1 20 | awk '{print "r.a-"$1}' | produce -t r.a
for _ in $(seq 1 300); do [[ $(wc -l <"$LOG") -ge 20 ]] && break; sleep 0.1; done
for pid in "${rpids[@]}"; do
  kill -0 "$pid" 2>/dev/null || fail "a member stopped after a topic was removed: $(cat "$WORK"/rm.*.err)"
  kill -TERM "$pid"
  wait "$pid" || true
done
check_log "$LOG" "a removed topic"
diff <(handled "$LOG") <("$C" -t r.a -e -f 'r.a/%p/%o\n' | sort) >"$WORK/diff" ||
  fail "after a topic was removed: not every message of r.a once: $(head "$WORK/diff")"

# --- at least once across SIGKILLs of two members of a and b -------------------------
export LOG="$WORK/kills.log"
: >"$LOG"
for i in $(seq 1 6); do
  par=()
  ((i % 2 == 0)) && par=(--parallel 3)
  "$C" -G kill -t a -t b -e -q --commit-every 5 "${par[@]}" --exec sh -c "$LOGIT" 2>>"$WORK/kills.err" &
  p1=$!
  "$C" -G kill -t b -t a -e -q --commit-every 5 --exec sh -c "$LOGIT" 2>>"$WORK/kills.err" &
  p2=$!
  sleep "0.$(printf '%03d' $((RANDOM % 500)))"
  kill -KILL "$p1" 2>/dev/null || true
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  kill -KILL "$p2" 2>/dev/null || true
  wait "$p1" "$p2" 2>/dev/null || true
done
run "$C" -G kill -t a -t b -e --exec sh -c "$LOGIT"
expect_rc 0 "--exec with two topics: the run after the kills"
check_log "$LOG" "two topics across kills"
missing=$(comm -23 "$WORK/want" <(handled "$LOG" | sort -u) | wc -l)
dups=$(($(wc -l <"$LOG") - $(handled "$LOG" | sort -u | wc -l)))
echo "two topics, 12 SIGKILLs: $missing messages never handled, $dups handled twice"
((missing == 0)) || fail "--exec with two topics: $missing messages never handled across kills (seed $SEED)"
run "$C" --describe -G kill -J
for t in a b; do
  jq -e -s --arg t "$t" '[.[] | select(.type == "partition" and .topic == $t and .lag == 0)] | length > 0' \
    "$WORK/out" >/dev/null || fail "group kill: topic $t not committed to its end: $(cat "$WORK/out")"
done
[[ $(jq -s '[.[] | select(.type == "partition" and .lag != 0)] | length' "$WORK/out") == 0 ]] ||
  fail "group kill: lag left: $(cat "$WORK/out")"

# --- --dlq with two topics -------------------------------------------------------------
# Values ending in 7 fail. The first run dies (MQ_TEST_CRASH, mq(7)) right
# after its first dead letter is appended, before the commit that counts it.
# shellcheck disable=SC2016
FAIL7='v=$(cat); case "$v" in *7) exit 1 ;; esac'
MQ_TEST_CRASH=dlq-appended "$C" -G dl -t a -t b -e -q --dlq dead --max-attempts 1 --exec sh -c "$FAIL7" &&
  fail "the crashing run did not crash"
run "$C" -G dl -t a -t b -e --dlq dead --max-attempts 1 --exec sh -c "$FAIL7"
expect_rc 0 "--dlq with two topics"
"$C" -t dead -e -J |
  jq -r '[.headers[] | {(.key): .value}] | add | "\(."mq.dlq.topic")/\(."mq.dlq.partition")/\(."mq.dlq.offset") \(.["mq.dlq.group"])"' |
  sort >"$WORK/dead.got"
"$C" -t dead -e -J | jq -r '(.headers[] | select(.key == "mq.dlq.topic") | .value) + " " + .payload' |
  awk '{if (index($2, $1 "-") != 1) { print; exit 1 }}' ||
  fail "--dlq: a dead letter names another topic than its message's"
{ "$C" -t a -e -f 'a/%p/%o %s\n'; "$C" -t b -e -f 'b/%p/%o %s\n'; } | awk '$2 ~ /7$/ {print $1" dl"}' |
  sort >"$WORK/dead.want"
[[ $(wc -l <"$WORK/dead.want") == 12 ]] || fail "expected 12 failing messages, $(wc -l <"$WORK/dead.want")"
diff "$WORK/dead.got" "$WORK/dead.want" >"$WORK/diff" ||
  fail "--dlq with two topics: the dead letters are not each failing message of a and b once: $(head "$WORK/diff")"
run "$C" --describe -G dl -J
[[ $(jq -s -r '.[] | select(.type == "summary") | .dead_letters' "$WORK/out") == 12 ]] ||
  fail "--dlq with two topics: the group counts $(jq -s -r '.[] | select(.type == "summary") | .dead_letters' "$WORK/out") dead letters, not 12"

# --- --to-topic from two topics, exactly once across SIGKILLs ---------------------------
# The transform copies the value; values ending in 9 fail (dead letters).
# shellcheck disable=SC2016
T=(sh -c 'v=$(cat); case "$v" in *9) exit 3 ;; esac; printf "%s\n" "$v"')
produce -t out --create --partitions 2 </dev/null
PIPE=(--to-topic out --dlq pdead --max-attempts 1)
for i in $(seq 1 8); do
  # The first runs read a alone, as a pipeline of one topic: the runs of
  # both go on under the producer ids those appended with.
  topics=(-t a)
  ((i > 2)) && topics=(-t a -t b)
  ((i > 5)) && topics=(-t '^[ab]$')
  "$C" -G pl "${topics[@]}" -e -q "${PIPE[@]}" --exec "${T[@]}" 2>>"$WORK/pl.err" &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
run "$C" -G pl -t a -t b -e "${PIPE[@]}" --exec "${T[@]}"
expect_rc 0 "--to-topic from two topics: the run after the kills"
{ "$C" -t a -e -J; "$C" -t b -e -J; } >"$WORK/in.json"
"$C" -t out -e -J >"$WORK/out.json"
"$C" -t pdead -e -J >"$WORK/dead.json"
# The checker's "cat" rule: every value copied; those ending in 9 must be
# dead letters instead, so they are taken out of the source first and
# checked apart.
jq -c 'select(.payload | test("9$") | not)' "$WORK/in.json" >"$WORK/in.ok.json"
jq -c 'select(.payload | test("9$"))' "$WORK/in.json" >"$WORK/in.dead.json"
"$PY" "$CHECK" "$WORK/in.ok.json" "$WORK/out.json" /dev/null 2 cat ||
  fail "--to-topic from two topics: the output is not each source message's once (seed $SEED)"
want_dead=$(jq -r '"\(.topic)/\(.partition)/\(.offset)"' "$WORK/in.dead.json" | sort)
got_dead=$(jq -r '[.headers[] | {(.key): .value}] | add | "\(."mq.dlq.topic")/\(."mq.dlq.partition")/\(."mq.dlq.offset")"' "$WORK/dead.json" | sort)
[[ "$want_dead" == "$got_dead" ]] ||
  fail "--to-topic from two topics: dead letters differ: $(diff <(echo "$want_dead") <(echo "$got_dead") | head)"
# Each source partition appended under the producer id named for it (E1),
# a's the names of a pipeline of a alone: one id per source partition.
ls "$MQ_DIR/producers" | sed -n 's/^\(pipeline\..*\)\.id$/\1/p' | sort >"$WORK/ids"
printf 'pipeline.2.pl.1.%s.3.out.%s\n' a 0 a 1 a 2 b 0 b 1 | sort >"$WORK/ids.want"
diff "$WORK/ids" "$WORK/ids.want" >"$WORK/diff" ||
  fail "--to-topic from two topics: producer ids are not one per source partition, named as a pipeline of one topic names them: $(cat "$WORK/diff")"
echo "pipeline from two topics: $(wc -l <"$WORK/out.json") outputs, $(wc -l <"$WORK/dead.json") dead letters"
