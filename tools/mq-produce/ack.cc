#include "ack.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace mq::produce {

struct AckGate::Partition {
  std::mutex mu;
  int32_t epoch = -1;
  std::unique_ptr<ReplicaLog> log;
  std::unique_ptr<PartitionReader> hw_reader;  // bounded by the HW: wakes when it moves
  ReplicationContext ctx;
};

AckGate::~AckGate() = default;

Result<std::unique_ptr<AckGate>> AckGate::Open(const std::string& root, const std::string& topic,
                                               const TopicConfig& config, const LogConfig& log,
                                               Acks acks, int64_t ack_timeout_ms) {
  auto bound = cli::BindReplica(root, topic, config);
  if (!bound) return bound.error();
  if (!*bound) return std::unique_ptr<AckGate>();
  std::unique_ptr<AckGate> g(new AckGate);
  g->root_ = root;
  g->topic_ = topic;
  g->log_ = log;
  g->acks_ = acks;
  g->timeout_ms_ = ack_timeout_ms;
  g->binding_ = std::move(**bound);
  g->parts_.resize(static_cast<size_t>(config.partitions));
  return g;
}

Result<AckGate::Partition*> AckGate::Of(int32_t p) {
  std::lock_guard lock(mu_);
  auto& slot = parts_[static_cast<size_t>(p)];
  if (!slot) {
    auto part = std::make_unique<Partition>();
    part->ctx.cluster = binding_.store.get();
    part->ctx.clock = Clock::Real();
    part->ctx.topic = topic_;
    part->ctx.partition = p;
    slot = std::move(part);
  }
  return slot.get();
}

Result<int32_t> AckGate::BeforeAppend(int32_t p) {
  auto part = Of(p);
  if (!part) return part.error();
  Partition& pt = **part;
  std::lock_guard plock(pt.mu);
  ClusterState state;
  {
    std::lock_guard lock(mu_);
    auto loaded = binding_.store->Load();
    if (!loaded) return loaded.error();
    state = std::move(*loaded);
  }
  auto ps = cli::PartitionOf(state, binding_.cluster_dir, topic_, p);
  if (!ps) return ps.error();
  MQ_RETURN_IF_ERROR(cli::CheckLeads(state, *ps, binding_.replica_id));
  const ReplicatedTopic* t = state.Topic(topic_);
  const int32_t min_isr = t ? t->min_insync_replicas : 1;
  if (acks_ == Acks::kAll && static_cast<int32_t>(ps->isr.size()) < min_isr)
    return Status(Code::kNotEnoughReplicas,
                  fmt::format("{}-{}: NOT_ENOUGH_REPLICAS: the ISR is {{{}}}, fewer than "
                              "min.insync.replicas={}; nothing appended",
                              topic_, p, FormatReplicaList(ps->isr), min_isr));
  if (!pt.log || pt.epoch != ps->leader_epoch) {
    // R54: appends in an epoch only on a claim of this boot; R55: after a
    // restart of the host the epoch is given up (a new one when this root
    // is the whole ISR, else no leader until mq-isr elect: kUnavailable).
    int32_t epoch = ps->leader_epoch;
    for (int round = 0; round < 2; ++round) {
      LogConfig c = log_;
      c.leader_epoch = epoch;
      auto log = OpenReplicaLog(fmt::format("{}/{}-{}", root_, topic_, p), binding_.replica_id, c);
      if (!log) return log.error();
      pt.log = std::move(*log);
      pt.epoch = epoch;
      if (round > 0) break;
      PartitionState at = *ps;
      auto held = ClaimLeadership(pt.ctx, *pt.log, at);
      if (!held) {
        pt.log.reset();
        return held.error();
      }
      if (held->leader_epoch == epoch) break;
      epoch = held->leader_epoch;
    }
  }
  return pt.epoch;
}

