#!/usr/bin/env bash
# mq-consume --exec: the message environment and stdin, --batch's JSON
# Lines, retries, a poison message without a dead-letter topic (exit 123)
# and with one (the record and its mq.dlq.* headers), no duplicate dead
# letter after a rerun or after mq-consume is killed between the append and
# the end of its run, exec failures (126/127), usage errors, and SIGTERM
# killing the handler's process group.
source "$(dirname "$0")/lib/common.bash"
export MQ_DIR="$WORK/data"

# --- the message environment, stdin, and the handler's stdout --------------------------
printf '%s\n' \
  '{"key":"k1","payload":"one","ts":1700000000001,"headers":[{"key":"h","value":"x"}]}' \
  '{"key":null,"payload":"two","ts":1700000000002}' \
  '{"key_b64":"AP8=","payload":"three","ts":1700000000003}' |
  "$P" -q -t env --create -J
run "$C" -t env -e --exec sh -c \
  'printf "%s|%s|%s|%s|%s|%s|%s|%s|" "$MQ_TOPIC" "$MQ_PARTITION" "$MQ_OFFSET" "$MQ_MESSAGE_ID" \
     "$MQ_TIMESTAMP" "${MQ_KEY-unset}" "${MQ_KEY_B64-unset}" "$MQ_HEADERS"; cat; echo'
expect_rc 0 "--exec env"
cat >"$WORK/want" <<'EOF'
env|0|0|env/0/0|1700000000001|k1|unset|[{"key":"h","value":"x"}]|one
env|0|1|env/0/1|1700000000002|unset|unset|[]|two
env|0|2|env/0/2|1700000000003|unset|AP8=|[]|three
EOF
diff "$WORK/want" "$WORK/out" >&2 || fail "--exec: environment or stdin differ"

# --- --batch: JSON Lines of -J on stdin, first and last offsets ---------------------------
seq 1 5 | "$P" -q -t five --create
run "$C" -t five -e --batch 3 --exec sh -c 'echo "batch $MQ_OFFSET $MQ_LAST_OFFSET $MQ_COUNT $MQ_MESSAGE_ID"; cat'
expect_rc 0 "--batch"
"$C" -t five -e -J >"$WORK/json"
{ echo "batch 0 2 3 five/0/0"; sed -n 1,3p "$WORK/json"; echo "batch 3 4 2 five/0/3"; sed -n 4,5p "$WORK/json"; } >"$WORK/want"
diff "$WORK/want" "$WORK/out" >&2 || fail "--batch: stdin is not the -J lines, or wrong batches"

# --- --batch over partitions: each run holds consecutive messages of one partition ----------
seq 1 300 | awk '{print "k" $1 " " $1}' | "$P" -q -t parts --create --partitions 3 -K ' '
export RUNS="$WORK/runs"
run "$C" -t parts -e --batch 40 --exec sh -c \
  'jq -c "[.partition, .offset]" | tr "\n" " " | sed "s/^/$MQ_PARTITION $MQ_OFFSET $MQ_LAST_OFFSET $MQ_COUNT: /" >> "$RUNS"; echo >> "$RUNS"'
expect_rc 0 "--batch over partitions"
$PY - "$RUNS" <<'EOF2' || fail "--batch over partitions: $(cat "$RUNS")"
import json, sys
seen = {}
for line in open(sys.argv[1]):
    head, body = line.split(":", 1)
    p, first, last, count = map(int, head.split())
    msgs = [json.loads(x) for x in body.split()]
    assert 1 <= len(msgs) <= 40 and len(msgs) == count, line
    assert all(m[0] == p for m in msgs), line
    offs = [m[1] for m in msgs]
    assert offs == list(range(first, last + 1)), line
    assert offs[0] == seen.get(p, 0), line  # consecutive across runs too
    seen[p] = offs[-1] + 1
assert sum(seen.values()) == 300 and len(seen) == 3, seen
EOF2

