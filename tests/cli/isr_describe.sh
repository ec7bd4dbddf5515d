#!/usr/bin/env bash
# mq-isr describe shows each replica's log end, its lag in offsets and in
# time and its last caught-up time, in text and with --json (the times are
# those the leader records in fetch-positions, R47, R60); a follower that
# stops on an error it does not wait out (exit 65 here) leaves
# follower-stopped in its partition directory (R58), the next --check
# reports it at once and takes it out of the ISR, long before
# replica.lag.time.max.ms, and the follower's next run clears it
# (mq-isr(1), mq-replicate(1)).
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"
export MQ_CLUSTER="$WORK/cl"
T=$'\t'
now_ms() { date +%s%3N; }

run "$ISR" create -t t --partitions 1 --replicas r0,r1,r2 --min-insync-replicas 1 \
  -X replica.lag.time.max.ms=3600000
expect_rc 0 "create"
seq 1 10 | "$P" -q -C r0 -t t --acks 1
for r in r1 r2; do
  run "$REP" -q -C $r
  expect_rc 0 "catch up $r"
done
# Replica 2 stops 7 records behind; replica 1 takes them.
seq 11 17 | "$P" -q -C r0 -t t --acks 1
run "$REP" -q -C r1
expect_rc 0 "catch up r1 again"

# --- text: a line per replica under its partition's line ---------------------------
before=$(now_ms)
run "$ISR" describe
expect_rc 0 "describe"
after=$(now_ms)
grep -q "^${T}Topic: t${T}Partition: 0${T}Leader: 0${T}Replicas: 0,1,2${T}Isr: 0,1,2${T}" "$WORK/out" ||
  fail "partition line: $(cat "$WORK/out")"
line() { grep "^${T}${T}Replica: $1${T}" "$WORK/out" || fail "no line for replica $1: $(cat "$WORK/out")"; }
[[ $(line 0) == "${T}${T}Replica: 0${T}LogEnd: 17${T}Lag: 0${T}LagMs: 0${T}LastCaughtUp: -" ]] ||
  fail "leader's line: $(line 0)"
[[ $(line 1) =~ ^$T$T"Replica: 1"$T"LogEnd: 17"$T"Lag: 0"$T"LagMs: "[0-9]+$T"LastCaughtUp: "[0-9-]{10}T[0-9:.]{12}Z$ ]] ||
  fail "replica 1's line: $(line 1)"
[[ $(line 2) =~ ^$T$T"Replica: 2"$T"LogEnd: 10"$T"Lag: 7"$T"LagMs: "[0-9]+$T"LastCaughtUp: "[0-9-]{10}T[0-9:.]{12}Z$ ]] ||
  fail "replica 2's line: $(line 2)"
# The time lag is now minus the last caught-up time the leader recorded:
# lastCaughtUpMs of replica 2's entry of epoch 0 (R47) in fetch-positions'
# current copy (R60: of the two, the one with the higher sequence; both are
# whole here, nobody writing).
caught2=$(python3 - r0/t-0/fetch-positions <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
assert len(data) == 4096
best = None
for base in (0, 2048):
    magic, version, seq, count = struct.unpack_from('>IIQI', data, base)
    if magic == 0x4D514650 and (best is None or seq > best[0]):
        best = (seq, base, count)
_, base, count = best
for i in range(count):
    replica, epoch, leo, fetch, caught, lleo = struct.unpack_from('>iiqqqq', data, base + 24 + 40 * i)
    if replica == 2 and epoch == 0:
        print(caught)
PY
)
[[ -n $caught2 ]] || fail "no position of replica 2 in r0/t-0/fetch-positions"
lag2=$(line 2 | sed 's/.*LagMs: \([0-9]*\).*/\1/')
((caught2 + lag2 >= before && caught2 + lag2 <= after)) ||
  fail "replica 2: LagMs $lag2 is not now - $caught2 (describe ran in [$before, $after])"
iso2=$(line 2 | sed 's/.*LastCaughtUp: //')
[[ $(date -u -d "@$((caught2 / 1000))" +%Y-%m-%dT%H:%M:%S).$(printf %03d $((caught2 % 1000)))Z == "$iso2" ]] ||
  fail "replica 2: LastCaughtUp $iso2 is not $caught2"
# A filter prints the matching partition lines only, as before.
run "$ISR" describe --at-min-isr
expect_rc 0 "describe --at-min-isr"
[[ ! -s "$WORK/out" ]] || fail "--at-min-isr matched: $(cat "$WORK/out")"

