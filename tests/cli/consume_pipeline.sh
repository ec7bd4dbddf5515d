#!/usr/bin/env bash
# mq-consume -G GROUP --to-topic OUT --exec CMD: the effectively-once
# pipeline (format-spec/pipeline.md, one case per rule E1-E9). The headline:
# killed (SIGKILL) at random moments, alone or as one of two members, and
# rerun with the same command line until it finishes, the output topic holds
# each source message's outputs exactly once, in per-partition order, over
# a source with keyed and keyless messages and offset gaps, with a
# transform that filters, splits and fails (dead letters); the same with
# --parallel 4 (one member, then two). Seeded:
# MQ_TEST_SEED repeats a run, MQ_PIPELINE_KILLS sets the number of kills
# (50 by default).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
GAPPY="$BIN/tests/mq-test-gappy-append"
SEED=${MQ_TEST_SEED:-$RANDOM}
KILLS=${MQ_PIPELINE_KILLS:-50}
echo "consume_pipeline: seed $SEED, $KILLS kills (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED
CHECK="$SRC/tests/cli/lib/pipeline_check.py"

# committed GROUP TOPIC PARTITION: the group's committed offset (- if none).
committed() {
  "$C" --describe -G "$1" -t "$2" -J |
    jq -r --argjson p "$3" 'select(.type == "partition" and .partition == $p) | .current_offset // "-"'
}
# check IN OUT DEAD RULE: the pipeline's output is exactly what it should be.
check() {
  "$C" -t "$1" -e -J >"$WORK/in.json"
  "$C" -t "$2" -e -J >"$WORK/out.json"
  : >"$WORK/dead.json"
  [[ -z "$3" ]] || "$C" -t "$3" -e -J >"$WORK/dead.json" 2>/dev/null || true
  local n
  n=$("$P" -t "$2" --describe | sed -n 's/.*partitions=\([0-9]*\).*/\1/p' | head -n 1)
  "$PY" "$CHECK" "$WORK/in.json" "$WORK/out.json" "$WORK/dead.json" "$n" "$4" ||
    fail "$5 (seed $SEED)"
}

# The transform (deterministic): values ending in 0 are filtered out, in 3
# split into three keyed outputs, in 7 get a suffix, in 9 fail; the rest
# are copied. It logs each run's offset to $TLOG when set.
cat >"$WORK/t.sh" <<'EOF'
v=$(cat)
[ -n "${TLOG:-}" ] && echo "$MQ_PARTITION/$MQ_OFFSET" >>"$TLOG"
case "$v" in
  *9) exit 3 ;;
  *0) ;;
  *3) printf 'a%s\t%s.a\nb%s\t%s.b\nc%s\t%s.c\n' "$v" "$v" "$v" "$v" "$v" "$v" ;;
  *7) printf '%s.x\n' "$v" ;;
  *) printf '%s\n' "$v" ;;
esac
EOF
T=(sh "$WORK/t.sh")
PIPE=(--to-topic out -K '\t' --dlq dead --max-attempts 2 --retry-backoff 0)

# The source: 3 partitions, keyed and keyless messages, and one-record
# batches that claim several offsets each (offset gaps, as compaction
# leaves them).
produce -t in --create --partitions 3 </dev/null
seq 1 300 | awk '{print "k"$1"\t"$1}' | produce -t in -K '\t'
seq 301 600 | produce -t in
for p in 0 1 2; do "$GAPPY" "$MQ_DIR" in "$p" $((1000 + p * 100)) 40 $((p == 1 ? 0 : 7)); done
end0=$("$C" -t in -p 0 -e -f '%o\n' | tail -n 1)
n0=$("$C" -t in -p 0 -e -f '%o\n' | wc -l)
((end0 + 1 > n0)) || fail "the source has no offset gaps ($n0 messages, last offset $end0)"

