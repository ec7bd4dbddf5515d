// PartitionWriter (format-spec/segment.md §6-§9, §12).
//
// Every operation runs under the partition's writer lock and starts with
// Sync(): if another writer published since our last look (the state file's
// generation moved) we catch up with the tail it left; bytes past the
// committed end belong to an append that never returned (its writer died),
// so they are cut. Then we write, (fsync,) publish, unlock.
#include <algorithm>
#include <chrono>
#include <climits>
#include <unordered_map>

#include <fmt/format.h>

#include "format.h"
#include "mapped_file.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "offset_index.h"
#include "producer_state.h"
#include "recovery.h"
#include "segment.h"
#include "state_file.h"
#include "writer_lock.h"

namespace mq {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint64_t kMaxIndexFileBytes = 1ull << 31;

// One batch of an Append call.
struct Piece {
  size_t at = 0;  // byte position in the caller's buffer
  BatchHeader header;
  std::optional<AppendResult> duplicate;
};

}  // namespace

struct PartitionWriter::Impl {
  std::string dir;
  LogConfig config;
  FileSystem* fs = nullptr;
  UniqueFd dir_fd;
  WriterLock lock;
  StateFile state;
  uint32_t generation = 0;  // of our last look at the state file
  StateFields fields;       // committed state as of that look
  std::vector<int64_t> segments;
  Status poisoned;          // non-OK after a failed write or fsync: final

  // The active (last) segment.
  std::unique_ptr<File> log, index, timeindex;
  IndexBuilder ib;
  int64_t first_max_ts = -1;  // first batch's max timestamp: segment age
  std::vector<std::byte> offset_buf, time_buf;
  bool dir_dirty = false;
  int64_t last_sync_ms = 0;
  ProducerStateTable producers;
  int64_t snapshot_at = -1;  // offset of the snapshot `producers` equals, if known
  // Where an open would start replaying: the segment holding the newest
  // snapshot's offset and the position there of the first batch after it
  // (-1: not the active segment, or unknown).
  int64_t snapshot_segment = -1;
  uint64_t snapshot_pos = 0;
  // False after an open that deferred building `producers` (and the
  // snapshot fields above): EnsureProducers() builds them when first
  // needed, so a writer that appends only batches without a producer id
  // never reads the log back. `newest_snapshot`: the offset of the newest
  // snapshot file at that open (-1: none).
  bool producers_loaded = true;
  int64_t newest_snapshot = -1;
  bool closed = false;
  bool stale_check = true;  // check the active file size at the next Sync

  FileSystem* Fs() { return fs; }
  uint64_t SegmentLimit() const {
    return std::min<uint64_t>(config.segment_bytes, format::kMaxSegmentBytes);
  }

  Status Poison(Status s) {
    if (poisoned.ok())
      poisoned = Status(s.code() == Code::kOk ? Code::kIoError : s.code(),
                        fmt::format("{}: writer unusable after: {}", dir, s.message()));
    return s;
  }
  Status CheckUsable() const {
    if (!poisoned.ok()) return poisoned;
    if (closed) return Status(Code::kInvalidArgument, dir + ": writer is closed");
    return Status::Ok();
  }

  Status Recover(RecoveryReport* report, bool recreated);
  Result<bool> OpenSameBoot(const StateFields& prev, std::vector<int64_t> list,
                            const std::vector<int64_t>& snapshots, RecoveryReport* report);
  Status OpenActive(int64_t base, uint64_t size);
  Result<bool> OpenActive(int64_t base, uint64_t size, std::unique_ptr<File> open_log,
                          std::optional<uint64_t> check_log_size);
  Status Sync();
  Status Publish();
  // `active_log`: the active segment's log, open on the file the committed
  // state names (null: opened when needed); `snapshots`: the snapshot
  // offsets of a listing made under the lock (null: listed here).
  Status ReplayProducers(File* active_log = nullptr,
                         const std::vector<int64_t>* snapshots = nullptr);
  Status ReplayRange(int64_t from_base, uint64_t from_pos);
  Status EnsureProducers();
  Status Roll();
  Status WriteIndexBuffers();
  Status SyncAll();
};

Status PartitionWriter::Impl::OpenActive(int64_t base, uint64_t size) {
  auto opened = OpenActive(base, size, nullptr, std::nullopt);
  if (!opened) return opened.error();
  return Status::Ok();
}

