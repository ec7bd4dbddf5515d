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
// The portable implementation, for tests and benchmarks.
uint32_t Crc32cPortable(uint32_t crc, std::span<const std::byte> data);
// True when the hardware path is in use.
bool Crc32cHardware();

}  // namespace mq
