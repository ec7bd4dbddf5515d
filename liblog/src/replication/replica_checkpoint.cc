// Replica checkpoints (format-spec/replication.md §16, R35-R39): the
// leader-epoch cache and the high-watermark checkpoint of a partition.
#include "mq/replica_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "io/checkpoint_file.h"
#include "mq/crc32c.h"
#include "mq/segment.h"
#include "mq/topic.h"
#include "storage/recovery.h"
#include "storage/segment.h"

namespace mq {

const char* const kLeaderEpochCheckpointFile = format::kLeaderEpochCheckpointName;
const char* const kReplicationOffsetCheckpointFile = format::kReplicationOffsetCheckpointName;
const char* const kLeaderEpochFenceFile = format::kLeaderEpochFenceName;
const char* const kHighWatermarkFile = format::kHighWatermarkName;

namespace {

// R36 for an entry after `prev` (nullptr: the first).
std::string R36Breach(const EpochEntry* prev, const EpochEntry& e) {
  if (prev == nullptr) return {};
  if (e.epoch <= prev->epoch)
    return fmt::format("epoch {} is not above the epoch before it, {}", e.epoch, prev->epoch);
  if (e.start_offset <= prev->start_offset)
    return fmt::format("start offset {} of epoch {} is not above the start offset {} of epoch {}",
                       e.start_offset, e.epoch, prev->start_offset, prev->epoch);
  return {};
}

}  // namespace

Result<LeaderEpochCache> LeaderEpochCache::FromEntries(std::vector<EpochEntry> entries) {
  for (size_t i = 0; i < entries.size(); ++i) {
    const EpochEntry& e = entries[i];
    if (e.epoch < 0 || e.start_offset < 0)
      return Status(Code::kInvalidArgument,
                    fmt::format("epoch entry ({}, {}): epoch and start offset must be >= 0 (R36)",
                                e.epoch, e.start_offset));
    std::string breach = R36Breach(i == 0 ? nullptr : &entries[i - 1], e);
    if (!breach.empty()) return Status(Code::kInvalidArgument, breach + " (R36)");
  }
  LeaderEpochCache c;
  c.entries_ = std::move(entries);
  return c;
}

std::optional<EpochEntry> LeaderEpochCache::latest() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.back();
}

Status LeaderEpochCache::Assign(int32_t epoch, int64_t start_offset) {
  if (epoch < 0 || start_offset < 0)
    return Status(
        Code::kInvalidArgument,
        fmt::format("leader epoch {} at offset {}: both must be >= 0", epoch, start_offset));
  if (entries_.empty()) {
    entries_.push_back({epoch, start_offset});
    return Status::Ok();
  }
  EpochEntry& last = entries_.back();
  if (epoch == last.epoch) return Status::Ok();
  if (epoch < last.epoch)
    return Status(
        Code::kInvalidArgument,
        fmt::format("leader epoch {} is below the latest epoch {} (R36)", epoch, last.epoch));
  if (start_offset < last.start_offset)
    return Status(Code::kInvalidArgument,
                  fmt::format("leader epoch {} at offset {}: the latest epoch {} starts at {}, "
                              "later (R36)",
                              epoch, start_offset, last.epoch, last.start_offset));
  if (start_offset == last.start_offset) {
    last.epoch = epoch;  // the latest epoch wrote nothing
    return Status::Ok();
  }
  entries_.push_back({epoch, start_offset});
  return Status::Ok();
}

EpochEndOffset LeaderEpochCache::EndOffsetFor(int32_t epoch, int64_t log_end_offset) const {
  if (epoch == format::kUndefinedEpoch || entries_.empty()) return {};
  if (epoch == entries_.back().epoch) return {epoch, log_end_offset};
  // The first entry whose epoch is above the one asked for.
  auto higher = std::upper_bound(entries_.begin(), entries_.end(), epoch,
                                 [](int32_t e, const EpochEntry& x) { return e < x.epoch; });
  if (higher == entries_.end()) return {};  // above the latest epoch
  if (higher == entries_.begin()) return {epoch, higher->start_offset};
  return {std::prev(higher)->epoch, higher->start_offset};
}

