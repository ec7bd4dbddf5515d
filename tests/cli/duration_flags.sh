#!/usr/bin/env bash
# Millisecond flags take a unit (ms, s, m, h, d, w; none: milliseconds) through
# liblog's one parser of durations, as topic keys do: `--linger-ms 1m` lingers
# a minute, not one millisecond; `--max-poll-interval 1s` is 1000 ms; a bad
# duration exits 64 naming its option.
source "$(dirname "$0")/lib/common.bash"
D="$WORK/data"

# batches DIR: the number of batches of DIR's topic t.
batches() {
  "$INSPECT" -J "$1/t-0/00000000000000000000.log" | jq -r 'select(.type == "batch") | .size' | wc -l
}

# --- mq-produce --linger-ms: a pause shorter than the linger joins two lines in one batch ----
# Input ends right after the second line, so a long linger costs nothing.
for linger in 1m 60000 1 0ms; do
  { echo a; sleep 0.3; echo b; } | "$P" -C "$WORK/l$linger" -t t --create -q --linger-ms "$linger" ||
    fail "--linger-ms $linger exited $?"
done
expect_eq "batches with --linger-ms 1m" 1 "$(batches "$WORK/l1m")"
expect_eq "batches with --linger-ms 60000" 1 "$(batches "$WORK/l60000")"
expect_eq "batches with --linger-ms 1" 2 "$(batches "$WORK/l1")"
expect_eq "batches with --linger-ms 0ms" 2 "$(batches "$WORK/l0ms")"

# --- mq-produce --fsync interval:DURATION ------------------------------------------------------
run "$P" -C "$D" -t t --create -q --fsync interval:2s <<<"x"
expect_rc 0 "--fsync interval:2s"

# --- mq-consume --max-poll-interval 1s: a handler stuck past 1000 ms is given up --------------
seq 2 | "$P" -C "$D" -t t -q
run "$C" -C "$D" -t t -G g -e --max-poll-interval 1s --exec sleep 30
expect_rc 75 "a handler stuck past --max-poll-interval 1s"
grep -qF "(--max-poll-interval 1000)" "$WORK/err" ||
  fail "--max-poll-interval 1s is not 1000 ms: $(cat "$WORK/err")"

# --- bad durations exit 64 and name the option -------------------------------------------------
# expect_usage NAME CMD...: CMD exits 64 and its stderr names NAME.
expect_usage() {
  local name=$1; shift
  run "$@"
  expect_rc 64 "$*"
  grep -qF -- "$name" "$WORK/err" || fail "$*: stderr does not name $name: $(cat "$WORK/err")"
}
expect_usage --linger-ms "$P" -C "$D" -t t --linger-ms 5x
expect_usage --linger-ms "$P" -C "$D" -t t --linger-ms 2h
expect_usage --ack-timeout "$P" -C "$D" -t t --ack-timeout 1.5s
expect_usage "--fsync interval" "$P" -C "$D" -t t --fsync interval:0
expect_usage "--fsync interval" "$P" -C "$D" -t t --fsync interval:2d
expect_usage --commit-interval "$C" -C "$D" -t t -G g --commit-interval 0s
expect_usage --max-poll-interval "$C" -C "$D" -t t -G g --max-poll-interval 3y
expect_usage --session-timeout "$C" -C "$D" -t t -G g --member-id m --session-timeout -1s
expect_usage --retry-backoff "$C" -C "$D" -t t -G g --retry-backoff 2h --exec true
# --- mq-compact --protect-max-ms and --delete-delay-ms ---------------------------------------
run "$BIN/mq-compact" -C "$D" --delete-delay-ms 1m --protect-max-ms 7d
expect_rc 0 "mq-compact --delete-delay-ms 1m --protect-max-ms 7d"
expect_usage --delete-delay-ms "$BIN/mq-compact" -C "$D" --delete-delay-ms 1y
expect_usage --protect-max-ms "$BIN/mq-compact" -C "$D" --protect-max-ms 10q
echo "ok"
