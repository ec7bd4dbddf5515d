# Sourced by the failover tests after common.bash (it needs $C, $P, $WORK,
# PIDS, fail). The checks every failover run ends with, one helper each:
#   - a consumer that followed a replica through the failovers printed
#     only records of the final log, each at its offset with its bytes
#     (check_follow_output);
#   - every group's committed offsets are valid on the final leader
#     (check_group_offsets);
#   - every --producer-id ingestion is on the final leader exactly once
#     (check_ingestion).
# The topic is t, partition 0, as in every failover test.

# start_consumer NAME ROOT [GROUP]: `mq-consume -C ROOT -t t -p 0` following
# t-0 (without -e: it waits for more) in the background, as a member of
# GROUP when one is given; prints "offset value-as-hex" lines into
# $WORK/NAME.out (stderr: $WORK/NAME.err). Its pid: CONSUMER[NAME].
declare -A CONSUMER
start_consumer() {
  local name=$1 root=$2 group=${3:-}
  local args=(-C "$root" -t t -f '%o %x\n')
  if [[ -n $group ]]; then args+=(-G "$group"); else args+=(-p 0); fi
  "$C" "${args[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  CONSUMER[$name]=$!
  PIDS+=("$!")
}

# final_log ROOT FILE: "offset value-as-hex" of every record t-0 holds on
# ROOT below its HW, into FILE; their values, one a line, into FILE.values.
final_log() {
  timeout 60 "$C" -C "$1" -t t -p 0 -e -f '%o %x\n' >"$2" ||
    fail "read the final log of $1 (exit $?)"
  timeout 60 "$C" -C "$1" -t t -p 0 -e -f '%s\n' >"$2.values" ||
    fail "read the final log of $1 (exit $?)"
}

