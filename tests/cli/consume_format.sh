#!/usr/bin/env bash
# mq-consume output: kcat -f tokens, key and value (-k, -K), NULL printing
# (-Z), and --header-filter.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
consume() { timeout 20 "$BIN/mq-consume" -t t -e "$@"; }
expect() {  # expect "<what>" "<want>" args...: compares the whole output
  local what="$1" want="$2"
  shift 2
  local got
  got="$(consume "$@")"
  [[ "$got" == "$want" ]] || fail "$what: got '$got', want '$want'"
}

BASE=$(( $(date -u -d 2026-11-30T08:00:00Z +%s) * 1000 ))
BIN_B64=$(printf '\xff\x00' | base64)
"$BIN/mq-produce" -q -t t --create -J <<JSON
{"ts":$BASE,"key":"k1","payload":"hello","headers":[{"key":"env","value":"prod"},{"key":"trace","value":"abc"}]}
{"ts":$((BASE + 1)),"key":null,"payload":null,"headers":[{"key":"env","value":"dev"},{"key":"nil","value":null}]}
{"ts":$((BASE + 86400123)),"key":"k3","payload_b64":"$BIN_B64","headers":[]}
JSON

# --- -f tokens ---------------------------------------------------------------------
expect "%t %p %o" "t/0/0 t/0/1 t/0/2 " -f '%t/%p/%o '
expect "%k %K" "k1:2,:-1,k3:2," -f '%k:%K,'
expect "%s %S on text and null" "hello:5|:-1|" -f '%s:%S|' -c 2
expect "%T" "$BASE $((BASE + 1)) " -f '%T ' -c 2
expect "%F" "2026-11-30T08:00:00.000Z 2026-11-30T08:00:00.001Z 2026-12-01T08:00:00.123Z " -f '%F '
expect "%h" "[env=prod,trace=abc][env=dev,nil=][]" -f '[%h]'
expect "%x %X" "68656c6c6f/6b31 / ff00/6b33 " -f '%x/%X '
expect "escapes and %%" "$(printf '100%%\tk1\\\n')" -f '100%%\t%k\\\n' -c 1
expect "\\x escape" "$(printf 'k1\x01')" -f '%k\x01' -c 1
# -Z: a null key or value prints NULL (kcat's -Z), in -f and in the default output.
expect "-Z with -f, 2 messages" "k1=hello NULL=NULL " -f '%k=%s ' -Z -c 2
expect "-Z in %h" "env=dev,nil=NULL" -f '%h' -Z -o 1 -c 1
expect "-Z default output" "$(printf 'hello\nNULL')" -Z -c 2
expect "null value without -Z is empty" "$(printf 'hello\n')" -c 2

# --- key and value -------------------------------------------------------------------
expect "-k" "$(printf 'k1\thello\n\t')" -k -c 2
expect "-K multi-byte" "$(printf 'k1::hello\n::')" -K '::' -c 2
expect "-K with -Z" "$(printf 'k1=>hello\nNULL=>NULL')" -K '=>' -Z -c 2
expect "-K and -D" "k1 hello;NULL NULL;" -K ' ' -D ';' -Z -c 2

# --- --header-filter --------------------------------------------------------------------
expect "NAME=VALUE" "k1" -f '%k\n' --header-filter env=prod
expect "NAME present" "$(printf 'k1\nNULL')" -f '%k\n' -Z --header-filter env
expect "all filters must match" "k1" -f '%k\n' --header-filter env --header-filter trace=abc
expect "no message matches" "" -f '%k\n' --header-filter env=dev --header-filter trace
expect "absent header" "" -f '%k\n' --header-filter nope
expect "a null header value is not an empty one" "" -f '%k\n' --header-filter nil=
expect "but the header is present" "NULL" -f '%k\n' -Z --header-filter nil
[[ $(consume -J --header-filter env=dev | wc -l) == 1 ]] || fail "filter with -J"
[[ $(consume --header-filter env=prod | wc -l) == 1 ]] || fail "filter with default output"

# --- bad format strings: usage errors naming the token ----------------------------------
run "$C" -t t -e -f '%q'
expect_rc 64 "-f %q"
grep -q "%q" "$WORK/err" || fail "-f %q: error does not name the token: $(cat "$WORK/err")"
run "$C" -t t -e -f 'abc%'
expect_rc 64 "-f trailing %"
echo "ok"
