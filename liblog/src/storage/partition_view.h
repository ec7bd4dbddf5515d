// A partition writer's view of its partition (format-spec/segment.md §9):
// the state file, the committed state as of the writer's last look at it,
// the segments, the active segment, the leader epochs and the producer
// table. The writer holds one; the log loader fills it at open and
// whenever the state file is found invalid.
//
// Every change is made under the partition's writer lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "storage/epoch_state.h"
#include "storage/log_segment.h"
#include "storage/partition_dir.h"
#include "storage/producer_state_manager.h"
#include "storage/segment.h"
#include "storage/state_file.h"

namespace mq {

struct PartitionView : PartitionDir {
  StateFile state;
  uint32_t generation = 0;  // of our last look at the state file
  StateFields fields;       // committed state as of that look
  std::vector<int64_t> segments;
  std::unique_ptr<LogSegment> active;  // the last segment
  // Kept when this writer stamps an epoch or the partition has a checkpoint.
  EpochState epochs;
  ProducerStateManager producers;
  bool dir_dirty = false;
  bool stale_check = true;   // check the active file size at the next catch-up
  int64_t last_sync_ms = 0;  // NowMs() of the last SyncAll

  // Milliseconds of the steady clock.
  static int64_t NowMs();

  // After another writer published `now` at generation `gen`, changing
  // the log: the segments listed again (those past the committed end, never
  // published, removed), the producer table brought up to date, the active
  // segment reopened.
  Status Follow(uint32_t gen, const StateFields& now);
  // A writer died between writing and publishing (the state's appending
  // mark, or `stale_check`): what it wrote past the committed end was never
  // acknowledged and is cut.
  Status CutUnacknowledged();
  // fsync of every segment from the one holding the recovery point to the
  // end (other writers' bytes included: fsync covers the file), then the
  // directory.
  Status SyncAll();
  // SyncAll's step for a rolled segment (R96: a tiered one is skipped).
  Status SyncRolled(int64_t base, std::optional<PartitionListing>* places);
  // A new active segment at the log end; the producer snapshot there.
  Status Roll();
  // Opens the active segment `base`, `size` bytes committed.
  Status OpenActive(int64_t base, uint64_t size);
  // Publishes `fields` as this boot's (R27); epochs current before stay so.
  Status Publish();
  // Publishes `now` (the committed fields another writer published) again
  // as this boot's, to wake the readers; the view is left as it was.
  void Republish(StateFields now) {
    now.boot_id = CurrentBootId();
    state.Publish(now);
  }
  // The producer table, built if it was deferred (the active segment's
  // files hold everything up to `fields`).
  Status EnsureProducers() { return producers.Ensure(*this, segments, fields, active->log()); }
  // The epochs as stored now (EpochState::Fresh).
  Status FreshEpochs() { return epochs.Fresh(*this, fields.log_end_offset, generation); }
  Status LoadEpochs() { return epochs.Load(*this, fields.log_end_offset, generation); }
  Status EpochsForReplication() {
    return epochs.ForReplication(*this, fields.log_end_offset, generation);
  }
};

}  // namespace mq
