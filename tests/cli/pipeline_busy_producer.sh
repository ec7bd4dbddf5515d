#!/usr/bin/env bash
# A pipeline member that takes a partition whose producer id
# (pipeline.md E1: producers/<name>.lock) another process still holds does
# not stop: like a partition whose previous owner has not let go (group.md
# §14.6), it leaves the partition for now, keeps consuming its other
# partitions, and takes it at a later poll once the lock is free. Every
# output is in the output topic once.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }

produce -t in --create --partitions 2 </dev/null
produce -t out --create --partitions 1 </dev/null
seq 1 5 | sed 's/^/a/' | produce -t in -p 0
seq 1 5 | sed 's/^/b/' | produce -t in -p 1
# Partition 1's producer id (group p, in, out), held by another process.
mkdir -p "$MQ_DIR/producers"
"$PY" - "$MQ_DIR/producers/pipeline.1.p.2.in.3.out.1.lock" "$WORK/holding" "$WORK/let-go" \
  <<'PYEOF' >/dev/null 2>&1 &
import fcntl, os, sys, time
lock, ready, let_go = sys.argv[1:]
fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o640)
fcntl.flock(fd, fcntl.LOCK_EX)
open(ready, "w").close()
for _ in range(6000):
    if os.path.exists(let_go):
        break
    time.sleep(0.01)
PYEOF
holder=$!
PIDS+=("$holder")
for _ in $(seq 1 1000); do [[ -e $WORK/holding ]] && break; sleep 0.01; done
[[ -e $WORK/holding ]] || fail "the producer id was not locked"

# shellcheck disable=SC2016
"$C" -t in -G p -q --to-topic out --exec sh -c 'awk "{print \"o:\" \$1}"' 2>"$WORK/err.m" &
member=$!
PIDS+=("$member")
# outputs PREFIX: how many outputs of source lines PREFIX* the topic holds.
outputs() { "$C" -t out -e 2>/dev/null | grep -c "^o:$1" || true; }
for _ in $(seq 1 1000); do
  [[ $(outputs a) == 5 ]] && break
  kill -0 "$member" 2>/dev/null || break
  sleep 0.02
done
kill -0 "$member" 2>/dev/null || {
  set +e; wait "$member"; rc=$?; set -e
  fail "the member stopped (exit $rc) with partition 1's producer id held: $(cat "$WORK/err.m")"
}
[[ $(outputs a) == 5 ]] || fail "partition 0: $(outputs a) of 5 outputs while partition 1 waits"
[[ $(outputs b) == 0 ]] || fail "partition 1 handled while its producer id is held elsewhere"

touch "$WORK/let-go"
wait "$holder"
for _ in $(seq 1 1000); do
  [[ $(outputs b) == 5 ]] && break
  kill -0 "$member" 2>/dev/null || break
  sleep 0.02
done
[[ $(outputs b) == 5 ]] || fail "partition 1: $(outputs b) of 5 outputs after its producer id was let go: $(cat "$WORK/err.m")"
kill -TERM "$member"
set +e; wait "$member"; rc=$?; set -e
# It dies of the signal (mq-consume(1), EXIT STATUS), having said nothing.
[[ $rc == 143 && ! -s $WORK/err.m ]] || fail "the member: exit $rc on SIGTERM: $(cat "$WORK/err.m")"
expect_eq "every output once" "$( (seq 1 5 | sed 's/^/o:a/'; seq 1 5 | sed 's/^/o:b/') | sort)" \
  "$("$C" -t out -e | sort)"
echo "pipeline_busy_producer: a busy producer id delayed its partition; 10 outputs, each once"
