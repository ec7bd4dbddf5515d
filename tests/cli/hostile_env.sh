#!/usr/bin/env bash
# A hostile environment: a FIFO, a character device, a directory or a symlink
# in every file position of a data directory; closed and full stdout and
# stderr; names at their longest. Every tool that opens the file must refuse
# it with exit 77 within the time limit (opening a FIFO blocks: a hang is a
# failure), naming the file with its partition directory (format-spec
# segment.md §6, layout.md §1.1); no tool aborts (exit 134) when it cannot
# write a message; valid names work end to end (layout.md §1.1, producer.md
# P8).
source "$(dirname "$0")/lib/common.bash"
T="$WORK"

# hrun CMD...: runs CMD with stdin from /dev/null, at most 10 s (then TERM,
# KILL 2 s later); stdout and stderr in $T/out and $T/err, status in rc. A
# run that timed out is a failure: the tool hung.
hrun() {
  set +e
  timeout -k 2 10 "$@" </dev/null >"$T/out" 2>"$T/err"
  rc=$?
  set -e
  [[ $rc != 124 && $rc != 137 ]] || fail "hung (killed after 10 s): $*"
}
# refused WHAT NAME: the last run exited 77 and its stderr names NAME.
refused() {
  [[ $rc == 77 ]] || fail "$1: exit $rc, want 77 (stderr: $(head -c 600 "$T/err"))"
  grep -qF -- "$2" "$T/err" || fail "$1: stderr does not name $2: $(head -c 600 "$T/err")"
}

# --- the pristine data directory ------------------------------------------
# One partition, two segments (each with .log, .index and .timeindex), a
# state file, writer.lock, producer snapshots and a registry entry for the
# producer id "pid".
B="$T/base"
seq -f 'message %.0f padded to make the batches larger than a few bytes' 1 400 >"$T/in"
"$P" -C "$B" -t t --create -X segment.bytes=8192 -X index.interval.bytes=128 \
  --producer-id pid --batch-bytes 2048 -q "$T/in"
