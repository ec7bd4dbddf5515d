// A group's description (mq/group_status.h): committed offsets against the
// log (lag, below the log start, above the log end), owners and live
// members from the lock files, and the offset-for-time lookup of
// --reset-offsets --to-datetime.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>

#include "exit_code.h"  // tools/common: a status's exit status
#include "mq/group_member.h"
#include "mq/group_status.h"
#include "mq/partition.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// A data directory with topic "t" and group "g".
struct Fixture {
  TempDir tmp;
  DataDir dir;
  TopicConfig config;
  std::optional<Group> group;

  explicit Fixture(int32_t partitions, uint64_t segment_bytes = 1 << 20) {
    auto d = DataDir::Open(tmp / "data", true);
    REQUIRE(d);
    dir = *d;
    config.partitions = partitions;
    config.segment_bytes = segment_bytes;
    REQUIRE(dir.CreateTopic("t", config).ok());
    auto g = Group::Open(dir.path(), "g", true);
    REQUIRE(g);
    group.emplace(std::move(*g));
  }
  std::unique_ptr<PartitionWriter> Writer(int32_t p) {
    auto w = PartitionWriter::Open(dir.PartitionDir("t", p), DataDir::LogConfigFor(config), true,
                                   nullptr);
    REQUIRE(w);
    return std::move(*w);
  }
  void Append(int32_t p, int count, int64_t ts = 1000) {
    auto b = MakeBatch(count, ts);
    REQUIRE(Writer(p)->Append(b));
  }
  void Commit(const std::string& topic, int32_t p, int64_t offset) {
    std::vector<OffsetCommit> c = {{topic, p, offset, kNoLeaderEpoch, 0}};
    REQUIRE(group->Commit(c, "m1").ok());
  }
  GroupDescription Describe(std::optional<std::string_view> topic = std::nullopt) {
    auto d = DescribeGroup(dir, *group, topic);
    REQUIRE(d);
    return std::move(*d);
  }
};

}  // namespace

