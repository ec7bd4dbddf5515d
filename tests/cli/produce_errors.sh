#!/usr/bin/env bash
# mq-produce: bad arguments, missing topics and oversized messages give the
# documented exit status and name what is wrong; the usage line is the man
# page's SYNOPSIS; an endless message is refused promptly in bounded memory.
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
D="$T/data"

# expect STATUS WORD CMD...: CMD exits STATUS and its stderr mentions WORD.
expect() {
  local want=$1 word=$2; shift 2
  local rc=0
  "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(cat "$T/err")"
  grep -qF -- "$word" "$T/err" || fail "$*: stderr does not name '$word': $(cat "$T/err")"
}

"$P" -C "$D" -t t --create --partitions 3 </dev/null

# Usage errors (64) name the argument.
expect 64 "--bogus" "$P" -C "$D" -t t --bogus
# A misspelt option gets the nearest one; no data directory names -C and MQ_DIR.
expect 64 "unknown option --partiton (did you mean --partition?)" "$P" -C "$D" -t t --partiton 3
expect 64 "give -C DIR (--dir DIR), or set MQ_DIR" env -u MQ_DIR "$P" -t t
expect 64 "--topic" "$P" -C "$D"
expect 64 "-p/--partition" "$P" -C "$D" -t t -p 3
expect 64 "-p/--partition" "$P" -C "$D" -t t -p -1
expect 64 "--acks" "$P" -C "$D" -t t --acks al
expect 64 "--ack-timeout" "$P" -C "$D" -t t --acks all --ack-timeout 0
expect 64 "--acks" "$P" -C "$D" -t t --acks 2
expect 64 "--fsync" "$P" -C "$D" -t t --fsync sometimes
expect 64 "--fsync" "$P" -C "$D" -t t --fsync interval:0
expect 64 "-D/--delimiter" "$P" -C "$D" -t t -D 'a\q'
expect 64 "-D/--delimiter" "$P" -C "$D" -t t -D '\x4'
expect 64 "-K/--key-delimiter" "$P" -C "$D" -t t -K ''
expect 64 "-z/--compression" "$P" -C "$D" -t t -z lz5
expect 64 "-H/--header" "$P" -C "$D" -t t -H novalue
expect 64 "--print-offsets" "$P" -C "$D" -t t --acks 0 --print-offsets
expect 64 "producer id" "$P" -C "$D" -t t --producer-id 'bad/name'
expect 64 "--partitions" "$P" -C "$D" -t t --partitions 2
expect 64 "--partitions" "$P" -C "$D" -t t --create --partitions 5
expect 64 "-X/--config" "$P" -C "$D" -t new --create -X no.such.key=1
# --create never ignores a setting: one that contradicts another, or the
# existing topic's, is an error naming it; the same value is fine.
"$P" -q -C "$D" -t r --create -X retention.ms=5 </dev/null
expect 64 "retention.ms" "$P" -C "$D" -t r --create -X retention.ms=6
"$P" -q -C "$D" -t r --create -X retention.ms=5 </dev/null || fail "--create with the topic's own setting"
expect 64 "--partitions 2" "$P" -C "$D" -t c2 --create --partitions 2 -X partitions=3
[[ ! -e "$D/topics/c2.conf" ]] || fail "a contradictory --create created the topic"
# Repeatable options take one value each: FILE after -H or -X is an input.
echo hello >"$T/in.txt"
"$P" -q -C "$D" -t r --create -X retention.ms=5 -H h=1 "$T/in.txt" ||
  fail "-X and -H before a FILE"
[[ $("$C" -C "$D" -t r -e -f '%h %s') == "h=1 hello" ]] || fail "-H before a FILE"
# Every input is opened before anything is appended.
expect 66 "nosuch.txt" "$P" -C "$D" -t r "$T/in.txt" "$T/nosuch.txt"
[[ $("$C" -C "$D" -t r -e | wc -l) == 1 ]] || fail "the first input was appended before the second failed"
expect 64 "excludes" "$P" -C "$D" -t t -0 -D x
expect 64 "excludes" "$P" -C "$D" -t t -J -K x

