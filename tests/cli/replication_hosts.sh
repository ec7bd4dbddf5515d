#!/usr/bin/env bash
# Replication across hosts (format-spec/protocol.md, cluster.md §18.2,
# replication.md §17) through the real binaries. The "hosts" h0, h1, h2 (one
# log root each) and ctl (the cluster directory) are one machine: MQ_RSH is
# a stand-in for ssh that runs the remote command with `sh -c` (as sshd
# hands it to the remote shell, so the tools' quoting is exercised) and
# refuses a host, or one host's link to another, when a fault file says so:
#   $FAULTS/HOST.down        nobody reaches HOST
#   $FAULTS/FROM-HOST.down   processes "on" FROM do not reach HOST
# A process is "on" the host in its MQ_TEST_HOST (the stand-in sets it for
# what it starts; this script sets it for what it starts as h0, h1, h2).
#   1. acks=all across hosts: every acknowledged message on every replica
#      exactly once, logs byte-identical, describe/--check through ctl:DIR
#      the same as on the controller's host;
#   2. a large catch-up cut twice (the leader's server killed, then the
#      follower killed) resumes at the follower's log end: identical, verified;
#   3. the controller unreachable from the leader (then from everybody):
#      acks=all never succeeds, no fetch moves the leader's HW; healed, all
#      converge;
#   4. an election through the controller with the leader's host down; the
#      followers switch, acknowledged messages survive, a group's position
#      followed the leader and the producer id came from the controller (a
#      resumed --producer-id run appends only what is missing); elect through an
#      unreachable controller exits 69 and changes nothing;
#   5. hostile root paths and topic names replicate, and nothing they spell
#      runs on a "remote" shell;
#   6. bad MQ_RSH, garbage on the stream, a mute peer: exit 69, clear
#      messages, no hang.
# Random message counts and cut points: MQ_TEST_SEED=N repeats a run.
source "$(dirname "$0")/lib/common.bash"
ISR="$BIN/mq-isr"
REP="$BIN/mq-replicate"
SEED="${MQ_TEST_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}"
echo "seed $SEED"
RANDOM=$SEED
cd "$WORK"

FAULTS="$WORK/faults"
mkdir "$FAULTS"
cat >"$WORK/rsh" <<'EOF'
#!/bin/sh
# ssh stand-in: rsh HOST 'COMMAND' (see replication_hosts.sh).
host=$1; shift
from=${MQ_TEST_HOST:-local}
if [ -e "$FAULTS/$host.down" ] || [ -e "$FAULTS/$from-$host.down" ]; then
  echo "$from $host refused" >>"$FAULTS/log"
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255
fi
echo "$from $host" >>"$FAULTS/log"
MQ_TEST_HOST=$host
export MQ_TEST_HOST
exec sh -c "$1"
EOF
chmod +x "$WORK/rsh"
: >"$FAULTS/log"
export FAULTS MQ_RSH="$WORK/rsh" MQ_REMOTE_BINDIR="$BIN"
unset MQ_TEST_HOST MQ_CLUSTER MQ_TIMEOUT_MS

# hw ROOT TOPIC PARTITION: the partition's high watermark in its
# high-watermark file, as mq-inspect reads it (0 when none).
hw() {
  local f="$1/$2-$3/high-watermark" v=""
  [[ -s $f ]] && v=$("$INSPECT" "$f" | awk '/^topic:/ { print $6 }')
  echo "${v:-0}"
}
log_bytes() { cat "$1/$2-$3"/*.log 2>/dev/null | wc -c; }  # ROOT TOPIC PARTITION
leader_of() {  # CLUSTER TOPIC PARTITION
  "$ISR" --cluster "$1" describe -t "$2" |
    sed -n "s/.*Partition: $3	Leader: \(-\{0,1\}[0-9]*\).*/\1/p"
}
refusals() { grep -c "^$1 $2 refused$" "$FAULTS/log" || true; }  # FROM HOST