# --- --json: the same fields -----------------------------------------------------------
before=$(now_ms)
run "$ISR" describe --json
expect_rc 0 "describe --json"
after=$(now_ms)
jq -e --argjson c2 "$caught2" --argjson b "$before" --argjson a "$after" '
  select(.type == "partition") | .replica_lag as $l
  | ($l | map(.replica)) == [0, 1, 2]
  and ($l[0] | .log_end_offset == 17 and .lag == 0 and .lag_ms == 0
               and .last_caught_up_ms == null and .stopped == null)
  and ($l[1] | .log_end_offset == 17 and .lag == 0 and .stopped == null)
  and ($l[2] | .log_end_offset == 10 and .lag == 7 and .last_caught_up_ms == $c2
               and .last_caught_up_ms + .lag_ms >= $b and .last_caught_up_ms + .lag_ms <= $a
               and (.last_fetch_ms | type) == "number" and .stopped == null)' \
  "$WORK/out" >/dev/null || fail "describe --json: $(cat "$WORK/out")"

# --- a follower that gives up is reported by the next --check -------------------------
run "$ISR" --check
expect_rc 0 "--check before"
cp r2/t-0/leader-epoch-checkpoint saved-checkpoint
printf '0\n1\n0 x\n' >r2/t-0/leader-epoch-checkpoint
run "$REP" -q -C r2
expect_rc 65 "a follower with a damaged checkpoint"
[[ -f r2/t-0/follower-stopped ]] || fail "no follower-stopped after exit 65"
stopped_at=$(sed -n '3s/ .*//p' r2/t-0/follower-stopped)
[[ $(sed -n 3p r2/t-0/follower-stopped) == "$stopped_at 65" ]] ||
  fail "follower-stopped: $(cat r2/t-0/follower-stopped)"
run "$ISR" --check
expect_rc 1 "--check with a stopped follower"
grep -q "^t-0: ISR 0,1,2 -> 0,1: " "$WORK/out" || fail "--check kept replica 2 in the ISR: $(cat "$WORK/out")"
grep -q "^t-0: under-replicated,follower-stopped${T}" "$WORK/out" ||
  fail "--check problems: $(cat "$WORK/out")"
grep -q "^${T}Replica 2 stopped following at .* (exit 65)" "$WORK/out" ||
  fail "--check does not name the stopped follower: $(cat "$WORK/out")"
grep -q " isr 0,1,2>0,1 reason shrink: replica 2 stopped following (R58)" cl/isr-changes ||
  fail "isr-changes: $(cat cl/isr-changes)"
run "$ISR" describe
grep -q "^${T}${T}Replica: 2${T}LogEnd: 10${T}Lag: 7${T}.*${T}Stopped: .*Z (exit 65)$" "$WORK/out" ||
  fail "describe of the stopped follower: $(cat "$WORK/out")"
run "$ISR" describe --json
jq -e --argjson at "$stopped_at" 'select(.type == "partition")
  | .replica_lag[2].stopped == {"at_ms": $at, "exit_status": 65}' "$WORK/out" >/dev/null ||
  fail "describe --json of the stopped follower: $(cat "$WORK/out")"

# --- its next run follows again and clears it ---------------------------------------
cp saved-checkpoint r2/t-0/leader-epoch-checkpoint
run "$REP" -q -C r2
expect_rc 0 "the follower runs again"
[[ ! -e r2/t-0/follower-stopped ]] || fail "follower-stopped left after a good run"
run "$ISR" --check
expect_rc 0 "--check after the follower ran again: $(cat "$WORK/out")"
run "$ISR" describe
[[ $(line 2) == "${T}${T}Replica: 2${T}LogEnd: 17${T}Lag: 0${T}"* ]] || fail "replica 2 after: $(line 2)"

# --- the same under --follow: the partition, started again after each failure,
# keeps the record; once the damage is gone its next start clears it ------------
# wait_for COND...: polls until the command succeeds (the limit only stops a hang).
wait_for() {
  local i
  for ((i = 0; i < 600; ++i)); do "$@" && return 0; sleep 0.1; done
  fail "never: $*"
}
printf '0\n1\n0 x\n' >r2/t-0/leader-epoch-checkpoint
"$REP" -q -C r2 --follow 2>"$WORK/follow.err" &
PIDS+=($!)
wait_for test -f r2/t-0/follower-stopped
run "$ISR" --check
expect_rc 1 "--check with a stopped --follow partition"
grep -q "^${T}Replica 2 stopped following at .* (exit 65)" "$WORK/out" ||
  fail "--check under --follow: $(cat "$WORK/out")"
cp saved-checkpoint r2/t-0/leader-epoch-checkpoint
wait_for test ! -e r2/t-0/follower-stopped
kill -0 "${PIDS[-1]}" || fail "the follower exited: $(cat "$WORK/follow.err")"
run "$ISR" --check
expect_rc 0 "--check once --follow follows again: $(cat "$WORK/out")"
echo "ok"