# --- the headline: random SIGKILLs of the member, then a run to the end ----------
# A SIGKILL rarely lands between two appends of one message (a window of
# microseconds): one run in three dies right there (MQ_TEST_CRASH, mq(7)),
# at the first split message it reaches, leaving it partly appended.
crash_env() { ((RANDOM % 3 == 0)) && echo MQ_TEST_CRASH=pipeline-partial || echo MQ_TEST_CRASH=; }
for i in $(seq 1 "$KILLS"); do
  env "$(crash_env)" "$C" -G g -t in -e -q "${PIPE[@]}" --exec "${T[@]}" 2>>"$WORK/kills.err" &
  pid=$!
  # Kills come early (a few transforms in) and late, in the middle of an
  # append or of a tail read at start as much as during a transform.
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
echo "pipeline: after $KILLS kills, $("$C" -t out -e | wc -l) outputs; a last run finishes"
run "$C" -G g -t in -e -q "${PIPE[@]}" --exec "${T[@]}"
expect_rc 0 "the run after $KILLS kills"
check in out dead main "after $KILLS SIGKILLs: output != expected"
echo "pipeline: $KILLS kills, output exactly once"
# E5: once finished, every partition is committed to its end, and each
# dead letter is counted once.
for p in 0 1 2; do
  want=$("$C" --describe -G g -t in -J | jq -r --argjson p "$p" 'select(.type == "partition" and .partition == $p) | .log_end_offset')
  [[ $(committed g in "$p") == "$want" ]] || fail "E5: partition $p committed $(committed g in "$p"), want $want"
done
dl=$("$C" --describe -G g -J | jq -r 'select(.type == "summary") | .dead_letters')
[[ $dl == $("$C" -t dead -e | wc -l) ]] || fail "E8: the group counts $dl dead letters, the topic holds $("$C" -t dead -e | wc -l) (seed $SEED)"
# A rerun finds nothing to do: no transform runs, nothing appended.
export TLOG="$WORK/rerun.log"
: >"$TLOG"
before=$("$C" -t out -e -f '%o\n' | wc -l)
run "$C" -G g -t in -e -q "${PIPE[@]}" --exec "${T[@]}"
expect_rc 0 "a rerun of a finished pipeline"
[[ ! -s "$TLOG" && $("$C" -t out -e -f '%o\n' | wc -l) == "$before" ]] ||
  fail "a rerun of a finished pipeline ran $(wc -l <"$TLOG") transforms"
unset TLOG

# --- two members killed at random -------------------------------------------------
produce -t in2 --create --partitions 4 </dev/null
seq 1 200 | awk '{print "k"$1"\t"$1}' | produce -t in2 -K '\t'
seq 201 400 | produce -t in2
PIPE2=(--to-topic out2 -K '\t' --dlq dead2 --max-attempts 2 --retry-backoff 0)
pids=()
start_member() { env "$(crash_env)" "$C" -G g2 -t in2 -q --member-id "m$1" "${PIPE2[@]}" --exec "${T[@]}" 2>>"$WORK/two.err" & pids[$1]=$!; PIDS+=($!); }
start_member 0
start_member 1
for i in $(seq 1 $((KILLS / 2))); do
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  m=$((RANDOM % 2))
  kill -KILL "${pids[$m]}" 2>/dev/null || true
  wait "${pids[$m]}" 2>/dev/null || true
  start_member "$m"
done
kill -KILL "${pids[0]}" "${pids[1]}" 2>/dev/null || true
wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true
run "$C" -G g2 -t in2 -e -q "${PIPE2[@]}" --exec "${T[@]}"
expect_rc 0 "two members: the last run"
check in2 out2 dead2 main "two members killed $((KILLS / 2)) times: output != expected"
echo "pipeline: two members, $((KILLS / 2)) kills, output exactly once"

# --- --parallel 4: transforms of several source partitions at once, killed at random ---
# 6 source partitions (keyed, keyless, offset gaps) into 3 output partitions:
# the threads of one member append to one output partition at once, each
# under its own source partition's producer.
produce -t in4 --create --partitions 6 </dev/null
produce -t out4 --create --partitions 3 </dev/null
seq 1 300 | awk '{print "k"$1"\t"$1}' | produce -t in4 -K '\t'
seq 301 600 | produce -t in4
for p in 0 3 5; do "$GAPPY" "$MQ_DIR" in4 "$p" $((2000 + p * 100)) 20 $((p == 3 ? 0 : 5)); done
PIPE4=(--to-topic out4 -K '\t' --dlq dead4 --max-attempts 2 --retry-backoff 0 --parallel 4)
for i in $(seq 1 $((KILLS / 2))); do
  env "$(crash_env)" "$C" -G g4 -t in4 -e -q "${PIPE4[@]}" --exec "${T[@]}" 2>>"$WORK/par.err" &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
