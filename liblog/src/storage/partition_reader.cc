// PartitionReader: lock-free reads up to the committed end (§9), and
// LastProducerSequence.
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "format/batch_cursor.h"
#include "format/format.h"
#include "io/checkpoint_file.h"
#include "mq/committed_end.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"
#include "storage/log_segment.h"
#include "storage/offset_index.h"
#include "storage/offset_order.h"
#include "storage/producer_state.h"
#include "storage/recovery.h"
#include "storage/segment.h"
#include "storage/state_file.h"

namespace mq {

namespace {
// A read that failed (kIoError), as opposed to bytes that are not a batch:
// returned at once, where damage is left for Next() to report.
Status ReadFailure(const Result<BatchCursor::Step>& step) {
  if (!step && step.error().code() == Code::kIoError) return step.error();
  return Status::Ok();
}
}  // namespace

struct PartitionReader::Impl {
  std::string dir;
  DecodeLimits limits;
  OffsetPolicy offsets = OffsetPolicy::kContiguous;
  FileSystem* fs = FileSystem::Default();
  UniqueFd dir_fd;
  std::optional<StateFile> state;
  StateFields fields;
  std::vector<int64_t> segments;

  int64_t cur_base = -1;  // -1: not positioned yet
  std::unique_ptr<File> cur_file;
  // StateFields::rewrites when cur_file was opened. A truncation removes
  // segments and the appends after it create new files of the same names:
  // while the counter stays there the name still holds that file, once it
  // moved the file is opened again (segment.md §9.4).
  uint32_t cur_file_rewrites = 0;
  uint64_t pos = 0;       // next batch
  uint64_t last_pos = 0;  // batch last returned
  // R91: the least offset of the batch last returned that was asked for:
  // the offset sought, or the log start the reader went on at, when it lies
  // inside the batch; else the batch's base offset.
  int64_t first_offset = 0;
  std::optional<uint64_t> corrupt_at;
  // After the batch last returned, or the offset last sought (a rewrite
  // finds it again); -1 when not known (a timestamp seek past damage).
  int64_t next_offset = -1;
  // The leader epochs of the batches returned since the reader positioned
  // (by a seek; kept below where a rewrite sent it back), each with the
  // offset of the first batch of it returned (ReaderResumeOffset).
  std::vector<EpochEntry> read_epochs;
  // The least offset a rewrite cut below next_offset, not taken yet
  // (PartitionReader::TakeCut).
  std::optional<int64_t> cut;
  // An offset asked for (sought, or next to read) that retention had
  // deleted, and the log start the reader went on at (TakeOutOfRange).
  std::optional<OffsetOutOfRange> out_of_range;
  // The baseOffset the next batch must have (R26), or the least it may have
  // (R10/R11 with gaps allowed); -1 when unknown (right after a seek into the
  // middle of a segment, or after a skipped corrupt batch).
  int64_t expect = -1;
  uint32_t rewrites_seen = 0;  // StateFields::rewrites when positioned
  // The truncation history (segment.md §6.6) as read now, right after the
  // state file. A history that cannot be read (an I/O error, or one that
  // breaks R59) stops the reader: without it a cut cannot be told from
  // the records appended at its offsets since.
  Result<std::vector<TruncationRecord>> ReadHistory() const {
    if (!state) return std::vector<TruncationRecord>();
    return ReadTruncations(dir_fd.get(), fs, dir);
  }
  // The lowest cut of a truncation under way when the reader positioned:
  // its entry names a rewrites value after rewrites_seen (§9.4). Nothing
  // at or past it is handed out until the counter moves.
  std::optional<int64_t> held_at;
  // Positions the reader at `offset` in the log as published now, with
  // the history read right after the state file. With `since` (the
  // rewrites value a reader that handed batches out was positioned at),
  // no further than the lowest cut published after it, or under way.
  // Returns the offset it positions at (before the log start or end bound
  // it).
  Result<int64_t> SeekTo(int64_t offset, std::optional<uint32_t> since);
  // Takes the counter and the history once the state file is refreshed
  // (SeekTo), lowering `offset` to the lowest cut after `since`.
  Status Positioned(std::optional<uint32_t> since, int64_t* offset);
  bool history_known = false;
  // The reader goes on from where it (or a reader before it) handed
  // batches out: it returned one since it positioned, or was positioned
  // by SeekAfter. A cut below the offset merely sought is not one below
  // records it handed out: it finds that offset again.
  bool continued = false;
  uint32_t rewrites_woken = 0;  // the rewrite WaitForAppend last returned for
  // ReadOptions::bound_by_high_watermark: the partition's name and the
  // high watermark as last read (INT64_MAX when unbounded).
  // The file is reread only when the state file's generation moved (a
  // writer publishes after it stores a new high watermark), or when there
  // is no state file to watch.
  std::optional<std::pair<std::string, int32_t>> hw_partition;
  bool hw_bound = false;
  int64_t hw = INT64_MAX;
  std::optional<uint32_t> hw_generation;  // of the last read; none: read again
  // `high-watermark`, kept open (read only) from one read to the next: a
  // reader waiting for acknowledgements reads it at every wake-up.
  NamedFile hw_file{kHighWatermarkFile, FileSystem::kRead};
  Status ReadHighWatermark();
  int64_t readable_end() const { return std::min(fields.log_end_offset, hw); }
  // Whether the state file's `rewrites` counter moved since the reader was
  // positioned (§9.2): one look at the mapping, read after the bytes it
  // vouches for. Without a state file to read there is no writer to cut.
  bool RewrittenSincePositioned() const {
    if (!state) return false;
    auto f = state->Read();
    return f && f->rewrites != rewrites_seen;
  }
  BatchCursor cursor;
  std::vector<Problem> warnings;
  // R96: which segments are tiered, and their directory, as last listed.
  PartitionListing listing;
  int SegmentDir(int64_t base) const { return listing.DirOf(base, dir_fd.get()); }

  explicit Impl(const DecodeLimits& l) : limits(l), cursor(l) {}

