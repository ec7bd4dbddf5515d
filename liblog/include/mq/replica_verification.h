// Cross-replica verification of a partition (format-spec/replication.md
// §17.10, R57), as Kafka's kafka-replica-verification: every replica's log
// is read batch by batch up to the high watermark and compared with the
// reference replica's (the leader's). mq-isr --verify-replicas runs it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/cluster.h"
#include "mq/status.h"

namespace mq {

// One replica of a partition: its id and its partition directory
// (<root>/<topic>-<partition>, R12).
struct ReplicaDir {
  int32_t id = -1;
  std::string dir;
};

// What the comparison found of one replica.
struct ReplicaAgreement {
  int32_t id = -1;
  std::string dir;
  int64_t log_start_offset = -1;
  int64_t log_end_offset = -1;  // -1: its log could not be opened
  // Offsets below this were compared (min(HW, its log end)).
  int64_t compared_to = 0;
  uint64_t batches = 0;  // batches compared with the reference's
  // Its log ends below the high watermark: compared up to its log end
  // (a follower still catching up), not a divergence.
  bool behind = false;
  // OK; kCorruption: its first batch that differs from the reference's
  // (R57, naming both replicas' files and byte positions), or corruption
  // read in its own log (that rule); another code: it could not be read.
  Status status;
};

struct ReplicaComparison {
  int32_t reference = -1;
  // The reference's high watermark (its replication-offset-checkpoint);
  // -1 when it stores none: nothing is compared.
  int64_t high_watermark = -1;
  int64_t reference_log_end = 0;
  // Every replica, the reference first.
  std::vector<ReplicaAgreement> replicas;
};

// R57: below the reference's high watermark `hw`, each replica holds
// exactly the reference's batches (base offset, last offset, partition
// leader epoch, bytes and so CRC), each up to min(hw, its own log end),
// from the greater of the two log starts. `replicas[reference_index]` is
// the reference (the leader). Reads only (PartitionReader, never a
// writer). Fails as a whole only when the reference cannot be read or
// holds corruption below its high watermark (then that status, the rule
// of the corruption, or R38 for a high watermark above its log end); each
// other replica's outcome is its ReplicaAgreement::status.
Result<ReplicaComparison> CompareReplicas(const std::vector<ReplicaDir>& replicas,
                                          size_t reference_index,
                                          const DecodeLimits& limits = {});

// The first divergence or corruption in `comparison` (OK when every
// replica read agrees with the reference); statuses of replicas that could
// not be read are not that.
Status FirstDivergence(const ReplicaComparison& comparison);

// §17.5, the ISR rule for damage (mq-isr --check): the in-sync followers
// of `p` in `damaged` (replica id -> the corruption its log fails
// verification with, VerifyForLeadership: what keeps it from leading) leave
// the ISR through AlterPartition, a compare-and-swap on p's partition epoch
// (kFenced when it moved: decide again), the reason naming each damage.
// The leader and replicas outside the ISR are left as they are. Returns
// the stored state, or `p` when no in-sync follower is damaged.
Result<PartitionState> ShrinkIsrOfDamaged(ClusterStore& store, const PartitionState& p,
                                          const std::map<int32_t, Status>& damaged);

}  // namespace mq
