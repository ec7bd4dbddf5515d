// The simulator's models (tests/sim/model.h): what the invariants rely on.
// The model log refuses what the real follower append refuses, loses on a
// power loss exactly what was not synced, and the model store's
// AlterPartition is the compare-and-swap of mq/cluster.h.
#include <catch2/catch.hpp>

#include "model.h"
#include "real_log.h"

using namespace mq;
using namespace mq::sim;

namespace {

// Replica 0 leads; its batches are read as the bytes a fetch carries.
std::vector<std::byte> LeaderBytes(ModelReplicaLog& leader, int64_t from) {
  std::vector<std::byte> bytes;
  REQUIRE(leader.Read(from, size_t{1} << 20, &bytes).ok());
  return bytes;
}

}  // namespace

TEST_CASE("sim model: a follower appends the leader's bytes verbatim") {
  ModelReplicaLog leader(0, SyncPolicy::kEveryWrite);
  ModelReplicaLog follower(1, SyncPolicy::kEveryWrite);
  REQUIRE(leader.BeginEpoch(3).ok());
  REQUIRE(leader.AppendAsLeader(7, 2, 3, 1000));
  REQUIRE(leader.AppendAsLeader(8, 1, 3, 1001));
  auto appended = follower.AppendReplicated(LeaderBytes(leader, 0));
  REQUIRE(appended);
  CHECK(appended->base_offset == 0);
  CHECK(appended->last_offset == 2);
  CHECK(*follower.LogEndOffset() == 3);
  CHECK(*follower.LatestEpoch() == 3);
  REQUIRE(follower.files().log.size() == 2);
  CHECK(follower.files().log[1].identity == leader.files().log[1].identity);
}

TEST_CASE("sim model: a corrupt byte under the CRC is refused, nothing appended") {
  ModelReplicaLog leader(0, SyncPolicy::kEveryWrite);
  ModelReplicaLog follower(1, SyncPolicy::kEveryWrite);
  REQUIRE(leader.AppendAsLeader(7, 1, 0, 1000));
  std::vector<std::byte> bytes = LeaderBytes(leader, 0);
  bytes[bytes.size() - 1] ^= std::byte{0x01};
  auto appended = follower.AppendReplicated(bytes);
  REQUIRE_FALSE(appended);
  CHECK(appended.error().code() == Code::kCorruption);
  CHECK(*follower.LogEndOffset() == 0);
}

TEST_CASE("sim model: batches that do not continue the log are refused") {
  ModelReplicaLog leader(0, SyncPolicy::kEveryWrite);
  ModelReplicaLog follower(1, SyncPolicy::kEveryWrite);
  REQUIRE(leader.AppendAsLeader(7, 2, 0, 1000));
  REQUIRE(leader.AppendAsLeader(8, 1, 0, 1001));
  auto appended = follower.AppendReplicated(LeaderBytes(leader, 2));  // starts at 2, LEO 0
  REQUIRE_FALSE(appended);
  CHECK(appended.error().code() == Code::kOutOfOrder);
  CHECK(*follower.LogEndOffset() == 0);
}

TEST_CASE("sim model: a batch of an older epoch than the log's latest is refused (R37)") {
  ModelReplicaLog old_leader(0, SyncPolicy::kEveryWrite);
  ModelReplicaLog follower(1, SyncPolicy::kEveryWrite);
  REQUIRE(old_leader.AppendAsLeader(7, 1, 1, 1000));
  REQUIRE(follower.BeginEpoch(2).ok());  // it led epoch 2, writing nothing
  auto appended = follower.AppendReplicated(LeaderBytes(old_leader, 0));
  REQUIRE_FALSE(appended);
  // The writer's rule: an epoch going back is corruption, not a fence.
  CHECK(appended.error().code() == Code::kCorruption);
  CHECK(appended.error().rule() == "R37");
  CHECK(*follower.LogEndOffset() == 0);

  SECTION("leniently, the empty epoch gives way") {
    follower.set_lenient_empty_epochs(true);
    REQUIRE(follower.AppendReplicated(LeaderBytes(old_leader, 0)));
    CHECK(*follower.LatestEpoch() == 1);
  }
}

