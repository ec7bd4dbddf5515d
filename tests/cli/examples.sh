#!/usr/bin/env bash
# Every script of examples/ runs against the built tools and exits 0: the
# recipes check their own claims as they go (a claim that no longer holds
# makes its recipe fail), so they cannot drift from what mq does.
source "$(dirname "$0")/lib/common.bash"

shopt -s nullglob
scripts=("$SRC"/examples/*.sh)
((${#scripts[@]} > 0)) || fail "no examples/*.sh"
for script in "${scripts[@]}"; do
  name=$(basename "$script")
  set +e
  TMPDIR="$WORK" MQ_BIN="$BIN" timeout 120 bash "$script" >"$WORK/$name.out" 2>&1
  rc=$?
  set -e
  ((rc == 0)) || fail "examples/$name: exit $rc: $(tail -n 20 "$WORK/$name.out")"
  echo "examples/$name: ok"
done
echo "ok"