// Opens the active segment's files (the log may come open already) and
// restores the indexing state from its index files: entries past the
// committed end (left by a writer that died before publishing) are
// dropped, then the batches after the last indexed one are walked. With
// `check_log_size` (the log's size before it was cut to `size`) the indexes
// first get the cheap checks of R25 (R27: entries past the committed end
// are skipped); when those fail it returns false, having changed nothing.
Result<bool> PartitionWriter::Impl::OpenActive(int64_t base, uint64_t size,
                                               std::unique_ptr<File> open_log,
                                               std::optional<uint64_t> check_log_size) {
  auto open = [&](const char* suffix) { return fs->Open(dir_fd.get(), SegmentFileName(base, suffix), FileSystem::kCreate); };
  if (!open_log) {
    auto l = open(format::kLogSuffix);
    if (!l) return l.error();
    open_log = std::move(*l);
  }
  const bool check = check_log_size.has_value();
  // Checked, a missing index fails the check (it is rebuilt and reported).
  auto open_index = [&](const char* suffix) -> Result<std::unique_ptr<File>> {
    if (!check) return open(suffix);
    return fs->Open(dir_fd.get(), SegmentFileName(base, suffix), FileSystem::kReadWrite);
  };
  auto x = open_index(format::kIndexSuffix);
  if (check && !x && x.error().code() == Code::kNotFound) return false;
  if (!x) return x.error();
  auto t = open_index(format::kTimeIndexSuffix);
  if (check && !t && t.error().code() == Code::kNotFound) return false;
  if (!t) return t.error();
  log = std::move(open_log);
  index = std::move(*x);
  timeindex = std::move(*t);
  ib = IndexBuilder(base, config.index_interval_bytes);
  first_max_ts = -1;
  const int64_t end_offset = fields.log_end_offset;

  std::optional<OffsetIndexEntry> last_entry;
  std::optional<TimeIndexEntry> last_time;
  auto isize = index->Size();
  if (!isize) return isize.error();
  auto tsize = timeindex->Size();
  if (!tsize) return tsize.error();
  if (check && (*isize % format::kOffsetIndexEntrySize != 0 ||
                *tsize % format::kTimeIndexEntrySize != 0))
    return false;
  uint64_t n = *isize / format::kOffsetIndexEntrySize;
  std::byte e[format::kTimeIndexEntrySize];
  while (n > 0) {
    auto got = index->ReadAt((n - 1) * format::kOffsetIndexEntrySize, std::span(e, 8));
    if (!got) return got.error();
    auto entry = DecodeOffsetEntry(e, base);
    if (*got == 8 && entry.position < size && entry.offset < end_offset) {
      last_entry = entry;
      break;
    }
    // Past the committed end on both counts, inside the log as it was: an
    // append that was never published. Anything else is a bad index.
    if (check && !(entry.offset >= end_offset && entry.position >= size &&
                   entry.position < *check_log_size))
      return false;
    --n;
  }
  if (check && last_entry) {
    if (last_entry->offset < base) return false;
    std::byte h[format::kBatchHeaderSize];
    auto got = log->ReadAt(last_entry->position, h);
    if (!got) return got.error();
    if (*got != sizeof h) return false;
    BatchHeader header = DecodeBatchHeader(Bytes(h, sizeof h));
    if (header.last_offset() != last_entry->offset ||
        last_entry->position + header.size_bytes() > size)
      return false;
  }
  uint64_t tn = *tsize / format::kTimeIndexEntrySize;
  while (tn > 0) {
    auto got = timeindex->ReadAt((tn - 1) * format::kTimeIndexEntrySize, std::span(e, 12));
    if (!got) return got.error();
    auto entry = DecodeTimeEntry(e, base);
    if (check && *got == 12 && entry.offset < end_offset && entry.offset < base) return false;
    if (*got == 12 && entry.offset < end_offset &&
        (!last_entry || entry.offset <= last_entry->offset)) {
      last_time = entry;
      break;
    }
    --tn;
  }
  if (n * format::kOffsetIndexEntrySize != *isize)
    MQ_RETURN_IF_ERROR(index->Truncate(n * format::kOffsetIndexEntrySize));
  if (tn * format::kTimeIndexEntrySize != *tsize)
    MQ_RETURN_IF_ERROR(timeindex->Truncate(tn * format::kTimeIndexEntrySize));
  ib.Restore(last_entry, last_time);
  ib.set_counts(n, tn);
  offset_buf.clear();
  time_buf.clear();
  uint64_t from = last_entry ? last_entry->position : 0;
  MQ_RETURN_IF_ERROR(ForEachHeader(dir_fd.get(), fs, config.limits, base, log.get(), from, size,
                                   [&](const BatchHeader& h, uint64_t pos) {
                                     ib.Add(h, pos, &offset_buf, &time_buf);
                                   }));
  MQ_RETURN_IF_ERROR(WriteIndexBuffers());
  if (size > 0) {
    std::byte h[format::kBatchHeaderSize];
    auto got = log->ReadAt(0, h);
    if (!got) return got.error();
    if (*got == sizeof h) first_max_ts = DecodeBatchHeader(Bytes(h, sizeof h)).max_timestamp;
  }
  return true;
}