# --- a follower hands a partial batch over once it has caught up ----------------------------
"$C" -t five --batch 1000 --exec sh -c 'cat > "$1.tmp" && mv "$1.tmp" "$1"' sh "$WORK/partial" \
  2>"$WORK/err" &
follower=$!
PIDS+=("$follower")
for _ in $(seq 1 6000); do [[ -e $WORK/partial ]] && break; sleep 0.01; done
[[ $(wc -l <"$WORK/partial" 2>/dev/null) == 5 ]] || fail "follower: partial batch not handed over"
kill -TERM "$follower"
wait "$follower" || true

# --- retries: fails twice, then succeeds; the message is handled once ---------------------
printf 'a\n' | "$P" -q -t retry --create
export COUNT="$WORK/count"
run "$C" -t retry -e --max-attempts 3 --retry-backoff 1 --exec sh -c \
  'n=$(cat "$COUNT" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$COUNT"; [ $n -ge 3 ] && cat'
expect_rc 0 "retries"
[[ $(cat "$COUNT") == 3 ]] || fail "retries: handler ran $(cat "$COUNT") times, want 3"
[[ $(cat "$WORK/out") == a ]] || fail "retries: output $(cat "$WORK/out")"
grep -q "topic retry partition 0 offset 0: handler exit status 1 (attempt 1 of 3)" "$WORK/err" ||
  fail "retries: no retry message: $(cat "$WORK/err")"
grep -q "attempt 2 of 3" "$WORK/err" || fail "retries: no second retry message"

# --- a poison message without --dlq: exit 123, naming it; later messages untouched ---------
printf 'a\nbad\nc\n' | "$P" -q -t poison --create
export SEEN="$WORK/seen"
HANDLER='v=$(cat); echo "$v" >> "$SEEN"; if [ "$v" = bad ]; then echo "cannot handle $v" >&2; exit 4; fi'
run "$C" -t poison -e --retry-backoff 1 --exec sh -c "$HANDLER"
expect_rc 123 "poison without --dlq"
grep -q "topic poison partition 0 offset 1: handler failed 3 attempts (exit status 4); stopping" "$WORK/err" ||
  fail "poison: message: $(cat "$WORK/err")"
grep -q "cannot handle bad" "$WORK/err" || fail "poison: the handler's stderr is not passed through"
[[ $(tr '\n' ' ' <"$SEEN") == "a bad bad bad " ]] || fail "poison: handled $(cat "$SEEN")"

# --- with --dlq: dead-lettered with the mq.dlq.* headers; the run goes on -----------------
rm -f "$SEEN"
printf '%s\n' '{"key":"kb","payload":"bad","ts":1700000000009,"headers":[{"key":"orig","value":"1"}]}' |
  "$P" -q -t poison -J
run "$C" -t poison -e --retry-backoff 1 --dlq poison.dlq --exec sh -c "$HANDLER"
expect_rc 0 "poison with --dlq"
grep -q "created dead-letter topic poison.dlq like poison (1 partition)" "$WORK/err" ||
  fail "--dlq: creation not reported: $(cat "$WORK/err")"
grep -q "offset 1: handler failed 3 attempts (exit status 4); appended to dead-letter topic poison.dlq partition 0 offset 0" "$WORK/err" ||
  fail "--dlq: append not reported: $(cat "$WORK/err")"
[[ $(tr '\n' ' ' <"$SEEN") == "a bad bad bad c bad bad bad " ]] || fail "--dlq: handled $(cat "$SEEN")"
"$C" -t poison.dlq -e -J >"$WORK/dlq"
[[ $(wc -l <"$WORK/dlq") == 2 ]] || fail "--dlq: $(wc -l <"$WORK/dlq") dead letters, want 2"
$PY - "$WORK/dlq" <<'EOF' || fail "--dlq: records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def hdr(r):
    return {h["key"]: h["value"] for h in r["headers"]}
