// LogSegment (format-spec/segment.md §6-§8, R25).
#include "storage/log_segment.h"

#include <algorithm>
#include <cstring>

#include "format/batch_cursor.h"
#include "format/format.h"
#include "io/mapped_file.h"
#include "mq/segment.h"
#include "storage/segment.h"

namespace mq {

namespace {

constexpr const char* kSuffixes[] = {format::kLogSuffix, format::kIndexSuffix,
                                     format::kTimeIndexSuffix};

FileSystem* FsOf(const LogConfig& c) { return c.fs ? c.fs : FileSystem::Default(); }

// Index file `suffix` of segment `base`, mapped whole (no larger than any
// index of a valid segment).
Result<MappedFile> MapIndex(FileSystem* fs, int dir_fd, int64_t base, const char* suffix) {
  return MappedFile::Open(dir_fd, SegmentFileName(base, suffix), format::kMaxIndexFileBytes, fs);
}

}  // namespace

uint64_t LogSegment::SegmentLimit(const LogConfig& config) {
  return std::min<uint64_t>(config.segment_bytes, format::kMaxSegmentBytes);
}

std::vector<std::string> LogSegment::FileNames(int64_t base) {
  std::vector<std::string> names;
  for (const char* suffix : kSuffixes) names.push_back(SegmentFileName(base, suffix));
  return names;
}

Status LogSegment::Remove(FileSystem* fs, int dir_fd, int64_t base) {
  for (const std::string& name : FileNames(base)) {
    Status s = fs->Unlink(dir_fd, name);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  return Status::Ok();
}

Status LogSegment::SyncFiles(FileSystem* fs, int dir_fd, int64_t base) {
  for (const std::string& name : FileNames(base)) {
    auto f = fs->Open(dir_fd, name, FileSystem::kRead);
    if (!f) return f.error();
    MQ_RETURN_IF_ERROR((*f)->Sync());
  }
  return Status::Ok();
}

Result<std::unique_ptr<LogSegment>> LogSegment::Create(FileSystem* fs, int dir_fd,
                                                       const LogConfig& config, int64_t base) {
  std::unique_ptr<LogSegment> s(new LogSegment(config, base));
  std::unique_ptr<File>* files[] = {&s->log_, &s->index_, &s->timeindex_};
  for (size_t i = 0; i < 3; ++i) {
    auto f = fs->Open(dir_fd, SegmentFileName(base, kSuffixes[i]), FileSystem::kCreate);
    if (!f) return f.error();
    MQ_RETURN_IF_ERROR((*f)->Truncate(0));
    *files[i] = std::move(*f);
  }
  return s;
}

Result<std::unique_ptr<LogSegment>> LogSegment::Open(FileSystem* fs, int dir_fd,
                                                     const LogConfig& config, int64_t base,
                                                     uint64_t size, int64_t end_offset,
                                                     std::unique_ptr<File> log,
                                                     std::optional<uint64_t> check_log_size) {
  std::unique_ptr<LogSegment> s(new LogSegment(config, base));
  const bool check = check_log_size.has_value();
  if (!log) {
    auto l = fs->Open(dir_fd, SegmentFileName(base, format::kLogSuffix), FileSystem::kCreate);
    if (!l) return l.error();
    log = std::move(*l);
  }
  // Checked, a missing index fails the check (it is rebuilt and reported).
  auto open_index = [&](const char* suffix, std::unique_ptr<File>* out) -> Result<bool> {
    auto f = fs->Open(dir_fd, SegmentFileName(base, suffix),
                      check ? FileSystem::kReadWrite : FileSystem::kCreate);
    if (check && !f && f.error().code() == Code::kNotFound) return false;
    if (!f) return f.error();
    *out = std::move(*f);
    return true;
  };
  for (auto [suffix, out] : {std::pair{format::kIndexSuffix, &s->index_},
                             std::pair{format::kTimeIndexSuffix, &s->timeindex_}}) {
    auto opened = open_index(suffix, out);
    if (!opened) return opened.error();
    if (!*opened) return std::unique_ptr<LogSegment>();
  }
  s->log_ = std::move(log);
  auto restored = s->Restore(fs, dir_fd, config, size, end_offset, check_log_size);
  if (!restored) return restored.error();
  if (!*restored) return std::unique_ptr<LogSegment>();
  return s;
}

namespace {

// An index's tail as a restore keeps it: the whole entries kept and the
// last of them (none when none is kept).
template <typename Entry>
struct IndexTail {
  uint64_t entries = 0;
  std::optional<Entry> last;
};

// The offset index's last entry inside the log (a position below `size`,
// an offset below `end_offset`) among its first `entries`, the ones past
// it dropped. With `check_log_size` (the log's size before recovery), only
// an unpublished append may be dropped: nullopt when another is (a bad
// index).
Result<std::optional<IndexTail<OffsetIndexEntry>>> OffsetIndexTail(
    File& index, uint64_t entries, int64_t base, uint64_t size, int64_t end_offset,
    std::optional<uint64_t> check_log_size) {
  IndexTail<OffsetIndexEntry> tail{entries, std::nullopt};
  std::byte e[format::kOffsetIndexEntrySize];
  while (tail.entries > 0) {
    auto got = index.ReadAt((tail.entries - 1) * format::kOffsetIndexEntrySize, e);
    if (!got) return got.error();
    auto entry = DecodeOffsetEntry(e, base);
    if (*got == sizeof e && entry.position < size && entry.offset < end_offset) {
      tail.last = entry;
      break;
    }
    // Past the committed end on both counts, inside the log as it was: an
    // append that was never published. Anything else is a bad index.
    if (check_log_size &&
        !(entry.offset >= end_offset && entry.position >= size && entry.position < *check_log_size))
      return std::optional<IndexTail<OffsetIndexEntry>>();
    --tail.entries;
  }
  return std::optional(tail);
}

// Whether offset-index entry `last` names a batch of the log (`size`
// bytes) that ends at its offset, inside the log.
Result<bool> EntryNamesBatch(File& log, const OffsetIndexEntry& last, int64_t base, uint64_t size) {
  if (last.offset < base) return false;
  std::byte h[format::kBatchHeaderSize];
  auto got = log.ReadAt(last.position, h);
  if (!got) return got.error();
  if (*got != sizeof h) return false;
  BatchHeader header = DecodeBatchHeader(Bytes(h, sizeof h));
  return header.last_offset() == last.offset && last.position + header.size_bytes() <= size;
}

// The time index's last entry below `end_offset` and not past the offset
// index's `last_offset` among its first `entries`, the ones past it
// dropped. With `check`: nullopt when one below the segment's base is met
// (a bad index).
Result<std::optional<IndexTail<TimeIndexEntry>>> TimeIndexTail(
    File& timeindex, uint64_t entries, int64_t base, int64_t end_offset,
    const std::optional<OffsetIndexEntry>& last_offset, bool check) {
  IndexTail<TimeIndexEntry> tail{entries, std::nullopt};
  std::byte e[format::kTimeIndexEntrySize];
  while (tail.entries > 0) {
    auto got = timeindex.ReadAt((tail.entries - 1) * format::kTimeIndexEntrySize, e);
    if (!got) return got.error();
    auto entry = DecodeTimeEntry(e, base);
    const bool whole = *got == sizeof e;
    if (check && whole && entry.offset < end_offset && entry.offset < base)
      return std::optional<IndexTail<TimeIndexEntry>>();
    if (whole && entry.offset < end_offset &&
        (!last_offset || entry.offset <= last_offset->offset)) {
      tail.last = entry;
      break;
    }
    --tail.entries;
  }
  return std::optional(tail);
}

}  // namespace

Result<bool> LogSegment::Restore(FileSystem* fs, int dir_fd, const LogConfig& config, uint64_t size,
                                 int64_t end_offset, std::optional<uint64_t> check_log_size) {
  const bool check = check_log_size.has_value();
  const int64_t base = ib_.base();
  // Both were just opened (Open), under the writer lock.
  auto iinfo = index_->StatAtOpen();
  if (!iinfo) return iinfo.error();
  auto tinfo = timeindex_->StatAtOpen();
  if (!tinfo) return tinfo.error();
  const uint64_t isize = iinfo->size;
  const uint64_t tsize = tinfo->size;
  if (check &&
      (isize % format::kOffsetIndexEntrySize != 0 || tsize % format::kTimeIndexEntrySize != 0))
    return false;
  auto offsets = OffsetIndexTail(*index_, isize / format::kOffsetIndexEntrySize, base, size,
                                 end_offset, check_log_size);
  if (!offsets) return offsets.error();
  if (!*offsets) return false;
  const std::optional<OffsetIndexEntry>& last_entry = (*offsets)->last;
  if (check && last_entry) {
    auto names = EntryNamesBatch(*log_, *last_entry, base, size);
    if (!names) return names.error();
    if (!*names) return false;
  }
  auto times = TimeIndexTail(*timeindex_, tsize / format::kTimeIndexEntrySize, base, end_offset,
                             last_entry, check);
  if (!times) return times.error();
  if (!*times) return false;
  const uint64_t n = (*offsets)->entries, tn = (*times)->entries;
  if (n * format::kOffsetIndexEntrySize != isize)
    MQ_RETURN_IF_ERROR(index_->Truncate(n * format::kOffsetIndexEntrySize));
  if (tn * format::kTimeIndexEntrySize != tsize)
    MQ_RETURN_IF_ERROR(timeindex_->Truncate(tn * format::kTimeIndexEntrySize));
  ib_.Restore(last_entry, (*times)->last);
  ib_.set_counts(n, tn);
  uint64_t from = last_entry ? last_entry->position : 0;
  MQ_RETURN_IF_ERROR(ForEachHeader(
      dir_fd, fs, config.limits, base, log_.get(), from, size,
      [&](const BatchHeader& h, uint64_t pos) { ib_.Add(h, pos, &offset_buf_, &time_buf_); }));
  MQ_RETURN_IF_ERROR(Flush());
  if (size > 0) {
    std::byte h[format::kBatchHeaderSize];
    auto got = log_->ReadAt(0, h);
    if (!got) return got.error();
    if (*got == sizeof h) first_max_ts_ = DecodeBatchHeader(Bytes(h, sizeof h)).max_timestamp;
  }
  return true;
}

bool LogSegment::ShouldRoll(const BatchHeader& h, uint64_t pos, int64_t base_offset) const {
  if (pos == 0) return false;
  bool full = pos + h.size_bytes() > segment_limit_;
  bool old = first_max_ts_ >= 0 && h.max_timestamp - first_max_ts_ > segment_ms_;
  bool far = base_offset + h.last_offset_delta - ib_.base() > INT32_MAX;
  return full || old || far;
}

void LogSegment::Add(const BatchHeader& h, uint64_t pos) {
  if (pos == 0) first_max_ts_ = h.max_timestamp;
  ib_.Add(h, pos, &offset_buf_, &time_buf_);
}

Status LogSegment::Flush() {
  if (!offset_buf_.empty()) {
    uint64_t at = (ib_.offset_entries() * format::kOffsetIndexEntrySize) - offset_buf_.size();
    MQ_RETURN_IF_ERROR(index_->WriteAt(at, offset_buf_));
    offset_buf_.clear();
  }
  if (!time_buf_.empty()) {
    uint64_t at = (ib_.time_entries() * format::kTimeIndexEntrySize) - time_buf_.size();
    MQ_RETURN_IF_ERROR(timeindex_->WriteAt(at, time_buf_));
    time_buf_.clear();
  }
  return Status::Ok();
}

Status LogSegment::Seal(bool sync) {
  MQ_RETURN_IF_ERROR(Flush());
  ib_.Finish(&time_buf_);
  MQ_RETURN_IF_ERROR(Flush());
  if (sync) MQ_RETURN_IF_ERROR(log_->Sync());
  return Status::Ok();
}

Result<bool> LogSegment::AfterIsShort(int64_t offset, uint64_t size, uint64_t window) {
  // Indexed batches start more than interval bytes apart (§7.1): the last
  // `window` bytes hold at most window / interval + 1 entries. At most 64
  // KiB of them are read (a tiny index.interval.bytes): an entry found
  // there answers all the same, and none found is "cannot tell".
  constexpr uint64_t kMaxTailEntries = (64 << 10) / format::kOffsetIndexEntrySize;
  const uint64_t written =
      ib_.offset_entries() - offset_buf_.size() / format::kOffsetIndexEntrySize;
  const uint64_t tail = std::min<uint64_t>(
      {written, window / std::max<uint32_t>(ib_.interval(), 1) + 2, kMaxTailEntries});
  if (tail == 0) return false;
  std::vector<std::byte> bytes(tail * format::kOffsetIndexEntrySize);
  auto got = index_->ReadAt((written - tail) * format::kOffsetIndexEntrySize, bytes);
  if (!got) return got.error();
  // The last batch ending before `offset` (entries of an append never
  // published hold offsets at or past the log end, so past `offset` too).
  const auto e = LookupOffset(Bytes(bytes.data(), *got), ib_.base(), offset - 1);
  return e && e->position < size && size - e->position < window;
}

Status LogSegment::Sync() {
  MQ_RETURN_IF_ERROR(log_->Sync());
  MQ_RETURN_IF_ERROR(index_->Sync());
  return timeindex_->Sync();
}

// ---- Read side ------------------------------------------------------------

std::optional<OffsetIndexEntry> LogSegment::FindOffsetEntry(FileSystem* fs, int dir_fd,
                                                            int64_t base, int64_t offset) {
  auto idx = MapIndex(fs, dir_fd, base, format::kIndexSuffix);
  if (!idx) return std::nullopt;
  return LookupOffset(idx->bytes(), base, offset);
}

std::optional<TimeIndexEntry> LogSegment::LastTimeEntry(FileSystem* fs, int dir_fd, int64_t base,
                                                        uint64_t* at) {
  auto tidx = MapIndex(fs, dir_fd, base, format::kTimeIndexSuffix);
  if (!tidx || tidx->bytes().size() < format::kTimeIndexEntrySize) return std::nullopt;
  Bytes t = tidx->bytes();
  const size_t n = t.size() / format::kTimeIndexEntrySize;
  if (at) *at = (n - 1) * format::kTimeIndexEntrySize;
  return DecodeTimeEntry(&t[(n - 1) * format::kTimeIndexEntrySize], base);
}

std::optional<TimeIndexEntry> LogSegment::TimeEntryBelow(FileSystem* fs, int dir_fd, int64_t base,
                                                         int64_t timestamp) {
  auto tidx = MapIndex(fs, dir_fd, base, format::kTimeIndexSuffix);
  if (!tidx || tidx->bytes().empty()) return std::nullopt;
  Bytes t = tidx->bytes();
  const size_t k = LowerBoundTime(t, base, timestamp);
  if (k == 0) return std::nullopt;
  return DecodeTimeEntry(&t[(k - 1) * format::kTimeIndexEntrySize], base);
}

Status LogSegment::WriteIndexFiles(FileSystem* fs, int dir_fd, int64_t base,
                                   const std::vector<std::byte>& offset_index,
                                   const std::vector<std::byte>& time_index) {
  MQ_RETURN_IF_ERROR(
      WriteFileAtomic(dir_fd, SegmentFileName(base, format::kIndexSuffix), offset_index, fs));
  return WriteFileAtomic(dir_fd, SegmentFileName(base, format::kTimeIndexSuffix), time_index, fs);
}

// R25's cheap check of a rolled segment's indexes (recovery, §12).
Result<bool> IndexLooksRight(int dir_fd, const LogConfig& config, int64_t base, int64_t next_base) {
  FileSystem* fs = FsOf(config);
  auto idx = MapIndex(fs, dir_fd, base, format::kIndexSuffix);
  auto tidx = MapIndex(fs, dir_fd, base, format::kTimeIndexSuffix);
  if (!idx || !tidx) return false;
  if (idx->bytes().size() % format::kOffsetIndexEntrySize != 0) return false;
  if (tidx->bytes().size() % format::kTimeIndexEntrySize != 0) return false;
  if (!tidx->bytes().empty()) {
    auto t = DecodeTimeEntry(tidx->bytes().data() + tidx->bytes().size() - 12, base);
    if (t.offset < base || t.offset >= next_base) return false;
  }
  if (idx->bytes().empty()) return true;
  auto e = DecodeOffsetEntry(idx->bytes().data() + idx->bytes().size() - 8, base);
  // The log is not a hint: a failure to read it is returned.
  auto log = fs->Open(dir_fd, SegmentFileName(base, format::kLogSuffix), FileSystem::kRead);
  if (!log) return log.error();
  std::byte header[format::kBatchHeaderSize];
  auto got = (*log)->ReadAt(e.position, header);
  if (!got) return got.error();
  if (*got != sizeof header) return false;
  return DecodeBatchHeader(Bytes(header, sizeof header)).last_offset() == e.offset;
}

Status RebuildIndexes(int dir_fd, FileSystem* fs, const LogConfig& config, int64_t base,
                      uint64_t size, bool rolled) {
  std::vector<std::byte> offset_index, time_index;
  IndexBuilder ib(base, config.index_interval_bytes);
  MQ_RETURN_IF_ERROR(ForEachHeader(
      dir_fd, fs, config.limits, base, 0, size,
      [&](const BatchHeader& h, uint64_t pos) { ib.Add(h, pos, &offset_index, &time_index); }));
  if (rolled) ib.Finish(&time_index);
  return LogSegment::WriteIndexFiles(fs, dir_fd, base, offset_index, time_index);
}

namespace {

// The headers of segment `base` from byte `from` (or, with `from_offset`,
// from the offset index's largest entry below that offset when it checks
// out) to byte `to`.
Status WalkHeaders(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base, File* log,
                   uint64_t from, std::optional<int64_t> from_offset, uint64_t to,
                   const std::function<void(const BatchHeader&, uint64_t)>& fn) {
  std::string name = SegmentFileName(base, format::kLogSuffix);
  std::unique_ptr<File> opened;
  if (log == nullptr) {
    auto file = fs->Open(dir_fd, name, FileSystem::kRead);
    if (!file) return file.error();
    opened = std::move(*file);
    log = opened.get();
  }
  // Headers only: a small chunk, and Peek never needs more than the header
  // plus (for a batch larger than the chunk) one refill.
  BatchCursor cursor(limits, 64 << 10);
  cursor.Reset(log, name, to);
  uint64_t pos = from;
  if (from_offset && *from_offset > base) {
    auto e = LogSegment::FindOffsetEntry(fs, dir_fd, base, *from_offset - 1);
    if (e && e->position < to) {
      BatchHeader h;
      Bytes bytes;
      auto step = cursor.Peek(e->position, &h, &bytes);
      if (step && *step == BatchCursor::Step::kBatch && h.last_offset() == e->offset)
        pos = e->position;
    }
  }
  for (;;) {
    BatchHeader h;
    Bytes bytes;
    auto step = cursor.Peek(pos, &h, &bytes);
    if (!step) return step.error();
    if (*step != BatchCursor::Step::kBatch) return Status::Ok();
    fn(h, pos);
    pos += h.size_bytes();
  }
}

}  // namespace

Status ForEachHeader(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                     uint64_t from, uint64_t to,
                     const std::function<void(const BatchHeader&, uint64_t)>& fn) {
  return WalkHeaders(dir_fd, fs, limits, base, nullptr, from, std::nullopt, to, fn);
}

Status ForEachHeader(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                     File* log, uint64_t from, uint64_t to,
                     const std::function<void(const BatchHeader&, uint64_t)>& fn) {
  return WalkHeaders(dir_fd, fs, limits, base, log, from, std::nullopt, to, fn);
}

Status ForEachHeaderFrom(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                         File* log, int64_t offset, uint64_t to,
                         const std::function<void(const BatchHeader&, uint64_t)>& fn) {
  return WalkHeaders(dir_fd, fs, limits, base, log, 0, offset, to, fn);
}

Status ForEachHeaderFrom(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                         int64_t offset, uint64_t to,
                         const std::function<void(const BatchHeader&, uint64_t)>& fn) {
  return WalkHeaders(dir_fd, fs, limits, base, nullptr, 0, offset, to, fn);
}

}  // namespace mq