Status PartitionWriter::Impl::WriteIndexBuffers() {
  if (!offset_buf.empty()) {
    uint64_t at = (ib.offset_entries() * format::kOffsetIndexEntrySize) - offset_buf.size();
    MQ_RETURN_IF_ERROR(index->WriteAt(at, offset_buf));
    offset_buf.clear();
  }
  if (!time_buf.empty()) {
    uint64_t at = (ib.time_entries() * format::kTimeIndexEntrySize) - time_buf.size();
    MQ_RETURN_IF_ERROR(timeindex->WriteAt(at, time_buf));
    time_buf.clear();
  }
  return Status::Ok();
}

// Replays into the producer table every batch from (from_base, from_pos)
// to the committed end.
Status PartitionWriter::Impl::ReplayRange(int64_t from_base, uint64_t from_pos) {
  for (int64_t base : segments) {
    if (base < from_base) continue;
    if (base > fields.end_segment_base) break;
    uint64_t to = base == fields.end_segment_base ? fields.end_position : UINT64_MAX;
    if (to == UINT64_MAX) {
      auto f = fs->Open(dir_fd.get(), SegmentFileName(base, format::kLogSuffix), FileSystem::kRead);
      if (!f) return f.error();
      auto s = (*f)->Size();
      if (!s) return s.error();
      to = *s;
    }
    MQ_RETURN_IF_ERROR(ForEachHeader(dir_fd.get(), fs, config.limits, base,
                                     base == from_base ? from_pos : 0, to,
                                     [&](const BatchHeader& h, uint64_t) {
                                       if (h.has_producer_id()) producers.Replay(h);
                                     }));
  }
  return Status::Ok();
}

// Rebuilds the producer table: newest snapshot, then replay of the batches
// at or after it.
Status PartitionWriter::Impl::ReplayProducers(File* active_log,
                                             const std::vector<int64_t>* snapshots) {
  auto from = producers.LoadSnapshot(dir_fd.get(), fields.log_end_offset, snapshots, fs);
  if (!from) return from.error();
  int64_t start = *from;
  // Nothing after the snapshot: the table is the snapshot's (no snapshot
  // at all on an empty log is the same, empty table).
  snapshot_at = start == fields.log_end_offset ? start : -1;
  snapshot_segment = -1;
  for (int64_t base : segments) {
    if (base > fields.end_segment_base) break;
    bool active = base == fields.end_segment_base;
    uint64_t to = UINT64_MAX;
    if (active) {
      to = fields.end_position;
    } else {
      // Skip whole segments below the snapshot: the next one starts at or
      // before it.
      auto next = std::upper_bound(segments.begin(), segments.end(), base);
      if (next != segments.end() && *next <= start) continue;
      auto f = fs->Open(dir_fd.get(), SegmentFileName(base, format::kLogSuffix), FileSystem::kRead);
      if (!f) return f.error();
      auto s = (*f)->Size();
      if (!s) return s.error();
      to = *s;
    }
    // The snapshot is in the active segment: note where its replay starts.
    const bool note = active && start >= base;
    uint64_t first_after = to;
    // The segment holding the snapshot is read from the batch before it
    // (offset index), the later ones whole.
    MQ_RETURN_IF_ERROR(ForEachHeaderFrom(dir_fd.get(), fs, config.limits, base,
                                         active ? active_log : nullptr, start, to,
                                         [&](const BatchHeader& h, uint64_t pos) {
                                           if (h.base_offset < start) return;
                                           if (first_after == to) first_after = pos;
                                           if (h.has_producer_id()) producers.Replay(h);
                                         }));
    if (note) {
      snapshot_segment = base;
      snapshot_pos = std::min<uint64_t>(first_after, to);
    }
  }
  return Status::Ok();
}

// Under the lock, with the active segment's files holding everything up to
// `fields` (its log written, its index buffers too).
Status PartitionWriter::Impl::EnsureProducers() {
  if (producers_loaded) return Status::Ok();
  MQ_RETURN_IF_ERROR(ReplayProducers(log.get()));
  producers_loaded = true;
  return Status::Ok();
}

Status PartitionWriter::Impl::Publish() {
  fields.boot_id = CurrentBootId();  // R27: the committed end is this boot's
  generation = state.Publish(fields);
  return Status::Ok();
}

