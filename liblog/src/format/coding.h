// Byte packing for the on-disk format and the wire protocol: big-endian
// fixed-width integers and Kafka's zigzag varints (format-spec/batch.md
// §4.1). Every big-endian field of a file or a frame is packed and unpacked
// here (batches, indexes, producer snapshots, group files, checkpoints,
// wire frames). Not here: the state file, a struct in native order read
// through its mapping (segment.md §9), and the bytes hashes read (CRC-32C,
// murmur2, the assignment weight), which are no format's fields.
//
// Put* functions write to a buffer the caller has sized (they return the
// byte after the last one written). Get* functions for fixed-width values
// read from a buffer the caller has checked; the varint readers check the
// bounds themselves and report malformed input.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace mq::coding {

// ---- big-endian fixed width ----------------------------------------------

inline void PutFixed16(std::byte* p, uint16_t v) {
  p[0] = std::byte(v >> 8);
  p[1] = std::byte(v);
}
inline void PutFixed32(std::byte* p, uint32_t v) {
  p[0] = std::byte(v >> 24);
  p[1] = std::byte(v >> 16);
  p[2] = std::byte(v >> 8);
  p[3] = std::byte(v);
}
inline void PutFixed64(std::byte* p, uint64_t v) {
  PutFixed32(p, static_cast<uint32_t>(v >> 32));
  PutFixed32(p + 4, static_cast<uint32_t>(v));
}
inline uint16_t GetFixed16(const std::byte* p) {
  return static_cast<uint16_t>((std::to_integer<uint16_t>(p[0]) << 8) |
                               std::to_integer<uint16_t>(p[1]));
}
inline uint32_t GetFixed32(const std::byte* p) {
  return (std::to_integer<uint32_t>(p[0]) << 24) | (std::to_integer<uint32_t>(p[1]) << 16) |
         (std::to_integer<uint32_t>(p[2]) << 8) | std::to_integer<uint32_t>(p[3]);
}
inline uint64_t GetFixed64(const std::byte* p) {
  return (uint64_t{GetFixed32(p)} << 32) | GetFixed32(p + 4);
}

// ---- zigzag varints --------------------------------------------------------
// A varint is the zigzag value (n << 1) ^ (n >> 31) written 7 bits at a time,
// least significant group first, high bit set on every byte but the last.
// int32 takes at most 5 bytes, int64 at most 10.

inline uint32_t ZigZag32(int32_t v) {
  return (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31);
}
inline uint64_t ZigZag64(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int32_t UnZigZag32(uint32_t u) { return static_cast<int32_t>((u >> 1) ^ (~(u & 1) + 1)); }
inline int64_t UnZigZag64(uint64_t u) { return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1)); }

// Bytes the varint of `v` takes.
// (7 payload bits per byte: ceil(significant bits / 7), at least 1.)
inline size_t VarintLength(int32_t v) {
  return (static_cast<size_t>(std::bit_width(ZigZag32(v) | 1u)) + 6) / 7;
}
inline size_t VarlongLength(int64_t v) {
  return (static_cast<size_t>(std::bit_width(ZigZag64(v) | 1u)) + 6) / 7;
}

inline std::byte* PutVarint(std::byte* p, int32_t v) {
  uint32_t u = ZigZag32(v);
  while (u >= 0x80) {
    *p++ = std::byte((u & 0x7F) | 0x80);
    u >>= 7;
  }
  *p++ = std::byte(u);
  return p;
}
inline std::byte* PutVarlong(std::byte* p, int64_t v) {
  uint64_t u = ZigZag64(v);
  while (u >= 0x80) {
    *p++ = std::byte((u & 0x7F) | 0x80);
    u >>= 7;
  }
  *p++ = std::byte(u);
  return p;
}

// Reads a varint at *p (before `end`) and advances *p. Returns false if the
// bytes end first, it runs over 5 bytes, or its value overflows 32 bits.
inline bool GetVarint(const std::byte** p, const std::byte* end, int32_t* out) {
  const std::byte* q = *p;
  if (q < end && std::to_integer<uint32_t>(*q) < 0x80) {  // one byte: the common case
    *out = UnZigZag32(std::to_integer<uint32_t>(*q));
    *p = q + 1;
    return true;
  }
  uint32_t u = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    if (q == end) return false;
    uint32_t b = std::to_integer<uint32_t>(*q++);
    if (shift == 28 && b > 0x0F) return false;  // 5th byte: 4 bits left, no continuation
    u |= (b & 0x7F) << shift;
    if (b < 0x80) {
      *out = UnZigZag32(u);
      *p = q;
      return true;
    }
  }
  return false;
}
inline bool GetVarlong(const std::byte** p, const std::byte* end, int64_t* out) {
  const std::byte* q = *p;
  if (q < end && std::to_integer<uint32_t>(*q) < 0x80) {  // one byte: the common case
    *out = UnZigZag64(std::to_integer<uint64_t>(*q));
    *p = q + 1;
    return true;
  }
  uint64_t u = 0;
  for (int shift = 0; shift <= 63; shift += 7) {
    if (q == end) return false;
    uint64_t b = std::to_integer<uint64_t>(*q++);
    if (shift == 63 && b > 0x01) return false;  // 10th byte: 1 bit left
    u |= (b & 0x7F) << shift;
    if (b < 0x80) {
      *out = UnZigZag64(u);
      *p = q;
      return true;
    }
  }
  return false;
}

}  // namespace mq::coding
