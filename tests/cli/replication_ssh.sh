#!/usr/bin/env bash
# Replication across hosts over real ssh (a throwaway sshd on 127.0.0.1,
# tests/cli/lib/sshd.bash): three replicas and the cluster directory named
# through host localhost-mq, with paths a shell would misread, reached only
# through ssh (mq-isr create attaches the roots there, followers fetch
# through `mq-replicate --serve`, every tool reads the cluster state through
# `mq-isr --serve`). Checks: acks=all is acknowledged; a catch-up whose ssh
# connections are killed midway exits 69 and the next run resumes from the
# follower's own log end; the replicas' logs end byte-identical and verify;
# every message is consumable exactly once; the leader's root moved away
# under running followers is waited out, and acks=all on the leader elected
# instead is acknowledged; nothing in a quoted name ran.
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/sshd.bash"
on_exit() { sshd_stop; }

ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
echo "replication_ssh: running as $(id -un)"
# Before sshd_start, which passes it to the tools started over ssh: on a
# loaded machine an ssh connection (and the one it opens to the controller)
# can take many seconds to set up, and the timeout covers that.
export MQ_TIMEOUT_MS=60000
sshd_start
export MQ_REMOTE_BINDIR="$BIN"

# Paths with a space, a quote, ';', '$' and backquotes (each a shell word
# breaker or command), all absolute: the cluster state keeps them as given.
HOSTILE="$WORK/a b;touch x"
mkdir -p "$HOSTILE"
R0="$HOSTILE/r0 \$(touch y)"
R1="$HOSTILE/r1 \`touch z\`"
R2="$HOSTILE/r2 it's"
CL="$HOSTILE/cluster"
T=o.rders-1
H=localhost-mq

run "$ISR" --cluster "$CL" create -t "$T" --partitions 1 --min-insync-replicas 2 \
  --replicas "$H:$R0,$H:$R1,$H:$R2" --controller "$H" -X replica.lag.time.max.ms=600000
expect_rc 0 "create over ssh"
grep -q "^mq-cluster-state 2$" "$CL/cluster-state" || fail "cluster state is not version 2"
for r in "$R0" "$R1" "$R2"; do
  grep -qxF "cluster=$H:$CL" "$r/topics/$T.conf" || fail "$r: not attached to $H:$CL"
done

# Followers keep in step over ssh (the lag limit is long: a loaded machine
# can take seconds per ssh connection).
FOLLOWERS=()
for r in "$R1" "$R2"; do
  "$REP" -C "$r" --follow -q 2>>"$WORK/follow.err" &
  PIDS+=($!)
  FOLLOWERS+=($!)
done
seq 1 2000 | sed 's/^/m/' >"$WORK/first"
run "$P" -C "$R0" -t "$T" --acks all --ack-timeout 60000 "$WORK/first"
expect_rc 0 "acks=all over ssh"

# A catch-up killed midway: stop follower 2 and grow the leader by ~20 MB
# (acks=1: follower 2 stays in the ISR for the long lag limit, so acks=all
# would wait for it).
kill "${FOLLOWERS[1]}"
wait "${FOLLOWERS[1]}" 2>/dev/null || true
awk 'BEGIN { pad = sprintf("%0900d", 0); for (i = 0; i < 20000; i++) printf "b%d %s\n", i, pad }' \
  >"$WORK/big"
run "$P" -C "$R0" -t "$T" --acks 1 "$WORK/big"
expect_rc 0 "acks=1, 20 MB"
leader_log="$R0/$T-0/00000000000000000000.log"
set +e
"$REP" -C "$R2" -q --fetch-max-bytes 64K --max-bytes-per-second 4M 2>"$WORK/cut.err" &
catchup=$!
set -e
f2="$R2/$T-0/00000000000000000000.log"
for _ in $(seq 1 600); do
  [[ -f $f2 && $(stat -c %s "$f2") -gt 2000000 ]] && break
  sleep 0.1
done
[[ -f $f2 && $(stat -c %s "$f2") -gt 2000000 ]] || fail "the catch-up never got going: $(cat "$WORK/cut.err")"
# Cut: end every server process the follower reached over ssh.
pkill -f "mq-replicate --serve -C $HOSTILE/r0" || fail "no mq-replicate --serve to kill"
set +e
wait "$catchup"
cut_rc=$?
set -e
echo "catch-up cut at $(stat -c %s "$f2") of $(stat -c %s "$leader_log") bytes: exit $cut_rc ($(tail -1 "$WORK/cut.err"))"
[[ $cut_rc == 69 || $cut_rc == 0 ]] || fail "a cut catch-up: exit $cut_rc, want 69 (or 0 if it finished first)"
run "$INSPECT" --verify "$R2/$T-0"
expect_rc 0 "verify of the cut follower"
run "$REP" -C "$R2" -q
expect_rc 0 "the next catch-up resumes"

