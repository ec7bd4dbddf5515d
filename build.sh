#!/usr/bin/env bash
# Builds mq on Debian 12 from a fresh clone.
#
#   ./build.sh demo    install missing packages (as root), build everything,
#                      run examples/demo.sh and examples/replication.sh
#   ./build.sh test    install missing packages (as root), build and run every
#                      test: ctest on a RelWithDebInfo build, the unit tests
#                      under ASan+UBSan, and each fuzz target for a bounded time
#                      (with clang, which builds both; without it, g++ builds
#                      the unit tests and the fuzz targets are skipped)
#   ./build.sh build   install missing packages (as root) and build everything
#
# Environment: MQ_JOBS (parallel jobs, default nproc), MQ_FUZZ_SECONDS (per
# fuzz target, default 20), MQ_SKIP_DEPS=1 (do not check packages).
set -euo pipefail

cd "$(dirname "$0")"
SRC=$PWD
JOBS=${MQ_JOBS:-$(nproc)}
FUZZ_SECONDS=${MQ_FUZZ_SECONDS:-20}

REQUIRED_PACKAGES=(g++ cmake ninja-build libcli11-dev libfmt-dev libzstd-dev
                   zlib1g-dev liblz4-dev libsnappy-dev catch2 libsimdjson-dev)
# What the tests call besides the build: tests/cli and examples use python3,
# jq, /usr/bin/time (package time), xxd, man (man-db) and procps (ps); the
# ssh tests start a throwaway sshd on 127.0.0.1 (tests/cli/lib/sshd.bash:
# /usr/sbin/sshd from openssh-server, ssh and ssh-keygen from openssh-client);
# tests/cli/replication_zombie.sh stops processes between two calls with gdb.
TEST_PACKAGES=(python3 jq time xxd man-db procps openssh-server openssh-client gdb)
FUZZ_PACKAGES=(clang libclang-rt-14-dev)

