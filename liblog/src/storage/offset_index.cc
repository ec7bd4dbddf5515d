// Offset index (§7) and the shared indexing rule (IndexBuilder).
#include "storage/offset_index.h"

#include <fmt/format.h>

#include "format/coding.h"

namespace mq {

void EncodeOffsetEntry(std::byte* p, int64_t base, const OffsetIndexEntry& e) {
  coding::PutFixed32(p, static_cast<uint32_t>(e.offset - base));
  coding::PutFixed32(p + 4, e.position);
}

OffsetIndexEntry DecodeOffsetEntry(const std::byte* p, int64_t base) {
  OffsetIndexEntry e;
  e.offset = base + static_cast<int32_t>(coding::GetFixed32(p));
  e.position = coding::GetFixed32(p + 4);
  return e;
}

Result<std::vector<OffsetIndexEntry>> DecodeOffsetIndex(Bytes bytes, int64_t base,
                                                        const std::string& file) {
  constexpr size_t kEntry = format::kOffsetIndexEntrySize;
  if (bytes.size() % kEntry != 0)
    return Status::Corruption(file, bytes.size() / kEntry * kEntry, "R13",
                              fmt::format("size {} is not a multiple of {}", bytes.size(), kEntry));
  std::vector<OffsetIndexEntry> out;
  out.reserve(bytes.size() / kEntry);
  for (size_t i = 0; i < bytes.size(); i += kEntry)
    out.push_back(DecodeOffsetEntry(&bytes[i], base));
  return out;
}

std::optional<OffsetIndexEntry> LookupOffset(Bytes index, int64_t base, int64_t target) {
  size_t n = index.size() / format::kOffsetIndexEntrySize;
  // Largest i with entry(i).offset <= target: binary search for the first >.
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (DecodeOffsetEntry(&index[mid * format::kOffsetIndexEntrySize], base).offset <= target)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return std::nullopt;
  return DecodeOffsetEntry(&index[(lo - 1) * format::kOffsetIndexEntrySize], base);
}

void IndexBuilder::Add(const BatchHeader& h, uint64_t position, std::vector<std::byte>* offset_out,
                       std::vector<std::byte>* time_out) {
  if (h.max_timestamp > max_ts_) {
    max_ts_ = h.max_timestamp;
    max_ts_offset_ = h.last_offset();
  }
  if (position - last_indexed_pos_ <= interval_ || position <= last_indexed_pos_) return;
  // R13 needs strictly increasing offsets; a batch that does not advance
  // (impossible in a valid segment) is simply not indexed.
  if (h.last_offset() <= last_index_offset_) return;
  size_t at = offset_out->size();
  offset_out->resize(at + format::kOffsetIndexEntrySize);
  EncodeOffsetEntry(offset_out->data() + at, base_,
                    {h.last_offset(), static_cast<uint32_t>(position)});
  ++offset_entries_;
  last_indexed_pos_ = position;
  last_index_offset_ = h.last_offset();
  AddTime(max_ts_, max_ts_offset_, time_out);
}

void IndexBuilder::Finish(std::vector<std::byte>* time_out) {
  if (max_ts_offset_ >= 0) AddTime(max_ts_, max_ts_offset_, time_out);
}

void IndexBuilder::AddTime(int64_t ts, int64_t offset, std::vector<std::byte>* time_out) {
  if (ts <= last_time_ts_) return;
  size_t at = time_out->size();
  time_out->resize(at + format::kTimeIndexEntrySize);
  EncodeTimeEntry(time_out->data() + at, base_, {ts, offset});
  ++time_entries_;
  last_time_ts_ = ts;
}

void IndexBuilder::Restore(std::optional<OffsetIndexEntry> last_offset_entry,
                           std::optional<TimeIndexEntry> last_time_entry) {
  last_indexed_pos_ = 0;
  last_index_offset_ = -1;
  last_time_ts_ = -1;
  max_ts_ = -1;
  max_ts_offset_ = -1;
  if (last_offset_entry) {
    last_indexed_pos_ = last_offset_entry->position;
    last_index_offset_ = last_offset_entry->offset;
  }
  if (last_time_entry) {
    last_time_ts_ = last_time_entry->timestamp;
    max_ts_ = last_time_entry->timestamp;
    max_ts_offset_ = last_time_entry->offset;
  }
}

}  // namespace mq
