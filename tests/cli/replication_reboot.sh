#!/usr/bin/env bash
# A leader's host restarts with a log shorter than its followers'
# (format-spec/replication.md §17.9, R53-R55), through the real tools. The
# power loss under --fsync none is simulated: the leader's active segment
# is cut inside its last batch (what the disk may keep of an unsynced
# tail), and the reboot with MQ_TEST_BOOT_ID (R27's test seam), so the next
# writer recovers the valid prefix (R28).
#  - With other ISR members, mq-produce on the restarted leader appends
#    nothing and exits 69 saying to run mq-isr elect; it left the ISR and
#    the partition has no leader; the election picks an ISR member, and
#    every message the ISR held survives on every replica.
#  - Alone in the ISR, it leads on in a new epoch and its followers cut
#    what it lost: all replicas end with the same records.
#  - mq-isr elect run before the restarted leader made any call counts it
#    unavailable (its claim is of another boot) and elects an ISR member;
#    across hosts too, where the replica's ReplicaStatus answer says so.
# In the first, a consumer follows the restarted leader from its restart (its
# log recovered) and a group member r2, through the election and r0's
# return: each printed the final log in order, each record once; every
# root's group offsets are valid on the new leader; the new leader's
# messages are an ingestion by --producer-id, there once
# (lib/failover_checks.bash).
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/failover_checks.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"
BOOT_A=0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9
BOOT_B=11111111-2222-3333-4444-555555555555
export MQ_TEST_BOOT_ID=$BOOT_A

