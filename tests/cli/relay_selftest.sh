#!/usr/bin/env bash
# tests/helpers/relay.py, the ssh stand-in that injects network faults per
# frame: each fault (down, delay, stall, cut-after-frames, bitflip, reorder,
# drop, seed) does what it says, non-frame streams pass byte for byte, EOF
# and exit statuses are relayed, and both directions move at once
# (tests/cli/lib/relay_check.py, against its frame echo server). Then the
# relay as MQ_RSH behind the tools' RshCommand (mq-test-rsh): hostile words
# arrive intact and nothing they spell runs.
source "$(dirname "$0")/lib/common.bash"

RELAY="$SRC/tests/helpers/relay.py"
CHECK="$SRC/tests/cli/lib/relay_check.py"
RSH="$BIN/tests/mq-test-rsh"
[[ -x $RELAY ]] || fail "$RELAY is not executable"
[[ -x /usr/bin/python3 ]] || fail "relay.py runs /usr/bin/python3 (Debian package python3): not installed"
cd "$WORK"

for check in crc clean exit_status passthrough partial down down_later delay stall cut \
             bitflip drop reorder big no_deadlock; do
  run "$PY" "$CHECK" "$check" "$RELAY"
  expect_rc 0 "relay $check: $(cat "$WORK/out")"
done

# --- RshCommand through the relay ---------------------------------------------
mkdir "$WORK/faults" "$WORK/remote"
export MQ_RSH="$RELAY --faults-dir $WORK/faults"
words=('a b;touch x' "it's" '$(touch y)' '`touch z`' '*' '' '-n' $'two\nlines' 'é€' '>w' '\')
cd "$WORK/remote"
run "$RSH" localhost-mq printf '%s\0' "${words[@]}"
expect_rc 0 "printf through the relay"
mapfile -d '' -t got <"$WORK/out"
expect_eq "words through RshCommand and the relay" "$(printf '[%s]\n' "${words[@]}")" \
  "$(printf '[%s]\n' "${got[@]}")"
[[ -z $(ls -A "$WORK/remote") ]] || fail "a quoted word ran: $(ls -A "$WORK/remote")"

run "$RSH" --print 'user@-oProxyCommand=touch x' true
expect_rc 64 "a host read as an ssh option"
grep -q "ssh would read an option" "$WORK/err" || fail "reason: $(cat "$WORK/err")"
run "$RSH" -oProxyCommand=x true
expect_rc 64 "a host starting with -"

# A host that is down, then up again: the same command line works.
echo down >"$WORK/faults/localhost-mq"
run "$RSH" localhost-mq echo ok
expect_rc 255 "host down"
rm "$WORK/faults/localhost-mq"
run "$RSH" localhost-mq echo ok
expect_rc 0 "host up again"
expect_eq "echo ok" "ok" "$(cat "$WORK/out")"
echo "relay_selftest: ok"
