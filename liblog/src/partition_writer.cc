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

#include "checkpoint_file.h"
#include "format.h"
#include "log_segment.h"
#include "mapped_file.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
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

// Wall-clock ms since the epoch: what a group's commit timestamps are.
int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}


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

  std::unique_ptr<LogSegment> active;  // the last segment
  // The leader epochs (replication.md §16.2), kept when this writer stamps
  // an epoch or the partition has a checkpoint; `epochs_generation`: the
  // state generation they were read at (another writer may have stored
  // newer ones since).
  std::optional<LeaderEpochCache> epochs;
  uint32_t epochs_generation = 0;
  // The epoch fence (replication.md R56) as of `epochs_generation`, read
  // with the epochs (-1: none).
  int32_t fence = -1;
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
  // `high-watermark`, kept open from one SetHighWatermark to the next.
  NamedFile hw_file{kHighWatermarkFile};
  // Whether the listing of the last Recover (under the lock) found the
  // leader epochs' checkpoint: Open loads no epochs when it did not.
  bool checkpoint_listed = true;


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
  // R38: a stored high watermark above `end` (the log end after a cut or a
  // recovery) is lowered to it; reported in `report` (optional).
  Status LowerHighWatermark(int64_t end, RecoveryReport* report);
  Result<bool> OpenSameBoot(const StateFields& prev, std::vector<int64_t> list,
                            const std::vector<int64_t>& snapshots, RecoveryReport* report);
  Status OpenActive(int64_t base, uint64_t size);
  Status Sync();
  Status Publish();
  // Close's decisions, on this writer's view of the log (see Close).
  bool TableWanted() const;
  bool SnapshotWanted() const;
  bool SnapshotMayBeDue();
  // Whether the batches after the newest snapshot take less than
  // kSnapshotReplayBytes of the active segment, as its offset index shows.
  Result<bool> ReplayIsShort();
  // `active_log`: the active segment's log, open on the file the committed
  // state names (null: opened when needed); `snapshots`: the snapshot
  // offsets of a listing made under the lock (null: listed here).
  Status ReplayProducers(File* active_log = nullptr,
                         const std::vector<int64_t>* snapshots = nullptr);
  Status ReplayRange(int64_t from_base, uint64_t from_pos);
  Status EnsureProducers();
  Status Roll();
  Status SyncAll();

  // The phases of PartitionWriter::Append.
  Result<std::vector<Piece>> Split(std::span<std::byte> batches, CrcCheck crc_check) const;
  Status CheckProducers(std::vector<Piece>* pieces);
  // `replicated`: offsets and epochs are the leader's, kept as they are.
  Status WritePieces(std::span<std::byte> batches, std::vector<Piece>* pieces,
                     AppendResult* result, bool replicated = false);
  Result<AppendResult> Commit(std::span<std::byte> batches, std::vector<Piece>* pieces,
                              bool replicated);
  Status MakeDurable();
  // Loads (or rebuilds, R37) the leader epochs when this writer stamps an
  // epoch or a checkpoint exists.
  Status LoadEpochs();
  // LoadEpochs unless `epochs` holds what was stored as of `generation`.
  Status FreshEpochs() {
    return epochs && epochs_generation == generation ? Status::Ok() : LoadEpochs();
  }
  // FreshEpochs, and a cache even for a writer that stamps no epoch: the
  // checkpoint rebuilt from the log (R37) when it is missing.
  Status EpochsForReplication() {
    MQ_RETURN_IF_ERROR(FreshEpochs());
    if (epochs) return Status::Ok();
    auto cache = LeaderEpochCache::Open(dir_fd.get(), fields.log_end_offset, config.limits, fs);
    if (!cache) return cache.error();
    epochs = std::move(*cache);
    epochs_generation = generation;
    return Status::Ok();
  }
  // Before the first batch of an append: the leader's epoch starts at the
  // log end unless it is the latest already; one below the latest, or
  // below the epoch fence a follower stored (R56), is kFenced.
  // `*assigned` (if given): whether it started here.
  Status BeginEpoch(bool* assigned = nullptr);
};