LOG0=00000000000000000000
LOGS=("$B"/t-0/*.log)
[[ ${#LOGS[@]} -ge 2 ]] || fail "setup: want at least two segments, got ${#LOGS[@]}"
LAST=$(basename "${LOGS[-1]}" .log)
SNAP=$(cd "$B/t-0" && ls -- *.snapshot | tail -1)  # the newest: the one a writer loads
[[ -n $SNAP ]] || fail "setup: no producer snapshot"
for f in meta.properties topics/t.conf t-0/$LOG0.log t-0/$LOG0.index t-0/$LOG0.timeindex \
  t-0/state t-0/writer.lock "t-0/$SNAP" producers/pid.id producers/pid.lock \
  producers/next-producer-id; do
  [[ -e $B/$f ]] || fail "setup: $f missing"
done
"$INSPECT" --verify "$B/t-0" >/dev/null || fail "setup: the base does not verify"

D="$T/d"
# plant KIND FILE: a fresh copy of the base with FILE (relative to the data
# directory) replaced by KIND: fifo, chardev (/dev/null's device numbers),
# dir, or symlink (to an intact copy of the file, so following it would work).
plant() {
  local kind=$1 f=$2
  rm -rf "$D"
  cp -a "$B" "$D"
  case $kind in
    fifo) rm -rf "${D:?}/$f" && mkfifo "$D/$f" ;;
    chardev) rm -rf "${D:?}/$f" && mknod "$D/$f" c 1 3 ;;
    dir) rm -rf "${D:?}/$f" && mkdir "$D/$f" ;;
    symlink) mv "$D/$f" "$D/$f.orig" && ln -s "$(basename "$f").orig" "$D/$f" ;;
  esac
}

KINDS=(fifo dir symlink)
if [[ $(id -u) == 0 ]]; then
  KINDS+=(chardev)
else
  echo "note: not root: no character device made with mknod; a symlink to /dev/null instead"
fi

produce() { hrun bash -c 'printf "x\n" | "$0" -C "$1" -t t --producer-id pid -q' "$P" "$D"; }
consume() { hrun "$C" -C "$D" -t t -e -q; }
consume_at() { hrun "$C" -C "$D" -t t -e -q -o "$1"; }
verify() { hrun "$INSPECT" --verify "$D/t-0"; }
dump() { hrun "$INSPECT" -d "$D/$1"; }

# Seeks into the middle of the second segment, where a reader looks at its
# indexes: an offset, and the timestamp of that message.
SEG1=$(basename "${LOGS[1]}" .log)
SEEK_OFFSET=$((10#$SEG1 + 50))
SEEK_TS=$("$C" -C "$B" -t t -e -f '%o %T\n' | awk -v o="$SEEK_OFFSET" '$1 == o {print $2; exit}')
[[ -n $SEEK_TS ]] || fail "setup: no timestamp for offset $SEEK_OFFSET"

checks=0
for kind in "${KINDS[@]}" devlink; do
  k=$kind
  if [[ $kind == devlink ]]; then k=symlink; fi
  plant_kind() {
    if [[ $kind == devlink ]]; then
      rm -rf "$D"; cp -a "$B" "$D"; rm -rf "${D:?}/$1"; ln -s /dev/null "$D/$1"
    else
      plant "$k" "$1"
    fi
  }
  # Files of the data directory root: every tool that opens a topic.
  for f in meta.properties topics/t.conf; do
    plant_kind "$f"; produce; refused "$kind $f: mq-produce" "$f"
    plant_kind "$f"; consume; refused "$kind $f: mq-consume" "$f"
    checks=$((checks + 2))
  done
  # The partition directory itself (a directory in place of a directory is
  # no hostile case).
  if [[ $kind != dir ]]; then
    plant_kind t-0; produce; refused "$kind t-0: mq-produce" "t-0"
    plant_kind t-0; consume; refused "$kind t-0: mq-consume" "t-0"
    plant_kind t-0; verify; refused "$kind t-0: --verify" "t-0"
    checks=$((checks + 3))
  fi
  # Segment files: verify and the dump of the file itself (any segment),
  # the writer (the files of the active segment, the ones it opens).
  for suffix in log index timeindex; do
    f=t-0/$LOG0.$suffix
    plant_kind "$f"; verify; refused "$kind $f: --verify" "$f"
    plant_kind "$f"; dump "$f"
    if [[ $kind == dir ]]; then
      # A directory named on the command line is a usage error (it names it).
      [[ $rc == 64 ]] && grep -qF "$f" "$T/err" || fail "dir $f: mq-inspect -d: exit $rc"
    else
      refused "$kind $f: mq-inspect -d" "$f"
    fi
    f=t-0/$LAST.$suffix
    plant_kind "$f"; produce; refused "$kind $f: mq-produce" "$f"
    checks=$((checks + 3))
  done
  # The reader opens every .log. An index is a hint to the reader: an offset
  # seek (.index) or a time seek (.timeindex) that finds no regular file there
  # scans the log instead, without waiting on it, and starts at the same
  # message as with the index.
  f=t-0/$LOG0.log; plant_kind "$f"; consume; refused "$kind $f: mq-consume" "$f"
  checks=$((checks + 1))
  for f in "t-0/$SEG1.index" "t-0/$SEG1.timeindex"; do
    plant_kind "$f"
    case $f in *.timeindex) at="s@$SEEK_TS" ;; *) at=$SEEK_OFFSET ;; esac
    consume_at "$at"
    expect_rc 0 "$kind $f: mq-consume -o $at"
    "$C" -C "$B" -t t -e -q -o "$at" >"$T/want"
    cmp -s "$T/out" "$T/want" || fail "$kind $f: mq-consume -o $at: not the messages from $at on"
    checks=$((checks + 1))
  done
  # The state file: writer, reader and verify alike.
  f=t-0/state
  plant_kind "$f"; produce; refused "$kind $f: mq-produce" "$f"
  plant_kind "$f"; consume; refused "$kind $f: mq-consume" "$f"
  plant_kind "$f"; verify; refused "$kind $f: --verify" "$f"
  checks=$((checks + 3))
  # Files only a writer opens: verify refuses what the writer refuses.
  for f in t-0/writer.lock "t-0/$SNAP"; do
    plant_kind "$f"; produce; refused "$kind $f: mq-produce" "$f"
    plant_kind "$f"; verify; refused "$kind $f: --verify" "$f"
    checks=$((checks + 2))
  done
  # The producer-id registry.
  for f in producers/pid.id producers/pid.lock; do
    plant_kind "$f"; produce; refused "$kind $f: mq-produce --producer-id" "$f"
    checks=$((checks + 1))
  done
  f=producers/next-producer-id; plant_kind "$f"
  hrun bash -c 'printf "x\n" | "$0" -C "$1" -t t --producer-id new -q' "$P" "$D"
  refused "$kind $f: mq-produce --producer-id (a new name)" "$f"
  checks=$((checks + 1))
done
echo "ok: $checks refusals of FIFOs, devices, directories and symlinks, none hung"

# A refused file is left as it was: the FIFO is still a FIFO, nothing was
# written through the symlink's target.
plant symlink t-0/state
cp "$D/t-0/state.orig" "$T/state.before"
produce; refused "symlink state again" "t-0/state"
[[ -L $D/t-0/state ]] || fail "the refused symlink was replaced"
cmp -s "$D/t-0/state.orig" "$T/state.before" || fail "the symlink's target was written"

# Input files are not files of the data directory: a FIFO or a process
# substitution given as FILE is read as usual.
plant none x
mkfifo "$T/in.fifo"
seq 1 5 >"$T/in.fifo" &
PIDS+=($!)
hrun "$P" -C "$D" -t t -q "$T/in.fifo" <(seq 6 8)
expect_rc 0 "mq-produce from a FIFO and a process substitution"
"$C" -C "$D" -t t -e -q -o -8 >"$T/got"
seq 1 8 | cmp -s - "$T/got" || fail "FIFO input: got $(tr '\n' ' ' <"$T/got")"

# --- permission errors name the file with its partition directory ----------
plant none x
chmod 000 "$D/t-0/state"
if [[ $(id -u) == 0 ]]; then
  # root passes every permission check: run the reader as nobody.
  chmod o+x "$T" && chmod -R o+rX "$D" && chmod 000 "$D/t-0/state"
  hrun setpriv --reuid=65534 --regid=65534 --clear-groups "$C" -C "$D" -t t -e -q
else
  consume
fi
refused "unreadable state: mq-consume" "t-0/state"
echo "ok: a permission error names t-0/state"

# --- closed and full stdout and stderr --------------------------------------
# closed_pipe FD CMD...: runs CMD with descriptor FD (1 or 2) on a pipe whose
# read end is already closed, the others on /dev/null; prints its status
# (a negative status is the signal that killed it).
closed_pipe() {
  "$PY" - "$@" <<'EOF'
import os, subprocess, sys
fd = int(sys.argv[1])
r, w = os.pipe()
os.close(r)
streams = {1: subprocess.DEVNULL, 2: subprocess.DEVNULL}
streams[fd] = w
try:
    p = subprocess.run(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=streams[1],
                       stderr=streams[2], timeout=10)
    print(p.returncode)
except subprocess.TimeoutExpired:
    print("hang")
EOF
}
# expect_status WANT WHAT GOT
expect_status() { [[ $3 == "$1" ]] || fail "$2: status $3, want $1"; }
plant none x

# stderr a closed pipe: the message is lost, the status is the documented one.
expect_status 64 "mq-inspect --bogus, stderr closed pipe" "$(closed_pipe 2 "$INSPECT" --bogus)"
expect_status 64 "mq-consume --bogus, stderr closed pipe" "$(closed_pipe 2 "$C" --bogus)"
expect_status 64 "mq-produce --bogus, stderr closed pipe" "$(closed_pipe 2 "$P" --bogus)"
expect_status 66 "mq-consume no topic, stderr closed pipe" \
  "$(closed_pipe 2 "$C" -C "$D" -t nosuch -e)"
expect_status 65 "mq-inspect --verify of garbage, stderr closed pipe" \
  "$(printf 'garbage that is no batch at all, long enough for a header....' >"$T/00000000000000000000.log"
     closed_pipe 2 "$INSPECT" --verify "$T/00000000000000000000.log")"
expect_status 0 "mq-produce -v summary, stderr closed pipe" \
  "$(closed_pipe 2 "$P" -C "$D" -t t -v "$T/in")"
expect_status 0 "mq-consume -v summary, stderr closed pipe" \
  "$(closed_pipe 2 "$C" -C "$D" -t t -e -v)"
expect_status 0 "mq-inspect -d, stderr closed pipe" \
  "$(closed_pipe 2 "$INSPECT" -d "$D/t-0/$LOG0.log")"
# stdout a closed pipe: quiet exit 0 (mq-consume(1), mq-inspect(1)).
expect_status 0 "mq-consume, stdout closed pipe" "$(closed_pipe 1 "$C" -C "$D" -t t -e)"
expect_status 0 "mq-inspect -d, stdout closed pipe" \
  "$(closed_pipe 1 "$INSPECT" -d "$D/t-0/$LOG0.log")"
expect_status 0 "mq-inspect --help, stdout closed pipe" "$(closed_pipe 1 "$INSPECT" --help)"

# stdout or stderr closed outright, or a full disk: exit 74 for lost output,
# the documented status otherwise, never 134.
for out in '>&-' '>/dev/full'; do
  for cmd in "\"\$C\" -C \"\$D\" -t t -e" "\"\$INSPECT\" -d \"\$D/t-0/$LOG0.log\"" \
    "\"\$P\" -C \"\$D\" -t t --print-offsets -q \"\$T/in\"" "\"\$C\" --help" "\"\$P\" -V"; do
    set +e
    eval "timeout -k 2 10 $cmd $out 2>\"\$T/err\""
    rc=$?
    set -e
    [[ $rc == 74 ]] || fail "$cmd $out: exit $rc, want 74 (stderr: $(cat "$T/err"))"
    grep -q "write error" "$T/err" || fail "$cmd $out: no write error reported"
  done
  for cmd in "\"\$INSPECT\" --bogus" "\"\$C\" -C \"\$D\" -t nosuch" "\"\$P\" -C \"\$D\" -t t -v \"\$T/in\""; do
    set +e
    eval "timeout -k 2 10 $cmd 2$out >/dev/null"
    rc=$?
    set -e
    case $cmd in *bogus*) want=64 ;; *nosuch*) want=66 ;; *) want=0 ;; esac
    [[ $rc == "$want" ]] || fail "$cmd 2$out: exit $rc, want $want"
  done
done
# What a closed stdout never does: let a data file take descriptor 1 and
# receive the output. The partition still verifies after a run with --print-offsets.
"$INSPECT" --verify "$D/t-0" >/dev/null || fail "the partition does not verify after >&- runs"
echo "ok: closed and full stdout and stderr: documented statuses, no abort"

# --- names at their longest (layout.md §1.1, producer.md P8) ---------------
L=$(printf 'n%.0s' $(seq 1 249))
[[ ${#L} == 249 ]] || fail "setup: name length ${#L}"
E="$T/long"
seq 1 20 >"$T/twenty"
# The topic: <topic>.conf and the partition directory <topic>-9999 are 254 bytes.
hrun "$P" -C "$E" -t "$L" --create --partitions 10000 -p 9999 --producer-id "$L" -q "$T/twenty"
expect_rc 0 "249-byte topic and producer id, partition 9999"
[[ -d $E/$L-9999 && -f $E/topics/$L.conf && -f $E/producers/$L.id ]] ||
  fail "long names: files missing"
# The same id again: the run resumes (everything was appended: nothing new).
hrun "$P" -C "$E" -t "$L" -p 9999 --producer-id "$L" "$T/twenty"
expect_rc 0 "249-byte producer id, second run"
hrun "$C" -C "$E" -t "$L" -p 9999 -e
expect_rc 0 "consume the 249-byte topic"
cmp -s "$T/out" "$T/twenty" || fail "long names: consumed $(wc -l <"$T/out") lines, not the 20 produced"
hrun "$INSPECT" --verify "$E/$L-9999"
expect_rc 0 "verify the partition of the 249-byte topic"
# One byte more is a usage error before anything is created.
hrun "$P" -C "$E" -t t2 --create --producer-id "n$L" -q "$T/twenty"
expect_rc 64 "a 250-byte producer id"
[[ ! -e $E/producers/n$L.lock ]] || fail "a 250-byte producer id left a lock file"
echo "ok: 249-byte topic and producer id end to end"
