#!/usr/bin/env bash
# mq-produce round trips: every byte of every message survives in each input
# framing (lines, -0, multi-byte -D, -K, -J), files and stdin, tombstones
# and headers; read back with mq-consume.
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
D="$T/data"
produce() { "$P" -C "$D" -q "$@"; }
consume() { "$C" -C "$D" -e -q "$@"; }
same() { cmp "$1" "$2" || { od -c "$1" | head -20; od -c "$2" | head -20; fail "$3"; }; }

# Awkward bytes: NUL, CR, invalid UTF-8, a lone high byte, tabs, an empty
# message, backslashes, and a last message without its delimiter.
awkward() {  # awkward SEP: the messages, each followed by SEP except the last
  local sep=$1
  printf 'plain%b' "$sep"
  printf 'nul\000inside%b' "$sep"
  printf 'cr at end\r%b' "$sep"
  printf '\xff\xfe invalid utf8 \xc3%b' "$sep"
  printf '%b' "$sep"
  printf 'tab\there \\ backslash%b' "$sep"
  printf 'last without delimiter'
}

# 1. Lines (default), from stdin: the value per line comes back, plus the
# newline the consumer adds after the last message.
awkward '\n' >"$T/lines.in"
produce -t lines --create <"$T/lines.in"
consume -t lines >"$T/lines.out"
{ cat "$T/lines.in"; printf '\n'; } >"$T/lines.want"
same "$T/lines.want" "$T/lines.out" "line round trip"
[ "$(consume -t lines -f '%o\n' | tail -1)" = 6 ] || fail "expected 7 line messages"

# 2. NUL-delimited (-0): messages may hold newlines.
{ printf 'a\nb\000'; printf '\xff\n\r\000'; printf '\000'; printf 'end'; } >"$T/nul.in"
produce -t nul --create -0 "$T/nul.in"
consume -t nul -0 >"$T/nul.out"
{ cat "$T/nul.in"; printf '\000'; } >"$T/nul.want"
same "$T/nul.want" "$T/nul.out" "-0 round trip"

# 3. A multi-byte delimiter given with escapes; a partial delimiter inside
# a message does not end it.
{ awkward '\r\n--\x01'; printf '\r\n-half delimiter\r\n--\x01'; } >"$T/multi.in"
produce -t multi --create -D '\r\n--\x01' <"$T/multi.in"
[ "$(consume -t multi -f '%o\n' | tail -1)" = 6 ] || fail "expected 7 -D messages"
consume -t multi -D '\r\n--\x01' >"$T/multi.out"
same "$T/multi.in" "$T/multi.out" "-D round trip"

# 4. Keys: -K splits at the first delimiter; no delimiter means a null key.
printf 'k1\tv1\nk2\tv\t2\nno key here\n\tempty key\n' >"$T/keys.in"
produce -t keys --create -K '\t' "$T/keys.in"
consume -t keys -Z -f '%k|%s\n' >"$T/keys.out"
printf 'k1|v1\nk2|v\t2\nNULL|no key here\n|empty key\n' >"$T/keys.want"
same "$T/keys.want" "$T/keys.out" "-K round trip"
printf 'x\ny\n' | produce -t keys -k fixed -H 'h1=one' -H 'h2=t=wo'
consume -t keys -o 4 -J >"$T/fixed.json"
[ "$(jq -r '.key' "$T/fixed.json" | sort -u)" = fixed ] || fail "-k: $(cat "$T/fixed.json")"
[ "$(jq -c '.headers' "$T/fixed.json" | sort -u)" = \
  '[{"key":"h1","value":"one"},{"key":"h2","value":"t=wo"}]' ] || fail "-H: $(cat "$T/fixed.json")"

# 5. Tombstones: -Z turns empty values into nulls.
printf 'a\n\nb\n' | produce -t tomb --create -Z
[ "$(consume -t tomb -J | jq -c '.payload')" = "$(printf '"a"\nnull\n"b"')" ] ||
  fail "-Z: $(consume -t tomb -J)"

# 6. JSON envelope: binary-safe fields, null payload, headers, timestamps.
cat >"$T/env.in" <<'J'
{"key":"k","payload":"v","ts":1700000000000,"headers":[{"key":"h","value":"x"}]}
{"key":null,"payload":null,"ts":1700000000001}
{"key_b64":"/wA=","payload_b64":"AP/+DQo=","ts":1700000000002,"headers":[{"key":"b","value_b64":"gA=="},{"key":"n","value":null}]}
{"topic":"elsewhere","partition":9,"offset":99,"payload":"line\nwith \"escapes\" \u00e9","ts":5}
J
produce -t json --create -J "$T/env.in"
consume -t json -J >"$T/env.out"
jq -c '{key,key_b64,payload,payload_b64,ts,headers:(.headers // [])}' "$T/env.in" >"$T/env.want"
jq -c '{key,key_b64,payload,payload_b64,ts,headers:(.headers // [])}' "$T/env.out" >"$T/env.got"
same "$T/env.want" "$T/env.got" "-J round trip"

