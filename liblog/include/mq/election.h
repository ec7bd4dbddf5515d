// Deciding and storing an election (format-spec/cluster.md §18.4), as
// `mq-isr elect` and the simulator's controller run it: which replica may
// lead (R55), which election a mode runs, and the compare-and-swap that
// stores it. The elections themselves are ElectLeader's (mq/cluster.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "mq/cluster.h"
#include "mq/status.h"

namespace mq {

// R55: a replica that restarted since it last claimed an epoch (it may hold
// less than the ISR acknowledged) is unavailable while another ISR member
// is not known to have restarted so (available or not: it may hold what
// this one lost). Returns that other member (the first in ISR order), or
// -1 when R55 does not hold `id` back. `restarted_since_claim(r)` is asked
// of `id` first, then of the ISR members in order until one did not.
int32_t HeldBackByRestart(const PartitionState& p, int32_t id,
                          const std::function<bool(int32_t)>& restarted_since_claim);

// What an election is asked to do.
enum class ElectMode : uint8_t {
  kUnavailableOnly,  // a clean election where the leader is unavailable
  kUnclean,          // the same, else one outside the ISR (records may be lost)
  kPreferred,        // the first replica, when it is available, in the ISR, and not leading
};

enum class ElectionOutcome : uint8_t {
  kNothing,  // the leader is available (kPreferred: nothing to move)
  kElected,  // a new state is proposed
  kStuck,    // the leader is unavailable and no replica the mode allows can lead
};

struct ElectionDecision {
  ElectionOutcome outcome = ElectionOutcome::kNothing;
  // The election that proposed `next`; for kStuck, the last one tried.
  ElectionKind kind = ElectionKind::kClean;
  std::optional<PartitionState> next;  // kElected
};

// One partition's election in `mode`: kPreferred runs ElectLeader's
// preferred election; the others do nothing while p's leader is available
// (`leader_available`, asked only of a leader p names), else run a clean
// election and, for kUnclean when that finds nobody, an unclean one.
// `electable(id)`: whether replica `id` may lead (its root usable, R55, its
// log verifies).
ElectionDecision DecideElection(const PartitionState& p, ElectMode mode,
                                const std::function<bool(int32_t)>& leader_available,
                                const std::function<bool(int32_t)>& electable);

// What the caller of ElectAndStore knows of one partition's replicas, for
// one state (a new view is asked for when the state moved).
class ElectionView {
 public:
  virtual ~ElectionView() = default;
  virtual bool LeaderAvailable(int32_t id) = 0;
  virtual bool Electable(int32_t id) = 0;
  // Called once for a decision that is not kNothing, before anything is
  // stored: the reason the change records (kElected); where the caller
  // warns (an unclean election, kStuck).
  virtual std::string Reason(const PartitionState& p, const ElectionDecision& d) = 0;
};

struct ElectionResult {
  ElectionOutcome outcome = ElectionOutcome::kNothing;
  ElectionKind kind = ElectionKind::kClean;
  PartitionState before;  // the partition's state decided on
  PartitionState stored;  // kElected: as AlterPartition stored it
  std::string reason;
};

// Decides `topic`-`partition`'s election on `loaded` (DecideElection over
// the view `view(state, p)` gives) and stores it (AlterPartition); when
// the partition epoch moved meanwhile (kFenced), loads the state again and
// decides again, up to 3 times. kNotFound when the partition is not in the
// state.
using ElectionViewFactory =
    std::function<std::unique_ptr<ElectionView>(const ClusterState&, const PartitionState&)>;
Result<ElectionResult> ElectAndStore(ClusterStore& store, const ClusterState& loaded,
                                     std::string_view topic, int32_t partition, ElectMode mode,
                                     const ElectionViewFactory& view);

}  // namespace mq
