// The replication logic on log roots (mq/replication.h,
// format-spec/replication.md §17): fetch, the high watermark, ISR shrink and
// expand, fencing, and epoch truncation, over real partition directories.
// The deterministic simulator (tests/sim) runs the same logic under faults;
// its in-memory cluster store and clock serve here too.
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "format/coding.h"
#include "model.h"  // tests/sim: the cluster store and clock in memory
#include "mq/cluster.h"
#include "mq/committed_fetch.h"
#include "mq/crc32c.h"
#include "mq/lock.h"
#include "mq/replica_verification.h"
#include "mq/replication.h"
#include "mq/wire.h"
#include "replication/planted_bugs.h"  // the simulator's test-only hook
#include "storage/state_file.h"        // ParseBootId
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

LogConfig Small() { return ReplicaTestLog(); }

struct Cluster {
  TempDir tmp;
  sim::MemClusterStore store{ClusterState{}};
  sim::VirtualClock clock;
  ReplicationContext ctx;
  std::vector<std::string> roots;
  std::map<int32_t, std::unique_ptr<ReplicaLog>> logs;
  std::map<int32_t, FollowerState> follower_state;

  explicit Cluster(int replicas) {
    ReplicatedTopic t;
    t.name = "t";
    t.replication_factor = replicas;
    t.min_insync_replicas = 2;
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
    ctx.cluster = &store;
    ctx.clock = &clock;
    ctx.topic = "t";
    ctx.partition = 0;
    for (int32_t i = 0; i < replicas; ++i) Reopen(i);
  }
  std::string Dir(int32_t id) const { return roots[static_cast<size_t>(id)] + "/t-0"; }
  void Reopen(int32_t id) {
    logs.erase(id);
    auto log = OpenReplicaLog(Dir(id), id, Small());
    REQUIRE(log);
    logs[id] = std::move(*log);
  }
  PartitionState Part() { return *store.state().Partition("t", 0); }
  // The leader appends `n` batches in its epoch.
  AppendResult Produce(int n, int records = 3) {
    const PartitionState p = Part();
    LogConfig c = Small();
    c.leader_epoch = p.leader_epoch;
    auto w = PartitionWriter::Open(Dir(p.leader), c, false, nullptr);
    REQUIRE(w);
    AppendResult last;
    for (int i = 0; i < n; ++i) {
      auto b = MakeBatch(records, 1000 + i, 20);
      auto r = (*w)->Append(b);
      REQUIRE(r);
      last = *r;
    }
    return last;
  }
  Result<FollowerStepResult> Step(int32_t follower, size_t max_bytes = 1 << 20) {
    const PartitionState p = Part();
    auto link = DirectLeaderLink(ctx, logs[p.leader].get());
    return FollowerStep(ctx, *logs[follower], *link, follower_state[follower], max_bytes);
  }
  void CatchUp(int32_t follower) {
    for (int i = 0; i < 1000; ++i) {
      auto r = Step(follower);
      REQUIRE(r);
      if (r->caught_up && r->appended_bytes == 0) return;
    }
    FAIL("follower " << follower << " never caught up");
  }
  int64_t Hw(int32_t id) {
    auto hw = logs[id]->HighWatermark();
    REQUIRE(hw);
    return *hw;
  }
  int64_t Leo(int32_t id) {
    auto leo = logs[id]->LogEndOffset();
    REQUIRE(leo);
    return *leo;
  }
  // Kafka's clean election, applied as mq-isr elect applies it.
  void Elect(const std::function<bool(int32_t)>& live) {
    auto next = ElectLeader(Part(), ElectionKind::kClean, live);
    REQUIRE(next);
    REQUIRE(store.AlterPartition(*next, "elect"));
  }
};

// A link to the leader that counts fetches. With `reports` false it has
// no reports (LeaderLink::Report's default), as across hosts: the follower
// tells its LEO with its next fetch. `before_report` runs (once) before a
// report reaches the leader.
class CountingLink : public LeaderLink {
 public:
  explicit CountingLink(std::unique_ptr<LeaderLink> inner, bool reports = true)
      : inner_(std::move(inner)), reports_(reports) {}
  Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                              int32_t requested_epoch) override {
    return inner_->OffsetForLeaderEpoch(leader_epoch, requested_epoch);
  }
  Result<FetchResponse> Fetch(const FetchRequest& request) override {
    ++fetches;
    return inner_->Fetch(request);
  }
  Result<std::optional<FetchResponse>> Report(const FetchRequest& request) override {
    if (!reports_) return LeaderLink::Report(request);
    if (before_report) std::exchange(before_report, nullptr)();
    return inner_->Report(request);
  }
  int fetches = 0;
  std::function<void()> before_report;

 private:
  std::unique_ptr<LeaderLink> inner_;
  bool reports_;
};

}  // namespace

TEST_CASE("replication: followers hold the leader's bytes, and the HW is the ISR's smallest LEO") {
  Cluster c(3);
  const AppendResult last = c.Produce(12);
  const int64_t leo = last.last_offset + 1;
  c.CatchUp(1);
  // Replica 2 has not fetched in this epoch: the HW waits for it.
  auto hw = UpdateHighWatermark(c.ctx, *c.logs[0], 0);
  REQUIRE(hw);
  CHECK(*hw == 0);
  c.CatchUp(2);
  c.CatchUp(1);  // reports its LEO again; the HW reaches the log end
  hw = UpdateHighWatermark(c.ctx, *c.logs[0], 0);
  REQUIRE(hw);
  CHECK(*hw == leo);
  CHECK(c.Hw(0) == leo);
  CHECK(c.Hw(1) == leo);  // learnt from the leader's answer
  for (int32_t f : {1, 2}) {
    CHECK(RawBatches(c.Dir(f)) == RawBatches(c.Dir(0)));
    for (const std::string& name : ListDir(c.Dir(0)))
      if (name.size() > 4 && name.substr(name.size() - 4) == ".log")
        CHECK(ReadFile(c.Dir(f) + "/" + name) == ReadFile(c.Dir(0) + "/" + name));
  }
  // Small fetches: one batch at a time still ends byte-identical.
  Cluster d(2);
  d.Produce(7);
  for (int i = 0; i < 100 && d.Leo(1) < d.Leo(0); ++i) REQUIRE(d.Step(1, 1));
  CHECK(RawBatches(d.Dir(1)) == RawBatches(d.Dir(0)));
}

namespace {

// Counts the files opened, by name.
class OpenCountingFs : public FileSystemWrapper {
 public:
  std::map<std::string, int> opens;
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    ++opens[name];
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
};

}  // namespace

TEST_CASE(
    "replication: a fetch reads the followers' positions once, and a follower stores a HW only "
    "when it rises") {
  // Declared before the cluster, whose logs use them until they close.
  OpenCountingFs leader_fs, follower_fs;
  Cluster c(2);
  c.Produce(3);
  c.CatchUp(1);
  const int64_t hw = c.Hw(0);
  REQUIRE(hw == c.Leo(0));
  REQUIRE(c.Hw(1) == hw);
  for (auto [id, fs] : {std::pair{0, &leader_fs}, std::pair{1, &follower_fs}}) {
    LogConfig config = Small();
    config.fs = fs;
    auto log = OpenReplicaLog(c.Dir(id), id, config);
    REQUIRE(log);
    c.logs[id] = std::move(*log);
  }
  leader_fs.opens.clear();
  follower_fs.opens.clear();
  // Caught up: the fetch brings neither records nor a higher HW.
  auto step = c.Step(1);
  REQUIRE(step);
  CHECK(step->appended_bytes == 0);
  CHECK(step->caught_up);
  // The leader reads the positions under its lock and writes this fetch's
  // entry back in place, without reading them again and without a file
  // replace (R60), through the file it opened when the log was opened
  // (kept open while the name names it): no open at all.
  CHECK(leader_fs.opens["fetch-positions"] == 0);
  CHECK(leader_fs.opens["fetch-positions.tmp"] == 0);
  CHECK(leader_fs.opens["replica-positions"] == 0);
  // The follower stored this HW at its previous fetch: nothing to read or
  // write.
  CHECK(follower_fs.opens["high-watermark"] == 0);
  CHECK(follower_fs.opens["high-watermark.tmp"] == 0);
  // A record more: the next fetches bring it, then the HW past it, which
  // the follower stores.
  c.Produce(1);
  c.CatchUp(1);
  // In place (R61): the file read and the copy that was not current
  // written through one open, kept for the next stores; no staging file,
  // no replace.
  CHECK(follower_fs.opens["high-watermark"] == 1);
  CHECK(follower_fs.opens["high-watermark.tmp"] == 0);
  CHECK(follower_fs.opens["replication-offset-checkpoint.tmp"] == 0);
  CHECK(c.Hw(0) == c.Leo(0));
  CHECK(c.Hw(1) == c.Hw(0));
  // The next stores open nothing, nor do the leader's fetches.
  leader_fs.opens.clear();
  follower_fs.opens.clear();
  c.Produce(1);
  c.CatchUp(1);
  CHECK(c.Hw(1) == c.Leo(0));
  CHECK(follower_fs.opens["high-watermark"] == 0);
  CHECK(leader_fs.opens["high-watermark"] == 0);
  CHECK(leader_fs.opens["fetch-positions"] == 0);
  CHECK(leader_fs.opens["leader.lock"] == 0);
  // Nor does the follower look for a leader claim again at each fetch
  // (R55): none was stored on this boot when it last looked.
  CHECK(follower_fs.opens["leader-claim"] == 0);
}

TEST_CASE(
    "replication: a follower that a fetch caught up reports its log end before it stores the HW") {
  OpenCountingFs follower_fs;  // before the cluster, whose logs use it until they close
  Cluster c(3);
  c.Produce(3);
  c.CatchUp(1);
  c.CatchUp(2);
  {
    LogConfig config = Small();
    config.fs = &follower_fs;
    auto log = OpenReplicaLog(c.Dir(1), 1, config);
    REQUIRE(log);
    c.logs[1] = std::move(*log);
  }
  // One record: both fetch it and report it (R98); replica 2's report
  // moves the HW past it, which replica 1 learns only at a later fetch.
  c.Produce(1);
  const int64_t leo = c.Leo(0);
  REQUIRE(c.Step(1));
  REQUIRE(c.Step(2));
  REQUIRE(c.Hw(0) == leo);
  const int64_t stored = c.Hw(1);
  REQUIRE(stored < leo);
  // The next record: the fetch that brings it (and caught up) answers with
  // a HW above the one replica 1 stored, but replica 1 stores nothing
  // before its report has told the leader its new log end; then it stores
  // the HW of the report's answer.
  c.Produce(1);
  follower_fs.opens.clear();
  CountingLink link(DirectLeaderLink(c.ctx, c.logs[0].get()));
  int64_t at_report = -1;
  link.before_report = [&] { at_report = c.Hw(1); };
  auto brought = FollowerStep(c.ctx, *c.logs[1], link, c.follower_state[1]);
  REQUIRE(brought);
  CHECK(brought->appended_bytes > 0);
  CHECK(brought->caught_up);
  CHECK(brought->reported);
  CHECK(at_report == stored);
  // Through the file kept open since its earlier stores: no open.
  CHECK(follower_fs.opens["high-watermark"] == 0);
  CHECK(c.Hw(1) > stored);
  CHECK(c.Hw(1) == c.Hw(0));
}

TEST_CASE(
    "replication: a kept high-watermark, fetch-positions or leader.lock replaced by another "
    "process is opened again") {
  Cluster c(2);
  c.Produce(3);
  c.CatchUp(1);
  REQUIRE(c.Hw(0) == c.Leo(0));
  auto dir = OpenDirectory(c.Dir(0), false);
  REQUIRE(dir);
  // Removed, then created again whole by another writer (R39: a new file).
  const int64_t hw = c.Hw(0);
  REQUIRE(std::filesystem::remove(c.Dir(0) + "/high-watermark"));
  REQUIRE(StoreHighWatermark(dir->get(), "t", 0, hw, nullptr, false).ok());
  // Removed: the leader's next fetch creates it whole again (R60).
  REQUIRE(std::filesystem::remove(c.Dir(0) + "/fetch-positions"));
  c.Produce(2);
  c.CatchUp(1);
  // The leader stored the new HW in the file the name names, not in the
  // one it had kept, and read it from there.
  auto stored = LoadHighWatermark(dir->get(), "t", 0);
  REQUIRE(stored);
  CHECK(*stored == c.Leo(0));
  CHECK(c.Hw(0) == c.Leo(0));
  auto positions = ReadReplicaPositions(c.Dir(0));
  REQUIRE(positions);
  auto f = std::find_if(positions->begin(), positions->end(),
                        [](const FollowerPosition& p) { return p.replica == 1; });
  REQUIRE(f != positions->end());
  CHECK(f->log_end_offset == c.Leo(0));
  // leader.lock replaced by hand while another process holds the new one:
  // the leader waits for that one, not for the file it had kept open.
  REQUIRE(std::filesystem::remove(c.Dir(0) + "/leader.lock"));
  auto other = FileLock::Acquire(dir->get(), "leader.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(other);
  auto busy = UpdateHighWatermark(c.ctx, *c.logs[0], 0, false);
  REQUIRE_FALSE(busy);
  CHECK(busy.error().code() == Code::kBusy);
  other->Close();
  CHECK(UpdateHighWatermark(c.ctx, *c.logs[0], 0, false));
}

TEST_CASE(
    "replication: a leader's fetches in one epoch look at its epochs once, however its producer "
    "appends") {
  OpenCountingFs leader_fs;  // before the cluster, whose logs use it until they close
  Cluster c(2);
  c.Produce(2);
  c.CatchUp(1);
  {
    LogConfig config = Small();
    config.fs = &leader_fs;
    auto log = OpenReplicaLog(c.Dir(0), 0, config);
    REQUIRE(log);
    c.logs[0] = std::move(*log);
  }
  REQUIRE(c.Step(1));  // the first fetch of this log: the epoch is looked at
  leader_fs.opens.clear();
  for (int i = 0; i < 3; ++i) {
    c.Produce(1);
    c.CatchUp(1);
  }
  CHECK(c.Hw(0) == c.Leo(0));
  CHECK(c.Hw(1) == c.Leo(0));
  // The epochs were not read again for the fetches (EnsureEpoch), nor for
  // the HW stores that followed the producer's appends (SetHighWatermark
  // reads the committed end only).
  CHECK(leader_fs.opens["leader-epoch-checkpoint"] == 0);
  CHECK(leader_fs.opens["leader-epoch-fence"] == 0);
  // A new epoch is looked at: this replica leads again after another did.
  PartitionState p = c.Part();
  p.leader_epoch++;
  c.store.state().partitions[0] = p;
  REQUIRE(c.Step(1));
  auto latest = c.logs[0]->LatestEpoch();
  REQUIRE(latest);
  CHECK(*latest == p.leader_epoch);
}

TEST_CASE(
    "replication: a writer that stores a HW after another's appends appends after them, and a "
    "fence stored by another stops it") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  LogConfig c = Small();
  c.leader_epoch = 0;
  auto a = PartitionWriter::Open(dir, c, true, nullptr);
  REQUIRE(a);
  auto b = PartitionWriter::Open(dir, c, false, nullptr);
  REQUIRE(b);
  auto first = MakeBatch(2);
  REQUIRE((*a)->Append(first));
  // Another writer's appends, then a HW this writer stores past them.
  AppendResult last;
  for (int i = 0; i < 4; ++i) {
    auto batch = MakeBatch(3, 2000 + i);
    auto r = (*b)->Append(batch);
    REQUIRE(r);
    last = *r;
  }
  REQUIRE((*a)->SetHighWatermark(last.last_offset + 1).ok());
  CHECK((*a)->SetHighWatermark(last.last_offset + 2).code() == Code::kInvalidArgument);
  auto dfd = OpenDirectory(dir, false);
  REQUIRE(dfd);
  auto hw = LoadHighWatermark(dfd->get(), "t", 0);
  REQUIRE(hw);
  CHECK(*hw == last.last_offset + 1);
  // Its next append continues the log the other writer left.
  auto batch = MakeBatch(1, 3000);
  auto next = (*a)->Append(batch);
  REQUIRE(next);
  CHECK(next->base_offset == last.last_offset + 1);
  CHECK(ReadAll(dir).back() == std::make_pair(next->base_offset, next->last_offset));
  // A fence stored by the other writer (published with the same committed
  // fields) is read before this writer's next append: fenced (R56).
  REQUIRE((*b)->FenceEpochsBelow(1).ok());
  auto one_more = MakeBatch(1, 4000);
  auto fenced = (*a)->Append(one_more);
  REQUIRE_FALSE(fenced);
  CHECK(fenced.error().code() == Code::kFenced);
}

