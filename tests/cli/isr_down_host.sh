#!/usr/bin/env bash
# mq-isr contacts a replica root on another host through one connection
# for the whole run (one `mq-replicate --serve` there), whatever asks it:
# --check (liveness, follower-stopped and verification, R58, R63) and
# --verify-replicas (ReadLog, R57) alike. A host that is down is contacted
# once per run, not once per partition or per question (mq-isr(1)).
# MQ_RSH is a stand-in for ssh (as in replication_hosts.sh) that logs
# every connection and refuses those to a host marked down.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

FAULTS="$WORK/faults"
mkdir "$FAULTS"
cat >"$WORK/rsh" <<'EOF'
#!/bin/sh
# ssh stand-in: rsh HOST 'COMMAND'.
host=$1; shift
if [ -e "$FAULTS/$host.down" ]; then
  echo "$host refused" >>"$FAULTS/log"
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255
fi
echo "$host" >>"$FAULTS/log"
exec sh -c "$1"
EOF
chmod +x "$WORK/rsh"
export FAULTS MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN" MQ_CLUSTER="$WORK/cl"
unset MQ_TIMEOUT_MS

# Three partitions over r0 and r1 here and r2 on h2, led by each in turn.
run "$ISR" create -t t --partitions 3 --replicas "$WORK/r0,$WORK/r1,h2:$WORK/r2" \
  --min-insync-replicas 1 --controller ctl
expect_rc 0 "create: $(cat "$WORK/err")"
for p in 0 1 2; do seq 1 5 | "$P" -q -C r$p -t t -p $p --acks 1; done
for r in r0 r1 r2; do
  run "$REP" -q -C $r
  expect_rc 0 "catch up $r: $(cat "$WORK/err")"
done
# Up, h2 is asked through one connection per run.
: >"$FAULTS/log"
run "$ISR" --verify-replicas
expect_rc 0 "--verify-replicas: $(cat "$WORK/out")"
expect_eq "connections to h2 by --verify-replicas" 1 "$(grep -c '^h2$' "$FAULTS/log")"
: >"$FAULTS/log"
run "$ISR" --check
expect_rc 0 "--check: $(cat "$WORK/out")"
expect_eq "connections to h2 by --check" 1 "$(grep -c '^h2$' "$FAULTS/log")"

# Down: one refused connection per run, each partition reported.
touch "$FAULTS/h2.down"
: >"$FAULTS/log"
run "$ISR" --verify-replicas
expect_rc 69 "--verify-replicas with h2 down: $(cat "$WORK/out")"
expect_eq "connections to h2 (down) by --verify-replicas" 1 "$(grep -c '^h2 refused$' "$FAULTS/log")"
for p in 0 1; do
  grep -q "^t-$p: replica 2 (h2:$WORK/r2/t-$p) not verified: " "$WORK/out" ||
    fail "--verify-replicas: t-$p: $(cat "$WORK/out")"
done
grep -q "^t-2: NOT VERIFIED: " "$WORK/out" || fail "--verify-replicas: t-2: $(cat "$WORK/out")"
: >"$FAULTS/log"
run "$ISR" --check
expect_rc 1 "--check with h2 down: $(cat "$WORK/out")"
expect_eq "connections to h2 (down) by --check" 1 "$(grep -c '^h2 refused$' "$FAULTS/log")"
grep -q "^t-2: unavailable" "$WORK/out" || fail "--check: t-2: $(cat "$WORK/out")"
echo "ok: a replica root on another host is contacted once per run, up or down"
