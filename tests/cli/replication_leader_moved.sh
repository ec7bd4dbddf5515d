#!/usr/bin/env bash
# A leader's root moved away under running followers (mq-replicate(1): "a
# partition whose leader is unavailable or moves is retried every 200 ms"),
# across hosts and on one host. Across hosts, the "hosts" h0, h1, h2 (one log
# root each) and ctl (the cluster directory) are one machine reached through
# an ssh stand-in (MQ_RSH, as in replication_hosts.sh); on one host the roots
# are named without a host. For each:
#   1. `mq-replicate --follow` (every replicated topic of its root, no -t)
#      runs for r1 and r2; acks=all on the leader r0 is acknowledged;
#   2. r0 is moved away: the followers meet "No such file or directory" from
#      the leader's side (its `mq-replicate --serve`, or its root on this
#      host) and wait it out instead of exiting;
#   3. `mq-isr elect` makes r1 or r2 leader; acks=all there is acknowledged
#      (exit 0), the other follower following the new leader;
#   4. r0 back in place, its follower catches up from the new leader; every
#      replica ends with the leader's bytes, every acknowledged message once;
#      the followers stop at SIGTERM with exit 0.
# The producers of 1 and 3 are one ingestion by --producer-id, resumed on
# the new leader with the whole input: it appends only what is missing, and
# every message is on the final leader once. A consumer follows r0 (moved
# away and back) and a group member r1 from the start: each printed the
# final log in order, each record once, and every root's group offsets are
# valid on the final leader (lib/failover_checks.bash).
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/failover_checks.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
cd "$WORK"

cat >"$WORK/rsh" <<'EOF'
#!/bin/sh
# ssh stand-in: rsh HOST 'COMMAND' runs COMMAND "on" HOST.
host=$1; shift
MQ_TEST_HOST=$host
export MQ_TEST_HOST
exec sh -c "$1"
EOF
chmod +x "$WORK/rsh"
export MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
unset MQ_TEST_HOST MQ_CLUSTER MQ_TIMEOUT_MS

hw() {  # ROOT TOPIC PARTITION: the HW in its high-watermark file (0: none)
  local f="$1/$2-$3/high-watermark" v=""
  [[ -s $f ]] && v=$("$INSPECT" "$f" | awk '/^topic:/ { print $6 }')
  echo "${v:-0}"
}
log_bytes() { cat "$1/$2-$3"/*.log 2>/dev/null | wc -c; }  # ROOT TOPIC PARTITION
leader_of() {  # CLUSTER TOPIC PARTITION
  "$ISR" --cluster "$1" describe -t "$2" |
    sed -n "s/.*Partition: $3	Leader: \(-\{0,1\}[0-9]*\).*/\1/p"
}
# converge TOPIC PARTITION COUNT LEADER ROOT...: every root holds the
# leader's log bytes with its HW at COUNT.
converge() {
  local t=$1 p=$2 n=$3 leader=$4 r ok
  shift 4
  for _ in $(seq 1200); do  # a guard against a hang, not a timing assertion
    ok=1
    for r in "$leader" "$@"; do
      [[ $(hw "$r" "$t" "$p") == "$n" && $(log_bytes "$r" "$t" "$p") == $(log_bytes "$leader" "$t" "$p") ]] ||
        { ok=0; break; }
    done
    ((ok)) && return 0
    sleep 0.1
  done
  fail "$t-$p: not converged to HW $n (HWs $(for r in "$leader" "$@"; do printf '%s ' "$(hw "$r" "$t" "$p")"; done))"
}

declare -A FPID
# start_follower I: `mq-replicate --follow -v` of root I as host hI.
start_follower() {
  MQ_TEST_HOST=h$1 "$REP" -C "${R[$1]}" --follow -v 2>>"$WORK/follow-$1.err" &
  FPID[$1]=$!
  PIDS+=("$!")
}
# running I: follower I still runs (else its exit status and stderr, and fail).
running() {
  kill -0 "${FPID[$1]}" 2>/dev/null && return 0
  set +e
  wait "${FPID[$1]}"
  local frc=$?
  set -e
  fail "$mode: the follower of r$1 exited with status $frc$2: $(grep -v ' records (' "$WORK/follow-$1.err" | tail -3)"
}

