#!/usr/bin/env bash
# Faithful copies: mq-consume -J | mq-produce -J --keep-partition into a topic
# created --like the source keeps every message's key, value, headers,
# timestamp and partition, in the same order per partition. kcat's -J lines
# (headers as a flat array or a map, "broker", tstype "unknown") are input too.
source "$(dirname "$0")/lib/common.bash"
export MQ_DIR="$WORK/data"

# Keyed and keyless messages, with headers, in 3 partitions.
seq 1 300 | awk '{printf "{\"key\":\"k%d\",\"payload\":\"v%d\",\"ts\":%d,\"headers\":[{\"key\":\"n\",\"value\":\"%d\"}]}\n", $1 % 7, $1, 1700000000000 + $1, $1}' |
  "$P" -q -t src --create --partitions 3 -X retention.ms=1000 -J
seq 1 50 | "$P" -q -t src   # keyless: sticky partitions
"$C" -t src -e -J | "$P" -q -t dst --create --like src -J --keep-partition ||
  fail "faithful copy"
[[ $("$P" -t dst --describe | grep -v '^topic=') == $("$P" -t src --describe | grep -v '^topic=') ]] ||
  fail "--like: configurations differ"
for p in 0 1 2; do
  diff <("$C" -t src -p "$p" -e -f '%k|%s|%T|%h\n') <("$C" -t dst -p "$p" -e -f '%k|%s|%T|%h\n') >&2 ||
    fail "partition $p differs"
done
[[ $("$C" -t dst -e | wc -l) == 350 ]] || fail "dst holds $("$C" -t dst -e | wc -l) messages"

# Into fewer partitions: refused, naming the partition.
run "$P" -t one --create -J --keep-partition < <("$C" -t src -e -J)
expect_rc 64 "--keep-partition into fewer partitions"
grep -q -- "--keep-partition: partition [12], but the topic has 1 partition" "$WORK/err" ||
  fail "refusal message: $(cat "$WORK/err")"
# --keep-partition needs -J; --like needs --create and an existing source.
run "$P" -t src --keep-partition </dev/null
expect_rc 64 "--keep-partition without -J"
run "$P" -t x --create --like nosuch </dev/null
expect_rc 66 "--like of a missing topic"

# kcat's envelope.
printf '%s\n' \
  '{"topic":"x","partition":2,"offset":5,"tstype":"create","ts":1700000000000,"broker":1,"headers":["a","1","b",null],"key":"k","payload":"v"}' \
  '{"topic":"x","partition":0,"offset":6,"tstype":"unknown","ts":5,"broker":-1,"headers":{"h":["x","y"]},"key":null,"payload":"w"}' |
  "$P" -q -t kc --create -J || fail "kcat envelope"
[[ $("$C" -t kc -e -f '%k|%s|%T|%h\n') == $'k|v|1700000000000|a=1,b=\n|w|5|h=x,h=y' ]] ||
  fail "kcat envelope read back as: $("$C" -t kc -e -f '%k|%s|%T|%h\n')"
run "$P" -t kc -J < <(echo '{"payload":"v","headers":["a"]}')
expect_rc 65 "kcat headers without a value"
echo "ok"