# Missing things (66).
expect 66 "no topic" "$P" -C "$D" -t missing
expect 66 "use --create" "$P" -C "$D" -t missing
expect 66 "$T/nowhere" "$P" -C "$T/nowhere" -t t
expect 66 "$T/no-such-file" "$P" -C "$D" -t t "$T/no-such-file"
[ ! -e "$D/topics/missing.conf" ] || fail "a missing topic was created without --create"

# -h and -V exit 0 on stdout.
"$P" -h | grep -q "^Usage: mq-produce" || fail "-h does not print the usage"
"$P" -V | grep -q "^mq-produce " || fail "-V does not print the version"

# The usage lines equal the man page's SYNOPSIS.
"$P" -h | sed -n '1,/^$/p' | sed -e 's/^Usage: //' -e 's/^       //' -e '/^$/d' >"$T/usage"
sed -n '/^\.SH SYNOPSIS/,/^\.SH/p' "$MQ_SRC/man/man1/mq-produce.1" | grep -v '^\.' |
  sed -e 's/\\f[BIR]//g' -e 's/\\-/-/g' >"$T/synopsis"
diff -u "$T/synopsis" "$T/usage" || fail "usage and man SYNOPSIS differ"

# --describe prints the configuration.
"$P" -C "$D" -t t --describe >"$T/describe"
grep -qx "partitions=3" "$T/describe" || fail "--describe lacks partitions=3: $(cat "$T/describe")"

# A message over the maximum is refused (65) naming input, line and offset;
# the messages before it are still appended.
"$P" -C "$D" -t small --create -X max.message.bytes=100 </dev/null
{ echo first; head -c 101 /dev/zero | tr '\0' x; echo; echo third; } >"$T/big.txt"
expect 65 "line 2 at byte offset 6" "$P" -C "$D" -t small -q --print-offsets "$T/big.txt"
grep -qx "0 0" "$T/out" || fail "the message before the oversized one was not acknowledged"
[ "$(wc -l <"$T/out")" = 1 ] || fail "messages after the oversized one were appended"
# Exactly the maximum is fine; --max-message-bytes lowers it.
head -c 100 /dev/zero | tr '\0' y | "$P" -C "$D" -t small -q
head -c 50 /dev/zero | tr '\0' y >"$T/fifty"
expect 65 "larger than" "$P" -C "$D" -t small --max-message-bytes 49 "$T/fifty"
expect 65 "message 1" "$P" -C "$D" -t small -0 "$T/big.txt"

# 2 GiB without a newline: refused promptly, in bounded memory.
set +e
/usr/bin/time -f "%M" -o "$T/rss" timeout 60 bash -c \
  "head -c 2G /dev/zero | '$P' -C '$D' -t t -q" 2>"$T/err"
rc=$?
set -e
[ "$rc" = 65 ] || fail "2 GiB line: exit $rc, not 65: $(cat "$T/err")"
grep -q "larger than the maximum message size" "$T/err" || fail "2 GiB line: $(cat "$T/err")"
rss_kb=$(tail -1 "$T/rss")
[ "$rss_kb" -lt 65536 ] || fail "2 GiB line: peak RSS ${rss_kb} KiB"
echo "ok: 2 GiB line refused, peak RSS ${rss_kb} KiB"

# A second run with a producer id in use exits 75. The sleep itself holds
# the lock (flock(1) would run it as a child, which a kill of flock leaves
# holding the lock, and ctest's output pipe, for its 30 s); the check starts
# once /proc/locks shows the lock held.
"$P" -C "$D" -t t --producer-id busy -q </dev/null
(exec 9>>"$D/producers/busy.lock"; flock 9; exec sleep 30) >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1 600); do  # a guard against a hang, not a timing assertion
  lock_held "$D/producers/busy.lock" && break
  sleep 0.05
done
lock_held "$D/producers/busy.lock" || fail "the lock holder never took producers/busy.lock"
expect 75 "in use" "$P" -C "$D" -t t --producer-id busy
kill "$holder"
wait "$holder" 2>/dev/null || true
echo "ok: produce_errors"