declare -A FPID
# start_follower ROOT HOST [-t TOPIC]: `mq-replicate --follow` of ROOT as HOST.
start_follower() {
  MQ_TEST_HOST=$2 "$REP" -C "$1" --follow "${@:3}" -q 2>>"$WORK/follow-$2.err" &
  FPID[$1]=$!
  PIDS+=("$!")
}
stop_follower() {  # ROOT
  kill -TERM "${FPID[$1]}" 2>/dev/null || true
  wait "${FPID[$1]}" 2>/dev/null || true
}
# converge TOPIC PARTITION COUNT LEADER ROOT...: waits until every root
# holds the leader's log bytes with its HW at COUNT (the followers running).
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
# same_logs TOPIC PARTITION ROOT...: the partition's segment files are the
# same names with the same bytes on every root.
same_logs() {
  local t=$1 p=$2 first=$3 r f
  shift 3
  for r in "$@"; do
    expect_eq "$t-$p: segments of $r" "$(cd "$first/$t-$p" && ls -- *.log)" "$(cd "$r/$t-$p" && ls -- *.log)"
    for f in "$first/$t-$p"/*.log; do
      cmp -s -- "$f" "$r/$t-$p/${f##*/}" || fail "$t-$p: $r differs from $first in ${f##*/}"
    done
  done
}
# consumed_is ROOT TOPIC PARTITION FILE: the partition holds exactly FILE's
# lines, in order (so every acknowledged message exactly once).
consumed_is() {
  run "$C" -C "$1" -t "$2" -p "$3" -e -f '%s\n'
  expect_rc 0 "consume $2-$3 on $1"
  expect_eq "$2-$3 on $1" "$(cat "$4")" "$(cat "$WORK/out")"
}
# produce HOST ROOT TOPIC PARTITION ACKS FILE: sets rc.
produce() {
  run env MQ_TEST_HOST="$1" "$P" -C "$2" -t "$3" -p "$4" --acks "$5" --ack-timeout 30000 -q "$6"
}

R=("$WORK/r0" "$WORK/r1" "$WORK/r2")
CL="$WORK/c"
REPLICAS="h0:${R[0]},h1:${R[1]},h2:${R[2]}"

echo "[${SECONDS}s] part 1"
# --- 1. acks=all across hosts ----------------------------------------------
run "$ISR" --cluster "$CL" create -t orders --partitions 2 --replicas "$REPLICAS" \
  --min-insync-replicas 2 --controller ctl
expect_rc 0 "create across hosts"
for i in 0 1 2; do
  grep -q "^Attached ${R[$i]} to topic orders as replica $i\.$" "$WORK/out" || fail "attach $i: $(cat "$WORK/out")"
done
grep -q "^replica 1 h1:${R[1]}$" "$CL/cluster-state" || fail "cluster state: $(cat "$CL/cluster-state")"
grep -q "^cluster=ctl:$CL$" "${R[1]}/topics/orders.conf" || fail "r1's link to the controller"
[[ $(leader_of "$CL" orders 0) == 0 && $(leader_of "$CL" orders 1) == 1 ]] || fail "leaders 0 and 1"
for i in 0 1 2; do start_follower "${R[$i]}" "h$i" -t orders; done
: >acked-0
: >acked-1
for k in 1 2; do
  for p in 0 1; do
    n=$((20 + RANDOM % 150))
    seq -f "orders-$p-$k-%g" 1 "$n" >batch
    produce "h$p" "${R[$p]}" orders "$p" all batch
    expect_rc 0 "acks=all batch $k of $n messages to orders-$p on h$p"
    cat batch >>"acked-$p"
  done
done
echo "1: acks=all acknowledged $(wc -l <acked-0) + $(wc -l <acked-1) messages"
converge orders 0 "$(wc -l <acked-0)" "${R[0]}" "${R[1]}" "${R[2]}"
converge orders 1 "$(wc -l <acked-1)" "${R[1]}" "${R[2]}" "${R[0]}"
for i in 0 1 2; do stop_follower "${R[$i]}"; done
for p in 0 1; do
  for i in 0 1 2; do consumed_is "${R[$i]}" orders "$p" "acked-$p"; done
  same_logs orders "$p" "${R[@]}"
done
# The controller's answers are the same through the wire (a follower's
# lag_ms is now minus its last caught-up time: it grows between the two).
for args in "describe --json" "--check"; do
  # shellcheck disable=SC2086
  run "$ISR" --cluster "$CL" $args
  local_rc=$rc
  local_out=$(sed 's/"lag_ms":[0-9]*/"lag_ms":N/g' "$WORK/out")
  # shellcheck disable=SC2086
  run "$ISR" --cluster "ctl:$CL" $args
  expect_rc "$local_rc" "mq-isr --cluster ctl:DIR $args"
  expect_eq "mq-isr --cluster ctl:DIR $args" "$local_out" \
    "$(sed 's/"lag_ms":[0-9]*/"lag_ms":N/g' "$WORK/out")"