for mode in hosts local; do
  echo "[${SECONDS}s] $mode"
  D="$WORK/$mode"
  mkdir "$D"
  R=("$D/r0" "$D/r1" "$D/r2")
  if [[ $mode == hosts ]]; then
    CL="$D/c" CLUSTER="ctl:$D/c" REPLICAS="h0:${R[0]},h1:${R[1]},h2:${R[2]}" CONTROLLER=(--controller ctl)
  else
    CL="$D/c" CLUSTER="$D/c" REPLICAS="${R[0]},${R[1]},${R[2]}" CONTROLLER=()
  fi
  rm -f "$WORK"/follow-*.err
  # The lag limit is long (a loaded machine is slow): a follower that is
  # gone leaves the ISR only after it, and acks=all waits for it till then.
  run "$ISR" --cluster "$CL" create -t t --partitions 1 --replicas "$REPLICAS" \
    --min-insync-replicas 2 "${CONTROLLER[@]}" -X replica.lag.time.max.ms=20000
  expect_rc 0 "$mode: create"
  [[ $(leader_of "$CL" t 0) == 0 ]] || fail "$mode: r0 should lead"

  # 1. Followers of every replicated topic of their roots.
  start_follower 1
  start_follower 2
  start_consumer "follow-$mode" "${R[0]}"
  start_consumer "group-$mode" "${R[1]}" "g-$mode"
  seq -f "a-%g" 1 $((20 + RANDOM % 50)) >acked
  run env MQ_TEST_HOST=h0 "$P" -C "${R[0]}" -t t -p 0 --acks all --ack-timeout 60000 -q \
    --producer-id "ing-$mode" acked
  expect_rc 0 "$mode: acks=all on r0"
  converge t 0 "$(wc -l <acked)" "${R[0]}" "${R[1]}" "${R[2]}"

  # 2. The leader's root moved away. A follower that meets it (-v: the
  # leader's "No such file or directory", at a fetch that opens the
  # partition again) waits; one whose leader still holds the partition open
  # fetches on. Either way it keeps running through a few rounds (CarryState
  # and the ISR rule run once a second).
  mv "${R[0]}" "$D/r0.moved"
  for i in 1 2; do
    for _ in $(seq 30); do
      grep -q "No such file or directory" "$WORK/follow-$i.err" && break
      kill -0 "${FPID[$i]}" 2>/dev/null || break
      sleep 0.1
    done
    running "$i" " when the leader's root was moved away"
  done
  echo "$mode: r0 moved away; follower 1: $(grep -m1 "No such file" "$WORK/follow-1.err" || echo "fetching on")"

  # 3. An election: the new leader's acks=all is acknowledged, the other
  # follower following it.
  run "$ISR" --cluster "$CLUSTER" elect -t t
  expect_rc 0 "$mode: elect with r0 moved away"
  new=$(leader_of "$CL" t 0)
  [[ $new == 1 || $new == 2 ]] || fail "$mode: elected $new, want 1 or 2: $(cat "$WORK/out")"
  other=$((3 - new))
  echo "$mode: $(cat "$WORK/out")"
  seq -f "b-%g" 1 $((20 + RANDOM % 50)) >batch
  cat batch >>acked
  # The ingestion resumed on the new leader: only b-* are missing.
  run env MQ_TEST_HOST="h$new" "$P" -C "${R[$new]}" -t t -p 0 --acks all --ack-timeout 60000 -q \
    --producer-id "ing-$mode" acked
  expect_rc 0 "$mode: acks=all on the new leader r$new (r$other following it)"
  running "$other" " after the election"
  running "$new" " after the election"
  converge t 0 "$(wc -l <acked)" "${R[$new]}" "${R[$other]}"

  # 4. r0 back: its follower catches up from the new leader.
  mv "$D/r0.moved" "${R[0]}"
  start_follower 0
  converge t 0 "$(wc -l <acked)" "${R[$new]}" "${R[$other]}" "${R[0]}"
  for i in 0 1 2; do
    running "$i" " before SIGTERM"
    kill -TERM "${FPID[$i]}"
    set +e
    wait "${FPID[$i]}"
    frc=$?
    set -e
    ((frc == 0)) || fail "$mode: the follower of r$i stopped with status $frc: $(tail -3 "$WORK/follow-$i.err")"
  done
  for i in 0 1 2; do
    run "$C" -C "${R[$i]}" -t t -p 0 -e -f '%s\n'
    expect_rc 0 "$mode: consume r$i"
    expect_eq "$mode: every acknowledged message once on r$i" "$(cat acked)" "$(cat "$WORK/out")"
    cmp -s "${R[$new]}/t-0/00000000000000000000.log" "${R[$i]}/t-0/00000000000000000000.log" ||
      fail "$mode: r$i differs from the leader r$new"
  done
  # Replicas on other hosts are not compared (mq-isr(1)).
  [[ $mode != local ]] || replicas_agree "$CL" "$mode"
  final_log "${R[$new]}" "final-$mode"
  check_ingestion "$mode: the ingestion resumed on r$new" "final-$mode" acked
  stop_consumer "follow-$mode" "$(wc -l <"final-$mode")"
  stop_consumer "group-$mode" "$(wc -l <"final-$mode")"
  check_follow_output "$mode: the consumer that followed r0" "$WORK/follow-$mode.out" "final-$mode"
  check_follow_output "$mode: the group member on r1" "$WORK/group-$mode.out" "final-$mode" group
  GROUPS_CHECKED=0
  for i in 0 1 2; do check_group_offsets "$mode" "${R[$i]}" "${R[$new]}"; done
  ((GROUPS_CHECKED >= 1)) || fail "$mode: no root holds the group's committed offsets"
  echo "$mode: the consumers printed the final log ($(wc -l <"final-$mode") records); $GROUPS_CHECKED group offsets valid"
done
echo ok