// Under the lock: brings this writer's view up to the committed state.
Status PartitionWriter::Impl::Sync() {
  uint32_t gen = 0;
  auto now = state.Read(&gen);
  if (!now) {
    RecoveryReport ignored;
    return Recover(&ignored, false);
  }
  if (gen != generation || !(*now == fields)) {
    StateFields old = fields;
    fields = *now;
    auto list = ListSegments(dir_fd.get(), fs);
    if (!list) return list.error();
    segments = std::move(*list);
    // Segments past the committed end were started by a writer that died
    // before publishing them: never acknowledged.
    while (!segments.empty() && segments.back() > fields.end_segment_base) {
      for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix})
        (void)fs->Unlink(dir_fd.get(), SegmentFileName(segments.back(), suffix));
      segments.pop_back();
      dir_dirty = true;
    }
    if (segments.empty() || segments.back() != fields.end_segment_base)
      return Status(Code::kNotFound, fmt::format("{}: segment {} of the committed end is missing",
                                                 dir, fields.end_segment_base));
    bool same_history = old.rewrites == fields.rewrites &&
                        std::binary_search(segments.begin(), segments.end(), old.end_segment_base) &&
                        old.log_end_offset <= fields.log_end_offset;
    // (A table not built yet is built from the log as it will be then.)
    if (!producers_loaded)
      ;
    else if (same_history)
      MQ_RETURN_IF_ERROR(ReplayRange(old.end_segment_base, old.end_position));
    else
      MQ_RETURN_IF_ERROR(ReplayProducers());
    MQ_RETURN_IF_ERROR(OpenActive(fields.end_segment_base, fields.end_position));
    generation = gen;
  }
  // A writer died between writing and publishing: what it wrote past the
  // committed end was never acknowledged.
  if (state.appending() || stale_check) {
    auto size = log->Size();
    if (!size) return size.error();
    if (*size > fields.end_position) MQ_RETURN_IF_ERROR(log->Truncate(fields.end_position));
    state.SetAppending(false);
    stale_check = false;
  }
  return Status::Ok();
}

Status PartitionWriter::Impl::Roll() {
  MQ_RETURN_IF_ERROR(WriteIndexBuffers());
  ib.Finish(&time_buf);
  MQ_RETURN_IF_ERROR(WriteIndexBuffers());
  if (config.durability == Durability::kEveryBatch) MQ_RETURN_IF_ERROR(log->Sync());
  MQ_RETURN_IF_ERROR(EnsureProducers());
  int64_t base = fields.log_end_offset;
  MQ_RETURN_IF_ERROR(producers.WriteSnapshot(dir_fd.get(), base, true, fs));
  snapshot_at = base;
  snapshot_segment = base;
  snapshot_pos = 0;
  // A writer that died after creating this segment but before publishing it
  // may have left files under the name: start them empty.
  for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix}) {
    auto f = fs->Open(dir_fd.get(), SegmentFileName(base, suffix), FileSystem::kCreate);
    if (!f) return f.error();
    MQ_RETURN_IF_ERROR((*f)->Truncate(0));
  }
  dir_dirty = true;
  segments.push_back(base);
  fields.end_segment_base = base;
  fields.end_position = 0;
  return OpenActive(base, 0);
}

// fsync of every segment from the one holding the recovery point to the end
// (other writers' bytes included: fsync covers the file), then the directory.
Status PartitionWriter::Impl::SyncAll() {
  for (int64_t base : segments) {
    auto next = std::upper_bound(segments.begin(), segments.end(), base);
    if (next != segments.end() && *next <= fields.recovery_point) continue;
    if (base == fields.end_segment_base) {
      MQ_RETURN_IF_ERROR(log->Sync());
      MQ_RETURN_IF_ERROR(index->Sync());
      MQ_RETURN_IF_ERROR(timeindex->Sync());
      continue;
    }
    for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix}) {
      auto f = fs->Open(dir_fd.get(), SegmentFileName(base, suffix), FileSystem::kRead);
      if (!f) return f.error();
      MQ_RETURN_IF_ERROR((*f)->Sync());
    }
  }
  MQ_RETURN_IF_ERROR(fs->SyncDir(dir_fd.get()));
  dir_dirty = false;
  last_sync_ms = NowMs();
  return Status::Ok();
}