# stop_consumer NAME WANT: waits (bounded: a hang, no timing) until
# consumer NAME printed offset WANT - 1 (all of a final log ending at
# WANT), then stops it (SIGTERM: a member commits what it printed). A
# consumer that exited meanwhile fails, with its stderr.
stop_consumer() {
  local name=$1 want=$2 pid=${CONSUMER[$1]} i
  for ((i = 0; i < 600; i++)); do
    ((want == 0)) && break
    [[ $(tail -1 "$WORK/$name.out" | cut -d' ' -f1) == $((want - 1)) ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null ||
    fail "consumer $name exited during the failovers: $(tail -3 "$WORK/$name.err")"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
}

# check_follow_output WHAT OUT FINAL [group]: OUT ("offset hex" lines, a
# consumer's) against FINAL (final_log of the final leader):
#   - every record printed is in the final log at the same offset with the
#     same bytes (a consumer never hands out a record a failover cut);
#   - offsets strictly increase: none is printed twice, none out of order;
#   - the consumer printed the final log through its last record (it
#     skipped none; stop_consumer waited for it).
# With `group` (a member of one run of a group): the same. A group is at
# least once only across member runs (a member that starts again resumes
# at the committed offset, which may be below what an earlier run
# printed); within one run, as here, it is exactly the log in order.
check_follow_output() {
  local what=$1 out=$2 final=$3 mode=${4:-plain} bad
  bad=$(awk -v mode="$mode" '
    NR == FNR { log_[$1] = $2; n++; next }
    function bad(why) { print why; failed = 1; exit }
    {
      if (!($1 in log_)) bad("offset " $1 " (" $2 ") is not in the final log")
      if (log_[$1] != $2) bad("offset " $1 ": printed " $2 ", the final log holds " log_[$1])
      if (seen && $1 <= last) bad("offset " $1 " printed after offset " last " (" mode " mode: in order, once)")
      if (!seen && $1 != 0) bad("the first record printed is at offset " $1 ", not 0")
      if (seen && $1 != last + 1) bad("offsets " last + 1 ".." $1 - 1 " skipped")
      seen = 1; last = $1
    }
    END { if (!failed && n > 0 && (!seen || last != n - 1)) print "printed through offset " (seen ? last : "none") ", the final log ends at " n }
  ' "$final" "$out")
  [[ -z $bad ]] || fail "$what: $bad"
}

# group_offsets_problem ROOT LEADER: whether every group ROOT holds (its
# committed offsets of t-0, carried from the leader or committed there)
# is valid on the final leader's root LEADER:
#   - the committed offset is at most the leader's HW (what a consumer may
#     read), and mq-consume --describe notes nothing (no above-log-end, no
#     diverged);
#   - when the commit stores the leader epoch of the record before it, the
#     leader's leader-epoch-checkpoint puts that record in that epoch: the
#     epoch starts at or below offset-1 and ends at or after the offset
#     (KIP-320: a group's position is checked against the leader's epochs).
# Prints the number of groups checked (status 0), or the first problem
# (status 1).
group_offsets_problem() {
  local root=$1 leader=$2 groups g row off epoch hw n=0
  groups=$(timeout 60 "$C" -C "$root" --list) || { echo "mq-consume --list on $root: exit $?"; return 1; }
  hw=$("$INSPECT" "$leader/t-0/high-watermark" 2>/dev/null | awk '/^topic:/ { print $6 }')
  [[ -n $hw ]] || { echo "no HW in $leader/t-0/high-watermark"; return 1; }
  for g in $groups; do
    row=$(timeout 60 "$C" -C "$root" --describe -G "$g" -t t -J |
      jq -c 'select(.type == "partition" and .partition == 0)') ||
      { echo "describe group $g on $root failed"; return 1; }
    off=$(jq -r '.current_offset' <<<"$row")
    epoch=$(jq -r '.leader_epoch' <<<"$row")
    [[ $off != null ]] || continue
    if ((off > hw)); then
      echo "group $g on $root committed offset $off, above the final leader's HW $hw"
      return 1
    fi
    if [[ $(jq -r '.note' <<<"$row") != null ]]; then
      echo "group $g on $root: $(jq -r '.note' <<<"$row") (committed offset $off): $row"
      return 1
    fi
    if ((epoch >= 0 && off > 0)) && ! awk -v e="$epoch" -v o="$off" -v hw="$hw" '
        NR > 2 { start[NR] = $2; ep[NR] = $1; last = NR }
        END {
          for (i = 3; i <= last; i++) if (ep[i] == e) {
            end_ = (i < last) ? start[i + 1] : hw
            exit !(start[i] <= o - 1 && o <= end_)
          }
          exit 1
        }' "$leader/t-0/leader-epoch-checkpoint"; then
      echo "group $g on $root committed offset $off after a record of leader epoch $epoch; the final leader's epochs (epoch, start): $(tail -n +3 "$leader/t-0/leader-epoch-checkpoint" | tr '\n' ' ')"
      return 1
    fi
    n=$((n + 1))
  done
  echo "$n"
}

# check_group_offsets WHAT ROOT LEADER: group_offsets_problem finds none
# (else fail); adds the groups checked to GROUPS_CHECKED.
GROUPS_CHECKED=0
check_group_offsets() {
  local out
  out=$(group_offsets_problem "$2" "$3") || fail "$1: $out"
  GROUPS_CHECKED=$((GROUPS_CHECKED + out))
}

# check_ingestion WHAT FINAL INPUT: every line of INPUT (an ingestion by
# one --producer-id, its lines unique) is in FINAL (final_log of the final
# leader) exactly once.
check_ingestion() {
  local what=$1 final=$2 input=$3 bad
  bad=$(awk '
    NR == FNR { want[$0] = 1; order[++n] = $0; next }
    ($0 in want) { got[$0]++ }
    END {
      for (i = 1; i <= n; i++) {
        m = order[i]
        if (got[m] != 1) { printf "%s: %d times on the final leader (want once)\n", m, got[m]; exit }
      }
    }' "$input" "$final.values")
  [[ -z $bad ]] || fail "$what: $bad"
}
