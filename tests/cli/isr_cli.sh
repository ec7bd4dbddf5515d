#!/usr/bin/env bash
# mq-isr: the usage line is the man page's SYNOPSIS; create, describe (text
# and JSON), --check's exit status, clean, unclean and preferred elections
# after a replica root is removed, and errors with their exit codes.
# Roots are made unavailable by renaming them, not by chmod: a test run as
# root reads a mode-000 directory all the same.
source "$(dirname "$0")/lib/common.bash"

ISR="$BIN/mq-isr"
MAN="$SRC/man/man1/mq-isr.1"
cd "$WORK"
CL="$WORK/cl"

# --- help, version, SYNOPSIS --------------------------------------------------
run "$ISR" --help
expect_rc 0 "--help"
run "$ISR" --version
expect_rc 0 "--version"
grep -qE '^mq-isr [0-9]+\.[0-9]+\.[0-9]+$' "$WORK/out" || fail "--version: $(cat "$WORK/out")"
"$ISR" --help | sed -n '1,/^$/p' | sed -e '/^$/d' -e 's/^Usage: //' -e 's/^ *//' >"$WORK/usage"
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$MAN" | sed -e '/^\./d' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' \
  >"$WORK/synopsis"
[[ -s "$WORK/synopsis" ]] || fail "no SYNOPSIS in $MAN"
diff "$WORK/synopsis" "$WORK/usage" >&2 || fail "usage lines differ from the man page SYNOPSIS"
for section in NAME SYNOPSIS DESCRIPTION OPTIONS OUTPUT "EXIT STATUS" EXAMPLES "SEE ALSO"; do
  grep -q "^\.SH \"\{0,1\}$section" "$MAN" || fail "man page lacks $section"
done
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$WORK/usage" | sort -u); do
  grep -q -- "$opt" "$MAN" || fail "man page does not document $opt"
done

# --- usage errors: 64 ------------------------------------------------------------
for args in "" "--cluster $CL" "describe" "--cluster $CL --no-such-flag describe" \
            "--cluster $CL create -t t --partitions 1" \
            "--cluster $CL create -t t --partitions 0 --replicas r0" \
            "--cluster $CL create -t t --partitions 1 --replicas r0 -X replication.factor=3" \
            "--cluster $CL create -t t --partitions 1 --replicas r0 -X cluster=/x" \
            "--cluster $CL create -t t --partitions 1 --replicas r0 -X retention.minutes=1" \
            "--cluster $CL create -t t --partitions 1 --replicas r0 --min-insync-replicas 2" \
            "--cluster $CL create -t bad/name --partitions 1 --replicas r0" \
            "--cluster $CL elect --unclean --preferred" "--cluster $CL elect -p 0" \
            "--cluster $CL --check describe"; do
  # shellcheck disable=SC2086
  run "$ISR" $args
  expect_rc 64 "usage: mq-isr $args"
done
[[ ! -e "$CL" && ! -e r0 ]] || fail "a refused command created files"

# --- missing things: 66 -------------------------------------------------------------
run "$ISR" --cluster "$CL" describe
expect_rc 66 "describe of a missing cluster"
grep -q "$CL" "$WORK/err" || fail "missing cluster not named: $(cat "$WORK/err")"
run "$ISR" --cluster "$CL" --check
expect_rc 66 "--check of a missing cluster"
run "$ISR" --cluster "$CL" create -t orders --partitions 1 --replicas "$WORK/no/such/r0"
expect_rc 66 "a replica root whose parent is missing"
mkdir notmq && echo x >notmq/file
run "$ISR" --cluster "$CL" create -t orders --partitions 1 --replicas notmq
expect_rc 64 "a replica root that is a non-empty plain directory"
grep -q "not an mq data directory" "$WORK/err" || fail "plain dir: $(cat "$WORK/err")"

# --- layout versions: a root at 1 is upgraded, a newer one refused -------------------
mkdir -m 750 r2 r2/topics
printf '# mq data directory (format-spec/layout.md section 1)\nlayout.version=1\n' >r2/meta.properties
mkdir -m 750 future && mkdir -m 750 future/topics
printf 'layout.version=3\n' >future/meta.properties
run "$ISR" --cluster "$CL" create -t orders --partitions 1 --replicas r0,future
expect_rc 65 "a root of a newer layout"
grep -q "newer than this mq reads" "$WORK/err" || fail "newer layout: $(cat "$WORK/err")"

# --- create --------------------------------------------------------------------------
export MQ_CLUSTER="$CL"
run "$ISR" create -t orders --partitions 3 --replicas r0,r1,r2 --min-insync-replicas 2 \
  -X retention.ms=86400000 -X replica.lag.time.max.ms=10000
