#!/usr/bin/env bash
# Byte counts on every tool's command line take a suffix, k, M or G (or
# KiB, MiB, GiB), powers of 1024, as mq-replicate's already did: the same
# value with and without one behaves the same, 1k is 1024 (not 1000), and a
# bad count exits 64 naming its option.
source "$(dirname "$0")/lib/common.bash"
D="$WORK/data"
REPLICATE="$BIN/mq-replicate"

# batch_sizes DIR: the size of every batch of DIR's topic t, one per line.
batch_sizes() {
  "$INSPECT" -J "$1/t-0/00000000000000000000.log" | jq -r 'select(.type == "batch") | .size'
}

# --- mq-produce --batch-bytes: 1k and 1KiB build the batches 1024 builds, not 1000's -------
# 40-byte lines: batches of at most 1000 bytes hold one message less than
# those of at most 1024.
seq 1 400 | awk '{printf "%040d\n", $1}' >"$WORK/lines"
for n in 1024 1k 1KiB 1000; do
  "$P" -C "$WORK/b$n" -t t --create -q --batch-bytes "$n" "$WORK/lines" ||
    fail "--batch-bytes $n exited $?"
  batch_sizes "$WORK/b$n" >"$WORK/sizes$n"
done
[ "$(wc -l <"$WORK/sizes1024")" -gt 10 ] || fail "--batch-bytes 1024 built too few batches"
awk '$1 > 1024 { exit 1 }' "$WORK/sizes1024" || fail "--batch-bytes 1024 built a batch over 1024 bytes"
cmp -s "$WORK/sizes1024" "$WORK/sizes1k" || fail "--batch-bytes 1k built other batches than 1024"
cmp -s "$WORK/sizes1024" "$WORK/sizes1KiB" || fail "--batch-bytes 1KiB built other batches than 1024"
! cmp -s "$WORK/sizes1024" "$WORK/sizes1000" || fail "--batch-bytes 1000 and 1024 built the same batches"

# --- mq-produce --max-message-bytes 1k: 1024 bytes pass, 1025 do not -----------------------
"$P" -C "$D" -t t --create -q </dev/null
head -c 1024 /dev/zero | tr '\0' x >"$WORK/m1024"
head -c 1025 /dev/zero | tr '\0' x >"$WORK/m1025"
run "$P" -C "$D" -t t -q -0 --max-message-bytes 1k "$WORK/m1024"
expect_rc 0 "a 1024-byte message under --max-message-bytes 1k"
run "$P" -C "$D" -t t -q -0 --max-message-bytes 1k "$WORK/m1025"
expect_rc 65 "a 1025-byte message under --max-message-bytes 1k"
grep -q "1024 bytes" "$WORK/err" || fail "the refusal does not give the limit: $(cat "$WORK/err")"

# --- mq-produce --append-bytes ---------------------------------------------------------------
run "$P" -C "$D" -t t -q --append-bytes 1M "$WORK/lines"
expect_rc 0 "--append-bytes 1M"
expect_eq "messages after --append-bytes 1M" 401 "$("$C" -C "$D" -t t -e -q | wc -l)"

# --- mq-inspect --max-batch-bytes: 1k refuses what 1024 refuses, 4k reads it --------------
"$P" -C "$WORK/big" -t t --create -q --batch-bytes 2k "$WORK/lines"
awk '$1 > 1024 { big = 1 } END { exit !big }' <(batch_sizes "$WORK/big") ||
  fail "--batch-bytes 2k built no batch over 1024 bytes"
# A copy outside the data directory: no topic configuration raises the limit.
mkdir "$WORK/copy"
LOG="$WORK/copy/00000000000000000000.log"
cp "$WORK/big/t-0/00000000000000000000.log" "$LOG"
for n in 1024 1k; do
  run "$INSPECT" --verify --max-batch-bytes "$n" "$LOG"
  expect_rc 65 "mq-inspect --verify --max-batch-bytes $n on 2 KiB batches"
  grep -q "R2" "$WORK/out" "$WORK/err" || fail "--max-batch-bytes $n: no R2: $(cat "$WORK/out" "$WORK/err")"
done
run "$INSPECT" --verify --max-batch-bytes 4KiB "$LOG"
expect_rc 0 "mq-inspect --verify --max-batch-bytes 4KiB"
# mq-consume raises its limit to what the topic accepts (mq-consume(1)): a
# count with a suffix is taken, and one below a batch header is refused.
run "$C" -C "$WORK/big" -t t -e -q --max-batch-bytes 1k
expect_rc 0 "mq-consume --max-batch-bytes 1k"
expect_eq "messages read with --max-batch-bytes 1k" 400 "$(wc -l <"$WORK/out")"

# --- bad counts exit 64 and name the option --------------------------------------------------
# expect_usage NAME CMD...: CMD exits 64 and its stderr names NAME.
expect_usage() {
  local name=$1; shift
  run "$@"
  expect_rc 64 "$*"
  grep -qF -- "$name" "$WORK/err" || fail "$*: stderr does not name $name: $(cat "$WORK/err")"
}
expect_usage --append-bytes "$P" -C "$D" -t t --append-bytes 2x
expect_usage --append-bytes "$P" -C "$D" -t t --append-bytes 1.5M
expect_usage --append-bytes "$P" -C "$D" -t t --append-bytes 2G
expect_usage --batch-bytes "$P" -C "$D" -t t --batch-bytes 20E
expect_usage --max-message-bytes "$P" -C "$D" -t t --max-message-bytes 1q
expect_usage --max-batch-bytes "$C" -C "$D" -t t --max-batch-bytes 2G
expect_usage --max-batch-bytes "$C" -C "$D" -t t --max-batch-bytes 0k
expect_usage --max-batch-bytes "$INSPECT" --verify --max-batch-bytes 10k0 "$D"
expect_usage --fetch-max-bytes "$REPLICATE" -C "$D" --fetch-max-bytes 2x
echo "ok"
