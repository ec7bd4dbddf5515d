// The leader's append gate (mq/append_gate.h, format-spec/replication.md
// §17.6): the min-ISR floor before and after an append, and what acks=0, 1
// and all wait for, over real partition directories with the simulator's
// cluster store and clock.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "model.h"  // tests/sim: the cluster store and clock in memory
#include "mq/append_gate.h"
#include "mq/replication.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// A topic of `replicas` replicas, all in the ISR, replica 0 leading in
// epoch 0, min.insync.replicas `min_isr`.
struct GateCluster {
  TempDir tmp;
  sim::MemClusterStore store{ClusterState{}};
  sim::VirtualClock clock;
  std::vector<std::string> roots;
  std::map<int32_t, std::unique_ptr<ReplicaLog>> logs;
  std::map<int32_t, FollowerState> follower_state;

  GateCluster(int replicas, int32_t min_isr) {
    ReplicatedTopic t;
    t.name = "t";
    t.replication_factor = replicas;
    t.min_insync_replicas = min_isr;
    t.replica_lag_time_max_ms = 30000;
    store.state().topics.push_back(t);
    PartitionState p;
    p.topic = "t";
    p.partition = 0;
    for (int32_t i = 0; i < replicas; ++i) {
      roots.push_back(tmp / ("root" + std::to_string(i)));
      std::filesystem::create_directories(roots.back() + "/t-0");
      store.state().replicas.push_back({i, roots.back()});
      p.replicas.push_back(i);
      p.isr.push_back(i);
    }
    p.leader = 0;
    store.state().partitions.push_back(p);
    for (int32_t i = 0; i < replicas; ++i) {
      auto log = OpenReplicaLog(Dir(i), i, ReplicaTestLog());
      REQUIRE(log);
      logs[i] = std::move(*log);
    }
  }
  std::string Dir(int32_t id) const { return roots[static_cast<size_t>(id)] + "/t-0"; }
  ReplicationContext Ctx() {
    ReplicationContext ctx;
    ctx.cluster = &store;
    ctx.clock = &clock;
    ctx.topic = "t";
    ctx.partition = 0;
    return ctx;
  }
  PartitionState Part() { return *store.state().Partition("t", 0); }
  std::unique_ptr<LeaderAppendGate> Gate(Acks acks, int64_t timeout_ms) {
    return std::make_unique<LeaderAppendGate>(Ctx(), Dir(0), 0, ReplicaTestLog(), acks, timeout_ms);
  }
  // What mq-produce does between the gate's calls: appends one batch in
  // `epoch` at the leader; returns its last offset.
  int64_t Append(int32_t epoch) {
    LogConfig c = ReplicaTestLog();
    c.leader_epoch = epoch;
    auto w = PartitionWriter::Open(Dir(0), c, false, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(3, 1000, 20);
    auto r = (*w)->Append(b);
    REQUIRE(r);
    return r->last_offset;
  }
  // One fetch of `follower` from the leader.
  void Fetch(int32_t follower) {
    ReplicationContext ctx = Ctx();
    auto link = DirectLeaderLink(ctx, logs[0].get());
    auto r = FollowerStep(ctx, *logs[follower], *link, follower_state[follower]);
    REQUIRE(r);
  }
  int64_t Hw() {
    auto hw = logs[0]->HighWatermark();
    REQUIRE(hw);
    return *hw;
  }
};

}  // namespace

TEST_CASE("append gate: acks=all below min.insync.replicas is refused before the append") {
  PartitionState p;
  p.topic = "t";
  p.partition = 3;
  p.isr = {0};
  const Status s = CheckMinIsrBeforeAppend(Acks::kAll, p, 2);
  CHECK(s.code() == Code::kNotEnoughReplicas);
  CHECK_THAT(s.message(), Catch::Contains("t-3: NOT_ENOUGH_REPLICAS") &&
                              Catch::Contains("min.insync.replicas=2") &&
                              Catch::Contains("nothing appended"));
  // At the floor, and for acks=0 and acks=1 whatever the ISR: appended.
  CHECK(CheckMinIsrBeforeAppend(Acks::kAll, p, 1).ok());
  CHECK(CheckMinIsrBeforeAppend(Acks::kLeader, p, 2).ok());
  CHECK(CheckMinIsrBeforeAppend(Acks::kNone, p, 2).ok());
}

TEST_CASE(
    "append gate: the floor after the append is kNotEnoughReplicasAfterAppend, outcome unknown") {
  PartitionState p;
  p.topic = "t";
  p.partition = 0;
  p.isr = {0, 2};
  CHECK(CheckMinIsrAfterAppend("t", 0, &p, 2, 7).ok());
  const Status s = CheckMinIsrAfterAppend("t", 0, &p, 3, 7);
  CHECK(s.code() == Code::kNotEnoughReplicasAfterAppend);
  CHECK_THAT(s.message(), Catch::Contains("t-0: offset 7: NOT_ENOUGH_REPLICAS_AFTER_APPEND") &&
                              Catch::Contains("{0,2}") && Catch::Contains("outcome unknown"));
  // A partition gone from the state is below any floor.
  CHECK(CheckMinIsrAfterAppend("t", 0, nullptr, 1, 7).code() ==
        Code::kNotEnoughReplicasAfterAppend);
}