TEST_CASE(
    "replication: a follower not caught up for replica.lag.time.max.ms leaves the ISR and rejoins "
    "when caught up") {
  Cluster c(3);
  c.Produce(3);
  c.CatchUp(1);
  c.CatchUp(2);
  c.Produce(3);
  c.clock.Advance(10'000);
  c.CatchUp(1);
  // Not yet: replica 2 was caught up 10 s ago.
  auto p = MaybeShrinkIsr(c.ctx, *c.logs[0], 0);
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1, 2});
  c.clock.Advance(25'000);
  c.CatchUp(1);
  p = MaybeShrinkIsr(c.ctx, *c.logs[0], 0);
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1});
  CHECK(p->partition_epoch == 1);
  CHECK(c.store.recent().back().find("replica 2 not caught up for 35000 ms") != std::string::npos);
  // Without replica 2 the HW moves on.
  c.CatchUp(1);
  CHECK(c.Hw(0) == c.Leo(0));
  // Replica 2 catches up and joins again.
  c.CatchUp(2);
  CHECK(c.Part().isr == std::vector<int32_t>{0, 1, 2});
  CHECK(c.store.recent().back().find("expand: replica 2") != std::string::npos);
}

TEST_CASE("replication: a deposed leader is fenced: no fetch, no HW, no ISR change") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  c.Elect([](int32_t r) { return r != 0; });
  CHECK(c.Part().leader == 1);
  CHECK(c.Part().leader_epoch == 1);
  FetchRequest req;
  req.replica = 2;
  req.leader_epoch = 0;
  req.fetch_offset = 0;
  auto f = HandleFetch(c.ctx, *c.logs[0], req);
  REQUIRE(!f);
  CHECK(f.error().code() == Code::kFenced);
  auto hw = UpdateHighWatermark(c.ctx, *c.logs[0], 0);
  REQUIRE(!hw);
  CHECK(hw.error().code() == Code::kFenced);
  c.clock.Advance(100'000);
  auto shrink = MaybeShrinkIsr(c.ctx, *c.logs[0], 0);
  REQUIRE(!shrink);
  CHECK(shrink.error().code() == Code::kFenced);
  // The new leader's epoch in a request to it: served.
  req.leader_epoch = 1;
  req.fetch_offset = c.Leo(2);
  CHECK(HandleFetch(c.ctx, *c.logs[1], req));
}

namespace {

// The cluster state across a network that a partition cuts: every call
// fails kUnavailable, without effect.
class CutStore : public ClusterStore {
 public:
  explicit CutStore(ClusterStore* inner) : inner_(inner) {}
  Result<ClusterState> Load() override {
    if (cut) return Status(Code::kUnavailable, "cut from the controller");
    return inner_->Load();
  }
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override {
    if (cut) return Status(Code::kUnavailable, "cut from the controller");
    return inner_->AlterPartition(proposed, reason);
  }
  bool cut = false;

 private:
  ClusterStore* inner_;
};

}  // namespace

namespace {

// Counts the loads of the cluster state through it.
class CountingStore : public ClusterStore {
 public:
  explicit CountingStore(ClusterStore* inner) : inner_(inner) {}
  Result<ClusterState> Load() override {
    ++loads;
    return inner_->Load();
  }
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override {
    return inner_->AlterPartition(proposed, reason);
  }
  int loads = 0;

 private:
  ClusterStore* inner_;
};

}  // namespace

TEST_CASE(
    "replication: an ISR shrink decides from a state loaded once for many partitions, and a stale "
    "one is fenced") {
  // mq-isr --check over 10,000 partitions loads the cluster state once, not
  // once per partition.
  Cluster c(3);
  c.Produce(3);
  c.CatchUp(1);
  c.CatchUp(2);
  c.clock.Advance(35'000);
  c.CatchUp(1);
  const ClusterState loaded = *c.store.Load();
  CountingStore counted(&c.store);
  ReplicationContext ctx = c.ctx;
  ctx.cluster = &counted;
  ctx.loaded = &loaded;
  auto p = MaybeShrinkIsr(ctx, *c.logs[0], 0);
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1});
  CHECK(counted.loads == 0);
  CHECK(c.Part().isr == std::vector<int32_t>{0, 1});
  // The same, now stale, state (ISR 0,1,2 at partition epoch 0): the change
  // it decides is refused by the compare-and-swap.
  c.CatchUp(2);  // rejoins: partition epoch 2
  c.clock.Advance(35'000);
  c.CatchUp(1);
  auto stale = MaybeShrinkIsr(ctx, *c.logs[0], 0);
  REQUIRE_FALSE(stale);
  CHECK(stale.error().code() == Code::kFenced);
  CHECK(c.Part().isr == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("replication: a leader cut from the cluster state serves no fetch and moves no HW") {
  Cluster c(3);
  const int64_t leo = c.Produce(3).last_offset + 1;
  c.CatchUp(1);
  // Replica 2 never fetched in this epoch: the HW holds. Then the ISR
  // loses it, and the leader loses the cluster state.
  PartitionState p = c.Part();
  p.isr = {0, 1};
  REQUIRE(c.store.AlterPartition(p, "shrink"));
  CutStore path(&c.store);
  ReplicationContext leader_ctx = c.ctx;
  leader_ctx.cluster = &path;
  path.cut = true;
  const int64_t before = c.Hw(0);
  REQUIRE(before < leo);
  PartitionState seen;
  auto hw = UpdateHighWatermark(leader_ctx, *c.logs[0], 0, true, &seen);
  REQUIRE(!hw);
  CHECK(hw.error().code() == Code::kUnavailable);
  CHECK(c.Hw(0) == before);
  CHECK(seen.leader == -1);
  // A follower that reaches the state reaches a leader that does not.
  auto link = DirectLeaderLink(leader_ctx, c.logs[0].get());
  auto step = FollowerStep(c.ctx, *c.logs[2], *link, c.follower_state[2]);
  REQUIRE(!step);
  CHECK(step.error().code() == Code::kUnavailable);
  CHECK(c.Leo(2) == 0);
  // The planted bug hw_without_controller goes on with its followers'
  // positions: what the simulator's invariant 5 catches.
  {
    PlantedBugs bugs;
    bugs.hw_without_controller = true;
    ScopedPlantedBugs planted(bugs);
    hw = UpdateHighWatermark(leader_ctx, *c.logs[0], 0, true, &seen);
  }
  REQUIRE(hw);
  CHECK(*hw == leo);
  // Healed: the HW call reports the state it was computed under.
  path.cut = false;
  hw = UpdateHighWatermark(leader_ctx, *c.logs[0], 0, true, &seen);
  REQUIRE(hw);
  CHECK(*hw == leo);
  CHECK(seen.isr == std::vector<int32_t>{0, 1});
  CHECK(seen.partition_epoch == 1);
}

TEST_CASE(
    "replication: a returning leader truncates its divergent tail before it fetches (KIP-101)") {
  Cluster c(3);
  c.Produce(4);
  c.CatchUp(1);
  c.CatchUp(2);
  const int64_t shared = c.Leo(0);
  // Leader 0 appends what nobody fetched, then dies.
  c.Produce(3);
  CHECK(c.Leo(0) > shared);
  c.Elect([](int32_t r) { return r != 0; });
  // The new leader writes in epoch 1 from its log end.
  c.Produce(2, 5);
  c.CatchUp(2);
  // Replica 0 returns as a follower.
  c.Reopen(0);
  auto r = c.Step(0);
  REQUIRE(r);
  CHECK(r->truncated_to == shared);
  c.CatchUp(0);
  CHECK(RawBatches(c.Dir(0)) == RawBatches(c.Dir(1)));
  CHECK(RawBatches(c.Dir(2)) == RawBatches(c.Dir(1)));
  // Double failover (KIP-279): 2 leads in epoch 2 while 0 lags behind
  // epoch 1's end; 0 asks for epoch 1 and truncates nothing it shares.
  c.Produce(1);
  c.Elect([](int32_t id) { return id == 2; });
  CHECK(c.Part().leader == 2);
  c.Produce(2);
  c.CatchUp(0);
  CHECK(RawBatches(c.Dir(0)) == RawBatches(c.Dir(2)));
}

TEST_CASE(
    "replication: a follower stopped by an error starts again after 200 ms, doubling to 30 s") {
  CHECK(FollowerRestartDelayMs(1) == 200);
  CHECK(FollowerRestartDelayMs(2) == 400);
  CHECK(FollowerRestartDelayMs(3) == 800);
  CHECK(FollowerRestartDelayMs(8) == 25600);
  CHECK(FollowerRestartDelayMs(9) == 30000);
  CHECK(FollowerRestartDelayMs(1000000) == 30000);
  CHECK(FollowerRestartDelayMs(INT_MAX) == 30000);
  for (int i = 1; i < 40; ++i) CHECK(FollowerRestartDelayMs(i) <= FollowerRestartDelayMs(i + 1));
}

TEST_CASE("replication: a fetch past the leader's end or of corrupt bytes appends nothing") {
  Cluster c(2);
  c.Produce(3);
  FetchRequest req;
  req.replica = 1;
  req.leader_epoch = 0;
  req.fetch_offset = c.Leo(0) + 5;
  auto f = HandleFetch(c.ctx, *c.logs[0], req);
  REQUIRE(!f);
  CHECK(f.error().code() == Code::kOutOfOrder);
  req.fetch_offset = 0;
  f = HandleFetch(c.ctx, *c.logs[0], req);
  REQUIRE(f);
  REQUIRE(!f->batches.empty());
  auto bytes = f->batches;
  bytes[bytes.size() / 2] ^= std::byte{0x10};
  auto a = c.logs[1]->AppendReplicated(bytes);
  REQUIRE(!a);
  CHECK(a.error().code() == Code::kCorruption);
  CHECK(c.Leo(1) == 0);
}

TEST_CASE(
    "R47 replica positions: six numbers per entry, a replica once, in the checkpoint layout") {
  const std::vector<FollowerPosition> positions = {{0, 3, 120, 1000, 1000, 120},
                                                   {2, 3, 118, 990, 980, 119}};
  const std::string text = EncodeReplicaPositions(positions);
  CHECK(text == "0\n2\n0 3 120 1000 1000 120\n2 3 118 990 980 119\n");
  auto back = DecodeReplicaPositions(text, "replica-positions");
  REQUIRE(back);
  CHECK(*back == positions);
  struct Bad {
    const char* text;
    uint64_t position;
    const char* rule;
  };
  for (const Bad& bad :
       {Bad{"0\n1\n0 3 120 1000 1000\n", 21, "R35"},  // five fields: the sixth is missing at the LF
        Bad{"0\n2\n1 3 1 1 1 1\n1 4 2 2 2 2\n", 16, "R47"},  // replica 1 twice
        Bad{"0\n1\n2147483648 0 0 0 0 0\n", 4, "R47"}}) {    // above 2^31-1
    INFO(bad.text);
    auto r = DecodeReplicaPositions(bad.text, "replica-positions");
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(r.error().rule() == bad.rule);
    CHECK(r.error().position() == bad.position);
  }
}

TEST_CASE(
    "R47 replica positions: verify of a partition reads a file an earlier mq left and reports a "
    "breach") {
  Cluster c(2);
  c.Produce(2);
  c.CatchUp(1);
  std::vector<Problem> problems;
  VerifyStats stats;
  REQUIRE(VerifyPartition(c.Dir(0), {}, &problems, OffsetPolicy::kGapsAllowed, &stats).ok());
  CHECK(problems.empty());
  const uint64_t files = stats.files;
  WriteFile(c.Dir(0) + "/replica-positions",
            std::vector<std::byte>{std::byte{'0'}, std::byte{'\n'}, std::byte{'1'}, std::byte{'\n'},
                                   std::byte{'x'}, std::byte{'\n'}});
  VerifyStats again;
  REQUIRE(VerifyPartition(c.Dir(0), {}, &problems, OffsetPolicy::kGapsAllowed, &again).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == c.Dir(0) + "/replica-positions");
  // Checked besides the leader's fetch-positions (R60).
  CHECK(again.files == files + 1);
}

namespace {

std::vector<std::byte> FetchPositionsImage(const std::vector<FollowerPosition>& c0, uint64_t s0,
                                           const std::vector<FollowerPosition>* c1 = nullptr,
                                           uint64_t s1 = 0) {
  std::vector<std::byte> image(4096);
  auto a = EncodeFetchPositionsCopy(c0, s0);
  REQUIRE(a);
  std::copy(a->begin(), a->end(), image.begin());
  if (c1 != nullptr) {
    auto b = EncodeFetchPositionsCopy(*c1, s1);
    REQUIRE(b);
    std::copy(b->begin(), b->end(), image.begin() + 2048);
  }
  return image;
}

// Byte `at` of `image` changed, and the copy's CRC made to match again (a
// hostile file, not a torn write).
std::vector<std::byte> Forged(std::vector<std::byte> image, size_t at, std::byte value) {
  image[at] = value;
  const size_t base = at < 2048 ? 0 : 2048;
  const uint32_t crc = Crc32c(std::span<const std::byte>(image).subspan(base, 2044));
  for (int i = 0; i < 4; ++i) image[base + 2044 + i] = std::byte(crc >> (24 - 8 * i));
  return image;
}

}  // namespace

TEST_CASE("R60 fetch positions: two copies, the whole one with the higher sequence is current") {
  const std::vector<FollowerPosition> older = {{0, 3, 120, 1000, 1000, 120}};
  const std::vector<FollowerPosition> newer = {{0, 3, 120, 1000, 1000, 120},
                                               {2, 3, 118, 990, 980, 119}};
  auto copy = EncodeFetchPositionsCopy(newer, 7);
  REQUIRE(copy);
  REQUIRE(copy->size() == 2048);
  // magic "MQFP", version 1, sequence 7, count 2, then replica 0 epoch 3 LEO 120.
  CHECK(std::vector<std::byte>(copy->begin(), copy->begin() + 36) ==
        std::vector<std::byte>{std::byte{'M'}, std::byte{'Q'}, std::byte{'F'}, std::byte{'P'},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{1},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{0},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{7},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{2},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{0},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{0},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{3},
                               std::byte{0},   std::byte{0},   std::byte{0},   std::byte{0}});
  // Either copy may be the current one.
  auto both = FetchPositionsImage(older, 6, &newer, 7);
  auto read = DecodeFetchPositions(both, "fetch-positions");
  REQUIRE(read);
  CHECK(read->positions == newer);
  CHECK(read->sequence == 7);
  CHECK(read->copy == 1);
  auto swapped = FetchPositionsImage(newer, 9, &older, 8);
  read = DecodeFetchPositions(swapped, "fetch-positions");
  REQUIRE(read);
  CHECK(read->positions == newer);
  CHECK(read->copy == 0);
  // A torn write of the newer copy (its CRC does not match): the older one.
  auto torn = both;
  torn[2048 + 30] ^= std::byte{0xff};
  read = DecodeFetchPositions(torn, "fetch-positions");
  REQUIRE(read);
  CHECK(read->positions == older);
  CHECK(read->sequence == 6);
  // As created: copy 1 never written (zeros).
  read = DecodeFetchPositions(FetchPositionsImage(older, 1), "fetch-positions");
  REQUIRE(read);
  CHECK(read->positions == older);
  // An empty file holds no entries.
  read = DecodeFetchPositions({}, "fetch-positions");
  REQUIRE(read);
  CHECK(read->positions.empty());
  CHECK(read->copy == -1);
  // More than 50 entries do not fit.
  CHECK(!EncodeFetchPositionsCopy(std::vector<FollowerPosition>(51, older[0]), 1));
}

TEST_CASE(
    "R60 fetch positions: a breach is corruption naming the file, the byte position and R60") {
  const std::vector<FollowerPosition> one = {{1, 3, 120, 1000, 1000, 120}};
  const std::vector<FollowerPosition> two = {{1, 3, 120, 1000, 1000, 120},
                                             {2, 3, 118, 990, 980, 119}};
  const auto good = FetchPositionsImage(one, 4, &two, 5);
  REQUIRE(DecodeFetchPositions(good, "f"));
  std::vector<std::byte> short_file(good.begin(), good.begin() + 100);
  std::vector<std::byte> neither = good;
  neither[10] ^= std::byte{1};
  neither[2048 + 10] ^= std::byte{1};
  struct Bad {
    std::vector<std::byte> bytes;
    uint64_t position;
  };
  for (const auto& [bytes, position] : std::vector<Bad>{
           {short_file, 100},                                       // not 4096 bytes
           {Forged(good, 2048 + 0, std::byte{'X'}), 2048},          // magic
           {Forged(good, 2048 + 7, std::byte{2}), 2048 + 4},        // version 2
           {Forged(good, 2048 + 19, std::byte{51}), 2048 + 16},     // 51 entries
           {Forged(good, 2048 + 24, std::byte{0x80}), 2048 + 24},   // negative replica
           {Forged(good, 2048 + 64 + 3, std::byte{1}), 2048 + 64},  // replica 1 twice
           {Forged(good, 2048 + 24 + 80 + 5, std::byte{1}),
            2048 + 24 + 80 + 5},                               // after the entries
           {Forged(good, 2048 + 15, std::byte{4}), 2048 + 8},  // both copies sequence 4
           {neither, 2044},                                    // neither CRC matches
       }) {
    INFO(position);
    auto r = DecodeFetchPositions(bytes, "dir/fetch-positions");
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(r.error().rule() == "R60");
    CHECK(r.error().file() == "dir/fetch-positions");
    CHECK(r.error().position() == position);
  }
}

TEST_CASE(
    "R60 fetch positions: the leader writes the copy that is not current, in place, and verify "
    "reports a breach") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  const std::string file = c.Dir(0) + "/fetch-positions";
  auto image = ReadFile(file);
  REQUIRE(image.size() == 4096);
  auto before = DecodeFetchPositions(image, file);
  REQUIRE(before);
  struct ::stat st0 {};
  REQUIRE(::stat(file.c_str(), &st0) == 0);
  // The next fetch (through a link without reports, R98: one write of the
  // positions): the other copy, sequence + 1; the current one kept.
  CountingLink fetch_only(DirectLeaderLink(c.ctx, c.logs[0].get()), false);
  REQUIRE(FollowerStep(c.ctx, *c.logs[2], fetch_only, c.follower_state[2]));
  auto after_bytes = ReadFile(file);
  auto after = DecodeFetchPositions(after_bytes, file);
  REQUIRE(after);
  CHECK(after->copy == 1 - before->copy);
  CHECK(after->sequence == before->sequence + 1);
  const size_t kept = static_cast<size_t>(before->copy) * 2048;
  CHECK(std::equal(image.begin() + kept, image.begin() + kept + 2048, after_bytes.begin() + kept));
  struct ::stat st1 {};
  REQUIRE(::stat(file.c_str(), &st1) == 0);
  CHECK(st1.st_ino == st0.st_ino);  // written in place, not replaced
  bool has2 = false;
  for (const FollowerPosition& f : after->positions) has2 = has2 || f.replica == 2;
  CHECK(has2);
  // A follower dies within the write: the new copy torn. The old is read,
  // and the next write goes over the torn copy again.
  auto torn = after_bytes;
  const size_t fresh = static_cast<size_t>(after->copy) * 2048;
  torn[fresh + 30] ^= std::byte{0x55};
  WriteFile(file, torn);
  auto positions = ReadReplicaPositions(c.Dir(0));
  REQUIRE(positions);
  CHECK(*positions == before->positions);
  REQUIRE(c.Step(1));
  auto healed = DecodeFetchPositions(ReadFile(file), file);
  REQUIRE(healed);
  CHECK(healed->copy == after->copy);
  CHECK(healed->sequence == before->sequence + 1);
  // Verify: whole, nothing to report; damaged, R60 at its position.
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(c.Dir(0), {}, &problems, OffsetPolicy::kGapsAllowed).ok());
  CHECK(problems.empty());
  WriteFile(file, std::vector<std::byte>(4000, std::byte{'x'}));
  REQUIRE(VerifyPartition(c.Dir(0), {}, &problems, OffsetPolicy::kGapsAllowed).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == file);
  CHECK(problems[0].rule == "R60");
  CHECK(problems[0].position == 4000);
  // And the leader's next fetch stops on it, before it reads or appends.
  auto step = c.Step(1);
  REQUIRE(!step);
  CHECK(step.error().code() == Code::kCorruption);
  CHECK(step.error().rule() == "R60");
}

