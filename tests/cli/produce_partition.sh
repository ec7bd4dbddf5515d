#!/usr/bin/env bash
# mq-produce partitioning: keyed messages land where Kafka's default
# partitioner puts them (murmur2 values published in Kafka's UtilsTest),
# -p pins a partition, unkeyed messages spread round robin per batch.
source "$(dirname "$0")/lib/common.bash"
T="$WORK"
D="$T/data"

# Kafka's org.apache.kafka.common.utils.UtilsTest#testMurmur2: key -> murmur2.
cat >"$T/kafka" <<'V'
21 -973932308
foobar -790332482
a-little-bit-long-string -985981536
a-little-bit-longer-string -1486304829
lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8 -58897971
abc 479470107
V
for n in 1 2 3 7 13 100; do
  "$P" -C "$D" -t "k$n" --create --partitions "$n" -q </dev/null
  # partition = toPositive(murmur2(key)) % n, toPositive(h) = h & 0x7fffffff
  while read -r key hash; do
    echo "$key $(( (hash & 0x7fffffff) % n ))"
  done <"$T/kafka" >"$T/want"
  awk '{print $1 "\tvalue of " $1}' "$T/kafka" |
    "$P" -C "$D" -t "k$n" -K '\t' -q --print-offsets >"$T/offsets"
  paste -d' ' <(cut -d' ' -f1 "$T/kafka") <(cut -d' ' -f1 "$T/offsets") >"$T/got"
  diff -u "$T/want" "$T/got" || fail "key -> partition differs from Kafka with $n partitions"
  # And the consumer finds each key there.
  while read -r key part; do
    "$C" -C "$D" -t "k$n" -p "$part" -e -q -f '%k\n' | grep -qx -- "$key" ||
      fail "key $key not in partition $part of k$n"
  done <"$T/want"
done
echo "ok: keys partitioned as Kafka does"

# -p N: everything in N.
"$P" -C "$D" -t pinned --create --partitions 4 -q </dev/null
seq 1 1000 | "$P" -C "$D" -t pinned -p 2 -q --print-offsets >"$T/pinned"
[ "$(cut -d' ' -f1 "$T/pinned" | sort -u)" = 2 ] || fail "-p 2 wrote elsewhere"
[ "$(cut -d' ' -f2 "$T/pinned" | tr '\n' ' ')" = "$(seq 0 999 | tr '\n' ' ')" ] ||
  fail "-p 2: offsets not 0..999 in input order"

# Unkeyed: one batch per partition in turn; all partitions get data and
# each message is printed once, offsets per partition gap-free.
"$P" -C "$D" -t spread --create --partitions 4 -q </dev/null
seq 1 20000 | "$P" -C "$D" -t spread --batch-bytes 1024 -q --print-offsets >"$T/spread"
[ "$(wc -l <"$T/spread")" = 20000 ] || fail "unkeyed: not one offset line per message"
[ "$(cut -d' ' -f1 "$T/spread" | sort -u | wc -l)" = 4 ] || fail "unkeyed: not spread"
for p in 0 1 2 3; do
  n=$(awk -v p=$p '$1==p' "$T/spread" | wc -l)
  [ "$(awk -v p=$p '$1==p {print $2}' "$T/spread" | tr '\n' ' ')" = \
    "$(seq 0 $((n - 1)) | tr '\n' ' ')" ] || fail "unkeyed: partition $p offsets not gap-free"
done

# With a producer id, unkeyed message i goes to partition i mod n.
seq 0 99 | "$P" -C "$D" -t spread --producer-id spread-1 -q --print-offsets >"$T/byindex"
awk '{print $1}' "$T/byindex" >"$T/parts"
seq 0 99 | awk '{print $1 % 4}' | diff -u - "$T/parts" || fail "producer id: not index mod n"
echo "ok: produce_partition"
