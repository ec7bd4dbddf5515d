#!/usr/bin/env bash
# Recipe: an effectively-once consume -> transform -> produce pipeline
# (mq-consume(1), PIPELINES; format-spec/pipeline.md).
#
#   MQ_BIN=build examples/pipeline.sh
#
# Topic "words" holds sentences; a pipeline splits each sentence into its
# words, drops the short ones, and keys each word by itself into topic
# "tokens" (so one word always lands in one partition). The pipeline is
# killed with SIGKILL a few times while it runs and rerun with the same
# command line; at the end "tokens" holds every expected word exactly once,
# in order, each naming the sentence it came from (header mq.src). The
# recipe checks each step and exits non-zero if one does not hold
# (tests/cli/examples.sh runs it).
#
# Everything happens in a temporary directory that is removed at the end
# (set MQ_DEMO_KEEP=1 to keep it).
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${MQ_BIN:-$SRC/build}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mq-recipe.XXXXXX")
if [[ ${MQ_DEMO_KEEP:-0} == 1 ]]; then
  echo "recipe directory: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
cd "$WORK"
export PATH="$BIN:$PATH" MQ_DIR="$WORK/data"
for tool in mq-produce mq-consume; do
  command -v "$tool" >/dev/null || { echo "recipe: $tool not found (build first)" >&2; exit 69; }
done

run() { printf '$ %s\n' "$1"; eval "$1"; }
check() {  # check WHAT TEST...: the recipe's claim WHAT holds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "recipe: FAILED: $what" >&2; exit 1; fi
}

echo "## 1. Sentences in two partitions"
for i in $(seq 1 60); do echo "sentence $i says the quick brown fox jumps over a dog"; done >sentences.txt
run "mq-produce -t words --create --partitions 2 < sentences.txt"

echo
echo "## 2. The transform: one line per word of 4 letters or more, KEY:VALUE (deterministic)"
cat >split.sh <<'SH'
tr ' ' '\n' | awk 'length($0) >= 4 { print $0 ":" $0 }'
SH
cat split.sh
PIPELINE="mq-consume -t words -G tokenizer -e -q --to-topic tokens -K : --exec sh split.sh"

echo
echo "## 3. Run it, killing it (SIGKILL) three times, then to the end"
for delay in 0.2 0.3 0.4; do
  $PIPELINE &
  pid=$!
  sleep "$delay"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "killed after ${delay}s: $(mq-consume -t tokens -e 2>/dev/null | wc -l) words so far"
done
run "$PIPELINE"

echo
echo "## 4. Each sentence's words are in tokens once"
# 6 words of 4 letters or more per sentence: sentence, says, quick, brown,
# jumps, over.
run "mq-consume -t tokens -e -f '%k %h\n' | head -n 3"
words=$(mq-consume -t tokens -e | wc -l)
check "60 sentences x 6 long words = 360 outputs (got $words)" test "$words" -eq 360
dups=$(mq-consume -t tokens -e -f '%h\n' | sort | uniq -d | wc -l)
check "no output twice (same source message and index)" test "$dups" -eq 0
check "every word of one spelling is in one partition" \
  test "$(mq-consume -t tokens -e -f '%k %p\n' | sort -u | awk '{print $1}' | uniq -d | wc -l)" -eq 0