TEST_CASE("group status: lag is the committed end minus the committed offset, summed") {
  Fixture f(3);
  f.Append(0, 10);
  f.Append(1, 5);
  f.Append(2, 3);
  f.Commit("t", 0, 4);
  f.Commit("t", 1, 5);

  // Every partition of the group's topics: the uncommitted, unowned one
  // with its backlog (log end - log start) as its lag, counted in the total.
  for (GroupDescription d : {f.Describe(), f.Describe("t")}) {
    REQUIRE(d.partitions.size() == 3);
    CHECK(d.partitions[0].position == CommittedPosition::kInLog);
    CHECK(d.partitions[0].log.end == 10);
    CHECK(d.partitions[0].lag == 6);
    CHECK_FALSE(d.partitions[0].unread);
    CHECK(d.partitions[1].lag == 0);
    CHECK_FALSE(d.partitions[0].owner);
    CHECK(d.partitions[2].position == CommittedPosition::kNone);
    CHECK_FALSE(d.partitions[2].committed);
    CHECK(d.partitions[2].unread);
    CHECK(d.partitions[2].lag == 3);
    CHECK_FALSE(d.partitions[2].resume_at);
    CHECK(d.partitions[2].log.end == 3);
    CHECK(d.total_lag == 9);
  }

  auto missing = DescribeGroup(f.dir, *f.group, std::string_view("nosuch"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Code::kNotFound);
}

TEST_CASE("group status: the topics of live members and of ownership files are the group's") {
  Fixture f(4);
  TopicConfig other;
  other.partitions = 2;
  REQUIRE(f.dir.CreateTopic("u", other).ok());
  f.Append(1, 7);
  // Nothing committed: a member reading t owns partition 0 only (another
  // member is assigned the rest); the other partitions show their backlog.
  auto m = GroupMember::Join(&*f.group, "m1", "t", 4);
  REQUIRE(m);
  auto got = m->TryAcquire(0);
  REQUIRE(got);
  REQUIRE(*got);
  GroupDescription d = f.Describe();
  REQUIRE(d.partitions.size() == 4);
  CHECK(d.partitions[0].owner == "m1");
  CHECK_FALSE(d.partitions[0].unread);
  CHECK_FALSE(d.partitions[0].lag);  // its owner's position is not known
  CHECK(d.partitions[1].unread);
  CHECK(d.partitions[1].lag == 7);
  CHECK(d.total_lag == 7);
  REQUIRE(d.members.size() == 1);
  CHECK(d.members[0].topics == std::vector<std::string>{"t"});

  // Once every member is gone, the ownership file still says the group
  // read t; u, never read, is not the group's.
  m->Leave();
  d = f.Describe();
  REQUIRE(d.partitions.size() == 4);
  for (const auto& s : d.partitions) {
    CHECK(s.topic == "t");
    CHECK(s.unread);
  }
  CHECK(d.total_lag == 7);
  CHECK(d.members.empty());
}

TEST_CASE("group status: a committed offset below the log start or above the log end") {
  Fixture f(2, 300);  // one batch of 10 records per segment
  f.Append(0, 10);
  f.Append(0, 10);
  f.Append(0, 10);
  REQUIRE(f.Writer(0)->DeleteSegmentsBefore(20).ok());
  f.Append(1, 5);
  f.Commit("t", 0, 3);    // retention deleted 3..19
  f.Commit("t", 1, 100);  // past the end: a truncation
  f.Commit("gone", 0, 7);

  GroupDescription d = f.Describe();
  REQUIRE(d.partitions.size() == 3);
  const auto& gone = d.partitions[0];
  CHECK(gone.topic == "gone");
  CHECK(gone.position == CommittedPosition::kNoTopic);
  CHECK_FALSE(gone.lag);
  const auto& below = d.partitions[1];
  REQUIRE(below.log.start == 20);
  CHECK(below.position == CommittedPosition::kBelowLogStart);
  CHECK(below.lost == 17);
  CHECK(below.resume_at == 20);
  CHECK(below.lag == 10);  // what is left to read, not 30 - 3
  const auto& above = d.partitions[2];
  CHECK(above.position == CommittedPosition::kAboveLogEnd);
  CHECK(above.resume_at == 5);
  CHECK(above.lag == 0);
  CHECK(d.total_lag == 10);

  // Described alone, the removed topic is kNotFound (as for a member of
  // it), naming the group and the offsets left over.
  auto alone = DescribeGroup(f.dir, *f.group, std::string_view("gone"));
  REQUIRE_FALSE(alone);
  CHECK(alone.error().code() == Code::kNotFound);
  CHECK_THAT(alone.error().message(),
             Catch::StartsWith("group g: ") && Catch::Contains("no topic \"gone\"") &&
                 Catch::Contains("deleted or removed") &&
                 Catch::Contains("committed offset of it is left over") &&
                 Catch::Contains("mq-consume -G g --delete-offsets -t gone"));

  // A committed partition the topic does not have.
  f.Commit("t", 5, 0);
  d = f.Describe("t");
  REQUIRE(d.partitions.size() == 3);
  CHECK(d.partitions[2].partition == 5);
  CHECK(d.partitions[2].position == CommittedPosition::kNoPartition);
}

TEST_CASE(
    "group status: a committed offset whose leader epoch ends below it in the log "
    "(KIP-320) resumes where the log diverged") {
  Fixture f(2);
  // Partition 0 as a failover leaves it: epoch 0 wrote offsets 0..9 on the
  // replica the group read; here its records from 5 on were cut, and the
  // leader of epoch 1 wrote others at 5..9.
  LogConfig log = DataDir::LogConfigFor(f.config);
  log.leader_epoch = 0;
  {
    auto w = PartitionWriter::Open(f.dir.PartitionDir("t", 0), log, true, nullptr);
    REQUIRE(w);
    for (int i = 0; i < 2; ++i) {
      auto b = MakeBatch(5);
      REQUIRE((*w)->Append(b));
    }
    REQUIRE((*w)->TruncateTo(5).ok());
  }
  log.leader_epoch = 1;
  {
    auto w = PartitionWriter::Open(f.dir.PartitionDir("t", 0), log, true, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(5, 5000);
    REQUIRE((*w)->Append(b));
  }
  f.Append(1, 10);  // unreplicated: no leader-epoch checkpoint
  auto commit = [&](int32_t p, int64_t offset, int32_t epoch) {
    std::vector<OffsetCommit> c = {{"t", p, offset, epoch, 0}};
    REQUIRE(f.group->Commit(c, "m1").ok());
  };
  commit(0, 10, 0);
  commit(1, 10, 0);

  auto divergence = [&](int32_t p, int64_t offset, int32_t epoch) {
    auto d = CommittedDivergence(f.dir, "t", p, {"t", p, offset, epoch, 0, {}, 0});
    REQUIRE(d);
    return *d;
  };
  CHECK(divergence(0, 10, 0) == std::optional<int64_t>(5));
  CHECK(divergence(0, 7, 0) == std::optional<int64_t>(5));
  CHECK_FALSE(divergence(0, 5, 0));   // epoch 0 ends there: nothing read was cut
  CHECK_FALSE(divergence(0, 10, 1));  // the latest epoch runs to the end
  CHECK_FALSE(divergence(0, 10, 2));  // an epoch the log does not have yet
  CHECK_FALSE(divergence(0, 10, kNoLeaderEpoch));
  CHECK_FALSE(divergence(1, 10, 0));  // no checkpoint to tell

  GroupDescription d = f.Describe();
  REQUIRE(d.partitions.size() == 2);
  const auto& diverged = d.partitions[0];
  CHECK(diverged.position == CommittedPosition::kDiverged);
  CHECK(diverged.diverged_at == 5);
  CHECK(diverged.resume_at == 5);
  CHECK(diverged.lag == 5);
  CHECK(d.partitions[1].position == CommittedPosition::kInLog);
  CHECK(d.partitions[1].resume_at == 10);

  // Where a member resumes: the divergence wins over the log end, never
  // goes below the log start.
  int64_t at = -1;
  CHECK(PlaceCommitted(10, {0, 10}, 5, &at) == CommittedPosition::kDiverged);
  CHECK(at == 5);
  CHECK(PlaceCommitted(12, {0, 8}, 5, &at) == CommittedPosition::kDiverged);
  CHECK(at == 5);
  CHECK(PlaceCommitted(12, {0, 8}, 9, &at) == CommittedPosition::kAboveLogEnd);
  CHECK(at == 8);
  CHECK(PlaceCommitted(10, {7, 10}, 5, &at) == CommittedPosition::kDiverged);
  CHECK(at == 7);
  CHECK(PlaceCommitted(3, {7, 10}, 5, &at) == CommittedPosition::kBelowLogStart);
  CHECK(at == 7);
  CHECK(PlaceCommitted(10, {0, 10}, std::nullopt, &at) == CommittedPosition::kInLog);
  CHECK(at == 10);
}

TEST_CASE("group status: a partition whose log cannot be read is a row of its own") {
  Fixture f(3);
  f.Append(0, 4);
  f.Append(1, 6);
  f.Append(2, 2);
  f.Commit("t", 0, 1);
  f.Commit("t", 1, 2);
  // A state file that is a symlink is refused, not followed.
  const std::string state = f.dir.PartitionDir("t", 1) + "/state";
  REQUIRE(::rename(state.c_str(), (state + ".real").c_str()) == 0);
  REQUIRE(::symlink("state.real", state.c_str()) == 0);
  GroupDescription d = f.Describe("t");
  REQUIRE(d.partitions.size() == 3);
  const auto& bad = d.partitions[1];
  CHECK(bad.position == CommittedPosition::kUnreadable);
  CHECK_FALSE(bad.lag);
  CHECK_FALSE(bad.resume_at);
  REQUIRE(bad.committed);
  CHECK(bad.committed->offset == 2);
  CHECK_FALSE(bad.error.ok());
  CHECK_THAT(bad.error.message(), Catch::Contains("t-1/state"));
  CHECK(d.partitions[0].lag == 3);
  CHECK(d.partitions[0].error.ok());
  CHECK(d.partitions[2].position == CommittedPosition::kNone);
  CHECK(d.partitions[2].lag == 2);  // unread: its backlog
  CHECK(d.total_lag == 5);
}

TEST_CASE("group status: owners and live members come from the lock files") {
  Fixture f(4);
  auto m = GroupMember::Join(&*f.group, "m1", "t", 4);
  REQUIRE(m);
  auto got = m->TryAcquire(2);
  REQUIRE(got);
  REQUIRE(*got);
  auto live = HasLiveMembers(*f.group);
  REQUIRE(live);
  CHECK(*live);

  GroupDescription d = f.Describe();
  REQUIRE(d.partitions.size() == 4);  // every partition of the member's topic
  CHECK(d.partitions[2].partition == 2);
  CHECK(d.partitions[2].owner == "m1");
  CHECK_FALSE(d.partitions[1].owner);
  REQUIRE(d.members.size() == 1);
  CHECK(d.members[0].id == "m1");
  CHECK(d.members[0].pid == ::getpid());
  CHECK_FALSE(d.members[0].host.empty());
  REQUIRE(d.members[0].owned.size() == 1);
  CHECK(d.members[0].owned[0] == std::pair<std::string, int32_t>("t", 2));

  // Released: the file keeps the old id, but nobody holds it.
  m->Release(2);
  d = f.Describe();
  REQUIRE(d.partitions.size() == 4);
  for (const auto& s : d.partitions) CHECK_FALSE(s.owner);
  m->Leave();
  d = f.Describe();
  CHECK(d.members.empty());
  live = HasLiveMembers(*f.group);
  REQUIRE(live);
  CHECK_FALSE(*live);
}

TEST_CASE("group status: the offset for a time is the first record at or after it") {
  Fixture f(2);
  f.Append(0, 10, 1000);  // offsets 0-9, timestamps 1000-1009
  f.Append(0, 10, 2000);  // offsets 10-19, timestamps 2000-2009
  auto at = [&](int64_t ts) {
    auto o = OffsetForTimestamp(f.dir, "t", 0, ts);
    REQUIRE(o);
    return *o;
  };
  CHECK(at(0) == 0);
  CHECK(at(1005) == 5);
  CHECK(at(1500) == 10);
  CHECK(at(2009) == 19);
  CHECK(at(5000) == 20);  // none: the committed end
  auto empty = OffsetForTimestamp(f.dir, "t", 1, 0);
  REQUIRE(empty);
  CHECK(*empty == 0);
}

TEST_CASE("group status: an offset plan is kafka-consumer-groups' CSV, written and read back") {
  const std::vector<PlannedOffset> plan{{"", "a", 0, 4}, {"", "a", 1, 10}, {"", "b", 0, 0}};
  const std::string text = FormatOffsetPlan(plan, false);
  CHECK(text == "a,0,4\na,1,10\nb,0,0\n");
  auto back = ParseOffsetPlan(text, "plan.csv");
  REQUIRE(back);
  CHECK(*back == plan);
  const std::vector<PlannedOffset> groups{{"g", "a", 0, 4}, {"h", "a", 0, 5}};
  CHECK(FormatOffsetPlan(groups, true) == "g,a,0,4\nh,a,0,5\n");
  back =
      ParseOffsetPlan("g,a,0,4\r\n\nh,a,0,5", "plan.csv");  // CRLF, a blank line, no last newline
  REQUIRE(back);
  CHECK(*back == groups);
  for (const char* bad : {"a,0", "a,0,1,2,3", "a,x,1", "a,0,-1", "a,10000,1", "a/b,0,1",
                          "a,0,1\na,0,2", "a,0,1\ng,a,1,1", "a,,1", "a,0,99999999999999999999"}) {
    auto r = ParseOffsetPlan(bad, "plan.csv");
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(cli::ExitCode(r.error()) == 65);
    CHECK_THAT(r.error().message(), Catch::StartsWith("plan.csv:"));
  }
}

TEST_CASE(
    "group status: an unreplicated log truncated below a committed offset after the commit "
    "resumes at the cut (R59), also once it has grown again") {
  Fixture f(2);
  auto append = [&](int32_t p, int n) {  // a batch per record: cuts fall between them
    for (int k = 0; k < n; ++k) f.Append(p, 1);
  };
  append(0, 10);
  append(1, 10);
  // Committed with a timestamp of 1000 ms: every cut below is later.
  std::vector<OffsetCommit> c = {{"t", 0, 10, kNoLeaderEpoch, 0}, {"t", 1, 10, kNoLeaderEpoch, 0}};
  REQUIRE(f.group->Commit(c, "m1", CommitKind::kForward, 1000).ok());
  {
    auto w = f.Writer(0);
    REQUIRE(w->TruncateTo(6).ok());
    REQUIRE(w->TruncateTo(4).ok());  // a lower cut later: it is the one that counts
  }
  append(0, 5);  // the log ends at 9 now, below the committed offset 10
  auto state = f.group->Read();
  REQUIRE(state);
  const CommittedOffset* committed = state->Find("t", 0);
  REQUIRE(committed != nullptr);
  auto cut = CommittedDivergence(f.dir, "t", 0, *committed);
  REQUIRE(cut);
  CHECK(*cut == std::optional<int64_t>(4));
  GroupDescription d = f.Describe("t");
  REQUIRE(d.partitions.size() == 2);
  CHECK(d.partitions[0].position == CommittedPosition::kDiverged);
  CHECK(d.partitions[0].resume_at == 4);
  CHECK(d.partitions[0].lag == 5);
  // Never truncated: in the log as it was.
  CHECK(d.partitions[1].position == CommittedPosition::kInLog);
  CHECK(d.partitions[1].resume_at == 10);

  // The log grows past the committed offset again: still the cut.
  append(0, 5);
  d = f.Describe("t");
  CHECK(d.partitions[0].position == CommittedPosition::kDiverged);
  CHECK(d.partitions[0].resume_at == 4);
  // A commit made after the cut read the log as it is: nothing to go back to.
  c = {{"t", 0, 12, kNoLeaderEpoch, 0}};
  REQUIRE(f.group->Commit(c, "m1").ok());
  d = f.Describe("t");
  CHECK(d.partitions[0].position == CommittedPosition::kInLog);
  CHECK(d.partitions[0].resume_at == 12);
}
