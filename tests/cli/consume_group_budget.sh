#!/usr/bin/env bash
# A member's topics share its open-file budget, one reader a topic at least
# (mq-consume(1), OPEN FILES): more topics than the budget has readers are
# refused at the start (exit 69, saying how many fit), never run out of
# descriptors; a pattern's later match that does not fit is left out of
# the member's topics with a warning, and the member goes on with the
# others. A pipeline's output writers follow the same budget as a pattern
# adds source topics.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
names=()
for i in $(seq -w 1 14); do
  "$P" -q -t "q.$i" --create --partitions 1 </dev/null
  echo "m$i" | "$P" -q -t "q.$i"
  names+=(-t "q.$i")
done

# --- named topics past the budget: refused, saying so ------------------------------
run bash -c 'ulimit -n 40 && exec "$@"' - "$C" -G g "${names[@]}" -e
expect_rc 69 "14 topics under ulimit -n 40"
grep -qE 'group g: 14 topics to read, but the open-file limit leaves room for [0-9]+ readers, one a topic at least: raise ulimit -n' \
  "$WORK/err" || fail "the refusal: $(cat "$WORK/err")"
[[ -s $WORK/out ]] && fail "read before refusing: $(cat "$WORK/out")"
# Within the budget the same member reads them all.
run "$C" -G g "${names[@]}" -e -f '%t %s\n'
expect_rc 0 "14 topics without a low limit"
[[ $(sort -u "$WORK/out" | wc -l) == 14 ]] || fail "read $(wc -l <"$WORK/out") of 14: $(cat "$WORK/err")"

# --- a pattern's later matches past the budget: left out, with a warning -----------
"$P" -q -t r.00 --create --partitions 1 </dev/null
(
  ulimit -n 40
  exec "$C" -G h -t '^r\.' -f '%t %s\n' -v
) >"$WORK/r.out" 2>"$WORK/r.err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 300); do grep -q 'is assigned' "$WORK/r.err" && break; sleep 0.1; done
for i in $(seq -w 1 13); do
  "$P" -q -t "r.$i" --create --partitions 1 </dev/null
  echo "r$i" | "$P" -q -t "r.$i"
