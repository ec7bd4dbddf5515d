// The leader epochs a partition writer works with (replication.md §16.2,
// R37, R56): the epoch cache, the epoch fence, and the state file
// generation they were read at (another writer may have stored newer ones
// since). Kafka's LeaderEpochFileCache as its log holds it.
//
// Every call is made under the partition's writer lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mq/replica_checkpoint.h"
#include "mq/status.h"
#include "storage/partition_dir.h"

namespace mq {

class EpochState {
 public:
  // Loads (or rebuilds, R37) the leader epochs and the fence as they are
  // stored, as of the state generation `generation`; no cache when the
  // writer stamps no epoch (config.leader_epoch < 0) and there is no
  // checkpoint.
  Status Load(const PartitionDir& d, int64_t log_end, uint32_t generation);
  // Load unless the epochs held are those stored as of `generation`.
  Status Fresh(const PartitionDir& d, int64_t log_end, uint32_t generation) {
    return CurrentAt(generation) ? Status::Ok() : Load(d, log_end, generation);
  }
  // Fresh, and a cache even for a writer that stamps no epoch: the
  // checkpoint rebuilt from the log (R37) when it is missing.
  Status ForReplication(const PartitionDir& d, int64_t log_end, uint32_t generation);
  // Before the first batch of an append: the leader's epoch
  // (config.leader_epoch) starts at `log_end` unless it is the latest
  // already; one below the latest, or below the epoch fence a follower
  // stored (R56), is kFenced. `*assigned` (if given): whether it started
  // here. Nothing to do for a writer that stamps no epoch.
  Status Begin(const PartitionDir& d, int64_t log_end, uint32_t generation,
               bool* assigned = nullptr);

  // After the log start moved up to `log_start` (segments deleted): the
  // epochs held, read again if stale, lose the entries before it
  // (LeaderEpochCache::TruncateFromStart) and are stored. Nothing when
  // none are held.
  Status DropBefore(const PartitionDir& d, int64_t log_start, int64_t log_end, uint32_t generation);

  // Whether the epochs held are those stored as of `generation`.
  bool CurrentAt(uint32_t generation) const { return cache_ && generation_ == generation; }
  // The state was published at `generation` by the holder of these
  // epochs: they are still current.
  void Published(uint32_t generation) { generation_ = generation; }
  bool loaded() const { return cache_.has_value(); }
  // The cache (loaded() must hold).
  LeaderEpochCache& cache() { return *cache_; }
  // An empty cache when none is loaded: the first epoch a follower sees
  // creates the checkpoint.
  void EnsureCache() {
    if (!cache_) cache_.emplace();
  }
  int32_t fence() const { return fence_; }
  // R56: stores the epoch fence `epoch` unless the stored one is as high
  // (it only moves forward); whether it was stored, which the caller then
  // publishes so that every other writer rereads the fence (with the
  // epochs) at its next look, before it appends.
  Result<bool> RaiseFence(const PartitionDir& d, int32_t epoch, uint32_t generation);

  // The epochs a follower's append brings (R37): fed each batch header in
  // order, from the latest epoch held (ensure a cache first).
  class Replicated {
   public:
    explicit Replicated(const EpochState& state) : latest_(state.cache_->latest()) {}
    // From the latest epoch a log holds (nullopt: none); the simulator's
    // model log applies the same rule through it.
    explicit Replicated(std::optional<EpochEntry> latest) : latest_(latest) {}
    // kCorruption (R37) for an epoch below the latest (`at`: the batch's
    // byte position in the append); -1 batches add nothing.
    Status Add(const BatchHeader& h, size_t at);
    // Assigns and stores the epochs the batches started, if any.
    Status Store(const PartitionDir& d, EpochState* state) const;

   private:
    std::optional<EpochEntry> latest_;
    std::vector<EpochEntry> starts_;
  };

 private:
  std::optional<LeaderEpochCache> cache_;
  uint32_t generation_ = 0;
  int32_t fence_ = -1;  // R56, read with the epochs (-1: none)
};

}  // namespace mq