void LeaderEpochCache::TruncateFromEnd(int64_t end_offset) {
  if (end_offset < 0) return;
  while (!entries_.empty() && entries_.back().start_offset >= end_offset) entries_.pop_back();
}

void LeaderEpochCache::TruncateFromStart(int64_t start_offset) {
  auto keep = std::find_if(entries_.begin(), entries_.end(),
                           [&](const EpochEntry& e) { return e.start_offset > start_offset; });
  if (keep == entries_.begin()) return;
  const int32_t epoch = std::prev(keep)->epoch;
  entries_.erase(entries_.begin(), std::prev(keep));
  entries_.front() = {epoch, start_offset};
}

namespace {

// The entry lines of §16.2.
std::vector<std::string> EpochLines(const std::vector<EpochEntry>& entries) {
  std::vector<std::string> lines;
  lines.reserve(entries.size());
  for (const auto& e : entries) lines.push_back(fmt::format("{} {}", e.epoch, e.start_offset));
  return lines;
}

// The entry line of §16.3.
std::string HighWatermarkLine(std::string_view topic, int32_t partition, int64_t offset) {
  return fmt::format("{} {} {}", topic, partition, offset);
}

}  // namespace

std::string LeaderEpochCache::Encode() const { return FormatCheckpoint(EpochLines(entries_)); }

Result<LeaderEpochCache> DecodeLeaderEpochCheckpoint(std::string_view bytes,
                                                     const std::string& file) {
  std::vector<EpochEntry> entries;
  Status s = ParseCheckpoint(
      bytes, file, format::kLeaderEpochEntryFields,
      [&](std::span<const CheckpointField> f) -> Status {
        auto epoch = CheckpointNumber(f[0], INT32_MAX, file, "R36", "epoch");
        if (!epoch) return epoch.error();
        auto start = CheckpointNumber(f[1], INT64_MAX, file, "R36", "start offset");
        if (!start) return start.error();
        EpochEntry e{static_cast<int32_t>(*epoch), *start};
        std::string breach = R36Breach(entries.empty() ? nullptr : &entries.back(), e);
        if (!breach.empty()) return Status::Corruption(file, f[0].position, "R36", breach);
        entries.push_back(e);
        return Status::Ok();
      });
  if (!s.ok()) return s;
  auto c = LeaderEpochCache::FromEntries(std::move(entries));
  if (!c) return Status(Code::kInternal, c.error().message());
  return c;
}

Result<LeaderEpochCache> LeaderEpochCache::Load(int dir_fd, FileSystem* fs) {
  // The path (a readlink) only for an error: a writer loads the epochs
  // again after every publication of another writer.
  auto text =
      ReadCheckpointFile(fs, dir_fd, kLeaderEpochCheckpointFile, kLeaderEpochCheckpointFile);
  if (!text && text.error().code() == Code::kCorruption)
    text = ReadCheckpointFile(fs, dir_fd, kLeaderEpochCheckpointFile,
                              PathAt(dir_fd, kLeaderEpochCheckpointFile));
  if (!text) return text.error();
  auto decoded = DecodeLeaderEpochCheckpoint(*text, {});
  if (decoded) return decoded;
  return DecodeLeaderEpochCheckpoint(*text, PathAt(dir_fd, kLeaderEpochCheckpointFile));
}

Status LeaderEpochCache::TruncateFromEndAndStore(int64_t end_offset, int dir_fd, FileSystem* fs) {
  const size_t before = entries_.size();
  TruncateFromEnd(end_offset);
  return entries_.size() == before ? Status::Ok() : Store(dir_fd, fs);
}

Status LeaderEpochCache::Store(int dir_fd, FileSystem* fs) const {
  return WriteCheckpointFile(fs, dir_fd, kLeaderEpochCheckpointFile, EpochLines(entries_));
}

