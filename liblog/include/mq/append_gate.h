// The leader's append gate (format-spec/replication.md §17.6): what an
// append to a replicated partition asks of the leader before and after it,
// after Kafka's Partition.appendRecordsToLeader and
// checkEnoughReplicasReachOffset. mq-produce binds it to its flags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mq/cluster.h"
#include "mq/partition.h"
#include "mq/replication.h"
#include "mq/status.h"

namespace mq {

// acks=0 (kNone), acks=1 (kLeader), acks=all (kAll).
enum class Acks : uint8_t { kNone, kLeader, kAll };

// The min-ISR floor before an append: with acks=all and fewer in-sync
// replicas in `p` than `min_isr`, kNotEnoughReplicas (nothing is to be
// appended); otherwise OK.
Status CheckMinIsrBeforeAppend(Acks acks, const PartitionState& p, int32_t min_isr);

// The same floor once the high watermark passed an append ending at
// `last_offset` to `topic`-`partition`: with fewer in-sync replicas in `p`
// (null: the partition is gone) than `min_isr`,
// kNotEnoughReplicasAfterAppend (outcome unknown).
Status CheckMinIsrAfterAppend(std::string_view topic, int32_t partition, const PartitionState* p,
                              int32_t min_isr, int64_t last_offset);

// The gate of one partition this replica leads: its replica log, opened in
// the epoch it claimed, and the reader that waits for the high watermark.
// Not thread-safe: a caller serializes the calls of one partition.
class LeaderAppendGate {
 public:
  // `ctx`: the partition (its cluster store, clock, topic and number);
  // `dir`: its directory on this replica's root; `log`: the writer's
  // settings (its durability also decides whether the high watermark is
  // fsynced); `timeout_ms`: how long acks=all waits.
  LeaderAppendGate(ReplicationContext ctx, std::string dir, int32_t replica_id, LogConfig log,
                   Acks acks, int64_t timeout_ms);
  ~LeaderAppendGate();

  // Before an append, with `p` the partition's state just loaded, naming
  // this replica leader, and `min_isr` its topic's floor: kNotEnoughReplicas
  // as CheckMinIsrBeforeAppend; then the log is opened in p's epoch and the
  // epoch claimed (R54; R55: a claim of another boot is given up, a new
  // epoch taken when this replica is the whole ISR, else kUnavailable).
  // Returns the leader epoch to stamp.
  Result<int32_t> BeforeAppend(const PartitionState& p, int32_t min_isr);

  // After an append ending at `last_offset`: acks=0 returns at once;
  // acks=1 moves the high watermark as far as the ISR allows without
  // waiting; acks=all waits until the high watermark passes it (kTimedOut
  // after the timeout), applying the ISR rule (§17.5) every 200 ms
  // meanwhile, then checks the floor again (CheckMinIsrAfterAppend), and
  // kFenced when the high watermark was seen in the file and the state no
  // longer names this replica leader in the epoch. Every failure says the
  // outcome is unknown.
  Status AfterAppend(int64_t last_offset);

 private:
  std::string Name() const;
  Status Unknown(int64_t last_offset, const Status& s) const;
  Result<int64_t> WaitForHighWatermark(int64_t last_offset, bool* by_reader);

  ReplicationContext ctx_;
  std::string dir_;
  int32_t replica_id_;
  LogConfig log_config_;
  Acks acks_;
  int64_t timeout_ms_;
  int32_t epoch_ = -1;
  std::unique_ptr<ReplicaLog> log_;
  std::unique_ptr<PartitionReader> hw_reader_;  // bounded by the HW: wakes when it moves
};

}  // namespace mq
