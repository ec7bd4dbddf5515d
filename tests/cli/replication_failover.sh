#!/usr/bin/env bash
# Seeded failover runs through the real binaries (format-spec/replication.md
# §17): three log roots of one partition, min.insync.replicas 2, followers
# running `mq-replicate --follow`, producers appending one message at a time
# with --acks all; at random moments the followers die (SIGKILL) and the
# leader's root is made unavailable (renamed away, its processes killed); a
# follower is elected; the old leader returns. Then:
#   - every acknowledged message is on the new leader exactly once, and
#     consumable there;
#   - the replicas' logs are byte-identical once caught up (so no offset
#     holds two different records);
#   - the same runs with --acks 1 lose acknowledged messages at least once
#     if any of them stalls its followers before the failover (proof that
#     the check can see a loss);
#   - a consumer following one replica and a group member on another
#     (drawn by the seed) ran through the failovers: each printed the final
#     log in order, each record once, at its offset with its bytes (never
#     a record a failover cut), and every group's committed offset is valid
#     on the final leader (lib/failover_checks.bash);
#   - an ingestion by --producer-id, run on the leader just before the
#     failover, resumed on the replica that leads just after it and once
#     more at the end, is on the final leader exactly once.
# MQ_FAILOVER_RUNS runs per mode (CI: a few; a soak: as many as you like),
# MQ_FAILOVER_MODES the modes ("all 1", or one of them), MQ_TEST_SEED=N
# repeats one run. Every run prints its seed.
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/failover_checks.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"

RUNS="${MQ_FAILOVER_RUNS:-4}"
BASE_SEED="${MQ_TEST_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}"
if [[ -n "${MQ_TEST_SEED:-}" ]]; then RUNS=1; fi

leader_of() {  # CLUSTER: the partition's leader id (-1: none)
  "$ISR" --cluster "$1" describe -t t | sed -n 's/.*Leader: \(-\{0,1\}[0-9]*\).*/\1/p' | head -1
}

# ingest_upto J: the ingestion's first J messages, --producer-id, on the
# replica that leads now (the one_run's locals); 0 when acknowledged, 1
# when refused or its outcome unknown (a later run resumes it).
ingest_upto() {
  local l rc
  l=$(leader_of "$cl")
  ((l >= 0 && l != away)) || return 1
  set +e
  head -n "$1" "$ingest" | timeout 60 "$P" -C "${r[$l]}" -t t -p 0 --acks "$acks" \
    --producer-id "ing$seed" --ack-timeout 1500 -q 2>>"$dir/produce.err"
  rc=$?
  set -e
  case $rc in
    0) return 0 ;;
    69 | 75 | 79 | 80 | 81) return 1 ;;
    *) fail "seed $seed: mq-produce --producer-id exited $rc: $(tail -1 "$dir/produce.err")" ;;
  esac
}

