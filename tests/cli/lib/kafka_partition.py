"""Kafka's default partitioner for keyed records (format-spec/layout.md
§2.1): toPositive(murmur2(key)) % partitions.

    kafka_partition.py PARTITIONS KEY...   prints each key's partition
"""
import sys


def murmur2(data):
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), unsigned."""
    length = len(data)
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rem, idx = length % 4, length & ~3
    if rem == 3:
        h ^= data[idx + 2] << 16
    if rem >= 2:
        h ^= data[idx + 1] << 8
    if rem >= 1:
        h ^= data[idx]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition(key, partitions):
    return (murmur2(key) & 0x7FFFFFFF) % partitions


if __name__ == "__main__":
    n = int(sys.argv[1])
    for key in sys.argv[2:]:
        print(partition(key.encode(), n))