// R27: the committed end was published on this boot, so it is
// authoritative. Everything below it was validated when it was appended and
// its pages are intact; everything past it was never published: segment
// files above endSegmentBase are removed and the active segment is cut to
// endPosition (never adopted, never re-validated). The cost is independent
// of the bytes appended since the last fsync. Returns false (nothing
// changed) when the log does not hold the committed end: that is damage,
// left to the full recovery of §12, which reports it.
Result<bool> PartitionWriter::Impl::OpenSameBoot(const StateFields& prev, std::vector<int64_t> list,
                                                 const std::vector<int64_t>& snapshots,
                                                 RecoveryReport* report) {
  int fd = dir_fd.get();
  if (!std::binary_search(list.begin(), list.end(), prev.end_segment_base)) return false;
  std::string name = SegmentFileName(prev.end_segment_base, format::kLogSuffix);
  auto active = fs->Open(fd, name, FileSystem::kReadWrite);
  if (!active) return active.error();
  auto size = (*active)->Size();
  if (!size) return size.error();
  if (*size < prev.end_position) return false;
  while (list.back() > prev.end_segment_base) {
    for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix}) {
      Status s = fs->Unlink(fd, SegmentFileName(list.back(), suffix));
      if (!s.ok() && s.code() != Code::kNotFound) return s;
    }
    report->repaired.push_back({SegmentFileName(list.back(), format::kLogSuffix), 0,
                                "unpublished-tail",
                                "R27: segment past the committed end was never published; removed"});
    list.pop_back();
    dir_dirty = true;
  }
  if (*size > prev.end_position) {
    MQ_RETURN_IF_ERROR((*active)->Truncate(prev.end_position));
    report->bytes_truncated += *size - prev.end_position;
    report->repaired.push_back(
        {name, prev.end_position, "unpublished-tail",
         fmt::format("R27: {} bytes past the committed end were never published; cut",
                     *size - prev.end_position)});
  }
  for (size_t i = 0; i + 1 < list.size(); ++i) {
    auto looks = IndexLooksRight(fd, config, list[i], list[i + 1]);
    if (!looks) return looks.error();
    if (*looks) continue;
    auto f = fs->Open(fd, SegmentFileName(list[i], format::kLogSuffix), FileSystem::kRead);
    if (!f) return f.error();
    auto rolled_size = (*f)->Size();
    if (!rolled_size) return rolled_size.error();
    MQ_RETURN_IF_ERROR(RebuildIndexes(fd, fs, config, list[i], *rolled_size, true));
    ++report->indexes_rebuilt;
    report->repaired.push_back({SegmentFileName(list[i], format::kIndexSuffix), 0, "index-rebuilt",
                                "R23: index inconsistent with its log; rebuilt"});
  }
  segments = std::move(list);
  fields = prev;
  fields.rewrites = prev.rewrites + 1;
  // The active segment's indexes are derived data: the cheap checks of R25
  // (entries past the committed end, left by a writer that died before
  // publishing, are dropped), and a rebuild (R23) when they fail.
  auto index_ok = OpenActive(fields.end_segment_base, fields.end_position, std::move(*active), *size);
  if (!index_ok) return index_ok.error();
  if (!*index_ok) {
    MQ_RETURN_IF_ERROR(
        RebuildIndexes(fd, fs, config, prev.end_segment_base, prev.end_position, false));
    ++report->indexes_rebuilt;
    report->repaired.push_back({SegmentFileName(prev.end_segment_base, format::kIndexSuffix), 0,
                                "index-rebuilt", "R23: index inconsistent with its log; rebuilt"});
    MQ_RETURN_IF_ERROR(OpenActive(fields.end_segment_base, fields.end_position));
  }
  // Everything below the committed end was checked when it was appended:
  // the producer table is built from it when first needed (producer.md
  // §10.2, P7). Snapshots past the end are removed now, before anything is
  // appended past them.
  newest_snapshot = ProducerStateTable::DropSnapshotsPast(fd, fields.log_end_offset, snapshots, fs);
  producers_loaded = false;
  stale_check = false;
  state.SetAppending(false);
  MQ_RETURN_IF_ERROR(Publish());
  return true;
}

