// Bugs the simulator plants (tests/sim, format-spec/replication.md §17.8) to
// show that it finds them. A test-only hook, outside the public API: the
// replication calls (replication.cc) read the process-wide set below, which
// only tests set (tests/sim and tests/unit include liblog's private
// headers; the tools include mq/*.h alone), so every shipped program runs
// with none planted.
#pragma once

namespace mq {

struct PlantedBugs {
  bool hw_at_log_end = false;           // the leader's HW is its own LEO
  bool no_epoch_truncation = false;     // a follower skips OffsetForLeaderEpoch
  bool isr_shrink_without_cas = false;  // shrink ignores the partition epoch
  // When the cluster state cannot be read (a leader cut from the
  // controller), UpdateHighWatermark goes on with the state its followers'
  // positions of this epoch show, as if it still led with them in the ISR.
  bool hw_without_controller = false;
  // A leader whose claim on its epoch names another boot (its host
  // restarted) leads on in that epoch, as mq did before R54.
  bool no_reboot_fence = false;
  // A follower compares its log with the leader's without storing the
  // epoch fence first (R56): a deposed leader's writer that passed its
  // check before the election appends after the comparison.
  bool no_epoch_fence = false;
  // The leader records a follower's position as the end of the batches it
  // sends back rather than the fetch offset (what the follower holds):
  // a follower that dies between the fetch and its append counts as
  // holding what it never wrote, and the HW passes it.
  bool position_at_response_end = false;
  bool operator==(const PlantedBugs&) const = default;
};

namespace internal {
extern PlantedBugs planted_bugs;  // replication.cc; none unless a test sets it
}  // namespace internal

// The bugs every replication call of this process runs with.
inline const PlantedBugs& Planted() { return internal::planted_bugs; }

// Plants `bugs` for the calls that follow (single-threaded tests only), and
// puts the ones before back when it goes.
class ScopedPlantedBugs {
 public:
  explicit ScopedPlantedBugs(const PlantedBugs& bugs) : before_(internal::planted_bugs) {
    internal::planted_bugs = bugs;
  }
  ~ScopedPlantedBugs() { internal::planted_bugs = before_; }
  ScopedPlantedBugs(const ScopedPlantedBugs&) = delete;
  ScopedPlantedBugs& operator=(const ScopedPlantedBugs&) = delete;

 private:
  PlantedBugs before_;
};

}  // namespace mq
