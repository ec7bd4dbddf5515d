#!/usr/bin/env bash
# mq-consume --exec throughput against plain mq-consume, measured in the
# same run (not a test).
#
#   bench/exec.sh [BUILD_DIR] [MESSAGES] [BATCH_MESSAGES] [SLEEP_MESSAGES]
#                                                          (BUILD_DIR default $MQ_BIN)
#
# Appends 100-byte messages to one-partition topics, then times, output to
# /dev/null, with the log in the page cache:
#   plain       mq-consume -t T -e                                   (BATCH_MESSAGES, default 1 M)
#   batch       mq-consume -t T -e --batch 1000 --exec sh -c 'cat >/dev/null'   (BATCH_MESSAGES)
#   true        mq-consume -t S -e --exec true                       (MESSAGES, default 2000)
#   sh-cat      mq-consume -t S -e --exec sh -c 'cat >/dev/null'     (MESSAGES)
#   spawn       a bash loop running /bin/true MESSAGES times: what starting a
#               process costs on this machine, without mq
#   sleep -G    mq-consume -t Q -G g -e --exec sleep 0.01, with --parallel 1
#               and --parallel 4 (SLEEP_MESSAGES, default 400, over 4
#               partitions): a handler that waits on something slow
# and prints messages/s per case and its ratio to plain's (the --parallel 4
# row's ratio to --parallel 1's in the last column).
set -euo pipefail
BUILD=${1:-${MQ_BIN:-build}}
N=${2:-2000}
NB=${3:-1000000}
NS=${4:-400}
P="$BUILD/mq-produce"
C="$BUILD/mq-consume"
for tool in "$P" "$C"; do [ -x "$tool" ] || { echo "no $tool (build first)" >&2; exit 1; }; done
W=$(mktemp -d "${MQ_BENCH_DIR:-/tmp}/mq-bench-exec.XXXXXX")
trap 'rm -rf "$W"' EXIT

lines() {
  awk -v n="$1" 'BEGIN {
    pad = ""
    while (length(pad) < 89) pad = pad "the quick brown fox jumps over the lazy dog "
    pad = substr(pad, 1, 89)
    for (i = 0; i < n; i++) printf "%010d%s\n", i, pad
  }'
}
lines "$N" | "$P" -C "$W/data" -t S --create -q
lines "$NB" | "$P" -C "$W/data" -t T --create -q
lines "$NS" | awk '{ print NR "\t" $0 }' | "$P" -C "$W/data" -t Q --create --partitions 4 -K '\t' -q
"$C" -C "$W/data" -t T -e >/dev/null  # page cache

seconds() {  # seconds CMD...: wall time of CMD, output to /dev/null
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}
plain=$(seconds "$C" -C "$W/data" -t T -e)
batch=$(seconds "$C" -C "$W/data" -t T -e --batch 1000 --exec sh -c 'cat >/dev/null')
true_s=$(seconds "$C" -C "$W/data" -t S -e --exec true)
sh_cat=$(seconds "$C" -C "$W/data" -t S -e --exec sh -c 'cat >/dev/null')
TRUE=$(type -P true)
spawn=$(seconds bash -c 'for ((i = 0; i < $1; i++)); do "$2"; done' bash "$N" "$TRUE")
par1=$(seconds "$C" -C "$W/data" -t Q -G p1 -e --exec sleep 0.01)
par4=$(seconds "$C" -C "$W/data" -t Q -G p4 -e --parallel 4 --exec sleep 0.01)

echo "mq-consume --exec: 100-byte messages; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %10s %9s %14s %9s\n' case messages wall_s msgs/s vs_plain
row() {
  awk -v c="$1" -v n="$2" -v w="$3" -v pw="$plain" -v pn="$NB" 'BEGIN {
    r = n / w; pr = pn / pw
    printf "%-44s %10d %9.3f %14.0f %9.5f\n", c, n, w, r, r / pr }'
}
row "mq-consume -e (plain)" "$NB" "$plain"
row "--batch 1000 --exec sh -c 'cat >/dev/null'" "$NB" "$batch"
row "--exec true" "$N" "$true_s"
row "--exec sh -c 'cat >/dev/null'" "$N" "$sh_cat"
row "(bash loop running $TRUE, no mq)" "$N" "$spawn"
row "-G --exec sleep 0.01 (4 partitions)" "$NS" "$par1"
awk -v c="-G --parallel 4 --exec sleep 0.01" -v n="$NS" -v w="$par4" -v pw="$plain" -v pn="$NB" \
  -v w1="$par1" 'BEGIN { r = n / w; printf "%-44s %10d %9.3f %14.0f %9.5f  (x%.2f vs --parallel 1)\n",
                         c, n, w, r, r / (pn / pw), w1 / w }'
