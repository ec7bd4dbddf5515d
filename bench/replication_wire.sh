#!/usr/bin/env bash
# Catch-up replication across hosts (the wire protocol, format-spec/
# protocol.md) against the transport's own throughput, measured in the same
# run, alternating (not a test):
#   pipe        bench-pipe: a 1 MiB pipe (F_SETPIPE_SZ) moving the leader's
#               log size from a writer to a reader that discards it
#   dd|dd       the speed of light of the job: `dd bs=1M` of the leader's
#               log into a pipe, `dd bs=1M` from it into a new file (read
#               from the page cache, through a pipe, into the page cache)
#   over pipe   mq-replicate into an empty follower whose leader is "host"
#               p0, reached through an MQ_RSH that runs the command here
#               (`sh -c`): fetch frames over pipes, check, append
#   ssh cat     `ssh localhost-mq cat` of the leader's log to /dev/null (a
#               throwaway sshd, tests/cli/lib/sshd.bash)
#   over ssh    the same catch-up with the leader at localhost-mq over ssh
#   startup     mq-replicate run again on the caught-up follower (nothing to
#               fetch): the connections and processes each catch-up starts
#               (the controller's mq-isr --serve, the leader's mq-replicate
#               --serve and its own connection to the controller), which a
#               plain copy does not; "transfer" is a catch-up less it. Over
#               ssh the leader's connection to the controller overlaps the
#               transfer of what lies below its HW (protocol.md R102), so
#               there "transfer" understates the copy's own time
# Over ssh it also prints the ssh connections a catch-up opens (sshd's
# "Accepted" log lines during one run: both sides' connections).
# Targets: over a pipe at least 0.8 x dd|dd, over ssh at least 0.8 x ssh
# cat (earlier: over a pipe at least 0.5 x the pipe, still printed).
# Each case's CPU time (user + system of it and the processes it waited
# for, bench-timed) is printed beside its wall time: on a shared machine
# the wall time is mostly other load, the CPU time less so. Over ssh it
# counts this side only (ssh, not the remote sshd's children).
#
#   bench/replication_wire.sh [BUILD_DIR] [MEGABYTES] [RUNS] [FETCH_MAX_BYTES]
#       (BUILD_DIR default $MQ_BIN; MEGABYTES default 512; RUNS default 3;
#       FETCH_MAX_BYTES, mq-replicate's --fetch-max-bytes, default its own)
set -euo pipefail
source "$(dirname "$0")/lib.bash"  # median, messages_1k
BUILD=${1:-${MQ_BIN:-build}}
MB=${2:-512}
RUNS=${3:-3}
FETCH=${4:-}
fetch=(${FETCH:+--fetch-max-bytes "$FETCH"})
BUILD=$(cd "$BUILD" && pwd)
for t in mq-produce mq-replicate mq-isr bench/bench-pipe bench/bench-timed; do
  [[ -x $BUILD/$t ]] || { echo "no $BUILD/$t (build first)" >&2; exit 1; }
done
export MQ_BIN=$BUILD
MQ_SRC=$(cd "$(dirname "$0")/.." && pwd)
export MQ_SRC
source "$MQ_SRC/tests/cli/lib/common.bash"  # WORK, removed at exit
need_timed "$BUILD"
W=$WORK
export MQ_REMOTE_BINDIR=$BUILD
# An ssh connection on a loaded machine can take seconds to set up.
export MQ_TIMEOUT_MS=${MQ_TIMEOUT_MS:-60000}

printf '#!/bin/sh\nshift\nexec sh -c "$1"\n' >"$W/rsh"
chmod +x "$W/rsh"
fill() {  # fill ROOT: MEGABYTES of 1000-byte messages into its partition 0
  messages_1k "$MB" | "$BUILD/mq-produce" -C "$1" -t t -p 0 -q
}
MQ_RSH="$W/rsh" "$BUILD/mq-isr" --cluster "$W/cl" create -t t --partitions 1 \
  --replicas "p0:$W/r0,p1:$W/r1" --min-insync-replicas 1 --controller ctl >/dev/null
