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
# instead is acknowledged; mq-isr --verify-replicas compares a replica read
# over ssh (R63); nothing in a quoted name ran.
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
# (Follower 1 fetches on meanwhile: its last caught-up time moves, and
# LagMs is now minus that time.)
untimed() { sed -E 's/(LagMs|LastCaughtUp): [^\t]*/\1: N/g' "$WORK/out"; }
run "$ISR" --cluster "$H:$CL" describe
expect_rc 0 "describe over ssh"
untimed >"$WORK/remote.describe"
run "$ISR" --cluster "$CL" describe
expect_eq "describe over ssh = on the controller" "$(untimed)" "$(cat "$WORK/remote.describe")"

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

# mq-isr --verify-replicas reads a replica that the cluster state names on
# another host there, through its `mq-replicate --serve` over ssh (ReadLog,
# R63): one that agrees passes; one forged with a valid CRC diverges, named
# by its host's file and byte position (exit 65); a peer that speaks only
# wire protocol version 1, or a host down, leaves it not verified (69). The
# topic is set up through a stand-in for ssh (each real ssh login costs
# seconds); only the comparisons log in over ssh.
# Follower 2 is done with (it holds r1's bytes): stopped first, so that
# nothing it started over ssh still writes into the cluster directory when
# the test ends.
kill "${FOLLOWERS[1]}"
wait "${FOLLOWERS[1]}" 2>/dev/null || true
V="$WORK/verify"
mkdir -p "$V"
printf '#!/bin/sh\nshift\nexec sh -c "$1"\n' >"$WORK/local-rsh"
chmod +x "$WORK/local-rsh"
export MQ_RSH_SSH=$MQ_RSH
export MQ_RSH="$WORK/local-rsh"
run "$ISR" --cluster "$V/cl" create -t t --partitions 1 --min-insync-replicas 1 \
  --replicas "$V/r0,$V/r1,$H:$V/r2" --controller "$H"
expect_rc 0 "create the verified topic"
seq 1 10 | "$P" -C "$V/r0" -t t --acks 1
seq 11 20 | "$P" -C "$V/r0" -t t --acks 1
for i in 1 2; do
  for r in r1 r2; do
    run "$REP" -C "$V/$r" -q
    expect_rc 0 "catch up $r"
  done
done
export MQ_RSH=$MQ_RSH_SSH
run "$ISR" --cluster "$V/cl" --verify-replicas
expect_rc 0 "--verify-replicas over ssh"
expect_eq "--verify-replicas over ssh" "t-0: replica 1 agrees with leader 0 up to the high watermark 20 (2 batches)
t-0: replica 2 agrees with leader 0 up to the high watermark 20 (2 batches)
t-0: OK: leader 0, high watermark 20
OK: 1 partition(s): every replica agrees with its leader up to the high watermark" "$(cat "$WORK/out")"
# One value byte of r2's batch at offset 10, its CRC recomputed (R4 holds).
SEG=t-0/00000000000000000000.log
pos=$("$PY" - "$V/r2/$SEG" <<'PY'
import struct, sys
from mqbatch import fix_crc
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
pos = 0
while struct.unpack(">q", data[pos:pos + 8])[0] != 10:
    pos += 12 + struct.unpack(">i", data[pos + 8:pos + 12])[0]
length = struct.unpack(">i", data[pos + 8:pos + 12])[0]
batch = data[pos:pos + 12 + length]
batch[-2] ^= 0x01  # the last value byte of the batch's last record
fix_crc(batch)
data[pos:pos + 12 + length] = batch
open(path, "wb").write(data)
print(pos)
PY
)
run "$ISR" --cluster "$V/cl" --verify-replicas
expect_rc 65 "--verify-replicas over ssh with a forged follower"
grep -qF "t-0: replica 2 DIVERGED: $H:$V/r2/$SEG: position $pos: R57: replica 2 (root $H:$V/r2) diverges from replica 0 (root $V/r0) below the high watermark 20 at offset 10: the CRC differs" \
  "$WORK/out" || fail "the divergence over ssh is not named: $(cat "$WORK/out")"
grep -qF "at $V/r0/$SEG: position $pos" "$WORK/out" || fail "the leader's batch: $(cat "$WORK/out")"
grep -q "^t-0: replica 1 agrees with leader 0" "$WORK/out" || fail "replica 1: $(cat "$WORK/out")"
# An mq-replicate of wire protocol version 1 there: asked nothing it does
# not know (it answers Hello with version 1, and ends at any request).
mkdir -p "$WORK/v1"
cat >"$WORK/v1/mq-replicate" <<EOF
#!$PY
import struct, sys
sys.dont_write_bytecode = True
sys.path.insert(0, "$SRC/tests/cli/lib")
import frames
r = frames.FrameReader(0)
while True:
    f = r.read()
    if f is None:
        break
    if f.type != 0x01:  # Hello
        open("$WORK/v1/asked", "a").write("%d\\n" % f.type)
        break
    reply = struct.pack(">HH", 1, 2) + b"v1"
    frames.write_all(1, frames.encode(0x81, f.correlation, reply))
EOF
chmod +x "$WORK/v1/mq-replicate"
MQ_REMOTE_BINDIR="$WORK/v1" run "$ISR" --cluster "$V/cl" --verify-replicas
expect_rc 69 "--verify-replicas with peers of wire protocol version 1"
grep -qF "t-0: replica 2 ($H:$V/r2/t-0) not verified: $H:$V/r2: speaks wire protocol version 1: ReadLog needs version 2" \
  "$WORK/out" || fail "a peer of version 1: $(cat "$WORK/out")"
[[ ! -e $WORK/v1/asked ]] || fail "a peer of version 1 was sent request type $(cat "$WORK/v1/asked")"
printf '#!/bin/sh\necho "ssh: connect to host $1 port 22: Connection refused" >&2\nexit 255\n' >"$WORK/down-rsh"
chmod +x "$WORK/down-rsh"
MQ_RSH="$WORK/down-rsh" run "$ISR" --cluster "$V/cl" --verify-replicas
expect_rc 69 "--verify-replicas with the replica's host down"
# The client finds the ssh gone either reading (connection closed) or
# writing its first request (EPIPE), whichever comes first.
grep -qE "^t-0: replica 2 \($H:$V/r2/t-0\) not verified: $H:$V/r2: (connection closed|write: Broken pipe) \(.*exited with status 255\)" \
  "$WORK/out" || fail "a host down: $(cat "$WORK/out")"

for f in x y z; do
  [[ -z $(find "$WORK" "$HOME" -maxdepth 3 -name "$f" 2>/dev/null) ]] || fail "a quoted name ran: $f exists"
done
echo "replication_ssh: ok"
