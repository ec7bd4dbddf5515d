#!/usr/bin/env bash
# Seeded: consumer-group members read a topic while a writer cuts the tail
# of a partition's log under them (a live truncation, recorded in the
# partition's truncation history, format-spec/segment.md §6.6, R59) and
# more messages are appended at once at the offsets that were cut, past
# where the members were (held with SIGSTOP over both, mostly, so that
# they look only after); members join and leave (SIGTERM) meanwhile. A
# member whose reader finds records it handed out cut goes back to the
# lowest cut below them, even when the log has grown past them again
# (segment.md §9.4), and lowers what it handed over and committed to it
# (group.md §14.3). Per commit mode (mq-consume(1), Delivery):
#   - default (at least once): every message of the final log is delivered;
#   - --at-most-once: no message is delivered twice.
# A message cut away (in the log before a cut, not in the final log) may
# have been delivered or not. The cuts come one after another, without
# waiting for the members to read past the last one: a reader may find a
# truncation under way while it finds its place or deals with the one
# before (segment.md §9.4). MQ_TEST_SEED=N repeats a run (its seed is
# printed); MQ_GROUP_LIVE_CUT_ROUNDS sets the rounds per mode (CI: 12).
source "$(dirname "$0")/lib/common.bash"

export MQ_DIR="$WORK/data"
produce() { "$BIN/mq-produce" -q "$@"; }
CUT="$BIN/tests/mq-test-truncate"
SEED=${MQ_TEST_SEED:-$RANDOM}
ROUNDS=${MQ_GROUP_LIVE_CUT_ROUNDS:-12}
echo "consume_group_live_cut: seed $SEED, $ROUNDS rounds per mode (MQ_TEST_SEED=$SEED repeats it)"
RANDOM=$SEED
fail() { echo "FAIL (seed $SEED): $*" >&2; exit 1; }
PARTS=2
sleep_ms() { sleep "$(printf '0.%03d' "$1")"; }
complete_lines() {
  local f
  for f in "$@"; do
    if [[ -n $(tail -c1 "$f") ]]; then sed '$d' "$f"; else cat "$f"; fi
  done
}

one_mode() {
  local mode=$1 topic="t$1" group="g$1" dir="$WORK/$1" flags=()
  [[ $mode == amo ]] && flags=(--at-most-once)
  mkdir -p "$dir"
  produce -t "$topic" --create --partitions "$PARTS" </dev/null
  local next=1 runs=0 cuts=0 round
  local -A pid_of=()
  append() {
    local n=$1 p first=$next
    next=$((next + n))
    for ((p = 0; p < PARTS; p++)); do
      seq "$first" $((next - 1)) | awk -v p="$p" -v k="$PARTS" '$1 % k == p {print "v"$1}' |
        produce -t "$topic" -p "$p" --batch-bytes 120
    done
  }
  start() {
    runs=$((runs + 1))
    "$C" -t "$topic" -G "$group" -f '%s\n' --commit-interval 20 "${flags[@]}" \
      >"$dir/out.$runs" 2>>"$dir/err" &
    pid_of[$runs]=$!
    PIDS+=("$!")
  }
  leave() {
    kill -TERM "${pid_of[$1]}" 2>/dev/null || true
    wait "${pid_of[$1]}" 2>/dev/null || true
    unset "pid_of[$1]"
  }
  start
  start
  append 200
  for ((round = 1; round <= ROUNDS; round++)); do
    append $((20 + RANDOM % 80))
    sleep_ms $((RANDOM % 60))
    # A cut of 1..60 offsets of one partition, then appends at once. The
    # members are held (SIGSTOP, as a busy or descheduled process is) over
    # both, or not, so that a reader finds the log cut and grown past
    # where it was before it looks again.
    local p=$((RANDOM % PARTS)) back=$((1 + RANDOM % 60)) grow=$((60 + RANDOM % 120))
    local hold=$((RANDOM % 3 != 0)) r
    ((hold)) && for r in "${!pid_of[@]}"; do kill -STOP "${pid_of[$r]}"; done
    echo "round $round: partition $p cut to $("$CUT" "$MQ_DIR" "$topic" "$p" "$back" 2>"$dir/cut.err")" \
      >>"$dir/cuts" || fail "$mode: mq-test-truncate: $(cat "$dir/cut.err")"
    [[ ! -s "$dir/cut.err" ]] ||
      fail "$mode: mq-test-truncate: $(cat "$dir/cut.err")"
    cuts=$((cuts + 1))
    append "$grow"
    ((hold)) && for r in "${!pid_of[@]}"; do kill -CONT "${pid_of[$r]}"; done
    local members=($(echo "${!pid_of[@]}"))
    case $((RANDOM % 3)) in
      0) start ;;
      1) ((${#members[@]} > 1)) && leave "${members[RANDOM % ${#members[@]}]}" ;;
      *) ;;
    esac
  done
  sleep_ms $((RANDOM % 200))
  local r
  for r in "${!pid_of[@]}"; do leave "$r"; done
  append 20
  runs=$((runs + 1))
  run "$C" -t "$topic" -G "$group" -f '%s\n' -e "${flags[@]}"
  expect_rc 0 "$mode: the last member"
  cp "$WORK/out" "$dir/out.$runs"
  cat "$WORK/err" >>"$dir/err"

  local i
  "$C" -t "$topic" -e -f '%s\n' | sort >"$dir/final"
  for ((i = 1; i <= runs; i++)); do complete_lines "$dir/out.$i"; done | sort >"$dir/delivered"
  sort -u "$dir/delivered" >"$dir/values"
  local missing dups
  missing=$(comm -23 "$dir/final" "$dir/values" | wc -l)
  dups=$(($(wc -l <"$dir/delivered") - $(wc -l <"$dir/values")))
  echo "$mode: $runs member runs, $cuts cuts, $((next - 1)) appended," \
    "$(wc -l <"$dir/final") in the final log, $missing lost, $dups duplicated"
  [[ -z $(comm -13 <(seq 1 $((next - 1)) | sed 's/^/v/' | sort) "$dir/values") ]] ||
    fail "$mode: delivered a message never appended"
  if [[ $mode == alo ]]; then
    ((missing == 0)) || fail "$mode: $missing messages of the final log were not delivered:" \
      "$(comm -23 "$dir/final" "$dir/values" | head -5 | tr '\n' ' ')"
  else
    ((dups == 0)) || fail "$mode: $dups messages delivered twice:" \
      "$(uniq -d "$dir/delivered" | head -5 | tr '\n' ' ')"
  fi
  local said='the log was truncated\|is past the log end\|is idle until an owner leaves'
  ! grep -v "$said" "$dir/err" | grep -q . ||
    fail "$mode: unexpected messages: $(grep -v "$said" "$dir/err" | head -3)"
  return 0
}

one_mode alo
one_mode amo
echo "consume_group_live_cut: ok"
