// One schedule of the deterministic simulation (tests/sim/README.md): 3-5
// replicas of one partition, producers with acks=all, consumers, followers
// fetching through a faulty link, crashes, power losses, elections, clock
// jumps and network partitions (replicas cut from the controller or from each
// other), all driven by one seed. After every step the invariants are checked;
// at the end every replica is brought back and must converge.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "mq/replication.h"
#include "replication/planted_bugs.h"  // liblog/src: the test-only hook

namespace mq::sim {

struct SimOptions {
  uint64_t seed = 1;
  PlantedBugs bugs;
  bool trace = false;  // print every step to stdout
  // Power losses keep each file's own prefix of unsynced writes rather
  // than a prefix of all of them (a file system without ordering).
  bool independent_files = false;
  bool ordered_metadata = false;  // DiskOrder::kMetadataOrdered
  // Each replica's log is liblog's (OpenReplicaLog, the producer's
  // PartitionWriter) over a simulated file system (RealReplicaLog), the
  // model log in lockstep as the oracle.
  bool real_log = false;
  // With real_log: a disagreement is a violation (otherwise it is counted,
  // and the model takes the real log's files).
  bool strict_oracle = false;
  // With real_log: a power loss keeps the state file's page cache (the
  // file liblog writes through a mapping) instead of drawing it.
  bool state_kept = false;
  // acks=1 instead of acks=all: a write counts as acknowledged once the
  // leader appended it. Losses are then expected: the proof that the
  // invariants see them.
  bool acks_one = false;
  // Followers' logs drop an empty epoch begun at their end when the
  // leader's batches carry an older one (ModelReplicaLog).
  bool lenient_empty_epochs = false;
  // Network partitions between the replicas and the controller and among
  // the replicas (off: the network only loses, delays and corrupts).
  bool partitions = true;
  // Followers killed within a step (between its fetch and the writes that
  // carry its state).
  bool follower_kills = true;
  // Planted: the stale reader hands out the batch it held above the HW
  // although its log was rewritten since it read it (mq before R2).
  bool stale_reader = false;
  // One schedule in eight (drawn from its seed) allows unclean elections:
  // when no ISR member can lead, the controller elects a live replica
  // outside the ISR (ElectionKind::kUnclean, as `mq-isr elect --unclean`),
  // and the in-sync replicas' hosts now and then go down together
  // (--no-unclean: none).
  bool unclean = true;
  // Planted: after a rewrite of its log the stale reader goes back to the
  // least of its position and the log end only, not to where the leader
  // epoch of its last batch ends (mq's reader before KIP-320's rule).
  bool reader_ignores_epoch = false;
};

struct SimStats {
  int64_t steps = 0;
  int64_t crashes = 0;
  int64_t power_losses = 0;
  int64_t io_faults = 0;
  int64_t elections = 0;
  int64_t produced = 0;
  int64_t acked = 0;
  int64_t refused = 0;  // NOT_ENOUGH_REPLICAS before appending
  int64_t fetches = 0;
  int64_t link_faults = 0;
  int64_t clock_jumps = 0;
  int64_t isr_changes = 0;
  // The network between hosts (README.md, "Partitions").
  int64_t partitions = 0;          // cut events
  int64_t heals = 0;               // heal events
  int64_t controller_refused = 0;  // cluster-state calls failed by a cut
  int64_t controller_faults = 0;   // cluster-state calls lost on a working path
  int64_t replies_lost = 0;        // AlterPartition applied, its reply lost
  int64_t cut_messages = 0;        // fetches / OffsetForLeaderEpoch lost to a cut link
  int64_t cut_elections = 0;       // elections of a leader the controller lost
  int64_t cut_shrinks = 0;         // ISR shrinks by a leader with a cut link
  int64_t isr_expands = 0;         // ISR expansions (a follower back in sync)
  int64_t leader_reboots = 0;      // a leader's power loss, back at once (R54)
  int64_t epochs_given_up = 0;     // R55: a restarted leader gave its epoch up
  int64_t paused_writes = 0;       // writers paused between their check and their write
  int64_t fenced_writes = 0;       // leader appends refused by an epoch fence (R56)
  int64_t follower_kills = 0;      // followers killed within a step
  int64_t readers = 0;             // stale readers opened
  int64_t reader_batches = 0;      // batches they handed out
  int64_t reader_drops = 0;        // held batches dropped at a rewrite
  int64_t unclean_schedules = 0;   // schedules that allow unclean elections
  int64_t unclean_elections = 0;   // a replica outside the ISR elected
  int64_t isr_outages = 0;         // every in-sync replica's host down at once
  int64_t reader_cuts = 0;         // readers sent back below what they handed out
  // --real-log: batches liblog's PartitionReader handed out, and the times
  // it went back below what it had handed out (TakeCut, TakeOutOfRange).
  int64_t real_reader_batches = 0;
  int64_t real_reader_cuts = 0;
  // --real-log: the real log's disagreements with the model, by kind.
  std::map<std::string, int64_t> disagreements;
  void Add(const SimStats& o);
};

struct SimOutcome {
  bool ok = true;
  int64_t step = -1;         // the step after which the violation was seen
  std::string violation;     // which invariant, what, where
  std::string summary;       // the schedule's parameters
  uint64_t fingerprint = 0;  // every replica's final log and the stats, hashed
  SimStats stats;
};

SimOutcome RunSchedule(const SimOptions& options);

}  // namespace mq::sim
