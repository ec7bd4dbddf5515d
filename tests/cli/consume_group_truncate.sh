#!/usr/bin/env bash
# Seeded: consumer-group members join, leave (SIGTERM) and are killed
# (SIGKILL) while messages are appended, and "machine crashes" kill every
# member and cut the tail of a partition's log (page-cache writes lost: the
# next writer's recovery cuts the torn tail and records the cut in the
# partition's truncation history, format-spec/segment.md §6.6, R59), after
# which more messages are appended at the offsets that were cut. Then, per
# commit mode, the bounds mq-consume(1) documents (Delivery, --at-most-once,
# Committed offsets out of range):
#   - default (at least once): every message of the final log is delivered
#     (the ones appended after a cut at offsets a member had committed past
#     included); a message delivered twice was delivered by a killed member
#     at least once (nothing is repeated by members that left cleanly);
#   - --at-most-once: no message is delivered twice; a message of the final
#     log is lost only when some member was killed, and every message
#     appended after the last kill is delivered;
#   - a message cut away by a crash (in the log before it, not in the final
#     log) may have been delivered or not: it is neither lost nor counted
#     as a duplicate of another (every message is unique), but the rules
#     above hold for it as for any other.
# MQ_TEST_SEED=N repeats a run (its seed is printed); MQ_GROUP_TRUNC_ROUNDS
# sets the rounds per mode (CI: 3, a few seconds; a soak: as many as you
# like).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
SEED=${MQ_TEST_SEED:-$RANDOM}
ROUNDS=${MQ_GROUP_TRUNC_ROUNDS:-3}
echo "consume_group_truncate: seed $SEED, $ROUNDS rounds per mode (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED
fail() { echo "FAIL (seed $SEED): $*" >&2; exit 1; }
PARTS=3

# complete_lines FILE...: the newline-terminated lines of each file (a
# SIGKILL can cut a write short: a partial last line was not handed over).
complete_lines() {
  local f
  for f in "$@"; do
    if [[ -n $(tail -c1 "$f") ]]; then sed '$d' "$f"; else cat "$f"; fi
  done
}
sleep_ms() { sleep "$(printf '0.%03d' "$1")"; }

