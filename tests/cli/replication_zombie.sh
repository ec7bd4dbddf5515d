#!/usr/bin/env bash
# A deposed leader's producer that passed its leadership check before an
# election appends nothing once the old leader's root follows the new
# leader (format-spec/replication.md §17.3 step 2, R56), through the real
# tools. The producer is stopped by gdb (a breakpoint is a pause between two
# instructions, as a SIGSTOP or a long stall is) at each point between its
# check and its write:
#   - on PartitionWriter::BeginLeaderEpoch (its check of the cluster state
#     and its claim passed), and
#   - on PartitionWriter::Append (its epoch begun);
# r0 is deposed (its root away, mq-isr elect: r1 or r2 leads in epoch 1),
# returns, and its follower is stopped by gdb where it appends the new
# leader's batches (it has compared its log with the leader's and
# fetched). The new leader acknowledges 5 messages with --acks all
# meanwhile. The producer resumes: it is fenced (exit 75, R56) and appends
# nothing; the follower appends the new leader's batches, and every replica
# holds the same records at every offset (before R56, r0 held the
# producer's record at offset 5, the new leader's n-1 there on r1 and r2,
# and r0's follower stopped on "replicated batch at 0 starts at offset 5;
# the log ends before 6").
# A consumer follows r0 (the deposed leader that returns) and a group
# member r1 from the start: each printed the final log in order, each
# record once (never z-5); every root's group offsets are valid on the new
# leader; the new leader's messages are an ingestion by --producer-id, there
# once (lib/failover_checks.bash).
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/failover_checks.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
command -v gdb >/dev/null || fail "gdb not installed (build.sh installs it: TEST_PACKAGES)"
cd "$WORK"