TEST_CASE("sim model: truncation cuts the log, its epochs and the HW") {
  ModelReplicaLog log(0, SyncPolicy::kEveryWrite);
  REQUIRE(log.AppendAsLeader(1, 2, 0, 1000));  // [0..1] epoch 0
  REQUIRE(log.AppendAsLeader(2, 2, 1, 1001));  // [2..3] epoch 1
  REQUIRE(log.SetHighWatermark(4).ok());
  REQUIRE(log.TruncateTo(3).ok());  // inside [2..3]: the whole batch goes
  CHECK(*log.LogEndOffset() == 2);
  CHECK(*log.HighWatermark() == 2);
  CHECK(*log.LatestEpoch() == 0);
  CHECK(log.cut_generation() == 1);
}

TEST_CASE("sim model: a power loss keeps what was synced and a prefix of the rest") {
  Rng rng(42);
  SECTION("every write synced: nothing lost") {
    ModelReplicaLog log(0, SyncPolicy::kEveryWrite);
    REQUIRE(log.AppendAsLeader(1, 1, 0, 1000));
    REQUIRE(log.SetHighWatermark(1).ok());
    log.PowerLoss(rng);
    CHECK(*log.LogEndOffset() == 1);
    CHECK(*log.HighWatermark() == 1);
  }
  SECTION("never synced: a prefix of the writes, in order") {
    for (int trial = 0; trial < 50; ++trial) {
      ModelReplicaLog log(0, SyncPolicy::kNever);
      REQUIRE(log.AppendAsLeader(1, 1, 0, 1000));
      REQUIRE(log.AppendAsLeader(2, 1, 0, 1001));
      REQUIRE(log.SetHighWatermark(2).ok());
      log.Sync();
      REQUIRE(log.AppendAsLeader(3, 1, 0, 1002));
      REQUIRE(log.TruncateTo(1).ok());
      REQUIRE(log.AppendAsLeader(4, 1, 5, 1003));
      log.PowerLoss(rng);
      const ReplicaFiles& f = log.files();
      // Synced: [0], [1], HW 2. After: +[2], cut to 1, +[1] epoch 5.
      REQUIRE(f.log.size() >= 1);
      CHECK(f.hw <= f.LogEnd());
      if (f.log.size() >= 2 && f.log[1].epoch == 5) {
        CHECK(f.LogEnd() == 2);  // the cut reached the disk before the append
      }
      // The last batch's epoch, or epoch 5 begun at the log end when the
      // power loss took its batch but kept the checkpoint written before
      // it (an epoch that starts at the log end stays: LeaderEpochCache::Open).
      const int32_t latest = *log.LatestEpoch();
      CHECK((latest == f.log.back().epoch || (latest == 5 && f.LogEnd() == 1)));
    }
  }
  SECTION("a kill keeps the page cache") {
    ModelReplicaLog log(0, SyncPolicy::kNever);
    REQUIRE(log.AppendAsLeader(1, 1, 0, 1000));
    log.Kill();
    CHECK(*log.LogEndOffset() == 1);
  }
}

// R38/R40: a truncation lowers the HW above its new end fdatasynced, after
// its intent, whatever the sync policy. That fsync commits every write
// before it (ordered disk) or every metadata write (metadata-ordered): no
// power loss then brings back the cut records with the HW that counted them
// (mq-sim seed 33950: a replica that never synced came back from a power
// loss with its log from before a cut and a HW over the cut records).
// (--independent-files, which can keep a later HW while losing the cut, is
// not supported for replicas: replication.md §17.9.)
TEST_CASE("sim model: a truncation that lowers the HW survives a power loss") {
  for (DiskOrder order : {DiskOrder::kOrdered, DiskOrder::kMetadataOrdered}) {
    for (uint64_t seed = 1; seed <= 64; ++seed) {
      Rng rng(seed);
      ModelReplicaLog log(0, SyncPolicy::kNever, order);
      REQUIRE(log.AppendAsLeader(1, 1, 0, 1000));  // [0] epoch 0
      REQUIRE(log.AppendAsLeader(2, 1, 0, 1001));  // [1] epoch 0: cut below
      REQUIRE(log.AppendAsLeader(3, 1, 0, 1002));  // [2] epoch 0: cut below
      REQUIRE(log.SetHighWatermark(3).ok());
      REQUIRE(log.TruncateTo(1).ok());
      REQUIRE(log.AppendAsLeader(4, 1, 5, 1003));  // [1] epoch 5
      REQUIRE(log.SetHighWatermark(2).ok());
      log.PowerLoss(rng);
      const ReplicaFiles& f = log.files();
      INFO("order " << static_cast<int>(order) << " seed " << seed << " leo " << f.LogEnd()
                    << " hw " << f.hw);
      // The cut records never come back, under the HW or above it.
      for (const SimBatch& b : f.log) CHECK_FALSE((b.base >= 1 && b.epoch == 0));
      CHECK(f.hw <= f.LogEnd());
    }
  }
}

