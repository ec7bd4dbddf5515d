#!/usr/bin/env bash
# Failover across "hosts" h0 (leader), h1, h2 and the controller ctl, every
# connection between them through its own fault-injecting relay
# (tests/helpers/relay.py as MQ_RSH): a process on host X reaches host Y
# through the faults file net/X/Y, which each round sets at random (delay,
# stall, a cut mid-frame, reordered, dropped and flipped frames), or cuts
# the leader (or a follower) from the controller.
#
# Checks: every acks=all message acknowledged (exit 0) is, in the end, on
# every replica exactly once and consumable; the replicas' .log files end
# byte-identical and verify; while h0 cannot reach the controller no acks=all
# producer there exits 0, and a running one stops without acknowledging; the
# ISR shrank during a stall and is whole again at the end.
#
#   MQ_RELAY_ROUNDS (default 4)   rounds of faults; MQ_TEST_SEED repeats a run
source "$(dirname "$0")/lib/common.bash"

ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
RELAY="$SRC/tests/helpers/relay.py"
SEED=${MQ_TEST_SEED:-$RANDOM}
ROUNDS=${MQ_RELAY_ROUNDS:-4}
echo "replication_relay: seed $SEED (MQ_TEST_SEED=$SEED to repeat), $ROUNDS rounds"
RANDOM=$SEED
export MQ_REMOTE_BINDIR="$BIN"
export MQ_TIMEOUT_MS=1500
NET="$WORK/net"
mkdir -p "$NET"/{op,h0,h1,h2}

