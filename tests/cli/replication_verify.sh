#!/usr/bin/env bash
# mq-isr --verify-replicas compares every replica with its leader batch by
# batch up to the high watermark (R57): identical replicas pass (exit 0); a
# follower forged with valid CRCs, which verifies on its own, is found
# (exit 65, both files and byte positions named); a replica whose log ends
# below the high watermark is behind, not divergent; replicas on other hosts
# are read there (R63) and compared the same way, and --check and elect ask
# them for their follower-stopped record and verification, describe a
# leader there for its followers' fetch times (R63). mq-isr --check reports
# a follower whose log fails verification and drops it from the ISR, so that
# elect passes it over (mq-isr(1)).
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"
SEG=t-0/00000000000000000000.log

# batch_pos FILE OFFSET: the byte position of the batch whose base offset is OFFSET.
batch_pos() {
  "$PY" - "$1" "$2" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
pos = 0
while pos < len(data):
    base, length = struct.unpack(">qi", data[pos:pos + 12])
    if base == int(sys.argv[2]):
        print(pos)
        break
    pos += 12 + length
PY
}

# --- identical replicas agree ---------------------------------------------------
replicated_topic a r0 r1 r2
run "$ISR" --cluster "$WORK/a/cl" --verify-replicas
expect_rc 0 "--verify-replicas of identical replicas"
expect_eq "identical replicas" "t-0: replica 1 agrees with leader 0 up to the high watermark 20 (4 batches)
t-0: replica 2 agrees with leader 0 up to the high watermark 20 (4 batches)
t-0: OK: leader 0, high watermark 20
OK: 1 partition(s): every replica agrees with its leader up to the high watermark" "$(cat "$WORK/out")"
run "$ISR" --cluster "$WORK/a/cl" --verify-replicas -t t --json
expect_rc 0 "--verify-replicas --json"
"$PY" - "$WORK/out" <<'PY' || fail "--json: $(cat "$WORK/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
o = json.loads(lines[0])
assert o["type"] == "verify-replicas" and o["topic"] == "t" and o["partition"] == 0, o
assert o["status"] == "ok" and o["leader"] == 0 and o["high_watermark"] == 20, o
assert [r["state"] for r in o["replicas"]] == ["agrees"] * 3, o
assert [r["batches"] for r in o["replicas"]] == [4, 4, 4], o
PY
run "$ISR" --cluster "$WORK/a/cl" --verify-replicas -t nosuch
expect_rc 66 "--verify-replicas of an unknown topic"
run "$ISR" --cluster "$WORK/a/cl" --check --json
expect_rc 64 "--json without --verify-replicas"

# --- a forged follower with valid CRCs diverges ----------------------------------
# One value byte of r2's batch at offset 10, its CRC recomputed (R4 holds).
pos=$(batch_pos "a/r2/$SEG" 10)
"$PY" - "a/r2/$SEG" "$pos" <<'PY'
import struct, sys
from mqbatch import fix_crc
path, pos = sys.argv[1], int(sys.argv[2])
data = bytearray(open(path, "rb").read())
length = struct.unpack(">i", data[pos + 8:pos + 12])[0]
batch = data[pos:pos + 12 + length]
batch[-2] ^= 0x01  # the last value byte of the batch's last record
fix_crc(batch)
data[pos:pos + 12 + length] = batch
open(path, "wb").write(data)
PY
run "$INSPECT" --verify "a/r2/t-0"
expect_rc 0 "mq-inspect --verify of the forged follower (it verifies on its own)"
run "$ISR" --cluster "$WORK/a/cl" --verify-replicas
expect_rc 65 "--verify-replicas with a forged follower"
lpos=$(batch_pos "a/r0/$SEG" 10)
grep -qF "t-0: replica 2 DIVERGED: $WORK/a/r2/$SEG: position $pos: R57: replica 2 (root $WORK/a/r2) diverges from replica 0 (root $WORK/a/r0) below the high watermark 20 at offset 10: the CRC differs" \
  "$WORK/out" || fail "the divergence is not named: $(cat "$WORK/out")"
grep -qF "replica 0 holds batch 10-14 of leader epoch 0" "$WORK/out" &&
  grep -qF "at $WORK/a/r0/$SEG: position $lpos" "$WORK/out" ||
  fail "the leader's batch is not named: $(cat "$WORK/out")"
grep -q "t-0: replica 1 agrees with leader 0 up to the high watermark 20 (4 batches)" "$WORK/out" ||
  fail "replica 1: $(cat "$WORK/out")"
grep -q "^t-0: DIVERGED: leader 0, high watermark 20$" "$WORK/out" || fail "summary: $(cat "$WORK/out")"
grep -q "^PROBLEMS: 1 of 1 partition(s) diverged, 0 not verified$" "$WORK/out" ||
  fail "summary: $(cat "$WORK/out")"