// Recovery (§12) under the lock: at open, and whenever the state file is
// found invalid (a writer died inside Publish).
Status PartitionWriter::Impl::Recover(RecoveryReport* report, bool recreated) {
  int fd = dir_fd.get();
  std::vector<int64_t> snapshots;
  auto list = ListSegments(fd, fs, &snapshots);
  if (!list) return list.error();
  auto old = state.Read();
  if (old && !recreated && old->same_boot() && !list->empty()) {
    auto done = OpenSameBoot(*old, *list, snapshots, report);
    if (!done) return done.error();
    if (*done) return Status::Ok();
    report->repaired.push_back(
        {SegmentFileName(old->end_segment_base, format::kLogSuffix), old->end_position, "R27",
         fmt::format("the log ends before the committed end (segment {}, position {}) published "
                     "on this boot; validated from the recovery point",
                     old->end_segment_base, old->end_position)});
  }
  // R24: a missing or invalid state file is rebuilt from the log (worth a
  // report only when there is a log to rebuild it from).
  if (!old)
    report->repaired.push_back({kStateFileName, old.error().position(), "R24",
                                "state file invalid (" + old.error().message() +
                                    "); rebuilt from the log"});
  else if (recreated && !list->empty())
    report->repaired.push_back({kStateFileName, 0, "R24", "state file missing; rebuilt from the log"});
  StateFields prev = old ? *old : StateFields{};
  bool trusted = old.has_value() && !recreated;
  auto recovered = RecoverLog(fd, config, *list, trusted ? prev.recovery_point : 0,
                        trusted ? prev.log_start_offset : 0, report);
  if (!recovered) return recovered.error();
  segments = recovered->segments;
  fields.rewrites = prev.rewrites + 1;
  fields.log_end_offset = recovered->log_end_offset;
  fields.end_segment_base = segments.back();
  fields.end_position = recovered->active_size;
  fields.log_start_offset = std::clamp(trusted ? prev.log_start_offset : segments.front(),
                                       segments.front(), recovered->log_end_offset);
  fields.recovery_point = trusted ? std::min(prev.recovery_point, recovered->log_end_offset) : 0;
  MQ_RETURN_IF_ERROR(ReplayProducers(nullptr, &snapshots));
  producers_loaded = true;
  MQ_RETURN_IF_ERROR(OpenActive(fields.end_segment_base, fields.end_position));
  stale_check = false;  // recovery cut the tail already
  state.SetAppending(false);
  return Publish();
}

PartitionWriter::PartitionWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PartitionWriter::~PartitionWriter() {
  if (impl_ && !impl_->closed) (void)Close();
}

Result<std::unique_ptr<PartitionWriter>> PartitionWriter::Open(const std::string& dir,
                                                               const LogConfig& config, bool create,
                                                               RecoveryReport* report) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->config = config;
  impl->fs = config.fs ? config.fs : FileSystem::Default();
  if (impl->config.index_interval_bytes == 0) impl->config.index_interval_bytes = 1;
  RecoveryReport local;
  if (report == nullptr) report = &local;
  auto dfd = OpenDirectory(dir, create, impl->fs);
  if (!dfd) return dfd.error();
  impl->dir_fd = std::move(*dfd);
  int dir_fd = impl->dir_fd.get();
  auto lock = WriterLock::Open(dir_fd, dir, impl->fs);
  if (!lock) return lock.error();
  impl->lock = std::move(*lock);
  MQ_RETURN_IF_ERROR(impl->lock.Lock());
  LockGuard guard(&impl->lock);

  bool recreated = false;
  auto state = StateFile::OpenForWrite(dir_fd, impl->fs, StateFields{}, &recreated,
                                       !config.page_cache_only());
  if (!state) return state.error();
  impl->state = std::move(*state);
  MQ_RETURN_IF_ERROR(impl->Recover(report, recreated));
  // R34: a page-cache writer may have created this partition's files
  // without fsync; the first acknowledgement of an every-batch writer
  // fsyncs the directory too, so what it acknowledges survives a crash.
  if (config.durability == Durability::kEveryBatch) impl->dir_dirty = true;
  impl->last_sync_ms = NowMs();
  return std::unique_ptr<PartitionWriter>(new PartitionWriter(std::move(impl)));
}

