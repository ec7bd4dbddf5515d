// ClusterState's lookups (mq/cluster.h), for as long as liblog does not
// define them yet (they come with liblog/src/cluster.cc, the file store):
// tests/sim/CMakeLists.txt compiles this file only when that file is
// missing, so that mq-sim links against the replication logic meanwhile.
#include "mq/cluster.h"

namespace mq {

const ReplicaRoot* ClusterState::Replica(int32_t id) const {
  for (const ReplicaRoot& r : replicas) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

const ReplicatedTopic* ClusterState::Topic(std::string_view name) const {
  for (const ReplicatedTopic& t : topics) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const PartitionState* ClusterState::Partition(std::string_view topic, int32_t partition) const {
  for (const PartitionState& p : partitions) {
    if (p.topic == topic && p.partition == partition) return &p;
  }
  return nullptr;
}

PartitionState* ClusterState::Partition(std::string_view topic, int32_t partition) {
  for (PartitionState& p : partitions) {
    if (p.topic == topic && p.partition == partition) return &p;
  }
  return nullptr;
}

}  // namespace mq