TEST_CASE("replica lag: offsets and time behind the leader, as the ISR rule counts them") {
  Cluster c(3);
  c.Produce(4);  // 12 records
  c.CatchUp(1);
  c.CatchUp(2);
  const int64_t both_caught_up = c.clock.NowMs();
  c.clock.Advance(5'000);
  c.Produce(2);  // 18 records
  c.CatchUp(1);
  const int64_t one_caught_up = c.clock.NowMs();
  c.clock.Advance(3'000);
  auto positions = ReadReplicaPositions(c.Dir(0));
  REQUIRE(positions);
  const int64_t now = c.clock.NowMs();
  // The leader: no lag.
  CHECK(LagOf(0, 0, 0, 18, 18, *positions, now) == ReplicaLag{0, -1, 0, -1});
  // Replica 1 caught up 3 s ago; replica 2 holds 12 of 18, caught up 8 s ago.
  CHECK(LagOf(1, 0, 0, 18, c.Leo(1), *positions, now) ==
        ReplicaLag{0, one_caught_up, 3'000, one_caught_up});
  CHECK(LagOf(2, 0, 0, 18, c.Leo(2), *positions, now) ==
        ReplicaLag{6, both_caught_up, 8'000, both_caught_up});
  // A log end that cannot be read: no offset lag; the time lag still known.
  CHECK(LagOf(2, 0, 0, 18, -1, *positions, now).offsets == -1);
  CHECK(LagOf(2, 0, 0, -1, 12, *positions, now).ms == 8'000);
  // A follower ahead of the leader (a divergent tail) lags by 0, not less.
  CHECK(LagOf(2, 0, 0, 18, 20, *positions, now).offsets == 0);
  // In a later epoch the entries of epoch 0 no longer count: a follower
  // that has not fetched in it counts from when the leader began it; with
  // no entry of that epoch at all, the time lag is unknown.
  CHECK(LagOf(2, 0, 1, 18, 12, *positions, now) == ReplicaLag{6, -1, -1, -1});
  std::vector<FollowerPosition> began = *positions;
  UpsertPosition(&began, {0, 1, 18, now - 1'000, now - 1'000, 18});
  CHECK(LagOf(2, 0, 1, 18, 12, began, now) == ReplicaLag{6, now - 1'000, 1'000, -1});
  // The ISR rule agrees: replica 2, 8 s behind, leaves only past 8 s.
  CHECK(LastCaughtUpMs(*positions, 2, 0, 0) == both_caught_up);
  CHECK(LastCaughtUpMs(*positions, 2, 0, 7) == std::nullopt);
}

TEST_CASE("R58 follower stopped: two numbers, once, in the checkpoint layout") {
  const FollowerStop stop{1765000000123, 65};
  const std::string text = EncodeFollowerStop(stop);
  CHECK(text == "0\n1\n1765000000123 65\n");
  auto back = DecodeFollowerStop(text, "follower-stopped");
  REQUIRE(back);
  CHECK(*back == stop);
  struct Bad {
    const char* text;
    uint64_t position;
    const char* rule;
  };
  for (const Bad& bad : {Bad{"0\n1\n1765000000123\n", 17, "R35"},  // one field
                         Bad{"0\n2\n1 65\n2 65\n", 9, "R58"},      // two entries
                         Bad{"0\n1\n1 256\n", 6, "R58"},           // not an exit status
                         Bad{"0\n0\n", 4, "R58"}}) {               // no entry
    INFO(bad.text);
    auto r = DecodeFollowerStop(bad.text, "follower-stopped");
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(r.error().rule() == bad.rule);
    CHECK(r.error().position() == bad.position);
  }
  // Stored, read back, cleared; verify of the partition reads it.
  Cluster c(2);
  auto none = ReadFollowerStop(c.Dir(1));
  REQUIRE(none);
  CHECK(!*none);
  REQUIRE(RecordFollowerStop(c.Dir(1), stop).ok());
  auto read = ReadFollowerStop(c.Dir(1));
  REQUIRE(read);
  REQUIRE(*read);
  CHECK(**read == stop);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(c.Dir(1), {}, &problems, OffsetPolicy::kGapsAllowed, nullptr).ok());
  CHECK(problems.empty());
  WriteFile(c.Dir(1) + "/follower-stopped",
            std::vector<std::byte>{std::byte{'0'}, std::byte{'\n'}, std::byte{'1'}, std::byte{'\n'},
                                   std::byte{'x'}, std::byte{'\n'}});
  REQUIRE(VerifyPartition(c.Dir(1), {}, &problems, OffsetPolicy::kGapsAllowed, nullptr).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == c.Dir(1) + "/follower-stopped");
  REQUIRE(ClearFollowerStop(c.Dir(1)).ok());
  REQUIRE(ClearFollowerStop(c.Dir(1)).ok());  // none: no error
  none = ReadFollowerStop(c.Dir(1));
  REQUIRE(none);
  CHECK(!*none);
}

TEST_CASE("R58 a follower that cannot record its stop leaves the ISR itself") {
  Cluster c(3);
  const int32_t epoch = c.Part().partition_epoch;
  const Status why(Code::kPermission, c.Dir(2) + ": Permission denied");
  auto p = LeaveIsrStopped(c.store, "t", 0, 2, why);
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1});
  CHECK(c.Part().isr == std::vector<int32_t>{0, 1});
  CHECK(c.Part().partition_epoch == epoch + 1);
  CHECK(c.store.recent().back().find("replica 2 stopped following (R58): " + c.Dir(2) +
                                     ": Permission denied") != std::string::npos);
  // Out of the ISR already, or the leader: nothing changes.
  REQUIRE(LeaveIsrStopped(c.store, "t", 0, 2, why));
  REQUIRE(LeaveIsrStopped(c.store, "t", 0, 0, why));
  CHECK(c.Part().isr == std::vector<int32_t>{0, 1});
  CHECK(c.Part().partition_epoch == epoch + 1);
  CHECK(LeaveIsrStopped(c.store, "t", 7, 1, why).error().code() == Code::kNotFound);
}

TEST_CASE("R58 a follower known to have stopped leaves the ISR at once, the others by their lag") {
  Cluster c(3);
  c.Produce(3);
  c.CatchUp(1);
  c.CatchUp(2);
  c.clock.Advance(1'000);
  // Both caught up a second ago, far within replica.lag.time.max.ms.
  auto p = MaybeShrinkIsr(c.ctx, *c.logs[0], 0);
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1, 2});
  p = MaybeShrinkIsr(c.ctx, *c.logs[0], 0, {2});
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1});
  CHECK(c.store.recent().back().find("replica 2 stopped following (R58)") != std::string::npos);
  // One that is no longer in the ISR changes nothing; nor does the leader.
  const int32_t epoch = c.Part().partition_epoch;
  p = MaybeShrinkIsr(c.ctx, *c.logs[0], 0, {2, 0});
  REQUIRE(p);
  CHECK(p->isr == std::vector<int32_t>{0, 1});
  CHECK(c.Part().partition_epoch == epoch);
}

TEST_CASE(
    "replication: a replica that began an epoch and wrote nothing in it rejoins behind an older "
    "epoch") {
  Cluster c(3);
  c.Produce(4);
  // Replica 1 has only the first batch when replica 0 goes away.
  REQUIRE(c.Step(1, 1));
  REQUIRE(c.Step(1, 1));
  const int64_t behind = c.Leo(1);
  REQUIRE(behind < c.Leo(0));
  c.CatchUp(2);
  c.Elect([](int32_t id) { return id == 1; });
  REQUIRE(c.Part().leader == 1);
  // It begins epoch 1 at its log end, writes nothing, and goes away too.
  REQUIRE(c.logs[1]->BeginEpoch(1).ok());
  auto latest = c.logs[1]->LatestEpoch();
  REQUIRE(latest);
  REQUIRE(*latest == 1);
  c.store.state().Partition("t", 0)->isr = {0, 1, 2};  // as a controller would restore it
  c.Elect([](int32_t id) { return id == 0; });
  REQUIRE(c.Part().leader == 0);
  c.Produce(1);
  // Epoch 1 goes from its checkpoint; it then takes epoch 0's batches.
  c.CatchUp(1);
  CHECK(RawBatches(c.Dir(1)) == RawBatches(c.Dir(0)));
  latest = c.logs[1]->LatestEpoch();
  REQUIRE(latest);
  CHECK(*latest == 2);
}

TEST_CASE("replication: followers follow the leader's log start") {
  Cluster c(2);
  c.Produce(12, 5);  // several 700-byte segments
  c.CatchUp(1);
  auto list = ListDir(c.Dir(0));
  REQUIRE(std::count_if(list.begin(), list.end(), [](const std::string& n) {
            return n.size() > 4 && n.substr(n.size() - 4) == ".log";
          }) > 2);
  // Retention at the leader deletes whole segments below offset 30.
  {
    auto w = PartitionWriter::Open(c.Dir(0), Small(), false, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->DeleteSegmentsBefore(30).ok());
  }
  auto start = c.logs[0]->LogStartOffset();
  REQUIRE(start);
  REQUIRE(*start > 0);
  c.Produce(1);
  c.CatchUp(1);
  auto follower_start = c.logs[1]->LogStartOffset();
  REQUIRE(follower_start);
  CHECK(*follower_start == *start);
  CHECK(RawBatches(c.Dir(1)) == RawBatches(c.Dir(0)));
}

TEST_CASE("replication: after an unclean election the other replicas truncate to the new leader") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  // Replica 1 stops fetching; 0 and 2 go on, then both are lost.
  c.Produce(3);
  c.CatchUp(2);
  REQUIRE(c.Leo(1) < c.Leo(0));
  c.store.state().Partition("t", 0)->isr = {0, 2};  // 1 left the ISR meanwhile
  auto next = ElectLeader(c.Part(), ElectionKind::kUnclean, [](int32_t id) { return id == 1; });
  REQUIRE(next);
  REQUIRE(next->leader == 1);
  REQUIRE(c.store.AlterPartition(*next, "unclean"));
  const int64_t kept = c.Leo(1);
  c.Produce(1);
  // 0 and 2 come back: what 1 never had is cut, and they hold 1's log.
  c.store.state().Partition("t", 0)->isr = {1, 0, 2};
  c.store.state().Partition("t", 0)->partition_epoch++;
  for (int32_t r : {0, 2}) {
    auto first = c.Step(r);
    REQUIRE(first);
    CHECK(first->truncated_to == kept);
    c.CatchUp(r);
    CHECK(RawBatches(c.Dir(r)) == RawBatches(c.Dir(1)));
  }
}

// ---- R53-R55: a leader's claim on its epoch, and its host's restarts ----

namespace {

constexpr const char* kBootA = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
constexpr const char* kBootB = "11111111-2222-3333-4444-555555555555";

// Replica 0 leads epoch 0 on boot A with `batches` batches, which both
// followers hold: the HW is at the end.
void LeadAndReplicate(Cluster& c, int batches) {
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[0], c.Part()));
  c.Produce(batches);
  c.CatchUp(1);
  c.CatchUp(2);
  c.CatchUp(1);
  REQUIRE(c.Hw(0) == c.Leo(0));
}

// Replica 0's host loses power (--fsync none: its log keeps a prefix) and
// boots as boot B; every process starts again.
void PowerLossOfLeader(Cluster& c, int64_t keep) {
  REQUIRE(c.logs[0]->TruncateTo(keep).ok());
  for (int32_t id = 0; id < static_cast<int32_t>(c.roots.size()); ++id) c.Reopen(id);
  c.follower_state.clear();
}

}  // namespace

TEST_CASE("R53 leader claim: one entry, an epoch and a boot id of 32 lowercase hex digits") {
  LeaderClaim claim;
  claim.epoch = 7;
  for (size_t i = 0; i < claim.boot.size(); ++i) claim.boot[i] = static_cast<uint8_t>(0xa0 + i);
  const std::string text = EncodeLeaderClaim(claim);
  CHECK(text == "0\n1\n7 a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\n");
  auto back = DecodeLeaderClaim(text, "leader-claim");
  REQUIRE(back);
  CHECK(*back == claim);
  // The worked example of §17.9 (R53), byte for byte.
  LeaderClaim example{4, *ParseBootId(kBootA)};
  CHECK(EncodeLeaderClaim(example) == "0\n1\n4 0a1b2c3d4e5f60718293a4b5c6d7e8f9\n");
  auto parsed = DecodeLeaderClaim("0\n1\n4 0a1b2c3d4e5f60718293a4b5c6d7e8f9\n", "leader-claim");
  REQUIRE(parsed);
  CHECK(*parsed == example);
  auto rule = [](const std::string& bytes) {
    auto r = DecodeLeaderClaim(bytes, "leader-claim");
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    return std::string(r.error().rule());
  };
  CHECK(rule("0\n1\n7 A0A1A2A3A4A5A6A7A8A9AAABACADAEAF\n") == "R53");  // uppercase
  CHECK(rule("0\n1\n7 a0a1a2a3a4a5a6a7a8a9aaabacadaea\n") == "R53");   // 31 digits
  CHECK(rule("0\n1\n7 a0a1a2a3-4a5a6a7a8a9aaabacadaeaf\n") == "R53");  // a dash
  CHECK(rule("0\n1\n7 00000000000000000000000000000000\n") == "R53");  // unknown boot
  CHECK(rule("0\n1\n2147483648 a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\n") == "R53");
  CHECK(rule("0\n2\n7 a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\n8 a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\n") ==
        "R53");
  CHECK(rule("") == "R53");  // no entry
  CHECK(rule("0\n1\n7\n") == "R35");

  // A replica stores it (fsynced, R39) and reads it back.
  Cluster c(2);
  ScopedBootId boot(kBootA);
  auto none = c.logs[0]->LoadLeaderClaim();
  REQUIRE(none);
  CHECK(none->epoch == -1);
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[0], c.Part()));
  const auto bytes = ReadFile(c.Dir(0) + "/leader-claim");
  CHECK(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) ==
        "0\n1\n0 0a1b2c3d4e5f60718293a4b5c6d7e8f9\n");
}