echo "pipeline --parallel 4: after $((KILLS / 2)) kills, $("$C" -t out4 -e | wc -l) outputs; a last run finishes"
run "$C" -G g4 -t in4 -e -q "${PIPE4[@]}" --exec "${T[@]}"
expect_rc 0 "--parallel 4: the run after $((KILLS / 2)) kills"
check in4 out4 dead4 main "--parallel 4, $((KILLS / 2)) SIGKILLs: output != expected"
for p in 0 1 2 3 4 5; do
  want=$("$C" --describe -G g4 -t in4 -J | jq -r --argjson p "$p" 'select(.type == "partition" and .partition == $p) | .log_end_offset')
  [[ $(committed g4 in4 "$p") == "$want" ]] || fail "--parallel 4, E5: partition $p committed $(committed g4 in4 "$p"), want $want"
done
dl=$("$C" --describe -G g4 -J | jq -r 'select(.type == "summary") | .dead_letters')
[[ $dl == $("$C" -t dead4 -e | wc -l) ]] || fail "--parallel 4, E8: the group counts $dl dead letters, the topic holds $("$C" -t dead4 -e | wc -l) (seed $SEED)"
echo "pipeline --parallel 4: $((KILLS / 2)) kills, output exactly once"

# Two members with --parallel 4, killed at random (rebalances cancel running
# transforms), on a second group over the same source.
PIPE5=(--to-topic out5 -K '\t' --dlq dead5 --max-attempts 2 --retry-backoff 0 --parallel 4)
start_member5() { env "$(crash_env)" "$C" -G g5 -t in4 -q --member-id "m$1" "${PIPE5[@]}" --exec "${T[@]}" 2>>"$WORK/par2.err" & pids[$1]=$!; PIDS+=($!); }
start_member5 0
start_member5 1
for i in $(seq 1 $((KILLS / 4))); do
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  m=$((RANDOM % 2))
  kill -KILL "${pids[$m]}" 2>/dev/null || true
  wait "${pids[$m]}" 2>/dev/null || true
  start_member5 "$m"
done
kill -KILL "${pids[0]}" "${pids[1]}" 2>/dev/null || true
wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true
run "$C" -G g5 -t in4 -e -q "${PIPE5[@]}" --exec "${T[@]}"
expect_rc 0 "--parallel 4, two members: the last run"
check in4 out5 dead5 main "--parallel 4, two members killed $((KILLS / 4)) times: output != expected"
echo "pipeline --parallel 4: two members, $((KILLS / 4)) kills, output exactly once"

# The transforms of different source partitions do run at once: each of 4
# waits (up to 10 s) until all 4 have started; one at a time, only the last
# would see the others.
produce -t par --create --partitions 4 </dev/null
for p in 0 1 2 3; do echo "m$p" | produce -t par -p "$p"; done
mkdir "$WORK/barrier"
# shellcheck disable=SC2016
BARRIER='touch "$B/$MQ_PARTITION"; i=0
while [ "$(ls "$B" | wc -l)" -lt 4 ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ "$(ls "$B" | wc -l)" -lt 4 ] || echo "$MQ_PARTITION" >>"$B.met"; cat'
run env B="$WORK/barrier" "$C" -G par -t par -e -q --to-topic parout --parallel 4 --exec sh -c "$BARRIER"
expect_rc 0 "--parallel 4: the barrier run"
[[ $(sort "$WORK/barrier.met" | tr '\n' ' ') == "0 1 2 3 " ]] ||
  fail "--parallel 4: transforms that met all four at once: '$(sort "$WORK/barrier.met" | tr '\n' ' ')', want '0 1 2 3 '"
check par parout "" cat "--parallel 4: barrier run output"

# E7, E9 with --parallel: a rerun refused over partition 0's partly appended
# message (a transform not deterministic there: 65; failing there: 123)
# commits no partition past it, while partition 1's transforms go on; the
# deterministic transform then completes it.
produce -t pe --create --partitions 2 </dev/null
produce -t peout --create --partitions 3 </dev/null
printf '%s\n' 11 13 | produce -t pe -p 0
printf '%s\n' 21 22 | produce -t pe -p 1
PE=(-G pe -t pe -e -q --to-topic peout -K '\t' --parallel 2)
# shellcheck disable=SC2016
ON13='v=$(cat); if [ "$v" = 13 ]; then '
run env MQ_TEST_CRASH=pipeline-partial "$C" "${PE[@]}" --exec "${T[@]}"
expect_rc 137 "--parallel, E7: crash seam"
# shellcheck disable=SC2016
run "$C" "${PE[@]}" --exec sh -c "$ON13"'printf "a13\t13.A\nb13\t13.B\nc13\t13.C\n"; else printf %s "$v" | sh "$0"; fi' "$WORK/t.sh"
expect_rc 65 "--parallel, E7: a transform that is not deterministic over the partly appended message"
grep -q "partition 0 offset 1: .*not deterministic" "$WORK/err" || fail "--parallel, E7: $(cat "$WORK/err")"
[[ $(committed pe pe 0) == - || $(committed pe pe 0) -le 1 ]] ||
  fail "--parallel, E7: committed $(committed pe pe 0) past the partly appended message"