expect_rc 0 "create"
expect_eq "create output" "Created topic orders." "$(cat "$WORK/out")"
grep -qx "layout.version=2" r2/meta.properties || fail "r2 not upgraded to layout 2"
grep -qx "layout.version=2" r0/meta.properties || fail "new root r0 not at layout 2"
grep -qx "cluster=$CL" r1/topics/orders.conf || fail "r1 conf lacks cluster="
grep -qx "replica.id=1" r1/topics/orders.conf || fail "r1 conf lacks replica.id=1"
grep -qx "retention.ms=86400000" r1/topics/orders.conf || fail "-X retention.ms not applied"
grep -q "replication.factor" r1/topics/orders.conf && fail "replication.factor in a replicated conf"
head -n -1 "$CL/cluster-state" >"$WORK/state.body"
expect_eq "cluster-state" "mq-cluster-state 1
replica 0 $WORK/r0
replica 1 $WORK/r1
replica 2 $WORK/r2
topic orders 3 3 2 10000
partition orders 0 0,1,2 0 0 0 0,1,2
partition orders 1 1,2,0 1 0 0 1,2,0
partition orders 2 2,0,1 2 0 0 2,0,1" "$(cat "$WORK/state.body")"
[[ $(wc -l <"$CL/isr-changes") == 3 ]] || fail "isr-changes: $(cat "$CL/isr-changes")"
# The same again is a no-op; other settings are refused.
run "$ISR" create -t orders --partitions 3 --replicas r0,r1,r2 --min-insync-replicas 2 \
  -X replica.lag.time.max.ms=10000
expect_rc 0 "create again"
run "$ISR" create -t orders --partitions 4 --replicas r0,r1,r2 --min-insync-replicas 2
expect_rc 64 "create with another partition count"

# --- describe --------------------------------------------------------------------------
run "$ISR" describe
expect_rc 0 "describe"
T=$'\t'
expect_eq "describe" "Replica: 0${T}Dir: $WORK/r0
Replica: 1${T}Dir: $WORK/r1
Replica: 2${T}Dir: $WORK/r2
Topic: orders${T}PartitionCount: 3${T}ReplicationFactor: 3${T}Configs: min.insync.replicas=2,replica.lag.time.max.ms=10000
${T}Topic: orders${T}Partition: 0${T}Leader: 0${T}Replicas: 0,1,2${T}Isr: 0,1,2${T}LeaderEpoch: 0${T}PartitionEpoch: 0
${T}${T}Replica: 0${T}LogEnd: 0${T}Lag: 0${T}LagMs: 0${T}LastCaughtUp: -
${T}${T}Replica: 1${T}LogEnd: 0${T}Lag: 0${T}LagMs: unknown${T}LastCaughtUp: unknown
${T}${T}Replica: 2${T}LogEnd: 0${T}Lag: 0${T}LagMs: unknown${T}LastCaughtUp: unknown
${T}Topic: orders${T}Partition: 1${T}Leader: 1${T}Replicas: 1,2,0${T}Isr: 1,2,0${T}LeaderEpoch: 0${T}PartitionEpoch: 0
${T}${T}Replica: 1${T}LogEnd: 0${T}Lag: 0${T}LagMs: 0${T}LastCaughtUp: -
${T}${T}Replica: 2${T}LogEnd: 0${T}Lag: 0${T}LagMs: unknown${T}LastCaughtUp: unknown
${T}${T}Replica: 0${T}LogEnd: 0${T}Lag: 0${T}LagMs: unknown${T}LastCaughtUp: unknown
${T}Topic: orders${T}Partition: 2${T}Leader: 2${T}Replicas: 2,0,1${T}Isr: 2,0,1${T}LeaderEpoch: 0${T}PartitionEpoch: 0
${T}${T}Replica: 2${T}LogEnd: 0${T}Lag: 0${T}LagMs: 0${T}LastCaughtUp: -
${T}${T}Replica: 0${T}LogEnd: 0${T}Lag: 0${T}LagMs: unknown${T}LastCaughtUp: unknown
${T}${T}Replica: 1${T}LogEnd: 0${T}Lag: 0${T}LagMs: unknown${T}LastCaughtUp: unknown" \
  "$(cat "$WORK/out")"
run "$ISR" describe --json
expect_rc 0 "describe --json"
"$PY" - "$WORK/out" <<'EOF' || fail "describe --json"
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
assert [o["type"] for o in objs] == ["replica"] * 3 + ["topic"] + ["partition"] * 3, objs
p = objs[-1]
assert (p["partition"], p["leader"], p["replicas"], p["isr"], p["unavailable"]) == (2, 2, [2, 0, 1], [2, 0, 1], False), p
assert objs[3]["min_insync_replicas"] == 2 and objs[3]["replica_lag_time_max_ms"] == 10000
EOF
run "$ISR" describe --under-replicated --unavailable
expect_rc 0 "describe with filters, nothing matches"
[[ ! -s "$WORK/out" ]] || fail "filters matched: $(cat "$WORK/out")"
run "$ISR" describe -t nope
expect_rc 66 "describe of an unknown topic"
grep -q '"nope"' "$WORK/err" || fail "unknown topic not named: $(cat "$WORK/err")"
run "$ISR" --check
expect_rc 0 "--check, all in sync"
grep -q "^OK: 1 topic(s), 3 partition(s)" "$WORK/out" || fail "--check summary: $(cat "$WORK/out")"

