// A replicated topic as the tools see it (format-spec/replication.md §17):
// the topic's configuration in a log root names its cluster directory and
// the root's replica id; the cluster state says who leads each partition.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mq/cluster.h"
#include "mq/replication.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq::cli {

struct ReplicaBinding {
  std::unique_ptr<ClusterStore> store;  // on this host, or reached remotely
  int32_t replica_id = -1;
  std::string cluster_dir;  // its address: a path, or host:path
};

// The cluster of `config` (a topic of the root `root`): nullopt for a topic
// of one root. The cluster state must know the topic and hold this root
// under the id the topic names (kCorruption naming the file otherwise: the
// root and the cluster disagree).
Result<std::optional<ReplicaBinding>> BindReplica(const std::string& root, const std::string& topic,
                                                  const TopicConfig& config);

// The partition's state; kNotFound naming the cluster when it is missing.
Result<PartitionState> PartitionOf(const ClusterState& state, const std::string& cluster_dir,
                                   const std::string& topic, int32_t partition);

// kFenced unless replica `me` leads `p` ("not the leader: replica N at DIR
// leads"); kUnavailable when nobody does.
Status CheckLeads(const ClusterState& state, const PartitionState& p, int32_t me);

// mq-consume's outputs (--to-topic, --dlq) append with their own writers,
// which neither check the leader nor stamp its epoch: a replicated topic
// there is refused (kInvalidArgument naming `flag`) until they do (planned).
Status RefuseReplicatedOutput(const TopicConfig& config, std::string_view flag,
                              std::string_view topic);

}  // namespace mq::cli