TEST_CASE(
    "R54 claim before leading: a leader restarted on another boot neither appends nor serves in "
    "its epoch") {
  Cluster c(3);
  ScopedBootId boot(kBootA);
  LeadAndReplicate(c, 6);
  const int64_t full = c.Leo(1);
  // The same boot: a process restart keeps the claim (no change).
  c.Reopen(0);
  auto same = ClaimLeadership(c.ctx, *c.logs[0], c.Part());
  REQUIRE(same);
  CHECK(same->leader_epoch == 0);
  CHECK(c.Part().partition_epoch == 0);

  ScopedBootId reboot(kBootB);
  PowerLossOfLeader(c, 6);
  REQUIRE(c.Leo(0) < full);
  // The followers' fetches in epoch 0 are not served from the short log:
  // the replica gives the epoch up instead (R55).
  FetchRequest req;
  req.replica = 1;
  req.leader_epoch = 0;
  req.fetch_offset = full;
  auto f = HandleFetch(c.ctx, *c.logs[0], req);
  REQUIRE(!f);
  CHECK(f.error().code() == Code::kUnavailable);
  CHECK(c.Part().leader == -1);
  CHECK(c.Part().leader_epoch == 1);
  // Nothing of epoch 0 was served, and no claim of epoch 0 is taken again.
  auto offsets = HandleOffsetForLeaderEpoch(c.ctx, *c.logs[0], 0, 0);
  REQUIRE(!offsets);
  CHECK(offsets.error().code() == Code::kFenced);
  auto claim = c.logs[0]->LoadLeaderClaim();
  REQUIRE(claim);
  CHECK(claim->epoch == 1);

  // A claim above the cluster state's epoch is refused (kFenced).
  Cluster d(2);
  ScopedBootId again(kBootA);
  REQUIRE(d.logs[0]->StoreLeaderClaim({5, *ParseBootId(kBootA)}).ok());
  auto above = ClaimLeadership(d.ctx, *d.logs[0], d.Part());
  REQUIRE(!above);
  CHECK(above.error().code() == Code::kFenced);
}

namespace {

// Runs `hook` (once) before the rename that puts a staging file in place
// as `leader-claim`.
class ClaimRenameHookFs : public FileSystemWrapper {
 public:
  std::function<void()> hook;
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    if (to == "leader-claim" && hook) std::exchange(hook, nullptr)();
    return FileSystemWrapper::Rename(dir_fd, from, to);
  }
};

}  // namespace

TEST_CASE(
    "R54 claim before leading: two processes of one replica claiming at once store one after the "
    "other") {
  // mq-produce and mq-replicate --serve of one replica meet a new epoch
  // together: each ReplicaLog here is one of them.
  Cluster c(2);
  ScopedBootId boot(kBootA);
  ClaimRenameHookFs fs;
  LogConfig hooked = Small();
  hooked.fs = &fs;
  auto a = OpenReplicaLog(c.Dir(0), 0, hooked);
  REQUIRE(a);
  auto b = OpenReplicaLog(c.Dir(0), 0, Small());
  REQUIRE(b);
  const PartitionState p = c.Part();
  Result<PartitionState> b_claim = Status(Code::kInternal, "B never ran");
  std::atomic<bool> b_done{false};
  std::thread b_thread;
  // A's claim is written and about to be renamed when B claims: unlocked,
  // B's store replaces A's staging file and A's rename finds none.
  fs.hook = [&] {
    b_thread = std::thread([&] {
      b_claim = ClaimLeadership(c.ctx, **b, p);
      b_done = true;
    });
    for (int i = 0; i < 100 && !b_done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  auto a_claim = ClaimLeadership(c.ctx, **a, p);
  REQUIRE(b_thread.joinable());
  b_thread.join();
  REQUIRE(a_claim);
  REQUIRE(b_claim);
  CHECK(a_claim->leader_epoch == 0);
  CHECK(b_claim->leader_epoch == 0);
  const auto bytes = ReadFile(c.Dir(0) + "/leader-claim");
  CHECK(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) ==
        "0\n1\n0 0a1b2c3d4e5f60718293a4b5c6d7e8f9\n");
  CHECK(!std::filesystem::exists(c.Dir(0) + "/leader-claim.tmp"));
}

TEST_CASE(
    "R54 claim before leading: a process that read an older claim never stores a lower epoch") {
  Cluster c(2);
  ScopedBootId boot(kBootA);
  auto stale = OpenReplicaLog(c.Dir(0), 0, Small());
  REQUIRE(stale);
  // `stale` claims epoch 0 (and remembers it); another process of replica
  // 0 then claims epochs 1 and 2.
  REQUIRE(ClaimLeadership(c.ctx, **stale, c.Part()));
  const PartitionState epoch1 = [&] {
    PartitionState p = c.Part();
    p.leader_epoch = 1;
    auto done = c.store.AlterPartition(p, "epoch 1");
    REQUIRE(done);
    return *done;
  }();
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[0], epoch1));
  PartitionState p2 = epoch1;
  p2.leader_epoch = 2;
  auto epoch2 = c.store.AlterPartition(p2, "epoch 2");
  REQUIRE(epoch2);
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[0], *epoch2));
  // `stale` acts on epoch 1, read before epoch 2 began: fenced by the
  // stored claim, which stays on epoch 2.
  auto late = ClaimLeadership(c.ctx, **stale, epoch1);
  REQUIRE(!late);
  CHECK(late.error().code() == Code::kFenced);
  auto stored = c.logs[0]->ReadLeaderClaim();
  REQUIRE(stored);
  CHECK(stored->epoch == 2);
}

TEST_CASE(
    "R55 restarted leader with other ISR members: it leaves the ISR, an election keeps every "
    "acknowledged record") {
  Cluster c(3);
  ScopedBootId boot(kBootA);
  LeadAndReplicate(c, 6);
  const int64_t hw = c.Hw(1);
  const auto acked = RawBatches(c.Dir(1));
  ScopedBootId reboot(kBootB);
  PowerLossOfLeader(c, 3);
  // mq-produce's check before it appends.
  auto held = ClaimLeadership(c.ctx, *c.logs[0], c.Part());
  REQUIRE(!held);
  CHECK(held.error().code() == Code::kUnavailable);
  CHECK(held.error().message().find("mq-isr elect") != std::string::npos);
  const PartitionState p = c.Part();
  CHECK(p.leader == -1);
  CHECK(p.leader_epoch == 1);
  CHECK(p.isr == std::vector<int32_t>{1, 2});
  // A clean election cannot choose replica 0 (outside the ISR).
  c.Elect([](int32_t) { return true; });
  CHECK(c.Part().leader == 1);
  CHECK(c.Part().leader_epoch == 2);
  CHECK(c.Leo(1) == hw);
  // The new leader writes; replica 0 follows, and every log is the same.
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[1], c.Part()));
  c.Produce(2, 4);
  c.CatchUp(0);
  c.CatchUp(2);
  c.CatchUp(0);
  CHECK(RawBatches(c.Dir(0)) == RawBatches(c.Dir(1)));
  CHECK(RawBatches(c.Dir(2)) == RawBatches(c.Dir(1)));
  auto now = RawBatches(c.Dir(0));
  REQUIRE(now.size() >= acked.size());
  CHECK(std::equal(acked.begin(), acked.end(), now.begin()));
  // Back in the ISR once caught up (§17.5).
  CHECK(InIsr(c.Part(), 0));
}

TEST_CASE(
    "R55 restarted leader alone in the ISR: it leads on in a new epoch and followers cut what it "
    "lost") {
  Cluster c(3);
  ScopedBootId boot(kBootA);
  LeadAndReplicate(c, 6);
  // The followers left the ISR (they hold the whole log even so).
  PartitionState alone = c.Part();
  alone.isr = {0};
  REQUIRE(c.store.AlterPartition(alone, "shrink"));
  ScopedBootId reboot(kBootB);
  PowerLossOfLeader(c, 3);
  const int64_t kept = c.Leo(0);
  auto held = ClaimLeadership(c.ctx, *c.logs[0], c.Part());
  REQUIRE(held);
  CHECK(held->leader == 0);
  CHECK(held->leader_epoch == 1);
  CHECK(c.Part().leader_epoch == 1);
  // It writes other records in epoch 1, past what followers still hold.
  c.Produce(12, 2);
  REQUIRE(c.Leo(0) > c.Leo(1));
  auto r = c.Step(1);
  REQUIRE(r);
  CHECK(r->truncated_to == kept);
  c.CatchUp(1);
  c.CatchUp(2);
  CHECK(RawBatches(c.Dir(1)) == RawBatches(c.Dir(0)));
  CHECK(RawBatches(c.Dir(2)) == RawBatches(c.Dir(0)));
}

TEST_CASE("R55 a former leader restarted on another boot leaves the ISR before it fetches") {
  Cluster c(3);
  ScopedBootId boot(kBootA);
  LeadAndReplicate(c, 4);
  // Leadership moves to 1 with 0 still in the ISR (a preferred election).
  PartitionState moved = c.Part();
  moved.leader = 1;
  moved.leader_epoch = 1;
  REQUIRE(c.store.AlterPartition(moved, "preferred"));
  ScopedBootId reboot(kBootB);
  PowerLossOfLeader(c, 3);
  // Out of the ISR before it fetches; the report of what its fetch
  // brought (R98) may let it rejoin as any follower rejoins (§17.5).
  CountingLink link(DirectLeaderLink(c.ctx, c.logs[1].get()));
  bool out_at_report = false;
  link.before_report = [&] { out_at_report = !InIsr(c.Part(), 0); };
  auto r = FollowerStep(c.ctx, *c.logs[0], link, c.follower_state[0]);
  REQUIRE(r);
  CHECK(r->reported);
  CHECK(out_at_report);
  auto claim = c.logs[0]->LoadLeaderClaim();
  REQUIRE(claim);
  CHECK(claim->boot == *ParseBootId(kBootB));
  c.CatchUp(0);
  c.CatchUp(0);
  CHECK(InIsr(c.Part(), 0));
  CHECK(RawBatches(c.Dir(0)) == RawBatches(c.Dir(1)));
}

TEST_CASE("R53 leader claim: verify of a partition reads the file and reports a breach") {
  Cluster c(2);
  ScopedBootId boot(kBootA);
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[0], c.Part()));
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(c.Dir(0), {}, &problems, OffsetPolicy::kGapsAllowed, nullptr).ok());
  CHECK(problems.empty());
  const std::string bad = "0\n1\n0 00000000000000000000000000000000\n";
  WriteFile(c.Dir(0) + "/leader-claim",
            std::vector<std::byte>(reinterpret_cast<const std::byte*>(bad.data()),
                                   reinterpret_cast<const std::byte*>(bad.data()) + bad.size()));
  REQUIRE(VerifyPartition(c.Dir(0), {}, &problems, OffsetPolicy::kGapsAllowed, nullptr).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == c.Dir(0) + "/leader-claim");
  CHECK(problems[0].rule == "R53");
  CHECK(problems[0].position == 6);
}

TEST_CASE("R55 an election passes over a replica restarted since its claim (RestartedSinceClaim)") {
  Cluster c(3);
  ScopedBootId boot(kBootA);
  auto none = RestartedSinceClaim(c.Dir(1));
  REQUIRE(none);
  CHECK(!*none);  // no claim: it never led
  LeadAndReplicate(c, 2);
  auto same = RestartedSinceClaim(c.Dir(0));
  REQUIRE(same);
  CHECK(!*same);
  ScopedBootId reboot(kBootB);
  auto other = RestartedSinceClaim(c.Dir(0));
  REQUIRE(other);
  CHECK(*other);
  // As mq-isr elect applies it: replica 0 counts as unavailable.
  auto live = [&](int32_t id) {
    auto r = RestartedSinceClaim(c.Dir(id));
    REQUIRE(r);
    return !*r;
  };
  c.Elect(live);
  CHECK(c.Part().leader == 1);
  CHECK(!InIsr(c.Part(), 0));
}

// ---- a leader's read-ahead (ReplicaLog::ReadAhead) ----

namespace {

// The concatenated batches of `dir` from offset `from` (RawBatches' bytes).
std::vector<std::byte> BatchesFrom(const std::string& dir, int64_t from, size_t count) {
  std::vector<std::byte> out;
  for (const auto& b : RawBatches(dir)) {
    const int64_t base = static_cast<int64_t>(coding::GetFixed64(b.data()));
    if (base < from || count == 0) continue;
    out.insert(out.end(), b.begin(), b.end());
    --count;
  }
  return out;
}

}  // namespace

TEST_CASE("replication: a leader's read-ahead is served only while it is what a read gives") {
  Cluster c(2);
  c.Produce(10);  // 10 batches of 3 records, one size
  ReplicaLog& leader = *c.logs[0];
  const size_t batch = RawBatches(c.Dir(0)).front().size();
  const size_t max = 2 * batch;  // two batches a read
  std::vector<std::byte> got;

  SECTION("the next read is the prepared one: the bytes a read gives") {
    REQUIRE(leader.Read(0, max, &got).ok());
    REQUIRE(got == BatchesFrom(c.Dir(0), 0, 2));
    for (int64_t at = 6; at < 30; at += 6) {
      leader.ReadAhead(&got);
      REQUIRE(leader.Read(at, max, &got).ok());
      CHECK(got == BatchesFrom(c.Dir(0), at, 2));
    }
    // Another request than the one prepared is read afresh.
    leader.ReadAhead(&got);
    REQUIRE(leader.Read(3, max, &got).ok());
    CHECK(got == BatchesFrom(c.Dir(0), 3, 2));
    leader.ReadAhead(&got);
    REQUIRE(leader.Read(9, 3 * batch, &got).ok());
    CHECK(got == BatchesFrom(c.Dir(0), 9, 3));
    // The request prepared, into another buffer than the prepared one.
    leader.ReadAhead(&got);
    std::vector<std::byte> other;
    REQUIRE(leader.Read(18, 3 * batch, &other).ok());
    CHECK(other == BatchesFrom(c.Dir(0), 18, 3));
  }

  SECTION("a truncation between the read-ahead and the request is not served stale") {
    // Another process (a follower's mq-replicate after a failover) will
    // truncate the log and append other batches up to the same end.
    LogConfig cfg = Small();
    cfg.leader_epoch = 0;
    auto w = PartitionWriter::Open(c.Dir(0), cfg, false, nullptr);
    REQUIRE(w);
    REQUIRE(leader.Read(0, max, &got).ok());
    leader.ReadAhead(&got);  // prepares offsets 6-11
    const auto stale = BatchesFrom(c.Dir(0), 6, 2);
    REQUIRE((*w)->TruncateTo(6).ok());
    for (int i = 0; i < 8; ++i) {
      auto b = MakeBatch(3, 5000 + i, 20);
      REQUIRE((*w)->Append(b));
    }
    REQUIRE(c.Leo(0) == 30);
    const auto now = BatchesFrom(c.Dir(0), 6, 2);
    REQUIRE(now != stale);
    REQUIRE(leader.Read(6, max, &got).ok());
    CHECK(got == now);
  }

  SECTION("a truncation below the prepared bytes is not served stale") {
    REQUIRE(leader.Read(0, max, &got).ok());
    leader.ReadAhead(&got);
    {
      LogConfig cfg = Small();
      auto w = PartitionWriter::Open(c.Dir(0), cfg, false, nullptr);
      REQUIRE(w);
      REQUIRE((*w)->TruncateTo(9).ok());
    }
    REQUIRE(leader.Read(6, max, &got).ok());
    CHECK(got == BatchesFrom(c.Dir(0), 6, 1));
  }
}