Result<AppendResult> PartitionWriter::Append(std::span<std::byte> batches, CrcCheck crc_check) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  // 1. Split and validate (R1-R7) before touching anything.
  std::vector<Piece> pieces;
  for (size_t at = 0; at < batches.size();) {
    Bytes rest(batches.data() + at, batches.size() - at);
    auto view = BatchView::Parse(rest, w.config.limits, "append", at, crc_check);
    if (!view) return view.error();
    MQ_RETURN_IF_ERROR(CheckProducerFields(view->header(), "append", at));
    pieces.push_back({at, view->header(), std::nullopt});
    at += view->header().size_bytes();
  }
  if (pieces.empty()) return Status(Code::kInvalidArgument, "append: no batches");

  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  for (const Piece& p : pieces) {
    if (p.header.has_producer_id()) {
      MQ_RETURN_IF_ERROR(w.EnsureProducers());
      break;
    }
  }

  // 2. Idempotent producers: all checks first, so a rejected batch leaves
  // nothing half-appended. Later batches of one producer in the same call
  // follow the earlier ones.
  std::unordered_map<int64_t, std::pair<int16_t, int32_t>> in_call;
  for (Piece& p : pieces) {
    const BatchHeader& h = p.header;
    if (!h.has_producer_id() || h.is_control()) continue;
    auto seen = in_call.find(h.producer_id);
    if (seen != in_call.end()) {
      int32_t want = seen->second.second == INT32_MAX ? 0 : seen->second.second + 1;
      if (h.producer_epoch != seen->second.first || h.base_sequence != want)
        return Status(Code::kOutOfOrder,
                      fmt::format("append: producer {} batch at {}: sequence {} after {}",
                                  h.producer_id, p.at, h.base_sequence, seen->second.second));
    } else {
      auto check = w.producers.CheckAppend(h);
      if (!check) return check.error();
      p.duplicate = *check;
    }
    if (!p.duplicate) in_call[h.producer_id] = {h.producer_epoch, h.last_sequence()};
  }

  w.state.SetAppending(true);
  // 3. Assign offsets and write, run by run (a run = adjacent batches
  // bound for one segment).
  AppendResult result;
  uint64_t call_start_pos = w.fields.end_position;
  int64_t call_start_base = w.fields.end_segment_base;
  size_t run_at = 0, run_len = 0;
  uint64_t run_pos = 0;
  auto flush_run = [&]() -> Status {
    if (run_len == 0) return Status::Ok();
    Status s = w.log->WriteAt(run_pos, Bytes(batches.data() + run_at, run_len));
    run_len = 0;
    return s;
  };
  Status io;
  for (Piece& p : pieces) {
    BatchHeader& h = p.header;
    if (p.duplicate) continue;
    uint64_t size = h.size_bytes();
    int64_t base = w.fields.log_end_offset;
    bool full = w.fields.end_position + size > w.SegmentLimit();
    bool old = w.first_max_ts >= 0 && h.max_timestamp - w.first_max_ts > w.config.segment_ms;
    bool far = base + h.last_offset_delta - w.fields.end_segment_base > INT32_MAX;
    if (w.fields.end_position > 0 && (full || old || far)) {
      if (!(io = flush_run()).ok() || !(io = w.Roll()).ok()) break;
    }
    std::span<std::byte> bytes = batches.subspan(p.at, size);
    SetBaseOffset(bytes, base);
    h.base_offset = base;
    if (run_len > 0 && run_at + run_len != p.at) {
      if (!(io = flush_run()).ok()) break;
    }
    if (run_len == 0) {
      run_at = p.at;
      run_pos = w.fields.end_position;
    }
    run_len += size;
    if (w.fields.end_position == 0) w.first_max_ts = h.max_timestamp;
    w.ib.Add(h, w.fields.end_position, &w.offset_buf, &w.time_buf);
    w.fields.end_position += size;
    w.fields.log_end_offset = h.last_offset() + 1;
    if (h.has_producer_id()) w.producers.Update(h);
    if (result.batches == 0) result.base_offset = base;
    result.last_offset = h.last_offset();
    ++result.batches;
  }
  if (io.ok()) io = flush_run();
  if (io.ok()) io = w.WriteIndexBuffers();
  // 4. Durability, then publication.
  if (io.ok() && result.batches > 0) {
    if (w.config.durability == Durability::kEveryBatch) {
      io = w.log->Sync();
      if (io.ok() && w.dir_dirty) {
        io = w.fs->SyncDir(w.dir_fd.get());
        if (io.ok()) w.dir_dirty = false;
      }
    } else if (w.config.durability == Durability::kInterval &&
               NowMs() - w.last_sync_ms >= w.config.flush_interval_ms) {
      io = w.SyncAll();
      if (io.ok()) w.fields.recovery_point = w.fields.log_end_offset;
    }
  }
  if (!io.ok()) {
    // Not published, so never visible; cut what we wrote in this segment
    // (best effort: the next writer cuts past the committed end anyway).
    if (w.fields.end_segment_base == call_start_base) (void)w.log->Truncate(call_start_pos);
    return w.Poison(io);
  }
  if (result.batches > 0) MQ_RETURN_IF_ERROR(w.Publish());
  w.state.SetAppending(false);
  if (result.batches == 0) {
    // Every batch was a duplicate: report the originals.
    result = *pieces.front().duplicate;
    result.last_offset = pieces.back().duplicate ? pieces.back().duplicate->last_offset
                                                 : result.last_offset;
    result.batches = static_cast<int32_t>(pieces.size());
    result.duplicate = true;
  }
  return result;
}

Status PartitionWriter::Flush() {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  Status s = w.SyncAll();
  if (!s.ok()) return w.Poison(s);
  w.fields.recovery_point = w.fields.log_end_offset;
  return w.Publish();
}