# --- a replica shorter than the high watermark is behind -------------------------
replicated_topic b r0 r1
cp -a b/r1 b/r1.at20
seq 21 25 | "$P" -C b/r0 -t t --acks 1
for i in 1 2; do run "$REP" -C b/r1 -q; expect_rc 0 "catch up r1 to 25"; done
rm -rf b/r1 && mv b/r1.at20 b/r1
run "$ISR" --cluster "$WORK/b/cl" --verify-replicas
expect_rc 0 "--verify-replicas with a replica behind the high watermark"
grep -qF "t-0: replica 1 is behind: its log ends at 20, below the high watermark 25; it agrees with leader 0 up to 20 (4 batches)" \
  "$WORK/out" || fail "behind: $(cat "$WORK/out")"

# --- a replica that cannot be read, or on another host, is not verified ----------
mv b/r1 b/r1.away
run "$ISR" --cluster "$WORK/b/cl" --verify-replicas
expect_rc 69 "--verify-replicas with a replica's root away"
grep -q "^t-0: replica 1 ($WORK/b/r1/t-0) not verified: $WORK/b/r1/t-0: No such file or directory" "$WORK/out" ||
  fail "an unreadable replica: $(cat "$WORK/out")"
grep -q "^t-0: NOT VERIFIED: leader 0, high watermark 25$" "$WORK/out" || fail "summary: $(cat "$WORK/out")"
mv b/r1.away b/r1
# h0 and h1 are this machine, reached through a stand-in for ssh.
printf '#!/bin/sh\nshift\nexec sh -c "$1"\n' >"$WORK/rsh"
chmod +x "$WORK/rsh"
mkdir h
MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN" run "$ISR" --cluster "$WORK/h/cl" create -t t \
  --partitions 1 --replicas "h0:$WORK/h/r0,h1:$WORK/h/r1" --controller ctl
expect_rc 0 "create across hosts"
seq 1 5 | MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN" "$P" -C h/r0 -t t --acks 1
MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN" run "$REP" -C h/r1 -q
expect_rc 0 "catch up h1"
# Read there through `mq-replicate --serve` (ReadLog, R63): compared.
MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN" run "$ISR" --cluster "$WORK/h/cl" --verify-replicas
expect_rc 0 "--verify-replicas of replicas on other hosts"
grep -q "^t-0: replica 1 agrees with leader 0 up to the high watermark 5 (1 batches)$" "$WORK/out" ||
  fail "a replica on another host: $(cat "$WORK/out")"
# Hosts whose mq-replicate cannot be started: not verified, naming the host.
MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$WORK/nowhere" run "$ISR" --cluster "$WORK/h/cl" --verify-replicas
expect_rc 69 "--verify-replicas of replicas on hosts that cannot be reached"
grep -q "^t-0: NOT VERIFIED: leader 0: h0:$WORK/h/r0: connection closed" "$WORK/out" ||
  fail "an unreachable leader: $(cat "$WORK/out")"

# --- --check drops a follower whose log fails verification from the ISR ----------
replicated_topic c r0 r1 r2
[[ $(isr_of c) == 0,1,2 ]] || fail "ISR before the damage: $(isr_of c)"
# A bit flipped mid-log: in the batch at offsets 10-14, of 4 batches.
pos=$(batch_pos "c/r1/$SEG" 10)
flip_byte "c/r1/$SEG" $((pos + 80))
run "$ISR" --cluster "$WORK/c/cl" --check
expect_rc 1 "--check with a damaged follower"
grep -q "^t-0: replica 1 fails verification: $WORK/c/r1/$SEG: position $pos: R4: .*; left the ISR (0,1,2 -> 0,2); repair it with mq-replicate --repair$" \
  "$WORK/out" || fail "--check does not name the damage: $(cat "$WORK/out")"
[[ $(isr_of c) == 0,2 ]] || fail "the damaged follower stayed in the ISR: $(isr_of c)"
run "$ISR" --cluster "$WORK/c/cl" --verify-replicas
expect_rc 65 "--verify-replicas with a damaged follower"
grep -q "t-0: replica 1 CORRUPT: $WORK/c/r1/$SEG: position $pos: R4: " "$WORK/out" ||
  fail "--verify-replicas of a damaged follower: $(cat "$WORK/out")"
# elect passes it over (and would have, but it left the ISR at --check).
mv c/r0 c/r0.away
run "$ISR" --cluster "$WORK/c/cl" elect
expect_rc 0 "elect with the damaged follower out of the ISR"
grep -q "^Elected leader 2 for t-0" "$WORK/out" || fail "elect: $(cat "$WORK/out")"
mv c/r0.away c/r0
# Once repaired and caught up it rejoins (r0 too, following the new
# leader); --check and --verify-replicas pass.
run "$REP" -C c/r1 --repair
expect_rc 0 "--repair"
for i in 1 2; do
  for r in r0 r1; do
    run "$REP" -C "c/$r" -q
    expect_rc 0 "catch up $r"
  done
done
[[ $(isr_of c | tr , '\n' | sort | paste -sd, -) == 0,1,2 ]] ||
  fail "the repaired follower did not rejoin: $(isr_of c)"
