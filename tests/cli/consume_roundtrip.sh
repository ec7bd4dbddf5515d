#!/usr/bin/env bash
# Every byte survives mq-produce -> mq-consume in each framing (lines, -0,
# multi-byte -D, -J), and mq-consume -J | mq-produce -J copies a topic with
# keys, headers and timestamps byte for byte.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
consume() { "$BIN/mq-consume" "$@"; }

# Awkward messages: empty, CR, NUL inside, invalid UTF-8, control bytes,
# quotes and backslashes, multi-byte UTF-8, a large random one.
messages() {  # writes each message followed by the separator $1
  local sep="$1"
  printf 'plain%b' "$sep"
  printf '%b' "$sep"                          # empty
  printf 'cr at end\r%b' "$sep"
  printf 'a\0b\0%b' "$sep"                    # NUL inside
  printf '\xff\xfe\xc3(%b' "$sep"             # not UTF-8
  printf 'ctl\x01\x1f\x7f tab\t"q" \\b%b' "$sep"
  printf 'h\xc3\xa9llo \xe2\x82\xac%b' "$sep" # UTF-8
  head -c 150000 /dev/urandom | base64 -w0
  printf '%b' "$sep"
}

produce -t init --create --partitions 1 </dev/null

# --- one message per line --------------------------------------------------------
messages '\n' >"$WORK/lines.in"
produce -t lines --create <"$WORK/lines.in"
consume -t lines -e >"$WORK/lines.out"
cmp "$WORK/lines.in" "$WORK/lines.out" || fail "lines: output differs from input"
[[ $(consume -t lines -e | wc -l) == 8 ]] || fail "lines: want 8 messages"

# --- NUL-terminated, with newlines and random bytes inside messages ----------------
{
  printf 'line one\nline two\0'
  printf '\r\n\0'
  printf '\0'                                    # empty
  printf '\xff\xfe\xfd\0'
  head -c 200000 /dev/urandom | tr -d '\0'
  printf '\0'
} >"$WORK/nul.in"
produce -t nul --create -0 <"$WORK/nul.in"
consume -t nul -e -0 >"$WORK/nul.out"
cmp "$WORK/nul.in" "$WORK/nul.out" || fail "-0: output differs from input"

# --- a multi-byte delimiter ------------------------------------------------------
messages '\x1e\x1d' >"$WORK/delim.in"
produce -t delim --create -D '\x1e\x1d' <"$WORK/delim.in"
consume -t delim -e -D '\x1e\x1d' >"$WORK/delim.out"
cmp "$WORK/delim.in" "$WORK/delim.out" || fail "-D multi-byte: output differs from input"
# The same messages, newline-terminated, read with the same framing as written.
consume -t delim -e -c 1 -D '<end>' >"$WORK/one"
[[ "$(cat "$WORK/one")" == "plain<end>" ]] || fail "-D '<end>': $(cat "$WORK/one")"
# --raw: no delimiter at all.
[[ "$(consume -t lines -e -c 3 --raw)" == "plaincr at end"$'\r' ]] || fail "--raw"

# --- JSON Lines: canonical envelopes survive produce -J -> consume -J unchanged -------
B64=$(printf '\xff\x00\xfe' | base64)
cat >"$WORK/env.in" <<JSON
{"topic":"env","partition":0,"offset":0,"tstype":"create","ts":1700000000000,"key":"k1","payload":"v1","headers":[]}
{"topic":"env","partition":0,"offset":1,"tstype":"create","ts":1700000000001,"key":null,"payload":"no key","headers":[{"key":"h","value":"x"},{"key":"h2","value":null}]}
{"topic":"env","partition":0,"offset":2,"tstype":"create","ts":1700000000002,"key":"tomb","payload":null,"headers":[]}
{"topic":"env","partition":0,"offset":3,"tstype":"create","ts":1,"key_b64":"$B64","payload_b64":"$B64","headers":[{"key":"bin","value_b64":"$B64"}]}
{"topic":"env","partition":0,"offset":4,"tstype":"create","ts":1700000000004,"key":"","payload":"","headers":[{"key":"","value":""}]}
{"topic":"env","partition":0,"offset":5,"tstype":"create","ts":1700000000005,"key":"esc\"\\\\\n\t\u0001","payload":"h\u00e9llo \u20ac \u0000 nul","headers":[]}
JSON
produce -t env --create -J <"$WORK/env.in"
consume -t env -e -J >"$WORK/env.out"
# Line 6 (\u escapes of printable characters) comes back as UTF-8 bytes with
# only the escapes JSON needs; the heredoc turned its \\\\ into \\.
diff <(head -5 "$WORK/env.in") <(head -5 "$WORK/env.out") >&2 || fail "-J: envelopes changed"
tail -1 "$WORK/env.out" | grep -qF '"key":"esc\"\\\n\t\u0001"' || fail "-J escapes: $(tail -1 "$WORK/env.out")"
tail -1 "$WORK/env.out" | grep -qF $'"payload":"h\xc3\xa9llo \xe2\x82\xac \\u0000 nul"' ||
  fail "-J UTF-8 payload: $(tail -1 "$WORK/env.out")"

# --- copy a topic: consume -J | produce -J is byte-identical -----------------------
for src in lines nul delim env; do
  consume -t "$src" -e -J | produce -t "copy-$src" --create -J
  diff <(consume -t "$src" -e -J | sed "s/^{\"topic\":\"$src\"/{\"topic\":\"copy-$src\"/") \
       <(consume -t "copy-$src" -e -J) >/dev/null || fail "copy of $src differs (-J)"
  cmp <(consume -t "$src" -e -0) <(consume -t "copy-$src" -e -0) || fail "copy of $src differs (-0)"
  cmp <(consume -t "$src" -e -f '%k|%S|%T|%h\n') <(consume -t "copy-$src" -e -f '%k|%S|%T|%h\n') ||
    fail "copy of $src: keys, timestamps or headers differ"
done

# --- every -J line is valid JSON whatever the bytes --------------------------------
command -v jq >/dev/null || fail "jq is not installed (./build.sh installs it)"
for t in lines nul delim env; do
  consume -t "$t" -e -J | jq -e . >/dev/null || fail "-J output of $t is not valid JSON"
done
# Invalid UTF-8 goes to _b64 fields, valid text stays plain.
consume -t lines -e -J -o 4 -c 1 | jq -e 'has("payload_b64") and (has("payload")|not)' >/dev/null ||
  fail "-J: invalid UTF-8 not in payload_b64"
[[ $(consume -t lines -e -J -o 4 -c 1 | jq -r .payload_b64 | base64 -d | xxd -p) == fffec328 ]] ||
  fail "-J: payload_b64 does not decode to the message"
[[ $(consume -t lines -e -J -o 6 -c 1 | jq -r .payload) == "héllo €" ]] || fail "-J: UTF-8 payload"
echo "ok"
