// PartitionWriter (format-spec/segment.md §6-§9, §12): the writer lock, its
// view of the partition (partition_view.h) and the phases of an append.
// Recovery at open: log_loader.h; cuts: truncation.h; the producer table:
// producer_state_manager.h; the leader epochs: epoch_state.h.
//
// Every operation runs under the partition's writer lock and starts with
// CatchUp() (log_loader.h): if another writer published since our last look (the state
// file's generation moved) we catch up with the tail it left; bytes past the
// committed end belong to an append that never returned (its writer died),
// so they are cut. Then we write, (fsync,) publish, unlock.
#include <algorithm>

#include <fmt/format.h>

#include "io/checkpoint_file.h"
#include "lifecycle/retention_apply.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "storage/log_loader.h"
#include "storage/offset_order.h"
#include "storage/partition_view.h"
#include "storage/truncation.h"
#include "storage/writer_lock.h"

namespace mq {

namespace {

// One batch of an Append call.
struct Piece {
  size_t at = 0;  // byte position in the caller's buffer
  BatchHeader header;
  std::optional<AppendResult> duplicate;
};

}  // namespace

struct PartitionWriter::Impl : PartitionView {
  WriterLock lock;
  Status poisoned;  // non-OK after a failed write or fsync: final
  bool closed = false;
  // `high-watermark`, kept open from one SetHighWatermark to the next.
  NamedFile hw_file{kHighWatermarkFile};

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

  // The prologue of every operation: takes the writer lock (held by
  // `*guard` from then on, released when it goes) and catches up
  // (log_loader.h).
  Status LockAndCatchUp(LockGuard* guard) {
    MQ_RETURN_IF_ERROR(lock.Lock());
    guard->Hold(&lock);
    return CatchUp(this);
  }

  // The phases of PartitionWriter::Append.
  Result<std::vector<Piece>> Split(std::span<std::byte> batches, CrcCheck crc_check) const;
  Status CheckProducers(std::vector<Piece>* pieces);
  // `replicated`: offsets and epochs are the leader's, kept as they are.
  Status WritePieces(std::span<std::byte> batches, std::vector<Piece>* pieces, AppendResult* result,
                     bool replicated = false);
  Result<AppendResult> Commit(std::span<std::byte> batches, std::vector<Piece>* pieces,
                              bool replicated);
  Status MakeDurable();
  // A follower's append: offsets continue the log (R10, R26), epochs never
  // go back (R37): all checked before anything is written.
  Status CheckReplicated(const std::vector<Piece>& pieces);
  Status BeginEpoch(bool* assigned = nullptr) {
    return epochs.Begin(*this, fields.log_end_offset, generation, assigned);
  }
};

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
  // R85: a shared flock on the partition directory while the writer is
  // open (dropped with dir_fd); deleting the topic takes it exclusive.
  if (Status open = impl->fs->Lock(dir_fd, LockMode::kShared, LockWait::kTry); !open.ok()) {
    if (open.code() != Code::kBusy) return open;
    return Status(Code::kBusy, dir + ": its topic is being deleted (R85)");
  }
  auto lock = WriterLock::Open(dir_fd, dir, impl->fs);
  if (!lock) return lock.error();
  impl->lock = std::move(*lock);
  MQ_RETURN_IF_ERROR(impl->lock.Lock());
  LockGuard guard(&impl->lock);

  MQ_RETURN_IF_ERROR(OpenLog(impl.get(), report));
  // R34: a page-cache writer may have created this partition's files
  // without fsync; the first acknowledgement of an every-batch writer
  // fsyncs the directory too, so what it acknowledges survives a crash.
  if (config.durability == Durability::kEveryBatch) impl->dir_dirty = true;
  impl->last_sync_ms = PartitionView::NowMs();
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
  AppendCheck check(producers.table());
  for (Piece& p : *pieces) {
    auto duplicate = check.Check(p.header, p.at);
    if (!duplicate) return duplicate.error();
    p.duplicate = *duplicate;
  }
  return Status::Ok();
}

// Phase 3: assigns offsets and writes, rolling where a batch belongs in a
// new segment. Adjacent batches bound for one segment are one write.
// `fields` advances past every batch written; nothing is published.
Status PartitionWriter::Impl::WritePieces(std::span<std::byte> batches, std::vector<Piece>* pieces,
                                          AppendResult* result, bool replicated) {
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
    if (h.has_producer_id()) producers.table().Update(h);
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

Status PartitionWriter::Impl::CheckReplicated(const std::vector<Piece>& pieces) {
  int64_t next = fields.log_end_offset;
  EpochState::Replicated starts(epochs);
  for (const Piece& p : pieces) {
    const BatchHeader& h = p.header;
    const bool first = &p == &pieces.front();
    // The first batch continues the log exactly; the others follow each
    // other as the log's offsets allow (R10, R26: offset_order.h).
    if (StepOf(h.base_offset, next, first ? OffsetPolicy::kContiguous : config.offsets) !=
        OffsetStep::kFollows)
      return Status(
          Code::kOutOfOrder,
          fmt::format("{}: replicated batch at {} starts at offset {}; the log {} {}", dir, p.at,
                      h.base_offset, first ? "ends before" : "continues at", next));
    next = h.last_offset() + 1;
    MQ_RETURN_IF_ERROR(starts.Add(h, p.at));
  }
  return starts.Store(*this, &epochs);
}

Result<AppendResult> PartitionWriter::AppendReplicated(std::span<const std::byte> batches,
                                                       CrcCheck crc_check) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  // Nothing is rewritten: the const bytes are written as they are.
  std::span<std::byte> bytes(const_cast<std::byte*>(batches.data()), batches.size());
  auto pieces = w.Split(bytes, crc_check);
  if (!pieces) return pieces.error();

  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
  MQ_RETURN_IF_ERROR(w.FreshEpochs());
  w.epochs.EnsureCache();  // the first epoch a follower sees creates the checkpoint
  MQ_RETURN_IF_ERROR(w.CheckReplicated(*pieces));
  // The leader checked the producers; the follower's table follows them
  // (WritePieces replays each batch with a producer id).
  if (std::any_of(pieces->begin(), pieces->end(),
                  [](const Piece& p) { return p.header.has_producer_id(); }))
    MQ_RETURN_IF_ERROR(w.EnsureProducers());
  return w.Commit(bytes, &*pieces, true);
}