# shellcheck disable=SC2016
run "$C" "${PE[@]}" --dlq pedead --max-attempts 1 --exec sh -c "$ON13"'exit 1; else printf %s "$v" | sh "$0"; fi' "$WORK/t.sh"
expect_rc 123 "--parallel, E9: a failing transform over the partly appended message"
grep -q "not dead-lettered" "$WORK/err" || fail "--parallel, E9: $(cat "$WORK/err")"
[[ $(committed pe pe 0) == - || $(committed pe pe 0) -le 1 ]] ||
  fail "--parallel, E9: committed $(committed pe pe 0) past the partly appended message"
run "$C" "${PE[@]}" --exec "${T[@]}"
expect_rc 0 "--parallel, E7: the deterministic transform completes it"
check pe peout pedead main "--parallel, E7/E9: completed"
[[ $(committed pe pe 0) == 2 && $(committed pe pe 1) == 2 ]] ||
  fail "--parallel, E5: committed $(committed pe pe 0) $(committed pe pe 1), want 2 2"

# --- E1: one producer per (group, IN, OUT, source partition), named in the registry ---
for p in 0 1 2; do
  f="$MQ_DIR/producers/pipeline.1.g.2.in.3.out.$p.id"
  [[ -f "$f" ]] || fail "E1: no registry entry $f"
