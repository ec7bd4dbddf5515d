// Time index (§8).
#include <fmt/format.h>

#include "format/coding.h"
#include "storage/offset_index.h"

namespace mq {

void EncodeTimeEntry(std::byte* p, int64_t base, const TimeIndexEntry& e) {
  coding::PutFixed64(p, static_cast<uint64_t>(e.timestamp));
  coding::PutFixed32(p + 8, static_cast<uint32_t>(e.offset - base));
}

TimeIndexEntry DecodeTimeEntry(const std::byte* p, int64_t base) {
  TimeIndexEntry e;
  e.timestamp = static_cast<int64_t>(coding::GetFixed64(p));
  e.offset = base + static_cast<int32_t>(coding::GetFixed32(p + 8));
  return e;
}

Result<std::vector<TimeIndexEntry>> DecodeTimeIndex(Bytes bytes, int64_t base,
                                                    const std::string& file) {
  constexpr size_t kEntry = format::kTimeIndexEntrySize;
  if (bytes.size() % kEntry != 0)
    return Status::Corruption(file, bytes.size() / kEntry * kEntry, "R14",
                              fmt::format("size {} is not a multiple of {}", bytes.size(), kEntry));
  std::vector<TimeIndexEntry> out;
  out.reserve(bytes.size() / kEntry);
  for (size_t i = 0; i < bytes.size(); i += kEntry) out.push_back(DecodeTimeEntry(&bytes[i], base));
  return out;
}

size_t LowerBoundTime(Bytes index, int64_t base, int64_t ts) {
  size_t lo = 0, hi = index.size() / format::kTimeIndexEntrySize;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (DecodeTimeEntry(&index[mid * format::kTimeIndexEntrySize], base).timestamp < ts)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace mq
