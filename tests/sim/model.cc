#include "model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "mq/crc32c.h"
#include "storage/epoch_state.h"
#include "storage/offset_order.h"

namespace mq::sim {

const char* SyncPolicyName(SyncPolicy p) {
  switch (p) {
    case SyncPolicy::kEveryWrite:
      return "every-write";
    case SyncPolicy::kPeriodic:
      return "periodic";
    case SyncPolicy::kNever:
      return "never";
  }
  return "?";
}

uint64_t BatchIdentity(const BatchHeader& h) {
  // splitmix64 over the fields.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t v = mix(static_cast<uint64_t>(h.base_offset));
  v = mix(v ^ static_cast<uint64_t>(h.last_offset()));
  v = mix(v ^ static_cast<uint32_t>(h.partition_leader_epoch));
  return mix(v ^ h.crc);
}

Status ModelReplicaLog::MaybeKill(const char* what) {
  if (kill_in_ < 0 || kill_in_-- > 0) return Status::Ok();
  killed_ = true;
  return Status(Code::kUnavailable, fmt::format("replica {}: killed before: {}", id_, what));
}

Status ModelReplicaLog::MaybeFailIo(const char* what, bool kill_checked) {
  if (!kill_checked) MQ_RETURN_IF_ERROR(MaybeKill(what));
  if (!fail_next_io_) return Status::Ok();
  fail_next_io_ = false;
  io_failed_ = true;
  return Status(Code::kIoError, fmt::format("replica {}: {}: injected I/O error", id_, what));
}

void ModelReplicaLog::Wrote() {
  // Synced at every write: the disk is the page cache, copied only when a
  // power loss needs it.
  if (policy_ == SyncPolicy::kEveryWrite) {
    pending_.clear();
    committed_ = 0;
  }
}

void ModelReplicaLog::PushLog(LogOp op) { pending_.emplace_back(std::move(op)); }
void ModelReplicaLog::PushHw() { pending_.emplace_back(HwWrite{live_.hw}); }
void ModelReplicaLog::PushEpochs() { pending_.emplace_back(live_.epochs); }

void ModelReplicaLog::ApplyWrite(ReplicaFiles& f, const Write& w) {
  if (const LogOp* op = std::get_if<LogOp>(&w)) {
    ApplyLog(f, *op);
  } else if (const HwWrite* hw = std::get_if<HwWrite>(&w)) {
    f.hw = hw->hw;
  } else {
    f.epochs = std::get<LeaderEpochCache>(w);
  }
}

void ModelReplicaLog::ApplyLog(ReplicaFiles& f, const LogOp& op) {
  if (const SimBatch* b = std::get_if<SimBatch>(&op)) {
    f.log.push_back(*b);
    return;
  }
  int64_t to = std::get<int64_t>(op);
  while (!f.log.empty() && f.log.back().last >= to) f.log.pop_back();
}

Result<int64_t> ModelReplicaLog::LogStartOffset() { return live_.log_start; }
Result<int64_t> ModelReplicaLog::LogEndOffset() { return live_.LogEnd(); }
Result<int64_t> ModelReplicaLog::HighWatermark() { return live_.hw; }

Status ModelReplicaLog::SetHighWatermark(int64_t offset) {
  if (offset > live_.LogEnd()) {
    if (contract_breach_.empty()) {
      contract_breach_ = fmt::format("replica {}: SetHighWatermark({}) past its LEO {}", id_,
                                     offset, live_.LogEnd());
    }
    return Status(Code::kInvalidArgument, contract_breach_);
  }
  if (offset <= live_.hw) return Status::Ok();
  MQ_RETURN_IF_ERROR(MaybeFailIo("store high watermark"));
  live_.hw = offset;
  PushHw();
  Wrote();
  return Status::Ok();
}

Result<int32_t> ModelReplicaLog::LatestEpoch() {
  auto latest = live_.epochs.latest();
  return latest ? latest->epoch : -1;
}

Result<EpochEndOffset> ModelReplicaLog::EndOffsetFor(int32_t epoch) {
  return live_.epochs.EndOffsetFor(epoch, live_.LogEnd());
}

Status ModelReplicaLog::Read(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
                             uint32_t* crc) {
  if (offset < live_.log_start || offset > live_.LogEnd()) {
    return Status(Code::kOutOfOrder, fmt::format("replica {}: read at {} outside [{}, {}]", id_,
                                                 offset, live_.log_start, live_.LogEnd()));
  }
  out->clear();
  auto it = std::lower_bound(live_.log.begin(), live_.log.end(), offset,
                             [](const SimBatch& b, int64_t o) { return b.last < o; });
  for (; it != live_.log.end(); ++it) {
    if (!out->empty() && out->size() + it->bytes->size() > max_bytes) break;
    out->insert(out->end(), it->bytes->begin(), it->bytes->end());
  }
  if (crc) *crc = Crc32c(*out);
  return Status::Ok();
}

// The latest epoch a replica's files hold: its checkpoint's latest entry,
// or its last batch's epoch if that is above (nullopt: none).
static std::optional<EpochEntry> LatestHeld(const ReplicaFiles& f) {
  std::optional<EpochEntry> latest = f.epochs.latest();
  if (!f.log.empty() && (!latest || f.log.back().epoch > latest->epoch))
    latest = EpochEntry{f.log.back().epoch, f.log.back().base};
  return latest;
}

Result<AppendResult> ModelReplicaLog::AppendReplicated(std::span<const std::byte> batches,
                                                       CrcCheck crc_check) {
  AppendResult result;
  std::vector<SimBatch> parsed;
  int64_t next = live_.LogEnd();
  const std::optional<EpochEntry> held = LatestHeld(live_);
  int32_t latest_epoch = held ? held->epoch : -1;
  EpochState::Replicated replicated(std::nullopt);
  size_t pos = 0;
  DecodeLimits limits;
  std::string file = fmt::format("replica-{}", id_);
  while (pos < batches.size()) {
    auto view = BatchView::Parse(batches.subspan(pos), limits, file, next, crc_check);
    if (!view) return view.error();
    const BatchHeader& h = view->header();
    // The model's log has no gaps: offset order as in a delete-policy log
    // (R10, R26), checked by liblog's own checker.
    if (StepOf(h.base_offset, next, OffsetPolicy::kContiguous) != OffsetStep::kFollows) {
      return Status(Code::kOutOfOrder,
                    fmt::format("replica {}: batch at {} does not continue the log at {}", id_,
                                h.base_offset, next));
    }
    if (lenient_empty_epochs_ && parsed.empty() && h.partition_leader_epoch >= 0 &&
        h.partition_leader_epoch < latest_epoch) {
      // Kafka's follower tolerates this: epochs begun at the log end that
      // hold no batch give way to the leader's older epoch.
      auto l = live_.epochs.latest();
      if (l && l->start_offset >= next) {
        MQ_RETURN_IF_ERROR(MaybeFailIo("drop empty epoch"));
        live_.epochs.TruncateFromEnd(next);
        PushEpochs();
        latest_epoch = live_.log.empty() ? -1 : live_.log.back().epoch;
        if (auto again = live_.epochs.latest()) latest_epoch = std::max(latest_epoch, again->epoch);
      }
    }
    // R37: the writer's rule (EpochState::Replicated), an epoch going back
    // is corruption.
    if (parsed.empty()) replicated = EpochState::Replicated(LatestHeld(live_));
    MQ_RETURN_IF_ERROR(replicated.Add(h, pos));
    latest_epoch = std::max(latest_epoch, h.partition_leader_epoch);
    SimBatch b;
    b.base = h.base_offset;
    b.last = h.last_offset();
    b.epoch = h.partition_leader_epoch;
    b.identity = BatchIdentity(h);
    auto span = view->bytes();
    b.bytes = std::make_shared<const std::vector<std::byte>>(span.begin(), span.end());
    parsed.push_back(std::move(b));
    next = h.last_offset() + 1;
    pos += h.size_bytes();
  }
  if (parsed.empty()) return result;
  size_t count = parsed.size();
  MQ_RETURN_IF_ERROR(MaybeKill("append"));
  if (fail_next_io_) {
    // The failure hits the write of one batch: those before it are in.
    count = std::min(fail_keep_batches_, parsed.size() - 1);
    if (count == 0) MQ_RETURN_IF_ERROR(MaybeFailIo("append", true));
  }
  bool epochs_changed = false;
  for (size_t i = 0; i < count; ++i) {
    const SimBatch& b = parsed[i];
    auto l = live_.epochs.latest();
    if (b.epoch >= 0 && (!l || b.epoch > l->epoch)) {
      Status s = live_.epochs.Assign(b.epoch, b.base);
      if (!s.ok()) return s;
      epochs_changed = true;
    }
    live_.log.push_back(b);
    PushLog(b);
  }
  if (epochs_changed) PushEpochs();
  Wrote();
  if (count < parsed.size()) return MaybeFailIo("append", true);
  result.base_offset = parsed.front().base;
  result.last_offset = parsed.back().last;
  result.batches = static_cast<int32_t>(parsed.size());
  return result;
}

Status ModelReplicaLog::TruncateTo(int64_t offset, int32_t leader_epoch) {
  if (leader_epoch >= 0) {
    auto latest = live_.epochs.latest();
    const int32_t newer = std::max(latest ? latest->epoch : -1, fence_);
    if (newer > leader_epoch)
      return Status(Code::kFenced,
                    fmt::format("replica {}: truncation in epoch {}, log in epoch {}", id_,
                                leader_epoch, newer));
  }
  if (offset > live_.LogEnd()) return Status::Ok();
  if (offset == live_.LogEnd()) {
    // No batch goes, but an epoch begun at the log end (a leader that
    // wrote nothing) does: the log now ends where that epoch never started.
    auto latest = live_.epochs.latest();
    if (!latest || latest->start_offset < offset) return Status::Ok();
    MQ_RETURN_IF_ERROR(MaybeFailIo("truncate"));
    live_.epochs.TruncateFromEnd(offset);
    PushEpochs();
    Wrote();
    return Status::Ok();
  }
  if (offset < live_.log_start) {
    if (contract_breach_.empty()) {
      contract_breach_ = fmt::format("replica {}: TruncateTo({}) below its log start {}", id_,
                                     offset, live_.log_start);
    }
    return Status(Code::kInvalidArgument, contract_breach_);
  }
  MQ_RETURN_IF_ERROR(MaybeFailIo("truncate"));
  for (auto it = live_.log.rbegin(); it != live_.log.rend() && it->last >= offset; ++it)
    truncated_.push_back(*it);
  ApplyLog(live_, LogOp(offset));
  PushLog(LogOp(offset));
  int64_t end = live_.LogEnd();
  live_.epochs.TruncateFromEnd(end);
  PushEpochs();
  if (live_.hw > end) {
    // R38: lowered and fdatasynced whatever the sync policy, after the
    // intent (R40) that redoes the cut at the next open: no power loss
    // brings back the records cut with the high watermark that counted
    // them.
    live_.hw = end;
    PushHw();
    CommitPending();
  }
  ++cut_generation_;
  Wrote();
  return Status::Ok();
}

Status ModelReplicaLog::DeleteBefore(int64_t offset) {
  if (offset <= live_.log_start) return Status::Ok();
  if (offset > live_.LogEnd()) {
    if (contract_breach_.empty()) {
      contract_breach_ =
          fmt::format("replica {}: DeleteBefore({}) past its LEO {}", id_, offset, live_.LogEnd());
    }
    return Status(Code::kInvalidArgument, contract_breach_);
  }
  // The simulator runs no retention: the leader's log start stays 0, so a
  // follower never gets here with a reason to.
  if (contract_breach_.empty()) {
    contract_breach_ = fmt::format(
        "replica {}: DeleteBefore({}) although no leader ever moved its log start", id_, offset);
  }
  return Status(Code::kInvalidArgument, contract_breach_);
}

// The real writer's fence (PartitionWriter: BeginEpoch), in the same call
// as the write.
static Status Fenced(int32_t id, int32_t epoch, int32_t fence, const LeaderEpochCache& epochs) {
  auto latest = epochs.latest();
  if (epoch < fence || (latest && epoch < latest->epoch))
    return Status(Code::kFenced,
                  fmt::format("replica {}: leader epoch {} is below the fence {} or the latest "
                              "epoch {}",
                              id, epoch, fence, latest ? latest->epoch : -1));
  return Status::Ok();
}

Status ModelReplicaLog::FenceEpochsBelow(int32_t epoch) {
  if (epoch <= fence_) return Status::Ok();
  MQ_RETURN_IF_ERROR(MaybeFailIo("epoch fence"));
  fence_ = epoch;
  return Status::Ok();
}

Status ModelReplicaLog::BeginEpoch(int32_t epoch) {
  MQ_RETURN_IF_ERROR(Fenced(id_, epoch, fence_, live_.epochs));
  MQ_RETURN_IF_ERROR(MaybeFailIo("begin epoch"));
  MQ_RETURN_IF_ERROR(live_.epochs.Assign(epoch, live_.LogEnd()));
  PushEpochs();
  Wrote();
  return Status::Ok();
}

Status ModelReplicaLog::RecordFollower(const FollowerPosition& position) {
  UpsertPosition(&followers_, position);
  return Status::Ok();
}

Result<std::vector<FollowerPosition>> ModelReplicaLog::Followers() { return followers_; }

Result<SimBatch> ModelReplicaLog::AppendAsLeader(uint64_t write_id, int records, int32_t epoch,
                                                 int64_t timestamp_ms) {
  MQ_RETURN_IF_ERROR(Fenced(id_, epoch, fence_, live_.epochs));
  MQ_RETURN_IF_ERROR(MaybeFailIo("leader append"));
  BatchOptions options;
  options.partition_leader_epoch = epoch;
  BatchBuilder builder(options);
  std::byte value[12];
  for (int i = 0; i < records; ++i) {
    std::memcpy(value, &write_id, 8);
    uint32_t idx = static_cast<uint32_t>(i);
    std::memcpy(value + 8, &idx, 4);
    RecordInput rec;
    rec.timestamp = timestamp_ms;
    rec.value = Bytes(value, sizeof value);
    builder.Add(rec);
  }
  auto bytes = std::make_shared<std::vector<std::byte>>();
  MQ_RETURN_IF_ERROR(builder.Finish(live_.LogEnd(), bytes.get()));
  BatchHeader h = DecodeBatchHeader(*bytes);
  SimBatch b;
  b.base = h.base_offset;
  b.last = h.last_offset();
  b.epoch = epoch;
  b.identity = BatchIdentity(h);
  b.bytes = std::move(bytes);
  auto l = live_.epochs.latest();
  if (!l || epoch > l->epoch) {
    MQ_RETURN_IF_ERROR(live_.epochs.Assign(epoch, b.base));
    PushEpochs();
  }
  live_.log.push_back(b);
  PushLog(b);
  Wrote();
  return b;
}

void ModelReplicaLog::Sync() {
  disk_ = live_;
  pending_.clear();
  committed_ = 0;
}

void ModelReplicaLog::Adopt(ReplicaFiles files) {
  live_ = std::move(files);
  disk_ = live_;
  pending_.clear();
  committed_ = 0;
  followers_.clear();
  ++cut_generation_;
}

void ModelReplicaLog::Kill() {
  followers_.clear();
  fail_next_io_ = false;
}

Status ModelReplicaLog::StoreLeaderClaim(const LeaderClaim& claim) {
  MQ_RETURN_IF_ERROR(MaybeFailIo("claim"));
  claim_ = claim;
  return Status::Ok();
}

BootId ModelReplicaLog::RunningBoot() {
  BootId b{};
  const auto host = static_cast<uint64_t>(id_) + 1;
  for (size_t i = 0; i < 8; ++i) {
    b[7 - i] = static_cast<uint8_t>(host >> (8 * i));
    b[15 - i] = static_cast<uint8_t>(boots_ >> (8 * i));
  }
  return b;
}

void ModelReplicaLog::PowerLoss(Rng& rng) {
  ++boots_;
  if (policy_ == SyncPolicy::kEveryWrite) disk_ = live_;
  auto prefix = [&rng](size_t n) {
    return n == 0 ? size_t{0} : static_cast<size_t>(rng() % (n + 1));
  };
  // An fsync commits every write before it (kOrdered), or every metadata
  // write and its own file's (kMetadataOrdered): the cut is at or past it.
  const size_t committed = std::min(committed_, pending_.size());
  if (order_ == DiskOrder::kOrdered) {
    size_t n = committed + prefix(pending_.size() - committed);
    for (size_t i = 0; i < n; ++i) ApplyWrite(disk_, pending_[i]);
  } else if (order_ == DiskOrder::kMetadataOrdered) {
    const size_t cut = committed + prefix(pending_.size() - committed);
    size_t appends = 0;
    for (size_t i = 0; i < cut; ++i) {
      const LogOp* op = std::get_if<LogOp>(&pending_[i]);
      appends += op != nullptr && std::holds_alternative<SimBatch>(*op);
    }
    size_t kept = prefix(appends);
    for (size_t i = 0; i < cut; ++i) {
      const LogOp* op = std::get_if<LogOp>(&pending_[i]);
      if (op != nullptr && std::holds_alternative<SimBatch>(*op)) {
        if (kept == 0) continue;  // lost, as every later append
        --kept;
      }
      ApplyWrite(disk_, pending_[i]);
    }
  } else {
    // Each file on its own: a prefix of its own writes.
    for (size_t kind = 0; kind < 3; ++kind) {
      size_t count = 0;
      size_t synced = 0;  // the HW file's writes its fsync committed
      for (size_t i = 0; i < pending_.size(); ++i) {
        count += pending_[i].index() == kind;
        synced += i < committed && pending_[i].index() == kind &&
                  std::holds_alternative<HwWrite>(pending_[i]);
      }
      size_t n = synced + prefix(count - synced);
      for (size_t i = 0; i < pending_.size() && n > 0; ++i) {
        if (pending_[i].index() != kind) continue;
        ApplyWrite(disk_, pending_[i]);
        --n;
      }
    }
  }
  // Recovery, as the log's open does it: the epochs that start past the
  // log end go, one begun at it stays (LeaderEpochCache::Open).
  int64_t end = disk_.LogEnd();
  if (disk_.hw > end) disk_.hw = end;
  disk_.epochs.TruncateFromEnd(end + 1);
  for (const SimBatch& b : disk_.log) {
    auto l = disk_.epochs.latest();
    if (b.epoch >= 0 && (!l || b.epoch > l->epoch)) (void)disk_.epochs.Assign(b.epoch, b.base);
  }
  if (live_.LogEnd() > end || live_.log.size() != disk_.log.size()) ++cut_generation_;
  live_ = disk_;
  pending_.clear();
  committed_ = 0;
  followers_.clear();
  fail_next_io_ = false;
}

Result<PartitionState> MemClusterStore::AlterPartition(const PartitionState& proposed,
                                                       std::string_view reason) {
  PartitionState* p = state_.Partition(proposed.topic, proposed.partition);
  if (p == nullptr) {
    return Status(Code::kNotFound,
                  fmt::format("no partition {}-{}", proposed.topic, proposed.partition));
  }
  if (p->partition_epoch != proposed.partition_epoch) {
    return Status(Code::kFenced, fmt::format("partition epoch {} moved to {}",
                                             proposed.partition_epoch, p->partition_epoch));
  }
  p->leader = proposed.leader;
  p->leader_epoch = proposed.leader_epoch;
  p->isr = proposed.isr;
  p->partition_epoch += 1;
  ++changes_;
  if (reason.find("(R55)") != std::string_view::npos) ++restart_changes_;
  const std::string isr = FormatReplicaList(p->isr);
  if (recent_.size() >= 16) recent_.erase(recent_.begin());
  recent_.push_back(fmt::format("t={} leader={} epoch={} pepoch={} isr=[{}] ({})",
                                clock_ ? clock_->NowMs() : 0, p->leader, p->leader_epoch,
                                p->partition_epoch, isr, reason));
  return *p;
}

}  // namespace mq::sim
