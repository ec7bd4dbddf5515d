// The simulator's models of the replication seams (mq/replication.h,
// mq/cluster.h): a replica's log held in memory with its page cache apart
// from its disk, the cluster state's store, a virtual clock. All of it is
// deterministic and single-threaded; nothing here reads the wall clock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "mq/batch.h"
#include "mq/cluster.h"
#include "mq/replica_checkpoint.h"
#include "mq/replication.h"

namespace mq::sim {

using Rng = std::mt19937_64;

// One batch of a model log: its real RecordBatch v2 bytes (shared, never
// changed) and what the invariants compare.
struct SimBatch {
  int64_t base = 0;
  int64_t last = 0;
  int32_t epoch = -1;
  uint64_t identity = 0;  // base, last, epoch and the CRC (payload) mixed
  std::shared_ptr<const std::vector<std::byte>> bytes;
};

// When a replica's page cache reaches its disk.
enum class SyncPolicy : uint8_t {
  kEveryWrite,  // --fsync always: a power loss loses nothing
  kPeriodic,    // the simulator syncs at random steps
  kNever,       // only the page cache; a power loss loses everything unsynced
};
const char* SyncPolicyName(SyncPolicy p);

// A replica's files as the process sees them (page cache over disk), or as
// the disk holds them.
struct ReplicaFiles {
  int64_t log_start = 0;
  std::vector<SimBatch> log;
  int64_t hw = -1;
  LeaderEpochCache epochs;
  int64_t LogEnd() const { return log.empty() ? log_start : log.back().last + 1; }
};

// How unsynced writes reach the disk before a power loss.
enum class DiskOrder : uint8_t {
  kOrdered,      // a prefix of all the replica's writes (ext4 data=ordered:
                 // one journal orders the log, the checkpoints, truncation)
  kIndependent,  // a prefix of each file's writes, the files independently
  // Journaled metadata in order, appended data not (ext4 with delayed
  // allocation, XFS): the truncations and the checkpoint files' writes
  // (each written whole and renamed over the old one) up to a point, in
  // order, and of the log's appends before that point a prefix.
  kMetadataOrdered,
};

// A replica's log in memory. Appends, truncations, the HW and the epoch
// checkpoint change the page cache; Sync writes it to the disk; PowerLoss
// keeps on the disk a random prefix of what was not synced (DiskOrder).
// A process kill keeps the page cache: Kill only clears what lives in the
// process. AppendReplicated checks what the real follower append checks:
// every batch parses with its CRC (R1-R6), offsets continue the log, epochs
// never go back (R37: the writer's rule, EpochState::Replicated).
class ModelReplicaLog : public ReplicaLog {
 public:
  ModelReplicaLog(int32_t id, SyncPolicy policy, DiskOrder order = DiskOrder::kOrdered)
      : id_(id), policy_(policy), order_(order) {}

  int32_t replica_id() const override { return id_; }
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
  // The fence (R56) is fsynced when stored, as the claim: no power loss
  // takes it back.
  Status FenceEpochsBelow(int32_t epoch) override;
  int32_t fence() const { return fence_; }
  Status RecordFollower(const FollowerPosition& position) override;
  Result<std::vector<FollowerPosition>> Followers() override;
  // The claim (R53) is fsynced when stored: no power loss takes it.
  Result<LeaderClaim> LoadLeaderClaim() override { return claim_; }
  Result<LeaderClaim> ReadLeaderClaim() override { return claim_; }
  Status StoreLeaderClaim(const LeaderClaim& claim) override;
  // A boot id made of the replica's host (the replica id) and its boot
  // count (a power loss is a reboot): like the kernel's random UUIDs, no
  // two boots of any hosts share one.
  BootId RunningBoot() override;
  const LeaderClaim& claim() const { return claim_; }
  // One thread: the lock is the call itself.
  Status WithLeaderLock(const std::function<Status()>& fn) override { return fn(); }

  // A producer's batch appended at the leader: `records` records whose
  // values carry `write_id`, stamped with `epoch`. Returns the batch. As
  // the real writer's append, in one critical section with the write: an
  // epoch below the log's latest or below the fence is kFenced.
  virtual Result<SimBatch> AppendAsLeader(uint64_t write_id, int records, int32_t epoch,
                                          int64_t timestamp_ms);

  virtual void Sync();
  // The process dies; the page cache survives.
  virtual void Kill();
  // The machine loses power: the page cache is gone; the disk keeps a
  // random prefix of each file's unsynced writes; recovery then runs as
  // the real log's open does (HW clamped to the LEO, epoch entries at or
  // past the LEO dropped, epochs of the log's tail re-assigned).
  virtual void PowerLoss(Rng& rng);

