// The producer table a partition writer keeps (producer.md §10, P7):
// rebuilt from the newest snapshot and a replay of the batches after it,
// brought up to date with other writers' appends, deferred until first
// needed after a same-boot open, and the snapshot policy of a roll and a
// close. Kafka's ProducerStateManager. The table itself and the snapshot
// file are ProducerStateTable's (producer_state.h).
//
// Every call is made under the partition's writer lock; `segments` (base
// offsets, ascending) and `fields` are the writer's committed view.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "storage/log_segment.h"
#include "storage/partition_dir.h"
#include "storage/producer_state.h"
#include "storage/state_file.h"

namespace mq {

class ProducerStateManager {
 public:
  // Rebuilds the table: newest snapshot, then replay of the batches at or
  // after it up to the committed end. `active_log`: the active segment's
  // log, open on the file `fields` names (null: opened when needed);
  // `snapshots`: the snapshot offsets of a listing made under the lock
  // (null: listed here).
  Status Rebuild(const PartitionDir& d, const std::vector<int64_t>& segments,
                 const StateFields& fields, File* active_log = nullptr,
                 const std::vector<int64_t>* snapshots = nullptr);
  // After the committed state moved from `old` to `now` (another writer
  // published): replays what was appended since when the history is the
  // same (no cut, `old`'s end segment still there, the end not lower),
  // else rebuilds. Nothing while the table is deferred.
  Status CatchUp(const PartitionDir& d, const std::vector<int64_t>& segments,
                 const StateFields& old, const StateFields& now);
  // Builds a deferred table (see Defer); `active_log` as for Rebuild.
  Status Ensure(const PartitionDir& d, const std::vector<int64_t>& segments,
                const StateFields& fields, File* active_log);
  // After a same-boot open (P7): the table is built when first needed;
  // `newest_snapshot` is the offset of the newest snapshot left (-1: none).
  void Defer(int64_t newest_snapshot) {
    loaded_ = false;
    newest_snapshot_ = newest_snapshot;
  }
  bool loaded() const { return loaded_; }

  // At a roll to the segment `base`: the snapshot at `base`, fsynced.
  Status SnapshotAtRoll(const PartitionDir& d, const std::vector<int64_t>& segments,
                        const StateFields& fields, File* active_log, int64_t base);
  // Close's policy (P7). A table never built is wanted at close only when
  // the next open's replay could be long: the active segment holds
  // kSnapshotReplayBytes, or the newest snapshot is older than it while
  // earlier segments exist.
  bool TableWanted(const StateFields& fields, size_t segment_count) const;
  // A writer that appended nothing since the newest snapshot writes none,
  // nor one whose batches after it take less than kSnapshotReplayBytes of
  // the active segment (the next open replays them instead).
  bool SnapshotWanted(const StateFields& fields) const;
  // Whether, as far as this view goes, a snapshot may be due at close:
  // SnapshotWanted, or TableWanted unless `active`'s offset index shows the
  // batches after the newest snapshot to be few (an index that cannot be
  // read proves nothing).
  bool SnapshotMayBeDue(const StateFields& fields, size_t segment_count, LogSegment* active) const;
  // The snapshot at the committed end (`sync`: fsynced).
  Status SnapshotAtClose(const PartitionDir& d, const StateFields& fields, bool sync);

  ProducerStateTable& table() { return table_; }

 private:
  Status ReplayRange(const PartitionDir& d, const std::vector<int64_t>& segments,
                     const StateFields& fields, int64_t from_base, uint64_t from_pos);
  void NoteSnapshot(int64_t at, int64_t segment, uint64_t pos) {
    snapshot_at_ = at;
    snapshot_segment_ = segment;
    snapshot_pos_ = pos;
  }

  ProducerStateTable table_;
  int64_t snapshot_at_ = -1;  // offset of the snapshot the table equals, if known
  // Where an open would start replaying: the segment holding the newest
  // snapshot's offset and the position there of the first batch after it
  // (-1: not the active segment, or unknown).
  int64_t snapshot_segment_ = -1;
  uint64_t snapshot_pos_ = 0;
  // False after an open that deferred building the table (and the
  // snapshot fields above): Ensure builds it when first needed, so a
  // writer that appends only batches without a producer id never reads the
  // log back. `newest_snapshot_`: the offset of the newest snapshot file
  // at that open (-1: none).
  bool loaded_ = true;
  int64_t newest_snapshot_ = -1;
};

// The sequence checks of one append call (producer.md), made before
// anything is written so that a rejected batch leaves nothing
// half-appended: later batches of one producer in the same call follow the
// earlier ones, a duplicate is found with the original's result.
class AppendCheck {
 public:
  explicit AppendCheck(const ProducerStateTable& table) : table_(table) {}
  // For the call's batches in order (`at`: the byte position in the call):
  // OK(nullopt) to append (also for a batch without a producer id or a
  // control batch), OK(the original's result) for a duplicate, kOutOfOrder
  // for a sequence that does not follow.
  Result<std::optional<AppendResult>> Check(const BatchHeader& h, size_t at);

 private:
  const ProducerStateTable& table_;
  // Per producer id: the epoch and last sequence of its last batch in the call.
  std::unordered_map<int64_t, std::pair<int16_t, int32_t>> in_call_;
};

}  // namespace mq