Status AckGate::AfterAppend(int32_t p, int64_t last_offset) {
  if (acks_ == Acks::kNone) return Status::Ok();
  auto part = Of(p);
  if (!part) return part.error();
  Partition& pt = **part;
  std::lock_guard plock(pt.mu);
  if (!pt.log) return Status(Code::kInternal, "AfterAppend before BeforeAppend");
  auto unknown = [&](const Status& s) {
    return Status(s.code(), fmt::format("{}-{}: offset {}: outcome unknown: {}", topic_, p, last_offset,
                              s.message()));
  };
  // Never waits for a follower holding the leader lock: acks=1 does not
  // depend on followers, and acks=all's wait is bounded by its timeout.
  auto hw = UpdateHighWatermark(pt.ctx, *pt.log, pt.epoch, false);
  if (!hw && hw.error().code() == Code::kBusy) hw = int64_t{-1};
  if (!hw) return unknown(hw.error());
  if (acks_ == Acks::kLeader) return Status::Ok();

  using Clk = std::chrono::steady_clock;
  const auto deadline = Clk::now() + std::chrono::milliseconds(timeout_ms_);
  auto next_shrink = Clk::now();
  bool by_reader = false;  // the HW seen in the file, not computed here
  while (*hw <= last_offset) {
    const auto now = Clk::now();
    if (now >= deadline)
      return Status(Code::kTimedOut,
                    fmt::format("{}-{}: offset {}: not acknowledged by the ISR within {} ms "
                                "(high watermark {}): outcome unknown",
                                topic_, p, last_offset, timeout_ms_, *hw));
    // Whoever waits on a partition may apply the ISR rule (§17.5): a
    // follower gone for replica.lag.time.max.ms leaves, and the HW moves.
    if (now >= next_shrink) {
      auto shrunk = MaybeShrinkIsr(pt.ctx, *pt.log, pt.epoch);
      if (!shrunk) return unknown(shrunk.error());
      next_shrink = now + std::chrono::milliseconds(200);
    }
    if (!pt.hw_reader) {
      ReadOptions o;
      o.limits = log_.limits;
      o.offsets = log_.offsets;
      o.bound_by_high_watermark = true;
      auto r = PartitionReader::Open(fmt::format("{}/{}-{}", root_, topic_, p), o);
      if (!r) return unknown(r.error());
      pt.hw_reader = std::move(*r);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clk::now()).count();
    // Woken by the HW passing the record (a follower's fetch moved it):
    // nothing to compute again. That HW is this leader's of its epoch
    // unless the epoch ended (a follower here may have cut the record and
    // raised the HW past it since): checked on the state below.
    if (pt.hw_reader->WaitForAppend(last_offset,
                                    static_cast<int>(std::clamp<int64_t>(left, 1, 200)))) {
      const int64_t seen = pt.hw_reader->end_offset();
      if (seen > last_offset) {
        hw = seen;
        by_reader = true;
        continue;
      }
    }
    auto now_hw = UpdateHighWatermark(pt.ctx, *pt.log, pt.epoch, false);
    if (!now_hw && now_hw.error().code() != Code::kBusy) return unknown(now_hw.error());
    if (now_hw) hw = *now_hw;
  }
  // Kafka's checkEnoughReplicasReachOffset: the HW passed it; with fewer
  // in-sync replicas than the floor that means less than acks=all promised.
  auto state = pt.ctx.cluster->Load();
  if (!state) return unknown(state.error());
  const PartitionState* ps = state->Partition(topic_, p);
  if (by_reader && (!ps || ps->leader != binding_.replica_id || ps->leader_epoch != pt.epoch))
    return unknown(Status(Code::kFenced,
                          fmt::format("replica {} no longer leads in epoch {}",
                                      binding_.replica_id, pt.epoch)));
  const ReplicatedTopic* t = state->Topic(topic_);
  const int32_t min_isr = t ? t->min_insync_replicas : 1;
  if (!ps || static_cast<int32_t>(ps->isr.size()) < min_isr)
    return Status(Code::kNotEnoughReplicasAfterAppend,
                  fmt::format("{}-{}: offset {}: NOT_ENOUGH_REPLICAS_AFTER_APPEND: the ISR fell to "
                              "{{{}}}, below min.insync.replicas={}: outcome unknown",
                              topic_, p, last_offset, ps ? FormatReplicaList(ps->isr) : "",
                              min_isr));
  return Status::Ok();
}

}  // namespace mq::produce