MQ_RSH="$W/rsh" fill "$W/r0"
bytes=$(cat "$W"/r0/t-0/*.log | wc -c)
echo "leader log: $bytes bytes; --fetch-max-bytes ${FETCH:-default}; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$W"/r0/t-0/*.log >/dev/null

ssh=false
if [[ -x /usr/sbin/sshd ]]; then
  source "$MQ_SRC/tests/cli/lib/sshd.bash"
  on_exit() { sshd_stop; }
  sshd_start
  SSH_RSH=$MQ_RSH
  ssh=true
  MQ_RSH=$SSH_RSH "$BUILD/mq-isr" --cluster "$W/scl" create -t t --partitions 1 \
    --replicas "localhost-mq:$W/s0,localhost-mq:$W/s1" --min-insync-replicas 1 \
    --controller localhost-mq >/dev/null
  MQ_RSH=$SSH_RSH fill "$W/s0"
fi

# elapsed FILE CMD...: appends "wall_s cpu_s" of CMD to FILE.
elapsed() {
  local f=$1
  shift
  run_timed "$f.timed" "$@"
  tail -n 1 "$f.timed" | awk '{printf "%.4f %.4f\n", $1, $2}' >>"$f"
}
fresh() { rm -rf "$1/t-0"; mkdir "$1/t-0"; }
for run in $(seq 1 "$RUNS"); do
  "$BUILD/bench/bench-pipe" --raw --bytes="$bytes" --runs=1 | awk -v b="$bytes" '{printf "%.4f\n", b / $1}' >>"$W/pipe"
  rm -f "$W/ddcopy"
  elapsed "$W/dd" sh -c 'for f in "$1"/t-0/*.log; do dd if="$f" bs=1M status=none; done |
    dd of="$2" bs=1M iflag=fullblock status=none' sh "$W/r0" "$W/ddcopy"
  rm -f "$W/ddcopy"
  fresh "$W/r1"
  elapsed "$W/overpipe" env MQ_RSH="$W/rsh" "$BUILD/mq-replicate" -C "$W/r1" -q "${fetch[@]}"
  cmp -s <(cat "$W"/r0/t-0/*.log) <(cat "$W"/r1/t-0/*.log) || { echo "follower differs" >&2; exit 1; }
  elapsed "$W/pipestart" env MQ_RSH="$W/rsh" "$BUILD/mq-replicate" -C "$W/r1" -q "${fetch[@]}"
  if $ssh; then
    elapsed "$W/sshcat" sh -c 'cat "$1"/t-0/*.log | $2 localhost-mq cat >/dev/null' sh "$W/s0" "$SSH_RSH"
    fresh "$W/s1"
    accepted=$(grep -c "Accepted publickey" "$SSHD_DIR/sshd.log" || true)
    elapsed "$W/overssh" env MQ_RSH="$SSH_RSH" "$BUILD/mq-replicate" -C "$W/s1" -q "${fetch[@]}"
    echo $(($(grep -c "Accepted publickey" "$SSHD_DIR/sshd.log" || true) - accepted)) >>"$W/sshconns"
    cmp -s <(cat "$W"/s0/t-0/*.log) <(cat "$W"/s1/t-0/*.log) || { echo "ssh follower differs" >&2; exit 1; }
    elapsed "$W/sshstart" env MQ_RSH="$SSH_RSH" "$BUILD/mq-replicate" -C "$W/s1" -q "${fetch[@]}"
  fi
done

wall() { cut -d' ' -f1 "$1" | median; }
cpu() { cut -d' ' -f2 "$1" | median; }
p=$(median <"$W/pipe")
d=$(wall "$W/dd")
o=$(wall "$W/overpipe")
u=$(wall "$W/pipestart")
dc=$(cpu "$W/dd")
oc=$(cpu "$W/overpipe")
uc=$(cpu "$W/pipestart")
awk -v b="$bytes" -v p="$p" -v d="$d" -v o="$o" -v u="$u" 'BEGIN {
  printf "%-10s %9s %10s %8s\n", "case", "median s", "MB/s", "ratio"
  printf "%-10s %9.3f %10.0f %8.2f\n", "pipe", p, b / p / 1e6, 1
  printf "%-10s %9.3f %10.0f %8.2f\n", "dd|dd", d, b / d / 1e6, p / d
  printf "%-10s %9.3f %10.0f %8.2f  (%.2f x dd|dd)\n", "over pipe", o, b / o / 1e6, p / o, d / o
  printf "%-10s %9.3f\n", "startup", u
  t = o - u; if (t <= 0) t = 1e-9
  printf "%-10s %9.3f %10.0f %8.2f  (%.2f x dd|dd)\n", "transfer", t, b / t / 1e6, p / t, d / t
  printf "target: over pipe >= 0.8 x dd|dd: %s\n", (d / o >= 0.8) ? "met" : "NOT met"
  printf "target: over pipe >= 0.5 x pipe: %s\n", (p / o >= 0.5) ? "met" : "NOT met"
}'
awk -v d="$dc" -v o="$oc" -v u="$uc" 'BEGIN {
  printf "CPU s (median): dd|dd %.3f, over pipe %.3f (%.2f x dd|dd), startup %.3f\n", d, o, d / o, u
}'
if $ssh; then
  s=$(wall "$W/sshcat")
  v=$(wall "$W/overssh")
  w=$(wall "$W/sshstart")
  sc=$(cpu "$W/sshcat")
  vc=$(cpu "$W/overssh")
  awk -v b="$bytes" -v s="$s" -v v="$v" -v w="$w" 'BEGIN {
    printf "%-10s %9.3f %10.0f %8.2f\n", "ssh cat", s, b / s / 1e6, 1
    printf "%-10s %9.3f %10.0f %8.2f\n", "over ssh", v, b / v / 1e6, s / v
    printf "%-10s %9.3f\n", "startup", w
    t = v - w; if (t <= 0) t = 1e-9
    printf "%-10s %9.3f %10.0f %8.2f\n", "transfer", t, b / t / 1e6, s / t
    printf "target: over ssh >= 0.8 x ssh cat: %s\n", (s / v >= 0.8) ? "met" : "NOT met"
  }'
  awk -v s="$sc" -v v="$vc" -v n="$(median <"$W/sshconns")" 'BEGIN {
    printf "CPU s on this side (median): ssh cat %.3f, over ssh %.3f\n", s, v
    printf "ssh connections per catch-up (median): %g\n", n
  }'
else
  echo "ssh: not measured (no /usr/sbin/sshd)"
fi