h = hdr(recs[0])
assert recs[0]["payload"] == "bad" and recs[0]["key"] is None, recs[0]
assert h["mq.dlq.topic"] == "poison" and h["mq.dlq.partition"] == "0", h
assert h["mq.dlq.offset"] == "1" and h["mq.dlq.attempts"] == "3", h
assert h["mq.dlq.exit"] == "4" and h["mq.dlq.stderr"] == "cannot handle bad\n", h
r = recs[1]
h = hdr(r)
assert r["key"] == "kb" and r["payload"] == "bad" and r["ts"] == 1700000000009, r
assert [x["key"] for x in r["headers"]][0] == "orig" and h["orig"] == "1", r
assert h["mq.dlq.offset"] == "3", h
EOF

# --- a rerun appends no dead letter twice ---------------------------------------------------
run "$C" -t poison -e --retry-backoff 1 --dlq poison.dlq --exec sh -c "$HANDLER"
expect_rc 0 "rerun with --dlq"
grep -q "offset 1: .*already in dead-letter topic poison.dlq partition 0, not appended again" "$WORK/err" ||
  fail "rerun: $(cat "$WORK/err")"
[[ $("$C" -t poison.dlq -e | wc -l) == 2 ]] || fail "rerun: dead letters duplicated"

# --- killed after the dead-letter append, then rerun: still one dead letter -----------------
printf 'ok1\nbad\nok2\n' | "$P" -q -t crash --create
export MARK="$WORK/killed"
# The handler of the message after the poison one kills mq-consume (its
# parent) with SIGKILL, once: the dead letter is appended, the run is not over.
run "$C" -t crash -e --retry-backoff 1 --dlq crash.dlq --exec sh -c \
  'v=$(cat); [ "$v" = bad ] && exit 1; if [ "$v" = ok2 ] && [ ! -e "$MARK" ]; then touch "$MARK"; kill -KILL $PPID; sleep 5; fi; exit 0'
expect_rc 137 "killed mid-run"
[[ $("$C" -t crash.dlq -e | wc -l) == 1 ]] || fail "crash: no dead letter before the kill"
run "$C" -t crash -e --retry-backoff 1 --dlq crash.dlq --exec sh -c \
  'v=$(cat); [ "$v" = bad ] && exit 1; exit 0'
expect_rc 0 "rerun after the kill"
[[ $("$C" -t crash.dlq -e | wc -l) == 1 ]] || fail "crash: the rerun duplicated the dead letter"

# --- a handler killed by a signal counts as a failure -------------------------------------
printf 'x\n' | "$P" -q -t sig --create
run "$C" -t sig -e --max-attempts 2 --retry-backoff 1 --dlq sig.dlq --exec sh -c 'kill -KILL $$'
expect_rc 0 "signal-killed handler"
grep -q "handler killed by SIGKILL (attempt 1 of 2)" "$WORK/err" || fail "signal: $(cat "$WORK/err")"
"$C" -t sig.dlq -e -f '%h\n' | grep -q "mq.dlq.exit=SIGKILL" || fail "signal: mq.dlq.exit"

# --- --batch with a poison message: the batch is retried, then split -----------------------
printf 'a\nbad\nc\n' | "$P" -q -t split --create
run "$C" -t split -e --batch 10 --retry-backoff 1 --dlq split.dlq --exec sh -c \
  '! grep -q "\"payload\":\"bad\""'
expect_rc 0 "--batch split"
grep -q "offsets 0..2: batch failed 3 attempts (exit status 1); handling its 3 messages one by one" "$WORK/err" ||
  fail "split: $(cat "$WORK/err")"
"$C" -t split.dlq -e -f '%s %h\n' >"$WORK/out"
[[ $(wc -l <"$WORK/out") == 1 ]] || fail "split: $(cat "$WORK/out")"
grep -q "^bad .*mq.dlq.offset=1,mq.dlq.attempts=3" "$WORK/out" || fail "split: $(cat "$WORK/out")"