TEST_CASE("append gate: BeforeAppend refuses below the floor and otherwise claims the epoch") {
  GateCluster c(2, 2);
  c.store.state().partitions.front().isr = {0};
  auto gate = c.Gate(Acks::kAll, 1000);
  auto refused = gate->BeforeAppend(c.Part(), 2);
  REQUIRE(!refused);
  CHECK(refused.error().code() == Code::kNotEnoughReplicas);
  // acks=1 appends with the same ISR, in the partition's epoch.
  auto leader_gate = c.Gate(Acks::kLeader, 1000);
  auto epoch = leader_gate->BeforeAppend(c.Part(), 2);
  REQUIRE(epoch);
  CHECK(*epoch == c.Part().leader_epoch);
}

TEST_CASE(
    "append gate: AfterAppend before BeforeAppend is an internal error, acks=0 waits for nothing") {
  GateCluster c(2, 2);
  CHECK(c.Gate(Acks::kLeader, 1000)->AfterAppend(0).code() == Code::kInternal);
  auto none = c.Gate(Acks::kNone, 0);
  REQUIRE(none->BeforeAppend(c.Part(), 2));
  const int64_t last = c.Append(c.Part().leader_epoch);
  CHECK(none->AfterAppend(last).ok());
  CHECK(c.Hw() == -1);  // none stored: not even computed
}

TEST_CASE(
    "append gate: acks=1 moves the high watermark as far as the ISR allows, without waiting") {
  GateCluster c(2, 2);
  auto gate = c.Gate(Acks::kLeader, 0);
  auto epoch = gate->BeforeAppend(c.Part(), 2);
  REQUIRE(epoch);
  const int64_t last = c.Append(*epoch);
  // Follower 1 holds nothing: the HW stays at 0, and acks=1 is answered.
  CHECK(gate->AfterAppend(last).ok());
  CHECK(c.Hw() == 0);
  // As the only ISR member the leader moves it past the append.
  GateCluster alone(1, 1);
  auto g1 = alone.Gate(Acks::kLeader, 0);
  REQUIRE(g1->BeforeAppend(alone.Part(), 1));
  const int64_t l1 = alone.Append(alone.Part().leader_epoch);
  CHECK(g1->AfterAppend(l1).ok());
  CHECK(alone.Hw() == l1 + 1);
}

TEST_CASE("append gate: acks=all is answered once every ISR member holds the append") {
  GateCluster c(2, 2);
  auto gate = c.Gate(Acks::kAll, 60000);
  auto epoch = gate->BeforeAppend(c.Part(), 2);
  REQUIRE(epoch);
  const int64_t last = c.Append(*epoch);
  c.Fetch(1);  // copies the batch
  c.Fetch(1);  // tells the leader it holds it
  CHECK(gate->AfterAppend(last).ok());
  CHECK(c.Hw() == last + 1);
}

TEST_CASE(
    "append gate: acks=all not acknowledged within the timeout is kTimedOut, outcome unknown") {
  GateCluster c(2, 2);
  auto gate = c.Gate(Acks::kAll, 0);
  auto epoch = gate->BeforeAppend(c.Part(), 2);
  REQUIRE(epoch);
  const int64_t last = c.Append(*epoch);
  const Status s = gate->AfterAppend(last);
  CHECK(s.code() == Code::kTimedOut);
  CHECK_THAT(s.message(), Catch::Contains(fmt::format("t-0: offset {}: not acknowledged", last)) &&
                              Catch::Contains("outcome unknown"));
}

TEST_CASE(
    "append gate: a follower that lags leaves the ISR during the wait, and the floor then fails "
    "the append") {
  GateCluster c(2, 2);
  auto gate = c.Gate(Acks::kAll, 60000);
  auto epoch = gate->BeforeAppend(c.Part(), 2);
  REQUIRE(epoch);
  c.Fetch(1);  // caught up with the empty log, then fetches no more
  const int64_t last = c.Append(*epoch);
  // Follower 1 has not fetched for longer than replica.lag.time.max.ms:
  // the waiting leader applies the ISR rule, the HW passes the append with
  // the leader alone, below the floor of 2.
  c.clock.Advance(60000);
  const Status s = gate->AfterAppend(last);
  CHECK(s.code() == Code::kNotEnoughReplicasAfterAppend);
  CHECK(c.Part().isr == std::vector<int32_t>{0});
  CHECK(c.Hw() == last + 1);
}

TEST_CASE(
    "append gate: a leader deposed meanwhile has its epoch replaced at the next BeforeAppend") {
  GateCluster c(2, 1);
  auto gate = c.Gate(Acks::kLeader, 0);
  auto first = gate->BeforeAppend(c.Part(), 1);
  REQUIRE(first);
  PartitionState next = c.Part();
  next.leader_epoch += 1;
  REQUIRE(c.store.AlterPartition(next, "new epoch"));
  auto second = gate->BeforeAppend(c.Part(), 1);
  REQUIRE(second);
  CHECK(*second == *first + 1);
}
