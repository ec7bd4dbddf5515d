#!/usr/bin/env bash
# Recipe: a handler with retries and a dead-letter topic (mq-consume(1),
# HANDLERS).
#
#   MQ_BIN=build examples/handler-retry-dlq.sh
#
# A consumer group "billing" bills the orders of topic "orders" with a
# handler that fails now and then (a flaky downstream: retried with
# backoff) and always on a malformed order (a poison message: after the
# last attempt it goes to the dead-letter topic "orders.dlq", with headers
# saying why, and the group moves past it). The handler is idempotent: it
# bills each MQ_MESSAGE_ID once, so a rerun after a crash, or a replay,
# bills nothing twice. Then the dead letters are read, fixed and produced back, and
# billed. The recipe checks each step and exits non-zero if one does not
# hold (tests/cli/examples.sh runs it).
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
for tool in mq-produce mq-consume jq; do
  command -v "$tool" >/dev/null || { echo "recipe: $tool not found (build first)" >&2; exit 69; }
done

# Prints a command, then runs it (pipes and all).
run() { printf '$ %s\n' "$1"; eval "$1"; }
check() {  # check WHAT TEST...: the recipe's claim WHAT holds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "recipe: FAILED: $what" >&2; exit 1; fi
}

echo "## 1. Twenty orders, two of them malformed"
for i in $(seq 1 20); do
  if ((i == 7 || i == 15)); then echo "order-$i:???"; else echo "order-$i:$((i * 10))"; fi
done >orders.txt
run "mq-produce -t orders --create --partitions 2 -K : < orders.txt"

echo
echo "## 2. The handler: bills an order once per message id; a flaky downstream"
echo "##    fails every 4th order's first attempt; a malformed order always fails"
cat >bill.sh <<'EOF'
#!/bin/sh
amount=$(cat)
case $amount in
  '' | *[!0-9]*) echo "malformed amount '$amount' in $MQ_KEY" >&2; exit 65 ;;
esac
# Idempotent: a message billed already (a rerun) is not billed again.
grep -qxF "$MQ_MESSAGE_ID $MQ_KEY $amount" billed.txt 2>/dev/null && exit 0
n=${MQ_KEY#order-}
if [ $((n % 4)) = 0 ] && mkdir "tried-$n" 2>/dev/null; then
  echo "downstream busy for $MQ_KEY" >&2; exit 75
fi
echo "$MQ_MESSAGE_ID $MQ_KEY $amount" >>billed.txt
EOF
chmod +x bill.sh
run "cat bill.sh"

echo
echo "## 3. Handle every order: up to 3 attempts each, 50 ms backoff, then the DLQ"
run "mq-consume -t orders -G billing -e --max-attempts 3 --retry-backoff 50 --dlq orders.dlq --exec ./bill.sh"
run "wc -l < billed.txt"
check "18 orders billed, each once" test "$(wc -l <billed.txt)" = 18 -a "$(sort -u billed.txt | wc -l)" = 18
check "the flaky ones retried (orders 4, 8, 12, 16, 20 billed)" \
  test "$(grep -cE ' order-(4|8|12|16|20) ' billed.txt)" = 5

echo
echo "## 4. The dead letters: the message, then why (mq.dlq.* headers)"
run "mq-consume -t orders.dlq -e -J | jq -c '{key, payload, why: (.headers | from_entries | {\"mq.dlq.offset\", \"mq.dlq.attempts\", \"mq.dlq.exit\", \"mq.dlq.stderr\"})}'"
check "orders 7 and 15 dead-lettered after 3 attempts with exit 65" test \
  "$(mq-consume -t orders.dlq -e -J | jq -r '[.key, (.headers | from_entries | .["mq.dlq.attempts"], .["mq.dlq.exit"])] | join(" ")' | sort | tr '\n' ',')" \
  = "order-15 3 65,order-7 3 65,"
run "mq-consume --describe -G billing"
check "the group is past them (lag 0) and counts 2 dead letters" test \
  "$(mq-consume --describe -G billing -J | jq -r 'select(.type == "summary") | "\(.total_lag) \(.dead_letters)"')" = "0 2"

echo
echo "## 5. A replay (the group moved back to the start) bills nothing twice, and"
echo "##    appends no dead letter twice: the DLQ already holds them"
run "mq-consume --reset-offsets -G billing -t orders --to-earliest --execute > /dev/null"
run "mq-consume -t orders -G billing -e -q --max-attempts 3 --retry-backoff 50 --dlq orders.dlq --exec ./bill.sh 2>/dev/null"
check "still 18 billed" test "$(wc -l <billed.txt)" = 18
check "still 2 dead letters in orders.dlq" test "$(mq-consume -t orders.dlq -e | wc -l)" = 2

echo
echo "## 6. Fix the dead letters and produce them back (without the mq.dlq.* headers)"
run "mq-consume -t orders.dlq -e -J | jq -c '.payload = \"0\" | del(.headers)' | mq-produce -t orders -J"
run "mq-consume -t orders -G billing -e --max-attempts 3 --retry-backoff 50 --dlq orders.dlq --exec ./bill.sh"
check "all 20 orders billed, each once" test "$(cut -d' ' -f2 billed.txt | sort -u | wc -l)" = 20 -a "$(wc -l <billed.txt)" = 20
check "no new dead letter" test "$(mq-consume -t orders.dlq -e | wc -l)" = 2
echo
echo "Done: retries absorbed the flaky failures, the dead-letter topic kept the poison messages."
