// What a replicated topic asks of mq-produce (format-spec/replication.md
// §17.6): it appends only where its root leads, stamping the leader epoch;
// --acks all waits until every in-sync replica holds the append (the high
// watermark passes it), with at least min.insync.replicas of them. The
// decisions are liblog's (mq/append_gate.h); this binds them to the
// producer's root and partitions.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mq/append_gate.h"
#include "mq/replication.h"
#include "mq/topic.h"
#include "replica.h"

namespace mq::produce {

using Acks = ::mq::Acks;

class AckGate {
 public:
  // nullptr for a topic of one root (there --acks all is --acks 1: the
  // root is the whole ISR).
  // `log`: the producer's log settings (its durability also decides
  // whether the high watermark is fsynced).
  static Result<std::unique_ptr<AckGate>> Open(const std::string& root, const std::string& topic,
                                               const TopicConfig& config, const LogConfig& log,
                                               Acks acks, int64_t ack_timeout_ms);
  // Before an append to partition p: kFenced unless this root leads it,
  // kUnavailable when nobody does; then LeaderAppendGate::BeforeAppend
  // (with --acks all, kNotEnoughReplicas when the ISR is below
  // min.insync.replicas: nothing is appended). Returns the leader epoch to
  // stamp.
  Result<int32_t> BeforeAppend(int32_t p);
  // After an append ending at `last_offset`: LeaderAppendGate::AfterAppend
  // (with --acks all, waits until the high watermark passes it, kTimedOut
  // after the ack timeout, then checks the ISR again,
  // kNotEnoughReplicasAfterAppend; otherwise moves the high watermark as
  // far as the ISR allows, without waiting).
  Status AfterAppend(int32_t p, int64_t last_offset);
  // The topic's cluster (its producer ids, P10); only before the first
  // append (BeforeAppend uses it under mu_ from then on).
  ClusterStore* cluster() { return binding_.store.get(); }
  ~AckGate();

 private:
  struct Partition;
  AckGate() = default;
  Result<Partition*> Of(int32_t p);

  std::string root_;
  std::string topic_;
  LogConfig log_;
  Acks acks_ = Acks::kLeader;
  int64_t timeout_ms_ = 30000;
  cli::ReplicaBinding binding_;
  std::mutex mu_;  // the cluster store and the partitions' table
  std::vector<std::unique_ptr<Partition>> parts_;
};

}  // namespace mq::produce
