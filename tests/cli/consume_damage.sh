#!/usr/bin/env bash
# The reader's corruption matrix: each kind of damage that mq-inspect --verify
# detects, applied to a rolled and to the active segment of a partition. The
# consumer must stop with exit 65 naming the same rule as --verify, and print
# only records from before the damage: never exit 0 having skipped data.
# Damaged indexes are hints: the consumer warns, scans the log, and delivers
# everything from the right place.
source "$(dirname "$0")/lib/common.bash"

# 6,000 messages in segments of at most 20,000 bytes, 1,000 per produce run
# (so batches are small), timestamps 1700000000000 + offset.
SRCDATA="$WORK/src"
"$P" -q -C "$SRCDATA" -t t --create -X segment.bytes=20000 </dev/null
for run in 0 1 2 3 4 5; do
  seq $((run * 1000)) $((run * 1000 + 999)) |
    awk '{printf "{\"ts\":17000%08d,\"payload\":\"m%d\"}\n", $1, $1}' |
    "$P" -q -C "$SRCDATA" -t t -J --batch-bytes 2000
done
seq 0 5999 | sed 's/^/m/' >"$WORK/all"
"$C" -C "$SRCDATA" -t t -e >"$WORK/got"
cmp -s "$WORK/all" "$WORK/got" || fail "the intact partition does not read back"
mapfile -t SEGS < <(cd "$SRCDATA/t-0" && ls ./*.log | sed 's|^\./||')
((${#SEGS[@]} >= 4)) || fail "want at least 4 segments, got ${#SEGS[@]}"
ROLLED=${SEGS[1]}
ACTIVE=${SEGS[${#SEGS[@]} - 1]}

# batches FILE: "position baseOffset size" per batch of a segment.
batches() {
  "$PY" - "$1" <<'EOF'
import struct, sys
b = open(sys.argv[1], 'rb').read()
p = 0
while p + 12 <= len(b):
    base, length = struct.unpack('>qi', b[p:p + 12])
    print(p, base, length + 12)
    p += length + 12
EOF
}
# set_base FILE POS VALUE: rewrites the baseOffset of the batch at POS.
set_base() {
  "$PY" - "$@" <<'EOF'
import struct, sys
f, pos, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(f, 'r+b') as h:
    h.seek(pos); h.write(struct.pack('>q', v))
EOF
}

D="$WORK/d"
fresh() { rm -rf "$D"; cp -a "$SRCDATA" "$D"; }

# check NAME RULE: the consumer and --verify agree on RULE, the consumer
# exits 65 and printed a prefix of the messages.
check() {
  local name=$1 rule=$2
  run "$INSPECT" --verify "$D/t-0"
  [[ $rc != 0 ]] || fail "$name: --verify says ok"
  grep -q ": $rule: " "$WORK/out" "$WORK/err" || fail "$name: --verify does not report $rule: $(cat "$WORK/out" "$WORK/err")"
  cp "$WORK/out" "$WORK/verify.out"
  run "$C" -C "$D" -t t -e
  expect_rc 65 "$name: consumer"
  grep -q ": $rule: " "$WORK/err" || fail "$name: consumer does not name $rule: $(cat "$WORK/err")"
  local n
  n=$(wc -l <"$WORK/out")
  ((n < 6000)) || fail "$name: the consumer printed everything"
  head -n "$n" "$WORK/all" | cmp -s - "$WORK/out" || fail "$name: output is not a prefix of the messages"
  # The same damage, followed: still 65, never a silent wait past the damage.
  run timeout 10 "$C" -C "$D" -t t
  expect_rc 65 "$name: follower"
}

# A rolled segment truncated inside a batch (F2).
fresh
truncate -s -1000 "$D/t-0/$ROLLED"
check "rolled segment cut inside a batch" R1

# A rolled segment cut exactly at a batch boundary: only R26 sees it.
fresh
read -r pos _ _ < <(batches "$D/t-0/$ROLLED" | tail -n 1) || fail "no batch in $ROLLED"
truncate -s "$pos" "$D/t-0/$ROLLED"
check "rolled segment cut at a batch boundary" R26

# A batch's baseOffset (not covered by the CRC) rewritten back to 0 (F2), or
# forward over offsets that were never there.
fresh
read -r pos base _ < <(batches "$D/t-0/$ROLLED" | sed -n 3p) || fail "fewer than 3 batches in $ROLLED"
set_base "$D/t-0/$ROLLED" "$pos" 0
check "baseOffset rewritten to 0" R10
fresh
set_base "$D/t-0/$ROLLED" "$pos" $((base + 5))
check "baseOffset rewritten forward" R26

# Offsets that overflow int64 (F8): base 2^63-3 with several records.
fresh
set_base "$D/t-0/$ROLLED" "$pos" 9223372036854775805
check "baseOffset overflowing int64" R19

# A flipped byte under the CRC, in a rolled and in the active segment.
fresh
flip_byte "$D/t-0/$ROLLED" $((pos + 70))
check "CRC mismatch in a rolled segment" R4
fresh
# The active segment's last batch (how many it holds depends on how the
# input pipe was read).
read -r apos _ _ < <(batches "$D/t-0/$ACTIVE" | tail -n 1) || fail "no batch in $ACTIVE"
flip_byte "$D/t-0/$ACTIVE" $((apos + 70))
check "CRC mismatch in the active segment" R4

# The active segment cut inside its committed range (F2): shorter than the
# committed end in `state`.
fresh
truncate -s -100 "$D/t-0/$ACTIVE"
check "active segment cut below the committed end" R1

# --- indexes are hints ---------------------------------------------------------------
# A zeroed or random .timeindex / .index: the right start, a warning, exit 0.
for damage in zero random; do
  for idx in timeindex index; do
    fresh
    for s in "${SEGS[@]}"; do
      f="$D/t-0/${s%.log}.$idx"
      size=$(stat -c %s "$f")
      if [[ $damage == zero ]]; then
        head -c "$size" /dev/zero >"$f"
      else
        head -c "$size" /dev/urandom >"$f"
      fi
    done
    run "$C" -C "$D" -t t -e -o s@1700000001000 -c 1
    expect_rc 0 "$damage .$idx: time seek"
    [[ $(cat "$WORK/out") == m1000 ]] || fail "$damage .$idx: -o s@ started at $(cat "$WORK/out"), want m1000"
    run "$C" -C "$D" -t t -e -o 2528 -c 1
    expect_rc 0 "$damage .$idx: offset seek"
    [[ $(cat "$WORK/out") == m2528 ]] || fail "$damage .$idx: -o 2528 started at $(cat "$WORK/out")"
    run "$C" -C "$D" -t t -e
    expect_rc 0 "$damage .$idx: full read"
    cmp -s "$WORK/all" "$WORK/out" || fail "$damage .$idx: full read differs"
  done
done
# The consumer says when an index disagreed with the log.
fresh
f="$D/t-0/${SEGS[0]%.log}.timeindex"
head -c "$(stat -c %s "$f")" /dev/zero >"$f"
run "$C" -C "$D" -t t -e -o s@1700000001000 -c 1
grep -q "timeindex.*R23.*scanning the log" "$WORK/err" || fail "no warning for a zeroed time index: $(cat "$WORK/err")"
echo "ok"