  // The next I/O fails (kIoError) and the simulator crashes the replica.
  // AppendReplicated drops epochs begun at the log end that hold no batch
  // when the leader's batches carry an older epoch (as Kafka's follower
  // tolerates), rather than refusing them as mq's log does.
  void set_lenient_empty_epochs(bool on) { lenient_empty_epochs_ = on; }
  // A multi-batch append keeps its first `keep_batches` batches (fewer
  // than all) before failing.
  void FailNextIo(size_t keep_batches = 0) {
    fail_next_io_ = true;
    fail_keep_batches_ = keep_batches;
  }
  void CancelIoFault() { fail_next_io_ = false; }
  // The process dies before the `n`-th write from now that changes the
  // replica's state (0: the next; its epoch fence, a truncation, an
  // append, its HW): that write fails kUnavailable without effect and
  // killed() says so (the simulator then kills the replica). -1 disarms.
  void KillBeforeWrite(int n) {
    kill_in_ = n;
    killed_ = false;
  }
  bool killed() const { return killed_; }
  bool io_failed() const { return io_failed_; }
  void clear_io_failed() { io_failed_ = false; }

  const ReplicaFiles& files() const { return live_; }
  // The batches TruncateTo removed since the last call (a power loss's
  // losses are not truncations: they are what --fsync did not buy).
  std::vector<SimBatch> TakeTruncated() { return std::exchange(truncated_, {}); }
  // Bumped whenever batches leave the log (truncation, power loss).
  uint64_t cut_generation() const { return cut_generation_; }
  // A call broke the ReplicaLog contract (say, a HW past the LEO); empty
  // when none did.
  virtual const std::string& contract_breach() const { return contract_breach_; }
  // The real log's disagreements with this model since the last call
  // (RealReplicaLog): a kind and what happened. None for the model alone.
  virtual std::vector<std::pair<std::string, std::string>> TakeDisagreements() { return {}; }
  SyncPolicy policy() const { return policy_; }

 protected:
  // The page cache and the disk both become `files` (what a real log
  // holds after it recovered): nothing unsynced, the followers forgotten,
  // the cut generation bumped.
  void Adopt(ReplicaFiles files);

 private:
  using LogOp = std::variant<SimBatch, int64_t>;  // append, or truncate to
  struct HwWrite {
    int64_t hw;
  };
  // One unsynced write: to the log, the HW checkpoint or the epoch
  // checkpoint (the whole file, replaced).
  using Write = std::variant<LogOp, HwWrite, LeaderEpochCache>;
  static void ApplyWrite(ReplicaFiles& f, const Write& w);
  // kill_checked: MaybeKill ran for this write already.
  Status MaybeFailIo(const char* what, bool kill_checked = false);
  Status MaybeKill(const char* what);
  void Wrote();
  void PushLog(LogOp op);
  void PushHw();
  void PushEpochs();
  // The write just pushed was fsynced: every write before it is committed
  // as the DiskOrder's fsync commits them.
  void CommitPending() { committed_ = pending_.size(); }
  static void ApplyLog(ReplicaFiles& f, const LogOp& op);

  int32_t id_;
  SyncPolicy policy_;
  ReplicaFiles live_;
  ReplicaFiles disk_;
  DiskOrder order_;
  std::vector<Write> pending_;
  // How many of pending_ an fsync committed (a truncation's lowered HW,
  // R38/R40): a power loss keeps them whatever DiskOrder says of the rest.
  size_t committed_ = 0;
  std::vector<FollowerPosition> followers_;  // in memory, lost in a crash
  LeaderClaim claim_;
  int32_t fence_ = -1;
  uint64_t boots_ = 1;  // PowerLoss reboots
  bool lenient_empty_epochs_ = false;
  bool fail_next_io_ = false;
  int kill_in_ = -1;
  bool killed_ = false;
  size_t fail_keep_batches_ = 0;
  bool io_failed_ = false;
  uint64_t cut_generation_ = 0;
  std::vector<SimBatch> truncated_;
  std::string contract_breach_;
};

// The cluster state in memory; AlterPartition is the compare-and-swap on
// the partition epoch exactly as mq/cluster.h specifies it.
class MemClusterStore : public ClusterStore {
 public:
  explicit MemClusterStore(ClusterState state) : state_(std::move(state)) {}
  Result<ClusterState> Load() override { return state_; }
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override;
  const PartitionState& partition() const { return state_.partitions.front(); }
  // The state itself, for a test that plays the controller.
  ClusterState& state() { return state_; }
  int64_t changes() const { return changes_; }
  // Changes by a replica that restarted since its claim (R55).
  int64_t restart_changes() const { return restart_changes_; }
  void set_clock(Clock* clock) { clock_ = clock; }
  // The last changes, for a failure's trace.
  const std::vector<std::string>& recent() const { return recent_; }

 private:
  ClusterState state_;
  int64_t changes_ = 0;
  int64_t restart_changes_ = 0;
  Clock* clock_ = nullptr;
  std::vector<std::string> recent_;
};

class VirtualClock : public Clock {
 public:
  int64_t NowMs() override { return now_ms_; }
  void Advance(int64_t ms) { now_ms_ += ms; }

 private:
  int64_t now_ms_ = 1'700'000'000'000;
};

// The identity the invariants compare: offsets, epoch and CRC (the
// records' bytes) mixed into 64 bits.
uint64_t BatchIdentity(const BatchHeader& h);

}  // namespace mq::sim