Result<LeaderEpochCache> LeaderEpochCache::Rebuild(int dir_fd, const DecodeLimits& limits,
                                                   FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  PartitionListing places;  // R96: tiered segments are read where they are
  auto segments = ListSegments(dir_fd, fs, nullptr, &places);
  if (!segments) return segments.error();
  LeaderEpochCache cache;
  for (int64_t base : *segments) {
    const std::string name = SegmentFileName(base, format::kLogSuffix);
    const int seg_dir = places.DirOf(base, dir_fd);
    auto log = fs->Open(seg_dir, name, FileSystem::kRead);
    if (!log) return log.error();
    auto size = (*log)->Size();
    if (!size) return size.error();
    Status breach;
    MQ_RETURN_IF_ERROR(ForEachHeader(
        seg_dir, fs, limits, base, log->get(), 0, *size, [&](const BatchHeader& h, uint64_t pos) {
          const int32_t epoch = h.partition_leader_epoch;
          if (!breach.ok() || epoch == format::kNoPartitionLeaderEpoch) return;
          auto last = cache.latest();
          if (epoch < 0 || (last && epoch < last->epoch)) {
            breach = Status::Corruption(
                PathAt(dir_fd, name), pos, "R37",
                fmt::format(
                    "partitionLeaderEpoch {} of the batch at offset {} is {}", epoch, h.base_offset,
                    epoch < 0
                        ? "negative and not -1"
                        : fmt::format("below the epoch {} of a batch before it", last->epoch)));
            return;
          }
          if (last && epoch == last->epoch) return;
          breach = cache.Assign(epoch, h.base_offset);
          if (!breach.ok())  // offsets that go back: the log breaks R10/R11
            breach = Status::Corruption(PathAt(dir_fd, name), pos, "R37", breach.message());
        }));
    MQ_RETURN_IF_ERROR(breach);
  }
  return cache;
}

Result<LeaderEpochCache> LeaderEpochCache::Open(int dir_fd, int64_t log_end_offset,
                                                const DecodeLimits& limits, FileSystem* fs,
                                                bool* rebuilt) {
  if (rebuilt != nullptr) *rebuilt = false;
  auto cache = Load(dir_fd, fs);
  if (!cache && cache.error().code() != Code::kNotFound) return cache.error();
  bool store = !cache;
  if (!cache) {
    cache = Rebuild(dir_fd, limits, fs);
    if (!cache) return cache.error();
    if (rebuilt != nullptr) *rebuilt = true;
  }
  const size_t before = cache->entries().size();
  // Past the log end, not at it: an epoch at the end was begun by a leader
  // that has appended nothing in it yet (BeginLeaderEpoch), and fences the
  // writers of older epochs. (A cut drops those at its end: TruncateTo.)
  cache->TruncateFromEnd(log_end_offset + 1);
  store |= cache->entries().size() != before;
  if (store) MQ_RETURN_IF_ERROR(cache->Store(dir_fd, fs));
  return cache;
}

std::optional<std::pair<std::string, int32_t>> PartitionOfDirName(std::string_view name) {
  const size_t dash = name.find_last_of('-');
  if (dash == std::string_view::npos || dash + 1 == name.size()) return std::nullopt;
  std::string_view digits = name.substr(dash + 1);
  if (digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string_view::npos ||
      (digits.size() > 1 && digits[0] == '0'))
    return std::nullopt;
  const int64_t p = std::stoll(std::string(digits));
  if (p > INT32_MAX) return std::nullopt;
  std::string topic(name.substr(0, dash));
  if (!ValidateName(topic, "topic").ok()) return std::nullopt;
  return std::make_pair(std::move(topic), static_cast<int32_t>(p));
}

std::string EncodeReplicationOffsetCheckpoint(const HighWatermarkEntry& e) {
  return FormatCheckpoint({HighWatermarkLine(e.topic, e.partition, e.offset)});
}