# One mode: topic t-MODE, group g-MODE; runs in $WORK/MODE/.
one_mode() {
  local mode=$1 topic="t$1" group="g$1" dir="$WORK/$1" flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  mkdir -p "$dir"
  produce -t "$topic" --create --partitions "$PARTS" </dev/null
  local next=1 runs=0 kills=0 crashes=0 cuts=0 boot=0 round event
  local -A pid_of=()  # run number -> pid of a live member
  : >"$dir/killed" >"$dir/after-last-kill"
  # append N: N messages v<next>... spread over the partitions, in small
  # batches (each run of mq-produce is its own batches).
  append() {
    local n=$1 p first=$next
    next=$((next + n))
    for ((p = 0; p < PARTS; p++)); do
      seq "$first" $((next - 1)) | awk -v p="$p" -v k="$PARTS" '$1 % k == p {print "v"$1}' |
        produce -t "$topic" -p "$p" --batch-bytes 120
    done
    seq "$first" $((next - 1)) | sed 's/^/v/' >>"$dir/after-last-kill"
  }
  start() {
    runs=$((runs + 1))
    "$C" -t "$topic" -G "$group" -f '%s\n' --commit-interval 50 "${flags[@]}" \
      >"$dir/out.$runs" 2>>"$dir/err" &
    pid_of[$runs]=$!
    PIDS+=("$!")
  }
  # stop RUN SIGNAL: a clean leave (TERM) or a kill (KILL).
  stop() {
    kill "-$2" "${pid_of[$1]}" 2>/dev/null || true
    wait "${pid_of[$1]}" 2>/dev/null || true
    unset "pid_of[$1]"
    if [[ $2 == KILL ]]; then
      echo "$1" >>"$dir/killed"
      kills=$((kills + 1))
      : >"$dir/after-last-kill"
    fi
  }
  live() { echo "${!pid_of[@]}"; }
  for ((round = 1; round <= ROUNDS; round++)); do
    # (RANDOM is drawn here, never inside $(...): a subshell's draws are
    # its own, and a seed would not repeat the schedule.)
    local joins=$((1 + RANDOM % 2)) j
    for ((j = 0; j < joins; j++)); do start; done
    for ((event = 0; event < 6; event++)); do
      append $((20 + RANDOM % 60))
      sleep_ms $((RANDOM % 200))
      local members=($(live))
      case $((RANDOM % 4)) in
        0) start ;;
        1) ((${#members[@]} > 1)) && stop "${members[RANDOM % ${#members[@]}]}" TERM ;;
        2) ((${#members[@]} > 1)) && stop "${members[RANDOM % ${#members[@]}]}" KILL ;;
        *) ;;
      esac
    done
    sleep_ms $((RANDOM % 300))
    local r
    if ((RANDOM % 3 != 0)); then
      # A machine crash: every member dies; a partition loses the tail of
      # its log (cut at any byte of its last 600); the boot id changes, so
      # the writer's recovery does not trust the published end and cuts
      # the torn tail, recording the cut.
      for r in $(live); do stop "$r" KILL; done
      crashes=$((crashes + 1))
      local p=$((RANDOM % PARTS)) seg size back
      seg="$MQ_DIR/$topic-$p/00000000000000000000.log"
      size=$(stat -c %s "$seg")
      back=$((1 + RANDOM % 600))
      ((back > size)) && back=$size
      truncate -s $((size - back)) "$seg"
      boot=$((boot + 1))
      export MQ_TEST_BOOT_ID
      MQ_TEST_BOOT_ID=$(printf '%08x-0000-4000-8000-%012x' "$SEED" "$boot")
      # The next writer of every partition recovers first (a reader of a
      # log that needs recovery stops: 75).
      append $((3 * PARTS))
      [[ -s "$MQ_DIR/$topic-$p/truncations" ]] && cuts=$(grep -c '^cut=' "$MQ_DIR/$topic-$p/truncations")
    else
      for r in $(live); do stop "$r" TERM; done
    fi
  done
  # Messages appended after the last kill, then a member to the end.
  append 50
  runs=$((runs + 1))
  run "$C" -t "$topic" -G "$group" -f '%s\n' -e "${flags[@]}"
  expect_rc 0 "$mode: the last member"
  cp "$WORK/out" "$dir/out.$runs"
  cat "$WORK/err" >>"$dir/err"

  # The checks.
  local i final
  "$C" -t "$topic" -e -f '%s\n' | sort >"$dir/final"
  for ((i = 1; i <= runs; i++)); do
    complete_lines "$dir/out.$i" | sed "s/\$/ $i/"
  done | sort >"$dir/delivered"  # "VALUE RUN"
  cut -d' ' -f1 "$dir/delivered" | sort -u >"$dir/values"
  local missing dups cutaway bad
  missing=$(comm -23 "$dir/final" "$dir/values" | wc -l)
  dups=$(($(wc -l <"$dir/delivered") - $(wc -l <"$dir/values")))
  cutaway=$(seq 1 $((next - 1)) | sed 's/^/v/' | sort | comm -23 - "$dir/final" | wc -l)
  # Delivered more than once by members that were not killed.
  bad=$(awk 'NR == FNR {killed[$1] = 1; next} !($2 in killed) {n[$1]++}
             END {for (v in n) if (n[v] > 1) print v}' "$dir/killed" "$dir/delivered" | wc -l)
  echo "$mode: $runs member runs, $kills kills, $crashes crashes ($cuts cuts recorded last)," \
    "$((next - 1)) appended, $cutaway cut away, $missing lost, $dups duplicated"
  [[ -z $(comm -13 <(seq 1 $((next - 1)) | sed 's/^/v/' | sort) "$dir/values") ]] ||
    fail "$mode: delivered a message never appended"
  local unseen
  unseen=$(sort "$dir/after-last-kill" | comm -23 - "$dir/values" | wc -l)
  ((unseen == 0)) || fail "$mode: $unseen messages appended after the last kill were not delivered"
  if [[ $mode == alo ]]; then
    ((missing == 0)) || fail "$mode: $missing messages of the final log were not delivered:" \
      "$(comm -23 "$dir/final" "$dir/values" | head -5 | tr '\n' ' ')"
    ((bad == 0)) || fail "$mode: $bad messages delivered twice by members that were not killed"
  else
    ((dups == 0)) || fail "$mode: $dups messages delivered twice"
    ((missing == 0 || kills > 0)) || fail "$mode: $missing messages lost without a kill"
  fi
  # On stderr: cuts found, and idle members; nothing else.
  local said='the log was truncated\|is past the log end\|is idle until an owner leaves'
  ! grep -v "$said" "$dir/err" | grep -q . ||
    fail "$mode: unexpected messages: $(grep -v "$said" "$dir/err" | head -3)"
  grep -q "the log was truncated to offset\|is past the log end" "$dir/err" || ((crashes == 0)) ||
    echo "$mode: no member found a cut below its committed offset"
  return 0
}

one_mode alo
one_mode amo
echo "consume_group_truncate: ok"