# Follower 1 is in step; every replica holds the leader's bytes.
for _ in $(seq 1 300); do
  cmp -s "$leader_log" "$R1/$T-0/00000000000000000000.log" && break
  sleep 0.2
done
for r in "$R1" "$R2"; do
  cmp "$leader_log" "$r/$T-0/00000000000000000000.log" || fail "$r differs from the leader"
  run "$INSPECT" --verify "$r/$T-0"
  expect_rc 0 "verify $r"
done
run "$C" -C "$R2" -t "$T" -e
expect_rc 0 "consume the follower"
want=$(cat "$WORK/first" "$WORK/big" | wc -l)
expect_eq "messages on the follower" "$want" "$(wc -l <"$WORK/out")"
expect_eq "no message twice" "$want" "$(sort -u "$WORK/out" | wc -l)"

# The controller reached over ssh says the same as on its host.
run "$ISR" --cluster "$H:$CL" describe
expect_rc 0 "describe over ssh"
cp "$WORK/out" "$WORK/remote.describe"
run "$ISR" --cluster "$CL" describe
expect_eq "describe over ssh = on the controller" "$(cat "$WORK/out")" "$(cat "$WORK/remote.describe")"

# The leader's root moved away under running followers (both with -v, so
# that they tell what they meet): one that meets "No such file or
# directory" from the leader's `mq-replicate --serve` waits it out, one
# whose leader still holds the partition open fetches on; an election
# through the controller makes r1 leader, and acks=all there is
# acknowledged with r2 following it.
kill "${FOLLOWERS[0]}"
wait "${FOLLOWERS[0]}" 2>/dev/null || true
FOLLOWERS=()
for i in 1 2; do
  r=$R1
  [[ $i == 2 ]] && r=$R2
  "$REP" -C "$r" --follow -v 2>>"$WORK/moved-$i.err" &
  PIDS+=($!)
  FOLLOWERS+=($!)
done
# Both caught up (-v: a line once a partition is caught up, with its log
# end and HW) and waiting for the leader's next append.
for i in 1 2; do
  for _ in $(seq 1 1200); do  # a guard against a hang, not a timing assertion
    grep -q "log end $want, high watermark $want$" "$WORK/moved-$i.err" && break
    sleep 0.1
  done
  grep -q "log end $want, high watermark $want$" "$WORK/moved-$i.err" ||
    fail "the follower of r$i never caught up: $(tail -3 "$WORK/moved-$i.err")"
done
mv "$R0" "$HOSTILE/r0.moved"
for i in 1 2; do
  pid=${FOLLOWERS[$((i - 1))]}
  # A few rounds (CarryState and the ISR rule run once a second).
  for _ in $(seq 1 30); do
    grep -q "No such file or directory" "$WORK/moved-$i.err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    set +e
    wait "$pid"
    frc=$?
    set -e
    fail "the follower of r$i exited with status $frc when the leader's root was moved away: $(grep -v ' records (' "$WORK/moved-$i.err" | tail -2)"
  fi
done
run "$ISR" --cluster "$H:$CL" elect -t "$T"
expect_rc 0 "elect over ssh with r0 moved away"
grep -q "^Elected leader 1 for $T-0" "$WORK/out" || fail "elect: $(cat "$WORK/out")"
cat "$WORK/out"
seq 1 50 | sed 's/^/after-move-/' >"$WORK/third"
run "$P" -C "$R1" -t "$T" --acks all --ack-timeout 60000 "$WORK/third"
expect_rc 0 "acks=all on the new leader r1, r2 following it over ssh"
kill -0 "${FOLLOWERS[1]}" 2>/dev/null || fail "the follower of r2 exited: $(tail -2 "$WORK/moved-2.err")"
for _ in $(seq 1 600); do  # a guard against a hang, not a timing assertion
  cmp -s "$R1/$T-0/00000000000000000000.log" "$R2/$T-0/00000000000000000000.log" && break
  sleep 0.2
done
cmp "$R1/$T-0/00000000000000000000.log" "$R2/$T-0/00000000000000000000.log" || fail "r2 differs from the new leader r1"

for f in x y z; do
  [[ -z $(find "$WORK" "$HOME" -maxdepth 3 -name "$f" 2>/dev/null) ]] || fail "a quoted name ran: $f exists"
done
echo "replication_ssh: ok"