Result<std::optional<HighWatermarkEntry>> DecodeReplicationOffsetCheckpoint(
    std::string_view bytes, const std::string& file,
    const std::optional<std::pair<std::string, int32_t>>& expected) {
  std::optional<HighWatermarkEntry> out;
  uint64_t seen = 0;
  Status s = ParseCheckpoint(
      bytes, file, format::kReplicationOffsetEntryFields,
      [&](std::span<const CheckpointField> f) -> Status {
        if (++seen > 1)
          return Status::Corruption(file, f[0].position, "R38",
                                    "more than one entry (a partition's checkpoint names only "
                                    "that partition)");
        Status name = ValidateName(f[0].text, "topic");
        if (!name.ok()) return Status::Corruption(file, f[0].position, "R38", name.message());
        auto partition = CheckpointNumber(f[1], INT32_MAX, file, "R38", "partition");
        if (!partition) return partition.error();
        auto offset = CheckpointNumber(f[2], INT64_MAX, file, "R38", "offset");
        if (!offset) return offset.error();
        HighWatermarkEntry e{std::string(f[0].text), static_cast<int32_t>(*partition), *offset};
        if (expected && (e.topic != expected->first || e.partition != expected->second))
          return Status::Corruption(
              file, f[0].position, "R38",
              fmt::format("the entry names {}-{}, not this partition {}-{}", e.topic, e.partition,
                          expected->first, expected->second));
        out = std::move(e);
        return Status::Ok();
      });
  if (!s.ok()) return s;
  if (!out && !bytes.empty())
    return Status::Corruption(file, bytes.size(), "R38",
                              "no entry (a partition's checkpoint holds exactly one)");
  return out;
}

Result<HighWatermarkFile> DecodeHighWatermarkFile(
    std::span<const std::byte> bytes, const std::string& file,
    const std::optional<std::pair<std::string, int32_t>>& expected) {
  using namespace format;
  if (bytes.empty()) return HighWatermarkFile{};
  HighWatermarkFile copies[2];
  const InPlaceLayout layout{"R61",
                             kHighWatermarkBytes,
                             kHighWatermarkCopyBytes,
                             kHighWatermarkChecksumOffset,
                             kHighWatermarkMagic,
                             kHighWatermarkVersion,
                             kHighWatermarkSequenceOffset};
  auto current = DecodeInPlaceCopies(
      bytes, file, layout,
      [&](int c, const std::byte* p, uint64_t sequence, const CopyBreach& bad) -> Status {
        const auto offset =
            static_cast<int64_t>(coding::GetFixed64(p + kHighWatermarkOffsetOffset));
        if (offset < 0)
          return bad(kHighWatermarkOffsetOffset, fmt::format("high watermark {}", offset));
        const auto partition =
            static_cast<int32_t>(coding::GetFixed32(p + kHighWatermarkPartitionOffset));
        if (partition < 0)
          return bad(kHighWatermarkPartitionOffset, fmt::format("partition {}", partition));
        const uint32_t length = coding::GetFixed32(p + kHighWatermarkTopicLengthOffset);
        if (length == 0 || length > kMaxHighWatermarkTopicBytes)
          return bad(kHighWatermarkTopicLengthOffset,
                     fmt::format("topic length {}, not 1 to 249", length));
        std::string topic(reinterpret_cast<const char*>(p + kHighWatermarkTopicOffset), length);
        if (Status name = ValidateName(topic, "topic"); !name.ok())
          return bad(kHighWatermarkTopicOffset, name.message());
        for (size_t at = kHighWatermarkTopicOffset + length; at < kHighWatermarkChecksumOffset;
             ++at)
          if (p[at] != std::byte{0}) return bad(at, "bytes after the topic are not zero");
        copies[c] = {HighWatermarkEntry{std::move(topic), partition, offset}, sequence, c};
        return Status::Ok();
      });
  if (!current) return current.error();
  HighWatermarkFile& out = copies[*current];
  const HighWatermarkEntry& e = *out.entry;
  if (expected && (e.topic != expected->first || e.partition != expected->second))
    return Status::Corruption(
        file,
        static_cast<size_t>(out.copy) * kHighWatermarkCopyBytes + kHighWatermarkPartitionOffset,
        "R38",
        fmt::format("the high watermark names {}-{}, not this partition "
                    "{}-{}",
                    e.topic, e.partition, expected->first, expected->second));
  return std::move(out);
}