TEST_CASE("sim model: a power loss is a reboot: the leader claim stays, the boot changes") {
  ModelReplicaLog log(0, SyncPolicy::kNever);
  Rng rng(7);
  const BootId first = log.RunningBoot();
  CHECK(first != BootId{});
  REQUIRE(log.StoreLeaderClaim({4, first}).ok());
  REQUIRE(log.BeginEpoch(4).ok());
  REQUIRE(log.AppendAsLeader(1, 2, 4, 1000));
  log.Kill();  // a process kill: the same boot
  CHECK(log.RunningBoot() == first);
  log.PowerLoss(rng);
  CHECK(log.RunningBoot() != first);
  CHECK(log.RunningBoot() != BootId{});
  auto claim = log.LoadLeaderClaim();
  REQUIRE(claim);
  CHECK(*claim == LeaderClaim{4, first});  // stored synced (R53)
}

TEST_CASE("sim model: an injected I/O failure fails the write and marks the replica") {
  ModelReplicaLog log(0, SyncPolicy::kEveryWrite);
  log.FailNextIo();
  auto appended = log.AppendAsLeader(1, 1, 0, 1000);
  REQUIRE_FALSE(appended);
  CHECK(appended.error().code() == Code::kIoError);
  CHECK(log.io_failed());
  CHECK(*log.LogEndOffset() == 0);
}

TEST_CASE(
    "sim model: a follower killed before its n-th write: that write fails without effect, the "
    "earlier ones are in") {
  ModelReplicaLog leader(0, SyncPolicy::kEveryWrite);
  ModelReplicaLog follower(1, SyncPolicy::kEveryWrite);
  REQUIRE(leader.BeginEpoch(3).ok());
  REQUIRE(leader.AppendAsLeader(7, 2, 3, 1000));
  // Killed before its second write: the fence is stored, the append is not.
  follower.KillBeforeWrite(1);
  REQUIRE(follower.FenceEpochsBelow(3).ok());
  CHECK_FALSE(follower.killed());
  auto appended = follower.AppendReplicated(LeaderBytes(leader, 0));
  REQUIRE_FALSE(appended);
  CHECK(appended.error().code() == Code::kUnavailable);
  CHECK(follower.killed());
  CHECK(follower.fence() == 3);
  CHECK(*follower.LogEndOffset() == 0);
  // Disarmed: the next writes go through.
  follower.KillBeforeWrite(-1);
  CHECK_FALSE(follower.killed());
  REQUIRE(follower.AppendReplicated(LeaderBytes(leader, 0)));
  CHECK(*follower.LogEndOffset() == 2);
  REQUIRE(follower.SetHighWatermark(2).ok());
  CHECK(*follower.HighWatermark() == 2);
}

TEST_CASE("sim model: AlterPartition is a compare-and-swap on the partition epoch") {
  ClusterState state;
  PartitionState p;
  p.topic = "t";
  p.replicas = {0, 1, 2};
  p.leader = 0;
  p.isr = {0, 1, 2};
  state.partitions.push_back(p);
  MemClusterStore store(state);

  PartitionState shrink = p;
  shrink.isr = {0, 1};
  auto done = store.AlterPartition(shrink, "shrink");
  REQUIRE(done);
  CHECK(done->partition_epoch == 1);
  CHECK(done->isr == std::vector<int32_t>{0, 1});

  // A proposal built on the old state (partition epoch 0) is fenced.
  PartitionState stale = p;
  stale.leader = 2;
  stale.leader_epoch = 1;
  auto refused = store.AlterPartition(stale, "stale");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Code::kFenced);
  CHECK(store.partition().leader == 0);
  CHECK(store.partition().partition_epoch == 1);
}

