#!/usr/bin/env bash
# mq-topic's verbs through the binary: list and describe (text and --json),
# create without producing, config with sources, alter with units and
# validation (a refused change leaves the .conf byte for byte), partition
# increase (never down, keys' moves counted), delete (refused while a
# producer or a live group member holds the topic, unless --force), a
# follower that stops when its topic is deleted, and mq-produce refusing a
# topic whose partitions= was raised by hand (R80) instead of appending part
# of its input and failing.
source "$(dirname "$0")/lib/common.bash"
T="$BIN/mq-topic"
D="$WORK/data"
"$P" -C "$D" -t seed --create -q </dev/null

# --- create: no message produced, every key, units, an unknown key -------------------
run "$T" -C "$D" create orders --partitions 3 -X retention.ms=7d -X segment.bytes=1MiB -X cleanup.policy=delete
expect_rc 0 "create"
for p in 0 1 2; do [[ -d "$D/orders-$p" ]] || fail "create: no directory orders-$p"; done
[[ -z "$(find "$D"/orders-* -name '*.log')" ]] || fail "create wrote a segment"
grep -qx 'segment.bytes=1048576' "$D/topics/orders.conf" || fail "create: 1MiB not 1048576"
grep -qx 'retention.ms=604800000' "$D/topics/orders.conf" || fail "create: 7d not 604800000"
run "$T" -C "$D" create orders
expect_rc 73 "create of an existing topic"
run "$T" -C "$D" create orders --if-not-exists
expect_rc 0 "create --if-not-exists"
run "$T" -C "$D" create x -X retention.mss=1
expect_rc 64 "create with an unknown key"
grep -q 'unknown key; the keys are partitions, replication.factor' "$WORK/err" || fail "unknown key: $(cat "$WORK/err")"
[[ ! -e "$D/topics/x.conf" && ! -e "$D/x-0" ]] || fail "a refused create left files"
run "$T" -C "$D" create 'bad/name'
expect_rc 64 "create with a bad name"

# --- list and describe: offsets, sizes, segments --------------------------------------
printf 'k%s\tv\n' $(seq 1 30) | "$P" -C "$D" -t orders -q -K $'\t'
run "$T" -C "$D" list --json
expect_rc 0 "list --json"
ends=$(jq -r '.topics[] | select(.topic == "orders") | .partitions | map(.log_end_offset) | add' "$WORK/out")
[[ $ends == 30 ]] || fail "list --json: end offsets add up to $ends, not 30"
size=$(jq -r '.topics[] | select(.topic == "orders") | .partitions[0].size' "$WORK/out")
[[ $size == $(stat -c %s "$D/orders-0/00000000000000000000.log" 2>/dev/null || echo 0) ]] ||
  fail "list --json: size $size is not the segment's"
jq -e '[.topics[].topic] == ["orders", "seed"]' "$WORK/out" >/dev/null || fail "list: topics $(cat "$WORK/out")"
run "$T" -C "$D" list
expect_rc 0 "list"
head -1 "$WORK/out" | grep -q '^TOPIC  *PARTITION  *LOG-START-OFFSET  *LOG-END-OFFSET  *SIZE  *SEGMENTS  *TIER$' ||
  fail "list header: $(head -1 "$WORK/out")"
[[ $(grep -c '^orders ' "$WORK/out") == 3 ]] || fail "list: not 3 rows of orders"
run "$T" -C "$D" describe orders
expect_rc 0 "describe"
grep -q $'^Topic: orders\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: segment.bytes=1048576$' "$WORK/out" ||
  fail "describe: $(head -1 "$WORK/out")"
run "$T" -C "$D" describe nope
expect_rc 66 "describe of a missing topic"