# replicate_all ROOT...: each follower fetches until caught up, twice (the
# second fetch reports its LEO: the HW reaches the log end).
replicate_all() {
  local r
  for r in "$@" "$@"; do
    run "$REP" -C "$r" -t t -q
    expect_rc 0 "replicate to $r"
  done
}
# power_loss ROOT: the host of ROOT loses power and boots again.
power_loss() {
  local seg
  seg=$(ls "$1"/t-0/*.log | tail -1)
  truncate -s $(($(stat -c %s "$seg") - 7)) "$seg"
  export MQ_TEST_BOOT_ID=$BOOT_B
}
# elect_after_reboot WHERE N: r0 (the leader) rebooted; mq-isr elect passes
# it over for replica 1, and once r0 and r2 follow, all three hold 1..N.
elect_after_reboot() {
  local r
  run "$ISR" --cluster "$cl" elect
  expect_rc 0 "elect$1 after the reboot"
  expect_eq "the election$1 passed over the restarted leader" "1 1 1,2" "$(partition_line "$cl")"
  replicate_all "$r0" "$r2"
  for r in "$r0" "$r1" "$r2"; do
    run "$C" -C "$r" -t t -p 0 -e
    expect_eq "every message on $r$1" "$(seq 1 "$2")" "$(cat "$WORK/out")"
  done
  # Replicas on other hosts are not compared (mq-isr(1)).
  [[ -n $1 ]] || replicas_agree "$cl" "after the reboot"
}
# partition_line CLUSTER: "leader leader_epoch isr" of partition t-0.
partition_line() { awk '$1 == "partition" && $2 == "t" && $3 == "0" {print $5, $6, $8}' "$1/cluster-state"; }

# --- the leader restarts while the ISR holds more ------------------------------
r0="$WORK/a/r0" r1="$WORK/a/r1" r2="$WORK/a/r2" cl="$WORK/a/cl"
mkdir a
run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1,$r2" --min-insync-replicas 2
expect_rc 0 "create"
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 1 50)
expect_rc 0 "produce 1-50"
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 51 100)
expect_rc 0 "produce 51-100"
replicate_all "$r1" "$r2"
run "$C" -C "$r1" -t t -p 0 -e
expect_eq "what the ISR holds before the power loss" "$(seq 1 100)" "$(cat "$WORK/out")"
grep -q "^0 " "$r0/t-0/leader-claim" || fail "no claim on epoch 0: $(cat "$r0/t-0/leader-claim")"
run "$INSPECT" --verify "$r0/t-0"
expect_rc 0 "verify of a partition with a leader claim"

power_loss "$r0"
run "$P" -C "$r0" -t t -p 0 --acks all <<<"after the reboot"
expect_rc 69 "produce on the restarted leader"
grep -q "R55" "$WORK/err" || fail "the refusal names no rule: $(cat "$WORK/err")"
grep -q "mq-isr elect" "$WORK/err" || fail "the refusal says not what to do: $(cat "$WORK/err")"
# leader -1 in epoch 1, replica 0 out of the ISR.
expect_eq "the state after the restarted leader gave its epoch up" "-1 1 1,2" \
  "$(partition_line "$cl")"
grep -q "restarted (R55)" "$cl/isr-changes" || fail "isr-changes: $(cat "$cl/isr-changes")"
run "$P" -C "$r0" -t t -p 0 <<<"again"
expect_rc 69 "produce to a partition without a leader"
start_consumer follow-a "$r0"
start_consumer group-a "$r2" g
run "$ISR" --cluster "$cl" elect
expect_rc 0 "elect"
expect_eq "the election chose an ISR member" "1 2 1,2" "$(partition_line "$cl")"
seq 101 110 >ingest
run "$P" -C "$r1" -t t -p 0 --acks 1 --producer-id ing ingest
expect_rc 0 "produce on the new leader"
replicate_all "$r0" "$r2"
for r in "$r0" "$r1" "$r2"; do
  run "$C" -C "$r" -t t -p 0 -e
  expect_eq "every message on $r" "$(seq 1 110)" "$(cat "$WORK/out")"
done
expect_eq "replica 0 rejoined the ISR" "1 2 1,2,0" "$(partition_line "$cl")"
final_log "$r1" final-a
check_ingestion "the new leader's ingestion" final-a ingest
stop_consumer follow-a 110
stop_consumer group-a 110
check_follow_output "the consumer that followed the restarted leader" "$WORK/follow-a.out" final-a
check_follow_output "the group member on r2" "$WORK/group-a.out" final-a group
for r in "$r0" "$r1" "$r2"; do check_group_offsets "after the reboot" "$r" "$r1"; done
((GROUPS_CHECKED >= 1)) || fail "no root holds the group's committed offsets"

# --- the leader restarts alone in the ISR ---------------------------------------
export MQ_TEST_BOOT_ID=$BOOT_A
r0="$WORK/b/r0" r1="$WORK/b/r1" cl="$WORK/b/cl"
mkdir b
run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1" --min-insync-replicas 1 \
  -X replica.lag.time.max.ms=1
expect_rc 0 "create (2 replicas)"
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 1 50)
expect_rc 0 "produce 1-50"
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 51 100)
expect_rc 0 "produce 51-100"
replicate_all "$r1"
sleep 0.01
run "$ISR" --cluster "$cl" --check
expect_eq "replica 1 left the ISR" "0 0 0" "$(partition_line "$cl")"
power_loss "$r0"
run "$P" -C "$r0" -t t -p 0 --acks all < <(seq 1001 1005)
expect_rc 0 "produce on the restarted leader alone in the ISR"
expect_eq "a new epoch, same leader" "0 1 0" "$(partition_line "$cl")"
run "$C" -C "$r0" -t t -p 0 -e
n=$(wc -l <"$WORK/out")
[[ $n -lt 105 ]] || fail "the power loss cut nothing: $n messages"
tail -5 "$WORK/out" >got
expect_eq "the new messages follow what the leader kept" "$(seq 1001 1005)" "$(cat got)"
run "$C" -C "$r0" -t t -p 0 -e
cp "$WORK/out" leader.all
run "$REP" -C "$r1" -t t -q
expect_rc 0 "replica 1 follows the new epoch"
run "$REP" -C "$r1" -t t -q
expect_rc 0 "replica 1 reports its log end"
run "$C" -C "$r1" -t t -p 0 -e
expect_eq "replica 1 cut what the leader lost" "$(cat leader.all)" "$(cat "$WORK/out")"
# --- mq-isr elect right after the reboot: the restarted leader is passed over --
export MQ_TEST_BOOT_ID=$BOOT_A
r0="$WORK/c/r0" r1="$WORK/c/r1" r2="$WORK/c/r2" cl="$WORK/c/cl"
mkdir c
run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1,$r2" --min-insync-replicas 2
expect_rc 0 "create"
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 1 50)
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 51 100)
expect_rc 0 "produce 51-100"
replicate_all "$r1" "$r2"
power_loss "$r0"
run "$ISR" --cluster "$cl" describe
grep -q "restarted since it last led" "$WORK/out" || fail "describe: $(cat "$WORK/out")"
elect_after_reboot "" 100
# --- the same across hosts: ReplicaStatus says the leader restarted --------------
# h0, h1, h2 and ctl are this machine, reached through a stand-in for ssh
# (the command runs under `sh -c`, as sshd runs it); the reboot's boot id
# reaches h0's `mq-replicate --serve` through the environment.
export MQ_TEST_BOOT_ID=$BOOT_A
printf '#!/bin/sh\nshift\nexec sh -c "$1"\n' >"$WORK/rsh"
chmod +x "$WORK/rsh"
export MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
r0="$WORK/d/r0" r1="$WORK/d/r1" r2="$WORK/d/r2" cl="$WORK/d/cl"
mkdir d
run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "h0:$r0,h1:$r1,h2:$r2" \
  --min-insync-replicas 2 --controller ctl
expect_rc 0 "create across hosts"
run "$P" -C "$r0" -t t -p 0 --acks 1 < <(seq 1 50)
expect_rc 0 "produce 1-50 on h0"
replicate_all "$r1" "$r2"
power_loss "$r0"
elect_after_reboot " across hosts" 50
unset MQ_RSH MQ_REMOTE_BINDIR
echo "ok"
