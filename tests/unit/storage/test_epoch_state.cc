// EpochState: the leader epochs a partition writer works with
// (replication.md §16.2, R37, R56).
#include <catch2/catch.hpp>

#include "mq/replica_checkpoint.h"
#include "storage/epoch_state.h"
#include "writer_units_support.h"

namespace mq {
namespace {

using test::FillDir;
using test::TempDir;

LogConfig Leader(int32_t epoch) {
  LogConfig c;
  c.leader_epoch = epoch;
  return c;
}

}  // namespace

TEST_CASE("R37 epoch state: Begin starts the leader's epoch at the log end and stores it") {
  TempDir tmp;
  PartitionDir d;
  FillDir(&d, tmp / "t-0", Leader(3));
  EpochState e;
  bool assigned = false;
  REQUIRE(e.Begin(d, 10, 2, &assigned).ok());
  CHECK(assigned);
  CHECK(e.CurrentAt(2));
  auto stored = LeaderEpochCache::Load(d.fd(), d.fs);
  REQUIRE(stored);
  REQUIRE(stored->latest());
  CHECK(stored->latest()->epoch == 3);
  CHECK(stored->latest()->start_offset == 10);
  // The latest epoch again: nothing to start.
  REQUIRE(e.Begin(d, 12, 2, &assigned).ok());
  CHECK_FALSE(assigned);
}

TEST_CASE("R37 epoch state: a leader whose epoch is below the latest stored is fenced") {
  TempDir tmp;
  PartitionDir newer;
  FillDir(&newer, tmp / "t-0", Leader(5));
  EpochState e5;
  REQUIRE(e5.Begin(newer, 0, 2).ok());
  PartitionDir older;
  FillDir(&older, tmp / "t-0", Leader(4));
  EpochState e4;
  Status s = e4.Begin(older, 0, 4);
  CHECK(s.code() == Code::kFenced);
}

TEST_CASE("R56 epoch state: an epoch fence only moves forward and fences the epochs below it") {
  TempDir tmp;
  PartitionDir d;
  FillDir(&d, tmp / "t-0", Leader(2));
  EpochState e;
  REQUIRE(e.Load(d, 0, 2).ok());
  auto raised = e.RaiseFence(d, 3, 2);
  REQUIRE(raised);
  CHECK(*raised);
  CHECK(e.fence() == 3);
  auto again = e.RaiseFence(d, 3, 2);
  REQUIRE(again);
  CHECK_FALSE(*again);
  auto lower = e.RaiseFence(d, 1, 2);
  REQUIRE(lower);
  CHECK_FALSE(*lower);
  CHECK(*LoadLeaderEpochFence(d.fd(), d.fs) == 3);
  // Epoch 2 is below the fence: fenced, even though no epoch is stored.
  CHECK(e.Begin(d, 0, 2).code() == Code::kFenced);
}

TEST_CASE("R56 epoch state: Fresh reads the epochs again only when the generation moved") {
  TempDir tmp;
  PartitionDir d;
  FillDir(&d, tmp / "t-0", Leader(1));
  EpochState e;
  REQUIRE(e.Load(d, 0, 2).ok());
  CHECK(e.fence() == -1);
  // Another writer stores a fence (and would publish: a new generation).
  REQUIRE(StoreLeaderEpochFence(d.fd(), 7, d.fs).ok());
  REQUIRE(e.Fresh(d, 0, 2).ok());
  CHECK(e.fence() == -1);  // as of generation 2
  REQUIRE(e.Fresh(d, 0, 4).ok());
  CHECK(e.fence() == 7);
  CHECK(e.CurrentAt(4));
  e.Published(6);
  CHECK(e.CurrentAt(6));
}

TEST_CASE(
    "R37 epoch state: a writer stamping no epoch loads none without a checkpoint, "
    "ForReplication rebuilds it from the log") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 2);
  PartitionDir d;
  FillDir(&d, dir);
  EpochState e;
  REQUIRE(e.Load(d, 4, 2).ok());
  CHECK_FALSE(e.loaded());
  REQUIRE(e.ForReplication(d, 4, 2).ok());
  REQUIRE(e.loaded());
  CHECK(e.cache().empty());  // no batch carries an epoch
  CHECK(test::Exists(dir + "/" + kLeaderEpochCheckpointFile));
}

TEST_CASE("R37 epoch state: a follower's batches start new epochs, one going back is corruption") {
  TempDir tmp;
  PartitionDir d;
  FillDir(&d, tmp / "t-0");
  EpochState e;
  e.EnsureCache();
  BatchHeader h;
  h.partition_leader_epoch = 2;
  h.base_offset = 0;
  EpochState::Replicated starts(e);
  REQUIRE(starts.Add(h, 0).ok());
  h.base_offset = 3;
  h.partition_leader_epoch = -1;  // stamped by no leader: adds nothing
  REQUIRE(starts.Add(h, 61).ok());
  h.base_offset = 5;
  h.partition_leader_epoch = 4;
  REQUIRE(starts.Add(h, 122).ok());
  h.base_offset = 6;
  h.partition_leader_epoch = 3;
  Status back = starts.Add(h, 183);
  CHECK(back.code() == Code::kCorruption);
  CHECK_THAT(back.message(), Catch::Contains("R37"));
  REQUIRE(starts.Store(d, &e).ok());
  REQUIRE(e.cache().entries().size() == 2);
  CHECK(e.cache().entries()[0].epoch == 2);
  CHECK(e.cache().entries()[1].start_offset == 5);
  auto stored = LeaderEpochCache::Load(d.fd(), d.fs);
  REQUIRE(stored);
  CHECK(stored->entries().size() == 2);
}

}  // namespace mq