// The `file.size` bytes `file` names.
static std::vector<std::byte> FileContents(const FileBytes& file) {
  std::vector<std::byte> out(file.size);
  REQUIRE(pread(file.fd, out.data(), out.size(), static_cast<off_t>(file.position)) ==
          static_cast<ssize_t>(out.size()));
  return out;
}

TEST_CASE(
    "replication: a leader's read in place leaves the batches in their segment file, and stops at "
    "its end") {
  Cluster c(2);
  c.Produce(40);  // segments of 700 bytes: a few batches each
  ReplicaLog& leader = *c.logs[0];
  const size_t batch = RawBatches(c.Dir(0)).front().size();
  const size_t max = 6 * batch;  // more than a segment holds (4 batches)
  const int64_t leo = c.Leo(0);
  std::vector<std::byte> buffer, copied;
  int stopped_at_segment_end = 0;
  for (int64_t at = 0; at < leo;) {
    FileBytes file;
    uint32_t crc = 0;
    REQUIRE(leader.ReadInPlace(at, max, &buffer, &crc, &file).ok());
    REQUIRE(file.size > 0);
    CHECK(buffer.empty());
    const auto bytes = FileContents(file);
    // What a copying read gives, cut at the segment's end.
    REQUIRE(leader.Read(at, max, &copied).ok());
    REQUIRE(bytes.size() <= copied.size());
    CHECK(std::equal(bytes.begin(), bytes.end(), copied.begin()));
    CHECK(crc == Crc32c(bytes));
    if (bytes.size() < copied.size()) ++stopped_at_segment_end;
    // Whole batches: the next read starts after the last one.
    size_t n = 0;
    for (const auto& b : RawBatches(c.Dir(0))) {
      const int64_t base = static_cast<int64_t>(coding::GetFixed64(b.data()));
      if (base >= at && n < bytes.size()) n += b.size();
    }
    REQUIRE(n == bytes.size());
    at += static_cast<int64_t>(bytes.size() / batch) * 3;
  }
  CHECK(stopped_at_segment_end > 0);

  SECTION("a read ahead in place is what a read in place gives next") {
    FileBytes file;
    REQUIRE(leader.ReadInPlace(0, 2 * batch, &buffer, nullptr, &file).ok());
    REQUIRE(file.size == 2 * batch);
    for (int64_t at = 6; at < 30; at += 6) {
      leader.ReadAhead(&buffer);
      uint32_t crc = 0;
      REQUIRE(leader.ReadInPlace(at, 2 * batch, &buffer, &crc, &file).ok());
      const auto bytes = FileContents(file);
      REQUIRE(leader.Read(at, 2 * batch, &copied).ok());
      CHECK(bytes ==
            std::vector<std::byte>(copied.begin(),
                                   copied.begin() + static_cast<std::ptrdiff_t>(bytes.size())));
      CHECK(crc == Crc32c(bytes));
      // Read (copying) dropped the preparation; prepare again in place.
      REQUIRE(leader.ReadInPlace(at, 2 * batch, &buffer, nullptr, &file).ok());
    }
  }

  SECTION("a truncation after the read in place: the next read reopens the file it read") {
    FileBytes file;
    REQUIRE(leader.ReadInPlace(0, 2 * batch, &buffer, nullptr, &file).ok());
    {
      LogConfig cfg = Small();
      cfg.leader_epoch = 0;
      auto w = PartitionWriter::Open(c.Dir(0), cfg, false, nullptr);
      REQUIRE(w);
      REQUIRE((*w)->TruncateTo(0).ok());
      for (int i = 0; i < 4; ++i) {
        auto b = MakeBatch(3, 7000 + i, 20);
        REQUIRE((*w)->Append(b));
      }
    }
    uint32_t crc = 0;
    REQUIRE(leader.ReadInPlace(0, 2 * batch, &buffer, &crc, &file).ok());
    const auto bytes = FileContents(file);
    CHECK(bytes == BatchesFrom(c.Dir(0), 0, 2));
    CHECK(crc == Crc32c(bytes));
  }
}

namespace {

// Counts the offset index files opened through the seam (each seek of a
// reader maps one).
class IndexCountingFs : public FileSystemWrapper {
 public:
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (name.ends_with(".index")) ++index_opens;
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  int index_opens = 0;
};

// What a read of `dir` by a log opened for it alone gives (its reader
// seeks): the bytes (from the file when in place) and their CRC.
std::pair<std::vector<std::byte>, uint32_t> SoughtRead(const std::string& dir, int64_t at,
                                                       size_t max, bool in_place) {
  auto log = OpenReplicaLog(dir, 0, Small());
  REQUIRE(log);
  std::vector<std::byte> buffer;
  FileBytes file;
  uint32_t crc = 0;
  if (in_place) {
    REQUIRE((*log)->ReadInPlace(at, max, &buffer, &crc, &file).ok());
    if (file.size > 0) buffer = FileContents(file);
  } else {
    REQUIRE((*log)->Read(at, max, &buffer, &crc).ok());
  }
  return {buffer, crc};
}

// The offset after the last of the whole batches `bytes`.
int64_t NextOffset(const std::vector<std::byte>& bytes, int64_t at) {
  for (size_t p = 0; p + 61 <= bytes.size();) {
    const BatchHeader h = DecodeBatchHeader(Bytes(bytes).subspan(p));
    at = h.last_offset() + 1;
    p += static_cast<size_t>(h.size_bytes());
  }
  return at;
}

}  // namespace

TEST_CASE("R99 a leader's read that goes on where the last one stopped reads on without seeking") {
  Cluster c(2);
  c.Produce(40);  // segments of 700 bytes: a few batches each
  // The leader's producer, open before the reads (a writer's open counts
  // as a rewrite, segment.md §9.2: the reader then seeks).
  LogConfig wc = Small();
  wc.leader_epoch = 0;
  auto producer = PartitionWriter::Open(c.Dir(0), wc, false, nullptr);
  REQUIRE(producer);
  IndexCountingFs fs;
  LogConfig cfg = Small();
  cfg.fs = &fs;
  auto opened = OpenReplicaLog(c.Dir(0), 0, cfg);
  REQUIRE(opened);
  ReplicaLog& leader = **opened;
  const size_t batch = RawBatches(c.Dir(0)).front().size();
  const size_t max = 2 * batch + batch / 2;  // each read stops before a batch it returned
  const bool in_place = GENERATE(false, true);
  CAPTURE(in_place);
  std::vector<std::byte> buffer;
  auto read = [&](int64_t at) {
    FileBytes file;
    uint32_t crc = 0;
    if (in_place) {
      REQUIRE(leader.ReadInPlace(at, max, &buffer, &crc, &file).ok());
      return std::make_pair(file.size > 0 ? FileContents(file) : std::vector<std::byte>(), crc);
    }
    REQUIRE(leader.Read(at, max, &buffer, &crc).ok());
    return std::make_pair(buffer, crc);
  };
  const int64_t leo = c.Leo(0);
  std::vector<std::pair<int64_t, std::pair<std::vector<std::byte>, uint32_t>>> reads;
  reads.push_back({0, read(0)});
  const int sought = fs.index_opens;
  REQUIRE(sought > 0);
  for (int64_t at = NextOffset(reads.back().second.first, 0); at < leo;) {
    reads.push_back({at, read(at)});
    REQUIRE(!reads.back().second.first.empty());
    at = NextOffset(reads.back().second.first, at);
  }
  CHECK(reads.size() > 10);
  CHECK(fs.index_opens == sought);  // not one seek more
  const int64_t end = NextOffset(reads.back().second.first, reads.back().first);

  SECTION("each read is what a read that seeks gives") {
    for (const auto& [at, got] : reads) CHECK(got == SoughtRead(c.Dir(0), at, max, in_place));
  }

  SECTION("at the log end it reads on what was appended since") {
    CHECK(read(end).first.empty());
    for (int i = 0; i < 3; ++i) {
      auto b = MakeBatch(3, 8000 + i, 20);
      REQUIRE((*producer)->Append(b));
    }
    auto got = read(end);
    CHECK(!got.first.empty());
    CHECK(fs.index_opens == sought);
    CHECK(got == SoughtRead(c.Dir(0), end, max, in_place));
  }

  SECTION("another offset, or a truncation since, seeks again") {
    auto got = read(3);
    CHECK(fs.index_opens > sought);
    CHECK(got == SoughtRead(c.Dir(0), 3, max, in_place));
    const int64_t at = NextOffset(got.first, 3);
    producer->reset();
    {
      auto writer = PartitionWriter::Open(c.Dir(0), wc, false, nullptr);
      REQUIRE(writer);
      REQUIRE((*writer)->TruncateTo(at).ok());
      for (int i = 0; i < 4; ++i) {
        auto b = MakeBatch(3, 9000 + i, 20);
        REQUIRE((*writer)->Append(b));
      }
    }
    got = read(at);
    CHECK(got == SoughtRead(c.Dir(0), at, max, in_place));
    CHECK(got.first == BatchesFrom(c.Dir(0), at, got.first.size() / batch));
  }
}

TEST_CASE(
    "R37 R38 R47 a replica's log is opened only with checkpoints that hold what its log implies") {
  Cluster c(2);
  c.Produce(4);  // offsets 0..11 in epoch 0
  c.CatchUp(1);
  c.CatchUp(1);
  REQUIRE(UpdateHighWatermark(c.ctx, *c.logs[0], 0));
  c.logs.clear();
  const std::string dir = c.Dir(1);
  const auto log_bytes = ReadFile(dir + "/00000000000000000000.log");
  const auto epochs = ReadFile(dir + "/leader-epoch-checkpoint");
  const auto hw = ReadFile(dir + "/high-watermark");
  auto bytes = [](const std::string& text) {
    std::vector<std::byte> out;
    for (char ch : text) out.push_back(static_cast<std::byte>(ch));
    return out;
  };
  struct Case {
    const char* file;
    std::string text;
    const char* rule;
  };
  // R61: a high watermark above the log end, in place of the replica's.
  std::string above(1024, '\0');
  {
    auto copy = EncodeHighWatermarkCopy({"t", 0, 1000}, 1);
    REQUIRE(copy);
    std::memcpy(above.data(), copy->data(), copy->size());
  }
  for (const Case& k : std::vector<Case>{
           {"high-watermark", above, "R38"},
           {"high-watermark", "garbage", "R61"},
           // An older mq's checkpoint, read while high-watermark is missing.
           {"replication-offset-checkpoint", "0\n1\nt 0 1000\n", "R38"},
           {"replication-offset-checkpoint", "garbage", "R35"},
           {"fetch-positions", "0\n2\n1 2 3\n", "R60"},
           {"leader-epoch-checkpoint", "0\n2\n0 0\n9 9\n", "R37"},  // epoch 9 inside the log
           {"leader-epoch-checkpoint", "0\n0\n", "R37"},            // the log's epoch 0 missing
       }) {
    INFO(k.file << ": " << k.text);
    WriteFile(dir + "/leader-epoch-checkpoint", epochs);
    WriteFile(dir + "/high-watermark", hw);
    ::unlink((dir + "/replication-offset-checkpoint").c_str());
    ::unlink((dir + "/fetch-positions").c_str());
    if (std::string_view(k.file) == "replication-offset-checkpoint")
      ::unlink((dir + "/high-watermark").c_str());
    WriteFile(dir + "/" + k.file, bytes(k.text));
    auto log = OpenReplicaLog(dir, 1, Small());
    REQUIRE(!log);
    CHECK(log.error().code() == Code::kCorruption);
    CHECK(log.error().rule() == k.rule);
    CHECK(log.error().file() == dir + "/" + k.file);
    CHECK(ReadFile(dir + "/00000000000000000000.log") == log_bytes);
  }
  // As the replica wrote them, it opens.
  WriteFile(dir + "/leader-epoch-checkpoint", epochs);
  ::unlink((dir + "/replication-offset-checkpoint").c_str());
  WriteFile(dir + "/high-watermark", hw);
  REQUIRE(OpenReplicaLog(dir, 1, Small()));
}

TEST_CASE(
    "replication: a replica whose log fails verification cannot lead, and the cut that repairs "
    "it") {
  Cluster c(2);
  c.Produce(6);  // six batches of 3: offsets 0..17
  c.CatchUp(1);
  c.logs.clear();
  const std::string dir = c.Dir(1);
  CHECK(VerifyForLeadership(dir).ok());
  auto none = FindLogDamage(dir);
  REQUIRE(none);
  CHECK(!*none);
  // A bit flipped inside the fourth batch (offsets 9..11).
  const std::string log = dir + "/00000000000000000000.log";
  auto bytes = ReadFile(log);
  const auto batches = RawBatches(dir);
  REQUIRE(batches.size() == 6);
  const size_t fourth = batches[0].size() + batches[1].size() + batches[2].size();
  bytes[fourth + batches[3].size() - 2] ^= std::byte{0x40};
  WriteFile(log, bytes);
  Status s = VerifyForLeadership(dir);
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.rule() == "R4");
  CHECK(s.file() == log);
  CHECK(s.position() == fourth);
  auto damage = FindLogDamage(dir);
  REQUIRE(damage);
  REQUIRE(*damage);
  CHECK((*damage)->valid_end == 9);
  CHECK((*damage)->corruption.position() == fourth);
  // The cut, then the leader's batches again: byte for byte the leader's log.
  {
    auto w = PartitionWriter::Open(dir, Small(), false, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->TruncateTo((*damage)->valid_end).ok());
  }
  c.Reopen(0);
  c.Reopen(1);
  c.CatchUp(1);
  CHECK(RawBatches(dir) == RawBatches(c.Dir(0)));
  CHECK(VerifyForLeadership(dir).ok());
}

namespace {

// Where the batch holding `offset` lives in the partition at `dir`.
LogPosition BatchAt(const std::string& dir, int64_t offset) {
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  REQUIRE((*r)->Seek(offset).ok());
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  LogPosition at = (*r)->position();
  if (at.file.empty() || at.file[0] != '/') at.file = dir + "/" + at.file;
  return at;
}

// Rewrites the batch holding `offset` in the partition at `dir` with `edit`
// (given the batch's bytes), then its CRC (R4) so that it still verifies:
// a forged batch only a comparison with another replica can tell.
void ForgeBatch(const std::string& dir, int64_t offset,
                const std::function<void(std::span<std::byte>)>& edit, bool fix_crc = true) {
  const LogPosition at = BatchAt(dir, offset);
  auto bytes = ReadFile(at.file);
  auto header = DecodeBatchHeader(std::span<const std::byte>(bytes).subspan(at.position));
  std::span<std::byte> batch(bytes.data() + at.position, header.size_bytes());
  edit(batch);
  if (fix_crc) {
    const uint32_t crc = Crc32c(batch.subspan(21));
    for (int i = 0; i < 4; ++i) batch[17 + i] = std::byte(crc >> (24 - 8 * i));
  }
  WriteFile(at.file, bytes);
}

std::vector<ReplicaDir> DirsOf(const Cluster& c, int n) {
  std::vector<ReplicaDir> out;
  for (int32_t i = 0; i < n; ++i) out.push_back({i, c.Dir(i)});
  return out;
}

// Three replicas holding the leader's 8 batches (offsets 0..23), HW 24.
void Replicated(Cluster& c) {
  c.Produce(8);
  c.CatchUp(1);
  c.CatchUp(2);
  c.CatchUp(1);
  c.CatchUp(2);
  REQUIRE(c.Hw(0) == 24);
  c.logs.clear();
}

}  // namespace

TEST_CASE(
    "R57 replica agreement: replicas holding the leader's batches agree up to the high watermark") {
  Cluster c(3);
  Replicated(c);
  auto cmp = CompareReplicas(DirsOf(c, 3), 0);
  REQUIRE(cmp);
  CHECK(FirstDivergence(*cmp).ok());
  CHECK(cmp->reference == 0);
  CHECK(cmp->high_watermark == 24);
  REQUIRE(cmp->replicas.size() == 3);
  for (const ReplicaAgreement& a : cmp->replicas) {
    INFO("replica " << a.id);
    CHECK(a.status.ok());
    CHECK(a.batches == 8);
    CHECK(a.compared_to == 24);
    CHECK(!a.behind);
  }
  // Any replica may be the reference: the one given is listed first.
  auto from2 = CompareReplicas(DirsOf(c, 3), 2);
  REQUIRE(from2);
  CHECK(from2->replicas[0].id == 2);
  CHECK(FirstDivergence(*from2).ok());
}

