// Kafka's key partitioner: the 32-bit murmur2 of Kafka's Java client
// (org.apache.kafka.common.utils.Utils.murmur2), so a keyed record lands in
// the same partition as it would in Kafka.

#include <cstddef>
#include <cstdint>
#include <span>

#include "mq/topic.h"

namespace mq {
namespace {

constexpr uint32_t kSeed = 0x9747b28c;
constexpr uint32_t kMultiplier = 0x5bd1e995;
constexpr int kShift = 24;

uint32_t Byte(std::span<const std::byte> data, size_t i) {
  return static_cast<uint32_t>(std::to_integer<uint8_t>(data[i]));
}

}  // namespace

// Java does the same arithmetic on a signed int: two's complement wrap-around
// and `>>>` are exactly unsigned 32-bit multiplication and shifts.
int32_t Murmur2(std::span<const std::byte> key) {
  const size_t length = key.size();
  uint32_t h = kSeed ^ static_cast<uint32_t>(length);
  const size_t whole = length & ~size_t{3};
  for (size_t i = 0; i < whole; i += 4) {
    // Little-endian words, as Kafka reads them.
    uint32_t k =
        Byte(key, i) | Byte(key, i + 1) << 8 | Byte(key, i + 2) << 16 | Byte(key, i + 3) << 24;
    k *= kMultiplier;
    k ^= k >> kShift;
    k *= kMultiplier;
    h *= kMultiplier;
    h ^= k;
  }
  switch (length & 3) {
    case 3:
      h ^= Byte(key, whole + 2) << 16;
      [[fallthrough]];
    case 2:
      h ^= Byte(key, whole + 1) << 8;
      [[fallthrough]];
    case 1:
      h ^= Byte(key, whole);
      h *= kMultiplier;
      break;
    default:
      break;
  }
  h ^= h >> 13;
  h *= kMultiplier;
  h ^= h >> 15;
  return static_cast<int32_t>(h);
}

int32_t PartitionForKey(std::span<const std::byte> key, int32_t partitions) {
  if (partitions < 1) return -1;
  // Kafka's Utils.toPositive: clear the sign bit (not abs(), which maps
  // INT32_MIN to itself).
  const int32_t positive = Murmur2(key) & 0x7fffffff;
  return positive % partitions;
}

}  // namespace mq