Result<std::vector<std::byte>> EncodeHighWatermarkCopy(const HighWatermarkEntry& e,
                                                       uint64_t sequence) {
  using namespace format;
  MQ_RETURN_IF_ERROR(ValidateName(e.topic, "topic"));
  if (e.partition < 0 || e.offset < 0 || sequence == 0 ||
      sequence > static_cast<uint64_t>(INT64_MAX))
    return Status(Code::kInvalidArgument,
                  fmt::format("high watermark {} of partition {} (sequence {}): outside R61's "
                              "ranges",
                              e.offset, e.partition, sequence));
  std::vector<std::byte> out(kHighWatermarkCopyBytes);
  std::byte* p = out.data();
  coding::PutFixed32(p, kHighWatermarkMagic);
  coding::PutFixed32(p + 4, kHighWatermarkVersion);
  coding::PutFixed64(p + kHighWatermarkSequenceOffset, sequence);
  coding::PutFixed64(p + kHighWatermarkOffsetOffset, static_cast<uint64_t>(e.offset));
  coding::PutFixed32(p + kHighWatermarkPartitionOffset, static_cast<uint32_t>(e.partition));
  coding::PutFixed32(p + kHighWatermarkTopicLengthOffset, static_cast<uint32_t>(e.topic.size()));
  std::memcpy(p + kHighWatermarkTopicOffset, e.topic.data(), e.topic.size());
  coding::PutFixed32(p + kHighWatermarkChecksumOffset,
                     Crc32c(std::span<const std::byte>(out).first(kHighWatermarkChecksumOffset)));
  return out;
}

namespace {

// The high watermark as stored in `dir_fd`: from `high-watermark` (R61),
// or while that is missing from an older mq's replication-offset-checkpoint
// (`legacy`); `present` false when neither file is there.
struct StoredHighWatermark {
  HighWatermarkFile file;
  bool present = false;
  bool legacy = false;
  File* held = nullptr;  // the kept file it was read from (NamedFile), if any
};

// Reads it, `expected` naming the partition. A read that finds
// `high-watermark` breaking R61 is made again, up to 20 times 0.1 ms
// apart, before the breach is reported: a reader without the writer lock
// may have read one copy while it was written, and the other while it was
// written next.
// With `held`, the file is the one it keeps open (NamedFile), opened
// only when the name names another.
Result<StoredHighWatermark> ReadStoredHighWatermark(
    FileSystem* fs, int dir_fd, const std::optional<std::pair<std::string, int32_t>>& expected,
    NamedFile* held = nullptr) {
  for (int attempt = 1;; ++attempt) {
    auto read = ReadInPlaceFile(fs, dir_fd, kHighWatermarkFile, format::kHighWatermarkBytes, "R61",
                                {}, held);
    if (!read) return read.error();
    if (!*read) break;
    const std::vector<std::byte>& data = (*read)->data;
    File* const file = (*read)->file;
    // The path (a readlink) only for an error: this read is on every
    // acknowledgement's path.
    auto decoded = DecodeHighWatermarkFile(data, {}, expected);
    if (decoded) return StoredHighWatermark{std::move(*decoded), true, false, file};
    decoded = DecodeHighWatermarkFile(data, PathAt(dir_fd, kHighWatermarkFile), expected);
    if (decoded) return StoredHighWatermark{std::move(*decoded), true, false, file};
    if (decoded.error().code() != Code::kCorruption || decoded.error().rule() != "R61" ||
        attempt >= 20)
      return decoded.error();
    const timespec pause{0, 100 * 1000};
    ::nanosleep(&pause, nullptr);
  }
  const std::string legacy_path = PathAt(dir_fd, kReplicationOffsetCheckpointFile);
  auto text = ReadCheckpointFile(fs, dir_fd, kReplicationOffsetCheckpointFile, legacy_path);
  if (!text && text.error().code() == Code::kNotFound) return StoredHighWatermark{};
  if (!text) return text.error();
  auto entry = DecodeReplicationOffsetCheckpoint(*text, legacy_path, expected);
  if (!entry) return entry.error();
  return StoredHighWatermark{HighWatermarkFile{std::move(*entry), 0, -1}, true, true};
}

std::optional<std::pair<std::string, int32_t>> Named(std::string_view topic, int32_t partition) {
  return std::make_pair(std::string(topic), partition);
}

// R61: `offset` over the copy of `stored` that is not current, in place,
// with the next sequence; fdatasync with `sync`. No file yet: created
// whole (R39), and an older mq's checkpoint removed after it.
Status WriteHighWatermark(FileSystem* fs, int dir_fd, const StoredHighWatermark& stored,
                          std::string_view topic, int32_t partition, int64_t offset, bool sync) {
  if (fs == nullptr) fs = FileSystem::Default();
  const HighWatermarkEntry entry{std::string(topic), partition, offset};
  const bool in_place = stored.present && !stored.legacy && stored.file.copy >= 0;
  auto copy = EncodeHighWatermarkCopy(entry, in_place ? stored.file.sequence + 1 : 1);
  if (!copy) return copy.error();
  if (!in_place) {
    std::vector<std::byte> image(format::kHighWatermarkBytes);
    std::memcpy(image.data(), copy->data(), copy->size());
    MQ_RETURN_IF_ERROR(WriteFileAtomic(dir_fd, kHighWatermarkFile, image, fs, {}, sync));
    if (!stored.legacy) return Status::Ok();
    // Migrated: the older file would only be stale from here on.
    Status gone = fs->Unlink(dir_fd, kReplicationOffsetCheckpointFile);
    if (!gone.ok() && gone.code() != Code::kNotFound) return gone;
    return sync ? fs->SyncDir(dir_fd) : Status::Ok();
  }
  std::unique_ptr<File> opened;
  File* file = stored.held;  // the kept file it was read from, under the writer lock
  if (file == nullptr) {
    auto f = fs->Open(dir_fd, kHighWatermarkFile, FileSystem::kReadWrite);
    if (!f) return f.error();
    opened = std::move(*f);
    file = opened.get();
  }
  MQ_RETURN_IF_ERROR(
      file->WriteAt(stored.file.copy == 0 ? format::kHighWatermarkCopyBytes : 0, *copy));
  return sync ? file->Sync() : Status::Ok();
}

Status CheckStorable(std::string_view topic, int32_t partition, int64_t offset) {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  if (partition < 0 || offset < 0)
    return Status(
        Code::kInvalidArgument,
        fmt::format("high watermark {} of partition {}: both must be >= 0", offset, partition));
  return Status::Ok();
}

}  // namespace

