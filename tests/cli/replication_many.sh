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
# pick_and_write CLUSTER TOPIC ROOT LAST: PICKED becomes the first four
# partitions replica 0 (ROOT) leads and its LAST-th (from 0, followed late
# in a run); each gets 20 messages "<topic><partition>-<i>".
pick_and_write() {
  local cluster=$1 topic=$2 root=$3 last=$4 led p
  mapfile -t led < <("$ISR" --cluster "$cluster" describe -t "$topic" --json |
    jq -r 'select(.type == "partition" and .leader == 0) | .partition' | sort -n)
  [[ ${#led[@]} -gt $last ]] || fail "replica 0 leads ${#led[@]} partitions of $topic"
  PICKED=("${led[@]:0:4}" "${led[$last]}")
  for p in "${PICKED[@]}"; do
    seq 1 20 | sed "s/^/$topic$p-/" | "$P" -C "$root" -t "$topic" -p "$p" --acks 1 -q ||
      fail "produce into $topic-$p exited $?"
  done
}

# catch_up WHAT TOPIC LEADER FOLLOWER: `mq-replicate -C FOLLOWER` under
# ulimit -n 256 exits 0, and the PICKED partitions' logs end byte-identical
# to the LEADER root's.
catch_up() {
  local what=$1 topic=$2 leader=$3 follower=$4 rc p
  (
    ulimit -n 256
    MQ_FROM=follower exec "$REP" -C "$follower" -q
  ) >"$WORK/out" 2>"$WORK/err" && rc=0 || rc=$?
  expect_rc 0 "$what"
  for p in "${PICKED[@]}"; do
    cmp -s "$leader/$topic-$p/00000000000000000000.log" \
      "$follower/$topic-$p/00000000000000000000.log" ||
      fail "$what: partition $p: the follower's log differs from the leader's"
  done
  echo "ok: $what"
}

"$ISR" --cluster "$T/cluster" create -t t --partitions 2000 --replicas "$T/r0,$T/r1" \
  --min-insync-replicas 1 >/dev/null
pick_and_write "$T/cluster" t "$T/r0" 999
catch_up "a catch-up of 2,000 partitions under ulimit -n 256" t "$T/r0" "$T/r1"
expect_eq "the last message of partition ${PICKED[4]} on the follower" "t${PICKED[4]}-20" \
  "$("$C" -C "$T/r1" -t t -p "${PICKED[4]}" -e -q | tail -1)"
last_t=${PICKED[4]}
replicas_agree "$T/cluster" "2,000 partitions after the catch-up"

# follow_gets WHAT LIMIT TOPIC PARTITION LEADER FOLLOWER: with
# `mq-replicate -C FOLLOWER -t TOPIC --follow` running under `ulimit LIMIT`,
# a message appended later to PARTITION on the LEADER root arrives at the
# follower; the follower stays up, and says nothing.
follow_gets() {
  local what=$1 limit=$2 topic=$3 p=$4 leader=$5 follower=$6
  (
    ulimit "$limit" 256
    MQ_FROM=follower exec "$REP" -C "$follower" -t "$topic" --follow -q
  ) >"$WORK/follow.out" 2>"$WORK/follow.err" &
  local pid=$!
  PIDS+=("$pid")
  echo later | "$P" -C "$leader" -t "$topic" -p "$p" --acks 1 -q
  for _ in $(seq 1 1800); do  # up to 3 minutes: a round over 2,000 partitions takes seconds
    [[ $("$C" -C "$follower" -t "$topic" -p "$p" -e -q 2>/dev/null | tail -1) == later ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null || fail "$what: mq-replicate --follow exited: $(cat "$WORK/follow.err")"
  expect_eq "$what: the message appended while it ran" later \
    "$("$C" -C "$follower" -t "$topic" -p "$p" -e -q | tail -1)"
  kill "$pid"
  wait "$pid" || true
  [[ ! -s $WORK/follow.err ]] || fail "$what: --follow complained: $(cat "$WORK/follow.err")"
  echo "ok: $what"
}

# --follow keeps every followed partition open (about 18 descriptors each)
# on a thread of its own, and raises its soft limit to the hard one: 50
# partitions (about 900 descriptors) under a soft limit of 256.
(( $(ulimit -Hn) >= 1024 )) ||
  fail "this test needs a hard open-file limit of 1024 or more (ulimit -Hn: $(ulimit -Hn))"
"$ISR" --cluster "$T/cluster" create -t f --partitions 50 --replicas "$T/r0,$T/r1" \
  --min-insync-replicas 1 >/dev/null
follow_gets "--follow of 50 partitions under a soft limit of 256" -Sn f 0 "$T/r0" "$T/r1"

# More partitions than can stay open are followed in rounds, each opened,
# caught up and closed in turn: 2,000 under ulimit -n 256.
follow_gets "--follow of 2,000 partitions under ulimit -n 256" -n t "$last_t" "$T/r0" "$T/r1"

# Leaders on another "host": MQ_RSH runs the command there with sh -c, as
# ssh does, and logs each connection (and whether the follower made it). 300 partitions, the follower and the
# leader's server under ulimit -n 256: one connection for the catch-up,
# one for --follow in rounds, and a message appended later arrives.
printf '#!/bin/sh\necho "${MQ_FROM:-other} $1" >>"$CONNS"\nshift\nexec sh -c "$1"\n' >"$WORK/rsh"
chmod +x "$WORK/rsh"
export CONNS="$WORK/conns" MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
"$ISR" --cluster "$T/rc" create -t r --partitions 300 --replicas "h0:$T/h0,h1:$T/h1" --controller ctl \
  --min-insync-replicas 1 >/dev/null
pick_and_write "$T/rc" r "$T/h0" 149
: >"$CONNS"
catch_up "a catch-up of 300 partitions led on another host, under ulimit -n 256" r "$T/h0" "$T/h1"
expect_eq "the catch-up's connections to h0" 1 "$(grep -c '^follower h0$' "$CONNS")"
: >"$CONNS"
follow_gets "--follow of 300 partitions led on another host, under ulimit -n 256" -n r \
  "${PICKED[4]}" "$T/h0" "$T/h1"
expect_eq "the connections to h0 of --follow in rounds" 1 "$(grep -c '^follower h0$' "$CONNS")"