Status PartitionWriter::TruncateTo(int64_t offset) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  if (offset >= w.fields.log_end_offset) return Status::Ok();
  if (offset < w.fields.log_start_offset) offset = w.fields.log_start_offset;
  int dir_fd = w.dir_fd.get();
  // The segment that keeps data: the last whose base is below `offset`.
  auto keep_it = std::lower_bound(w.segments.begin(), w.segments.end(), offset);
  int64_t keep = keep_it == w.segments.begin() ? w.segments.front() : *(keep_it - 1);
  uint64_t cut = 0;
  int64_t new_end = keep;
  Status s = ForEachHeader(dir_fd, w.fs, w.config.limits, keep, 0, UINT64_MAX,
                           [&](const BatchHeader& h, uint64_t pos) {
                             if (h.last_offset() < offset) {
                               cut = pos + h.size_bytes();
                               new_end = h.last_offset() + 1;
                             }
                           });
  if (!s.ok()) return s;
  // Publish first: readers stop short of what is about to go.
  w.fields.rewrites++;
  w.fields.log_end_offset = new_end;
  w.fields.end_segment_base = keep;
  w.fields.end_position = cut;
  w.fields.recovery_point = std::min(w.fields.recovery_point, new_end);
  MQ_RETURN_IF_ERROR(w.Publish());
  while (w.segments.back() > keep) {
    for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix})
      MQ_RETURN_IF_ERROR(w.fs->Unlink(dir_fd, SegmentFileName(w.segments.back(), suffix)));
    w.segments.pop_back();
  }
  auto log = w.fs->Open(dir_fd, SegmentFileName(keep, format::kLogSuffix), FileSystem::kReadWrite);
  if (!log) return log.error();
  MQ_RETURN_IF_ERROR((*log)->Truncate(cut));
  MQ_RETURN_IF_ERROR(RebuildIndexes(dir_fd, w.fs, w.config, keep, cut, false));
  MQ_RETURN_IF_ERROR(w.fs->SyncDir(dir_fd));
  MQ_RETURN_IF_ERROR(w.ReplayProducers());  // also drops snapshots past the end
  w.producers_loaded = true;
  return w.OpenActive(keep, cut);
}

Status PartitionWriter::DeleteSegmentsBefore(int64_t offset) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  size_t n = 0;  // segments to delete: all their records are below `offset`
  while (n + 1 < w.segments.size() && w.segments[n + 1] <= offset) ++n;
  if (n == 0) return Status::Ok();
  w.fields.log_start_offset = std::max(w.fields.log_start_offset, w.segments[n]);
  MQ_RETURN_IF_ERROR(w.Publish());
  for (size_t i = 0; i < n; ++i)
    for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix}) {
      Status s = w.fs->Unlink(w.dir_fd.get(), SegmentFileName(w.segments[i], suffix));
      if (!s.ok() && s.code() != Code::kNotFound) return s;
    }
  w.segments.erase(w.segments.begin(), w.segments.begin() + static_cast<ptrdiff_t>(n));
  return w.fs->SyncDir(w.dir_fd.get());
}

Status PartitionWriter::Close() {
  Impl& w = *impl_;
  if (w.closed) return w.poisoned;
  Status s = w.config.sync_on_close ? Flush() : w.CheckUsable();
  if (s.ok()) {
    MQ_RETURN_IF_ERROR(w.lock.Lock());
    LockGuard guard(&w.lock);
    s = w.Sync();
    // A table never built is built here only when the next open's replay
    // could be long: the active segment holds kSnapshotReplayBytes, or the
    // newest snapshot is older than it while earlier segments exist.
    if (s.ok() && !w.producers_loaded &&
        (w.fields.end_position >= kSnapshotReplayBytes ||
         (w.newest_snapshot < w.fields.end_segment_base && w.segments.size() > 1))) {
      s = w.EnsureProducers();
    }
    // A writer that appended nothing since the newest snapshot writes none,
    // nor one whose batches after it take less than kSnapshotReplayBytes
    // of the active segment (the next open replays them instead); without
    // fsync at close the snapshot is not fsynced either (producer.md §10.2,
    // P7: derived data, a lost one costs only a longer replay).
    const bool short_replay = w.snapshot_segment == w.fields.end_segment_base &&
                              w.fields.end_position - w.snapshot_pos < kSnapshotReplayBytes;
    if (s.ok() && w.producers_loaded && w.snapshot_at != w.fields.log_end_offset &&
        !short_replay) {
      s = w.producers.WriteSnapshot(w.dir_fd.get(), w.fields.log_end_offset,
                                    w.config.sync_on_close, w.fs);
      if (s.ok()) {
        w.snapshot_at = w.fields.log_end_offset;
        w.snapshot_segment = w.fields.end_segment_base;
        w.snapshot_pos = w.fields.end_position;
      }
    }
  }
  w.closed = true;
  return s;
}

int64_t PartitionWriter::log_start_offset() const { return impl_->fields.log_start_offset; }
int64_t PartitionWriter::log_end_offset() const { return impl_->fields.log_end_offset; }

}  // namespace mq
