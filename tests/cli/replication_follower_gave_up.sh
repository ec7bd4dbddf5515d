#!/usr/bin/env bash
# Every way a follower gives up on a partition is reported by the next
# `mq-isr --check` at once, not after replica.lag.time.max.ms (R58,
# mq-replicate(1)): one that cannot even open or lock its partition
# directory (a symlink in its place, a directory it may not read) cannot
# leave follower-stopped there, so it leaves the ISR itself, the reason
# naming why. A run that finds replicate.lock held by another process
# has not stopped anyone's following: it changes nothing.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"
export MQ_CLUSTER="$WORK/cl"

run "$ISR" create -t t --partitions 1 --replicas r0,r1,r2 --min-insync-replicas 1 \
  -X replica.lag.time.max.ms=3600000
expect_rc 0 "create"
seq 1 10 | "$P" -q -C r0 -t t --acks 1
for r in r1 r2; do
  run "$REP" -q -C $r
  expect_rc 0 "catch up $r"
done
run "$ISR" --check
expect_rc 0 "--check before: $(cat "$WORK/out")"

# --- a lock held by another process: nothing recorded, the ISR kept --------------
exec 8<r2/t-0/replicate.lock
flock 8
run "$REP" -C r2
expect_rc 75 "a follower that finds replicate.lock held"
grep -q "another mq-replicate follows this partition" "$WORK/err" || fail "busy: $(cat "$WORK/err")"
[[ ! -e r2/t-0/follower-stopped ]] || fail "a run that found the lock held wrote follower-stopped"
[[ $(isr_of .) == 0,1,2 ]] || fail "a run that found the lock held changed the ISR: $(isr_of .)"
exec 8<&-

# --- a partition directory that cannot be opened: a symlink in its place ------------
seq 11 15 | "$P" -q -C r0 -t t --acks 1
mv r2/t-0 r2/t-0.real
ln -s t-0.real r2/t-0
run "$REP" -C r2
expect_rc 77 "a follower whose partition directory is a symlink"
grep -q "t-0: is a symlink; refused" "$WORK/err" || fail "symlink: $(cat "$WORK/err")"
run "$ISR" --check
expect_rc 1 "--check after a follower that could not open its partition"
grep -q "^t-0: under-replicated" "$WORK/out" || fail "--check: $(cat "$WORK/out")"
[[ $(isr_of .) == 0,1 ]] || fail "replica 2 is still in the ISR: $(isr_of .)"
grep -q " isr 0,1,2>0,1 reason shrink: replica 2 stopped following (R58): .*t-0: is a symlink; refused" \
  cl/isr-changes || fail "isr-changes: $(cat cl/isr-changes)"

# Its directory back, its next run follows again and the leader takes it
# back into the ISR.
rm r2/t-0
mv r2/t-0.real r2/t-0
run "$REP" -q -C r2
expect_rc 0 "the follower runs again"
[[ $(isr_of .) == 0,1,2 ]] || fail "replica 2 not back in the ISR: $(isr_of .)"

# --- a partition directory the follower may not read ---------------------------------
# root passes every permission check: the follower runs as nobody, owner
# of the roots and the cluster state.
seq 16 20 | "$P" -q -C r0 -t t --acks 1
chmod o+x "$WORK"
chown -R 65534:65534 r0 r1 cl
chmod 000 r1/t-0
follower=("$REP" -C r1)
[[ $(id -u) == 0 ]] && follower=(setpriv --reuid=65534 --regid=65534 --clear-groups "${follower[@]}")
run "${follower[@]}"
expect_rc 77 "a follower that may not read its partition directory"
grep -q "r1/t-0: Permission denied" "$WORK/err" || fail "unreadable: $(cat "$WORK/err")"
run "$ISR" --check
expect_rc 1 "--check after a follower that could not read its partition"
grep -q "^t-0: under-replicated" "$WORK/out" || fail "--check: $(cat "$WORK/out")"
[[ $(isr_of .) == 0,2 ]] || fail "replica 1 is still in the ISR: $(isr_of .)"
grep -q " isr 0,1,2>0,2 reason shrink: replica 1 stopped following (R58): .*r1/t-0: Permission denied" \
  cl/isr-changes || fail "isr-changes: $(cat cl/isr-changes)"
chmod 750 r1/t-0
echo "ok: a follower that gives up is reported by --check at once, however it gave up"