# rsh FROM HOST COMMAND: COMMAND runs "on" HOST, and what it starts reaches
# others as HOST does.
cat >"$WORK/rsh" <<EOF
#!/bin/sh
from=\$1 host=\$2
export MQ_RSH="$WORK/rsh \$host"
exec "$PY" "$RELAY" --faults-dir "$NET/\$from" "\$host" "\$3" 2>>"$WORK/relay.err"
EOF
chmod +x "$WORK/rsh"
on() { local host=$1; shift; env MQ_RSH="$WORK/rsh $host" "$@"; }
runon() { local host=$1; shift; run env MQ_RSH="$WORK/rsh $host" "$@"; }
heal() { rm -f "$NET"/*/*; }

R0="$WORK/r0"; R1="$WORK/r1"; R2="$WORK/r2"; CL="$WORK/cl"; T=t
runon op "$ISR" --cluster "$CL" create -t "$T" --partitions 1 --min-insync-replicas 2 \
  --replicas "h0:$R0,h1:$R1,h2:$R2" --controller ctl -X replica.lag.time.max.ms=3000
expect_rc 0 "create"

start_follower() {
  # Not through on(): $! must be mq-replicate itself, for kill.
  env MQ_RSH="$WORK/rsh h$1" "$REP" -C "$WORK/r$1" --follow -q 2>>"$WORK/follow.err" &
  PIDS+=($!)
  FOLLOWER[$1]=$!
}
declare -a FOLLOWER
start_follower 1
start_follower 2

: >"$WORK/acked"
n=0
# produce_one: one acks=all message from h0; its exit status is recorded.
produce_one() {
  n=$((n + 1))
  local msg="m$n"
  set +e
  echo "$msg" | on h0 "$P" -C "$R0" -t "$T" -p 0 --acks all --ack-timeout 2500 -q 2>>"$WORK/produce.err"
  local prc=$?
  set -e
  echo "$msg $prc" >>"$WORK/produced"
  [[ $prc == 0 ]] && echo "$msg" >>"$WORK/acked"
  return 0
}

faults=("delay 40" "stall" "cut-after-frames 5" "bitflip 0.2" "reorder 0.5" "drop 0.2")
shrinks_before=0
for round in $(seq 1 "$ROUNDS"); do
  kind=$((RANDOM % 3))
  case $kind in
    0)  # the followers' links to the leader
      for f in 1 2; do
        fault=${faults[RANDOM % ${#faults[@]}]}
        printf '%s\nseed %d\n' "$fault" "$RANDOM" >"$NET/h$f/h0"
        echo "round $round: h$f -> h0: $fault"
      done
      for _ in 1 2 3; do produce_one; done
      ;;
    1)  # the leader cut from the controller: no acks=all completes there
      # A producer running when the cut comes: acknowledged before, not after.
      mkfifo "$WORK/fifo$round"
      env MQ_RSH="$WORK/rsh h0" "$P" -C "$R0" -t "$T" -p 0 --acks all --ack-timeout 2500 --print-offsets \
        <"$WORK/fifo$round" >"$WORK/long.out" 2>"$WORK/long.err" &
      long=$!
      exec 9>"$WORK/fifo$round"
      echo "first$round" >&9
      for _ in $(seq 1 200); do
        [[ -s $WORK/long.out ]] && break
        sleep 0.1
      done
      [[ -s $WORK/long.out ]] || fail "round $round: the first message was not acknowledged: $(cat "$WORK/long.err")"
      echo "first$round" >>"$WORK/acked"
      echo "round $round: h0 -> ctl down"
      echo down >"$NET/h0/ctl"
      echo "second$round" >&9
      exec 9>&-
      set +e
      wait $long
      lrc=$?
      set -e
      echo "round $round: the running producer after the cut: exit $lrc ($(tail -1 "$WORK/long.err"))"
      [[ $lrc != 0 && $(wc -l <"$WORK/long.out") == 1 ]] ||
        fail "round $round: a producer cut from the controller acknowledged (exit $lrc: $(cat "$WORK/long.out"))"
      before=$(wc -l <"$WORK/acked")
      for _ in 1 2; do produce_one; done
      [[ $(wc -l <"$WORK/acked") == "$before" ]] ||
        fail "round $round: an acks=all write completed on a leader cut from the controller"
      ;;
    2)  # a follower stalled: the ISR shrinks, acks=all goes on with 2
      stalled=1
      echo "round $round: h2 -> h0 stall, h2 -> ctl down"
      echo stall >"$NET/h2/h0"
      echo down >"$NET/h2/ctl"
      sleep 4
      for _ in 1 2 3; do produce_one; done
      ;;
  esac
  heal
  sleep 1
done
heal

# Everything heals: the followers catch up and rejoin the ISR.
leader_log="$R0/$T-0/00000000000000000000.log"
for _ in $(seq 1 300); do
  isr=$(on op "$ISR" --cluster "$CL" describe 2>/dev/null | grep -o 'Isr: [0-9,]*' || true)
  if [[ $isr == Isr:\ 0,* && $(tr -cd , <<<"$isr" | wc -c) == 2 ]] &&
    cmp -s "$leader_log" "$R1/$T-0/00000000000000000000.log" &&
    cmp -s "$leader_log" "$R2/$T-0/00000000000000000000.log"; then
    break
  fi
  sleep 0.2
done
echo "final: $isr; $(wc -l <"$WORK/acked") of $n acknowledged; ISR changes: $(grep -c shrink "$CL/isr-changes" || true) shrink(s), $(grep -vc shrink "$CL/isr-changes" || true) other"
for f in 1 2; do kill "${FOLLOWER[$f]}" 2>/dev/null || true; done
wait "${FOLLOWER[1]}" "${FOLLOWER[2]}" 2>/dev/null || true
[[ $isr == Isr:\ 0,* && $(tr -cd , <<<"$isr" | wc -c) == 2 ]] || fail "the ISR did not regrow: $isr"
for r in "$R1" "$R2"; do
  cmp "$leader_log" "$r/$T-0/00000000000000000000.log" || fail "$r diverges from the leader"
done
for r in "$R0" "$R1" "$R2"; do
  run "$INSPECT" --verify "$r/$T-0"
  expect_rc 0 "verify $r"
  runon op "$C" -C "$r" -t "$T" -e
  expect_rc 0 "consume $r"
  while read -r m; do
    c=$(grep -cx "$m" "$WORK/out" || true)
    [[ $c == 1 ]] || fail "$r: acknowledged $m found $c times"
  done <"$WORK/acked"
done
if [[ -n ${stalled:-} ]]; then
  grep -q shrink "$CL/isr-changes" || fail "a follower stalled past the lag limit, and the ISR never shrank"
  echo "the ISR shrank and regrew"
fi
echo "replication_relay: ok"