TEST_CASE(
    "R57 replica agreement: a follower whose batch holds other bytes under a valid CRC diverges, "
    "naming both replicas' files and positions") {
  Cluster c(3);
  Replicated(c);
  // The last value byte of the batch at offsets 12..14, its CRC recomputed:
  // the follower's log verifies on its own.
  ForgeBatch(c.Dir(1), 12, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; });
  REQUIRE(VerifyForLeadership(c.Dir(1)).ok());
  const LogPosition forged = BatchAt(c.Dir(1), 12);
  const LogPosition leader = BatchAt(c.Dir(0), 12);
  auto cmp = CompareReplicas(DirsOf(c, 3), 0);
  REQUIRE(cmp);
  const Status s = FirstDivergence(*cmp);
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.rule() == "R57");
  CHECK(s.file() == forged.file);
  CHECK(s.position() == forged.position);
  const std::string m = s.message();
  CHECK(m.find("replica 1 (root " + c.roots[1] + ") diverges from replica 0 (root " + c.roots[0] +
               ")") != std::string::npos);
  CHECK(m.find("at offset 12: the CRC differs") != std::string::npos);
  CHECK(m.find(fmt::format("{}: position {}", leader.file, leader.position)) != std::string::npos);
  CHECK(cmp->replicas[1].batches == 4);  // 0..11 agreed
  CHECK(cmp->replicas[2].status.ok());   // replica 2 holds the leader's batches
  CHECK(cmp->replicas[2].batches == 8);
}

TEST_CASE(
    "R57 replica agreement: a follower whose batch carries another partition leader epoch "
    "diverges") {
  Cluster c(2);
  c.Produce(4);
  c.CatchUp(1);
  c.CatchUp(1);
  c.logs.clear();
  // partitionLeaderEpoch (bytes 12..15) lies outside the CRC: still valid.
  ForgeBatch(
      c.Dir(1), 6, [](std::span<std::byte> b) { b[15] = std::byte{7}; }, false);
  auto cmp = CompareReplicas(DirsOf(c, 2), 0);
  REQUIRE(cmp);
  const Status s = FirstDivergence(*cmp);
  CHECK(s.rule() == "R57");
  CHECK(s.message().find("at offset 6: the partition leader epoch differs: it holds batch 6-8 of "
                         "leader epoch 7") != std::string::npos);
}

TEST_CASE(
    "R57 replica agreement: a follower whose log ends below the high watermark is behind, compared "
    "up to its log end") {
  Cluster c(3);
  Replicated(c);
  {
    auto w = PartitionWriter::Open(c.Dir(2), Small(), false, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->TruncateTo(9).ok());
  }
  auto cmp = CompareReplicas(DirsOf(c, 3), 0);
  REQUIRE(cmp);
  CHECK(FirstDivergence(*cmp).ok());
  const ReplicaAgreement& behind = cmp->replicas[2];
  CHECK(behind.status.ok());
  CHECK(behind.behind);
  CHECK(behind.log_end_offset == 9);
  CHECK(behind.compared_to == 9);
  CHECK(behind.batches == 3);
  CHECK(!cmp->replicas[1].behind);
  // Behind and divergent below its log end: the divergence is reported.
  ForgeBatch(c.Dir(2), 3, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; });
  auto again = CompareReplicas(DirsOf(c, 3), 0);
  REQUIRE(again);
  CHECK(FirstDivergence(*again).rule() == "R57");
  CHECK(again->replicas[2].status.rule() == "R57");
}

TEST_CASE(
    "R57 replica agreement: corruption in a follower's log is reported as its own rule, in the "
    "leader's it fails the comparison") {
  Cluster c(3);
  Replicated(c);
  const LogPosition damaged = BatchAt(c.Dir(1), 15);
  ForgeBatch(
      c.Dir(1), 15, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; }, false);
  auto cmp = CompareReplicas(DirsOf(c, 3), 0);
  REQUIRE(cmp);
  const Status s = FirstDivergence(*cmp);
  CHECK(s.rule() == "R4");
  CHECK(s.file() == damaged.file);
  CHECK(s.position() == damaged.position);
  // The same log as the reference: the comparison fails as a whole.
  auto ref = CompareReplicas(DirsOf(c, 3), 1);
  REQUIRE(!ref);
  CHECK(ref.error().rule() == "R4");
}

TEST_CASE(
    "replication: an in-sync follower whose log fails verification leaves the ISR, the leader "
    "stays") {
  Cluster c(3);
  Replicated(c);
  ForgeBatch(
      c.Dir(1), 15, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; }, false);
  std::map<int32_t, Status> damaged;
  for (int32_t id : {0, 1, 2})
    if (Status s = VerifyForLeadership(c.Dir(id)); !s.ok()) damaged.emplace(id, s);
  REQUIRE(damaged.size() == 1);
  REQUIRE(damaged.count(1) == 1);
  damaged.emplace(0, Status::Corruption(c.Dir(0) + "/x.log", 7, "R4", "planted"));
  const PartitionState before = c.Part();
  auto after = ShrinkIsrOfDamaged(c.store, before, damaged);
  REQUIRE(after);
  CHECK(after->isr == std::vector<int32_t>{0, 2});  // the leader stays, damaged or not
  CHECK(after->leader == 0);
  CHECK(after->partition_epoch == before.partition_epoch + 1);
  const std::string& why = c.store.recent().back();
  CHECK(why.find("shrink: replica 1 fails verification (" + damaged.at(1).message() + ")") !=
        std::string::npos);
  // Decided on a state that moved meanwhile: fenced, nothing changed.
  auto stale = ShrinkIsrOfDamaged(c.store, before, damaged);
  REQUIRE(!stale);
  CHECK(stale.error().code() == Code::kFenced);
  CHECK(c.Part().isr == std::vector<int32_t>{0, 2});
  // No in-sync follower damaged: no change.
  auto none = ShrinkIsrOfDamaged(c.store, c.Part(), {});
  REQUIRE(none);
  CHECK(none->partition_epoch == before.partition_epoch + 1);
}

TEST_CASE("R57 replica agreement: with no high watermark stored nothing is compared") {
  Cluster c(2);
  c.Produce(2);  // no follower fetched: the leader stores no HW yet
  c.logs.clear();
  ::unlink((c.Dir(0) + "/high-watermark").c_str());
  auto cmp = CompareReplicas(DirsOf(c, 2), 0);
  REQUIRE(cmp);
  CHECK(cmp->high_watermark == -1);
  CHECK(cmp->replicas[1].compared_to == 0);
  CHECK(cmp->replicas[1].batches == 0);
  CHECK(FirstDivergence(*cmp).ok());
}

namespace {

// Replica roots on "other hosts": each a server thread answering ReadLog
// and ReplicaCheck (R63) over pipes for the root it is given, as `mq-replicate --serve`
// does, and the clients reaching them.
class ReadLogServers {
 public:
  ~ReadLogServers() {
    clients_.clear();  // their connections close: the servers end
    for (auto& t : threads_) t.join();
  }
  std::shared_ptr<wire::Client> ClientOf(const std::string& root) {
    auto connect = [this, root]() -> Result<std::unique_ptr<wire::Connection>> {
      int a[2], b[2];
      REQUIRE(pipe2(a, O_CLOEXEC) == 0);
      REQUIRE(pipe2(b, O_CLOEXEC) == 0);
      threads_.emplace_back([root, in = a[0], out = b[1]] {
        std::map<std::string, std::unique_ptr<LogChunkReader>> readers;
        wire::Handlers h;
        h.read_log = [&](const wire::ReadLogMessage& m) -> Result<LogChunk> {
          const std::string dir = fmt::format("{}/{}-{}", root, m.topic, m.partition);
          auto& r = readers[dir];
          if (!r) {
            auto source = OpenLocalReplica(dir);
            if (!source) return source.error();
            r = std::make_unique<LogChunkReader>(std::move(*source));
          }
          return r->Read(m.offset, m.max_bytes);
        };
        h.replica_check = [&](const wire::ReplicaCheckMessage& m) {
          return wire::CheckReplica(fmt::format("{}/{}-{}", root, m.topic, m.partition), m.verify);
        };
        (void)wire::Serve(in, out, h, wire::ServeOptions{});
        close(in);
        close(out);
      });
      return wire::Connection::Adopt(a[1], b[0]);
    };
    clients_.push_back(std::make_shared<wire::Client>(connect, "h:" + root));
    return clients_.back();
  }

 private:
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<wire::Client>> clients_;
};

// The replicas of `c`, those in `remote` read through `servers` and named
// with host "h<id>".
std::vector<ReplicaToCompare> LogsOf(const Cluster& c, int n, ReadLogServers& servers,
                                     const std::set<int32_t>& remote) {
  std::vector<ReplicaToCompare> out(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    ReplicaToCompare& r = out[static_cast<size_t>(i)];
    r.id = i;
    r.dir = remote.count(i) ? fmt::format("h{}:{}", i, c.Dir(i)) : c.Dir(i);
    auto source = remote.count(i)
                      ? wire::OpenRemoteReplica(servers.ClientOf(c.roots[static_cast<size_t>(i)]),
                                                "t", 0, r.dir)
                      : OpenLocalReplica(c.Dir(i));
    REQUIRE(source);
    r.source = std::move(*source);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "R63 ReadLog: replicas on other hosts are compared as on this one, their files named with "
    "their host") {
  Cluster c(3);
  Replicated(c);
  ReadLogServers servers;
  {
    auto logs = LogsOf(c, 3, servers, {1, 2});
    auto cmp = CompareReplicaLogs(logs, 0);
    REQUIRE(cmp);
    CHECK(FirstDivergence(*cmp).ok());
    CHECK(cmp->high_watermark == 24);
    for (const ReplicaAgreement& a : cmp->replicas) CHECK(a.batches == 8);
  }
  ForgeBatch(c.Dir(1), 12, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; });
  const LogPosition forged = BatchAt(c.Dir(1), 12);
  const LogPosition leader = BatchAt(c.Dir(0), 12);
  SECTION("a follower on another host diverges") {
    auto logs = LogsOf(c, 3, servers, {1, 2});
    auto cmp = CompareReplicaLogs(logs, 0);
    REQUIRE(cmp);
    const Status s = FirstDivergence(*cmp);
    CHECK(s.rule() == "R57");
    CHECK(s.file() == "h1:" + forged.file);
    CHECK(s.position() == forged.position);
    CHECK(s.message().find("replica 1 (root h1:" + c.roots[1] + ") diverges from replica 0") !=
          std::string::npos);
    CHECK(cmp->replicas[1].batches == 4);
    CHECK(cmp->replicas[2].status.ok());
    CHECK(cmp->replicas[2].batches == 8);
  }
  SECTION("the leader on another host is the reference, its high watermark read there") {
    auto logs = LogsOf(c, 3, servers, {0, 1});
    auto cmp = CompareReplicaLogs(logs, 0);
    REQUIRE(cmp);
    CHECK(cmp->high_watermark == 24);
    const Status s = FirstDivergence(*cmp);
    CHECK(s.rule() == "R57");
    CHECK(s.file() == "h1:" + forged.file);
    CHECK(s.message().find(fmt::format("h0:{}: position {}", leader.file, leader.position)) !=
          std::string::npos);
  }
}

TEST_CASE(
    "R63 ReadLog: corruption in a log on another host names its host's file, position and rule") {
  Cluster c(3);
  Replicated(c);
  const LogPosition damaged = BatchAt(c.Dir(1), 15);
  ForgeBatch(
      c.Dir(1), 15, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; }, false);
  ReadLogServers servers;
  auto logs = LogsOf(c, 3, servers, {1});
  auto cmp = CompareReplicaLogs(logs, 0);
  REQUIRE(cmp);
  const Status s = FirstDivergence(*cmp);
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.rule() == "R4");
  CHECK(s.file() == "h1:" + damaged.file);
  CHECK(s.position() == damaged.position);
  CHECK(cmp->replicas[2].batches == 8);
}

TEST_CASE(
    "R63 ReadLog: whole batches of one segment file, at most max bytes but at least one, read on "
    "from where the last read stopped") {
  Cluster c(2);
  c.Produce(8);
  c.logs.clear();
  auto source = OpenLocalReplica(c.Dir(0));
  REQUIRE(source);
  LogChunkReader reader(std::move(*source));
  auto bounds = reader.Read(-1, 0);
  REQUIRE(bounds);
  CHECK(bounds->batches.empty());
  CHECK(bounds->log_end_offset == 24);
  auto name = [](const std::string& path) { return path.substr(path.find_last_of('/') + 1); };
  // One byte at most: one batch per read, each where the last ended.
  int64_t offset = 0;
  std::set<std::string> files;
  for (int i = 0; i < 8; ++i) {
    auto chunk = reader.Read(offset, 1);
    REQUIRE(chunk);
    REQUIRE(chunk->stop.ok());
    const BatchHeader h = DecodeBatchHeader(chunk->batches);
    const LogPosition at = BatchAt(c.Dir(0), offset);
    CHECK(chunk->batches.size() == h.size_bytes());
    CHECK(h.base_offset == offset);
    CHECK(chunk->file == name(at.file));
    CHECK(chunk->position == at.position);
    files.insert(chunk->file);
    offset = h.last_offset() + 1;
  }
  REQUIRE(files.size() > 1);  // the log spans segment files
  auto end = reader.Read(offset, 1);
  REQUIRE(end);
  CHECK(end->batches.empty());
  // Another offset: read from the batch holding it; with room for all,
  // up to the end of its segment file, and the next read from the next one.
  auto first = reader.Read(4, 1 << 20);
  REQUIRE(first);
  CHECK(DecodeBatchHeader(first->batches).base_offset == 3);
  CHECK(first->file == name(BatchAt(c.Dir(0), 3).file));
  int64_t total = static_cast<int64_t>(first->batches.size());
  std::set<std::string> seen{first->file};
  for (int64_t next = 0;;) {
    // The last batch's offset after it: the chunk's batches are whole.
    std::span<const std::byte> rest = first->batches;
    while (!rest.empty()) {
      const BatchHeader h = DecodeBatchHeader(rest);
      next = h.last_offset() + 1;
      rest = rest.subspan(h.size_bytes());
    }
    first = reader.Read(next, 1 << 20);
    REQUIRE(first);
    if (first->batches.empty()) break;
    CHECK(first->position == 0);
    CHECK(seen.insert(first->file).second);
    total += static_cast<int64_t>(first->batches.size());
  }
  CHECK(seen.size() == files.size());
  CHECK(total > 0);
}

TEST_CASE(
    "R63 ReplicaCheck: a replica on another host tells whether a follower stopped there, whether "
    "its log verifies (its damage named with its host) and its replica positions") {
  Cluster c(2);
  c.Produce(4);
  c.CatchUp(1);
  c.CatchUp(1);
  c.logs.clear();
  ReadLogServers servers;
  auto client = servers.ClientOf(c.roots[1]);
  const std::string name = "h1:" + c.Dir(1);
  auto healthy = wire::QueryReplicaCheck(*client, "t", 0, true, name);
  REQUIRE(healthy);
  CHECK(!healthy->stop);
  CHECK(healthy->damage.ok());
  REQUIRE(RecordFollowerStop(c.Dir(1), FollowerStop{1234, 65}).ok());
  const LogPosition damaged = BatchAt(c.Dir(1), 6);
  ForgeBatch(
      c.Dir(1), 6, [](std::span<std::byte> b) { b[b.size() - 2] ^= std::byte{0x01}; }, false);
  auto stopped = wire::QueryReplicaCheck(*client, "t", 0, false, name);
  REQUIRE(stopped);
  REQUIRE(stopped->stop);
  CHECK(*stopped->stop == FollowerStop{1234, 65});
  CHECK(stopped->damage.ok());  // not verified unless asked
  auto verified = wire::QueryReplicaCheck(*client, "t", 0, true, name);
  REQUIRE(verified);
  const Status& s = verified->damage;
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.rule() == "R4");
  CHECK(s.file() == "h1:" + damaged.file);
  CHECK(s.position() == damaged.position);
  CHECK(s.message() == "h1:" + VerifyForLeadership(c.Dir(1)).message());
  CHECK(client->connects() == 1);
  // The leader's record of its follower's fetches (R47), for describe.
  auto leader = wire::QueryReplicaCheck(*servers.ClientOf(c.roots[0]), "t", 0, false, "h0");
  REQUIRE(leader);
  auto positions = ReadReplicaPositions(c.Dir(0));
  REQUIRE(positions);
  REQUIRE(!positions->empty());
  CHECK(leader->positions == *positions);
  CHECK(stopped->positions.empty());
  // They are those of its fetch-positions (R60); no replica-positions
  // (R47's earlier file) is there to read.
  struct stat st;
  CHECK(stat((c.Dir(0) + "/fetch-positions").c_str(), &st) == 0);
  CHECK(stat((c.Dir(0) + "/replica-positions").c_str(), &st) != 0);
  // On the wire each is R47's six fields in R47's ranges, a replica at most
  // once (R51).
  wire::ReplicaCheckReply twice;
  twice.positions = {positions->front(), positions->front()};
  auto dup = wire::DecodeReplicaCheckReply(wire::Encode(twice), "h0");
  REQUIRE(!dup);
  CHECK(dup.error().rule() == "R51");
  wire::ReplicaCheckReply negative;
  negative.positions = {positions->front()};
  negative.positions[0].last_caught_up_ms = -1;
  auto below = wire::DecodeReplicaCheckReply(wire::Encode(negative), "h0");
  REQUIRE(!below);
  CHECK(below.error().rule() == "R51");
}