run "$ISR" --cluster "$WORK/c/cl" --check
expect_rc 0 "--check after the repair"
run "$ISR" --cluster "$WORK/c/cl" --verify-replicas
expect_rc 0 "--verify-replicas after the repair"
# --- replicas on other hosts: --check and elect ask them (R63) -------------------
# Their follower-stopped record (R58) and their log's verification are read
# on their host through `mq-replicate --serve` (ReplicaCheck), as those of
# this host's roots are here. h1 and h2 are this machine through the
# stand-in for ssh; r0 leads from this host.
export MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
# remote_topic NAME [CREATE-OPTION...]: replicated_topic's topic over
# $WORK/NAME/r0 (this host), h1:$WORK/NAME/r1 and h2:$WORK/NAME/r2.
remote_topic() {
  local n=$1
  shift
  mkdir -p "$WORK/$n"
  run "$ISR" --cluster "$WORK/$n/cl" create -t t --partitions 1 --min-insync-replicas 1 \
    --replicas "$WORK/$n/r0,h1:$WORK/$n/r1,h2:$WORK/$n/r2" --controller ctl "$@"
  expect_rc 0 "create $n"
  for i in 1 2 3 4; do seq $((i * 5 - 4)) $((i * 5)) | "$P" -C "$n/r0" -t t --acks 1; done
  for i in 1 2; do
    for r in r1 r2; do
      run "$REP" -C "$n/$r" -q
      expect_rc 0 "catch up $n/$r"
    done
  done
  [[ $(isr_of "$n") == 0,1,2 ]] || fail "$n: ISR $(isr_of "$n")"
}
# elect passes over a candidate on another host whose log fails
# verification: a bit flipped in a rolled segment (segments of 2 batches),
# which its log's opening does not read (it answers ReplicaStatus: live).
remote_topic e -X segment.bytes=250
flip_byte "e/r1/$SEG" 80
mv e/r0 e/r0.away
run "$ISR" --cluster "$WORK/e/cl" elect
expect_rc 0 "elect with a damaged candidate on another host"
grep -q "^Elected leader 2 for t-0" "$WORK/out" || fail "elect over a damaged remote candidate: $(cat "$WORK/out")"
grep -q "t-0: replica 1 cannot lead: h1:$WORK/e/r1/$SEG: position 0: R4: " "$WORK/err" ||
  fail "elect does not name the remote damage: $(cat "$WORK/err")"

remote_topic s
run "$ISR" --cluster "$WORK/s/cl" --check
expect_rc 0 "--check with replicas on other hosts"
# r2's follower gives up (a damaged checkpoint: exit 65, follower-stopped).
cp s/r2/t-0/leader-epoch-checkpoint s/saved-checkpoint
printf '0\n1\n0 x\n' >s/r2/t-0/leader-epoch-checkpoint
run "$REP" -q -C s/r2
expect_rc 65 "a follower on another host with a damaged checkpoint"
cp s/saved-checkpoint s/r2/t-0/leader-epoch-checkpoint
[[ -f s/r2/t-0/follower-stopped ]] || fail "no follower-stopped after exit 65"
# r1's log damaged mid-log.
pos=$(batch_pos "s/r1/$SEG" 10)
flip_byte "s/r1/$SEG" $((pos + 80))
run "$ISR" --cluster "$WORK/s/cl" --check
expect_rc 1 "--check with a stopped and a damaged follower on other hosts"
grep -q "^t-0: ISR 0,1,2 -> 0,1: " "$WORK/out" ||
  fail "--check kept the stopped follower on another host: $(cat "$WORK/out")"
grep -q "^t-0: replica 1 fails verification: h1:$WORK/s/r1/$SEG: position $pos: R4: .*; left the ISR (0,1 -> 0); repair it with mq-replicate --repair$" \
  "$WORK/out" || fail "--check does not name the remote damage: $(cat "$WORK/out")"
grep -q "Replica 2 stopped following at .* (exit 65)" "$WORK/out" ||
  fail "--check does not name the stopped follower on another host: $(cat "$WORK/out")"
[[ $(isr_of s) == 0 ]] || fail "ISR after --check: $(isr_of s)"
run "$ISR" --cluster "$WORK/s/cl" describe
grep -q "Replica: 2.*Stopped: .*Z (exit 65)$" "$WORK/out" ||
  fail "describe of the stopped follower on another host: $(cat "$WORK/out")"
# describe gives a follower's lag in time when its leader is on another
# host too: the leader's fetch-positions (R47, R60) are read there.
mkdir -p d
run "$ISR" --cluster "$WORK/d/cl" create -t t --partitions 1 --min-insync-replicas 1 \
  --replicas "h0:$WORK/d/r0,$WORK/d/r1" --controller ctl
expect_rc 0 "create d"
seq 1 5 | "$P" -C d/r0 -t t --acks 1
for i in 1 2; do
  run "$REP" -C d/r1 -q
  expect_rc 0 "catch up d/r1"
done
run "$ISR" --cluster "$WORK/d/cl" describe
T=$'\t'
grep -q "^${T}${T}Replica: 1${T}LogEnd: 5${T}Lag: 0${T}LagMs: [0-9][0-9]*${T}LastCaughtUp: [0-9T:.-]*Z$" \
  "$WORK/out" || fail "describe with the leader on another host: $(cat "$WORK/out")"
echo "ok"
