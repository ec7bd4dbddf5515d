#!/usr/bin/env bash
# Baselines for replication over a pipe and over ssh (not a test): the
# throughput of a pipe of 1 MiB (F_SETPIPE_SZ) moving BYTES from a writer
# process (1 MiB blocks from memory) to a reader that discards them, and of
# `ssh localhost-mq cat` moving the same bytes (a throwaway sshd on
# 127.0.0.1, tests/cli/lib/sshd.bash), connection setup included (its time
# alone is the row before). Medians of RUNS runs, in bytes/s.
#
#   bench/pipe_baseline.sh [BUILD_DIR] [BYTES] [RUNS]   (BUILD_DIR default $MQ_BIN,
#                                                        BYTES default 1G, RUNS 5)
#
# Needs bench-pipe built (bench/run.sh builds it; or ninja -C BUILD_DIR
# bench-pipe). Without /usr/sbin/sshd the ssh row says so and the pipe row
# still prints.
set -euo pipefail
BUILD=${1:-${MQ_BIN:-build}}
BYTES=${2:-1G}
RUNS=${3:-5}
BUILD=$(cd "$BUILD" && pwd)
PIPE="$BUILD/bench/bench-pipe"
[[ -x $PIPE ]] || { echo "no $PIPE (ninja -C $BUILD bench-pipe)" >&2; exit 1; }

row() { printf '%-46s %-18s %-22s %8s  %s\n' "$@"; }
rate() { awk -v r="$1" 'BEGIN { if (r >= 1e9) printf "%.2f GB/s", r / 1e9; else printf "%.1f MB/s", r / 1e6 }'; }

pipe_bps=$("$PIPE" --raw --bytes="$BYTES" --runs="$RUNS")
row "pipe 1 MiB (F_SETPIPE_SZ), $BYTES" "$(rate "$pipe_bps")" "$pipe_bps B/s" "1.00" "baseline"

if [[ ! -x /usr/sbin/sshd ]]; then
  row "ssh localhost-mq cat, $BYTES" "not measured" "no /usr/sbin/sshd" "-" "(apt-get install openssh-server)"
  exit 0
fi
export MQ_BIN=$BUILD
export MQ_SRC
MQ_SRC=$(cd "$(dirname "$0")/.." && pwd)
source "$MQ_SRC/tests/cli/lib/common.bash"
source "$MQ_SRC/tests/cli/lib/sshd.bash"
on_exit() { sshd_stop; }
sshd_start
# The connection's own cost (key exchange, login, the remote shell's startup
# files), which the ssh row includes once per run.
for run in $(seq 1 "$RUNS"); do
  t0=$EPOCHREALTIME
  $MQ_RSH localhost-mq true </dev/null
  t1=$EPOCHREALTIME
  echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}' >>"$WORK/setup"
done
setup=$(sort -n "$WORK/setup" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
row "ssh localhost-mq true (connection setup)" "$setup s" "median of $RUNS" "-" "in the ssh row once"
ssh_bps=$("$PIPE" --raw --bytes="$BYTES" --runs="$RUNS" --through="$MQ_RSH localhost-mq cat")
row "ssh localhost-mq cat, $BYTES" "$(rate "$ssh_bps")" "$ssh_bps B/s" \
  "$(awk -v a="$ssh_bps" -v b="$pipe_bps" 'BEGIN { printf "%.2f", a / b }')" "vs the pipe"
