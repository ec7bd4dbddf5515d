// Offset and time index entries (format-spec/segment.md §7, §8) and the
// writer-side rule that decides when a batch gets entries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/format.h"
#include "mq/batch.h"
#include "mq/segment.h"
#include "mq/status.h"

namespace mq {

// §7: int32 relativeOffset, int32 position (big-endian).
void EncodeOffsetEntry(std::byte* p, int64_t base, const OffsetIndexEntry& e);
OffsetIndexEntry DecodeOffsetEntry(const std::byte* p, int64_t base);
// §8: int64 timestamp, int32 relativeOffset (big-endian).
void EncodeTimeEntry(std::byte* p, int64_t base, const TimeIndexEntry& e);
TimeIndexEntry DecodeTimeEntry(const std::byte* p, int64_t base);

// Decodes a whole index file; R13/R14 size rule only (a multiple of the
// entry size). Errors name `file`.
Result<std::vector<OffsetIndexEntry>> DecodeOffsetIndex(Bytes bytes, int64_t base,
                                                        const std::string& file);
Result<std::vector<TimeIndexEntry>> DecodeTimeIndex(Bytes bytes, int64_t base,
                                                    const std::string& file);

// The entry with the largest offset <= `target` (entries assumed sorted, as
// R13 requires; a reader verifies the batch it points at before trusting it).
std::optional<OffsetIndexEntry> LookupOffset(Bytes index, int64_t base, int64_t target);
// Index of the first entry whose timestamp is >= `ts`, or the entry count.
size_t LowerBoundTime(Bytes index, int64_t base, int64_t ts);

// Which batches get index entries, as Kafka's LogSegment: a batch starting
// more than `interval` bytes after the last indexed batch (initially
// position 0) gets an offset entry (its last offset, its position) and, if
// the largest timestamp so far grew past the last time entry, a time entry.
// Rolling a segment adds a final time entry (Finish).
class IndexBuilder {
 public:
  IndexBuilder() = default;
  IndexBuilder(int64_t base, uint32_t interval) : base_(base), interval_(interval) {}

  // Accounts for the batch `h` starting at `position`, appending any new
  // entries' bytes to `offset_out` / `time_out`.
  void Add(const BatchHeader& h, uint64_t position, std::vector<std::byte>* offset_out,
           std::vector<std::byte>* time_out);
  // The final time entry of a rolled segment, if it adds information.
  void Finish(std::vector<std::byte>* time_out);

  // Restores the state from existing entries (the last of each file) and
  // then Add() for the batches after the last indexed one.
  void Restore(std::optional<OffsetIndexEntry> last_offset_entry,
               std::optional<TimeIndexEntry> last_time_entry);

  int64_t base() const { return base_; }
  uint32_t interval() const { return interval_; }
  uint64_t offset_entries() const { return offset_entries_; }
  uint64_t time_entries() const { return time_entries_; }
  void set_counts(uint64_t offset_entries, uint64_t time_entries) {
    offset_entries_ = offset_entries;
    time_entries_ = time_entries;
  }
  uint64_t last_indexed_position() const { return last_indexed_pos_; }
  int64_t max_timestamp() const { return max_ts_; }

 private:
  void AddTime(int64_t ts, int64_t offset, std::vector<std::byte>* time_out);

  int64_t base_ = 0;
  uint32_t interval_ = format::kDefaultIndexIntervalBytes;
  uint64_t last_indexed_pos_ = 0;
  int64_t last_index_offset_ = -1;
  int64_t last_time_ts_ = -1;  // Kafka's empty time index reads as (-1, base)
  int64_t max_ts_ = -1;
  int64_t max_ts_offset_ = -1;
  uint64_t offset_entries_ = 0;
  uint64_t time_entries_ = 0;
};

}  // namespace mq
