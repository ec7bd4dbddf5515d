// Key compaction of a cleanup.policy=compact partition
// (format-spec/compaction.md, R114-R125), as Kafka's log cleaner: which
// sealed segments are cleanable and whether the partition is due
// (PlanCompaction, a pure function of what ListRetentionSegments reads),
// the offset map of fixed memory (OffsetMap), one cleaning pass over a
// partition directory with its crash-safe swap (CompactPartition), and the
// completion of a swap a crash interrupted (FinishCompactionSwaps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/file.h"
#include "mq/retention.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq {

// R116: key -> offset of its latest record, in a table of fixed size
// allocated once: each slot is a 128-bit hash of the key and the offset
// (kBytesPerSlot bytes), linear probing, at most kLoadFactor of the slots
// used.
class OffsetMap {
 public:
  static constexpr size_t kBytesPerSlot = 24;
  static constexpr double kLoadFactor = 0.9;
  // A map of memory_bytes / kBytesPerSlot slots (at least 1).
  explicit OffsetMap(size_t memory_bytes);
  // Records `offset` as `key`'s latest (a later Put for the same key
  // replaces it). False, and nothing changed, when a new key would pass
  // the load factor.
  bool Put(Bytes key, int64_t offset);
  // The latest offset put for `key`.
  std::optional<int64_t> Get(Bytes key) const;
  void Clear();
  size_t size() const { return size_; }  // keys held
  size_t slots() const { return slots_.size(); }
  size_t capacity() const { return limit_; }  // keys it takes
  size_t free() const { return limit_ - size_; }
  size_t memory_bytes() const { return slots_.size() * kBytesPerSlot; }

 private:
  struct Slot {
    uint64_t h1 = 0, h2 = 0;
    int64_t offset = -1;  // -1: empty
  };
  static_assert(sizeof(Slot) == kBytesPerSlot);
  size_t Find(uint64_t h1, uint64_t h2) const;
  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t limit_ = 0;
};

// R116's hash: MurmurHash3 x64-128 (seed 0) of `key`, as two halves.
void KeyHash128(Bytes key, uint64_t* h1, uint64_t* h2);

// The topic keys (and run settings) compaction follows; -1: unbounded/none.
struct CompactionPolicy {
  int64_t now_ms = 0;
  double min_cleanable_dirty_ratio = 0.5;  // R115
  int64_t min_compaction_lag_ms = 0;       // R114
  int64_t max_compaction_lag_ms = -1;      // R115
  int64_t delete_retention_ms = 86400000;  // R121
  size_t max_memory_bytes = 128u << 20;    // R116: the offset map's budget
  // Clean even when not due (a test, or an operator's explicit run).
  bool force = false;
};

// R114/R115: the cleanable section of a partition and whether it is due.
struct CompactionPlan {
  std::vector<RetentionSegment> segments;  // cleanable, ascending
  int64_t first_dirty = 0;                 // R115
  int64_t cleanable_end = 0;               // one past the section's last offset
  uint64_t clean_bytes = 0;
  uint64_t dirty_bytes = 0;
  double dirty_ratio = 0;
  bool due = false;
  // "dirty ratio", "max.compaction.lag.ms", "delete horizon", "forced", or why not
  const char* why = "";
};

// R115: what the partition's compaction-offset file holds: the first dirty
// offset, and the earliest delete horizon of a tombstone the last pass
// kept (R121; -1: none).
struct CompactionCheckpoint {
  int64_t offset = 0;
  int64_t delete_horizon = -1;
};
// `checkpoint`: the file's values (ReadCompactionCheckpoint), or the log
// start and no horizon without the file.
CompactionPlan PlanCompaction(const RetentionLog& log, const CompactionCheckpoint& checkpoint,
                              const CompactionPolicy& policy);

// R115: the partition's compaction-offset file, or nullopt without one.
Result<std::optional<CompactionCheckpoint>> ReadCompactionCheckpoint(int dir_fd,
                                                                     FileSystem* fs = nullptr);

struct CompactionReport {
  bool compacted = false;  // false: not due, or nothing cleanable
  CompactionPlan plan;
  uint64_t bytes_before = 0;  // of the segments cleaned
  uint64_t bytes_after = 0;
  uint64_t keys = 0;              // distinct keys in the offset map
  uint64_t map_memory_bytes = 0;  // R116: what the map allocated
  uint64_t records_removed = 0;
  uint64_t tombstones_removed = 0;
  uint64_t batches_rewritten = 0;  // re-encoded (R118), or emptied (R119)
  uint64_t batches_removed = 0;
  uint64_t horizons_set = 0;  // R121
  int segments_cleaned = 0;
  int64_t map_end = 0;     // R116: cleaned up to here
  bool map_full = false;   // the map stopped before the cleanable end
  int swaps_finished = 0;  // R124: by the FinishCompactionSwaps run first
  // R121: the earliest delete horizon of a tombstone kept (-1: none): the
  // partition is due again then.
  int64_t next_delete_horizon = -1;
};

// One pass over the partition at `dir` (R114-R124): finishes an
// interrupted swap, plans, and when due builds the offset map over the
// dirty section and rewrites the cleanable segments oldest first, each
// swapped in crash-safely, then records the map end in compaction-offset.
// The caller holds mq-compact's run lock (R79). `limits`: the topic's.
Result<CompactionReport> CompactPartition(const std::string& dir, const CompactionPolicy& policy,
                                          FileSystem* fs = nullptr,
                                          const DecodeLimits& limits = {});

// R126: whether the topic takes keyed messages only (its cleanup.policy is
// compact). What CheckMessageKey decides on; a producer asks it once.
bool KeyedMessagesOnly(const TopicConfig& config);

// R126: a topic whose cleanup.policy is compact takes keyed messages only
// (compaction keeps the latest record per key: a message without a key
// could never be replaced or deleted). OK for a message with a key, or on a
// topic of another policy; else kCorruption (R126) naming the message by
// `source` and `position` (where the producer read it) and `topic`.
Status CheckMessageKey(const TopicConfig& config, std::string_view topic, bool has_key,
                       const std::string& source, uint64_t position);

// R124: removes the `.cleaned` files a crashed pass left and completes
// every committed swap (`<base>.log.swap`); returns how many it completed.
Result<int> FinishCompactionSwaps(int dir_fd, FileSystem* fs = nullptr);

}  // namespace mq
