// Truncation of a partition's log (segment.md §6.4-§6.6, R38, R40, R59):
// finding where a cut falls, writing it down before anything changes, and
// completing an interrupted one when the partition is opened.
//
// Every call is made under the partition's writer lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mq/partition.h"
#include "mq/status.h"
#include "storage/partition_dir.h"
#include "storage/partition_view.h"
#include "storage/recovery.h"

namespace mq {

// What CompleteTruncateIntent found.
struct CompletedIntent {
  bool intent = false;                  // there was an intent (removed by FinishCut)
  std::optional<int64_t> truncated_to;  // the log end its cut left, when there was a log
};

// R40 at open: an interrupted truncation is completed before anything else
// (the cut applied, the leader epochs that start at or past it dropped),
// reported in `report`, and `segments` and `snapshots` listed again.
// `listed`: whether the listing made under the lock found the intent
// (written under that lock: without its name there is none).
Result<CompletedIntent> CompleteTruncateIntent(const PartitionDir& d, bool listed,
                                               std::vector<int64_t>* segments,
                                               std::vector<int64_t>* snapshots,
                                               RecoveryReport* report);

// R38: a stored high watermark above `end` (the log end after a cut or a
// recovery) is lowered to it; reported in `report` (optional). Nothing for
// a directory not named <topic>-<n>.
Status LowerHighWatermarkTo(const PartitionDir& d, int64_t end, RecoveryReport* report);

// Where a truncation to `offset` cuts the log made of `segments` (§6.4).
inline Result<LogCut> PlanCut(const PartitionDir& d, const std::vector<int64_t>& segments,
                              int64_t offset) {
  return FindCut(d.fd(), d.fs, d.config.limits, segments, offset);
}

// Before anything is cut: the cut in the truncation history (R59, naming
// `rewrites`, the value whose publication makes it), the intent (R40) and
// the high watermark lowered to the cut's end (R38), in that order, each
// durable unless the partition is page-cache only.
Status WriteDownCut(const PartitionDir& d, const LogCut& cut, uint32_t rewrites);

// Applies `cut` to the log made of `segments` (removes the segments after
// its keep, cuts its log, rebuilds its indexes, drops producer snapshots
// past its end); idempotent.
inline Status ApplyPlannedCut(const PartitionDir& d, const std::vector<int64_t>& segments,
                              const LogCut& cut) {
  return ApplyCut(d.fd(), d.fs, d.config, segments, cut, d.sync());
}

// After the cut is applied and everything derived from the log follows
// it: the intent goes.
inline Status FinishCut(const PartitionDir& d) {
  return RemoveTruncateIntent(d.fd(), d.fs, d.sync());
}

// PartitionWriter::TruncateTo's steps on the writer's view, under the lock
// and caught up with the committed state.
//
// R56: a truncation to `offset` a follower decided as the leader of
// `leader_epoch` saw the log is stale (kFenced) once a newer epoch wrote
// or fenced here. Nothing for `leader_epoch` < 0.
Status CheckCutEpoch(PartitionView* view, int64_t offset, int32_t leader_epoch);
// A truncation to the log end cuts nothing; the epochs that start at it
// (begun by a leader that wrote nothing in them) still go, as Kafka's
// LeaderEpochFileCache.truncateFromEnd, and are published.
Status DropEpochsFrom(PartitionView* view, int64_t offset);
// The cut written down (WriteDownCut) and published: readers stop short
// of what is about to go. When writing it down fails, the rewrites value
// it names is published all the same and the error returned.
Status CommitCut(PartitionView* view, const LogCut& cut);
// After CommitCut: the cut applied and everything derived from the log
// (producer table, active segment, leader epochs) made to follow it, then
// the intent removed. A failure leaves the intent for the next open to
// complete the cut.
Status ApplyCommittedCut(PartitionView* view, const LogCut& cut);

// R59: a recovery that leaves the log ending at `end`, below what the state
// file had published (a machine crash lost page-cache writes, or a damaged
// tail was cut), cut records consumers may have read: recorded as a cut
// made now by the publication of `rewrites`.
Status RecordLostTail(const PartitionDir& d, int64_t end, uint32_t rewrites);

}  // namespace mq