# one_run SEED ACKS: prints "acked N lost M"; fails on a broken invariant
# (for --acks all, a loss is one).
one_run() {
  local seed=$1 acks=$2 dir="$WORK/run-$1-$2"
  RANDOM=$seed
  mkdir -p "$dir"
  local cl="$dir/cl" r=("$dir/r0" "$dir/r1" "$dir/r2")
  "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "${r[0]},${r[1]},${r[2]}" \
    --min-insync-replicas 2 -X replica.lag.time.max.ms=600 >/dev/null \
    || fail "seed $seed: create"
  local rep=() i
  start_follower() {  # ID
    "$REP" -C "${r[$1]}" -t t --follow -q 2>>"$dir/replicate-$1.err" &
    rep[$1]=$!
    PIDS+=("${rep[$1]}")
  }
  for i in 0 1 2; do start_follower "$i"; done

  local n=$((20 + RANDOM % 30)) kill_at=$((5 + RANDOM % 15)) stall_at=$((2 + RANDOM % 10))
  # A following consumer and a group member, on replicas the seed draws
  # (after the schedule: a seed names the same failovers as before).
  local on_follow=$((RANDOM % 3)) on_group=$((RANDOM % 3))
  # Only a run whose followers stall before the leader's loss leaves
  # acks=1 acknowledgements on the leader alone when it goes.
  if [[ $acks == 1 ]] && ((stall_at < kill_at)); then STALL_FIRST_RUNS=$((STALL_FIRST_RUNS + 1)); fi
  start_consumer "follow-$seed-$acks" "${r[$on_follow]}"
  start_consumer "group-$seed-$acks" "${r[$on_group]}" "g$seed"
  # The ingestion: message j of it is "i<seed>-<j>"; it runs with the
  # input so far on the leader just before the failover, resumes on the
  # replica that leads just after it, and once more at the end.
  local ingest="$dir/ingest"
  seq -f "i$seed-%g" 1 "$n" >"$ingest"
  local acked="$dir/acked" away=-1 stalled=0 leader rc msg
  : >"$acked"
  for ((i = 1; i <= n; i++)); do
    if ((i == stall_at)); then
      # Followers die: what the leader appends now is on no follower.
      for id in 0 1 2; do kill -KILL "${rep[$id]}" 2>/dev/null || true; done
      for id in 0 1 2; do wait "${rep[$id]}" 2>/dev/null || true; done
      stalled=1
    fi
    if ((i == kill_at)); then
      leader=$(leader_of "$cl")
      # The leader's root goes away with its replicator; the others come back.
      kill -KILL "${rep[$leader]}" 2>/dev/null || true
      wait "${rep[$leader]}" 2>/dev/null || true
      mv "${r[$leader]}" "${r[$leader]}.away"
      away=$leader
      if ((stalled)); then
        for id in 0 1 2; do ((id == away)) || start_follower "$id"; done
        stalled=0
      fi
      "$ISR" --cluster "$cl" elect >/dev/null 2>&1 || true
    fi
    if ((away >= 0 && i == kill_at + 5)); then
      # The old leader returns as a follower.
      mv "${r[$away]}.away" "${r[$away]}"
      start_follower "$away"
      away=-1
      "$ISR" --cluster "$cl" elect >/dev/null 2>&1 || true
    fi
    leader=$(leader_of "$cl")
    ((leader >= 0 && leader != away)) || continue  # offline: nobody to append to
    msg="m$seed-$i"
    set +e
    printf '%s\n' "$msg" | timeout 60 "$P" -C "${r[$leader]}" -t t -p 0 --acks "$acks" \
      --ack-timeout 1500 -q 2>>"$dir/produce.err"
    rc=$?
    set -e
    case $rc in
      0) echo "$msg" >>"$acked" ;;
      69 | 75 | 79 | 80 | 81) ;;  # refused, or the outcome unknown: never success
      *) fail "seed $seed: mq-produce exited $rc: $(tail -1 "$dir/produce.err")" ;;
    esac
    if ((i == kill_at - 1 || i == kill_at + 2)); then ingest_upto "$i" || true; fi
  done
  if ((away >= 0)); then
    # The run ended before the old leader returned (kill_at + 5 > n): it
    # returns now, and leads again or follows like the others.
    mv "${r[$away]}.away" "${r[$away]}"
    start_follower "$away"
    away=-1
    "$ISR" --cluster "$cl" elect >/dev/null 2>&1 || true
  fi
  if ((stalled)); then
    # The followers died after the failover (stall_at > kill_at), so nothing
    # restarted them: only a fetching follower rejoins the ISR (expand,
    # replication.md §17.5), so it stays {leader} and an --acks all append
    # is refused (NOT_ENOUGH_REPLICAS, §17.6) however long the retries
    # below wait. Those still dead come back.
    for id in 0 1 2; do kill -0 "${rep[$id]}" 2>/dev/null || start_follower "$id"; done
    stalled=0
  fi
  # The ingestion resumed once more, whole, until it is acknowledged.
  local k
  for ((k = 0; k < 50; k++)); do
    ingest_upto "$n" && break
    sleep 0.2
  done
  ((k < 50)) || fail "seed $seed: the ingestion was never acknowledged: $(tail -1 "$dir/produce.err")"
  for id in 0 1 2; do kill -TERM "${rep[$id]}" 2>/dev/null || true; done
  for id in 0 1 2; do wait "${rep[$id]}" 2>/dev/null || true; done
  # Catch every follower up once; the HW then reaches the log end.
  for pass in 1 2; do
    for id in 0 1 2; do
      timeout 60 "$REP" -C "${r[$id]}" -t t -q 2>>"$dir/replicate-final.err" \
        || fail "seed $seed: final catch-up of replica $id: $(tail -1 "$dir/replicate-final.err")"
    done
  done
  leader=$(leader_of "$cl")
  ((leader >= 0)) || fail "seed $seed: no leader at the end"
  timeout 60 "$C" -C "${r[$leader]}" -t t -e -f '%s\n' >"$dir/consumed" \
    || fail "seed $seed: consume from the leader"
  final_log "${r[$leader]}" "$dir/final"
  check_ingestion "seed $seed: the ingestion by --producer-id" "$dir/final" "$ingest"
  stop_consumer "follow-$seed-$acks" "$(wc -l <"$dir/final")"
  stop_consumer "group-$seed-$acks" "$(wc -l <"$dir/final")"
  check_follow_output "seed $seed: the consumer that followed r$on_follow" \
    "$WORK/follow-$seed-$acks.out" "$dir/final"
  check_follow_output "seed $seed: the group member on r$on_group" \
    "$WORK/group-$seed-$acks.out" "$dir/final" group
  GROUPS_CHECKED=0
  for id in 0 1 2; do check_group_offsets "seed $seed" "${r[$id]}" "${r[$leader]}"; done
  ((GROUPS_CHECKED >= 1)) || fail "seed $seed: no replica holds the group's committed offsets"
  # Exactly once: no message twice, and every acknowledged one present.
  [[ -z "$(sort "$dir/consumed" | uniq -d)" ]] || fail "seed $seed: a message twice: $(sort "$dir/consumed" | uniq -d | head -3)"
  local lost
  lost=$(sort "$acked" | comm -23 - <(sort "$dir/consumed") | wc -l)
  if [[ $acks == all ]] && ((lost > 0)); then
    fail "seed $seed: $lost acknowledged acks=all message(s) lost: $(sort "$acked" | comm -23 - <(sort "$dir/consumed") | head -3)"
  fi
  # Replicas byte-identical: the same segments with the same bytes.
  local f
  for id in 0 1 2; do
    ((id == leader)) && continue
    for f in "${r[$leader]}"/t-0/*.log; do
      cmp -s "$f" "${r[$id]}/t-0/${f##*/}" || fail "seed $seed: replica $id differs from leader $leader in ${f##*/}"
    done
    [[ $(ls "${r[$id]}"/t-0/*.log | wc -l) == $(ls "${r[$leader]}"/t-0/*.log | wc -l) ]] \
      || fail "seed $seed: replica $id has other segments than leader $leader"
  done
  replicas_agree "$cl" "seed $seed"
  echo "acked $(wc -l <"$acked") lost $lost; consumer on r$on_follow, group on r$on_group: $(wc -l <"$dir/final") records followed; $GROUPS_CHECKED group offsets checked; ingestion of $n once"
  rm -rf "$dir"
}

MODES="${MQ_FAILOVER_MODES:-all 1}"
total_lost_acks1=0 STALL_FIRST_RUNS=0
for ((k = 0; k < RUNS; k++)); do
  [[ " $MODES " == *" all "* ]] || break
  seed=$((BASE_SEED + k))
  one_run "$seed" all >"$WORK/result"
  out=$(cat "$WORK/result")
  echo "seed $seed acks=all: $out"
done
for ((k = 0; k < RUNS; k++)); do
  [[ " $MODES " == *" 1 "* ]] || break
  seed=$((BASE_SEED + k))
  one_run "$seed" 1 >"$WORK/result"
  out=$(cat "$WORK/result")
  echo "seed $seed acks=1: $out"
  total_lost_acks1=$((total_lost_acks1 + $(sed -n 's/.*lost \([0-9]*\).*/\1/p' <<<"$out")))
done
# Followers stall before the leader's loss in most runs (stall_at <
# kill_at), so acks=1 must show losses if any of its runs did; a seed whose
# followers stall only with or after the failover (MQ_TEST_SEED=590287,
# 669453) cannot lose.
[[ " $MODES " != *" 1 "* ]] || ((STALL_FIRST_RUNS == 0 || total_lost_acks1 > 0)) || fail "acks=1 lost nothing in $RUNS runs from seed $BASE_SEED ($STALL_FIRST_RUNS stalled its followers before the failover): the check cannot see a loss"
echo "ok ($RUNS runs per mode from seed $BASE_SEED; acks=1 lost $total_lost_acks1)"
