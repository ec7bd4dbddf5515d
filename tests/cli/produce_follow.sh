#!/usr/bin/env bash
# With the default --linger-ms 0, a line written into a pipe that stays open
# (tail -f | mq-produce) is appended as soon as it is read, not when the
# pipe closes; and with --linger-ms the producer still delivers after the
# pause. Checked through --print-offsets and mq-consume.
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
D="$T/data"
producer=""
on_exit() {
  exec 3>&- 2>/dev/null || true
  [ -z "$producer" ] || kill "$producer" 2>/dev/null || true
}

# wait_lines FILE N: until FILE has N lines (at most ~10 s).
wait_lines() {
  for _ in $(seq 1 200); do
    [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

"$P" -C "$D" -t f --create -q </dev/null
for linger in 0 200; do
  rm -f "$T/fifo"
  mkfifo "$T/fifo"
  "$P" -C "$D" -t f -q --linger-ms "$linger" --print-offsets <"$T/fifo" >"$T/offsets.$linger" &
  producer=$!
  exec 3>"$T/fifo"
  printf 'first %s\n' "$linger" >&3
  wait_lines "$T/offsets.$linger" 1 || fail "linger $linger: first line not acknowledged while the pipe is open"
  printf 'second %s\nthird %s\n' "$linger" "$linger" >&3
  wait_lines "$T/offsets.$linger" 3 || fail "linger $linger: later lines not acknowledged"
  # Visible to a consumer while the producer still runs.
  "$C" -C "$D" -t f -e -q | grep -qx "third $linger" || fail "linger $linger: consumer does not see it"
  kill -0 "$producer" || fail "linger $linger: the producer exited early"
  exec 3>&-
  wait "$producer" || fail "linger $linger: the producer failed at end of input"
  producer=""
done
[ "$(cut -d' ' -f2 "$T/offsets.0" "$T/offsets.200" | tr '\n' ' ')" = "0 1 2 3 4 5 " ] ||
  fail "offsets: $(cat "$T"/offsets.*)"

# CreateTime is the time a line was read, also after the input was idle.
"$P" -C "$D" -t ts --create -q </dev/null
rm -f "$T/fifo"
mkfifo "$T/fifo"
"$P" -C "$D" -t ts -q --print-offsets <"$T/fifo" >"$T/ts.offsets" &
producer=$!
exec 3>"$T/fifo"
echo early >&3
wait_lines "$T/ts.offsets" 1 || fail "timestamps: first line not acknowledged"
sleep 1.2
echo late >&3
exec 3>&-
wait "$producer" || fail "timestamps: the producer failed"
producer=""
"$C" -C "$D" -t ts -e -q -f '%T\n' >"$T/ts"
[ $(( $(sed -n 2p "$T/ts") - $(sed -n 1p "$T/ts") )) -ge 1000 ] ||
  fail "timestamps: the second line's CreateTime is not its read time: $(cat "$T/ts")"
echo "ok: produce_follow"
