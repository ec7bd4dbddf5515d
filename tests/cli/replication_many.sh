#!/usr/bin/env bash
# mq-replicate over many partitions (mq-replicate(1), OPEN FILES): a
# catch-up holds one partition open at a time; --follow keeps each open on
# a thread of its own up to 256, and takes more in rounds; with leaders on
# another host, one connection serves them all and the leader's server
# keeps only what its open-file limit holds open. Partitions with data end
# byte-identical to the leader's.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
# 2,000 partitions on two roots are some 20,000 small files: on tmpfs when
# there is one.
T="$WORK"
if [[ -d /dev/shm && -w /dev/shm ]]; then
  T="$(mktemp -d /dev/shm/mq-repl-many.XXXXXX)"
  on_exit() { rm -rf "$T"; }
fi
"$ISR" --cluster "$T/cluster" create -t t --partitions 2000 --replicas "$T/r0,$T/r1" \
  --min-insync-replicas 1 >/dev/null

# Messages into the first ten partitions root 0 leads, the last of them
# partition 1,000 or more (followed late in the run).
mapfile -t led < <("$ISR" --cluster "$T/cluster" describe -t t --json |
  jq -r 'select(.type == "partition" and .leader == 0) | .partition' | sort -n)
[[ ${#led[@]} -ge 1000 ]] || fail "root 0 leads ${#led[@]} of 2,000 partitions"
picked=("${led[@]:0:9}" "${led[999]}")
for p in "${picked[@]}"; do
  seq 1 50 | sed "s/^/p$p-/" | "$P" -C "$T/r0" -t t -p "$p" --acks 1 -q ||
    fail "produce into partition $p exited $?"
done

(
  ulimit -n 256
  exec "$REP" -C "$T/r1" -q
) >"$WORK/out" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "mq-replicate of 2,000 partitions under ulimit -n 256"
for p in "${picked[@]}"; do
  cmp -s "$T/r0/t-$p/00000000000000000000.log" "$T/r1/t-$p/00000000000000000000.log" ||
    fail "partition $p: the follower's log differs from the leader's"
done
got=$("$C" -C "$T/r1" -t t -p "${picked[9]}" -e -q | tail -1)
expect_eq "the last message of partition ${picked[9]} on the follower" "p${picked[9]}-50" "$got"
echo "ok: 2,000 partitions caught up under ulimit -n 256"

# --follow keeps every followed partition open (about 12 descriptors each):
# it raises its soft limit to the hard one. 60 partitions under a soft
# limit of 256 (about 720 descriptors) follow a message appended later.
(( $(ulimit -Hn) >= 1024 )) || fail "this test needs a hard open-file limit of 1024 or more (ulimit -Hn: $(ulimit -Hn))"
"$ISR" --cluster "$T/cluster" create -t f --partitions 60 --replicas "$T/r0,$T/r1" \
  --min-insync-replicas 1 >/dev/null
(
  ulimit -Sn 256
  exec "$REP" -C "$T/r1" -t f --follow -q
) >"$WORK/follow.out" 2>"$WORK/follow.err" &
follower=$!
PIDS+=("$follower")
echo late | "$P" -C "$T/r0" -t f -p 0 --acks 1 -q
for _ in $(seq 1 100); do
  [[ $("$C" -C "$T/r1" -t f -p 0 -e -q 2>/dev/null) == late ]] && break
  kill -0 "$follower" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$follower" 2>/dev/null || fail "mq-replicate --follow under a soft limit of 256 exited: $(cat "$WORK/follow.err")"
[[ $("$C" -C "$T/r1" -t f -p 0 -e -q) == late ]] || fail "the follower never got the message"
kill "$follower"
wait "$follower" || true
echo "ok: --follow of 60 partitions under a soft limit of 256"

# --follow of more partitions than can stay open: rounds over them, each
# partition opened, caught up and closed in turn. 2,000 partitions under
# ulimit -n 256: a message appended later to partition ${picked[9]} arrives.
(
  ulimit -n 256
  exec "$REP" -C "$T/r1" -t t --follow -q
) >"$WORK/poll.out" 2>"$WORK/poll.err" &
poller=$!
PIDS+=("$poller")
echo later | "$P" -C "$T/r0" -t t -p "${picked[9]}" --acks 1 -q
for _ in $(seq 1 600); do
  [[ $("$C" -C "$T/r1" -t t -p "${picked[9]}" -e -q 2>/dev/null | tail -1) == later ]] && break
  kill -0 "$poller" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$poller" 2>/dev/null || fail "mq-replicate --follow of 2,000 partitions under ulimit -n 256 exited: $(cat "$WORK/poll.err")"
got=$("$C" -C "$T/r1" -t t -p "${picked[9]}" -e -q | tail -1)
expect_eq "the message appended while --follow ran over 2,000 partitions" later "$got"
kill "$poller"
wait "$poller" || true
[[ ! -s $WORK/poll.err ]] || fail "--follow over 2,000 partitions complained: $(cat "$WORK/poll.err")"
echo "ok: --follow of 2,000 partitions under ulimit -n 256"

# Leaders on another "host": MQ_RSH runs the command there with sh -c, as
# ssh does, and logs each connection. 300 partitions, the follower and the
# leader's server under ulimit -n 256: one connection for the catch-up,
# one for --follow in rounds, and a message appended later arrives.
printf '#!/bin/sh\necho "$1" >>"$CONNS"\nshift\nexec sh -c "$1"\n' >"$WORK/rsh"
chmod +x "$WORK/rsh"
export CONNS="$WORK/conns" MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
"$ISR" --cluster "$T/rc" create -t r --partitions 300 --replicas "h0:$T/h0,h1:$T/h1" --controller ctl \
  --min-insync-replicas 1 >/dev/null
mapfile -t rled < <("$ISR" --cluster "$T/rc" describe -t r --json |
  jq -r 'select(.type == "partition" and .leader == 0) | .partition' | sort -n)
[[ ${#rled[@]} -ge 150 ]] || fail "h0 leads ${#rled[@]} of 300 partitions"
rpicked=("${rled[@]:0:4}" "${rled[149]}")
for p in "${rpicked[@]}"; do
  seq 1 20 | sed "s/^/r$p-/" | "$P" -C "$T/h0" -t r -p "$p" --acks 1 -q ||
    fail "produce into partition $p exited $?"
done
: >"$CONNS"
(
  ulimit -n 256
  exec "$REP" -C "$T/h1" -q
) >"$WORK/out" 2>"$WORK/err" && rc=0 || rc=$?
expect_rc 0 "mq-replicate of 300 partitions led on another host, under ulimit -n 256"
expect_eq "connections to h0 for the catch-up" 1 "$(grep -c '^h0$' "$CONNS")"
for p in "${rpicked[@]}"; do
  cmp -s "$T/h0/r-$p/00000000000000000000.log" "$T/h1/r-$p/00000000000000000000.log" ||
    fail "partition $p: the follower's log differs from the remote leader's"
done
: >"$CONNS"
(
  ulimit -n 256
  exec "$REP" -C "$T/h1" -t r --follow -q
) >"$WORK/rpoll.out" 2>"$WORK/rpoll.err" &
rpoller=$!
PIDS+=("$rpoller")
echo later | "$P" -C "$T/h0" -t r -p "${rpicked[4]}" --acks 1 -q
for _ in $(seq 1 600); do
  [[ $("$C" -C "$T/h1" -t r -p "${rpicked[4]}" -e -q 2>/dev/null | tail -1) == later ]] && break
  kill -0 "$rpoller" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$rpoller" 2>/dev/null || fail "--follow of 300 remote partitions exited: $(cat "$WORK/rpoll.err")"
got=$("$C" -C "$T/h1" -t r -p "${rpicked[4]}" -e -q | tail -1)
expect_eq "the message appended while --follow ran over 300 remote partitions" later "$got"
kill "$rpoller"
wait "$rpoller" || true
expect_eq "connections to h0 for --follow in rounds" 1 "$(grep -c '^h0$' "$CONNS")"
[[ ! -s $WORK/rpoll.err ]] || fail "--follow over 300 remote partitions complained: $(cat "$WORK/rpoll.err")"
echo "ok: 300 partitions led on another host, over one connection, under ulimit -n 256"