TEST_CASE(
    "R63 ReadLog: a peer of version 1 is not asked, and a server of version 2 speaks 1 to such a "
    "client") {
  SECTION("a server that speaks version 1 only: unsupported, naming R63, ReadLog never sent") {
    int a[2], b[2];
    REQUIRE(pipe2(a, O_CLOEXEC) == 0);
    REQUIRE(pipe2(b, O_CLOEXEC) == 0);
    std::atomic<int> requests{0};
    std::thread server([in = a[0], out = b[1], &requests] {
      wire::FrameReader r("client");
      std::byte buf[4096];
      for (;;) {
        auto f = r.Next();
        if (!f) break;
        if (!*f) {
          ssize_t n = read(in, buf, sizeof buf);
          if (n <= 0) break;
          r.Feed(std::span<const std::byte>(buf, static_cast<size_t>(n)));
          continue;
        }
        if ((*f)->type != wire::Type::kHello) ++requests;
        wire::HelloReply reply;
        reply.version = 1;
        auto frame =
            wire::EncodeFrame(wire::Type::kHelloReply, (*f)->correlation, wire::Encode(reply));
        (void)!write(out, frame.data(), frame.size());
      }
      close(in);
      close(out);
    });
    {
      auto client = std::make_shared<wire::Client>(
          [&]() -> Result<std::unique_ptr<wire::Connection>> {
            return wire::Connection::Adopt(a[1], b[0]);
          },
          "old:/r");
      auto source = wire::OpenRemoteReplica(client, "t", 0, "old:/r/t-0");
      REQUIRE(!source);
      CHECK(source.error().code() == Code::kUnsupported);
      CHECK(source.error().message().find("R63") != std::string::npos);
      CHECK(client->version() == 1);
    }
    server.join();
    CHECK(requests == 0);
  }
  SECTION("a client of version 1: HelloReply version 1, and ReadLog there is a breach") {
    int a[2], b[2];
    REQUIRE(pipe2(a, O_CLOEXEC) == 0);
    REQUIRE(pipe2(b, O_CLOEXEC) == 0);
    wire::Hello hello;
    hello.max_version = 1;
    auto f1 = wire::EncodeFrame(wire::Type::kHello, 0, wire::Encode(hello));
    auto f2 = wire::EncodeFrame(wire::Type::kReadLog, 1,
                                wire::Encode(wire::ReadLogMessage{"t", 0, 0, 100}));
    REQUIRE(write(a[1], f1.data(), f1.size()) == static_cast<ssize_t>(f1.size()));
    REQUIRE(write(a[1], f2.data(), f2.size()) == static_cast<ssize_t>(f2.size()));
    close(a[1]);
    wire::Handlers h;
    h.read_log = [](const wire::ReadLogMessage&) -> Result<LogChunk> { return LogChunk{}; };
    Status s = wire::Serve(a[0], b[1], h, wire::ServeOptions{});
    CHECK(s.rule() == "R63");
    close(a[0]);
    close(b[1]);
    wire::FrameReader r("server");
    std::vector<std::byte> bytes(1 << 16);
    ssize_t n = read(b[0], bytes.data(), bytes.size());
    REQUIRE(n > 0);
    r.Feed(std::span<const std::byte>(bytes.data(), static_cast<size_t>(n)));
    auto reply = r.Next();
    REQUIRE(reply);
    REQUIRE(*reply);
    CHECK((*reply)->type == wire::Type::kHelloReply);
    CHECK(wire::DecodeHelloReply((*reply)->payload, "server")->version == 1);
    close(b[0]);
  }
}

namespace {

// A link to the leader that runs `before_fetch` (once) when the follower's
// step has compared its log with the leader's and sends its first fetch,
// and `after_answer` (once) when the leader has said where the follower's
// epoch ends and before the follower truncates: another process acting on
// the follower's log at that very point.
class HookLink : public LeaderLink {
 public:
  explicit HookLink(std::unique_ptr<LeaderLink> inner) : inner_(std::move(inner)) {}
  Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                              int32_t requested_epoch) override {
    auto answer = inner_->OffsetForLeaderEpoch(leader_epoch, requested_epoch);
    if (after_answer) std::exchange(after_answer, nullptr)();
    return answer;
  }
  std::function<void()> after_answer;
  Result<FetchResponse> Fetch(const FetchRequest& request) override {
    if (before_fetch) std::exchange(before_fetch, nullptr)();
    return inner_->Fetch(request);
  }
  std::function<void()> before_fetch;

 private:
  std::unique_ptr<LeaderLink> inner_;
};

}  // namespace

// A producer on the old leader's root checks that the root leads (the
// cluster state and its claim, as mq-produce's AckGate does), begins its
// epoch and appends; it may be paused between any two of these while an
// election moves the partition and the old leader's root follows the new
// leader. Whatever the pause, what it appends after the follower compared
// its log with the leader's would sit at an offset the new leader fills
// with other records, in an epoch the follower no longer reconciles: it
// must be refused (R56), and the replicas stay identical.
TEST_CASE(
    "R56 epoch fence: a leader deposed after its check appends nothing once its root follows the "
    "new leader") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  const int64_t shared = c.Leo(0);
  // The producer's check passes: replica 0 leads in epoch 0 on this boot.
  REQUIRE(c.Part().leader == 0);
  REQUIRE(c.Part().leader_epoch == 0);
  REQUIRE(ClaimLeadership(c.ctx, *c.logs[0], c.Part()));
  LogConfig zc = Small();
  auto zombie = PartitionWriter::Open(c.Dir(0), zc, false, nullptr);
  REQUIRE(zombie);
  PartitionWriter& z = **zombie;
  auto zombie_batch = MakeBatch(1, 5000, 20);
  // Its write, from wherever it was paused (0: before BeginLeaderEpoch).
  auto resume = [&](bool begun) -> Status {
    if (!begun) MQ_RETURN_IF_ERROR(z.BeginLeaderEpoch(0));
    auto r = z.Append(zombie_batch);
    return r.status();
  };
  bool begun = false;
  bool in_step = false;  // resumed inside the follower's step
  SECTION("paused between the leadership check and BeginLeaderEpoch") {}
  SECTION("paused between BeginLeaderEpoch and Append") {
    REQUIRE(z.BeginLeaderEpoch(0).ok());
    begun = true;
  }
  SECTION("resumed inside the follower's step, after the comparison, before the fetch") {
    REQUIRE(z.BeginLeaderEpoch(0).ok());
    begun = true;
    in_step = true;
  }

  // Replica 0 is deposed; replica 1 leads in epoch 1.
  c.Elect([](int32_t r) { return r != 0; });
  REQUIRE(c.Part().leader == 1);
  REQUIRE(c.Part().leader_epoch == 1);
  Status resumed;
  if (in_step) {
    // The new leader has a batch of its epoch at `shared` when the
    // returning replica fetches.
    c.Produce(1, 4);
    HookLink link(DirectLeaderLink(c.ctx, c.logs[1].get()));
    link.before_fetch = [&] { resumed = resume(begun); };
    auto step = FollowerStep(c.ctx, *c.logs[0], link, c.follower_state[0]);
    CHECK(resumed.code() == Code::kFenced);
    REQUIRE(step);
    CHECK(step->appended_records == 4);
  } else {
    // Replica 0 returns as a follower: it shares everything with the new
    // leader, so nothing is cut.
    auto step = c.Step(0);
    REQUIRE(step);
    CHECK(step->truncated_to == -1);
    resumed = resume(begun);
    CHECK(resumed.code() == Code::kFenced);
    c.Produce(1, 4);
  }
  CHECK(resumed.message().find("R56") != std::string::npos);
  // Nothing of epoch 0 landed past what the replicas share.
  c.CatchUp(0);
  c.CatchUp(2);
  CHECK(c.Leo(0) == shared + 4);
  CHECK(RawBatches(c.Dir(0)) == RawBatches(c.Dir(1)));
  CHECK(RawBatches(c.Dir(2)) == RawBatches(c.Dir(1)));
  // It stays fenced.
  CHECK(resume(begun).code() == Code::kFenced);
  CHECK(resume(false).code() == Code::kFenced);
  CHECK(c.Leo(0) == shared + 4);
}

// What it appended before the follower's comparison is seen there and cut.
TEST_CASE("R56 epoch fence: what a deposed leader appended before its root followed is cut") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  const int64_t shared = c.Leo(0);
  LogConfig zc = Small();
  zc.leader_epoch = 0;
  auto zombie = PartitionWriter::Open(c.Dir(0), zc, false, nullptr);
  REQUIRE(zombie);
  c.Elect([](int32_t r) { return r != 0; });
  c.Produce(1, 4);
  auto zombie_batch = MakeBatch(1, 5000, 20);
  REQUIRE((*zombie)->Append(zombie_batch));  // the follower has not looked yet
  auto step = c.Step(0);
  REQUIRE(step);
  CHECK(step->truncated_to == shared);
  c.CatchUp(0);
  CHECK(RawBatches(c.Dir(0)) == RawBatches(c.Dir(1)));
  auto again = (*zombie)->Append(zombie_batch);
  REQUIRE(!again);
  CHECK(again.error().code() == Code::kFenced);
}

// The mirror case: a follower's step decides where to cut, is paused, and
// its replica is elected meanwhile and appends in the newer epoch. The
// stale cut would remove what the new leader appended; it is refused.
TEST_CASE(
    "R56 epoch fence: a follower's truncation decided in an older epoch cuts nothing once its "
    "replica leads a newer one") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  const int64_t shared = c.Leo(0);
  c.Produce(1);  // on replica 0 alone
  c.Elect([](int32_t r) { return r != 0; });
  REQUIRE(c.Part().leader == 1);
  REQUIRE(c.Produce(1).base_offset == shared);  // epoch 1 at the leader
  HookLink link(DirectLeaderLink(c.ctx, c.logs[1].get()));
  int64_t leader_end = -1;
  link.after_answer = [&] {
    // Replica 0's step now knows to cut at `shared`, then stalls: replica
    // 1 goes away, replica 0 (back in the ISR) is elected in epoch 2 and
    // appends there.
    c.store.state().Partition("t", 0)->isr = {0, 2};
    c.Elect([](int32_t r) { return r != 1; });
    REQUIRE(c.Part().leader == 0);
    REQUIRE(c.Part().leader_epoch == 2);
    c.Produce(1);
    leader_end = c.Leo(0);
  };
  auto step = FollowerStep(c.ctx, *c.logs[0], link, c.follower_state[0]);
  REQUIRE(leader_end > shared);
  REQUIRE(!step);
  CHECK(step.error().code() == Code::kFenced);
  CHECK(c.Leo(0) == leader_end);  // nothing cut
  auto latest = c.logs[0]->LatestEpoch();
  REQUIRE(latest);
  CHECK(*latest == 2);
  // An explicit truncation (no epoch) is not fenced.
  REQUIRE(c.logs[0]->TruncateTo(shared).ok());
  CHECK(c.Leo(0) == shared);
}

TEST_CASE(
    "R56 epoch fence: one entry, an epoch, that only moves forward and fences leader writers "
    "only") {
  CHECK(EncodeLeaderEpochFence(3) == "0\n1\n3\n");
  CHECK(EncodeLeaderEpochFence(1) == "0\n1\n1\n");  // R56's example, byte for byte
  auto back = DecodeLeaderEpochFence("0\n1\n3\n", "leader-epoch-fence");
  REQUIRE(back);
  CHECK(*back == 3);
  auto rule = [](const std::string& bytes) {
    auto r = DecodeLeaderEpochFence(bytes, "leader-epoch-fence");
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    return std::string(r.error().rule());
  };
  CHECK(rule("0\n1\n2147483648\n") == "R56");
  CHECK(rule("0\n2\n3\n4\n") == "R56");
  CHECK(rule("") == "R56");  // no entry
  CHECK(rule("0\n1\n3 4\n") == "R35");

  TempDir tmp;
  const std::string dir = tmp / "t-0";
  LogConfig c = Small();
  c.leader_epoch = 2;
  auto leader = PartitionWriter::Open(dir, c, true, nullptr);
  REQUIRE(leader);
  auto b = MakeBatch(2);
  REQUIRE((*leader)->Append(b));
  // Another writer of the log (a follower's) fences epochs below 3; the
  // leader's writer, opened before, finds it at its next append.
  auto follower = PartitionWriter::Open(dir, Small(), false, nullptr);
  REQUIRE(follower);
  REQUIRE((*follower)->FenceEpochsBelow(3).ok());
  CHECK(!Exists(dir + "/leader-epoch-fence.tmp"));
  const auto bytes = ReadFile(dir + "/leader-epoch-fence");
  CHECK(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) == "0\n1\n3\n");
  auto r = (*leader)->Append(b);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kFenced);
  CHECK((*leader)->BeginLeaderEpoch(2).code() == Code::kFenced);
  // Backwards changes nothing.
  REQUIRE((*follower)->FenceEpochsBelow(1).ok());
  auto fence = LoadLeaderEpochFence(OpenDirectory(dir, false)->get());
  REQUIRE(fence);
  CHECK(*fence == 3);
  // A writer opened after it sees it too; the fence's epoch itself leads.
  c.leader_epoch = 2;
  auto late = PartitionWriter::Open(dir, c, false, nullptr);
  REQUIRE(late);
  auto refused = (*late)->Append(b);
  REQUIRE(!refused);
  CHECK(refused.error().code() == Code::kFenced);
  REQUIRE((*late)->BeginLeaderEpoch(3).ok());
  auto ok = (*late)->Append(b);
  REQUIRE(ok);
  CHECK(ok->base_offset == 2);
  // Replicated batches (a follower's appends) are not fenced: they carry
  // the epochs the leaders wrote.
  TempDir tmp2;
  const std::string copy = tmp2 / "t-0";
  auto f2 = PartitionWriter::Open(copy, Small(), true, nullptr);
  REQUIRE(f2);
  REQUIRE((*f2)->FenceEpochsBelow(5).ok());
  for (const auto& raw : RawBatches(dir)) REQUIRE((*f2)->AppendReplicated(raw));
  CHECK(RawBatches(copy) == RawBatches(dir));

  // Verify of a partition reads the file and reports a breach.
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems, OffsetPolicy::kGapsAllowed, nullptr).ok());
  CHECK(problems.empty());
  const std::string bad = "0\n1\n2147483648\n";
  WriteFile(dir + "/leader-epoch-fence",
            std::vector<std::byte>(reinterpret_cast<const std::byte*>(bad.data()),
                                   reinterpret_cast<const std::byte*>(bad.data()) + bad.size()));
  REQUIRE(VerifyPartition(dir, {}, &problems, OffsetPolicy::kGapsAllowed, nullptr).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == dir + "/leader-epoch-fence");
  CHECK(problems[0].rule == "R56");
  CHECK(problems[0].position == 4);
}

TEST_CASE("R92 a follower keeps the leader's exact log start, one inside a segment") {
  Cluster c(2);
  c.Produce(12, 5);  // several 700-byte segments of 5-record batches
  c.CatchUp(1);
  // Delete-records at the leader: the log start inside a batch of a
  // segment that stays.
  {
    auto w = PartitionWriter::Open(c.Dir(0), Small(), false, nullptr);
    REQUIRE(w);
    SegmentDeletion how;
    how.exact_start = true;
    REQUIRE((*w)->DeleteSegmentsBefore(32, how).ok());
  }
  auto start = c.logs[0]->LogStartOffset();
  REQUIRE(start);
  REQUIRE(*start == 32);
  c.Produce(1);
  c.CatchUp(1);
  auto follower_start = c.logs[1]->LogStartOffset();
  REQUIRE(follower_start);
  CHECK(*follower_start == 32);
  CHECK(RawBatches(c.Dir(1)) == RawBatches(c.Dir(0)));
  // Reopened, it keeps it (the state file holds it).
  c.Reopen(1);
  CHECK(*c.logs[1]->LogStartOffset() == 32);
}

