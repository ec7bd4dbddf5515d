// The leader epochs of a partition writer (replication.md §16.2, R37, R56).
#include "storage/epoch_state.h"

#include <algorithm>

#include <fmt/format.h>

#include "mq/batch.h"

namespace mq {

Status EpochState::Load(const PartitionDir& d, int64_t log_end, uint32_t generation) {
  cache_.reset();
  // With the epochs: a follower stores the fence and publishes under the
  // lock, so a view as of this generation holds it.
  auto stored = LoadLeaderEpochFence(d.fd(), d.fs);
  if (!stored) return stored.error();
  fence_ = *stored;
  if (d.config.leader_epoch < 0) {
    // Only whether there is one (LeaderEpochCache::Open reads it).
    auto f = d.fs->StatAt(d.fd(), kLeaderEpochCheckpointFile);
    if (!f && f.error().code() == Code::kNotFound) return Status::Ok();
    if (!f) return f.error();
  }
  auto cache = LeaderEpochCache::Open(d.fd(), log_end, d.config.limits, d.fs);
  if (!cache) return cache.error();
  cache_ = std::move(*cache);
  generation_ = generation;
  return Status::Ok();
}

Status EpochState::ForReplication(const PartitionDir& d, int64_t log_end, uint32_t generation) {
  MQ_RETURN_IF_ERROR(Fresh(d, log_end, generation));
  if (cache_) return Status::Ok();
  auto cache = LeaderEpochCache::Open(d.fd(), log_end, d.config.limits, d.fs);
  if (!cache) return cache.error();
  cache_ = std::move(*cache);
  generation_ = generation;
  return Status::Ok();
}

Status EpochState::Begin(const PartitionDir& d, int64_t log_end, uint32_t generation,
                         bool* assigned) {
  if (assigned != nullptr) *assigned = false;
  const int32_t epoch = d.config.leader_epoch;
  if (epoch < 0) return Status::Ok();
  MQ_RETURN_IF_ERROR(Fresh(d, log_end, generation));
  // R56: checked first, for the latest epoch too: a leader deposed after
  // its check still holds the latest epoch of a log that now follows a
  // newer leader and has fetched nothing of its epoch yet.
  if (epoch < fence_)
    return Status(Code::kFenced,
                  fmt::format("{}: leader epoch {} is below the epoch fence {} (R56): this log "
                              "follows the leader of epoch {}; this writer is no longer the leader",
                              d.dir, epoch, fence_, fence_));
  auto latest = cache_->latest();
  if (latest && latest->epoch == epoch) return Status::Ok();
  if (latest && latest->epoch > epoch)
    return Status(Code::kFenced,
                  fmt::format("{}: leader epoch {} is below the partition's latest epoch {} "
                              "(since offset {}): this writer is no longer the leader",
                              d.dir, epoch, latest->epoch, latest->start_offset));
  MQ_RETURN_IF_ERROR(cache_->Assign(epoch, log_end));
  MQ_RETURN_IF_ERROR(cache_->Store(d.fd(), d.fs));
  if (assigned != nullptr) *assigned = true;
  return Status::Ok();
}

Status EpochState::DropBefore(const PartitionDir& d, int64_t log_start, int64_t log_end,
                              uint32_t generation) {
  if (cache_) MQ_RETURN_IF_ERROR(Fresh(d, log_end, generation));
  if (!cache_) return Status::Ok();
  cache_->TruncateFromStart(log_start);
  return cache_->Store(d.fd(), d.fs);
}

Result<bool> EpochState::RaiseFence(const PartitionDir& d, int32_t epoch, uint32_t generation) {
  auto stored = LoadLeaderEpochFence(d.fd(), d.fs);
  if (!stored) return stored.error();
  if (*stored >= epoch) return false;
  MQ_RETURN_IF_ERROR(StoreLeaderEpochFence(d.fd(), epoch, d.fs, d.sync()));
  if (generation_ == generation) fence_ = std::max(fence_, epoch);
  return true;
}

Status EpochState::Replicated::Add(const BatchHeader& h, size_t at) {
  const int32_t e = h.partition_leader_epoch;
  if (e == -1) return Status::Ok();
  if (e < -1 || (latest_ && e < latest_->epoch))
    return Status::Corruption(
        "append", at, "R37",
        fmt::format("replicated batch at offset {} has leader epoch {}, below epoch {} of "
                    "offset {}",
                    h.base_offset, e, latest_ ? latest_->epoch : -1,
                    latest_ ? latest_->start_offset : -1));
  if (!latest_ || e > latest_->epoch) {
    latest_ = EpochEntry{e, h.base_offset};
    starts_.push_back(*latest_);
  }
  return Status::Ok();
}

Status EpochState::Replicated::Store(const PartitionDir& d, EpochState* state) const {
  if (starts_.empty()) return Status::Ok();
  for (const EpochEntry& e : starts_)
    MQ_RETURN_IF_ERROR(state->cache_->Assign(e.epoch, e.start_offset));
  return state->cache_->Store(d.fd(), d.fs);
}

}  // namespace mq