done
# Until the member has met all 13 new topics (-v says "matches, read from now
# on" or warns "matches, but ..."), then counted on one copy of its stderr.
for _ in $(seq 1 300); do
  [[ $(grep -o 'topic r\.[0-9]* matches' "$WORK/r.err" | sort -u | wc -l) -ge 13 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null || fail "the member died as topics were added: $(cat "$WORK/r.err")"
cp "$WORK/r.err" "$WORK/r.seen"
[[ $(grep -o 'topic r\.[0-9]* matches' "$WORK/r.seen" | sort -u | wc -l) -ge 13 ]] ||
  fail "the member did not meet the 13 topics added: $(cat "$WORK/r.seen")"
grep -qE 'group h: topic r\.[0-9]+ matches, but the open-file limit leaves this member room for [0-9]+ readers, one a topic, and it reads [0-9]+ topics: not read by this member' \
  "$WORK/r.seen" || fail "no warning: $(cat "$WORK/r.seen")"
left=$(grep -c 'but the open-file limit leaves this member room' "$WORK/r.seen")
# Each topic left out is warned about once; the others are read.
[[ $left == $(grep -o 'topic r\.[0-9]* matches, but' "$WORK/r.seen" | sort -u | wc -l) ]] ||
  fail "a topic warned about twice: $(cat "$WORK/r.seen")"
want=$((13 - left))
for _ in $(seq 1 300); do [[ $(wc -l <"$WORK/r.out") -ge $want ]] && break; sleep 0.1; done
[[ $(sort -u "$WORK/r.out" | wc -l) == "$want" ]] ||
  fail "read $(wc -l <"$WORK/r.out") messages, want $want (13 less the $left left out): $(cat "$WORK/r.err")"
run "$C" -G h --describe -J
topics=$(jq -r 'select(.type == "summary") | .members[0].topics | length' "$WORK/out")
[[ $topics == $((14 - left)) ]] || fail "the member's topics: $topics, want $((14 - left)): $(cat "$WORK/out")"
kill -TERM "$pid"
wait "$pid" || true
echo "consume_group_budget: $left of 14 topics left out under ulimit -n 40"

# --- a pipeline's writers follow the shares as a pattern adds topics ---------------
# Under ulimit -n 200 a member reading one source partition keeps about 20
# writers of out open. Once 13 topics are added, each read with a reader of
# its own (those that fit), the writers' limit is lowered with the shares
# (mq-consume(1), OPEN FILES): fewer writers are open at once, and every
# output is still appended exactly once.
"$P" -q -t out --create --partitions 200 </dev/null
"$P" -q -t s.00 --create --partitions 1 </dev/null
seq 1 400 | awk '{print "k"$1"\t"$1}' | "$P" -q -t s.00 -K '\t'
# caught_up: group w has committed the end of every topic it reads.
caught_up() {
  "$C" --describe -G w -J 2>/dev/null | jq -e -s '.[-1].total_lag == 0 and ([.[] | select(.type == "partition")] | length) > 0' >/dev/null
}
# writers: how many writers of out the member has open now.
writers() { ls -l "/proc/$pid/fd" 2>/dev/null | grep -c '/out-[0-9]*/writer\.lock$' || true; }
# watch_writers: the most writers open at once until the member caught up.
watch_writers() {
  local most=0 n
  for _ in $(seq 1 3000); do
    n=$(writers)
    ((n > most)) && most=$n
    caught_up && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  echo "$most"
}
(
  ulimit -n 200
  exec "$C" -G w -t '^s\.' --to-topic out -K '\t' -v --exec sh -c 'v=$(cat); printf "k%s\t%s\n" "$v" "$v"'
) >"$WORK/w.out" 2>"$WORK/w.err" &
pid=$!
PIDS+=("$pid")
before=$(watch_writers)
caught_up || fail "the pipeline's first topic: not caught up: $(cat "$WORK/w.err")"
# The topics first, empty; their messages once the member reads them.
for i in $(seq -w 1 13); do "$P" -q -t "s.$i" --create --partitions 1 </dev/null; done
for _ in $(seq 1 600); do
  [[ $(grep -o 'topic s\.[0-9]* matches' "$WORK/w.err" | sort -u | wc -l) -ge 13 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ $(grep -o 'topic s\.[0-9]* matches' "$WORK/w.err" | sort -u | wc -l) -ge 13 ]] ||
  fail "the member did not meet the 13 topics added: $(cat "$WORK/w.err")"
read_topics=$(sed -n 's/.*group w: topic \(s\.[0-9]*\) matches, read from now on.*/\1/p' "$WORK/w.err" | sort -u)
n=$(echo "$read_topics" | wc -l)
((n >= 3)) || fail "the pipeline reads $n of the 13 topics added: $(cat "$WORK/w.err")"
# The first message of one topic opens a writer, which closes the ones
# past the lowered limit; then the rest.
echo "k01.0	01.0" | "$P" -q -t s.01 -K '\t'
for _ in $(seq 1 600); do "$C" -t out -e -q | grep -qx '01.0' && break; sleep 0.1; done
for t in $read_topics; do
  seq 1 30 | awk -v t="${t#s.}" '{print "k"t"."$1"\t"t"."$1}' | "$P" -q -t "$t" -K '\t'
done
after=$(watch_writers)
kill -0 "$pid" 2>/dev/null || fail "the pipeline died as topics were added: $(cat "$WORK/w.err")"
caught_up || fail "the pipeline did not catch up: $(cat "$WORK/w.err")"
grep -qi 'too many open files' "$WORK/w.err" && fail "descriptors ran out: $(cat "$WORK/w.err")"
((after < before)) ||
  fail "at most $before writers open with one topic and $after with $((n + 1)): the limit did not follow the shares"
got=$("$C" -t out -e -q | sort)
expect=$({ seq 1 400; echo 01.0; for t in $read_topics; do seq 1 30 | sed "s/^/${t#s.}./"; done; } | sort)
[[ $got == "$expect" ]] || fail "outputs: $(comm -3 <(echo "$expect") <(echo "$got") | head) (stderr: $(cat "$WORK/w.err"))"
kill -TERM "$pid"
wait "$pid" || true
echo "consume_group_budget: a pipeline under ulimit -n 200 kept at most $before writers open reading 1 topic, $after reading $((n + 1)), and appended $(echo "$got" | wc -l) outputs exactly once"