# Each step says how long the run has taken so far (CI has a time limit).
step() { printf '\n==> %s  [%d s]\n' "$*" "$SECONDS"; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

install_packages() {
  [[ ${MQ_SKIP_DEPS:-0} == 1 ]] && return 0
  command -v dpkg-query >/dev/null || die "not a Debian system: install ${REQUIRED_PACKAGES[*]} yourself and set MQ_SKIP_DEPS=1"
  local missing
  mapfile -t missing < <(missing_packages "${REQUIRED_PACKAGES[@]}" "${TEST_PACKAGES[@]}" "${FUZZ_PACKAGES[@]}")
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) == 0 ]]; then
    step "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
    return 0
  fi
  mapfile -t missing < <(missing_packages "${REQUIRED_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
  ((${#missing[@]} == 0)) || die "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
  echo "build.sh: clang or libclang-rt-14-dev missing: fuzz targets will be skipped" >&2
}

# configure DIR [cmake args...]
configure() {
  local dir=$1
  shift
  cmake -S "$SRC" -B "$dir" -G Ninja "$@" >/dev/null
}

build_all() {
  step "building (build/)"
  configure build -DCMAKE_BUILD_TYPE=RelWithDebInfo
  ninja -C build -j"$JOBS"
}

run_demo() {
  build_all
  step "running examples/demo.sh"
  MQ_BIN=$SRC/build bash examples/demo.sh
  step "running examples/replication.sh (the replication scenarios of mq(7))"
  MQ_BIN=$SRC/build bash examples/replication.sh
}

run_ctest() {
  step "ctest (build/)"
  ctest --test-dir build --output-on-failure -j"$JOBS"
}

have_clang() {
  command -v clang++ >/dev/null && [[ -z $(missing_packages libclang-rt-14-dev) ]]
}

# The unit tests under the sanitizers spend most of their wall time waiting
# (bounded lock waits, sleeps, child processes), not on the CPU: they run as
# three processes side by side, split by source file (Catch's filename tags,
# -#). Each line of UNIT_SHARDS is one process; one more runs every file no
# line names, so a new test file is never left out, and the test cases the
# processes ran must add up to all of them (a spec that matches nothing
# passes in Catch).
UNIT_SHARDS=(
  '[#test_fault_sweep]'
  '[#test_compression],[#test_reader_property],[#test_partition],[#test_group],[#test_consumer]'
)

# run_unit_tests_sanitized DIR: runs DIR's unit tests (built there with ASan+UBSan).
run_unit_tests_sanitized() {
  local bin=$1/tests/unit_tests logs rest="" spec specs=() pids=() i rc=0 ran=0 all n
  for spec in "${UNIT_SHARDS[@]}"; do rest+="~${spec//,/\~}"; done
  specs=("${UNIT_SHARDS[@]}" "$rest")
  logs=$(mktemp -d)
  for i in "${!specs[@]}"; do
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      "$bin" -# "${specs[$i]}" >"$logs/$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!specs[@]}"; do
    wait "${pids[$i]}" || rc=$?
    printf -- '--- unit tests %s\n' "${specs[$i]}"
    cat "$logs/$i"
    n=$(sed -nE 's/^All tests passed \(.* in ([0-9]+) test cases?\)$/\1/p' "$logs/$i")
    ran=$((ran + ${n:-0}))
  done
  rm -rf "$logs"
  ((rc == 0)) || return "$rc"
  # Catch's --list-test-names-only exits with the number of names listed.
  all=$({ "$bin" --list-test-names-only || true; } | grep -c .)
  ((ran == all)) || die "the unit test processes ran $ran test cases of $all"
}

# With clang, the unit tests under ASan+UBSan and the fuzz targets share one
# build (build-fuzz/: every object is built with both sanitizers there), so
# liblog is compiled once for both. Without clang, g++ builds the unit tests
# with both sanitizers in build-asan/ and the fuzz targets are skipped.
#
# That build runs while ctest runs: many CLI tests spend much of their time
# waiting (on child processes, fsync, bounded waits), so ctest leaves the
# cores partly idle, and the build, at the lowest CPU priority (nice 19),
# takes that idle time and little of the tests'. Its output goes to
# DIR/build.log, shown if it fails.
SAN_DIR="" SAN_PID="" FUZZ_PID=""
start_sanitized_build() {
  local args targets
  if have_clang; then
    SAN_DIR=build-fuzz
    # -O1 and line tables only, as the sanitizers' and libFuzzer's docs use:
    # reports keep file and line, and the build takes less CPU.
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMQ_FUZZ=ON
          -DMQ_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only"
          -DCMAKE_CXX_COMPILER=clang++ -DMQ_FUZZ_SECONDS="$FUZZ_SECONDS")
    targets=(unit_tests tests/fuzz/all)
  else
    SAN_DIR=build-asan
    args=(-DCMAKE_BUILD_TYPE=Debug -DMQ_SANITIZE=ON)
    targets=(unit_tests)
  fi
  step "the sanitizer build ($SAN_DIR/) starts in the background, at nice 19"
  mkdir -p "$SAN_DIR"
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    configure "$SAN_DIR" "${args[@]}"
    exec ninja -C "$SAN_DIR" -j"$JOBS" "${targets[@]}"
  ) >"$SAN_DIR/build.log" 2>&1 &
  SAN_PID=$!
  trap stop_sanitized_build EXIT
}

# Stops the background build, or the fuzz targets' ctest, if the run ends
# before it is waited for.
stop_sanitized_build() {
  local pid
  for pid in $SAN_PID $FUZZ_PID; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

finish_sanitized_build() {
  step "waiting for the sanitizer build ($SAN_DIR/)"
  local rc=0
  wait "$SAN_PID" || rc=$?
  SAN_PID=""
  if ((rc != 0)); then
    cat "$SAN_DIR/build.log" >&2
    die "the sanitizer build ($SAN_DIR/) failed (exit $rc)"
  fi
  tail -n1 "$SAN_DIR/build.log"
}

# The fuzz targets (tests/fuzz's ctest tests fuzz.<name>, each bounded to
# MQ_FUZZ_SECONDS; tests/fuzz/CMakeLists.txt sets their limits and corpora)
# use the CPU all along, and the sanitized unit tests mostly wait: they run
# side by side, the fuzz targets' output shown after the unit tests'.
run_sanitized_tests() {
  finish_sanitized_build
  local fuzz_log="" rc=0
  if [[ $SAN_DIR == build-fuzz ]]; then
    step "fuzz targets, ${FUZZ_SECONDS}s each, beside the unit tests under ASan+UBSan ($SAN_DIR/)"
    fuzz_log=$(mktemp)
    ctest --test-dir build-fuzz -R '^fuzz[.]' --output-on-failure -j"$JOBS" >"$fuzz_log" 2>&1 &
    FUZZ_PID=$!
  fi
  step "unit tests under ASan+UBSan ($SAN_DIR/)"
  run_unit_tests_sanitized "$SAN_DIR" || rc=$?
  if [[ -z $FUZZ_PID ]]; then
    step "fuzz targets skipped: clang++ or libclang-rt-14-dev not installed"
    return "$rc"
  fi
  local fuzz_rc=0
  wait "$FUZZ_PID" || fuzz_rc=$?
  FUZZ_PID=""
  step "fuzz targets (build-fuzz/)"
  cat "$fuzz_log"
  rm -f "$fuzz_log"
  ((rc == 0)) || return "$rc"
  return "$fuzz_rc"
}

case ${1:-} in
  build) install_packages; build_all ;;
  demo) install_packages; run_demo ;;
  test) install_packages; build_all; start_sanitized_build; run_ctest; run_sanitized_tests
        step "all tests passed" ;;
  *) echo "usage: ./build.sh demo|test|build" >&2; exit 64 ;;
esac
