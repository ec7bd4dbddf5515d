// Cross-replica verification of a partition (format-spec/replication.md
// §17.10, R57), as Kafka's kafka-replica-verification: every replica's log
// is read batch by batch up to the high watermark and compared with the
// reference replica's (the leader's). mq-isr --verify-replicas runs it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/cluster.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

// One replica of a partition: its id and its partition directory
// (<root>/<topic>-<partition>, R12).
struct ReplicaDir {
  int32_t id = -1;
  std::string dir;
};

// A replica's log as the comparison reads it: a partition directory on
// this host (OpenLocalReplica), or one on another host read through the
// wire protocol's ReadLog (R63, wire::OpenRemoteReplica). Both read only.
class ReplicaLogSource {
 public:
  virtual ~ReplicaLogSource() = default;
  virtual int64_t log_start_offset() = 0;
  virtual int64_t log_end_offset() = 0;
  // Its replication-offset-checkpoint's high watermark within its log end
  // (R38); kNotFound when it stores none.
  virtual Result<int64_t> HighWatermark() = 0;
  // Positions at the batch holding `offset` (PartitionReader::Seek).
  virtual Status Seek(int64_t offset) = 0;
  // Its next batch, nullopt at its log end; valid until the next call.
  // Corruption names its file as the replica is named (host:path for one on
  // another host), the byte position and the rule.
  virtual Result<std::optional<BatchView>> Next() = 0;
  // Where the batch last returned lives, its file named so.
  virtual LogPosition position() const = 0;
};

// The partition directory `dir` on this host (gaps allowed, R10, R11: the
// comparison finds any other).
Result<std::unique_ptr<ReplicaLogSource>> OpenLocalReplica(const std::string& dir,
                                                           const DecodeLimits& limits = {});

// R63, what ReadLog carries: a run of a replica's whole batches, all of one
// segment file, and what it stopped at.
struct LogChunk {
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int64_t high_watermark = -1;  // only for a read of no batches (offset -1): -1 none
  std::string file;             // the segment file's name in the partition directory
  uint64_t position = 0;        // of the first batch in it
  std::vector<std::byte> batches;
  // A corruption the read stopped at after `batches` (its file a name in
  // the partition directory, as `file`), or corruption of the high
  // watermark's checkpoint for a read of offset -1; OK otherwise.
  Status stop;
};

// R63, the server's side of ReadLog over a local replica: from `offset`
// (-1: no batches, only its log start and end and its high watermark),
// whole batches of one segment file, at most `max_bytes` but at least one;
// none at its log end. A read at the offset after the previous read's last
// batch continues where that one stopped (no seek).
class LogChunkReader {
 public:
  explicit LogChunkReader(std::unique_ptr<ReplicaLogSource> source) : source_(std::move(source)) {}
  Result<LogChunk> Read(int64_t offset, uint32_t max_bytes);

 private:
  std::unique_ptr<ReplicaLogSource> source_;
  int64_t next_ = -1;  // where the next batch read continues, -1: seek first
  // A batch read that did not fit the previous chunk.
  std::vector<std::byte> held_;
  LogPosition held_at_;
  int64_t held_next_ = -1;
};

// One replica to compare: its id, its name (its partition directory, with
// its host for one on another host) and its log, or why it cannot be read.
struct ReplicaToCompare {
  int32_t id = -1;
  std::string dir;
  std::unique_ptr<ReplicaLogSource> source;
  Status open_error;  // when source is null
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
                                          size_t reference_index, const DecodeLimits& limits = {});

// The same over replicas' logs wherever they are (R57 with R63 for those
// on other hosts): what CompareReplicas does with the directories opened.
// The reference's high watermark is its source's.
Result<ReplicaComparison> CompareReplicaLogs(std::vector<ReplicaToCompare>& replicas,
                                             size_t reference_index);

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