# --- config and alter: sources, units, validation, nothing changed on refusal ---------
run "$T" -C "$D" alter orders -X retention.ms=1d -X retention.bytes=1GiB
expect_rc 0 "alter"
grep -qx 'retention.ms=86400000' "$D/topics/orders.conf" || fail "alter: 1d"
grep -qx 'retention.bytes=1073741824' "$D/topics/orders.conf" || fail "alter: 1GiB"
run "$T" -C "$D" config orders --json
src=$(jq -r '.configs[] | select(.key == "retention.ms") | "\(.value) \(.source)"' "$WORK/out")
[[ $src == "86400000 topic" ]] || fail "config: retention.ms is '$src'"
src=$(jq -r '.configs[] | select(.key == "segment.ms") | "\(.value) \(.source)"' "$WORK/out")
[[ $src == "604800000 default" ]] || fail "config: segment.ms is '$src'"
cp "$D/topics/orders.conf" "$WORK/conf.before"
bad_alter() {  # WHAT RC MESSAGE ARGS...
  local what=$1 want=$2 msg=$3
  shift 3
  run "$T" -C "$D" alter orders "$@"
  expect_rc "$want" "alter: $what"
  grep -q -- "$msg" "$WORK/err" || fail "alter: $what: $(cat "$WORK/err")"
  cmp -s "$WORK/conf.before" "$D/topics/orders.conf" || fail "alter: $what changed the .conf"
}
bad_alter "unknown key" 64 "unknown key; the keys are" -X retention.mss=1
bad_alter "out of range" 64 "outside 61..2147483647" -X segment.bytes=4GiB
bad_alter "bad unit" 64 'unknown unit "x"' -X retention.ms=5x
bad_alter "contradiction" 64 "exceeds replication.factor" -X min.insync.replicas=2
bad_alter "one key twice" 64 "given twice" -X retention.ms=1h -X retention.ms=2h
bad_alter "partitions as a key" 64 "with --partitions" -X partitions=9
bad_alter "one good key and one bad" 64 "bad duration \"soon\"" -X retention.ms=2d -X segment.ms=soon
bad_alter "not KEY=VALUE" 64 "not KEY=VALUE" -X retention.ms
run "$T" -C "$D" alter orders --delete-config retention.ms
expect_rc 0 "alter --delete-config"
grep -qx 'retention.ms=604800000' "$D/topics/orders.conf" || fail "--delete-config: not the default"

# --- partition increase: the keys that move are counted; never down -----------------
cp "$D/topics/orders.conf" "$WORK/conf.before"
bad_alter "fewer partitions" 64 "cannot go down to 2" --partitions 2
run "$T" -C "$D" alter orders --partitions 6 --dry-run
expect_rc 0 "alter --partitions --dry-run"
grep -q 'WARNING: from 3 to 6 partitions, keys map to other partitions: of the 30 distinct keys' "$WORK/err" ||
  fail "no key warning: $(cat "$WORK/err")"
cmp -s "$WORK/conf.before" "$D/topics/orders.conf" || fail "--dry-run changed the .conf"
[[ ! -e "$D/orders-3" ]] || fail "--dry-run made a directory"
moved=$(sed -n 's/.* \([0-9]*\) move to another partition.*/\1/p' "$WORK/err")
keys=$(printf 'k%s ' $(seq 1 30))
# shellcheck disable=SC2086
want=$(paste <($PY "$SRC/tests/cli/lib/kafka_partition.py" 3 $keys) \
             <($PY "$SRC/tests/cli/lib/kafka_partition.py" 6 $keys) | awk '$1 != $2' | wc -l)
[[ $moved == "$want" ]] || fail "key moves: $moved, murmur2 says $want"
run "$T" -C "$D" alter orders --partitions 6
expect_rc 0 "alter --partitions 6"
grep -qx 'partitions=6' "$D/topics/orders.conf" || fail "--partitions 6: the .conf"
printf 'k%s\tw\n' $(seq 1 30) | "$P" -C "$D" -t orders -q -K $'\t' || fail "produce after the increase"
run "$INSPECT" --verify "$D"
expect_rc 0 "verify after the increase"

# --- mq-produce refuses partitions= raised by hand (R80): nothing appended ------------
"$P" -C "$D" -t hand --create -q --partitions 2 </dev/null
sed -i 's/^partitions=2$/partitions=6/' "$D/topics/hand.conf"
run "$P" -C "$D" -t hand -q -K $'\t' < <(printf 'k%s\tv\n' 1 2 3 4 5 6)
expect_rc 65 "produce into a hand-edited partition count"
grep -q 'R80: partitions=6 but 4 of its partition directories are missing (hand-2, hand-3, hand-4, hand-5)' "$WORK/err" ||
  fail "R80 message: $(cat "$WORK/err")"
[[ -z "$(find "$D"/hand-* -name '*.log' -size +0)" ]] || fail "R80: some messages were appended"

# --- delete: refused while held, a follower stops, crash-safe order -------------------
# A producer that has appended one message and waits for more on a FIFO.
mkfifo "$WORK/feed"
"$P" -C "$D" -t orders -q -K $'\t' <"$WORK/feed" &
producer=$!
PIDS+=($producer)
exec 7>"$WORK/feed"
printf 'k1\tv\n' >&7
k1=$($PY "$SRC/tests/cli/lib/kafka_partition.py" 6 k1)
for _ in $(seq 1 100); do lock_held "$D/orders-$k1" && break; sleep 0.1; done
cp "$D/topics/orders.conf" "$WORK/conf.before"
run "$T" -C "$D" delete orders
expect_rc 75 "delete while a producer holds the topic"
grep -q "topic \"orders\" is in use: a producer has partition $k1 open" "$WORK/err" || fail "delete busy: $(cat "$WORK/err")"
cmp -s "$WORK/conf.before" "$D/topics/orders.conf" || fail "a refused delete changed the topic"
exec 7>&-  # the end of its input: it exits
wait "$producer" || fail "the producer exited $?"