done
ids=$(cat "$MQ_DIR"/producers/pipeline.1.g.2.in.3.out.*.id | sort -u | wc -l)
((ids == 3)) || fail "E1: $ids distinct producer ids for 3 source partitions"
# --- E4: one batch per (source message, output partition), contiguous sequences ----
# Every batch of out is a pipeline producer's, holds the outputs of one
# source message, and each producer's sequences in each output partition
# run 0, 1, 2, ... without a gap (P3), whatever the gaps in the source.
for q in 0 1 2; do
  echo "partition $q"
  for log in "$MQ_DIR"/out/out-"$q"/*.log "$MQ_DIR"/out-"$q"/*.log; do
    [[ -f "$log" ]] && "$INSPECT" -d -H "$log"
  done
done >"$WORK/out.dump" 2>/dev/null || true
grep -q "baseSequence" "$WORK/out.dump" || fail "E4: no batches found to inspect"
"$PY" - "$WORK/out.dump" "$MQ_DIR"/producers/pipeline.1.g.2.in.3.out.*.id <<'PYEOF' || fail "E4: batches of out"
import re, sys
ids = set(int(open(f).read()) for f in sys.argv[2:])
nxt, srcs, q, batches = {}, None, None, 0
def end_batch():
    if srcs is not None and len(set(srcs)) != 1:
        sys.exit(f"E4: a batch of partition {q} holds outputs of {sorted(set(srcs))}")
for line in open(sys.argv[1]):
    if line.startswith("partition "):
        end_batch(); srcs = None
        q = int(line.split()[1]); continue
    m = re.search(r"count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) producerId: (-?\d+)", line)
    if m:
        end_batch()
        count, base, last, pid = map(int, m.groups())
        if pid not in ids: sys.exit(f"E1: partition {q}: a batch of producer {pid}, not a pipeline producer")
        want = nxt.get((q, pid), 0)
        if base != want: sys.exit(f"E4: partition {q} producer {pid}: baseSequence {base}, want {want}")
        nxt[(q, pid)] = last + 1
        srcs = []; batches += 1
        continue
    h = re.search(r"mq\.src=([^,\]]+)", line)
    if h and line.startswith("|"): srcs.append(h.group(1))
end_batch()
print(f"E4: {batches} batches, sequences contiguous per producer and partition")
PYEOF

# --- E2, E3: headers, keys, a last line without its newline, filter and split ------
produce -t e3 --create --partitions 2 </dev/null
printf 'one\ntwo\nthree\n' | produce -t e3
# shellcheck disable=SC2016
run "$C" -G e3 -t e3 -e -q --to-topic e3out -K : --exec sh -c '
v=$(cat); case "$v" in one) printf "k1:a\nb" ;; two) ;; *) printf "x:y:z\n\n" ;; esac'
expect_rc 0 "E3: a pipeline run"
"$C" -t e3out -e -J | jq -c '[.key, .payload, ([.headers[].key] | join(","))]' | sort >"$WORK/e3.got"
printf '%s\n' '["k1","a","mq.src,mq.src.index"]' '["x","y:z","mq.src,mq.src.index"]' \
  '[null,"","mq.src,mq.src.index"]' '[null,"b","mq.src,mq.src.index"]' | sort >"$WORK/e3.want"
diff "$WORK/e3.want" "$WORK/e3.got" >&2 || fail "E3: outputs of a filter/split transform"
[[ $("$C" -t e3out -e -J | jq -r 'select(.payload == "b") | .headers[] | select(.key == "mq.src.index") | .value') == 1 ]] ||
  fail "E2: mq.src.index of a message's second output"
[[ $("$C" -t e3out -e -J | jq -r 'select(.payload == "a") | .headers[] | select(.key == "mq.src") | .value') == e3/0/0 ]] ||
  fail "E2: mq.src of an output"

# --- E6, E7: a member dies between two batches of one message; the rerun skips -------
# the complete messages and appends only the missing batches.
produce -t e7 --create --partitions 1 </dev/null
printf '%s\n' 11 12 13 14 15 | produce -t e7
# Commits only at exit: the kill leaves the committed offset behind the output.
E7=(-G e7 -t e7 -e -q --commit-interval 86400000 --commit-every 0 --to-topic e7out -K '\t')
produce -t e7out --create --partitions 3 </dev/null
run env MQ_TEST_CRASH=pipeline-partial "$C" "${E7[@]}" --exec "${T[@]}"
expect_rc 137 "E7: a member killed between the batches of a split message"
[[ $(committed e7 e7 0) == - ]] || fail "E5: committed $(committed e7 e7 0) before the message was complete"
n=$("$C" -t e7out -e -f '%o\n' | wc -l)
((n >= 3 && n < 5)) || fail "E7: $n outputs after the crash, want 11, 12 and part of 13's three"
export TLOG="$WORK/e7.log"
: >"$TLOG"
run "$C" "${E7[@]}" --exec "${T[@]}"
expect_rc 0 "E7: the rerun"
[[ $(head -n 1 "$TLOG") == 0/2 ]] || fail "E6: the rerun transformed $(head -n 1 "$TLOG") first, want offset 2 (0 and 1 are complete)"
unset TLOG
check e7 e7out "" main "E7: after completing a partly appended message"
[[ $(committed e7 e7 0) == 5 ]] || fail "E5: committed $(committed e7 e7 0) after the rerun, want 5"

# A transform that gives other lines for the partly appended message: exit 65,
# nothing appended.
produce -t e7b --create --partitions 1 </dev/null
produce -t e7bout --create --partitions 3 </dev/null
printf '%s\n' 11 13 | produce -t e7b
E7B=(-G e7b -t e7b -e -q --to-topic e7bout -K '\t')
run env MQ_TEST_CRASH=pipeline-partial "$C" "${E7B[@]}" --exec "${T[@]}"
expect_rc 137 "E7: crash seam"
before=$("$C" -t e7bout -e -f '%o\n' | wc -l)
run "$C" "${E7B[@]}" --exec sh -c 'v=$(cat); printf "a%s\t%s.A\nb%s\t%s.B\nc%s\t%s.C\n" $v $v $v $v $v $v'
expect_rc 65 "E7: a transform that is not deterministic"
grep -q "not deterministic" "$WORK/err" || fail "E7: the message does not say why: $(cat "$WORK/err")"
[[ $("$C" -t e7bout -e -f '%o\n' | wc -l) == "$before" ]] || fail "E7: appended after a mismatch"
run "$C" "${E7B[@]}" --exec "${T[@]}"
expect_rc 0 "E7: the deterministic transform completes it"
check e7b e7bout "" main "E7: completed after a refused rerun"

# --- E8: a dead letter is appended once, and never transformed again ---------------
produce -t e8 --create --partitions 1 </dev/null
printf '%s\n' 1 9 2 | produce -t e8
E8=(-G e8 -t e8 -e -q --to-topic e8out --dlq e8dead --max-attempts 1)
run env MQ_TEST_CRASH=dlq-appended "$C" "${E8[@]}" --exec "${T[@]}"
expect_rc 137 "E8: killed after the dead letter's append"
# The rerun's transform would now succeed for 9: it must not run for it.
run "$C" "${E8[@]}" --exec cat
expect_rc 0 "E8: the rerun"
[[ $("$C" -t e8out -e -f '%s\n' | tr '\n' ' ') == "1 2 " ]] ||
  fail "E8: outputs $("$C" -t e8out -e -f '%s\n' | tr '\n' ' '), want 1 2"
[[ $("$C" -t e8dead -e -f '%s\n' | tr '\n' ' ') == "9 " ]] ||
  fail "E8: dead letters $("$C" -t e8dead -e -f '%s\n' | tr '\n' ' '), want 9 once"
# A second pipeline (group e8b) sharing the dead-letter topic: the first
# one's dead letter of 9 is not its own (mq.dlq.group): it appends its own,
# once, even across a kill after the append, and gives 9 no outputs.
E8B=(-G e8b -t e8 -e -q --to-topic e8bout --dlq e8dead --max-attempts 1)
run env MQ_TEST_CRASH=dlq-appended "$C" "${E8B[@]}" --exec "${T[@]}"
expect_rc 137 "E8: a second group killed after its dead letter's append"
run "$C" "${E8B[@]}" --exec cat
expect_rc 0 "E8: the second group's rerun"
[[ $("$C" -t e8bout -e -f '%s\n' | tr '\n' ' ') == "1 2 " ]] ||
  fail "E8: second group's outputs $("$C" -t e8bout -e -f '%s\n' | tr '\n' ' '), want 1 2"
[[ $("$C" -t e8dead -e -J | jq -r '[.payload, (.headers[] | select(.key == "mq.dlq.group") | .value)] | join(" ")' |
  tr '\n' ',') == "9 e8,9 e8b," ]] ||
  fail "E8: dead letters with a shared topic: $("$C" -t e8dead -e -f '%s %h\n' | tr '\n' ' ')"

# --- E9: a partly appended message that then fails is not dead-lettered -------------
produce -t e9 --create --partitions 1 </dev/null
produce -t e9out --create --partitions 3 </dev/null
printf '%s\n' 3 | produce -t e9
E9=(-G e9 -t e9 -e -q --to-topic e9out -K '\t' --dlq e9dead --max-attempts 1)
run env MQ_TEST_CRASH=pipeline-partial "$C" "${E9[@]}" --exec "${T[@]}"
expect_rc 137 "E9: crash seam"
run "$C" "${E9[@]}" --exec false
expect_rc 123 "E9: a failing transform over a partly appended message"
grep -q "not dead-lettered" "$WORK/err" || fail "E9: the message does not say why: $(cat "$WORK/err")"
[[ -z $("$C" -t e9dead -e -f '%s\n' 2>/dev/null) ]] || fail "E9: dead-lettered a partly appended message"
run "$C" "${E9[@]}" --exec "${T[@]}"
expect_rc 0 "E9: the rerun completes it"
check e9 e9out e9dead main "E9: completed"

# --- usage errors (exit 64) ---------------------------------------------------------
bad() {
  run "$C" "$@"
  expect_rc 64 "usage: $*"
}
bad -t in --to-topic x --exec cat                     # no group
bad -G u -t in --to-topic x                           # no transform
bad -G u -t in --to-topic in --exec cat               # the source itself
bad -G u -t in --to-topic x --batch 2 --exec cat
grep -q -- "--to-topic: not with --batch: each output names its source message" "$WORK/err" ||
  fail "usage: --batch with --to-topic: $(cat "$WORK/err")"
bad -G u -t in --to-topic x --at-most-once --exec cat
bad -G u -t in --to-topic x --dlq x --exec cat
bad -G u -t in --fsync batch --exec cat               # --fsync without --to-topic
bad -G u -t in --to-topic x --fsync sometimes --exec cat
bad -G u -t in --to-topic 'a/b' --exec cat
echo "consume_pipeline: ok"
