#!/usr/bin/env bash
# The mq demo: writes a topic through liblog, looks at it with mq-inspect,
# damages a copy and watches --verify catch it, then (once the tools exist)
# pipes messages through mq-produce and reads them back with mq-consume.
#
#   MQ_BIN=build examples/demo.sh       (./build.sh demo runs it for you)
#
# Everything happens in a temporary directory that is removed at the end
# (set MQ_DEMO_KEEP=1 to keep it).
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${MQ_BIN:-$SRC/build}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mq-demo.XXXXXX")
if [[ ${MQ_DEMO_KEEP:-0} == 1 ]]; then
  echo "demo directory: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
cd "$WORK"
export PATH="$BIN:$PATH"

if [[ -t 1 ]]; then BOLD=$'\e[1m' PLAIN=$'\e[0m'; else BOLD='' PLAIN=''; fi
section() { printf '\n%s## %s%s\n' "$BOLD" "$*" "$PLAIN"; }
# Prints a command, then runs it (pipes and all).
run() { printf '$ %s\n' "$1"; eval "$1"; }

for tool in mq-example-write mq-inspect; do
  command -v "$tool" >/dev/null || { echo "demo: $tool not found in $BIN (build first)" >&2; exit 69; }
done

section "1. Write a topic through liblog: 2 partitions, 400 keyed records, 4 KiB segments"
run "mq-example-write data clicks 400"

section "2. The data directory is plain files (format-spec/layout.md)"
run "find data | sort"
run "cat data/meta.properties"
run "cat data/topics/clicks.conf"

first=data/clicks-0/00000000000000000000
section "3. Dump the first segment of partition 0 like kafka-dump-log"
run "mq-inspect $first.log"
section "   ... with one line per record"
run "mq-inspect --records $first.log | head -n 14"
section "   ... its offset index and time index"
run "mq-inspect $first.index $first.timeindex"
section "   ... and as JSON Lines for scripts"
run "mq-inspect --json $first.log | head -n 2"

section "4. Verify both partitions: CRCs, offsets, indexes"
run "mq-inspect --verify data/clicks-0 data/clicks-1"

section "5. Flip one byte in the middle of a copy: --verify names file, position and rule"
run "cp -r data/clicks-0 damaged"
size=$(stat -c %s damaged/00000000000000000000.log)
run "printf '\\xff' | dd of=damaged/00000000000000000000.log bs=1 seek=$((size / 2)) conv=notrunc status=none"
set +e
run "mq-inspect --verify damaged"
status=$?
set -e
echo "(exit status $status)"
if ((status == 0)); then
  echo "demo: --verify did not notice the damaged byte" >&2
  exit 1
fi

if command -v mq-produce >/dev/null && command -v mq-consume >/dev/null; then
  section "6. A pipe of messages into a topic with mq-produce (key:value lines)"
  run "printf 'alice:hello\\nbob:hi there\\nalice:how are you?\\ncarol:good morning\\n' | mq-produce -C data -t chat --create --partitions 3 -K :"
  section "   ... read back with mq-consume, from the beginning to the end"
  run "mq-consume -C data -t chat -o beginning -e -k"
  section "   ... the same messages as JSON Lines"
  run "mq-consume -C data -t chat -o beginning -e -J"
fi

if mq-consume --help 2>&1 | grep -q -- '-G GROUP'; then
  section "7. Consumer groups: a work queue of three members (each message printed once)"
  run "seq 1 12 | awk '{print \"order\" \$1 \":shipped \" \$1}' | mq-produce -C data -t orders --create --partitions 6 -K :"
  run "for i in 1 2 3; do mq-consume -C data -t orders -G shipping -e > shipped.\$i & done; wait"
  run "wc -l shipped.1 shipped.2 shipped.3"
  section "   ... publish-subscribe: another group reads every message again"
  run "mq-consume -C data -t orders -G audit -e | wc -l"
  section "   ... each group's position: committed offsets, log end, lag"
  run "echo 'order13:shipped 13' | mq-produce -C data -t orders -K :"
  run "mq-consume -C data --describe -G shipping"
  section "   ... replay after a bug fix: move the group back (a plan first, then --execute)"
  run "mq-consume -C data --reset-offsets -G shipping -t orders --to-earliest"
  run "mq-consume -C data --reset-offsets -G shipping -t orders --to-earliest --execute > /dev/null"
  run "mq-consume -C data -t orders -G shipping -e | wc -l"
fi

section "Done"
echo "Everything above is in format-spec/ and man/ (man -l $SRC/man/man1/mq-inspect.1)."
