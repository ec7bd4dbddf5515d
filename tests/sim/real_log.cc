#include "real_log.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/batch.h"
#include "mq/file.h"
#include "mq/replica_checkpoint.h"
#include "mq/replication.h"

namespace mq::sim {

namespace {

LogConfig ConfigFor(SyncPolicy policy, FileSystem* fs) {
  LogConfig c;
  // Small segments and indexes: a schedule's few hundred batches cross
  // many segments, as a long-lived log does.
  c.segment_bytes = 4096;
  c.index_interval_bytes = 512;
  c.durability = policy == SyncPolicy::kEveryWrite ? Durability::kEveryBatch : Durability::kNone;
  c.sync_on_close = policy == SyncPolicy::kEveryWrite;
  c.offsets = OffsetPolicy::kContiguous;
  c.fs = fs;
  return c;
}

std::string Hex(const BootId& b) {
  std::string s;
  for (uint8_t x : b) s += fmt::format("{:02x}", x);
  return s;
}

std::string Text(const Status& s) { return s.ok() ? "ok" : s.message(); }

}  // namespace

RealReplicaLog::RealReplicaLog(int32_t id, SyncPolicy policy, DiskOrder order,
                               const std::string& topic, bool mapped_kept)
    : ModelReplicaLog(id, policy, order), fs_(order) {
  fs_.set_mapped_kept(mapped_kept);
  dir_ = fs_.root() + "/" + topic + "-0";
  config_ = ConfigFor(policy, &fs_);
  SetBoot();
  // The partition is created before the schedule starts, durably.
  auto created = PartitionWriter::Open(dir_, config_, true, nullptr);
  if (!created) {
    Broken("the partition cannot be created: " + created.error().message());
  } else {
    (void)(*created)->Close();
  }
  fs_.SyncAll();
}

RealReplicaLog::~RealReplicaLog() {
  SetBoot();
  reader_.reset();
  producer_.reset();
  real_.reset();
}

void RealReplicaLog::SetBoot() {
  ::setenv("MQ_TEST_BOOT_ID", Hex(ModelReplicaLog::RunningBoot()).c_str(), 1);
}

ReplicaLog* RealReplicaLog::Real() {
  SetBoot();
  if (!real_) {
    auto opened = OpenReplicaLog(dir_, replica_id(), config_);
    if (!opened) {
      Broken("the real log does not open: " + opened.error().message());
      return nullptr;
    }
    real_ = std::move(*opened);
  }
  return real_.get();
}

Status RealReplicaLog::OpenReader(int64_t offset) {
  SetBoot();
  reader_.reset();
  ReadOptions options;
  options.limits = config_.limits;
  options.offsets = config_.offsets;
  options.fs = &fs_;
  options.bound_by_high_watermark = true;
  auto opened = PartitionReader::Open(dir_, options);
  if (!opened) return opened.error();
  MQ_RETURN_IF_ERROR((*opened)->Seek(offset));
  reader_ = std::move(*opened);
  return Status::Ok();
}

Result<RealReplicaLog::ReaderStep> RealReplicaLog::ReaderNext() {
  if (!reader_) return Status(Code::kInvalidArgument, "no reader is open");
  SetBoot();
  auto next = reader_->Next();
  if (!next) return next.error();
  ReaderStep step;
  step.cut = reader_->TakeCut();
  if (auto out = reader_->TakeOutOfRange()) step.out_of_range = out->log_start_offset;
  if (*next) {
    const BatchHeader& h = (*next)->header();
    SimBatch b;
    b.base = h.base_offset;
    b.last = h.last_offset();
    b.epoch = h.partition_leader_epoch;
    b.identity = BatchIdentity(h);
    step.batch = b;
  }
  return step;
}

std::string RealReplicaLog::ReaderText() {
  if (!reader_) return "closed";
  SetBoot();
  const auto rewrites = reader_->rewrites();
  std::ifstream in(dir_ + "/truncations");
  std::string history((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return fmt::format("end {}, rewrites {}, positioned at rewrites {}, truncations [{}]",
                     reader_->end_offset(), rewrites ? static_cast<int64_t>(*rewrites) : -1,
                     reader_->positioned_rewrites(), history);
}

void RealReplicaLog::Broken(const std::string& what) {
  if (breach_.empty()) breach_ = fmt::format("r{} real log: {}", replica_id(), what);
}

void RealReplicaLog::Disagree(const std::string& kind, const std::string& what) {
  disagreements_.emplace_back(kind, fmt::format("r{}: {}", replica_id(), what));
  resync_ = true;
}

const std::string& RealReplicaLog::contract_breach() const {
  const std::string& model = ModelReplicaLog::contract_breach();
  return model.empty() ? breach_ : model;
}

void RealReplicaLog::Compare(const char* call, const Status& model, const Status& real) {
  if (model.ok() != real.ok() || (!model.ok() && model.code() != real.code())) {
    const char* how = model.ok()  ? "the log refuses what the model takes"
                      : real.ok() ? "the model refuses what the log takes"
                                  : "they refuse with different codes";
    Disagree(
        fmt::format("{}: {}", call, how),
        fmt::format("{}: the model says {} ({}), the log {} ({})", call, Text(model),
                    static_cast<int>(model.code()), Text(real), static_cast<int>(real.code())));
  }
  CompareEnds(call);
  if (resync_) Resync();
}

void RealReplicaLog::CompareEnds(const char* call) {
  ReplicaLog* real = Real();
  if (!real) return;
  auto leo = real->LogEndOffset();
  auto hw = real->HighWatermark();
  if (!leo || !hw) {
    Broken(fmt::format("after {}: {}", call, Text(!leo ? leo.error() : hw.error())));
    return;
  }
  const ReplicaFiles& f = files();
  if (*leo != f.LogEnd())
    Disagree(fmt::format("{}: another log end after it", call),
             fmt::format("after {}: log end {}, the model's {}", call, *leo, f.LogEnd()));
  else if (*hw != f.hw)
    Disagree(fmt::format("{}: another HW after it", call),
             fmt::format("after {}: hw {}, the model's {}", call, *hw, f.hw));
}

void RealReplicaLog::Resync() {
  resync_ = false;
  auto real = RealFiles();
  if (!real) {
    Broken("its files cannot be read: " + real.error().message());
    return;
  }
  Adopt(std::move(*real));
  resync_ = false;
}

// A mutating call: the model first; a fault it injects (a kill before this
// write, an I/O error) keeps the write from the real log.
#define MQ_SIM_FAULTED() (killed() || io_failed())

Result<int64_t> RealReplicaLog::LogStartOffset() {
  ReplicaLog* r = Real();
  return r ? r->LogStartOffset() : Result<int64_t>(Status(Code::kIoError, breach_));
}
Result<int64_t> RealReplicaLog::LogEndOffset() {
  ReplicaLog* r = Real();
  return r ? r->LogEndOffset() : Result<int64_t>(Status(Code::kIoError, breach_));
}
Result<int64_t> RealReplicaLog::HighWatermark() {
  ReplicaLog* r = Real();
  return r ? r->HighWatermark() : Result<int64_t>(Status(Code::kIoError, breach_));
}
Result<int32_t> RealReplicaLog::LatestEpoch() {
  ReplicaLog* r = Real();
  return r ? r->LatestEpoch() : Result<int32_t>(Status(Code::kIoError, breach_));
}
Result<EpochEndOffset> RealReplicaLog::EndOffsetFor(int32_t epoch) {
  ReplicaLog* r = Real();
  return r ? r->EndOffsetFor(epoch) : Result<EpochEndOffset>(Status(Code::kIoError, breach_));
}
Status RealReplicaLog::Read(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
                            uint32_t* crc) {
  ReplicaLog* r = Real();
  return r ? r->Read(offset, max_bytes, out, crc) : Status(Code::kIoError, breach_);
}

Status RealReplicaLog::SetHighWatermark(int64_t offset) {
  const bool faulted = MQ_SIM_FAULTED();
  Status m = ModelReplicaLog::SetHighWatermark(offset);
  if (!faulted && MQ_SIM_FAULTED()) return m;
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  Status s = r->SetHighWatermark(offset);
  Compare("SetHighWatermark", m, s);
  return s;
}

Result<AppendResult> RealReplicaLog::AppendReplicated(std::span<const std::byte> batches,
                                                      CrcCheck crc_check) {
  const bool faulted = MQ_SIM_FAULTED();
  const int64_t before = files().LogEnd();
  auto m = ModelReplicaLog::AppendReplicated(batches, crc_check);
  if (!faulted && MQ_SIM_FAULTED()) {
    // The model kept the batches before the failing one: so does the disk.
    const int64_t kept_to = files().LogEnd();
    if (kept_to > before && io_failed()) {
      size_t at = 0;
      while (at + format::kLogOverhead + 4 <= batches.size()) {
        const BatchHeader h = DecodeBatchHeader(batches.subspan(at));
        if (h.last_offset() >= kept_to) break;
        at += static_cast<size_t>(h.batch_length) + format::kLogOverhead;
      }
      if (ReplicaLog* r = Real()) {
        auto kept = r->AppendReplicated(batches.first(at), crc_check);
        if (!kept) Broken("the batches kept before an I/O error: " + kept.error().message());
      }
    }
    return m;
  }
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  auto s = r->AppendReplicated(batches, crc_check);
  Compare("AppendReplicated", m.status(), s.status());
  return s;
}

Status RealReplicaLog::TruncateTo(int64_t offset, int32_t leader_epoch) {
  const bool faulted = MQ_SIM_FAULTED();
  Status m = ModelReplicaLog::TruncateTo(offset, leader_epoch);
  if (!faulted && MQ_SIM_FAULTED()) return m;
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  Status s = r->TruncateTo(offset, leader_epoch);
  Compare("TruncateTo", m, s);
  return s;
}

Status RealReplicaLog::DeleteBefore(int64_t offset) {
  Status m = ModelReplicaLog::DeleteBefore(offset);
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  Status s = r->DeleteBefore(offset);
  Compare("DeleteBefore", m, s);
  return s;
}

Status RealReplicaLog::BeginEpoch(int32_t epoch) {
  const bool faulted = MQ_SIM_FAULTED();
  Status m = ModelReplicaLog::BeginEpoch(epoch);
  if (!faulted && MQ_SIM_FAULTED()) return m;
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  Status s = r->BeginEpoch(epoch);
  Compare("BeginEpoch", m, s);
  return s;
}

Status RealReplicaLog::FenceEpochsBelow(int32_t epoch) {
  const bool faulted = MQ_SIM_FAULTED();
  Status m = ModelReplicaLog::FenceEpochsBelow(epoch);
  if (!faulted && MQ_SIM_FAULTED()) return m;
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  Status s = r->FenceEpochsBelow(epoch);
  Compare("FenceEpochsBelow", m, s);
  return s;
}

// The leader's positions of its followers are the real log's alone (its
// fetch-positions file, which a process crash leaves; the model forgets
// them at a crash).
Status RealReplicaLog::RecordFollower(const FollowerPosition& position) {
  ReplicaLog* r = Real();
  return r ? r->RecordFollower(position) : Status(Code::kIoError, breach_);
}
Status RealReplicaLog::RecordFollowers(const std::vector<FollowerPosition>& all) {
  ReplicaLog* r = Real();
  return r ? r->RecordFollowers(all) : Status(Code::kIoError, breach_);
}
Result<std::vector<FollowerPosition>> RealReplicaLog::Followers() {
  ReplicaLog* r = Real();
  return r ? r->Followers()
           : Result<std::vector<FollowerPosition>>(Status(Code::kIoError, breach_));
}

Result<LeaderClaim> RealReplicaLog::LoadLeaderClaim() {
  ReplicaLog* r = Real();
  return r ? r->LoadLeaderClaim() : Result<LeaderClaim>(Status(Code::kIoError, breach_));
}
Result<LeaderClaim> RealReplicaLog::ReadLeaderClaim() {
  ReplicaLog* r = Real();
  return r ? r->ReadLeaderClaim() : Result<LeaderClaim>(Status(Code::kIoError, breach_));
}
Status RealReplicaLog::StoreLeaderClaim(const LeaderClaim& claim) {
  const bool faulted = MQ_SIM_FAULTED();
  Status m = ModelReplicaLog::StoreLeaderClaim(claim);
  if (!faulted && MQ_SIM_FAULTED()) return m;
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  Status s = r->StoreLeaderClaim(claim);
  Compare("StoreLeaderClaim", m, s);
  return s;
}

Status RealReplicaLog::WithLeaderLock(const std::function<Status()>& fn) {
  ReplicaLog* r = Real();
  return r ? r->WithLeaderLock(fn) : Status(Code::kIoError, breach_);
}

Result<SimBatch> RealReplicaLog::AppendAsLeader(uint64_t write_id, int records, int32_t epoch,
                                                int64_t timestamp_ms) {
  const bool faulted = MQ_SIM_FAULTED();
  auto m = ModelReplicaLog::AppendAsLeader(write_id, records, epoch, timestamp_ms);
  if (!faulted && MQ_SIM_FAULTED()) return m;
  if (!Real()) return Status(Code::kIoError, breach_);
  // mq-produce's append: a writer of its own stamping `epoch`, which
  // checks the log's latest epoch and its fence (R56) with the write.
  if (!producer_ || producer_epoch_ != epoch) {
    producer_.reset();
    LogConfig c = config_;
    c.leader_epoch = epoch;
    auto opened = PartitionWriter::Open(dir_, c, false, nullptr);
    if (!opened) {
      Broken("the producer's writer does not open: " + opened.error().message());
      return opened.error();
    }
    producer_ = std::move(*opened);
    producer_epoch_ = epoch;
  }
  Status s;
  if (m) {
    std::vector<std::byte> bytes = *m->bytes;
    auto appended = producer_->Append(bytes);
    s = appended.status();
    if (appended && appended->base_offset != m->base)
      Disagree("a leader's append: another offset",
               fmt::format("the producer's batch went to offset {}, the model's to {}",
                           appended->base_offset, m->base));
  } else {
    // The model refused it: so must the writer (a batch it would append
    // at its log end, stamped `epoch`).
    BatchOptions options;
    options.partition_leader_epoch = epoch;
    BatchBuilder builder(options);
    RecordInput rec;
    rec.timestamp = timestamp_ms;
    builder.Add(rec);
    std::vector<std::byte> bytes;
    auto leo = real_->LogEndOffset();
    if (leo && builder.Finish(*leo, &bytes).ok()) s = producer_->Append(bytes).status();
  }
  Compare("a leader's append", m.status(), s);
  if (!s.ok()) return s;
  return m;
}

void RealReplicaLog::Sync() {
  ModelReplicaLog::Sync();
  fs_.SyncAll();  // the kernel's writeback caught up
}

void RealReplicaLog::Kill() {
  ModelReplicaLog::Kill();
  SetBoot();  // what the objects publish as they go is of this host's boot
  producer_.reset();
  producer_epoch_ = -1;
  real_.reset();
  // The process comes back on the page cache: the log opens (recovers) on
  // what the model says the killed process left.
  if (Real()) {
    CompareEnds("recovery after a process crash");
    if (resync_) Resync();
  }
}

Result<ReplicaFiles> RealReplicaLog::RealFiles() {
  ReplicaLog* r = Real();
  if (!r) return Status(Code::kIoError, breach_);
  ReplicaFiles f;
  auto start = r->LogStartOffset();
  auto end = r->LogEndOffset();
  auto hw = r->HighWatermark();
  if (!start) return start.error();
  if (!end) return end.error();
  if (!hw) return hw.error();
  f.log_start = *start;
  f.hw = *hw;
  std::vector<std::byte> buf;
  for (int64_t at = *start; at < *end;) {
    MQ_RETURN_IF_ERROR(r->Read(at, 1 << 20, &buf));
    if (buf.empty()) break;
    size_t pos = 0;
    while (pos + format::kLogOverhead + 4 <= buf.size()) {
      const BatchHeader h = DecodeBatchHeader(std::span<const std::byte>(buf).subspan(pos));
      const size_t len = static_cast<size_t>(h.batch_length) + format::kLogOverhead;
      SimBatch b;
      b.base = h.base_offset;
      b.last = h.last_offset();
      b.epoch = h.partition_leader_epoch;
      b.identity = BatchIdentity(h);
      b.bytes = std::make_shared<const std::vector<std::byte>>(
          buf.begin() + static_cast<ptrdiff_t>(pos),
          buf.begin() + static_cast<ptrdiff_t>(pos + len));
      at = b.last + 1;
      f.log.push_back(std::move(b));
      pos += len;
    }
  }
  // What a fetch from the log start would get: everything below the log
  // end.
  if (f.LogEnd() < *end)
    Disagree(
        "Read hands out less than the log holds",
        fmt::format("Read from the log start stops at {}, the log end is {}", f.LogEnd(), *end));
  auto dir_fd = OpenDirectory(dir_, false, &fs_);
  if (!dir_fd) return dir_fd.error();
  auto epochs = LeaderEpochCache::Load(dir_fd->get(), &fs_);
  if (epochs)
    f.epochs = std::move(*epochs);
  else if (epochs.error().code() != Code::kNotFound)
    return epochs.error();
  return f;
}

void RealReplicaLog::PowerLoss(Rng& rng) {
  // The model's power loss: its boot moves on (the boot id the real log
  // sees too) and what it says a disk may keep.
  const ReplicaFiles before = files();
  // The host's power goes: every process of it ends. What the objects
  // publish as they go (the state file) is stamped with the boot that
  // ends, this host's: the environment's boot id is the last one set, of
  // whichever replica ran last (one process plays every host).
  SetBoot();
  reader_.reset();
  producer_.reset();
  producer_epoch_ = -1;
  real_.reset();
  ModelReplicaLog::PowerLoss(rng);
  fs_.PowerCut(rng);
  auto real = RealFiles();
  if (!real) {
    Broken("after a power loss: " + real.error().message());
    return;
  }
  // What the real disk kept is the replica's from now on. It may keep
  // more than the model drew (each fsync of the real log commits what came
  // before it), never a log that is not a prefix of what the page cache
  // held.
  bool prefix = real->log.size() <= before.log.size();
  for (size_t i = 0; prefix && i < real->log.size(); ++i)
    prefix = real->log[i].identity == before.log[i].identity;
  if (!prefix)
    Disagree("power loss: the disk kept what the page cache did not hold",
             fmt::format("after a power loss the log ends at {} and is not a prefix of the {} "
                         "batches it held",
                         real->LogEnd(), before.log.size()));
  if (real->hw > real->LogEnd())
    Disagree(
        "power loss: a HW past the log end",
        fmt::format("after a power loss: hw {} past the log end {}", real->hw, real->LogEnd()));
  Adopt(std::move(*real));
  resync_ = false;
}

}  // namespace mq::sim