Status CheckStoredHighWatermark(int dir_fd,
                                const std::optional<std::pair<std::string, int32_t>>& partition,
                                FileSystem* fs) {
  return ReadStoredHighWatermark(fs, dir_fd, partition).status();
}

Status CheckStoredHighWatermark(int dir_fd,
                                const std::optional<std::pair<std::string, int32_t>>& partition) {
  return CheckStoredHighWatermark(dir_fd, partition, nullptr);
}

const char* HighWatermarkFileAt(int dir_fd, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  if (!fs->StatAt(dir_fd, kHighWatermarkFile) &&
      fs->StatAt(dir_fd, kReplicationOffsetCheckpointFile))
    return kReplicationOffsetCheckpointFile;
  return kHighWatermarkFile;
}

Result<int64_t> LoadHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                  FileSystem* fs) {
  return LoadHighWatermark(dir_fd, topic, partition, fs, nullptr);
}

Result<int64_t> LoadHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                  FileSystem* fs, NamedFile* held) {
  auto stored = ReadStoredHighWatermark(fs, dir_fd, Named(topic, partition), held);
  if (!stored) return stored.error();
  if (!stored->file.entry)
    return Status(Code::kNotFound, PathAt(dir_fd, stored->legacy ? kReplicationOffsetCheckpointFile
                                                                 : kHighWatermarkFile) +
                                       ": no high watermark written yet");
  return stored->file.entry->offset;
}

Status CheckHighWatermarkWithin(int dir_fd, std::string_view topic, int32_t partition, int64_t hw,
                                int64_t log_end_offset) {
  return CheckHighWatermarkWithin(dir_fd, topic, partition, hw, log_end_offset, nullptr);
}

Status CheckHighWatermarkWithin(int dir_fd, std::string_view topic, int32_t partition, int64_t hw,
                                int64_t log_end_offset, FileSystem* fs) {
  if (hw <= log_end_offset) return Status::Ok();
  const std::string what =
      fmt::format("high watermark {} is above the log end {}: the file does not belong to this log",
                  hw, log_end_offset);
  auto stored = ReadStoredHighWatermark(fs, dir_fd, Named(topic, partition));
  if (stored && stored->legacy) {
    // The offset is the entry's last field: "0\n1\n<topic> <partition> <offset>\n".
    const uint64_t position = 4 + topic.size() + 1 + fmt::formatted_size("{}", partition) + 1;
    return Status::Corruption(PathAt(dir_fd, kReplicationOffsetCheckpointFile), position, "R38",
                              what);
  }
  // The current copy's high-watermark field.
  const int copy = stored && stored->file.copy > 0 ? 1 : 0;
  return Status::Corruption(PathAt(dir_fd, kHighWatermarkFile),
                            static_cast<uint64_t>(copy) * format::kHighWatermarkCopyBytes +
                                format::kHighWatermarkOffsetOffset,
                            "R38", what);
}