Status PartitionWriter::Impl::OpenActive(int64_t base, uint64_t size) {
  auto opened = LogSegment::Open(fs, dir_fd.get(), config, base, size, fields.log_end_offset);
  if (!opened) return opened.error();
  active = std::move(*opened);
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
    const bool is_active = base == fields.end_segment_base;
    uint64_t to = UINT64_MAX;
    if (is_active) {
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
    const bool note = is_active && start >= base;
    uint64_t first_after = to;
    // The segment holding the snapshot is read from the batch before it
    // (offset index), the later ones whole.
    MQ_RETURN_IF_ERROR(ForEachHeaderFrom(dir_fd.get(), fs, config.limits, base,
                                         is_active ? active_log : nullptr, start, to,
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
  MQ_RETURN_IF_ERROR(ReplayProducers(active->log()));
  producers_loaded = true;
  return Status::Ok();
}

Status PartitionWriter::Impl::LoadEpochs() {
  epochs.reset();
  // With the epochs: a follower stores the fence and publishes under the
  // lock, so a view as of this generation holds it.
  auto stored = LoadLeaderEpochFence(dir_fd.get(), fs);
  if (!stored) return stored.error();
  fence = *stored;
  if (config.leader_epoch < 0) {
    // Only whether there is one (LeaderEpochCache::Open reads it).
    auto f = fs->StatAt(dir_fd.get(), kLeaderEpochCheckpointFile);
    if (!f && f.error().code() == Code::kNotFound) return Status::Ok();
    if (!f) return f.error();
  }
  auto cache = LeaderEpochCache::Open(dir_fd.get(), fields.log_end_offset, config.limits, fs);
  if (!cache) return cache.error();
  epochs = std::move(*cache);
  epochs_generation = generation;
  return Status::Ok();
}

Status PartitionWriter::Impl::BeginEpoch(bool* assigned) {
  if (assigned != nullptr) *assigned = false;
  if (config.leader_epoch < 0) return Status::Ok();
  MQ_RETURN_IF_ERROR(FreshEpochs());
  // R56: checked first, for the latest epoch too: a leader deposed after
  // its check still holds the latest epoch of a log that now follows a
  // newer leader and has fetched nothing of its epoch yet.
  if (config.leader_epoch < fence)
    return Status(Code::kFenced,
                  fmt::format("{}: leader epoch {} is below the epoch fence {} (R56): this log "
                              "follows the leader of epoch {}; this writer is no longer the leader",
                              dir, config.leader_epoch, fence, fence));
  auto latest = epochs->latest();
  if (latest && latest->epoch == config.leader_epoch) return Status::Ok();
  if (latest && latest->epoch > config.leader_epoch)
    return Status(Code::kFenced,
                  fmt::format("{}: leader epoch {} is below the partition's latest epoch {} "
                              "(since offset {}): this writer is no longer the leader",
                              dir, config.leader_epoch, latest->epoch, latest->start_offset));
  MQ_RETURN_IF_ERROR(epochs->Assign(config.leader_epoch, fields.log_end_offset));
  MQ_RETURN_IF_ERROR(epochs->Store(dir_fd.get(), fs));
  if (assigned != nullptr) *assigned = true;
  return Status::Ok();
}

Status PartitionWriter::Impl::Publish() {
  fields.boot_id = CurrentBootId();  // R27: the committed end is this boot's
  const bool epochs_current = epochs && epochs_generation == generation;
  generation = state.Publish(fields);
  if (epochs_current) epochs_generation = generation;  // ours: still current
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
  if (gen != generation && *now == fields && active) {
    // Published since with the committed fields this writer holds (another
    // writer raised the high watermark, stored an epoch fence or began an
    // epoch without a batch): the log is the one this writer has open.
    // Every change of the log's bytes or segments changes the fields (an
    // append its end, a roll its end segment, a deletion its start, a
    // truncation or a writer's recovery `rewrites`). The epochs are still
    // read again (FreshEpochs: they are as of the older generation).
    generation = gen;
  } else if (gen != generation || !(*now == fields)) {
    StateFields old = fields;
    fields = *now;
    auto list = ListSegments(dir_fd.get(), fs);
    if (!list) return list.error();
    segments = std::move(*list);
    // Segments past the committed end were started by a writer that died
    // before publishing them: never acknowledged.
    while (!segments.empty() && segments.back() > fields.end_segment_base) {
      (void)LogSegment::Remove(fs, dir_fd.get(), segments.back());
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
    auto size = active->log()->Size();
    if (!size) return size.error();
    if (*size > fields.end_position) MQ_RETURN_IF_ERROR(active->Truncate(fields.end_position));
    state.SetAppending(false);
    stale_check = false;
  }
  return Status::Ok();
}

Status PartitionWriter::Impl::Roll() {
  MQ_RETURN_IF_ERROR(active->Seal(config.durability == Durability::kEveryBatch));
  MQ_RETURN_IF_ERROR(EnsureProducers());
  int64_t base = fields.log_end_offset;
  MQ_RETURN_IF_ERROR(producers.WriteSnapshot(dir_fd.get(), base, true, fs));
  snapshot_at = base;
  snapshot_segment = base;
  snapshot_pos = 0;
  auto created = LogSegment::Create(fs, dir_fd.get(), config, base);
  if (!created) return created.error();
  active = std::move(*created);
  dir_dirty = true;
  segments.push_back(base);
  fields.end_segment_base = base;
  fields.end_position = 0;
  return Status::Ok();
}

// fsync of every segment from the one holding the recovery point to the end
// (other writers' bytes included: fsync covers the file), then the directory.
Status PartitionWriter::Impl::SyncAll() {
  for (int64_t base : segments) {
    auto next = std::upper_bound(segments.begin(), segments.end(), base);
    if (next != segments.end() && *next <= fields.recovery_point) continue;
    MQ_RETURN_IF_ERROR(base == fields.end_segment_base
                           ? active->Sync()
                           : LogSegment::SyncFiles(fs, dir_fd.get(), base));
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
  auto active_log = fs->Open(fd, name, FileSystem::kReadWrite);
  if (!active_log) return active_log.error();
  // Just opened, under the lock: its size then is its size now.
  auto info = (*active_log)->StatAtOpen();
  if (!info) return info.error();
  const uint64_t size = info->size;
  if (size < prev.end_position) return false;
  while (list.back() > prev.end_segment_base) {
    MQ_RETURN_IF_ERROR(LogSegment::Remove(fs, fd, list.back()));
    report->repaired.push_back({SegmentFileName(list.back(), format::kLogSuffix), 0,
                                "unpublished-tail",
                                "R27: segment past the committed end was never published; removed"});
    list.pop_back();
    dir_dirty = true;
  }
  if (size > prev.end_position) {
    MQ_RETURN_IF_ERROR((*active_log)->Truncate(prev.end_position));
    report->bytes_truncated += size - prev.end_position;
    report->repaired.push_back(
        {name, prev.end_position, "unpublished-tail",
         fmt::format("R27: {} bytes past the committed end were never published; cut",
                     size - prev.end_position)});
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
  auto checked = LogSegment::Open(fs, fd, config, fields.end_segment_base, fields.end_position,
                                  fields.log_end_offset, std::move(*active_log), size);
  if (!checked) return checked.error();
  active = std::move(*checked);
  if (!active) {
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
  PartitionListing listed;
  auto list = ListSegments(fd, fs, &snapshots, &listed);
  if (!list) return list.error();
  // R40: an interrupted truncation is completed before anything else, and
  // the log it leaves is validated as after a crash. The intent is written
  // under the lock held here: without its name in the listing there is none.
  Result<std::optional<int64_t>> intent = std::optional<int64_t>();
  if (listed.truncate_intent) intent = ReadTruncateIntent(fd, fs, dir);
  if (!intent) return intent.error();
  // The same goes for the leader epochs' checkpoint, unless the truncation
  // below changes them.
  checkpoint_listed = listed.epoch_checkpoint || intent->has_value();
  std::optional<int64_t> truncated_to;
  if (*intent && !list->empty()) {
    const bool sync = !config.page_cache_only();
    auto cut = FindCut(fd, fs, config.limits, *list, **intent);
    if (!cut) return cut.error();
    MQ_RETURN_IF_ERROR(ApplyCut(fd, fs, config, *list, *cut, sync));
    report->repaired.push_back(
        {kTruncateIntentName, 0, "R40",
         fmt::format("an interrupted truncation to offset {} was completed", cut->end)});
    truncated_to = cut->end;
    // The leader epochs that start at or past the cut went with its batches
    // (a writer loading the checkpoint drops only those past the log end:
    // one at it may be an epoch begun with nothing in it yet).
    auto epochs_file = LeaderEpochCache::Load(fd, fs);
    if (epochs_file) {
      MQ_RETURN_IF_ERROR(epochs_file->TruncateFromEndAndStore(cut->end, fd, fs));
    } else if (epochs_file.error().code() != Code::kNotFound) {
      return epochs_file.error();
    }
    snapshots.clear();
    list = ListSegments(fd, fs, &snapshots);
    if (!list) return list.error();
  }
  auto old = state.Read();
  if (old && !recreated && old->same_boot() && !list->empty() && !truncated_to) {
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
  if (truncated_to) prev.recovery_point = std::min(prev.recovery_point, *truncated_to);
  auto recovered = RecoverLog(fd, config, *list, trusted ? prev.recovery_point : 0,
                        trusted ? prev.log_start_offset : 0, report);
  if (!recovered) return recovered.error();
  // R59: a recovery that leaves less log than the state file had published
  // (a machine crash lost page-cache writes, or a damaged tail was cut) cut
  // records consumers may have read. (An interrupted truncation was
  // recorded when it began.)
  if (old && !truncated_to && recovered->log_end_offset < old->log_end_offset)
    MQ_RETURN_IF_ERROR(RecordTruncation(fd, fs, dir, recovered->log_end_offset, WallClockMs(),
                                        prev.rewrites + 1, !config.page_cache_only()));
  // A state file rebuilt (R24) starts its counter past every rewrites value
  // the truncation history names (§6.6, §9.4): a reader never takes a cut
  // published before for one under way. A history that cannot be read
  // (R59) fails the open, as it fails the next truncation.
  uint32_t rewrites = prev.rewrites;
  if (!trusted) {
    auto history = ReadTruncations(fd, fs, dir);
    if (!history) return history.error();
    if (!history->empty() && history->back().rewrites &&
        RewritesAfter(*history->back().rewrites, rewrites))
      rewrites = *history->back().rewrites;
  }
  segments = recovered->segments;
  fields.rewrites = rewrites + 1;
  fields.log_end_offset = recovered->log_end_offset;
  fields.end_segment_base = segments.back();
  fields.end_position = recovered->active_size;
  fields.log_start_offset = std::clamp(trusted ? prev.log_start_offset : segments.front(),
                                       segments.front(), recovered->log_end_offset);
  fields.recovery_point = trusted ? std::min(prev.recovery_point, recovered->log_end_offset) : 0;
  MQ_RETURN_IF_ERROR(LowerHighWatermark(fields.log_end_offset, report));
  MQ_RETURN_IF_ERROR(ReplayProducers(nullptr, &snapshots));
  producers_loaded = true;
  MQ_RETURN_IF_ERROR(OpenActive(fields.end_segment_base, fields.end_position));
  stale_check = false;  // recovery cut the tail already
  state.SetAppending(false);
  MQ_RETURN_IF_ERROR(Publish());
  return *intent ? RemoveTruncateIntent(fd, fs, !config.page_cache_only()) : Status::Ok();
}

Status PartitionWriter::Impl::LowerHighWatermark(int64_t end, RecoveryReport* report) {
  auto partition = PartitionOfDirectory(dir);
  if (!partition) return Status::Ok();  // no high watermark outside <topic>-<n>
  auto lowered = mq::LowerHighWatermark(dir_fd.get(), partition->first, partition->second, end, fs);
  if (!lowered) return lowered.error();
  if (*lowered && report != nullptr)
    report->repaired.push_back(
        {kHighWatermarkFile, 0, "R38",
         fmt::format("high watermark {} above the log end {} (appends it counted were lost, or a "
                     "truncation was interrupted); lowered to {}",
                     **lowered, end, end)});
  return Status::Ok();
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
  // A writer that stamps no epoch loads them only from a checkpoint
  // (LoadEpochs); Recover's listing, under the lock, tells whether there is one.
  if (config.leader_epoch >= 0 || impl->checkpoint_listed) MQ_RETURN_IF_ERROR(impl->LoadEpochs());
  // R34: a page-cache writer may have created this partition's files
  // without fsync; the first acknowledgement of an every-batch writer
  // fsyncs the directory too, so what it acknowledges survives a crash.
  if (config.durability == Durability::kEveryBatch) impl->dir_dirty = true;
  impl->last_sync_ms = NowMs();
  return std::unique_ptr<PartitionWriter>(new PartitionWriter(std::move(impl)));
}

// Append, phase 1: splits the caller's buffer into batches and validates
// each (R1-R7) before anything is touched.
Result<std::vector<Piece>> PartitionWriter::Impl::Split(std::span<std::byte> batches,
                                                        CrcCheck crc_check) const {
  std::vector<Piece> pieces;
  for (size_t at = 0; at < batches.size();) {
    Bytes rest(batches.data() + at, batches.size() - at);
    auto view = BatchView::Parse(rest, config.limits, "append", at, crc_check);
    if (!view) return view.error();
    MQ_RETURN_IF_ERROR(CheckProducerFields(view->header(), "append", at));
    pieces.push_back({at, view->header(), std::nullopt});
    at += view->header().size_bytes();
  }
  if (pieces.empty()) return Status(Code::kInvalidArgument, "append: no batches");
  return pieces;
}

// Phase 2, under the lock: idempotent producers (producer.md). All checks
// come first, so a rejected batch leaves nothing half-appended; later
// batches of one producer in the same call follow the earlier ones; a
// duplicate is marked with the original's result.
Status PartitionWriter::Impl::CheckProducers(std::vector<Piece>* pieces) {
  if (std::none_of(pieces->begin(), pieces->end(),
                   [](const Piece& p) { return p.header.has_producer_id(); }))
    return Status::Ok();
  MQ_RETURN_IF_ERROR(EnsureProducers());
  std::unordered_map<int64_t, std::pair<int16_t, int32_t>> in_call;
  for (Piece& p : *pieces) {
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
      auto check = producers.CheckAppend(h);
      if (!check) return check.error();
      p.duplicate = *check;
    }
    if (!p.duplicate) in_call[h.producer_id] = {h.producer_epoch, h.last_sequence()};
  }
  return Status::Ok();
}

// Phase 3: assigns offsets and writes, rolling where a batch belongs in a
// new segment. Adjacent batches bound for one segment are one write.
// `fields` advances past every batch written; nothing is published.
Status PartitionWriter::Impl::WritePieces(std::span<std::byte> batches,
                                          std::vector<Piece>* pieces, AppendResult* result,
                                          bool replicated) {
  size_t run_at = 0, run_len = 0;
  uint64_t run_pos = 0;
  auto flush_run = [&]() -> Status {
    if (run_len == 0) return Status::Ok();
    Status s = active->Write(run_pos, Bytes(batches.data() + run_at, run_len));
    run_len = 0;
    return s;
  };
  for (Piece& p : *pieces) {
    BatchHeader& h = p.header;
    if (p.duplicate) continue;
    uint64_t size = h.size_bytes();
    int64_t base = replicated ? h.base_offset : fields.log_end_offset;
    if (active->ShouldRoll(h, fields.end_position, base)) {
      MQ_RETURN_IF_ERROR(flush_run());
      MQ_RETURN_IF_ERROR(Roll());
    }
    std::span<std::byte> bytes = batches.subspan(p.at, size);
    if (!replicated) SetBaseOffset(bytes, base);
    h.base_offset = base;
    if (!replicated && config.leader_epoch >= 0) {
      SetPartitionLeaderEpoch(bytes, config.leader_epoch);
      h.partition_leader_epoch = config.leader_epoch;
    }
    if (run_len > 0 && run_at + run_len != p.at) MQ_RETURN_IF_ERROR(flush_run());
    if (run_len == 0) {
      run_at = p.at;
      run_pos = fields.end_position;
    }
    run_len += size;
    active->Add(h, fields.end_position);
    fields.end_position += size;
    fields.log_end_offset = h.last_offset() + 1;
    if (h.has_producer_id()) producers.Update(h);
    if (result->batches == 0) result->base_offset = base;
    result->last_offset = h.last_offset();
    ++result->batches;
  }
  MQ_RETURN_IF_ERROR(flush_run());
  return active->Flush();
}

// Phase 4: what the configured durability asks before publication (§9.6).
Status PartitionWriter::Impl::MakeDurable() {
  if (config.durability == Durability::kEveryBatch) {
    MQ_RETURN_IF_ERROR(active->log()->Sync());
    if (dir_dirty) {
      MQ_RETURN_IF_ERROR(fs->SyncDir(dir_fd.get()));
      dir_dirty = false;
    }
  } else if (config.durability == Durability::kInterval &&
             NowMs() - last_sync_ms >= config.flush_interval_ms) {
    MQ_RETURN_IF_ERROR(SyncAll());
    fields.recovery_point = fields.log_end_offset;
  }
  return Status::Ok();
}

// Phases 3 and 4 and publication, under the lock.
Result<AppendResult> PartitionWriter::Impl::Commit(std::span<std::byte> batches,
                                                   std::vector<Piece>* pieces, bool replicated) {
  state.SetAppending(true);
  AppendResult result;
  const uint64_t call_start_pos = fields.end_position;
  const int64_t call_start_base = fields.end_segment_base;
  Status io = WritePieces(batches, pieces, &result, replicated);
  if (io.ok() && result.batches > 0) io = MakeDurable();
  if (!io.ok()) {
    // Not published, so never visible; cut what we wrote in this segment
    // (best effort: the next writer cuts past the committed end anyway).
    if (fields.end_segment_base == call_start_base) (void)active->Truncate(call_start_pos);
    return Poison(io);
  }
  if (result.batches > 0) MQ_RETURN_IF_ERROR(Publish());
  state.SetAppending(false);
  return result;
}

Result<AppendResult> PartitionWriter::AppendReplicated(std::span<const std::byte> batches,
                                                       CrcCheck crc_check) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  // Nothing is rewritten: the const bytes are written as they are.
  std::span<std::byte> bytes(const_cast<std::byte*>(batches.data()), batches.size());
  auto pieces = w.Split(bytes, crc_check);
  if (!pieces) return pieces.error();

  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  MQ_RETURN_IF_ERROR(w.FreshEpochs());
  if (!w.epochs) w.epochs.emplace();  // the first epoch a follower sees creates the checkpoint
  // Offsets continue the log (R10, R26), epochs never go back (R37): all
  // checked before anything is written.
  int64_t next = w.fields.log_end_offset;
  std::optional<EpochEntry> latest = w.epochs->latest();
  std::vector<EpochEntry> starts;
  const bool contiguous = w.config.offsets == OffsetPolicy::kContiguous;
  for (const Piece& p : *pieces) {
    const BatchHeader& h = p.header;
    const bool first = &p == &pieces->front();
    if (first ? h.base_offset != next
              : (contiguous ? h.base_offset != next : h.base_offset < next))
      return Status(Code::kOutOfOrder,
                    fmt::format("{}: replicated batch at {} starts at offset {}; the log {} {}",
                                w.dir, p.at, h.base_offset,
                                first ? "ends before" : "continues at", next));
    next = h.last_offset() + 1;
    const int32_t e = h.partition_leader_epoch;
    if (e == -1) continue;
    if (e < -1 || (latest && e < latest->epoch))
      return Status::Corruption(
          "append", p.at, "R37",
          fmt::format("replicated batch at offset {} has leader epoch {}, below epoch {} of "
                      "offset {}",
                      h.base_offset, e, latest ? latest->epoch : -1,
                      latest ? latest->start_offset : -1));
    if (!latest || e > latest->epoch) {
      latest = EpochEntry{e, h.base_offset};
      starts.push_back(*latest);
    }
  }
  if (!starts.empty()) {
    for (const EpochEntry& e : starts) MQ_RETURN_IF_ERROR(w.epochs->Assign(e.epoch, e.start_offset));
    MQ_RETURN_IF_ERROR(w.epochs->Store(w.dir_fd.get(), w.fs));
  }
  // The leader checked the producers; the follower's table follows them
  // (WritePieces replays each batch with a producer id).
  for (const Piece& p : *pieces)
    if (p.header.has_producer_id()) {
      MQ_RETURN_IF_ERROR(w.EnsureProducers());
      break;
    }
  return w.Commit(bytes, &*pieces, true);
}

Result<AppendResult> PartitionWriter::Append(std::span<std::byte> batches, CrcCheck crc_check) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  auto pieces = w.Split(batches, crc_check);
  if (!pieces) return pieces.error();

  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  MQ_RETURN_IF_ERROR(w.CheckProducers(&*pieces));
  if (std::any_of(pieces->begin(), pieces->end(), [](const Piece& p) { return !p.duplicate; }))
    MQ_RETURN_IF_ERROR(w.BeginEpoch());

  AppendResult result;
  auto done = w.Commit(batches, &*pieces, false);
  if (!done) return done.error();
  result = *done;
  if (result.batches == 0) {
    // Every batch was a duplicate: report the originals.
    const std::vector<Piece>& p = *pieces;
    result = *p.front().duplicate;
    result.last_offset = p.back().duplicate ? p.back().duplicate->last_offset : result.last_offset;
    result.batches = static_cast<int32_t>(p.size());
    result.duplicate = true;
  }
  return result;
}

Status PartitionWriter::SetHighWatermark(int64_t offset) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  auto partition = PartitionOfDirectory(w.dir);
  if (!partition)
    return Status(Code::kInvalidArgument,
                  w.dir + ": a high watermark needs a partition directory named <topic>-<n>");
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  // A high watermark counts offsets, not bytes: the committed end as
  // published now bounds it, and this writer's view of the segments is not
  // brought up to it (no listing and no reopening of the active segment
  // after each append of another writer, the leader's producer).
  uint32_t gen = 0;
  auto now = w.state.Read(&gen);
  if (!now) {
    MQ_RETURN_IF_ERROR(w.Sync());  // recovers
    gen = w.generation;
    now = w.fields;
  }
  const bool current = gen == w.generation && *now == w.fields;
  if (offset < 0 || offset > now->log_end_offset)
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: high watermark {} outside the log [0, {}]", w.dir, offset,
                              now->log_end_offset));
  // Only forward, in place (R61). Page-cache durability: a machine crash
  // may bring back an older HW, never a newer one (replication.md §16.4).
  auto raised = RaiseHighWatermark(w.dir_fd.get(), partition->first, partition->second, offset,
                                   w.fs, !w.config.page_cache_only(), &w.hw_file);
  if (!raised) return raised.error();
  if (!*raised) return Status::Ok();
  if (current) return w.Publish();  // wakes the readers bounded by it
  // Published again as they are (the committed fields another writer
  // published, this boot's), to wake the readers: this writer's own view
  // stays as of its older generation, which its next operation's Sync
  // finds behind and brings up to date.
  StateFields fields = *now;
  fields.boot_id = CurrentBootId();
  w.state.Publish(fields);
  return Status::Ok();
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

// R40: the intent is durable before anything changes, so a crash at any
// point leaves the old log (before it) or the truncated one (after it: the
// next open completes the cut before it recovers anything). Without it, a
// reopen after a reboot would validate and keep batches a half-done cut
// left behind.
Status PartitionWriter::TruncateTo(int64_t offset, int32_t leader_epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  if (leader_epoch >= 0) {
    // A follower's decision on the log as the leader of `leader_epoch`
    // saw it: stale once a newer epoch wrote or fenced here (R56).
    MQ_RETURN_IF_ERROR(w.EpochsForReplication());
    auto latest = w.epochs->latest();
    const int32_t newer = std::max(latest ? latest->epoch : -1, w.fence);
    if (newer > leader_epoch)
      return Status(Code::kFenced,
                    fmt::format("{}: truncation to {} decided in leader epoch {}, and the log is "
                                "now in epoch {} (R56): nothing cut",
                                w.dir, offset, leader_epoch, newer));
  }
  if (offset >= w.fields.log_end_offset) {
    // Nothing to cut; the epochs that start at or past `offset` (begun by
    // a leader that wrote nothing in them) still go, as Kafka's
    // LeaderEpochFileCache.truncateFromEnd.
    if (offset > w.fields.log_end_offset) return Status::Ok();
    MQ_RETURN_IF_ERROR(w.EpochsForReplication());
    auto latest = w.epochs->latest();
    if (!latest || latest->start_offset < offset) return Status::Ok();
    MQ_RETURN_IF_ERROR(w.epochs->TruncateFromEndAndStore(offset, w.dir_fd.get(), w.fs));
    return w.Publish();
  }
  if (offset < w.fields.log_start_offset) offset = w.fields.log_start_offset;
  const int dir_fd = w.dir_fd.get();
  const bool sync = !w.config.page_cache_only();
  auto cut = FindCut(dir_fd, w.fs, w.config.limits, w.segments, offset);
  if (!cut) return cut.error();
  // R59: in the truncation history before anything is cut, so that no
  // consumer finds the cut log without it (a failure from here on leaves
  // an entry for a cut not made, or not completed yet: a group then reads
  // from there again, never skips).
  // The entry names the rewrites value this truncation publishes (§9.4):
  // a reader that reads it before the publication knows it is under way,
  // one positioned at an earlier value that it was made since.
  Status s = RecordTruncation(dir_fd, w.fs, w.dir, cut->end, WallClockMs(),
                              w.fields.rewrites + 1, sync);
  if (s.ok()) s = WriteTruncateIntent(dir_fd, w.fs, cut->end, sync);
  // R38: the high watermark never counts what goes; lowered (fsynced)
  // before anything is cut, so no crash leaves it above the new end where
  // other records may follow (an interrupted cut lowers it at the next
  // open).
  if (s.ok()) s = w.LowerHighWatermark(cut->end, nullptr);
  if (!s.ok()) {
    // The entry may be on disk: its rewrites value is published all the
    // same, so that no reader holds at its cut waiting for it (readers
    // then go back to it: at least once, as for any entry of a cut not
    // made).
    w.fields.rewrites++;
    (void)w.Publish();
    return s;
  }
  // Publish first: readers stop short of what is about to go.
  w.fields.rewrites++;
  w.fields.log_end_offset = cut->end;
  w.fields.end_segment_base = cut->keep;
  w.fields.end_position = cut->position;
  w.fields.recovery_point = std::min(w.fields.recovery_point, cut->end);
  MQ_RETURN_IF_ERROR(w.Publish());
  w.active.reset();
  s = ApplyCut(dir_fd, w.fs, w.config, w.segments, *cut, sync);
  if (!s.ok()) return w.Poison(s);  // the next open completes the cut
  while (w.segments.back() > cut->keep) w.segments.pop_back();
  s = w.ReplayProducers();
  if (s.ok()) w.producers_loaded = true;
  if (s.ok()) s = w.OpenActive(cut->keep, cut->position);
  // The epochs that start at or past the new end went with its batches
  // (loading drops only those past it).
  if (s.ok()) s = w.LoadEpochs();
  if (s.ok() && w.epochs) s = w.epochs->TruncateFromEndAndStore(cut->end, dir_fd, w.fs);
  if (s.ok()) s = RemoveTruncateIntent(dir_fd, w.fs, sync);
  return s.ok() ? s : w.Poison(s);
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
  if (w.epochs) MQ_RETURN_IF_ERROR(w.FreshEpochs());
  if (w.epochs) {
    w.epochs->TruncateFromStart(w.fields.log_start_offset);
    MQ_RETURN_IF_ERROR(w.epochs->Store(w.dir_fd.get(), w.fs));
  }
  MQ_RETURN_IF_ERROR(w.Publish());
  for (size_t i = 0; i < n; ++i)
    MQ_RETURN_IF_ERROR(LogSegment::Remove(w.fs, w.dir_fd.get(), w.segments[i]));
  w.segments.erase(w.segments.begin(), w.segments.begin() + static_cast<ptrdiff_t>(n));
  return w.fs->SyncDir(w.dir_fd.get());
}

// A table never built is built at close only when the next open's replay
// could be long: the active segment holds kSnapshotReplayBytes, or the
// newest snapshot is older than it while earlier segments exist.
// (SnapshotMayBeDue first asks the offset index whether the replay is
// short: ReplayIsShort.)
bool PartitionWriter::Impl::TableWanted() const {
  return !producers_loaded &&
         (fields.end_position >= kSnapshotReplayBytes ||
          (newest_snapshot < fields.end_segment_base && segments.size() > 1));
}

Result<bool> PartitionWriter::Impl::ReplayIsShort() {
  if (newest_snapshot < fields.end_segment_base) return false;
  return active->AfterIsShort(newest_snapshot, fields.end_position, kSnapshotReplayBytes);
}

// A writer that appended nothing since the newest snapshot writes none, nor
// one whose batches after it take less than kSnapshotReplayBytes of the
// active segment (the next open replays them instead); without fsync at
// close the snapshot is not fsynced either (producer.md §10.2, P7: derived
// data, a lost one costs only a longer replay).
bool PartitionWriter::Impl::SnapshotWanted() const {
  const bool short_replay = snapshot_segment == fields.end_segment_base &&
                            fields.end_position - snapshot_pos < kSnapshotReplayBytes;
  return producers_loaded && snapshot_at != fields.log_end_offset && !short_replay;
}

// Close takes the lock only when, as far as this writer saw, a snapshot may
// be due: SnapshotWanted, or TableWanted unless the offset index shows the
// batches after the newest snapshot to be few (an active segment of 256 KiB
// or more appended to a little at a time; an index that cannot be read
// proves nothing). Appends of other writers since then can only make one
// due that this close skips: the next open replays their batches instead,
// and their own writers' closes decide with a view that holds them.
bool PartitionWriter::Impl::SnapshotMayBeDue() {
  if (SnapshotWanted()) return true;
  if (!TableWanted()) return false;
  auto short_replay = ReplayIsShort();
  return !(short_replay && *short_replay);
}

Status PartitionWriter::Close() {
  Impl& w = *impl_;
  if (w.closed) return w.poisoned;
  Status s = w.config.sync_on_close ? Flush() : w.CheckUsable();
  if (s.ok() && w.SnapshotMayBeDue()) {
    MQ_RETURN_IF_ERROR(w.lock.Lock());
    LockGuard guard(&w.lock);
    s = w.Sync();
    if (s.ok() && w.TableWanted()) s = w.EnsureProducers();
    if (s.ok() && w.SnapshotWanted()) {
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

namespace mq {

Status PartitionWriter::Refresh() {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  return w.Sync();
}

Result<int32_t> PartitionWriter::LatestEpoch() {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  MQ_RETURN_IF_ERROR(w.EpochsForReplication());
  auto latest = w.epochs->latest();
  return latest ? latest->epoch : -1;
}

Result<EpochEndOffset> PartitionWriter::EndOffsetFor(int32_t epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  MQ_RETURN_IF_ERROR(w.EpochsForReplication());
  return w.epochs->EndOffsetFor(epoch, w.fields.log_end_offset);
}

Status PartitionWriter::FenceEpochsBelow(int32_t epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  if (epoch < 0) return Status(Code::kInvalidArgument, fmt::format("epoch fence {}", epoch));
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  auto stored = LoadLeaderEpochFence(w.dir_fd.get(), w.fs);
  if (!stored) return stored.error();
  if (*stored >= epoch) return Status::Ok();  // it only moves forward
  MQ_RETURN_IF_ERROR(
      StoreLeaderEpochFence(w.dir_fd.get(), epoch, w.fs, !w.config.page_cache_only()));
  // Published, so that every other writer rereads the fence (with the
  // epochs) at its next look, before it appends.
  if (w.epochs_generation == w.generation) w.fence = std::max(w.fence, epoch);
  return w.Publish();
}

Status PartitionWriter::BeginLeaderEpoch(int32_t epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  if (epoch < 0) return Status(Code::kInvalidArgument, fmt::format("leader epoch {}", epoch));
  MQ_RETURN_IF_ERROR(w.lock.Lock());
  LockGuard guard(&w.lock);
  MQ_RETURN_IF_ERROR(w.Sync());
  const int32_t old = w.config.leader_epoch;
  w.config.leader_epoch = epoch;
  bool assigned = false;
  Status s = w.BeginEpoch(&assigned);
  if (!s.ok()) {
    w.config.leader_epoch = old;
    return s;
  }
  // Begun without a batch: published all the same, or another writer of
  // the log (which rereads the checkpoint only when the state was
  // published since its last look) would append in an older epoch.
  if (assigned) return w.Publish();
  return Status::Ok();
}

}  // namespace mq