"$C" -C "$D" -t orders -G readers -f -q >/dev/null 2>"$WORK/member.err" &
PIDS+=($!)
member=$!
for _ in $(seq 1 100); do [[ -n "$(ls "$D/groups/readers/members" 2>/dev/null)" ]] && break; sleep 0.1; done
run "$T" -C "$D" delete orders
expect_rc 75 "delete while a group member reads the topic"
grep -q 'group "readers" has a live member reading it' "$WORK/err" || fail "delete busy: $(cat "$WORK/err")"
kill "$member"; wait "$member" 2>/dev/null || true

"$C" -C "$D" -t orders -f -q >/dev/null 2>"$WORK/follow.err" &
follower=$!
PIDS+=($follower)
sleep 0.5
run "$T" -C "$D" delete orders
expect_rc 0 "delete"
grep -qx 'Deleted topic orders.' "$WORK/out" || fail "delete: $(cat "$WORK/out")"
set +e
timeout 20 tail --pid="$follower" -f /dev/null
wait "$follower"
frc=$?
set -e
[[ $frc == 66 ]] || fail "the follower of a deleted topic exited $frc, want 66"
grep -q 'topic "orders" was deleted' "$WORK/follow.err" || fail "follower: $(cat "$WORK/follow.err")"
[[ ! -e "$D/topics/orders.conf" ]] || fail "delete left the .conf"
compgen -G "$D/orders-*" >/dev/null && fail "delete left partition directories: $(ls "$D")"
[[ -z "$(ls "$D/deleted")" ]] || fail "delete left deleted/$(ls "$D/deleted")"
run "$T" -C "$D" delete orders
expect_rc 66 "delete of a missing topic"
run "$INSPECT" --verify "$D"
expect_rc 0 "verify after the deletion"

# A follower of a topic deleted and created again between two of its looks
# (it is stopped meanwhile, so no look falls between the two) stops as well:
# the topic of that name is another one (R83: a partition directory of its own).
run "$T" -C "$D" create again --partitions 2
expect_rc 0 "create again"
"$C" -C "$D" -t again -f -q >/dev/null 2>"$WORK/again.err" &
follower=$!
PIDS+=($follower)
# It has opened its partitions (a reader holds each directory open).
for _ in $(seq 1 100); do ls -l "/proc/$follower/fd" 2>/dev/null | grep -q "/again-1" && break; sleep 0.1; done
kill -STOP "$follower"
run "$T" -C "$D" delete again
expect_rc 0 "delete again"
run "$T" -C "$D" create again --partitions 2
expect_rc 0 "create again after the delete"
kill -CONT "$follower"
set +e
timeout 20 tail --pid="$follower" -f /dev/null
kill "$follower" 2>/dev/null
wait "$follower"
frc=$?
set -e
[[ $frc == 66 ]] || fail "the follower of a topic deleted and created again exited $frc, want 66"
grep -q 'topic "again" was deleted and created again' "$WORK/again.err" || fail "follower: $(cat "$WORK/again.err")"

# --- usage: the usage lines are the man page's SYNOPSIS ---------------------------------
MAN="$SRC/man/man1/mq-topic.1"
"$T" --help | sed -n '1,/^$/p' | sed -e '/^$/d' -e 's/^Usage: //' -e 's/^ *//' >"$WORK/usage"
sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$MAN" | sed -e '/^\./d' -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' \
  >"$WORK/synopsis"
[[ -s "$WORK/synopsis" ]] || fail "no SYNOPSIS in $MAN"
diff "$WORK/synopsis" "$WORK/usage" >&2 || fail "usage lines differ from the man page SYNOPSIS"
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$WORK/usage" | sort -u); do
  grep -q -- "$opt" "$MAN" || fail "man page does not document $opt"
done
run "$T" --version
expect_rc 0 "--version"
grep -qE '^mq-topic [0-9]+\.[0-9]+\.[0-9]+$' "$WORK/out" || fail "--version: $(cat "$WORK/out")"
run "$T" -C "$D"
expect_rc 64 "no verb"
run "$T" -C "$D" alter seed
expect_rc 64 "alter without a change"
echo "topic_cli: ok"
