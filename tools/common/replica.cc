#include "replica.h"

#include <cstdlib>

#include <fmt/format.h>

#include "remote.h"

namespace mq::cli {

Result<std::optional<ReplicaBinding>> BindReplica(const std::string& root, const std::string& topic,
                                                  const TopicConfig& config) {
  if (config.cluster.empty()) return std::optional<ReplicaBinding>();
  auto store = OpenClusterStore(config.cluster);
  if (!store) return store.error();
  auto state = (*store)->Load();
  if (!state) return state.error();
  const std::string file = config.cluster + "/cluster-state";
  if (!state->Topic(topic))
    return Status(Code::kNotFound, fmt::format("{}: topic \"{}\" of {} is not in the cluster state",
                                               file, topic, root));
  const ReplicaRoot* r = state->Replica(config.replica_id);
  char* real = ::realpath(root.c_str(), nullptr);
  const std::string resolved = real ? real : root;
  ::free(real);
  // The state may name this root with its host (host:path): the path is
  // what this host knows it by.
  auto address = r ? ParseAddress(r->dir, "replica dir") : Result<Address>(Address{});
  if (!r || !address || address->path != resolved)
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: replica id {} of topic \"{}\" is {} in the cluster state, not "
                              "{}",
                              file, config.replica_id, topic, r ? r->dir : "unknown", resolved));
  ReplicaBinding b;
  b.store = std::move(*store);
  b.replica_id = config.replica_id;
  b.cluster_dir = config.cluster;
  return std::optional<ReplicaBinding>(std::move(b));
}

Result<PartitionState> PartitionOf(const ClusterState& state, const std::string& cluster_dir,
                                   const std::string& topic, int32_t partition) {
  const PartitionState* p = state.Partition(topic, partition);
  if (!p)
    return Status(Code::kNotFound, fmt::format("{}/cluster-state: no partition {}-{}", cluster_dir,
                                               topic, partition));
  return *p;
}

Status CheckLeads(const ClusterState& state, const PartitionState& p, int32_t me) {
  if (p.leader < 0)
    return Status(Code::kUnavailable,
                  fmt::format("{}-{}: no leader (elect one: mq-isr elect)", p.topic, p.partition));
  if (p.leader == me) return Status::Ok();
  const ReplicaRoot* r = state.Replica(p.leader);
  return Status(Code::kFenced,
                fmt::format("{}-{}: not the leader: replica {} ({}) leads in epoch {}", p.topic,
                            p.partition, p.leader, r ? r->dir : "?", p.leader_epoch));
}

Status RefuseReplicatedOutput(const TopicConfig& config, std::string_view flag,
                              std::string_view topic) {
  if (config.cluster.empty()) return Status::Ok();
  return Status(Code::kInvalidArgument,
                fmt::format("{} {}: a replicated topic (cluster {}): writing into one from "
                            "mq-consume is planned; pipe into mq-produce, which appends at the "
                            "leader",
                            flag, topic, config.cluster));
}

}  // namespace mq::cli