done
grep -q "^local ctl$" "$FAULTS/log" || fail "describe through ctl: no connection made"

echo "[${SECONDS}s] part 2"
# --- 2. a large catch-up, cut twice ----------------------------------------
run "$ISR" --cluster "$CL" create -t big --partitions 1 --replicas "$REPLICAS" \
  --min-insync-replicas 2 --controller ctl
expect_rc 0 "create big"
seq 1 330000 | awk '{ printf "%d %0140d\n", $1, 0 }' >bigin
produce h0 "${R[0]}" big 0 1 bigin
expect_rc 0 "50 MB with acks=1"
total=$(log_bytes "${R[0]}" big 0)
# descendants PID: every process below PID.
descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do
    echo "$c"
    descendants "$c"
  done
}
# cut_at ROOT HOST BYTES WHAT: starts a throttled catch-up of ROOT, and once
# its log holds BYTES kills WHAT (serve: the leader's `mq-replicate --serve`
# it talks to; follower: the follower itself, SIGKILL). Sets cut_rc.
cut_at() {
  local root=$1 host=$2 at=$3 what=$4 pid c victim=""
  MQ_TEST_HOST=$host "$REP" -C "$root" -t big --fetch-max-bytes 65536 --max-bytes-per-second 4000000 \
    -q 2>>"$WORK/cut.err" &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 3000); do  # a guard against a hang, not a timing assertion
    [[ $(log_bytes "$root" big 0) -ge $at ]] && break
    kill -0 "$pid" 2>/dev/null || fail "the catch-up of $root ended before the cut at $at bytes"
    sleep 0.02
  done
  if [[ $what == serve ]]; then
    for c in $(descendants "$pid"); do
      # the server itself, not the shell that started it
      [[ $(tr '\0' '\n' <"/proc/$c/cmdline" 2>/dev/null | head -1) == */mq-replicate ]] &&
        grep -qa -- "--serve" "/proc/$c/cmdline" && victim=$c
    done
    [[ -n $victim ]] || fail "no mq-replicate --serve below the catch-up of $root"
  else
    victim=$pid
  fi
  kill -KILL "$victim"
  set +e
  wait "$pid"
  cut_rc=$?
  set -e
  [[ $(log_bytes "$root" big 0) -lt $total ]] || fail "$root: the cut came after the end"
}
cut1=$((1000000 + ((RANDOM << 15) | RANDOM) % 25000000))
cut_at "${R[1]}" h1 "$cut1" serve
echo "2: the leader's server killed at $(log_bytes "${R[1]}" big 0) of $total bytes; the follower exited $cut_rc"
((cut_rc == 0 || cut_rc == 69)) || fail "follower exit $cut_rc after its leader's server died: $(tail -2 cut.err)"
cut2=$((1000000 + ((RANDOM << 15) | RANDOM) % 25000000))
cut_at "${R[2]}" h2 "$cut2" follower
echo "2: the follower killed at $(log_bytes "${R[2]}" big 0) of $total bytes"
for i in 1 2; do
  have=$(log_bytes "${R[$i]}" big 0)
  cat "${R[$i]}"/big-0/*.log >"cut-$i"
  run env MQ_TEST_HOST="h$i" "$REP" -C "${R[$i]}" -t big -v
  expect_rc 0 "restarted catch-up of ${R[$i]}"
  # It fetched only what it lacked: its log (less a torn batch a kill may
  # have left, at most one fetch) is kept, byte for byte.
  fetched=$(sed -n 's/.* records (\([0-9]*\) bytes) from replica 0;.*/\1/p' "$WORK/err" | awk '{ s += $1 } END { print s + 0 }')
  kept=$((total - fetched))
  echo "2: restarted h$i: held $have bytes, kept $kept, fetched $fetched"
  ((kept <= have && kept > have - 65536 - 16384 && kept > 0)) ||
    fail "${R[$i]}: held $have bytes before the restart, fetched $fetched of $total: $(cat "$WORK/err")"
  cmp -s -n "$kept" "cut-$i" <(cat "${R[$i]}"/big-0/*.log) || fail "${R[$i]}: what it held before the restart changed"
done
same_logs big 0 "${R[@]}"
for i in 0 1 2; do
  run "$INSPECT" --verify "${R[$i]}/big-0"
  expect_rc 0 "mq-inspect --verify ${R[$i]}/big-0"
done
run "$C" -C "${R[0]}" -t big -e -f '%s\n'
expect_eq "big on the leader once both followers fetched it all" "$(cut -d' ' -f1 bigin)" "$(cut -d' ' -f1 "$WORK/out")"
rm -f bigin cut-1 cut-2

echo "[${SECONDS}s] part 3"
# --- 3. the controller unreachable ------------------------------------------
seq -f "above-%g" 1 20 >batch
produce h0 "${R[0]}" orders 0 1 batch
expect_rc 0 "acks=1 with the followers stopped"
cat batch >>acked-0
hw_before=$(hw "${R[0]}" orders 0)
leo=$(($(wc -l <acked-0)))
((hw_before < leo)) || fail "orders-0: HW $hw_before should be below the log end $leo"
touch "$FAULTS/h0-ctl.down"
bytes=$(log_bytes "${R[0]}" orders 0)
seq -f "never-%g" 1 5 >batch
produce h0 "${R[0]}" orders 0 all batch
echo "3: acks=all on the leader, controller unreachable: exit $rc ($(tail -1 "$WORK/err"))"
case $rc in
  69 | 79 | 80 | 81) ;;
  *) fail "acks=all with the controller unreachable from the leader: exit $rc, want 69, 79, 80 or 81" ;;
esac
grep -q "ctl:$CL" "$WORK/err" || fail "the refusal names the controller: $(cat "$WORK/err")"
produce h0 "${R[0]}" orders 0 1 batch
echo "3: acks=1 on the leader, controller unreachable: exit $rc ($(tail -1 "$WORK/err"))"
case $rc in
  0) [[ $(log_bytes "${R[0]}" orders 0) -gt $bytes ]] || fail "acks=1 succeeded and appended nothing"
     cat batch >>acked-0 ;;
  69) [[ $(log_bytes "${R[0]}" orders 0) == "$bytes" ]] || fail "acks=1 refused (69) but appended"
      grep -q "ctl:$CL" "$WORK/err" || fail "the refusal names the controller: $(cat "$WORK/err")" ;;
  *) fail "acks=1 with the controller unreachable: exit $rc" ;;
esac
before=$(refusals h0 ctl)
for i in 1 2; do
  run env MQ_TEST_HOST="h$i" "$REP" -C "${R[$i]}" -t orders -p 0 -q
  echo "3: follower h$i fetching from a leader cut from the controller: exit $rc"
done
(($(refusals h0 ctl) > before)) || fail "the followers' fetches never reached the leader's host"
expect_eq "orders-0 HW after fetches to a leader cut from the controller" "$hw_before" "$(hw "${R[0]}" orders 0)"
touch "$FAULTS/h1-ctl.down" "$FAULTS/h2-ctl.down"
for i in 1 2; do
  run env MQ_TEST_HOST="h$i" "$REP" -C "${R[$i]}" -t orders -p 0 -q
  ((rc != 0)) || fail "follower h$i succeeded without the controller"
done
expect_eq "orders-0 HW with nobody reaching the controller" "$hw_before" "$(hw "${R[0]}" orders 0)"
rm -f "$FAULTS"/*.down
for i in 1 2; do start_follower "${R[$i]}" "h$i" -t orders -p 0; done
converge orders 0 "$(wc -l <acked-0)" "${R[0]}" "${R[1]}" "${R[2]}"
for i in 1 2; do stop_follower "${R[$i]}"; done
for i in 0 1 2; do consumed_is "${R[$i]}" orders 0 acked-0; done
same_logs orders 0 "${R[@]}"

echo "[${SECONDS}s] part 4"
# --- 4. elections through the controller -------------------------------------
run "$ISR" --cluster "$CL" create -t el --partitions 1 --replicas "$REPLICAS" \
  --min-insync-replicas 2 --controller ctl
expect_rc 0 "create el"
for i in 0 1 2; do start_follower "${R[$i]}" "h$i" -t el; done
: >acked-el
seq -f "el-a-%g" 1 $((10 + RANDOM % 50)) >batch
produce h0 "${R[0]}" el 0 all batch
expect_rc 0 "acks=all to el on h0"
cat batch >>acked-el
# What follows the leader across hosts (CarryState, format-spec/protocol.md):
# a group's position; the followers' catch-up carries it. An ingestion with
# --producer-id on h0 takes its id from the controller (ProducerId, P10),
# not from h0's registry.
seq -f "el-p-%g" 1 $((5 + RANDOM % 20)) >pinput
run env MQ_TEST_HOST=h0 "$P" -C "${R[0]}" -t el -p 0 --acks all --ack-timeout 30000 \
  --producer-id ingest-el -q pinput
expect_rc 0 "acks=all with --producer-id on h0"
[[ $(cat "$CL/producers/ingest-el.id") == 4294967296 ]] ||
  fail "the controller did not allocate ingest-el's id: $(cat "$CL/producers/ingest-el.id")"
[[ ! -e ${R[0]}/producers/ingest-el.id ]] || fail "h0 allocated ingest-el's id itself"
cat pinput >>acked-el
k=$((1 + RANDOM % $(wc -l <acked-el)))
run env MQ_TEST_HOST=h0 "$C" -C "${R[0]}" -t el -G g -c "$k" -e
expect_rc 0 "group g consumes $k on h0"
for i in 1 2; do
  stop_follower "${R[$i]}"
  run env MQ_TEST_HOST="h$i" "$REP" -C "${R[$i]}" -t el -q
  expect_rc 0 "h$i catches up and carries"
  start_follower "${R[$i]}" "h$i" -t el
done
# h0 goes down: its follower stops, nobody reaches it.
stop_follower "${R[0]}"
touch "$FAULTS/h0.down"
cp "$CL/cluster-state" state.before
touch "$FAULTS/ctl.down"
run "$ISR" --cluster "ctl:$CL" elect -t el
expect_rc 69 "elect through an unreachable controller"
grep -q "ctl:$CL" "$WORK/err" || fail "elect: the message names the controller: $(cat "$WORK/err")"
echo "4: elect with ctl down: $(tail -1 "$WORK/err")"
cmp -s state.before "$CL/cluster-state" || fail "elect through an unreachable controller changed the state"
rm "$FAULTS/ctl.down"
run "$ISR" --cluster "ctl:$CL" elect -t el
expect_rc 0 "elect through the controller with h0 down"
new=$(leader_of "$CL" el 0)
[[ $new == 1 || $new == 2 ]] || fail "elected $new, want 1 or 2: $(cat "$WORK/out")"
echo "4: elect with h0 down: $(cat "$WORK/out")"
seq -f "el-b-%g" 1 $((10 + RANDOM % 50)) >batch
produce "h$new" "${R[$new]}" el 0 all batch
expect_rc 0 "acks=all to the new leader (the other follower switched)"
cat batch >>acked-el
# The group resumes where it was on h0; the ingestion resumed on the new
# leader appends only what is missing.
run env MQ_TEST_HOST="h$new" "$C" -C "${R[$new]}" -t el -G g -e
expect_rc 0 "group g on the new leader"
expect_eq "group g resumes after its $k messages on h$new" "$(tail -n +$((k + 1)) acked-el)" "$(cat "$WORK/out")"
cp pinput pinput2
seq -f "el-q-%g" 1 $((1 + RANDOM % 10)) >>pinput2
run env MQ_TEST_HOST="h$new" "$P" -C "${R[$new]}" -t el -p 0 --acks all --ack-timeout 30000 \
  --producer-id ingest-el -q pinput2
expect_rc 0 "the ingestion resumed on h$new"
tail -n +$(($(wc -l <pinput) + 1)) pinput2 >>acked-el
echo "4: group g resumed after $k; ingest-el resumed, $(($(wc -l <pinput2) - $(wc -l <pinput))) new"
consumed_is "${R[$new]}" el 0 acked-el
# h0 returns as a follower.
rm "$FAULTS/h0.down"
start_follower "${R[0]}" h0 -t el
others=()
for i in 0 1 2; do ((i == new)) || others+=("${R[$i]}"); done
converge el 0 "$(wc -l <acked-el)" "${R[$new]}" "${others[@]}"
for i in 0 1 2; do stop_follower "${R[$i]}"; done
for i in 0 1 2; do consumed_is "${R[$i]}" el 0 acked-el; done
same_logs el 0 "${R[@]}"

echo "[${SECONDS}s] part 5"
# --- 5. hostile names ----------------------------------------------------------
HD="$WORK/it's \"q\" \$HOME \`touch y\` \$(touch z) ;w/a b;touch x"
mkdir -p "$HD"
H=("$HD/r0" "$HD/r1" "$HD/r2")
for t in -C .dot; do
  run "$ISR" --cluster "$HD/c" create -t "$t" --partitions 1 \
    --replicas "h0:${H[0]},h1:${H[1]},h2:${H[2]}" --min-insync-replicas 2 --controller ctl
  expect_rc 0 "create topic $t in hostile roots"
done
for i in 0 1 2; do start_follower "${H[$i]}" "h$i"; done
for t in -C .dot; do
  seq -f "hostile$t-%g" 1 $((5 + RANDOM % 30)) >"acked$t"
  produce h0 "${H[0]}" "$t" 0 all "acked$t"
  expect_rc 0 "acks=all to $t in a hostile root"
done
for t in -C .dot; do converge "$t" 0 "$(wc -l <"acked$t")" "${H[@]}"; done
for i in 0 1 2; do stop_follower "${H[$i]}"; done
for t in -C .dot; do
  for i in 0 1 2; do consumed_is "${H[$i]}" "$t" 0 "acked$t"; done
  same_logs "$t" 0 "${H[@]}"
done
run "$ISR" --cluster "$HD/c" describe
local_out=$(sed 's/LagMs: [0-9]*/LagMs: N/' "$WORK/out")
run "$ISR" --cluster "ctl:$HD/c" describe
expect_rc 0 "describe a hostile cluster directory through ctl"
expect_eq "describe through ctl, hostile paths" "$local_out" \
  "$(sed 's/LagMs: [0-9]*/LagMs: N/' "$WORK/out")"
found=$(find "$WORK" \( -name x -o -name y -o -name z \) | head -3)
[[ -z $found ]] || fail "a hostile name ran a command: $found"
echo "5: topics -C and .dot replicated in \"$HD\""

echo "[${SECONDS}s] part 6"
# --- 6. bad MQ_RSH, garbage, a mute peer -------------------------------------
# Stand-ins that misbehave towards host $BAD (and are the stand-in above
# towards the others): a login banner on stdout before the server starts, or
# a peer that reads and never answers (it ends at end of input).
cat >"$WORK/garbage-rsh" <<'EOF'
#!/bin/sh
[ "$1" = "$BAD" ] || exec "$WORK/rsh" "$@"
echo "Welcome to $1!"
exec "$WORK/rsh" "$@"
EOF
cat >"$WORK/mute-rsh" <<'EOF'
#!/bin/sh
[ "$1" = "$BAD" ] || exec "$WORK/rsh" "$@"
cat >/dev/null
EOF
chmod +x "$WORK/garbage-rsh" "$WORK/mute-rsh"
export WORK
# bad RSH WANT WHAT CMD...: CMD with MQ_RSH=RSH exits 69, its message
# matching WANT, within the guard.
bad() {
  local rsh=$1 want=$2 what=$3
  shift 3
  set +e
  MQ_RSH=$rsh MQ_TIMEOUT_MS=1000 timeout 60 "$@" >"$WORK/out" 2>"$WORK/err"
  rc=$?
  set -e
  ((rc != 124)) || fail "$what with MQ_RSH=$rsh: no answer within the 60 s guard (a hang)"
  expect_rc 69 "$what with MQ_RSH=$rsh"
  grep -q -- "$want" "$WORK/err" || fail "$what with MQ_RSH=$rsh: want \"$want\" in: $(cat "$WORK/err")"
  echo "6: $what, MQ_RSH=${rsh##*/}: exit 69: $(tail -1 "$WORK/err")"
}
DESCRIBE=("$ISR" --cluster "ctl:$CL" describe)
FOLLOW=(env MQ_TEST_HOST=h1 BAD=h0 "$REP" -C "${R[1]}" -t orders -p 0)
for what in describe "a follower"; do
  if [[ $what == describe ]]; then args=("${DESCRIBE[@]}"); else args=("${FOLLOW[@]}"); fi
  bad false "(\`false\` exited with status 1)" "$what" "${args[@]}"
  bad "$WORK/nonexistent-rsh" "nonexistent-rsh: No such file" "$what" "${args[@]}"
done
BAD=ctl bad "$WORK/garbage-rsh" "ctl:$CL: position 0: R48" "describe" "${DESCRIBE[@]}"
BAD=ctl bad "$WORK/mute-rsh" "ctl:$CL: .*(R52)" "describe" "${DESCRIBE[@]}"
bad "$WORK/garbage-rsh" "h0:${R[0]}: position 0: R48" "a follower" "${FOLLOW[@]}"
bad "$WORK/mute-rsh" "h0:${R[0]}: .*(R52)" "a follower" "${FOLLOW[@]}"
touch "$FAULTS/ctl.down"
bad "$WORK/rsh" "ctl:$CL: .*rsh\` exited with status 255)" "describe, host ctl refusing" "$ISR" --cluster "ctl:$CL" describe
rm "$FAULTS/ctl.down"
echo ok