Result<int64_t> LoadHighWatermarkWithin(int dir_fd, std::string_view topic, int32_t partition,
                                        int64_t log_end_offset, FileSystem* fs) {
  auto hw = LoadHighWatermark(dir_fd, topic, partition, fs);
  if (!hw) return hw;
  MQ_RETURN_IF_ERROR(CheckHighWatermarkWithin(dir_fd, topic, partition, *hw, log_end_offset, fs));
  return hw;
}

Status EpochEntryMismatch(const LeaderEpochCache& cache, size_t entry, const std::string& path,
                          const std::string& what) {
  // The entry's line: after "0\n<count>\n" and the lines before it.
  const std::string text = cache.Encode();
  uint64_t at = text.find('\n', text.find('\n') + 1) + 1;
  for (size_t i = 0; i < entry && at < text.size(); ++i) at = text.find('\n', at) + 1;
  return Status::Corruption(path, at, "R37",
                            what + ": the checkpoint does not hold what the log implies");
}

Result<std::optional<int64_t>> LowerHighWatermark(int dir_fd, std::string_view topic,
                                                  int32_t partition, int64_t end_offset,
                                                  FileSystem* fs) {
  auto stored = ReadStoredHighWatermark(fs, dir_fd, Named(topic, partition));
  if (!stored) return stored.error();
  if (!stored->file.entry) return std::optional<int64_t>();
  const int64_t hw = stored->file.entry->offset;
  if (hw <= end_offset) return std::optional<int64_t>();
  MQ_RETURN_IF_ERROR(CheckStorable(topic, partition, end_offset));
  MQ_RETURN_IF_ERROR(WriteHighWatermark(fs, dir_fd, *stored, topic, partition, end_offset, true));
  return std::optional<int64_t>(hw);
}

Status StoreHighWatermark(int dir_fd, std::string_view topic, int32_t partition, int64_t offset,
                          FileSystem* fs, bool sync) {
  MQ_RETURN_IF_ERROR(CheckStorable(topic, partition, offset));
  auto stored = ReadStoredHighWatermark(fs, dir_fd, Named(topic, partition));
  if (!stored) return stored.error();
  return WriteHighWatermark(fs, dir_fd, *stored, topic, partition, offset, sync);
}

Result<bool> RaiseHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                int64_t offset, FileSystem* fs, bool sync) {
  return RaiseHighWatermark(dir_fd, topic, partition, offset, fs, sync, nullptr);
}

Result<bool> RaiseHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                int64_t offset, FileSystem* fs, bool sync, NamedFile* held) {
  MQ_RETURN_IF_ERROR(CheckStorable(topic, partition, offset));
  auto stored = ReadStoredHighWatermark(fs, dir_fd, Named(topic, partition), held);
  if (!stored) return stored.error();
  if (stored->file.entry && stored->file.entry->offset >= offset) return false;
  MQ_RETURN_IF_ERROR(WriteHighWatermark(fs, dir_fd, *stored, topic, partition, offset, sync));
  return true;
}

Result<int32_t> DecodeLeaderEpochFence(std::string_view bytes, const std::string& file) {
  std::optional<int32_t> out;
  Status s = ParseCheckpoint(bytes, file, format::kLeaderEpochFenceFields,
                             [&](std::span<const CheckpointField> f) -> Status {
                               if (out)
                                 return Status::Corruption(file, f[0].position, "R56",
                                                           "more than one fence entry");
                               auto epoch = CheckpointNumber(f[0], INT32_MAX, file, "R56", "epoch");
                               if (!epoch) return epoch.error();
                               out = static_cast<int32_t>(*epoch);
                               return Status::Ok();
                             });
  if (!s.ok()) return s;
  if (!out) return Status::Corruption(file, bytes.size(), "R56", "no fence entry");
  return *out;
}

