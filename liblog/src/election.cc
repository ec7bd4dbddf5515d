// Leader election (mq/cluster.h; format-spec/cluster.md §18.4), after
// Kafka's PartitionLeaderElectionAlgorithms.
#include <algorithm>

#include "mq/cluster.h"

namespace mq {

bool IsLeader(const PartitionState& p, int32_t id) { return id >= 0 && p.leader == id; }

bool InIsr(const PartitionState& p, int32_t id) {
  return std::find(p.isr.begin(), p.isr.end(), id) != p.isr.end();
}

std::optional<PartitionState> ElectLeader(const PartitionState& p, ElectionKind kind,
                                          const std::function<bool(int32_t)>& live) {
  PartitionState next = p;
  int32_t leader = -1;
  switch (kind) {
    case ElectionKind::kClean:
      // The first live replica, in assignment order, that is in the ISR.
      for (int32_t r : p.replicas) {
        if (InIsr(p, r) && live(r)) {
          leader = r;
          break;
        }
      }
      if (leader < 0) return std::nullopt;
      // Replicas that are not live leave the ISR with the old leader.
      next.isr.clear();
      for (int32_t r : p.isr) {
        if (live(r)) next.isr.push_back(r);
      }
      break;
    case ElectionKind::kUnclean:
      // Only when no ISR member is live: the first live replica; the ISR
      // restarts from it alone.
      for (int32_t r : p.isr) {
        if (live(r)) return std::nullopt;
      }
      for (int32_t r : p.replicas) {
        if (live(r)) {
          leader = r;
          break;
        }
      }
      if (leader < 0) return std::nullopt;
      next.isr = {leader};
      break;
    case ElectionKind::kPreferred:
      if (p.replicas.empty()) return std::nullopt;
      leader = p.replicas.front();
      if (p.leader == leader || !InIsr(p, leader) || !live(leader)) return std::nullopt;
      break;
  }
  next.leader = leader;
  next.leader_epoch = p.leader_epoch + 1;
  return next;
}

}  // namespace mq