# 7. mq-consume -J | mq-produce -J copies a topic byte for byte, and a copy
# of the copy is identical (keys, values, headers, timestamps).
consume -t lines -J | produce -t copy --create -J
consume -t copy >"$T/copy.out"
same "$T/lines.want" "$T/copy.out" "consume -J | produce -J copy"
consume -t copy -J | jq -c 'del(.topic)' >"$T/copy.json"
consume -t lines -J | jq -c 'del(.topic)' >"$T/orig.json"
same "$T/orig.json" "$T/copy.json" "copied envelopes differ"

# 8. Several inputs, '-' among them, in order; zstd batches read back the same.
printf 'one\ntwo\n' >"$T/f1"
printf 'four\n' >"$T/f2"
printf 'three\n' | produce -t files --create -z zstd --zstd-level 5 "$T/f1" - "$T/f2"
[ "$(consume -t files | tr '\n' ' ')" = "one two three four " ] || fail "inputs out of order"

# 9. Random binary lines (no newline inside), many batches, in every codec.
head -c 3000000 /dev/urandom | tr '\n' 'n' | fold -b -w 97 >"$T/rand.in"
for z in none gzip snappy lz4 zstd; do
  produce -t "rand-$z" --create -z "$z" --batch-bytes 4096 "$T/rand.in"
  consume -t "rand-$z" >"$T/rand.out"
  { cat "$T/rand.in"; [ -z "$(tail -c1 "$T/rand.in")" ] || printf '\n'; } >"$T/rand.want"
  same "$T/rand.want" "$T/rand.out" "random binary round trip ($z)"
done
# 10. Every codec (as kcat's -z offers them): keys, values and headers of
# compressible text come back byte for byte; the batches carry the codec,
# are smaller than the text, and verify.
seq 1 30000 | awk '{printf "key-%d\tvalue %d of a compressible line %s\n",$1,$1*7919,"abcabcabc"}' \
  >"$T/text.in"
for z in none gzip snappy lz4 zstd; do
  produce -t "text-$z" --create -z "$z" -K '\t' -H "codec=$z" "$T/text.in"
  consume -t "text-$z" -f '%k\t%s\n' >"$T/text.out"
  same "$T/text.in" "$T/text.out" "keyed text round trip ($z)"
  [ "$(consume -t "text-$z" -c 1 -f '%h\n')" = "codec=$z" ] || fail "header lost ($z)"
  "$INSPECT" -d --json "$D/text-$z-0"/00000000000000000000.log | jq -se --arg z "$z" \
    '[.[] | select(.type == "batch") | .compression] | unique == [$z]' >/dev/null ||
    fail "a batch of text-$z is not $z"
  "$INSPECT" --verify "$D/text-$z-0" >/dev/null || fail "verify text-$z"
  size=$(cat "$D/text-$z-0"/*.log | wc -c)
  if [ "$z" = none ]; then plain=$size
  elif ((size * 2 >= plain)); then fail "$z batches take $size bytes, uncompressed $plain"
  fi
  # --batch-bytes bounds a compressed batch as written (as in Kafka's
  # producer): text compressed at least 2:1 takes fewer batches than
  # uncompressed (the ratio is learned from the first batches compressed,
  # so how many fewer depends on timing), and no batch passes 128 KiB of
  # records (30,000 lines of about 75 bytes: 17 batches at least).
  batches=$("$INSPECT" -d --json "$D/text-$z-0"/00000000000000000000.log |
            jq -s '[.[] | select(.type == "batch")] | length')
  if [ "$z" = none ]; then plain_batches=$batches
  elif ((batches >= plain_batches || batches < 17)); then
    fail "$z: $batches batches, $plain_batches uncompressed"
  fi
done
# An unknown codec is a usage error naming them all.
set +e
produce -t text-none -z brotli </dev/null 2>"$T/err"
rc=$?
set -e
[ "$rc" = 64 ] || fail "-z brotli: exit $rc"
grep -q "none, gzip, snappy, lz4 or zstd" "$T/err" || fail "-z brotli: $(cat "$T/err")"
echo "ok: produce_roundtrip"
