#include "ack.h"

#include <fmt/format.h>

namespace mq::produce {

struct AckGate::Partition {
  std::mutex mu;
  std::unique_ptr<LeaderAppendGate> gate;
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
    ReplicationContext ctx;
    ctx.cluster = binding_.store.get();
    ctx.clock = Clock::Real();
    ctx.topic = topic_;
    ctx.partition = p;
    part->gate = std::make_unique<LeaderAppendGate>(std::move(ctx),
                                                    fmt::format("{}/{}-{}", root_, topic_, p),
                                                    binding_.replica_id, log_, acks_, timeout_ms_);
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
  return pt.gate->BeforeAppend(*ps, t ? t->min_insync_replicas : 1);
}

Status AckGate::AfterAppend(int32_t p, int64_t last_offset) {
  if (acks_ == Acks::kNone) return Status::Ok();
  auto part = Of(p);
  if (!part) return part.error();
  Partition& pt = **part;
  std::lock_guard plock(pt.mu);
  return pt.gate->AfterAppend(last_offset);
}

}  // namespace mq::produce
