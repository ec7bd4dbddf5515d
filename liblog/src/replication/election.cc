// Leader election (mq/cluster.h, mq/election.h; format-spec/cluster.md
// §18.4), after Kafka's PartitionLeaderElectionAlgorithms.
#include <algorithm>

#include <fmt/format.h>

#include "mq/cluster.h"
#include "mq/election.h"

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

int32_t HeldBackByRestart(const PartitionState& p, int32_t id,
                          const std::function<bool(int32_t)>& restarted_since_claim) {
  if (!restarted_since_claim(id)) return -1;
  for (int32_t m : p.isr) {
    if (m != id && !restarted_since_claim(m)) return m;
  }
  return -1;
}

ElectionDecision DecideElection(const PartitionState& p, ElectMode mode,
                                const std::function<bool(int32_t)>& leader_available,
                                const std::function<bool(int32_t)>& electable) {
  ElectionDecision d;
  if (mode == ElectMode::kPreferred) {
    d.kind = ElectionKind::kPreferred;
    d.next = ElectLeader(p, ElectionKind::kPreferred, electable);
    d.outcome = d.next ? ElectionOutcome::kElected : ElectionOutcome::kNothing;
    return d;
  }
  if (p.leader >= 0 && leader_available(p.leader)) return d;
  d.kind = ElectionKind::kClean;
  d.next = ElectLeader(p, ElectionKind::kClean, electable);
  if (!d.next && mode == ElectMode::kUnclean) {
    d.kind = ElectionKind::kUnclean;
    d.next = ElectLeader(p, ElectionKind::kUnclean, electable);
  }
  d.outcome = d.next ? ElectionOutcome::kElected : ElectionOutcome::kStuck;
  return d;
}

Result<ElectionResult> ElectAndStore(ClusterStore& store, const ClusterState& loaded,
                                     std::string_view topic, int32_t partition, ElectMode mode,
                                     const ElectionViewFactory& view) {
  std::optional<ClusterState> reloaded;
  for (int attempt = 0;; ++attempt) {
    // The state the caller loaded first (one load for every partition),
    // then again after a compare-and-swap found it changed.
    if (attempt > 0) {
      auto fresh = store.Load();
      if (!fresh) return fresh.error();
      reloaded = std::move(*fresh);
    }
    const ClusterState& state = reloaded ? *reloaded : loaded;
    const PartitionState* p = state.Partition(topic, partition);
    if (p == nullptr)
      return Status(Code::kNotFound, fmt::format("no partition {}-{}", topic, partition));
    ElectionResult r;
    r.before = *p;
    std::unique_ptr<ElectionView> v = view(state, *p);
    const ElectionDecision d = DecideElection(
        r.before, mode, [&](int32_t id) { return v->LeaderAvailable(id); },
        [&](int32_t id) { return v->Electable(id); });
    r.outcome = d.outcome;
    r.kind = d.kind;
    if (d.outcome == ElectionOutcome::kNothing) return r;
    r.reason = v->Reason(r.before, d);
    if (d.outcome == ElectionOutcome::kStuck) return r;
    auto stored = store.AlterPartition(*d.next, r.reason);
    if (!stored && stored.error().code() == Code::kFenced && attempt < 3) continue;
    if (!stored) return stored.error();
    r.stored = std::move(*stored);
    return r;
  }
}

}  // namespace mq