  Status Refresh();
  Status RefreshOnce();
  int64_t ResumeAt(int64_t from, std::span<const EpochEntry> read);
  Status ScanEnd();
  Status ListAgain();
  Status OpenSegment(int64_t base);
  Result<uint64_t> SegmentBound(int64_t base);
  Status PositionAt(int64_t base, uint64_t position);
  Result<uint64_t> FindInSegment(int64_t base, int64_t offset);
  Result<bool> SegmentBelow(int64_t base, int64_t timestamp_ms);
  Status Corrupt(uint64_t position, const char* rule, std::string detail);
  // Next()'s steps. What to do with a batch read: hand it out, hold it
  // (nothing now), or read again (the log was rewritten).
  enum class Verdict : uint8_t { kHandOut, kHold, kAgain };
  Result<Verdict> Vet(const BatchView& view);
  void HandOut(const BatchView& view);
  // When the log was truncated (or recovered) since the reader positioned,
  // finds its offset again (true); false when it was not.
  Result<bool> FindAgainIfRewritten();
  // At the end of the bytes read in the current segment: true when there
  // is more to read (appended, or the next segment), false at the
  // committed end.
  Result<bool> AtSegmentEnd(BatchCursor::Step step);
  Status CommittedBytesLost(uint64_t bound);
  Result<bool> EnterNextSegment();
  // R73: the offset `asked` is below the log start: go on there, saying so.
  Status JumpToLogStart(int64_t asked);
  // SeekTimestamp's steps: the offset in segment `base` to scan from (past
  // the time index entry below `timestamp_ms` the log confirms), and the
  // scan from byte `start` to the first batch not older.
  Result<int64_t> TimeScanStart(int64_t base, int64_t timestamp_ms);
  Status ScanToTimestamp(uint64_t start, int64_t timestamp_ms);
  Status PositionAtEnd();
  bool Follows(const BatchHeader& h, int64_t after) const;
  Status CheckContinuity(const BatchHeader& h);
  bool MayPass(const BatchHeader& h, Bytes bytes, uint64_t position, int64_t prev_end) const;
  std::string FileName(int64_t base) const { return SegmentFileName(base, format::kLogSuffix); }
  void Warn(const std::string& file, uint64_t position, std::string detail) {
    warnings.push_back({file, position, "R23", std::move(detail)});
  }
  std::optional<int64_t> NextSegment(int64_t base) const {
    auto it = std::upper_bound(segments.begin(), segments.end(), base);
    if (it == segments.end() || *it > fields.end_segment_base) return std::nullopt;
    return *it;
  }
};

// Without a usable state file (a copied Kafka directory, say) the committed
// end is where the valid batches of the last segment end.
Status PartitionReader::Impl::ScanEnd() {
  MQ_RETURN_IF_ERROR(ListAgain());
  if (segments.empty()) {
    fields = StateFields{};  // a partition nobody has written yet: empty
    return Status::Ok();
  }
  int64_t base = segments.back();
  std::string name = FileName(base);
  auto f = fs->Open(dir_fd.get(), name, FileSystem::kRead);
  if (!f) return f.error();
  auto size = (*f)->Size();
  if (!size) return size.error();
  BatchCursor c(limits);
  c.Reset(f->get(), name, *size);
  uint64_t p = 0;
  int64_t end = base;
  for (;;) {
    BatchHeader h;
    Bytes b;
    auto step = c.Peek(p, &h, &b);
    MQ_RETURN_IF_ERROR(ReadFailure(step));
    if (!step || *step != BatchCursor::Step::kBatch) break;
    end = h.last_offset() + 1;
    p += h.size_bytes();
  }
  fields.log_start_offset = segments.front();
  fields.log_end_offset = end;
  fields.end_segment_base = base;
  fields.end_position = p;
  return Status::Ok();
}

Status PartitionReader::Impl::ListAgain() {
  auto list = ListSegments(dir_fd.get(), fs, nullptr, &listing);
  if (!list) return list.error();
  segments = std::move(*list);
  return Status::Ok();
}

Status PartitionReader::Impl::ReadHighWatermark() {
  if (!hw_bound) return Status::Ok();
  // The generation before the file: a store it misses moves it again.
  std::optional<uint32_t> gen;
  if (state) gen = state->generation();
  if (gen && gen == hw_generation) return Status::Ok();
  hw_generation = gen;
  auto v = LoadHighWatermark(dir_fd.get(), hw_partition->first, hw_partition->second, fs, &hw_file);
  if (!v && v.error().code() == Code::kNotFound) {
    hw = 0;  // no high watermark yet: nothing is on every in-sync replica
    return Status::Ok();
  }
  if (!v) return v.error();
  hw = *v;
  return Status::Ok();
}

// R38: the high watermark is never above the log end. Both are read again
// when they disagree: a truncation between the two reads lowers both (the
// writer lowers the file first, and bumps `rewrites` when it publishes).
Status PartitionReader::Impl::Refresh() {
  MQ_RETURN_IF_ERROR(RefreshOnce());
  for (int round = 0; hw_bound && hw > fields.log_end_offset; ++round) {
    const uint32_t rewrites = fields.rewrites;
    hw_generation.reset();
    MQ_RETURN_IF_ERROR(RefreshOnce());
    if (hw <= fields.log_end_offset || (fields.rewrites != rewrites && round < 3)) continue;
    if (state && !fields.same_boot())
      return Status(
          Code::kNeedsRecovery,
          fmt::format("{}/{}: R38: needs recovery: the high watermark {} is above the log "
                      "end {} published before a reboot; the next writer to open the "
                      "partition lowers it",
                      dir, HighWatermarkFileAt(dir_fd.get(), fs), hw, fields.log_end_offset));
    return CheckHighWatermarkWithin(dir_fd.get(), hw_partition->first, hw_partition->second, hw,
                                    fields.log_end_offset);
  }
  return Status::Ok();
}

Status PartitionReader::Impl::RefreshOnce() {
  MQ_RETURN_IF_ERROR(ReadHighWatermark());
  if (!state) {
    // Only a missing or invalid state file falls back to the scan below;
    // a failure to open or map one is returned.
    auto s = StateFile::OpenForRead(dir_fd.get(), fs);
    if (s)
      state = std::move(*s);
    else if (s.error().code() != Code::kNotFound && s.error().code() != Code::kCorruption)
      return s.error();
  }
  if (state) {
    auto f = state->Read();
    if (f) {
      bool new_segment = f->end_segment_base != fields.end_segment_base ||
                         f->log_start_offset != fields.log_start_offset || segments.empty();
      fields = *f;
      if (new_segment) MQ_RETURN_IF_ERROR(ListAgain());
      return Status::Ok();
    }
  }
  return ScanEnd();
}

// Where reading that was at offset `from`, after a batch of leader epoch
// `epoch` (-1: none known), goes on in the log as last refreshed: `from`,
// or below it where the log ends, or where `epoch` ends in the leader-epoch
// checkpoint (KIP-320: another leader's batches took the offsets since).
int64_t PartitionReader::Impl::ResumeAt(int64_t from, std::span<const EpochEntry> read) {
  if (read.empty()) return ReaderResumeOffset(from, fields.log_end_offset, read, nullptr);
  // Stored before a batch of a new epoch is published; a checkpoint that
  // cannot be read tells nothing more than the log end.
  auto epochs = LeaderEpochCache::Load(dir_fd.get(), fs);
  return ReaderResumeOffset(from, fields.log_end_offset, read, epochs ? &*epochs : nullptr);
}

// The committed bytes of segment `base` as published now: the committed end
// in the segment holding it, the whole file in a segment rolled before it
// (§9.2: segments before endSegmentBase are committed in full).
Result<uint64_t> PartitionReader::Impl::SegmentBound(int64_t base) {
  if (base == fields.end_segment_base) return fields.end_position;
  if (base > fields.end_segment_base) return uint64_t{0};
  return cur_file->Size();
}

Status PartitionReader::Impl::OpenSegment(int64_t base) {
  std::string name = FileName(base);
  auto f = fs->Open(SegmentDir(base), name, FileSystem::kRead);
  if (!f && f.error().code() == Code::kNotFound && !listing.is_tiered(base)) {
    // R96: moved to the tier since the listing (its local copy is unlinked
    // only once the tier's is published).
    MQ_RETURN_IF_ERROR(ListAgain());
    f = fs->Open(SegmentDir(base), name, FileSystem::kRead);
  }
  if (!f) return f.error();
  cur_file = std::move(*f);
  cur_base = base;
  cur_file_rewrites = fields.rewrites;
  auto bound = SegmentBound(base);
  if (!bound) return bound.error();
  cursor.Reset(cur_file.get(), name, *bound);
  corrupt_at.reset();
  return Status::Ok();
}

Status PartitionReader::Impl::PositionAt(int64_t base, uint64_t position) {
  if (base != cur_base || !cur_file || fields.rewrites != cur_file_rewrites) {
    // Another segment, or the same name after a rewrite: a truncation may
    // have removed the file held and an append created the segment again.
    MQ_RETURN_IF_ERROR(OpenSegment(base));
  } else {
    // Same file: drop buffered bytes (the log may have been truncated and
    // rewritten since) and take the current committed bound.
    auto bound = SegmentBound(base);
    if (!bound) return bound.error();
    cursor.Reset(cur_file.get(), FileName(base), *bound);
  }
  pos = position;
  // At the start of a segment the first batch must start at its base
  // offset (R26) or after it (R10).
  expect = position == 0 ? base : -1;
  corrupt_at.reset();
  return Status::Ok();
}

Status PartitionReader::Impl::Corrupt(uint64_t position, const char* rule, std::string detail) {
  corrupt_at = position;
  return Status::Corruption(cursor.name(), position, rule, std::move(detail));
}

// R10/R11 (offsets increase) and, for delete-policy logs, R26 (offsets
// continue): whether `h` may come where offset `after` is expected next
// (-1: not known).
bool PartitionReader::Impl::Follows(const BatchHeader& h, int64_t after) const {
  return after < 0 || StepOf(h.base_offset, after, offsets) == OffsetStep::kFollows;
}

// Follows() against `expect`, as the corruption status naming the rule.
Status PartitionReader::Impl::CheckContinuity(const BatchHeader& h) {
  if (Follows(h, expect)) return Status::Ok();
  if (StepOf(h.base_offset, expect, offsets) == OffsetStep::kGoesBack) {
    return Corrupt(pos, "R10",
                   fmt::format("baseOffset {} does not follow the offsets before it (expected {})",
                               h.base_offset, expect));
  }
  return Corrupt(
      pos, "R26",
      fmt::format("baseOffset {} skips offsets {}..{}", h.base_offset, expect, h.base_offset - 1));
}

// Whether a scan for a later offset or timestamp may pass over the batch
// `bytes` (header `h`, peeked at `position` of the current segment) without
// handing it out: only a batch that Next() would hand out there, one that
// passes R1-R6 and R19 and follows the offsets before it (`prev_end`, -1 when
// unknown). Its header alone is no proof: lastOffsetDelta and maxTimestamp
// are covered by the CRC (R4), and a damaged one may claim offsets or times
// that are not its own. A scan stops at any other batch and leaves it to
// Next(), which reports it (§11.1).
bool PartitionReader::Impl::MayPass(const BatchHeader& h, Bytes bytes, uint64_t position,
                                    int64_t prev_end) const {
  return Follows(h, prev_end) && BatchView::Parse(bytes, limits, cursor.name(), position);
}

// Byte position in segment `base` of the batch holding `offset` (or of the
// first batch after it): the offset index's largest entry <= offset, checked
// against the batch it names, then a forward scan of headers. Leaves
// `expect` at the offset that batch must start at when it is known.
Result<uint64_t> PartitionReader::Impl::FindInSegment(int64_t base, int64_t offset) {
  MQ_RETURN_IF_ERROR(PositionAt(base, 0));
  uint64_t start = 0;
  int64_t prev_end = base;  // the offset the batch at `start` should start at; -1 unknown
  {
    auto e = LogSegment::FindOffsetEntry(fs, SegmentDir(base), base, offset);
    if (e) {
      BatchHeader h;
      Bytes b;
      auto step = e->position < cursor.end() ? cursor.Peek(e->position, &h, &b)
                                             : Result<BatchCursor::Step>(BatchCursor::Step::kEnd);
      MQ_RETURN_IF_ERROR(ReadFailure(step));
      if (step && *step == BatchCursor::Step::kBatch && h.last_offset() == e->offset) {
        start = e->position;
        prev_end = -1;
      } else {
        Warn(SegmentFileName(base, format::kIndexSuffix), 0,
             fmt::format("entry (offset {}, position {}) does not name a batch of {}; "
                         "scanning the log",
                         e->offset, e->position, FileName(base)));
      }
    }
  }
  for (uint64_t p = start;;) {
    BatchHeader h;
    Bytes b;
    auto step = cursor.Peek(p, &h, &b);
    MQ_RETURN_IF_ERROR(ReadFailure(step));
    if (!step || *step != BatchCursor::Step::kBatch || h.last_offset() >= offset ||
        !MayPass(h, b, p, prev_end)) {
      expect = prev_end;  // let Next() report any corruption at p
      return p;
    }
    prev_end = h.last_offset() + 1;
    p += h.size_bytes();
  }
}

// True when every batch of the rolled segment `base` has a max timestamp
// below `timestamp_ms`. The time index's last entry says so cheaply (§8.2);
// it is believed only if the batch it names carries that timestamp, else
// the segment's batches are read. A damaged batch is not below anything:
// false, and the seek stops in this segment, where Next() reports it.
Result<bool> PartitionReader::Impl::SegmentBelow(int64_t base, int64_t timestamp_ms) {
  uint64_t at = 0;  // the entry's byte position in the time index
  if (auto last_entry = LogSegment::LastTimeEntry(fs, SegmentDir(base), base, &at)) {
    const TimeIndexEntry& last = *last_entry;
    auto p = FindInSegment(base, last.offset);
    if (!p) return p.error();
    BatchHeader h;
    Bytes b;
    auto step = cursor.Peek(*p, &h, &b);
    MQ_RETURN_IF_ERROR(ReadFailure(step));
    if (step && *step == BatchCursor::Step::kBatch && h.last_offset() == last.offset &&
        h.max_timestamp == last.timestamp)
      return last.timestamp < timestamp_ms && MayPass(h, b, *p, expect);
    Warn(SegmentFileName(base, format::kTimeIndexSuffix), at,
         fmt::format("last entry (timestamp {}, offset {}) does not match the batch at that "
                     "offset in {}; scanning the log",
                     last.timestamp, last.offset, FileName(base)));
  }
  MQ_RETURN_IF_ERROR(PositionAt(base, 0));
  int64_t prev_end = base;
  for (uint64_t p = 0;;) {
    BatchHeader h;
    Bytes b;
    auto step = cursor.Peek(p, &h, &b);
    MQ_RETURN_IF_ERROR(ReadFailure(step));
    if (step && *step == BatchCursor::Step::kEnd) return true;
    if (!step || *step != BatchCursor::Step::kBatch || h.max_timestamp >= timestamp_ms ||
        !MayPass(h, b, p, prev_end))
      return false;
    prev_end = h.last_offset() + 1;
    p += h.size_bytes();
  }
}

PartitionReader::PartitionReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PartitionReader::~PartitionReader() = default;

Result<std::unique_ptr<PartitionReader>> PartitionReader::Open(const std::string& dir,
                                                               const DecodeLimits& limits) {
  ReadOptions options;
  options.limits = limits;
  return Open(dir, options);
}

Result<std::unique_ptr<PartitionReader>> PartitionReader::Open(const std::string& dir,
                                                               const ReadOptions& options) {
  auto impl = std::make_unique<Impl>(options.limits);
  impl->dir = dir;
  impl->offsets = options.offsets;
  if (options.fs) impl->fs = options.fs;
  auto dfd = OpenDirectory(dir, false, impl->fs);
  if (!dfd) return dfd.error();
  impl->dir_fd = std::move(*dfd);
  // A planted symlink is refused, a failure to read the file returned
  // (Refresh); a missing or invalid one falls back to a scan.
  auto s = StateFile::OpenForRead(impl->dir_fd.get(), impl->fs);
  if (s) {
    impl->state = std::move(*s);
  } else if (s.error().code() != Code::kNotFound && s.error().code() != Code::kCorruption) {
    return s.error();
  }
  if (options.bound_by_high_watermark) {
    impl->hw_partition = PartitionOfDirectory(dir);
    if (!impl->hw_partition)
      return Status(Code::kInvalidArgument,
                    dir + ": a high watermark needs a partition directory named <topic>-<n>");
    impl->hw_bound = true;
  }
  MQ_RETURN_IF_ERROR(impl->Refresh());
  return std::unique_ptr<PartitionReader>(new PartitionReader(std::move(impl)));
}

int64_t PartitionReader::log_start_offset() {
  (void)impl_->Refresh();
  return impl_->fields.log_start_offset;
}

int64_t PartitionReader::end_offset() {
  (void)impl_->Refresh();
  return impl_->readable_end();
}

std::optional<uint32_t> PartitionReader::rewrites() {
  Impl& r = *impl_;
  if (!r.Refresh().ok() || !r.state) return std::nullopt;
  auto f = r.state->Read();
  if (!f) return std::nullopt;
  return f->rewrites;
}

Status PartitionReader::Seek(int64_t offset) {
  auto to = impl_->SeekTo(offset, std::nullopt);
  return to ? Status::Ok() : to.error();
}

Status PartitionReader::Impl::Positioned(std::optional<uint32_t> since, int64_t* offset) {
  rewrites_seen = fields.rewrites;
  auto history = ReadHistory();
  if (!history) return history.error();
  held_at.reset();
  if (state) {
    auto lowest = since ? LowestCutAfter(*history, *since) : std::nullopt;
    if (lowest && *lowest < *offset) *offset = *lowest;
    held_at = LowestCutAfter(*history, rewrites_seen);
  }
  history_known = state.has_value();
  continued = false;
  read_epochs.clear();
  return Status::Ok();
}

Result<int64_t> PartitionReader::Impl::SeekTo(int64_t offset, std::optional<uint32_t> since) {
  MQ_RETURN_IF_ERROR(Refresh());
  // The history right after the state file: every entry whose rewrites
  // value the counter read has reached is a cut made, any other one a
  // truncation under way (segment.md §9.4). Without a state file (a scan
  // found the end) no counter was taken, and nothing is known to be new
  // against the history either.
  MQ_RETURN_IF_ERROR(Positioned(since, &offset));
  const int64_t to = offset;
  if (segments.empty()) return to;  // nothing written yet
  if (offset < fields.log_start_offset && offset >= 0)
    out_of_range = OffsetOutOfRange{offset, fields.log_start_offset};
  offset = std::max(offset, fields.log_start_offset);
  if (offset >= fields.log_end_offset) {
    MQ_RETURN_IF_ERROR(PositionAt(fields.end_segment_base, fields.end_position));
    expect = fields.log_end_offset;
    next_offset = fields.log_end_offset;
    return to;
  }
  next_offset = offset;
  auto it = std::upper_bound(segments.begin(), segments.end(), offset);
  if (it == segments.begin()) {
    MQ_RETURN_IF_ERROR(PositionAt(segments.front(), 0));
    return to;
  }
  int64_t base = *(it - 1);
  auto p = FindInSegment(base, offset);
  if (!p) {
    if (p.error().code() != Code::kNotFound) return p.error();
    // Deleted under us by retention: start again from the new log start.
    MQ_RETURN_IF_ERROR(ListAgain());
    auto again = SeekTo(fields.log_start_offset, std::nullopt);
    if (!again) return again.error();
    return to;
  }
  pos = *p;
  return to;
}

Status PartitionReader::SeekAfter(int64_t offset, int32_t epoch) {
  Impl& r = *impl_;
  MQ_RETURN_IF_ERROR(r.Refresh());
  std::vector<EpochEntry> read;
  if (epoch >= 0) read.push_back({epoch, offset});
  const int64_t to = r.segments.empty() ? offset : r.ResumeAt(offset, read);
  if (to < offset) r.cut = std::min(to, r.cut.value_or(to));
  return Seek(to);
}

Status PartitionReader::SeekAfter(int64_t offset, const ReaderTrail& trail) {
  Impl& r = *impl_;
  MQ_RETURN_IF_ERROR(r.Refresh());
  std::vector<EpochEntry> read;
  for (const auto& [epoch, start] : trail.epochs) read.push_back({epoch, start});
  int64_t to = r.segments.empty() ? offset : r.ResumeAt(offset, read);
  // Without leader epochs, no further than the lowest cut the history
  // names since the trail's counter (segment.md §9.4).
  std::optional<uint32_t> since;
  if (r.state && trail.rewrites && read.empty()) since = trail.rewrites;
  auto landed = r.SeekTo(to, since);
  if (!landed) return landed.error();
  to = *landed;
  if (to < offset) r.cut = std::min(to, r.cut.value_or(to));
  // What it handed out below `to` still agrees with the log.
  while (!read.empty() && read.back().start_offset >= to) read.pop_back();
  r.read_epochs = std::move(read);
  r.continued = true;
  return Status::Ok();
}

ReaderTrail PartitionReader::trail() const {
  const Impl& r = *impl_;
  ReaderTrail t;
  for (const EpochEntry& e : r.read_epochs) t.epochs.emplace_back(e.epoch, e.start_offset);
  if (r.state && r.history_known) t.rewrites = r.rewrites_seen;
  return t;
}

Result<int64_t> PartitionReader::Impl::TimeScanStart(int64_t base, int64_t timestamp_ms) {
  // Every batch up to the largest time entry below `timestamp_ms` is older
  // (§8.3), if the log confirms that entry.
  std::optional<TimeIndexEntry> hint =
      LogSegment::TimeEntryBelow(fs, SegmentDir(base), base, timestamp_ms);
  if (!hint) return base;
  auto p = FindInSegment(base, hint->offset);
  if (!p) return p.error();
  BatchHeader h;
  Bytes b;
  auto step = cursor.Peek(*p, &h, &b);
  MQ_RETURN_IF_ERROR(ReadFailure(step));
  if (step && *step == BatchCursor::Step::kBatch && h.last_offset() == hint->offset &&
      h.max_timestamp == hint->timestamp && hint->timestamp < timestamp_ms)
    return hint->offset + 1;
  Warn(SegmentFileName(base, format::kTimeIndexSuffix), 0,
       fmt::format("entry (timestamp {}, offset {}) does not match the batch at that "
                   "offset in {}; scanning the log",
                   hint->timestamp, hint->offset, FileName(base)));
  return base;
}

Status PartitionReader::Impl::ScanToTimestamp(uint64_t start, int64_t timestamp_ms) {
  int64_t at = expect;
  for (uint64_t p = start;;) {
    BatchHeader h;
    Bytes b;
    auto step = cursor.Peek(p, &h, &b);
    MQ_RETURN_IF_ERROR(ReadFailure(step));
    if (!step || *step != BatchCursor::Step::kBatch || h.max_timestamp >= timestamp_ms ||
        !MayPass(h, b, p, at)) {
      // Found, or damage that Next() will report where it is.
      pos = p;
      expect = at;
      next_offset = at;  // where the batch at p must start, if known
      return Status::Ok();
    }
    at = h.last_offset() + 1;
    p += h.size_bytes();
  }
}

Status PartitionReader::Impl::PositionAtEnd() {
  MQ_RETURN_IF_ERROR(PositionAt(fields.end_segment_base, fields.end_position));
  expect = fields.log_end_offset;
  next_offset = fields.log_end_offset;
  return Status::Ok();
}

Status PartitionReader::SeekTimestamp(int64_t timestamp_ms) {
  Impl& r = *impl_;
  MQ_RETURN_IF_ERROR(r.Refresh());
  int64_t unused = 0;
  MQ_RETURN_IF_ERROR(r.Positioned(std::nullopt, &unused));
  for (int64_t base : r.segments) {
    if (base > r.fields.end_segment_base) break;
    auto next = r.NextSegment(base);
    if (next && *next <= r.fields.log_start_offset) continue;
    if (base != r.fields.end_segment_base) {
      auto below = r.SegmentBelow(base, timestamp_ms);
      if (!below) return below.error();
      if (*below) continue;
    }
    // In this segment.
    auto from_offset = r.TimeScanStart(base, timestamp_ms);
    if (!from_offset) return from_offset.error();
    auto start = r.FindInSegment(base, *from_offset);
    if (!start) return start.error();
    return r.ScanToTimestamp(*start, timestamp_ms);
  }
  if (r.segments.empty()) return Status::Ok();
  return r.PositionAtEnd();
}

// The log was truncated (or recovered) since we positioned: our byte
// position may no longer be a batch boundary. Find our offset again, or
// where the log was cut below it: its end now, or where the leader epoch
// of the batch last returned ends in the leader-epoch checkpoint (KIP-320),
// when another leader's batches took the offsets since.
Result<bool> PartitionReader::Impl::FindAgainIfRewritten() {
  MQ_RETURN_IF_ERROR(Refresh());
  if (fields.rewrites == rewrites_seen) return false;
  const uint32_t since = rewrites_seen;
  const bool from_known = next_offset >= 0;
  int64_t from = next_offset >= 0 ? next_offset : fields.log_start_offset;
  int64_t to = ResumeAt(from, read_epochs);
  const bool was_continued = continued;
  // Leader epochs say where what it read stops agreeing with the log;
  // without them, the truncation history does: no further than the
  // lowest cut published since it positioned (or under way), so that
  // records appended at the cut offsets since are not passed over as
  // the ones handed out there.
  std::vector<EpochEntry> kept = std::move(read_epochs);
  auto landed = SeekTo(to, was_continued && kept.empty() ? std::optional(since) : std::nullopt);
  if (!landed) return landed.error();
  to = *landed;
  if (from_known && to < from) cut = std::min(to, cut.value_or(to));
  // What it read below `to` still agrees with the log.
  while (!kept.empty() && kept.back().start_offset >= to) kept.pop_back();
  read_epochs = std::move(kept);
  continued = was_continued;
  return true;
}

Result<PartitionReader::Impl::Verdict> PartitionReader::Impl::Vet(const BatchView& view) {
  // Above the high watermark: not handed out (yet), position kept,
  // unless a rewrite since it positioned may have cut these bytes: then
  // its offset is found again in the log as it is now (§9.4).
  if (view.header().last_offset() >= hw) {
    MQ_RETURN_IF_ERROR(Refresh());
    if (view.header().last_offset() >= hw) {
      auto again = FindAgainIfRewritten();
      if (!again) return again.error();
      return *again ? Verdict::kAgain : Verdict::kHold;
    }
  }
  // The bytes may be older than the log: read into the cursor's buffer
  // (with the batches after the one asked for), or kept above the high
  // watermark, before a truncation cut them and a writer put others in
  // their place. Never handed out then: the offset is found again in
  // the log as it is now (§9.2).
  if (RewrittenSincePositioned()) {
    auto again = FindAgainIfRewritten();
    if (!again) return again.error();
    if (*again) return Verdict::kAgain;
  }
  // At or past the cut of a truncation under way when it positioned:
  // records about to go, or ones it handed out before the truncation
  // published before it went back to its cut. Not handed out until
  // the counter moves (segment.md §9.4).
  if (held_at && view.header().last_offset() >= *held_at) return Verdict::kHold;
  MQ_RETURN_IF_ERROR(CheckContinuity(view.header()));
  return Verdict::kHandOut;
}

void PartitionReader::Impl::HandOut(const BatchView& view) {
  const BatchHeader& h = view.header();
  if (const int32_t epoch = h.partition_leader_epoch;
      epoch >= 0 && (read_epochs.empty() || read_epochs.back().epoch != epoch))
    read_epochs.push_back({epoch, h.base_offset});
  // R91: the offset sought, or the log start it went on at, may lie inside
  // the batch: the records below it were not asked for (or are deleted).
  first_offset = std::max(h.base_offset, next_offset);
  next_offset = h.last_offset() + 1;
  continued = true;
  expect = next_offset;
  last_pos = pos;
  pos += h.size_bytes();
}

// The file ends inside a batch (or before our position) although these
// bytes were committed (§9.2): they were lost or cut.
Status PartitionReader::Impl::CommittedBytesLost(uint64_t bound) {
  auto size = cur_file->Size();
  if (state && !fields.same_boot()) {
    // R28: the committed end was published before a reboot and never
    // fsynced: the next writer keeps the valid prefix. Not corruption.
    corrupt_at = pos;
    return Status(Code::kNeedsRecovery,
                  fmt::format("{}: position {}: R28: needs recovery: the segment ends at byte "
                              "{} but the committed end, published before a reboot, is at {}; "
                              "the next writer to open the partition repairs it",
                              cursor.name(), pos, size ? *size : 0, std::max(bound, pos)));
  }
  return Corrupt(pos, "R1",
                 fmt::format("the segment ends at byte {} but {} bytes of it were committed",
                             size ? *size : 0, std::max(bound, pos)));
}

Status PartitionReader::Impl::JumpToLogStart(int64_t asked) {
  auto sought = SeekTo(fields.log_start_offset, std::nullopt);
  if (!sought) return sought.error();
  out_of_range = OffsetOutOfRange{asked, fields.log_start_offset};
  return Status::Ok();
}

Result<bool> PartitionReader::Impl::EnterNextSegment() {
  auto next = NextSegment(cur_base);
  if (!next) return false;
  const int64_t after = expect;
  const OffsetStep order = after >= 0 ? StepOf(*next, after, offsets) : OffsetStep::kFollows;
  if (order != OffsetStep::kFollows && after < fields.log_start_offset) {
    // Not a gap in the log: retention deleted the segments after the one
    // read (R73), and the reader goes on at the log start, saying so.
    MQ_RETURN_IF_ERROR(JumpToLogStart(after));
    return true;
  }
  if (order != OffsetStep::kFollows) {
    return Corrupt(pos, order == OffsetStep::kGoesBack ? "R11" : "R26",
                   fmt::format("the segment ends at offset {} but the next one, {}, starts at {}",
                               after - 1, FileName(*next), *next));
  }
  Status at = PositionAt(*next, 0);
  if (at.code() == Code::kNotFound) {
    // Deleted by retention since the reader listed the segments (R73,
    // R77): it goes on at the log start, never past a gap unannounced
    // (TakeOutOfRange).
    MQ_RETURN_IF_ERROR(Refresh());
    if (*next >= fields.log_start_offset) return at;
    MQ_RETURN_IF_ERROR(ListAgain());
    MQ_RETURN_IF_ERROR(JumpToLogStart(after >= 0 ? after : *next));
    return true;
  }
  MQ_RETURN_IF_ERROR(at);
  if (after >= 0 && offsets == OffsetPolicy::kGapsAllowed) expect = std::max(after, *next);
  return true;
}

Result<bool> PartitionReader::Impl::AtSegmentEnd(BatchCursor::Step step) {
  auto bound = SegmentBound(cur_base);
  if (!bound) return bound.error();
  if (step == BatchCursor::Step::kTorn || *bound < pos) return CommittedBytesLost(*bound);
  if (*bound > pos) {
    // More committed bytes in this segment (appended, or the segment was
    // rolled since we last looked): read them before moving on.
    cursor.set_end(*bound);
    return true;
  }
  // This segment is read to its committed end.
  return EnterNextSegment();
}

Result<std::optional<BatchView>> PartitionReader::Next() {
  Impl& r = *impl_;
  if (r.cur_base < 0) {
    MQ_RETURN_IF_ERROR(Seek(r.fields.log_start_offset));
    if (r.cur_base < 0) return std::optional<BatchView>();  // no segment yet
  }
  for (;;) {
    BatchView view;
    auto step = r.cursor.Read(r.pos, &view);
    if (step && *step == BatchCursor::Step::kBatch) {
      auto verdict = r.Vet(view);
      if (!verdict) return verdict.error();
      if (*verdict == Impl::Verdict::kAgain) continue;
      if (*verdict == Impl::Verdict::kHold) return std::optional<BatchView>();
      r.HandOut(view);
      return std::optional<BatchView>(view);
    }
    auto again = r.FindAgainIfRewritten();
    if (!again) return again.error();
    if (*again) continue;
    if (!step) {
      r.corrupt_at = r.pos;
      return step.error();
    }
    auto more = r.AtSegmentEnd(*step);
    if (!more) return more.error();
    if (!*more) return std::optional<BatchView>();
  }
}

int64_t PartitionReader::first_offset() const { return impl_->first_offset; }

Status PartitionReader::SkipCorrupt() {
  Impl& r = *impl_;
  if (!r.corrupt_at) return Status::Ok();
  auto next = r.cursor.FindNextValid(*r.corrupt_at);
  if (!next) return next.error();
  r.pos = next->value_or(r.cursor.end());
  r.expect = -1;
  r.corrupt_at.reset();
  return Status::Ok();
}

LogPosition PartitionReader::position() const {
  return {SegmentFileName(impl_->cur_base, format::kLogSuffix), impl_->last_pos};
}

std::vector<Problem> PartitionReader::TakeWarnings() { return std::exchange(impl_->warnings, {}); }

std::optional<int64_t> PartitionReader::TakeCut() {
  return std::exchange(impl_->cut, std::nullopt);
}

std::optional<OffsetOutOfRange> PartitionReader::TakeOutOfRange() {
  return std::exchange(impl_->out_of_range, std::nullopt);
}

Status OffsetOutOfRange::status(const std::string& dir) const {
  return Status(Code::kNotFound,
                fmt::format("{}: offset {} is out of range: retention deleted the offsets below "
                            "the log start {}",
                            dir, offset, log_start_offset));
}

uint32_t PartitionReader::positioned_rewrites() const { return impl_->rewrites_seen; }

bool PartitionReader::WaitForAppend(int64_t known_end, int timeout_ms,
                                    std::optional<uint32_t> known_rewrites) {
  Impl& r = *impl_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (r.state && r.state->Replaced(r.dir_fd.get())) r.state.reset();
    uint32_t gen = r.state ? r.state->generation() : 0;
    if (!r.Refresh().ok()) return false;
    if (r.readable_end() > known_end) return true;
    // A rewrite since the reader positioned (or the one waited for):
    // Next() finds its offset again, and may go back to where the log was
    // cut (TakeCut). Once per rewrite.
    const bool rewritten = known_rewrites ? r.fields.rewrites != *known_rewrites
                                          : r.cur_base >= 0 && r.fields.rewrites != r.rewrites_seen;
    if (rewritten && r.fields.rewrites != r.rewrites_woken) {
      r.rewrites_woken = r.fields.rewrites;
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return false;
    if (r.state) {
      // R100: a reader not bounded by the high watermark waits for a field
      // to change (the end, a rewrite): a publication of the same fields
      // (the HW raised) leaves it asleep.
      r.state->Wait(
          gen, static_cast<int>(std::min<int64_t>(left, 1000)),
          r.hw_bound ? StateFile::WaitFor::kAnyPublication : StateFile::WaitFor::kFieldChange);
    } else {
      // No state file yet: nothing to wait on until a writer creates it.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(left, 10)));
    }
  }
}

namespace {

// The producer state of the partition at `dir` for `producer_id`: its
// newest snapshot, then the batches after it replayed (nullopt: no
// directory, so nothing is anyone's).
Result<std::optional<ProducerStateTable>> ReadProducerState(const std::string& dir,
                                                            int64_t producer_id,
                                                            FileSystem* fs = nullptr) {
  PartitionReader::Impl r{DecodeLimits{}};
  r.dir = dir;
  if (fs) r.fs = fs;
  auto dfd = OpenDirectory(dir, false, r.fs);
  // A partition nobody has written yet may have no directory: nothing there
  // is this producer's (an empty directory reads as an empty log below).
  if (!dfd && dfd.error().code() == Code::kNotFound) return std::optional<ProducerStateTable>();
  if (!dfd) return dfd.error();
  r.dir_fd = std::move(*dfd);
  MQ_RETURN_IF_ERROR(r.Refresh());
  ProducerStateTable table;
  // Nothing was ever appended: no snapshot or batch to read.
  if (r.fields.log_end_offset == 0) return std::optional<ProducerStateTable>(std::move(table));
  // Readers never delete snapshots (LoadSnapshot drops those past the end
  // it is given): hand it no end, and none past the committed end (a
  // writer rolling in an append not published yet, or one that died there,
  // wrote it; the next writer removes it).
  std::vector<int64_t> snapshots;
  auto listed = ListSegments(r.dir_fd.get(), r.fs, &snapshots);
  if (!listed) return listed.error();
  std::erase_if(snapshots, [&](int64_t at) { return at > r.fields.log_end_offset; });
  auto from = table.LoadSnapshot(r.dir_fd.get(), INT64_MAX, &snapshots, r.fs);
  if (!from) return from.error();
  for (int64_t base : r.segments) {
    if (base > r.fields.end_segment_base) break;
    auto next = r.NextSegment(base);
    if (next && *next <= *from) continue;
    uint64_t to = base == r.fields.end_segment_base ? r.fields.end_position : UINT64_MAX;
    MQ_RETURN_IF_ERROR(ForEachHeaderFrom(
        r.SegmentDir(base), r.fs, r.limits, base, *from, to, [&](const BatchHeader& h, uint64_t) {
          if (h.producer_id == producer_id && h.base_offset >= *from) table.Replay(h);
        }));
  }
  return std::optional<ProducerStateTable>(std::move(table));
}

}  // namespace

Result<bool> MayKeepPastCommittedEnd(const std::string& dir, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  // No directory: nothing was written, nothing to recover.
  if (!dfd && dfd.error().code() == Code::kNotFound) return false;
  if (!dfd) return dfd.error();
  // R24/R34: no state file, or one failing R15, is rebuilt from the log;
  // with no segment either (a topic's new partition) there is no log.
  auto state = StateFile::OpenForRead(dfd->get(), fs);
  if (!state && state.error().code() == Code::kNotFound) {
    auto segments = ListSegments(dfd->get(), fs);
    if (!segments) return segments.error();
    return !segments->empty();
  }
  if (!state && state.error().code() == Code::kCorruption) return true;
  if (!state) return state.error();
  uint32_t generation = 0;
  auto fields = state->Read(&generation);
  if (!fields && fields.error().code() == Code::kCorruption) return true;
  if (!fields) return fields.error();
  // A writer died inside a publication (the generation stayed odd), or the
  // end was published before a reboot (R28): recovery keeps the valid
  // prefix, which may reach past the committed end.
  if ((generation & 1) != 0 || !fields->same_boot()) return true;
  // R40: a pending truncation is completed by the next writer.
  auto intent = fs->StatAt(dfd->get(), format::kTruncateIntentName);
  if (intent) return true;
  if (intent.error().code() != Code::kNotFound) return intent.error();
  // R27: a segment ending before the committed end on this boot is damage
  // a writer recovers from. One longer holds bytes never published, which
  // a writer cuts (or a live writer's append, not published yet).
  auto segment =
      fs->StatAt(dfd->get(), SegmentFileName(fields->end_segment_base, format::kLogSuffix));
  if (!segment && segment.error().code() == Code::kNotFound) return true;
  if (!segment) return segment.error();
  return segment->size < fields->end_position;
}

Result<std::optional<int32_t>> LastProducerSequence(const std::string& dir, int64_t producer_id) {
  auto table = ReadProducerState(dir, producer_id);
  if (!table) return table.error();
  if (!*table) return std::optional<int32_t>();
  return (*table)->LastSequence(producer_id);
}

Result<std::optional<ProducerBatch>> LastProducerBatch(const std::string& dir, int64_t producer_id,
                                                       const ReadOptions& options) {
  auto table = ReadProducerState(dir, producer_id, options.fs);
  if (!table) return table.error();
  if (!*table) return std::optional<ProducerBatch>();
  auto it = (*table)->entries().find(producer_id);
  if (it == (*table)->entries().end() || it->second.batches.empty())
    return std::optional<ProducerBatch>();
  const ProducerBatchInfo& last = it->second.batches.back();
  ProducerBatch out;
  out.base_offset = last.last_offset - last.offset_delta;
  out.last_offset = last.last_offset;
  out.first_sequence = last.first_sequence;
  out.last_sequence = last.last_sequence;
  // Only this batch is read: the state says where it is.
  auto reader = PartitionReader::Open(dir, options);
  if (!reader) return reader.error();
  if (out.base_offset < (*reader)->log_start_offset()) return std::optional<ProducerBatch>(out);
  MQ_RETURN_IF_ERROR((*reader)->Seek(out.base_offset));
  for (;;) {
    auto batch = (*reader)->Next();
    if (!batch) return batch.error();
    if (!*batch) break;
    const BatchHeader& h = (*batch)->header();
    const int64_t last_offset = h.base_offset + h.last_offset_delta;
    if (last_offset < out.base_offset) continue;
    if (h.base_offset != out.base_offset || h.producer_id != producer_id) {
      LogPosition pos = (*reader)->position();
      return Status::Corruption(dir + "/" + pos.file, pos.position, "P2",
                                fmt::format("producer {}: its last batch should start at offset "
                                            "{}, the log has a batch at {} there",
                                            producer_id, out.base_offset, h.base_offset));
    }
    Bytes b = (*batch)->bytes();
    out.bytes.assign(b.begin(), b.end());
    break;
  }
  return std::optional<ProducerBatch>(std::move(out));
}

}  // namespace mq