# --- records: 10 on r0's partition 0, 4 of them on r2's (for the unclean warning) ---
# (a follower takes no appends: r2 fetches the first 4)
seq 1 4 | "$BIN/mq-produce" -q -C r0 -t orders -p 0
"$BIN/mq-replicate" -q -C r2 -t orders -p 0 || fail "r2 fetches"
seq 5 10 | "$BIN/mq-produce" -q -C r0 -t orders -p 0

# --- the leader's root is lost: --check, clean election ----------------------------------
mv r0 r0.lost
run "$ISR" --check
expect_rc 1 "--check with an unavailable leader"
grep -q "^orders-0: unavailable" "$WORK/out" || fail "--check list: $(cat "$WORK/out")"
grep -q "^PROBLEMS: 1 of 3" "$WORK/out" || fail "--check summary: $(cat "$WORK/out")"
run "$ISR" describe --unavailable
expect_rc 0 "describe --unavailable"
[[ $(wc -l <"$WORK/out") == 1 ]] && grep -q "Partition: 0${T}Leader: 0.*Unavailable: " "$WORK/out" ||
  fail "describe --unavailable: $(cat "$WORK/out")"
run "$ISR" elect
expect_rc 0 "clean election"
grep -q "^Elected leader 1 for orders-0: leader epoch 1, ISR 1,2 " "$WORK/out" ||
  fail "elect: $(cat "$WORK/out")"
[[ $(wc -l <"$WORK/out") == 1 ]] || fail "elect changed more: $(cat "$WORK/out")"
grep -q " orders 0 leader 0>1 leader_epoch 0>1 partition_epoch 0>1 isr 0,1,2>1,2 reason clean election: leader 0 unavailable" \
  "$CL/isr-changes" || fail "isr-changes: $(cat "$CL/isr-changes")"
run "$ISR" elect
expect_rc 0 "nothing to elect"
grep -q "^Nothing to elect" "$WORK/out" || fail "second elect: $(cat "$WORK/out")"
run "$ISR" --check
expect_rc 1 "--check: orders-0 under-replicated now"
grep -q "^orders-0: under-replicated" "$WORK/out" || fail "--check after elect: $(cat "$WORK/out")"
run "$ISR" describe --at-min-isr
grep -q "Partition: 0" "$WORK/out" || fail "--at-min-isr: $(cat "$WORK/out")"

# --- no ISR member left: refused without --unclean (69), loud with it --------------------
mv r0.lost r0
mv r1 r1.lost
mv r2 r2.lost
run "$ISR" elect -t orders -p 0
expect_rc 69 "no in-sync replica available"
grep -q -- "--unclean" "$WORK/err" || fail "no hint of --unclean: $(cat "$WORK/err")"
grep -q "^orders-0: unavailable,under-replicated" <("$ISR" --check) ||
  fail "--check with no leader"
run "$ISR" elect -t orders -p 0 --unclean
expect_rc 0 "unclean election"
grep -q "WARNING: UNCLEAN leader election for orders-0" "$WORK/err" || fail "no warning: $(cat "$WORK/err")"
grep -q "Its log ends at offset 10; the old leader 1's ended at unknown" "$WORK/err" ||
  fail "warning lacks the offsets: $(cat "$WORK/err")"
grep -q "^Elected leader 0 for orders-0: leader epoch 2, ISR 0 " "$WORK/out" ||
  fail "unclean elect: $(cat "$WORK/out")"
mv r1.lost r1
mv r2.lost r2

# --- preferred election: orders-1 led by 2 with its first replica, 1, in the ISR --------
"$PY" - "$CL/cluster-state" <<'EOF'
import sys
from mqbatch import crc32c
path = sys.argv[1]
lines = open(path).read().splitlines(keepends=True)[:-1]
lines = [l.replace("partition orders 1 1,2,0 1 0 0 1,2,0", "partition orders 1 1,2,0 2 3 3 1,2,0")
         for l in lines]
body = "".join(lines)
open(path, "w").write(body + "crc32c %08x\n" % crc32c(body.encode()))
EOF
run "$ISR" elect --preferred
expect_rc 0 "preferred election"
grep -q "^Elected leader 1 for orders-1: leader epoch 4, ISR 1,2,0 (was leader 2" "$WORK/out" ||
  fail "preferred: $(cat "$WORK/out")"
run "$ISR" elect --preferred
expect_rc 0 "preferred again"
grep -q "^Nothing to elect" "$WORK/out" || fail "preferred again: $(cat "$WORK/out")"

# --- a damaged cluster state: 65 naming the file and the rule ------------------------------
cp "$CL/cluster-state" "$WORK/saved"
flip_byte "$CL/cluster-state" 30
run "$ISR" describe
expect_rc 65 "describe of a damaged state"
grep -q "$CL/cluster-state: position .*: R41: crc32c" "$WORK/err" || fail "damage: $(cat "$WORK/err")"
run "$ISR" elect
expect_rc 65 "elect on a damaged state"
cp "$WORK/saved" "$CL/cluster-state"
run "$ISR" --check
[[ $rc == 0 || $rc == 1 ]] || fail "--check after repair: $rc"
echo "ok"