# --- commands that cannot be run stop at once: 127, 126 -----------------------------------
run "$C" -t five -e --exec "$WORK/no-such-handler"
expect_rc 127 "missing command"
grep -q -- "--exec $WORK/no-such-handler: cannot run: No such file or directory" "$WORK/err" ||
  fail "missing command: $(cat "$WORK/err")"
touch "$WORK/not-executable"
run "$C" -t five -e --dlq five.dlq --exec "$WORK/not-executable"
expect_rc 126 "not executable"
[[ $("$C" -t five.dlq -e | wc -l) == 0 ]] || fail "not executable: dead-lettered"

# --- usage errors -----------------------------------------------------------------------------
for args in "--batch 2" "--max-attempts 2" "--retry-backoff 5" "--dlq d"; do
  # shellcheck disable=SC2086
  run "$C" -t five -e $args
  expect_rc 64 "$args without --exec"
  grep -q "needs --exec" "$WORK/err" || fail "$args: $(cat "$WORK/err")"
done
run "$C" -t five -e --exec
expect_rc 64 "--exec without a command"
run "$C" -t five -e -J --exec cat
expect_rc 64 "-J with --exec"
run "$C" -t five -e --dlq five --exec cat
expect_rc 64 "--dlq the topic read"
run "$C" -t five -e --batch 0 --exec cat
expect_rc 64 "--batch 0"
run "$C" -t five -e --max-attempts 0 --exec cat
expect_rc 64 "--max-attempts 0"
# Arguments after --exec are the command's, even mq-consume's own flags.
run "$C" -t five -e -c 1 --exec echo -t -c -e
expect_rc 0 "flags after --exec"
[[ $(cat "$WORK/out") == "-t -c -e" ]] || fail "flags after --exec: $(cat "$WORK/out")"

# --- SIGTERM: the handler's process group is killed, mq-consume dies of the signal ----------
set +e
"$C" -t five -e --exec sh -c 'sleep 1000 & echo $! > "$1"; wait' sh "$WORK/pid" 2>"$WORK/err" &
consumer=$!
PIDS+=("$consumer")
for _ in $(seq 1 6000); do [[ -s $WORK/pid ]] && break; sleep 0.01; done
[[ -s $WORK/pid ]] || fail "SIGTERM: the handler never started"
kill -TERM "$consumer"
wait "$consumer"
rc=$?
set -e
expect_rc 143 "SIGTERM during a handler"
grandchild=$(cat "$WORK/pid")
for _ in $(seq 1 6000); do
  state=$(awk '{print $3}' "/proc/$grandchild/stat" 2>/dev/null || echo gone)
  [[ $state == gone || $state == Z ]] && break
  sleep 0.01
done
[[ $state == gone || $state == Z ]] || fail "SIGTERM: the handler's child $grandchild survived"

# --- dead letters of 1,000 partitions under ulimit -n 256 (mq-consume(1), OPEN FILES) ----
# At most 4 dead-letter writers stay open; before, each dead-letter partition
# kept one (8 descriptors), and the run exited 74 after 44 dead letters.
"$P" -q -t wide --create --partitions 1000 </dev/null
seq 1 1000 | awk '{print "k"$1"\t"$1}' | "$P" -q -t wide -K '\t'
for mode in plain group; do
  args=(-t wide -e -q --dlq "wide.dlq.$mode" --max-attempts 1)
  [[ $mode == group ]] && args+=(-G wide --parallel 4)
  run bash -c 'ulimit -n 256 && exec "$@"' limited "$C" "${args[@]}" --exec false
  expect_rc 0 "--dlq ($mode) over 1,000 partitions under ulimit -n 256"
  got=$("$C" -t "wide.dlq.$mode" -e -q | sort -n | md5sum)
  [[ $got == $(seq 1 1000 | md5sum) ]] || fail "--dlq ($mode): not every message dead-lettered once"
done
echo "ok: --dlq over 1,000 partitions under ulimit -n 256, every message once"

echo "consume_exec: ok"
