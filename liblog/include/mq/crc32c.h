// CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, init and final xor
// 0xFFFFFFFF. "123456789" -> 0xE3069283. Uses the SSE4.2 crc32 instruction
// when the CPU has it (checked once at run time), a portable table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace mq {

// CRC-32C of `data`.
uint32_t Crc32c(std::span<const std::byte> data);
// Continues a CRC: Crc32cExtend(Crc32c(a), b) == Crc32c(a ++ b).
uint32_t Crc32cExtend(uint32_t crc, std::span<const std::byte> data);
// The CRC of a ++ b from the CRCs of its parts, without their bytes:
// Crc32cCombine(Crc32c(a), Crc32c(b), b.size()) == Crc32c(a ++ b)
// (zlib's crc32_combine; O(log b.size())).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);
// Crc32cExtend(crc, b) when Crc32c(b) == crc_b is known: combined for a
// long b, hashed again for a short one (a combination costs up to what
// hashing a few KiB does).
uint32_t Crc32cExtendKnown(uint32_t crc, std::span<const std::byte> b, uint32_t crc_b);
// The portable implementation, for tests and benchmarks.
uint32_t Crc32cPortable(uint32_t crc, std::span<const std::byte> data);
// True when the hardware path is in use.
bool Crc32cHardware();

}  // namespace mq
