// CRC-32C (Castagnoli). Two implementations of the same raw register update
// (no pre/post inversion; the public functions add it):
//
//  - hardware: the SSE4.2 crc32 instruction. One crc32q stream is bound by
//    the instruction's 3-cycle latency, so long buffers run three independent
//    streams over three adjacent blocks and merge them: the CRC register of
//    A||B equals shift(crc(A), |B|) ^ crc0(B), where shift() multiplies by
//    x^(8|B|) mod P -- a linear map, applied with four 256-entry tables
//    precomputed for each block length used.
//  - portable: slicing-by-8 tables.
//
// The choice is made once, at first use, with __builtin_cpu_supports.
#include "mq/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mq {
namespace {

constexpr uint32_t kPoly = 0x82F63B78;  // reflected Castagnoli polynomial

using Table = std::array<std::array<uint32_t, 256>, 8>;

constexpr Table MakeSlicingTables() {
  Table t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPoly & (0u - (c & 1)));
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int s = 1; s < 8; ++s) t[s][b] = (t[s - 1][b] >> 8) ^ t[0][t[s - 1][b] & 0xFF];
  }
  return t;
}
constexpr Table kSlicing = MakeSlicingTables();

inline uint32_t Load32LE(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

uint32_t PortableRaw(uint32_t crc, const uint8_t* p, size_t n) {
  const auto& t = kSlicing;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo = crc ^ Load32LE(p);
    uint32_t hi = Load32LE(p + 4);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)

// Tables for shift(crc) = crc * x^(8 * bytes) mod P, byte-sliced.
struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> t;
  explicit ShiftTable(size_t bytes) {
    // The image of each single-bit register value after `bytes` zero bytes.
    std::array<uint32_t, 32> basis;
    for (int i = 0; i < 32; ++i) {
      uint32_t v = 1u << i;
      for (size_t k = 0; k < bytes * 8; ++k) v = (v >> 1) ^ (kPoly & (0u - (v & 1)));
      basis[i] = v;
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) v ^= basis[8 * k + j];
        }
        t[k][b] = v;
      }
    }
  }
  uint32_t operator()(uint32_t crc) const {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
  }
};

constexpr size_t kLong = 4096;  // per stream: 12 KiB per round
constexpr size_t kShort = 256;  // per stream: 768 bytes per round

const ShiftTable& LongShift() {
  static const ShiftTable t(kLong);
  return t;
}
const ShiftTable& ShortShift() {
  static const ShiftTable t(kShort);
  return t;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Three interleaved streams over blocks of `block` bytes each.
__attribute__((target("sse4.2"))) inline uint64_t ThreeWay(uint64_t crc0, const uint8_t* p,
                                                           size_t block, const ShiftTable& shift) {
  uint64_t crc1 = 0, crc2 = 0;
  for (const uint8_t* end = p + block; p < end; p += 8) {
    crc0 = _mm_crc32_u64(crc0, Load64(p));
    crc1 = _mm_crc32_u64(crc1, Load64(p + block));
    crc2 = _mm_crc32_u64(crc2, Load64(p + 2 * block));
  }
  crc0 = shift(static_cast<uint32_t>(crc0)) ^ crc1;
  return shift(static_cast<uint32_t>(crc0)) ^ crc2;
}

__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t crc32, const uint8_t* p, size_t n) {
  uint64_t crc = crc32;
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n)
    crc = _mm_crc32_u8(static_cast<uint32_t>(crc), *p++);
  if (n >= 3 * kLong) {
    const ShiftTable& shift = LongShift();
    for (; n >= 3 * kLong; p += 3 * kLong, n -= 3 * kLong) crc = ThreeWay(crc, p, kLong, shift);
  }
  if (n >= 3 * kShort) {
    const ShiftTable& shift = ShortShift();
    for (; n >= 3 * kShort; p += 3 * kShort, n -= 3 * kShort) crc = ThreeWay(crc, p, kShort, shift);
  }
  for (; n >= 8; p += 8, n -= 8) crc = _mm_crc32_u64(crc, Load64(p));
  for (; n > 0; --n) crc = _mm_crc32_u8(static_cast<uint32_t>(crc), *p++);
  return static_cast<uint32_t>(crc);
}

bool DetectHardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

#else

bool DetectHardware() { return false; }
uint32_t HardwareRaw(uint32_t crc, const uint8_t* p, size_t n) { return PortableRaw(crc, p, n); }

#endif

using RawFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

RawFn Chosen() {
  static const RawFn fn = DetectHardware() ? &HardwareRaw : &PortableRaw;
  return fn;
}

inline const uint8_t* U8(std::span<const std::byte> d) {
  return reinterpret_cast<const uint8_t*>(d.data());
}

// CRC-32C arithmetic for Crc32cCombine (zlib's crc32_combine, with the
// Castagnoli polynomial): a·b modulo P, and x^(8n) modulo P, in the
// reflected bit order of the CRC (bit 31 is x^0). Without branches on the
// operands' bits (they are as good as random: mispredicted).
uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int i = 31; i >= 0; --i) {
    p ^= b & (0u - ((a >> i) & 1));
    b = (b >> 1) ^ (kPoly & (0u - (b & 1)));
  }
  return p;
}

// x^(8n) mod P: shifts a CRC past n zero bytes, one product per hex digit
// of n. The last few lengths asked are kept (a log's batches are often of
// one size).
uint32_t BytesShift(uint64_t n) {
  // kPowers[k][d] = x^(8·d·16^k) mod P.
  static const auto kPowers = [] {
    std::array<std::array<uint32_t, 16>, 16> t{};
    uint32_t base = 1u << 23;  // x^8: one byte
    for (auto& row : t) {
      row[0] = 1u << 31;  // x^0
      for (size_t d = 1; d < 16; ++d) row[d] = MultModP(row[d - 1], base);
      base = MultModP(row[15], base);  // x^(8·16^(k+1))
    }
    return t;
  }();
  struct Entry {
    uint64_t n = ~uint64_t{0};
    uint32_t shift = 0;
  };
  thread_local std::array<Entry, 64> cache;
  Entry& e = cache[(n ^ (n >> 6)) & 63];
  if (e.n == n) return e.shift;
  uint32_t p = 1u << 31;  // x^0
  for (size_t k = 0, m = n; m; m >>= 4, ++k)
    if (m & 15) p = MultModP(kPowers[k][m & 15], p);
  e = {n, p};
  return p;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return MultModP(BytesShift(length_b), crc_a) ^ crc_b;
}

uint32_t Crc32cExtendKnown(uint32_t crc, std::span<const std::byte> b, uint32_t crc_b) {
  constexpr size_t kCombineFrom = 4096;
  return b.size() >= kCombineFrom ? Crc32cCombine(crc, crc_b, b.size()) : Crc32cExtend(crc, b);
}

uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> data) {
  return ~Chosen()(~crc, U8(data), data.size());
}

uint32_t Crc32c(std::span<const std::byte> data) { return Crc32cExtend(0, data); }

uint32_t Crc32cPortable(uint32_t crc, std::span<const std::byte> data) {
  return ~PortableRaw(~crc, U8(data), data.size());
}

bool Crc32cHardware() { return Chosen() == &HardwareRaw && DetectHardware(); }

}  // namespace mq
