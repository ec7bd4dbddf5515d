// The 12-byte header the member files share (group.md: the lease, R65, and
// the heartbeat, R69): magic, version, a reserved field and the CRC-32C of
// every byte after the header. One check for both.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include <fmt/format.h>

#include "format/coding.h"
#include "mq/crc32c.h"
#include "mq/status.h"

namespace mq::member_file {

constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kReservedAt = 6;
constexpr size_t kCrcAt = 8;
constexpr size_t kCrcFrom = 12;

// `b` is a whole file of `size` bytes with `magic`, at most `version`, and
// a CRC that matches; anything else is `rule`'s corruption (kUnsupported for
// a later version).
inline Status CheckHeader(std::span<const std::byte> b, const std::string& file, const char* rule,
                          size_t size, uint32_t magic, int16_t version) {
  using namespace coding;
  if (b.size() != size)
    return Status::Corruption(file, std::min<uint64_t>(b.size(), size), rule,
                              fmt::format("{} bytes, not {}", b.size(), size));
  const std::byte* h = b.data();
  if (uint32_t m = GetFixed32(h + kMagicAt); m != magic)
    return Status::Corruption(file, kMagicAt, rule, fmt::format("bad magic {:#010x}", m));
  const auto v = static_cast<int16_t>(GetFixed16(h + kVersionAt));
  if (v > version)
    return Status(Code::kUnsupported,
                  fmt::format("{}: position {}: {}: unsupported version {} (this mq reads {})",
                              file, kVersionAt, rule, v, version));
  if (v < 1) return Status::Corruption(file, kVersionAt, rule, fmt::format("bad version {}", v));
  if (uint16_t reserved = GetFixed16(h + kReservedAt); reserved != 0)
    return Status::Corruption(file, kReservedAt, rule,
                              fmt::format("reserved field {} is not 0", reserved));
  const uint32_t stored = GetFixed32(h + kCrcAt);
  const uint32_t computed = Crc32c(b.subspan(kCrcFrom));
  if (stored != computed)
    return Status::Corruption(
        file, kCrcAt, rule,
        fmt::format("crc {:#010x} stored, {:#010x} computed", stored, computed));
  return Status::Ok();
}

}  // namespace mq::member_file
