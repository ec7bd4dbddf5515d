#!/usr/bin/env bash
# R126 (format-spec/compaction.md): mq-produce refuses a message without a
# key to a topic with cleanup.policy=compact: exit 65 (EX_DATAERR, the
# input's data, as a message over the maximum size), naming the input, its
# line and R126; keyed messages (-k, -K, a JSON envelope's key) are taken,
# and a delete topic takes keyless ones.
source "$(dirname "$0")/lib/common.bash"
D="$WORK/data"
export MQ_DIR="$D"
"$BIN/mq-topic" create kv -X cleanup.policy=compact
"$BIN/mq-topic" create plain
count() { "$C" -t "$1" -e -f '%o\n' | wc -l; }

# A keyless message: refused, nothing appended.
printf 'v1\n' >"$WORK/keyless"
run "$P" -t kv "$WORK/keyless"
expect_rc 65 "a keyless message to a compacted topic"
grep -qF "$WORK/keyless: line 1: position 0: R126: a message without a key" "$WORK/err" ||
  fail "stderr: $(cat "$WORK/err")"
grep -qF 'topic "kv" has cleanup.policy=compact' "$WORK/err" || fail "stderr: $(cat "$WORK/err")"
expect_eq "appended after the refusal" 0 "$(count kv)"

# -K: a line without the delimiter has no key; the refusal names its line.
printf 'a:1\nb:2\nno-key\na:3\n' >"$WORK/mixed"
run "$P" -t kv -K : "$WORK/mixed"
expect_rc 65 "-K with a line without the delimiter"
grep -qF "$WORK/mixed: line 3: position 8: R126" "$WORK/err" || fail "stderr: $(cat "$WORK/err")"
(( $(count kv) <= 2 )) ||
  fail "more than the two keyed lines before it were appended: $("$C" -t kv -e -f '%k=%s\n')"

# JSON: a null key is refused, a key taken.
printf '{"key":null,"payload":"x"}\n' >"$WORK/null.json"
run "$P" -t kv -J "$WORK/null.json"
expect_rc 65 "a JSON envelope with a null key"
grep -qF "line 1: position 0: R126" "$WORK/err" || fail "stderr: $(cat "$WORK/err")"
printf '{"key":"j","payload":"x"}\n' | "$P" -t kv -J

# Keyed messages are taken: -k, -K.
printf 'v\n' | "$P" -t kv -k fixed
printf 'a:4\nb:5\n' | "$P" -t kv -K :
"$C" -t kv -e -f '%k=%s\n' >"$WORK/got"
grep -qx 'j=x' "$WORK/got" && grep -qx 'fixed=v' "$WORK/got" && grep -qx 'b=5' "$WORK/got" ||
  fail "keyed messages missing: $(cat "$WORK/got")"

# A delete topic takes a keyless message.
run "$P" -t plain "$WORK/keyless"
expect_rc 0 "a keyless message to a delete topic"
expect_eq "the delete topic's messages" 1 "$(count plain)"
echo "ok: produce_compact_keys"