std::string EncodeLeaderEpochFence(int32_t epoch) {
  return FormatCheckpoint({fmt::format("{}", epoch)});
}

Result<int32_t> LoadLeaderEpochFence(int dir_fd, FileSystem* fs) {
  // The path (a readlink) only for an error, as LeaderEpochCache::Load.
  auto text = ReadCheckpointFile(fs, dir_fd, kLeaderEpochFenceFile, kLeaderEpochFenceFile);
  if (!text && text.error().code() == Code::kNotFound) return int32_t{-1};
  if (!text && text.error().code() == Code::kCorruption)
    text = ReadCheckpointFile(fs, dir_fd, kLeaderEpochFenceFile,
                              PathAt(dir_fd, kLeaderEpochFenceFile));
  if (!text) return text.error();
  auto decoded = DecodeLeaderEpochFence(*text, {});
  if (decoded) return decoded;
  return DecodeLeaderEpochFence(*text, PathAt(dir_fd, kLeaderEpochFenceFile));
}

Status StoreLeaderEpochFence(int dir_fd, int32_t epoch, FileSystem* fs, bool sync) {
  if (epoch < 0) return Status(Code::kInvalidArgument, fmt::format("epoch fence {}", epoch));
  return WriteCheckpointFile(fs, dir_fd, kLeaderEpochFenceFile, {fmt::format("{}", epoch)}, sync);
}

namespace {

// Reads a file by path for mq-inspect, bounded as R35.
Result<std::string> ReadByPath(const std::string& path, std::string* dir_name) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dfd = OpenDirectory(dir, false);
  if (!dfd) return dfd.error();
  if (dir_name != nullptr) {
    std::string d = dir;
    if (d == ".") {
      char cwd[4096];
      if (::getcwd(cwd, sizeof cwd) != nullptr) d = cwd;
    }
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    const size_t s = d.find_last_of('/');
    *dir_name = s == std::string::npos ? d : d.substr(s + 1);
  }
  return ReadCheckpointFile(FileSystem::Default(), dfd->get(), name, path);
}

}  // namespace

std::optional<std::pair<std::string, int32_t>> PartitionOfDirectory(const std::string& path) {
  std::string d = path;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (d.empty() || d == ".") {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return std::nullopt;
    d = cwd;
  }
  const size_t s = d.find_last_of('/');
  return PartitionOfDirName(s == std::string::npos ? d : d.substr(s + 1));
}

Result<LeaderEpochCache> ReadLeaderEpochCheckpointFile(const std::string& path) {
  auto text = ReadByPath(path, nullptr);
  if (!text) return text.error();
  return DecodeLeaderEpochCheckpoint(*text, path);
}

Result<std::optional<HighWatermarkEntry>> ReadReplicationOffsetCheckpointFile(
    const std::string& path) {
  std::string dir_name;
  auto text = ReadByPath(path, &dir_name);
  if (!text) return text.error();
  return DecodeReplicationOffsetCheckpoint(*text, path, PartitionOfDirName(dir_name));
}

Result<HighWatermarkFile> ReadHighWatermarkFileByPath(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dfd = OpenDirectory(dir, false);
  if (!dfd) return dfd.error();
  auto bytes = ReadFileAt(dfd->get(), name, format::kHighWatermarkBytes);
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(path, format::kHighWatermarkBytes, "R61", "more than 1024 bytes");
  if (!bytes) return bytes.error();
  return DecodeHighWatermarkFile(*bytes, path, PartitionOfDirectory(dir));
}

int64_t ReaderResumeOffset(int64_t from, int64_t log_end, std::span<const EpochEntry> read,
                           const LeaderEpochCache* epochs) {
  int64_t to = std::min(from, log_end);
  if (epochs == nullptr || epochs->empty()) return to;
  for (auto it = read.rbegin(); it != read.rend(); ++it) {
    const EpochEndOffset end = epochs->EndOffsetFor(it->epoch, INT64_MAX);
    if (end.epoch == it->epoch && end.end_offset >= 0) return std::min(to, end.end_offset);
    to = std::min(to, it->start_offset);
    if (end.epoch >= 0 && end.end_offset >= 0) to = std::min(to, end.end_offset);
  }
  return to;
}

}  // namespace mq