TEST_CASE("R92 a follower behind the leader's log start starts over from it") {
  Cluster c(2);
  c.Produce(12, 5);  // several segments; follower 1 has fetched nothing
  REQUIRE(c.Leo(1) == 0);
  {
    auto w = PartitionWriter::Open(c.Dir(0), Small(), false, nullptr);
    REQUIRE(w);
    SegmentDeletion how;
    how.exact_start = true;
    REQUIRE((*w)->DeleteSegmentsBefore(32, how).ok());
  }
  REQUIRE(*c.logs[0]->LogStartOffset() == 32);
  auto first = c.Step(1);
  INFO((first ? "" : first.error().message()));
  REQUIRE(first);
  CHECK(first->behind_at == 0);
  // The batch holding the leader's log start: its base.
  CHECK(first->started_over_at == 30);
  c.CatchUp(1);
  CHECK(*c.logs[1]->LogStartOffset() == 32);
  CHECK(c.Leo(1) == c.Leo(0));
  CHECK(RawBatches(c.Dir(1)) == RawBatches(c.Dir(0)));
  // It appends on after a reopen, and a reader starts at its log start.
  c.Reopen(1);
  c.Produce(2);
  c.CatchUp(1);
  CHECK(c.Leo(1) == c.Leo(0));
  CHECK(RawBatches(c.Dir(1)) == RawBatches(c.Dir(0)));
  auto r = PartitionReader::Open(c.Dir(1));
  REQUIRE(r);
  CHECK((*r)->log_start_offset() == 32);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(c.Dir(1), {}, &problems, OffsetPolicy::kContiguous).ok());
  for (auto& p : problems) CHECK(p.kind != Problem::Kind::kCorruption);
}

// Batches of producer 7 (epoch 0), 2 records each, from sequence `seq`,
// appended by the partition's leader in its epoch.
std::vector<AppendResult> ProduceAs7(Cluster& c, int batches, int32_t seq) {
  const PartitionState p = c.Part();
  LogConfig config = Small();
  config.leader_epoch = p.leader_epoch;
  auto w = PartitionWriter::Open(c.Dir(p.leader), config, false, nullptr);
  REQUIRE(w);
  std::vector<AppendResult> out;
  for (int i = 0; i < batches; ++i) {
    BatchOptions o;
    o.producer_id = 7;
    o.producer_epoch = 0;
    o.base_sequence = seq + 2 * i;
    auto b = MakeBatch(2, 5000 + i, 8, o);
    auto r = (*w)->Append(b);
    INFO((r ? "" : r.error().message()));
    REQUIRE(r);
    out.push_back(*r);
  }
  return out;
}

TEST_CASE("R111 a follower that starts over keeps the producers its log knew") {
  Cluster c(2);
  ProduceAs7(c, 5, 0);  // sequences 0-9
  c.CatchUp(1);
  const int64_t old_end = c.Leo(1);
  REQUIRE(*LastProducerSequence(c.Dir(1), 7) == std::optional<int32_t>(9));
  // The leader goes on without replica 1; retention deletes what it lacks,
  // and every batch of producer 7 with it. The leader still knows it.
  c.Produce(12, 5);
  {
    auto w = PartitionWriter::Open(c.Dir(0), Small(), false, nullptr);
    REQUIRE(w);
    SegmentDeletion how;
    how.exact_start = true;
    REQUIRE((*w)->DeleteSegmentsBefore(old_end + 32, how).ok());
  }
  REQUIRE(*LastProducerSequence(c.Dir(0), 7) == std::optional<int32_t>(9));
  // A new run of the follower: its producer table is built when first
  // needed (P7), from the log as it is then.
  c.Reopen(1);
  auto step = c.Step(1);
  REQUIRE(step);
  REQUIRE(step->behind_at == old_end);
  c.CatchUp(1);
  REQUIRE(c.Leo(1) == c.Leo(0));
  // Its new log holds no batch of producer 7, yet it knows its last
  // sequence as its old log did, on disk (a writer opened later reads it).
  auto last = LastProducerSequence(c.Dir(1), 7);
  REQUIRE(last);
  CHECK(*last == std::optional<int32_t>(9));
  c.Reopen(1);
  CHECK(*LastProducerSequence(c.Dir(1), 7) == std::optional<int32_t>(9));
  // Elected, it takes the resumed producer's retry of its last batch as a
  // duplicate and the next batch in sequence: each message once.
  c.Elect([](int32_t r) { return r != 0; });
  REQUIRE(c.Part().leader == 1);
  const int64_t leo = c.Leo(1);
  auto retry = ProduceAs7(c, 1, 8);
  CHECK(retry[0].duplicate);
  CHECK(c.Leo(1) == leo);
  auto next = ProduceAs7(c, 1, 10);
  CHECK_FALSE(next[0].duplicate);
  CHECK(c.Leo(1) == leo + 2);
}

TEST_CASE("R98 report after the append: the step that brings a record tells the leader its LEO") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  c.CatchUp(1);
  const int64_t before = c.Leo(0);
  REQUIRE(c.Hw(0) == before);
  const AppendResult last = c.Produce(1);
  const int64_t leo = last.last_offset + 1;
  // One step of replica 1: the record fetched and appended, its LEO
  // reported; the HW waits for replica 2.
  auto one = c.Step(1);
  REQUIRE(one);
  CHECK(one->appended_records == 3);
  CHECK(one->caught_up);
  CHECK(one->reported);
  auto positions = c.logs[0]->Followers();
  REQUIRE(positions);
  auto p1 = std::find_if(positions->begin(), positions->end(),
                         [](const FollowerPosition& f) { return f.replica == 1; });
  REQUIRE(p1 != positions->end());
  CHECK(p1->log_end_offset == leo);
  CHECK(c.Hw(0) == before);
  // One step of replica 2: the HW passes the record in that step, at the
  // leader and at replica 2 (from the report's answer), without a fetch
  // more.
  auto two = c.Step(2);
  REQUIRE(two);
  CHECK(two->reported);
  CHECK(c.Hw(0) == leo);
  CHECK(c.Hw(2) == leo);
  // Replica 1 learns the HW at its next fetch, which brings nothing.
  CHECK(c.Hw(1) == before);
  auto again = c.Step(1);
  REQUIRE(again);
  CHECK(again->appended_bytes == 0);
  CHECK_FALSE(again->reported);
  CHECK(c.Hw(1) == leo);
  // The leader appended between the fetch and the report: the follower
  // sees it in the leader's state file and reports nothing; its next
  // fetch, made at once, tells its LEO and brings the rest.
  c.Produce(1);
  CountingLink link(DirectLeaderLink(c.ctx, c.logs[0].get()));
  link.before_report = [&] { c.Produce(1); };
  const int64_t fetched_from = c.Leo(1);
  auto late = FollowerStep(c.ctx, *c.logs[1], link, c.follower_state[1]);
  REQUIRE(late);
  CHECK(late->appended_bytes > 0);
  CHECK_FALSE(late->reported);
  CHECK(c.Leo(1) + 3 == c.Leo(0));
  positions = c.logs[0]->Followers();
  REQUIRE(positions);
  for (const FollowerPosition& f : *positions)
    if (f.replica == 1) CHECK(f.log_end_offset == fetched_from);
  auto rest = c.Step(1);
  REQUIRE(rest);
  CHECK(rest->caught_up);
  CHECK(rest->reported);
  CHECK(c.Leo(1) == c.Leo(0));
}

TEST_CASE("R98 report after the append: a link without reports leaves it to the next fetch") {
  Cluster c(2);
  c.Produce(1);
  c.CatchUp(1);
  const int64_t before = c.Hw(0);
  REQUIRE(before == c.Leo(0));
  const int64_t leo = c.Produce(1).last_offset + 1;
  CountingLink link(DirectLeaderLink(c.ctx, c.logs[0].get()), false);
  auto one = FollowerStep(c.ctx, *c.logs[1], link, c.follower_state[1]);
  REQUIRE(one);
  CHECK(one->caught_up);
  CHECK(one->appended_bytes > 0);
  CHECK_FALSE(one->reported);
  CHECK(link.fetches == 1);
  CHECK(c.Hw(0) == before);  // the leader has not heard of the new LEO
  auto two = FollowerStep(c.ctx, *c.logs[1], link, c.follower_state[1]);
  REQUIRE(two);
  CHECK(two->appended_bytes == 0);
  CHECK(c.Hw(0) == leo);
  CHECK(c.Hw(1) == leo);
}

TEST_CASE("R98 report after the append: refused as a fetch is, and counted on the ISR as it is") {
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  c.CatchUp(1);
  const int64_t shared = c.Leo(0);
  REQUIRE(c.Hw(0) == shared);
  FetchRequest report;
  report.replica = 1;
  report.leader_epoch = 0;
  report.fetch_offset = shared;
  SECTION("past the leader's log end: out of order, nothing recorded") {
    report.fetch_offset = shared + 1;
    auto r = HandleReport(c.ctx, *c.logs[0], report);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Code::kOutOfOrder);
  }
  SECTION("in an epoch the leader no longer leads: fenced, no HW moved") {
    const int64_t leo = c.Produce(1).last_offset + 1;
    c.CatchUp(2);
    PartitionState next = c.Part();
    next.leader_epoch += 1;
    REQUIRE(c.store.AlterPartition(next, "a new epoch"));
    report.fetch_offset = leo;
    auto r = HandleReport(c.ctx, *c.logs[0], report);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Code::kFenced);
    CHECK(c.Hw(0) == shared);
  }
  SECTION("the ISR as it is under the leader lock, not as the fetch before saw it") {
    // Replica 2 left the ISR; the follower's fetch decided on that state.
    PartitionState out = c.Part();
    out.isr = {0, 1};
    REQUIRE(c.store.AlterPartition(out, "shrink"));
    const ClusterState seen = c.store.state();
    // Replica 2 rejoins at the HW (as ExpandIsrIfInSync lets it), then
    // the leader appends a record that only replica 1 fetches.
    PartitionState in = c.Part();
    in.isr = {0, 1, 2};
    REQUIRE(c.store.AlterPartition(in, "expand"));
    const int64_t leo = c.Produce(1).last_offset + 1;
    report.fetch_offset = leo;
    ReplicationContext stale = c.ctx;
    stale.loaded = &seen;
    auto r = HandleReport(stale, *c.logs[0], report);
    REQUIRE(r);
    // Replica 2 is in the ISR and holds up to `shared`: the HW stays.
    CHECK(r->high_watermark == shared);
    CHECK(c.Hw(0) == shared);
    CHECK(r->log_end_offset == leo);
    CHECK(r->batches.empty());
    CHECK(r->data().empty());
  }
}

TEST_CASE("R47 a fetch raises the HW on the ISR as it is under the leader lock") {
  // Another follower's fetch may expand the ISR while this one waits for the
  // leader lock: the HW this fetch computes counts the member that rejoined.
  Cluster c(3);
  c.Produce(2);
  c.CatchUp(1);
  c.CatchUp(2);
  c.CatchUp(1);
  const int64_t shared = c.Leo(0);
  REQUIRE(c.Hw(0) == shared);
  // Replica 2 left the ISR; this fetch's follower loaded that state.
  PartitionState out = c.Part();
  out.isr = {0, 1};
  REQUIRE(c.store.AlterPartition(out, "shrink"));
  const ClusterState seen = c.store.state();
  // Replica 2 rejoins at the HW, then the leader appends a record that only
  // replica 1 holds when it fetches.
  PartitionState in = c.Part();
  in.isr = {0, 1, 2};
  REQUIRE(c.store.AlterPartition(in, "expand"));
  const int64_t leo = c.Produce(1).last_offset + 1;
  FetchRequest fetch;
  fetch.replica = 1;
  fetch.leader_epoch = 0;
  fetch.fetch_offset = leo;
  fetch.max_bytes = 1 << 20;
  ReplicationContext stale = c.ctx;
  stale.loaded = &seen;
  auto r = HandleFetch(stale, *c.logs[0], fetch);
  REQUIRE(r);
  // Replica 2 is in the ISR and holds up to `shared`: the HW stays.
  CHECK(r->high_watermark == shared);
  CHECK(c.Hw(0) == shared);
  SECTION("and a fetch in an epoch the leader no longer leads under the lock is fenced") {
    PartitionState next = c.Part();
    next.leader_epoch += 1;
    const ClusterState before = c.store.state();
    REQUIRE(c.store.AlterPartition(next, "a new epoch"));
    ReplicationContext old = c.ctx;
    old.loaded = &before;
    auto fenced = HandleFetch(old, *c.logs[0], fetch);
    REQUIRE_FALSE(fenced);
    CHECK(fenced.error().code() == Code::kFenced);
    CHECK(c.Hw(0) == shared);
  }
}

namespace {

// The batches of `bytes`, whole and in order from `from`: their end offset
// (-1 when they are not).
int64_t BatchesEnd(std::span<const std::byte> bytes, int64_t from) {
  int64_t next = from;
  for (size_t pos = 0; pos < bytes.size();) {
    if (bytes.size() - pos < format::kBatchHeaderSize) return -1;
    const BatchHeader h = DecodeBatchHeader(bytes.subspan(pos));
    if (h.base_offset != next || h.size_bytes() <= 0) return -1;
    next = h.last_offset() + 1;
    pos += static_cast<size_t>(h.size_bytes());
  }
  return next;
}

}  // namespace

TEST_CASE("R102 committed fetch: whole batches below the HW, no check, no position, no HW moved") {
  Cluster c(3);
  c.Produce(4);
  c.CatchUp(1);
  c.CatchUp(2);
  c.CatchUp(1);  // reports again: the HW reaches the log end
  const int64_t hw = c.Hw(0);
  REQUIRE(hw == c.Leo(0));
  REQUIRE(hw == 12);
  c.Produce(3);  // above the HW
  const int64_t leo = c.Leo(0);
  REQUIRE(leo == 21);
  // Replica 0 deposed: a leader's answer is fenced; what it holds below its
  // HW is on every ISR member all the same.
  c.Elect([](int32_t r) { return r != 0; });
  auto positions = c.logs[0]->Followers();
  REQUIRE(positions);
  const PartitionState before = c.Part();
  FetchRequest req;
  req.replica = 2;
  req.leader_epoch = 0;
  req.fetch_offset = 0;
  req.max_bytes = 1 << 20;
  auto fenced = HandleFetch(c.ctx, *c.logs[0], req);
  REQUIRE(!fenced);
  CHECK(fenced.error().code() == Code::kFenced);
  std::vector<std::byte> buffer;
  auto f = HandleCommittedFetch(*c.logs[0], req, &buffer);
  REQUIRE(f);
  REQUIRE(*f);
  CHECK(BatchesEnd((*f)->data(), 0) == hw);  // the batches above it cut
  CHECK((*f)->high_watermark == hw);
  CHECK((*f)->log_end_offset == leo);
  CHECK((*f)->log_start_offset == 0);
  CHECK((*f)->leader_epoch == 0);
  CHECK(!(*f)->crc);  // cut: the server computes it
  // From inside the log, one batch at a time.
  req.fetch_offset = 3;
  req.max_bytes = 1;
  f = HandleCommittedFetch(*c.logs[0], req);
  REQUIRE(f);
  REQUIRE(*f);
  CHECK(BatchesEnd((*f)->data(), 3) == 6);
  CHECK((*f)->crc);  // not cut: the read's own CRC
  // At the HW, above it or past the log end: no answer without the leader's.
  for (int64_t at : {hw, hw + 3, leo, leo + 1}) {
    req.fetch_offset = at;
    f = HandleCommittedFetch(*c.logs[0], req);
    REQUIRE(f);
    CHECK(!*f);
  }
  // Only from the log that claimed the request's epoch (R54): not in
  // another epoch, not from a replica that never claimed it.
  req.fetch_offset = 0;
  req.leader_epoch = 1;
  f = HandleCommittedFetch(*c.logs[0], req);
  REQUIRE(f);
  CHECK(!*f);
  f = HandleCommittedFetch(*c.logs[1], req);  // leads in epoch 1, has not claimed it yet
  REQUIRE(f);
  CHECK(!*f);
  req.leader_epoch = 0;
  // Nothing recorded, raised or proposed.
  auto after = c.logs[0]->Followers();
  REQUIRE(after);
  CHECK(*after == *positions);
  CHECK(c.Hw(0) == hw);
  CHECK(c.Part() == before);
  // A follower appending the answer holds the leader's first batches.
  TempDir tmp;
  std::filesystem::create_directories(tmp / "t-0");
  auto fresh = OpenReplicaLog(tmp / "t-0", 2, Small());
  REQUIRE(fresh);
  req.fetch_offset = 0;
  req.max_bytes = 1 << 20;
  f = HandleCommittedFetch(*c.logs[0], req);
  REQUIRE(f);
  REQUIRE(*f);
  REQUIRE((*fresh)->AppendReplicated((*f)->data(), CrcCheck::kVerify));
  auto end = (*fresh)->LogEndOffset();
  REQUIRE(end);
  CHECK(*end == hw);
}