Result<AppendResult> PartitionWriter::Append(std::span<std::byte> batches, CrcCheck crc_check) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  auto pieces = w.Split(batches, crc_check);
  if (!pieces) return pieces.error();

  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
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
    MQ_RETURN_IF_ERROR(CatchUp(&w));  // recovers
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
  auto raised = RaiseHighWatermark(w.fd(), partition->first, partition->second, offset, w.fs,
                                   w.sync(), &w.hw_file);
  if (!raised) return raised.error();
  if (!*raised) return Status::Ok();
  if (current) return w.Publish();  // wakes the readers bounded by it
  // Published again as they are, to wake the readers: this writer's own
  // view stays as of its older generation, which its next operation's
  // CatchUp finds behind and brings up to date.
  w.Republish(*now);
  return Status::Ok();
}

Status PartitionWriter::Flush() {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
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
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
  MQ_RETURN_IF_ERROR(CheckCutEpoch(&w, offset, leader_epoch));
  if (offset > w.fields.log_end_offset) return Status::Ok();
  if (offset == w.fields.log_end_offset) return DropEpochsFrom(&w, offset);
  if (offset < w.fields.log_start_offset) offset = w.fields.log_start_offset;
  auto cut = PlanCut(w, w.segments, offset);
  if (!cut) return cut.error();
  MQ_RETURN_IF_ERROR(CommitCut(&w, *cut));
  // A failure from here on: the next open completes the cut.
  Status s = ApplyCommittedCut(&w, *cut);
  return s.ok() ? s : w.Poison(s);
}

Status PartitionWriter::DeleteSegmentsBefore(int64_t offset) {
  return DeleteSegmentsBefore(offset, SegmentDeletion{});
}

Status PartitionWriter::DeleteSegmentsBefore(int64_t offset, const SegmentDeletion& how) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
  return RetireSegmentsBefore(&w, offset, how);  // retention_apply.h
}

// Close takes the lock only when, as far as this writer saw, a snapshot may
// be due (ProducerStateManager::SnapshotMayBeDue). Appends of other writers
// since then can only make one due that this close skips: the next open
// replays their batches instead, and their own writers' closes decide with
// a view that holds them.
Status PartitionWriter::Close() {
  Impl& w = *impl_;
  if (w.closed) return w.poisoned;
  Status s = w.config.sync_on_close ? Flush() : w.CheckUsable();
  if (s.ok() && w.producers.SnapshotMayBeDue(w.fields, w.segments.size(), w.active.get())) {
    LockGuard guard;
    s = w.LockAndCatchUp(&guard);
    if (!guard.held()) return s;  // the lock was not taken
    if (s.ok() && w.producers.TableWanted(w.fields, w.segments.size())) s = w.EnsureProducers();
    if (s.ok() && w.producers.SnapshotWanted(w.fields))
      s = w.producers.SnapshotAtClose(w, w.fields, w.config.sync_on_close);
  }
  w.closed = true;
  return s;
}

int64_t PartitionWriter::log_start_offset() const { return impl_->fields.log_start_offset; }
int64_t PartitionWriter::log_end_offset() const { return impl_->fields.log_end_offset; }

Status PartitionWriter::Refresh() {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  LockGuard guard;
  return w.LockAndCatchUp(&guard);
}

Result<int32_t> PartitionWriter::LatestEpoch() {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
  MQ_RETURN_IF_ERROR(w.EpochsForReplication());
  auto latest = w.epochs.cache().latest();
  return latest ? latest->epoch : -1;
}

Result<EpochEndOffset> PartitionWriter::EndOffsetFor(int32_t epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
  MQ_RETURN_IF_ERROR(w.EpochsForReplication());
  return w.epochs.cache().EndOffsetFor(epoch, w.fields.log_end_offset);
}

Status PartitionWriter::FenceEpochsBelow(int32_t epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  if (epoch < 0) return Status(Code::kInvalidArgument, fmt::format("epoch fence {}", epoch));
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
  auto raised = w.epochs.RaiseFence(w, epoch, w.generation);
  if (!raised) return raised.error();
  return *raised ? w.Publish() : Status::Ok();
}

Status PartitionWriter::BeginLeaderEpoch(int32_t epoch) {
  Impl& w = *impl_;
  MQ_RETURN_IF_ERROR(w.CheckUsable());
  if (epoch < 0) return Status(Code::kInvalidArgument, fmt::format("leader epoch {}", epoch));
  LockGuard guard;
  MQ_RETURN_IF_ERROR(w.LockAndCatchUp(&guard));
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