# wait_for FILE PATTERN WHAT [stop]: FILE shows PATTERN (bounded: a hang
# fails); with `stop`, a program that exited instead fails at once.
wait_for() {
  local i
  for ((i = 0; i < 1200; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    if [[ ${4:-} == stop ]] && grep -q "^\[Inferior 1 .* exited" "$1" 2>/dev/null; then
      grep -q "$2" "$1" || fail "$3: it exited: $(cat "$1")"
    fi
    sleep 0.1
  done
  fail "$3: never saw '$2' in $1: $(cat "$1")"
}
# stopped_at NAME FUNCTION PROGRAM ARG...: runs PROGRAM ARG... <NAME.in under
# gdb, stopped on FUNCTION (gdb reads its commands from the FIFO NAME.cmd,
# held open on the descriptor in $fd_NAME). The arguments have no spaces.
stopped_at() {
  local name=$1 fn=$2 program=$3
  shift 3
  mkfifo "$name.cmd"
  gdb -q -nx "$program" <"$name.cmd" >"$name.out" 2>&1 &
  PIDS+=($!)
  eval "exec {fd_$name}>\"$name.cmd\""
  gdb_cmd "$name" "set pagination off" "set confirm off" "break $fn" "set args $* <$name.in" "run"
  wait_for "$name.out" "Breakpoint 1, " "$name stopped on $fn" stop
}
# gdb_cmd NAME LINE...: sends commands to NAME's gdb.
gdb_cmd() {
  local name=$1 fd
  shift
  fd="fd_$name"
  printf '%s\n' "$@" >&"${!fd}"
}
# resume NAME: NAME runs to its end; prints its exit status.
resume() {
  gdb_cmd "$1" "delete" "continue" 'printf "exit status %d\n", $_exitcode' "quit"
  wait_for "$1.out" "exit status [0-9]" "$1 ran to its end"
  sed -n 's/.*exit status \([0-9]*\)$/\1/p' "$1.out"
}
# records ROOT: "offset value" of every record ROOT holds below its HW.
records() {
  run "$BIN/mq-consume" -C "$1" -t t -p 0 -e -f '%o %s\n'
  expect_rc 0 "consume $1"
  cat "$WORK/out"
}

# follow: r1 and r2 follow (mq-replicate --follow); stop_following ends them.
FOLLOWERS=()
follow() {
  local r
  for r in "$r1" "$r2"; do
    "$REP" -C "$r" -t t --follow -q 2>>"$r.err" &
    FOLLOWERS+=($!)
    PIDS+=($!)
  done
}
stop_following() {
  kill "${FOLLOWERS[@]}" 2>/dev/null || true
  wait "${FOLLOWERS[@]}" 2>/dev/null || true
  FOLLOWERS=()
}

# scenario NAME FUNCTION: the producer stopped on FUNCTION.
scenario() {
  local name=$1 fn=$2 dir="$WORK/$1"
  mkdir "$dir"
  cd "$dir"
  local r0="$dir/r0" r1="$dir/r1" r2="$dir/r2" cl="$dir/cluster" status
  run "$ISR" --cluster "$cl" create -t t --partitions 1 --replicas "$r0,$r1,$r2" \
    --min-insync-replicas 1
  expect_rc 0 "$name: create"
  follow
  run "$P" -C "$r0" -t t --acks all --print-offsets < <(printf 'm-%s\n' 0 1 2 3 4)
  expect_rc 0 "$name: the first leader acknowledges m-0..m-4"
  start_consumer "follow-$name" "$r0"
  start_consumer "group-$name" "$r1" "g-$name"

  # The producer on r0 passes its check and stops.
  echo z-5 >zombie.in
  stopped_at zombie "$fn" "$P" -C "$r0" -t t --acks 1

  # r0 is deposed: r1 or r2 (the first live ISR member) leads in epoch 1
  # and acknowledges 5 messages.
  # (The followers stop while the root is away: one whose round reads the
  # leader's root then would end.)
  stop_following
  mv "$r0" "$r0.away"
  run "$ISR" --cluster "$cl" elect
  expect_rc 0 "$name: elect"
  local line leader
  line=$(awk '$1 == "partition" && $2 == "t" && $3 == "0" {print $5, $6, $8}' "$cl/cluster-state")
  leader=${line%% *}
  [[ $leader == 1 || $leader == 2 ]] && [[ $line =~ ^[12]\ 1\  ]] && [[ ! ${line##* } =~ 0 ]] ||
    fail "$name: a follower leads in epoch 1, r0 out of the ISR (leader, epoch, ISR: $line)"
  local new="$dir/r$leader"
  mv "$r0.away" "$r0"
  follow
  printf 'n-%s\n' 1 2 3 4 5 >ingest
  run "$P" -C "$new" -t t --acks all --print-offsets --producer-id "ing-$name" ingest
  expect_rc 0 "$name: the new leader acknowledges n-1..n-5"
  expect_eq "$name: acknowledged at 5..9" "$(printf '0 %s\n' 5 6 7 8 9)" "$(cat "$WORK/out")"

  # r0 returns as a follower: stopped where it appends the new leader's
  # batches (it compared its log with the leader's and fetched).
  : >follower.in
  stopped_at follower mq::PartitionWriter::AppendReplicated "$REP" -C "$r0" -t t

  # The producer resumes: fenced, nothing appended.
  status=$(resume zombie)
  expect_eq "$name: the deposed leader's producer is fenced (exit 75)" 75 "$status"
  status=$(resume follower)
  [[ $status == 0 ]] ||
    fail "$name: the follower appends the new leader's batches: exit $status: $(grep -v '^(gdb)\|^\[' follower.out | tail -3)"

  # Every replica holds the same record at every offset.
  stop_following
  run "$REP" -C "$r0" -t t -q
  expect_rc 0 "$name: r0 catches up (stderr: $(cat "$WORK/err"))"
  run "$REP" -C "$r1" -t t -q
  expect_rc 0 "$name: r1 catches up"
  run "$REP" -C "$r2" -t t -q
  expect_rc 0 "$name: r2 catches up"
  run "$REP" -C "$r0" -t t -q
  expect_rc 0 "$name: r0 reports its LEO"
  local want
  want=$(for i in 0 1 2 3 4; do echo "$i m-$i"; done; for i in 1 2 3 4 5; do echo "$((i + 4)) n-$i"; done)
  expect_eq "$name: the new leader holds the acknowledged records" "$want" "$(records "$new")"
  expect_eq "$name: r1 holds the same" "$want" "$(records "$r1")"
  expect_eq "$name: r2 holds the same" "$want" "$(records "$r2")"
  expect_eq "$name: r0 holds the same (offset 5 is n-1, not z-5)" "$want" "$(records "$r0")"
  replicas_agree "$cl" "$name"
  grep -q "below the epoch fence 1 (R56)" zombie.out ||
    fail "$name: the producer names the epoch fence: $(cat zombie.out)"
  final_log "$new" final
  check_ingestion "$name: the new leader's ingestion" final ingest
  stop_consumer "follow-$name" 10
  stop_consumer "group-$name" 10
  check_follow_output "$name: the consumer that followed r0" "$WORK/follow-$name.out" final
  check_follow_output "$name: the group member on r1" "$WORK/group-$name.out" final group
  GROUPS_CHECKED=0
  for r in "$r0" "$r1" "$r2"; do check_group_offsets "$name" "$r" "$new"; done
  ((GROUPS_CHECKED >= 1)) || fail "$name: no root holds the group's committed offsets"
  cd "$WORK"
  echo "ok: $name"
}

scenario begin mq::PartitionWriter::BeginLeaderEpoch
scenario append mq::PartitionWriter::Append
