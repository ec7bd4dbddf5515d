#!/usr/bin/env bash
# An effectively-once pipeline (mq-consume -G --to-topic) into an output
# topic of 10,000 partitions under ulimit -n 256, where keeping a writer of
# each open takes some 50,000 descriptors: it keeps a bounded set open,
# closing the least recently used (mq-consume(1), OPEN FILES), and closing
# and opening writers again keeps every output exactly once
# (format-spec/pipeline.md): across a SIGKILL in the middle, a death between
# two batches of one message (MQ_TEST_CRASH=pipeline-partial) and a last run
# with --parallel 4. And a member owning 64 source partitions, whose locks
# (two each) the budget counts out.
source "$(dirname "$0")/lib/common.bash"
# Ten thousand partitions are some 50,000 small files: on tmpfs when there
# is one, so that creating them (each fsynced) does not take minutes.
T="$WORK"
if [[ -d /dev/shm && -w /dev/shm ]]; then
  T="$(mktemp -d /dev/shm/mq-pipeline-many.XXXXXX)"
  on_exit() { rm -rf "$T"; }
fi
export MQ_DIR="$T/data"
CHECK="$SRC/tests/cli/lib/pipeline_check.py"
N=1200       # source messages
OUTPUTS=8    # keyed outputs of each (pipeline_check.py's rule "spread")

# committed PARTITION: group g's committed offset of in's partition (- if none).
committed() {
  "$C" --describe -G g -t in -J |
    jq -r --argjson p "$1" 'select(.type == "partition" and .partition == $p) | .current_offset // "-"'
}
# outputs: how many messages out holds.
outputs() { "$C" -t out -e -q -f '%o\n' | wc -l; }

# The source: 4 partitions of keyed messages, values 1..N.
"$P" -q -t in --create --partitions 4 </dev/null
seq 1 "$N" | awk '{print "k"$1"\t"$1}' | "$P" -q -t in -K '\t'
"$P" -q -t out --create --partitions 10000 </dev/null
# The transform (deterministic): value V gives OUTPUTS keyed lines, kV.I
# and V.I, spread over out's partitions by their keys. It logs each run's
# partition/offset to $TLOG when set.
cat >"$T/t.sh" <<EOF
v=\$(cat)
[ -n "\${TLOG:-}" ] && echo "\$MQ_PARTITION/\$MQ_OFFSET" >>"\$TLOG"
i=0
while [ \$i -lt $OUTPUTS ]; do printf 'k%s.%s\t%s.%s\n' "\$v" \$i "\$v" \$i; i=\$((i + 1)); done
EOF
seq 1 "$N" | awk -v n="$OUTPUTS" '{for (i = 0; i < n; i++) printf "k%s.%d\t%s.%d\n", $1, i, $1, i}' |
  sort >"$T/want"
# One member under ulimit -n 256, to the end of in: "${PIPE[@]}" ARG...
# --exec "${TRANSFORM[@]}".
PIPE=(bash -c 'ulimit -n 256 && exec "$@"' limited "$C" -G g -t in -e --to-topic out -K '\t')
TRANSFORM=(sh "$T/t.sh")

# 1. SIGKILL in the middle, a quarter of the messages in (--parallel 2).
export TLOG="$T/tlog"
: >"$TLOG"
"${PIPE[@]}" -q --parallel 2 --exec "${TRANSFORM[@]}" 2>"$WORK/kill.err" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 1200); do
  (($(wc -l <"$TLOG") >= N / 4)) && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
kill -KILL "$pid" 2>/dev/null || fail "the pipeline ended before the kill: $(cat "$WORK/kill.err")"
wait "$pid" 2>/dev/null || true
unset TLOG
got=$(outputs)
((got > 0 && got < N * OUTPUTS)) || fail "killed in the middle: $got outputs appended, want some"
echo "killed (SIGKILL) with $got of $((N * OUTPUTS)) outputs appended"

# 2. A death between two output batches of one message: it is left partly
# appended, for the next run to complete (E7).
MQ_TEST_CRASH=pipeline-partial run "${PIPE[@]}" -q --exec "${TRANSFORM[@]}"
expect_rc 137 "a run killed between two batches of a message"
echo "killed between two batches of a message with $(outputs) outputs appended"

# 3. A last run with --parallel 4 completes the started message and the rest.
run "${PIPE[@]}" -v --parallel 4 --exec "${TRANSFORM[@]}"
expect_rc 0 "the last run, under ulimit -n 256"
grep -q "completed ([1-9][0-9]* output batch" "$WORK/err" ||
  fail "the last run completed no partly appended message: $(cat "$WORK/err")"
"$C" -t out -e -q -f '%k\t%s\n' | sort >"$T/got"
[[ $(wc -l <"$T/got") == $((N * OUTPUTS)) ]] ||
  fail "out holds $(wc -l <"$T/got") outputs, want $((N * OUTPUTS))"
cmp -s "$T/got" "$T/want" || fail "out's outputs differ from the transform's: $(diff "$T/want" "$T/got" | head -n 5)"
"$C" -t out -e -q -J >"$T/out.json"
used=$(jq -s 'map(.partition) | unique | length' "$T/out.json")
((used > 5000)) || fail "the outputs went to $used of out's partitions only"
"$C" -t in -e -q -J >"$T/in.json"
: >"$T/dead.json"
"$PY" "$CHECK" "$T/in.json" "$T/out.json" "$T/dead.json" 10000 spread >/dev/null ||
  fail "out is not each source message's outputs exactly once"
for p in 0 1 2 3; do
  want=$("$C" --describe -G g -t in -J | jq -r --argjson p "$p" 'select(.type == "partition" and .partition == $p) | .log_end_offset')
  [[ $(committed "$p") == "$want" ]] || fail "E5: partition $p committed $(committed "$p"), want $want"
done
echo "ok: $N messages, $((N * OUTPUTS)) outputs into $used of 10,000 partitions exactly once under ulimit -n 256, across two kills"

# A member owning 64 source partitions holds 64 producer locks besides its
# readers and writers (its ownership locks share one descriptor): its
# budget counts them out, and it runs to the end under the same limit.
"$P" -q -t in64 --create --partitions 64 </dev/null
seq 1 640 | awk '{print "k"$1"\t"$1}' | "$P" -q -t in64 -K '\t'
# Into 100 output partitions (500 descriptors to keep them all open): each
# source partition's takeover reads every output partition once.
"$P" -q -t out100 --create --partitions 100 </dev/null
run bash -c 'ulimit -n 256 && exec "$@"' limited "$C" -G g64 -t in64 -e -q --to-topic out100 -K '\t' \
  --parallel 4 --exec "${TRANSFORM[@]}"
expect_rc 0 "64 source partitions into 100 output partitions under ulimit -n 256"
seq 1 640 | awk -v n="$OUTPUTS" '{for (i = 0; i < n; i++) printf "k%s.%d\t%s.%d\n", $1, i, $1, i}' |
  sort >"$T/want"
"$C" -t out100 -e -q -f '%k\t%s\n' | sort | cmp -s - "$T/want" ||
  fail "64 source partitions: out100 is not each message's outputs exactly once"
echo "ok: a member owning 64 source partitions (64 producer locks) runs to the end under ulimit -n 256"
