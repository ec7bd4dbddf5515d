// Tiered segments (format-spec/retention.md §21, R93-R97): sealed segments
// older than a threshold move from the partition directory to a second
// directory (a cheaper disk, or a mounted object store), named by the
// partition's tier pointer. Readers find them through the partition's one
// directory listing (ListSegments), so consumers, verification, retention
// and replication read them as any segment. mq-compact --tier-dir runs this.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mq/file.h"
#include "mq/retention.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq {

struct TierPolicy {
  int64_t tier_after_ms = -1;  // -1: nothing moves
  int64_t now_ms = 0;
};

// R108: the age past which a topic's sealed segments move: the run's
// (mq-compact --tier-after, `run_tier_after_ms` >= 0) when it has one, else
// the topic's tier.after.ms; -1 (neither): none moves.
int64_t TierAfterFor(const TopicConfig& topic, int64_t run_tier_after_ms);

// R95: the segments of `log` that move, oldest first: sealed (not the
// active one), local, at or above the log start (those below are
// retention's), wholly below the high watermark on a replicated partition,
// and whose retention clock (R74) is older than now - tier_after_ms.
std::vector<RetentionSegment> PlanTier(const RetentionLog& log, const TierPolicy& policy);

// What each tier holds: [0] the partition directory, [1] the tier's.
struct TierUsage {
  int64_t segments[2] = {0, 0};
  uint64_t bytes[2] = {0, 0};
};
TierUsage UsageByTier(const RetentionLog& log);

// R93: the directory under `tier_root` that holds the tiered segments of
// the partition directory `dir` (`<tier_root>/<basename of dir>`).
std::string TierPartitionDir(const std::string& tier_root, const std::string& dir);

// R93: gives the partition at `dir` its tier directory `tier_dir` (absolute):
// creates it (its parent must exist: a missing mount is an error, never a
// directory on the wrong disk) unless it holds segments of another
// partition, then writes the pointer atomically. Nothing to do when the
// pointer names `tier_dir` already; a pointer naming another directory is
// refused (kInvalidArgument): a tier is not moved.
Status AttachTier(const std::string& dir, const std::string& tier_dir, FileSystem* fs = nullptr);

// R94: moves segment `base` of the partition at `dir` to its tier: each of
// its files is copied to `<name>.tmp` in the tier directory
// (CopyFileContents), given the source's access and modification times
// (R97) and fsynced,
// the copies are renamed to their names (the `.log` last: the publication)
// and the tier directory fsynced, then the local files are unlinked (the
// `.log` first) and the partition directory fsynced.
Status MoveToTier(const std::string& dir, int64_t base, FileSystem* fs = nullptr);
// The same for several segments of the partition, ascending: each step is
// taken for a batch of them (at most 16) before the next step, so that a
// directory is fsynced once per batch, not once per segment; the order of
// R94 holds for each segment.
Status MoveToTier(const std::string& dir, std::span<const int64_t> bases, FileSystem* fs = nullptr);

// R93: whether the partition at `dir` has a tier pointer (a partition
// without one has nothing tiered and no move under way).
Result<bool> HasTierPointer(const std::string& dir, FileSystem* fs = nullptr);
// R94: finishes what an interrupted move left in the partition at `dir`:
// removes the tier's `.tmp` copies, and the local files of each segment
// whose `.log` the tier has published. Returns how many files went.
Result<int> FinishTierMoves(const std::string& dir, FileSystem* fs = nullptr);

}  // namespace mq