// The real log in lockstep with the model (tests/sim/real_log.h): the
// replication calls reach liblog's FileReplicaLog over the simulated file
// system, the model agrees, a crash reopens the log on the page cache and a
// power loss on what the simulated disk kept.
TEST_CASE(
    "sim real log: the shipped log follows the model through appends, a cut, a kill and a power "
    "loss") {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    RealReplicaLog leader(0, SyncPolicy::kNever, DiskOrder::kOrdered, "sim", true);
    RealReplicaLog follower(1, SyncPolicy::kEveryWrite, DiskOrder::kOrdered, "sim", true);
    REQUIRE(leader.BeginEpoch(0).ok());
    for (uint64_t w = 1; w <= 4; ++w) REQUIRE(leader.AppendAsLeader(w, 2, 0, 1000));
    REQUIRE(*leader.LogEndOffset() == 8);
    // The follower appends the leader's bytes, as the real log holds them.
    REQUIRE(follower.FenceEpochsBelow(0).ok());
    REQUIRE(follower.AppendReplicated(LeaderBytes(leader, 0)));
    REQUIRE(*follower.LogEndOffset() == 8);
    REQUIRE(follower.SetHighWatermark(6).ok());
    REQUIRE(follower.TruncateTo(6, 0).ok());
    REQUIRE(*follower.LogEndOffset() == 6);
    // A writer of an older epoch is refused by both.
    REQUIRE(leader.BeginEpoch(1).ok());
    auto old = leader.AppendAsLeader(9, 1, 0, 1000);
    REQUIRE(!old);
    CHECK(old.error().code() == Code::kFenced);
    follower.Kill();
    CHECK(*follower.LogEndOffset() == 6);
    CHECK(*follower.HighWatermark() == 6);
    // Every write synced: the power loss keeps all of it.
    Rng rng(seed);
    follower.PowerLoss(rng);
    CHECK(*follower.LogEndOffset() == 6);
    CHECK(follower.files().LogEnd() == 6);
    // Not synced: the leader keeps a prefix of its batches.
    leader.PowerLoss(rng);
    const int64_t kept = *leader.LogEndOffset();
    CHECK(kept <= 8);
    CHECK(leader.files().LogEnd() == kept);
    for (RealReplicaLog* log : {&leader, &follower}) {
      CHECK(log->contract_breach().empty());
      CHECK(log->TakeDisagreements().empty());
    }
  }
}

// The model and the shipped writer apply one rule to a follower's append
// whose epoch goes back (R37): both refuse it as corruption, so the real
// log in lockstep counts no disagreement.
TEST_CASE(
    "sim real log: a follower's append whose epoch goes back is R37 in the model and the log") {
  RealReplicaLog old_leader(0, SyncPolicy::kEveryWrite, DiskOrder::kOrdered, "sim", true);
  RealReplicaLog follower(1, SyncPolicy::kEveryWrite, DiskOrder::kOrdered, "sim", true);
  REQUIRE(old_leader.BeginEpoch(1).ok());
  REQUIRE(old_leader.AppendAsLeader(7, 1, 1, 1000));
  REQUIRE(old_leader.AppendAsLeader(8, 2, 1, 1001));
  REQUIRE(follower.BeginEpoch(2).ok());  // it led epoch 2, writing nothing
  auto appended = follower.AppendReplicated(LeaderBytes(old_leader, 0));
  REQUIRE_FALSE(appended);
  CHECK(appended.error().code() == Code::kCorruption);
  CHECK(appended.error().rule() == "R37");
  CHECK(*follower.LogEndOffset() == 0);
  CHECK(follower.files().LogEnd() == 0);
  CHECK(follower.contract_breach().empty());
  CHECK(follower.TakeDisagreements().empty());
}
