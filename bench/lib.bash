# Helpers of the shell benchmarks (sourced, not run).

# median: the median of the numbers on standard input, one per line.
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# messages_1k MEGABYTES: that many megabytes of 1000-byte lines (a 10-digit
# number and text), the replication benchmarks' input.
messages_1k() {
  awk -v n=$(($1 * 1024 * 1024 / 1000)) 'BEGIN {
    pad = ""
    while (length(pad) < 989) pad = pad "the quick brown fox jumps over the lazy dog "
    pad = substr(pad, 1, 989)
    for (i = 0; i < n; i++) printf "%010d%s\n", i, pad
  }'
}

# run_timed FILE CMD...: runs CMD and appends "wall_s cpu_s maxrss_kb" to
# FILE (bench/timed.cc: the wall time with no wrapper process in it, the
# CPU time and the peak RSS); its status is CMD's. TIMED names
# bench-timed: set it with need_timed first.
run_timed() { "$TIMED" "$@"; }

# need_timed BUILD_DIR: sets TIMED to BUILD_DIR's bench-timed, or exits
# saying how to build it (bench/run.sh builds it).
need_timed() {
  TIMED="$1/bench/bench-timed"
  [[ -x $TIMED ]] || { echo "no $TIMED (ninja -C $1 bench-timed)" >&2; exit 1; }
}
