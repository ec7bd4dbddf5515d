// Idempotent producer state (format-spec §10, producer.md): sequence checks
// and the `<offset>.snapshot` file.
#include "storage/producer_state.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <vector>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "mq/crc32c.h"
#include "mq/file.h"
#include "storage/segment.h"

namespace mq {
namespace {

using coding::GetFixed16;
using coding::GetFixed32;
using coding::GetFixed64;
using coding::PutFixed16;
using coding::PutFixed32;
using coding::PutFixed64;
using format::kBatchesToRetain;
using format::kMaxSnapshotBytes;
using format::kSnapshotCountOffset;
using format::kSnapshotCrcOffset;
using format::kSnapshotDigits;
using format::kSnapshotEntrySize;
using format::kSnapshotHeaderSize;
using format::kSnapshotsKept;
using format::kSnapshotSuffix;
using format::kSnapshotVersion;
using format::kSnapshotVersionOffset;

// Sequence arithmetic with Kafka's wrap: INT32_MAX is followed by 0.
int32_t AddSequence(int32_t seq, int32_t delta) {
  int64_t sum = static_cast<int64_t>(seq) + delta;
  if (sum > INT32_MAX) sum -= static_cast<int64_t>(INT32_MAX) + 1;
  return static_cast<int32_t>(sum);
}
int32_t SubtractSequence(int32_t seq, int32_t delta) {
  int64_t diff = static_cast<int64_t>(seq) - delta;
  if (diff < 0) diff += static_cast<int64_t>(INT32_MAX) + 1;
  return static_cast<int32_t>(diff);
}
bool InSequence(int32_t last, int32_t next) { return next == AddSequence(last, 1); }

ProducerBatchInfo InfoOf(const BatchHeader& h) {
  ProducerBatchInfo info;
  info.first_sequence = h.base_sequence;
  info.last_sequence = AddSequence(h.base_sequence, h.last_offset_delta);
  info.last_offset = h.base_offset + h.last_offset_delta;
  info.offset_delta = h.last_offset_delta;
  info.timestamp = h.max_timestamp;
  return info;
}

// Listed (ListSegments) and parsed (NumberedFileOffset) like a segment's
// name: 20 digits, then the suffix (segment.h).
static_assert(kSnapshotDigits == format::kSegmentNameDigits);
std::string SnapshotName(int64_t offset) {
  return fmt::format("{:0{}}{}", offset, kSnapshotDigits, kSnapshotSuffix);
}

// Snapshot offsets present in `dir_fd`, ascending (the partition's one
// directory listing, ListSegments).
Result<std::vector<int64_t>> ListSnapshots(int dir_fd, FileSystem* fs) {
  std::vector<int64_t> offsets;
  auto segments = ListSegments(dir_fd, fs, &offsets);
  if (!segments) return segments.error();
  return offsets;
}

}  // namespace

Result<std::optional<AppendResult>> ProducerStateTable::CheckAppend(
    const BatchHeader& header) const {
  if (!header.has_producer_id()) return std::optional<AppendResult>();
  if (header.is_control()) return std::optional<AppendResult>();
  if (header.producer_epoch < 0 || header.base_sequence < 0) {
    return Status(Code::kInvalidArgument,
                  fmt::format("R7 producer: producer {} sends epoch {} and base sequence {}",
                              header.producer_id, header.producer_epoch, header.base_sequence));
  }
  auto it = entries_.find(header.producer_id);
  if (it == entries_.end()) return std::optional<AppendResult>();  // first batch: any sequence
  const ProducerEntry& entry = it->second;
  const int32_t first = header.base_sequence;
  const int32_t last = AddSequence(first, header.last_offset_delta);

  if (header.producer_epoch < entry.epoch) {
    return Status(Code::kOutOfOrder,
                  fmt::format("producer {}: epoch {} is older than the current epoch {}",
                              header.producer_id, header.producer_epoch, entry.epoch));
  }
  if (header.producer_epoch > entry.epoch) {
    // A new epoch starts at sequence 0, unless no epoch was known.
    if (first != 0 && entry.epoch >= 0) {
      return Status(Code::kOutOfOrder,
                    fmt::format("producer {}: new epoch {} starts at sequence {}, not 0",
                                header.producer_id, header.producer_epoch, first));
    }
    return std::optional<AppendResult>();
  }
  for (const ProducerBatchInfo& b : entry.batches) {
    if (b.first_sequence == first && b.last_sequence == last) {
      AppendResult dup;
      dup.base_offset = b.last_offset - b.offset_delta;
      dup.last_offset = b.last_offset;
      dup.batches = 1;
      dup.duplicate = true;
      return std::optional<AppendResult>(dup);
    }
  }
  if (entry.batches.empty()) {
    if (first != 0) {
      return Status(Code::kOutOfOrder,
                    fmt::format("producer {}: epoch {} has no batch yet, sequence {} is not 0",
                                header.producer_id, header.producer_epoch, first));
    }
    return std::optional<AppendResult>();
  }
  const int32_t expected_after = entry.batches.back().last_sequence;
  if (!InSequence(expected_after, first)) {
    return Status(
        Code::kOutOfOrder,
        fmt::format("producer {}: out of order sequence {} (expected {}: {})", header.producer_id,
                    first, AddSequence(expected_after, 1),
                    first > AddSequence(expected_after, 1) ? "a gap" : "already past it"));
  }
  return std::optional<AppendResult>();
}

void ProducerStateTable::Update(const BatchHeader& header) {
  if (!header.has_producer_id()) return;
  ProducerEntry& entry = entries_[header.producer_id];
  if (header.producer_epoch != entry.epoch) {
    entry.batches.clear();
    entry.epoch = header.producer_epoch;
  }
  // A control batch (transaction marker) carries no sequence.
  if (header.is_control() || header.base_sequence < 0) return;
  entry.batches.push_back(InfoOf(header));
  while (entry.batches.size() > kBatchesToRetain) entry.batches.pop_front();
}

std::optional<int32_t> ProducerStateTable::LastSequence(int64_t producer_id) const {
  auto it = entries_.find(producer_id);
  if (it == entries_.end() || it->second.batches.empty()) return std::nullopt;
  return it->second.batches.back().last_sequence;
}

// Parses a snapshot into `out`; a kCorruption error when it breaks its
// layout or CRC (the caller then ignores it).
static Status DecodeSnapshot(std::span<const std::byte> data, const std::string& name,
                             std::unordered_map<int64_t, ProducerEntry>* out) {
  if (data.size() < kSnapshotHeaderSize) {
    return Status::Corruption(name, 0, "R15", "producer snapshot shorter than its header");
  }
  int16_t version = static_cast<int16_t>(GetFixed16(data.data() + kSnapshotVersionOffset));
  if (version != kSnapshotVersion) {
    return Status::Corruption(name, kSnapshotVersionOffset, "R15",
                              fmt::format("producer snapshot version {}", version));
  }
  uint32_t crc = GetFixed32(data.data() + kSnapshotCrcOffset);
  if (crc != Crc32c(data.subspan(kSnapshotCountOffset))) {
    return Status::Corruption(name, kSnapshotCrcOffset, "R15", "producer snapshot CRC mismatch");
  }
  int32_t count = static_cast<int32_t>(GetFixed32(data.data() + kSnapshotCountOffset));
  if (count < 0 ||
      static_cast<uint64_t>(count) * kSnapshotEntrySize != data.size() - kSnapshotHeaderSize) {
    return Status::Corruption(
        name, kSnapshotCountOffset, "R15",
        fmt::format("producer snapshot count {} does not match {} bytes", count, data.size()));
  }
  out->clear();
  const std::byte* p = data.data() + kSnapshotHeaderSize;
  for (int32_t i = 0; i < count; ++i, p += kSnapshotEntrySize) {
    int64_t pid = static_cast<int64_t>(GetFixed64(p));
    int16_t epoch = static_cast<int16_t>(GetFixed16(p + 8));
    ProducerBatchInfo b;
    b.last_sequence = static_cast<int32_t>(GetFixed32(p + 10));
    b.last_offset = static_cast<int64_t>(GetFixed64(p + 14));
    b.offset_delta = static_cast<int32_t>(GetFixed32(p + 22));
    b.timestamp = static_cast<int64_t>(GetFixed64(p + 26));
    // p + 34: coordinatorEpoch, p + 38: currentTxnFirstOffset (unused by mq).
    if (pid < 0 || b.last_sequence < -1 || b.offset_delta < 0) {
      return Status::Corruption(name, kSnapshotHeaderSize + i * kSnapshotEntrySize, "R15",
                                "producer snapshot entry with a negative id, sequence or delta");
    }
    ProducerEntry& e = (*out)[pid];
    if (e.epoch != epoch) {
      e.batches.clear();
      e.epoch = epoch;
    }
    if (b.last_sequence < 0) continue;  // epoch known, no batch yet
    b.first_sequence = SubtractSequence(b.last_sequence, b.offset_delta);
    e.batches.push_back(b);
    while (e.batches.size() > kBatchesToRetain) e.batches.pop_front();
  }
  return Status::Ok();
}

Result<int64_t> ProducerStateTable::LoadSnapshot(int dir_fd, int64_t log_end,
                                                 const std::vector<int64_t>* listed,
                                                 FileSystem* fs) {
  entries_.clear();
  auto offsets = listed ? Result<std::vector<int64_t>>(*listed) : ListSnapshots(dir_fd, fs);
  if (!offsets) return offsets.error();
  DropSnapshotsPast(dir_fd, log_end, *offsets, fs);
  for (auto it = offsets->rbegin(); it != offsets->rend(); ++it) {
    if (*it > log_end) continue;
    std::string name = SnapshotName(*it);
    auto data = ReadFileAt(dir_fd, name, kMaxSnapshotBytes, fs);
    // A symlink, FIFO or device in its place is refused like any data
    // file; otherwise unreadable: try an older one, or replay everything.
    if (!data && data.error().code() == Code::kPermission) return data.error();
    if (!data) continue;
    std::unordered_map<int64_t, ProducerEntry> loaded;
    if (!DecodeSnapshot(*data, name, &loaded).ok()) continue;
    entries_ = std::move(loaded);
    return *it;
  }
  return int64_t{0};
}

int64_t ProducerStateTable::DropSnapshotsPast(int dir_fd, int64_t log_end,
                                              const std::vector<int64_t>& listed, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  // A snapshot past the log end describes records that are gone (the log
  // was truncated): it must never be read once the log grows past it again.
  // Best effort: one left behind is removed by the next open, and never
  // read while the log end is below it.
  int64_t newest = -1;
  for (int64_t off : listed) {
    if (off > log_end)
      (void)fs->Unlink(dir_fd, SnapshotName(off));
    else
      newest = off;
  }
  return newest;
}

Status ProducerStateTable::WriteSnapshot(int dir_fd, int64_t next_offset, bool sync,
                                         FileSystem* fs) const {
  if (fs == nullptr) fs = FileSystem::Default();
  // One entry per cached batch, oldest first: a Kafka reader keeps the last
  // entry of each producer id, mq keeps all of them (up to 5).
  size_t count = 0;
  for (const auto& [pid, e] : entries_) count += std::max<size_t>(e.batches.size(), 1);
  if (count > static_cast<size_t>(INT32_MAX) ||
      kSnapshotHeaderSize + count * kSnapshotEntrySize > kMaxSnapshotBytes) {
    return Status(Code::kTooLarge, fmt::format("producer snapshot: {} entries", count));
  }
  std::vector<std::byte> data(kSnapshotHeaderSize + count * kSnapshotEntrySize);
  PutFixed16(data.data() + kSnapshotVersionOffset, static_cast<uint16_t>(kSnapshotVersion));
  PutFixed32(data.data() + kSnapshotCountOffset, static_cast<uint32_t>(count));
  // Sorted by producer id so the same state always gives the same bytes.
  std::vector<int64_t> ids;
  ids.reserve(entries_.size());
  for (const auto& kv : entries_) ids.push_back(kv.first);
  std::sort(ids.begin(), ids.end());
  std::byte* p = data.data() + kSnapshotHeaderSize;
  auto put = [&p](int64_t pid, int16_t epoch, const ProducerBatchInfo& b) {
    PutFixed64(p, static_cast<uint64_t>(pid));
    PutFixed16(p + 8, static_cast<uint16_t>(epoch));
    PutFixed32(p + 10, static_cast<uint32_t>(b.last_sequence));
    PutFixed64(p + 14, static_cast<uint64_t>(b.last_offset));
    PutFixed32(p + 22, static_cast<uint32_t>(b.offset_delta));
    PutFixed64(p + 26, static_cast<uint64_t>(b.timestamp));
    PutFixed32(p + 34, static_cast<uint32_t>(-1));  // coordinatorEpoch: no transactions in mq
    PutFixed64(p + 38, static_cast<uint64_t>(-1));  // currentTxnFirstOffset: none
    p += kSnapshotEntrySize;
  };
  for (int64_t pid : ids) {
    const ProducerEntry& e = entries_.at(pid);
    if (e.batches.empty()) {
      // Epoch known, no batch: Kafka writes lastSequence -1; mq writes the
      // same but reads it back as "no batch" (see DecodeSnapshot).
      ProducerBatchInfo none;
      none.last_sequence = -1;
      none.last_offset = -1;
      none.timestamp = -1;
      put(pid, e.epoch, none);
      continue;
    }
    for (const ProducerBatchInfo& b : e.batches) put(pid, e.epoch, b);
  }
  uint32_t crc = Crc32c(std::span<const std::byte>(data).subspan(kSnapshotCountOffset));
  PutFixed32(data.data() + kSnapshotCrcOffset, crc);
  MQ_RETURN_IF_ERROR(WriteFileAtomic(dir_fd, SnapshotName(next_offset), data, fs, {}, sync));

  auto offsets = ListSnapshots(dir_fd, fs);
  if (!offsets) return Status::Ok();  // written; pruning is best effort
  size_t older = 0;
  for (auto it = offsets->rbegin(); it != offsets->rend(); ++it) {
    if (*it > next_offset) continue;
    if (++older > kSnapshotsKept) (void)fs->Unlink(dir_fd, SnapshotName(*it));
  }
  return Status::Ok();
}

}  // namespace mq
