#!/usr/bin/env bash
# Pipeline members with --parallel joining one after another: a partition
# moves to a joining member while the old owner's other threads start
# handlers (fork, then a slow exec through a long PATH), and the new owner
# must find the partition's producer id free once the old owner said
# "released" (pipeline.md E1; mq/lock.h: a lock is released explicitly, not
# only closed, since a forked child holds a copy of every descriptor until
# it execs). Every member exits 0 and every output is in the output topic
# once.
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
N=${MQ_JOIN_LINES:-600}
MEMBERS=6

produce -t in --create --partitions 16 </dev/null
seq 1 "$N" | awk '{print "k" $1 "\t" $1}' | produce -t in -K '\t'
# 3,000 directories that do not exist before the real PATH: each handler's
# exec looks in every one of them first, so a child holds the member's
# descriptors for a while before its exec.
LONG_PATH="$(seq -f "$WORK/none/%.0f" 1 3000 | tr '\n' ':')$PATH"
# Fails at random (half of the runs: odd pids) and is retried; else prints
# its output line.
# shellcheck disable=SC2016
TRANSFORM='[ $(($$ % 2)) = 0 ] && exit 1; awk "{print \"o:\" \$1}"'
pids=()
for i in $(seq 1 $MEMBERS); do
  PATH="$LONG_PATH" timeout 240 "$C" -t in -G p -e -q --to-topic out --max-attempts 50 \
    --retry-backoff 1 --parallel 8 --exec sh -c "$TRANSFORM" 2>"$WORK/err.$i" &
  pids+=($!)
  PIDS+=($!)
  sleep 0.3
done
bad=0
for i in $(seq 1 $MEMBERS); do
  set +e
  wait "${pids[$((i - 1))]}"
  rc=$?
  set -e
  if ((rc != 0)); then
    echo "member $i: exit $rc: $(cat "$WORK/err.$i")" >&2
    bad=$((bad + 1))
  fi
done
((bad == 0)) || fail "$bad of $MEMBERS members failed"
# A member that exits at the end of what it took (-e) may leave partitions
# taken later to the others: one more member finishes the rest.
run "$C" -t in -G p -e -q --to-topic out --parallel 8 --exec sh -c "$TRANSFORM" --max-attempts 50 \
  --retry-backoff 1
expect_rc 0 "the last member"
"$C" -t out -e | sort >"$WORK/outputs"
dups=$(uniq -d "$WORK/outputs" | wc -l)
((dups == 0)) || fail "$dups outputs appended twice: $(uniq -d "$WORK/outputs" | head -5 | tr '\n' ' ')"
expect_eq "every output once" "$(seq 1 "$N" | sed 's/^/o:/' | sort)" "$(cat "$WORK/outputs")"
echo "pipeline_parallel_join: $MEMBERS members joined 0.3 s apart, $N outputs, each once"
