// A replica whose log is the one that ships (README.md, "The real log"):
// liblog's FileReplicaLog (OpenReplicaLog) and the producer's
// PartitionWriter over a simulated host file system (sim_fs.h), run in
// lockstep with the model log (model.h), which stays as the checker's
// oracle. Every call goes to the real log and its answer is what the
// replication code gets; the model is given the same call, and a
// disagreement between them (one refuses what the other takes, a log end
// or HW that differs, a recovered log that is not what the model says may
// survive) is reported as a broken ReplicaLog contract. The model decides
// the injected faults (a kill before the n-th write, an I/O error): the
// write it fails never reaches the real log. A kill closes the real log's
// objects (the page cache survives: the reopened log recovers on it); a
// power loss closes them, cuts the power of the simulated file system
// (SimFs::PowerCut) and reopens the log, whose recovery runs; the model
// then takes the recovered files as its own.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model.h"
#include "mq/partition.h"
#include "sim_fs.h"

namespace mq::sim {

class RealReplicaLog : public ModelReplicaLog {
 public:
  // `mapped_kept`: a power loss keeps the page cache of the files written
  // through a mapping (the state file), rather than drawing it or the
  // last contents written otherwise (SimFs::set_mapped_kept).
  RealReplicaLog(int32_t id, SyncPolicy policy, DiskOrder order, const std::string& topic,
                 bool mapped_kept = false);
  ~RealReplicaLog() override;

  Result<int64_t> LogStartOffset() override;
  Result<int64_t> LogEndOffset() override;
  Result<int64_t> HighWatermark() override;
  Status SetHighWatermark(int64_t offset) override;
  Result<int32_t> LatestEpoch() override;
  Result<EpochEndOffset> EndOffsetFor(int32_t epoch) override;
  Status Read(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
              uint32_t* crc = nullptr) override;
  Result<AppendResult> AppendReplicated(std::span<const std::byte> batches,
                                        CrcCheck crc_check = CrcCheck::kVerify) override;
  Status TruncateTo(int64_t offset, int32_t leader_epoch = -1) override;
  Status DeleteBefore(int64_t offset) override;
  Status BeginEpoch(int32_t epoch) override;
  Status FenceEpochsBelow(int32_t epoch) override;
  Status RecordFollower(const FollowerPosition& position) override;
  Status RecordFollowers(const std::vector<FollowerPosition>& all) override;
  Result<std::vector<FollowerPosition>> Followers() override;
  Result<LeaderClaim> LoadLeaderClaim() override;
  Result<LeaderClaim> ReadLeaderClaim() override;
  Status StoreLeaderClaim(const LeaderClaim& claim) override;
  Status WithLeaderLock(const std::function<Status()>& fn) override;

  Result<SimBatch> AppendAsLeader(uint64_t write_id, int records, int32_t epoch,
                                  int64_t timestamp_ms) override;
  void Sync() override;
  void Kill() override;
  void PowerLoss(Rng& rng) override;
  const std::string& contract_breach() const override;
  std::vector<std::pair<std::string, std::string>> TakeDisagreements() override {
    return std::exchange(disagreements_, {});
  }

  const std::string& dir() const { return dir_; }

  // A consumer's reader of this replica's files: liblog's PartitionReader
  // bound by the high watermark over the simulated file system, in a
  // process of its own (a kill of the replica's process leaves it open; a
  // power loss closes it). OpenReader replaces the one before, positioned
  // at `offset`.
  Status OpenReader(int64_t offset);
  bool reader_open() const { return reader_ != nullptr; }
  // One Next() of the reader: the batch it handed out (nullopt at its end)
  // and what it reported since the call before: the offset it went back to
  // after a truncation (TakeCut) or the log start it went on at
  // (TakeOutOfRange).
  struct ReaderStep {
    std::optional<SimBatch> batch;
    std::optional<int64_t> cut;
    std::optional<int64_t> out_of_range;
  };
  Result<ReaderStep> ReaderNext();
  // What the reader sees of the log now (end_offset(), rewrites()).
  std::string ReaderText();

 private:
  // The real log, opened (recovered) again after a crash; null when that
  // failed (the breach says why). Sets the boot id liblog sees to this
  // replica's (MQ_TEST_BOOT_ID: one process plays every host).
  ReplicaLog* Real();
  void SetBoot();
  // The real log cannot go on (it does not open, its files cannot be
  // read): a broken contract, the schedule fails.
  void Broken(const std::string& what);
  // The real log and the model disagree (`kind`, counted by mq-sim; `what`
  // says how): the model takes the real log's files, which the invariants
  // go on checking.
  void Disagree(const std::string& kind, const std::string& what);
  // After a change made by `call`: the statuses, then the log end and HW
  // of the model and of the real log.
  void Compare(const char* call, const Status& model, const Status& real);
  void CompareEnds(const char* call);
  // The model takes the real log's files.
  void Resync();
  // The real log's files as the model holds them.
  Result<ReplicaFiles> RealFiles();

  SimFs fs_;
  std::string dir_;
  LogConfig config_;
  std::unique_ptr<ReplicaLog> real_;
  // The producer's writer (mq-produce's), of the epoch it stamps.
  std::unique_ptr<PartitionWriter> producer_;
  std::unique_ptr<PartitionReader> reader_;
  int32_t producer_epoch_ = -1;
  std::string breach_;
  std::vector<std::pair<std::string, std::string>> disagreements_;
  bool resync_ = false;
};

}  // namespace mq::sim
