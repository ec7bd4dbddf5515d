// Static members in the admin modes (format-spec/group.md §14.4, §14.6,
// R33, R65): an absent static member whose session holds is a member —
// described with its session and the partitions waiting for it, and a
// reset, delete or offset delete of its group is refused until its session
// ends or it is removed (Group::RemoveMember).
#include <catch2/catch.hpp>

#include <chrono>

#include "exit_code.h"  // tools/common: a status's exit status
#include "format/format.h"
#include "mq/assignment.h"
#include "mq/group_member.h"
#include "mq/group_status.h"
#include "mq/member_lease.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

int64_t WallNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A data directory with topic "t" of `partitions` partitions and group "g".
struct Fixture {
  TempDir tmp;
  DataDir dir;
  std::optional<Group> group;

  explicit Fixture(int32_t partitions) {
    auto d = DataDir::Open(tmp / "data", true);
    REQUIRE(d);
    dir = *d;
    TopicConfig config;
    config.partitions = partitions;
    REQUIRE(dir.CreateTopic("t", config).ok());
    auto g = Group::Open(dir.path(), "g", true);
    REQUIRE(g);
    group.emplace(std::move(*g));
  }
  UniqueFd Members() {
    return OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false).value();
  }
};

}  // namespace

TEST_CASE("static admin: an absent static member in its session refuses a reset and a delete") {
  Fixture f(4);
  // a is static with a session of 60 s and stops (its lock goes, its lease
  // and note stay); c was a dynamic member that died (its lock file left).
  int64_t left = 0;
  {
    auto a = GroupMember::Join(&*f.group, "a", "t", 4);
    REQUIRE(a);
    REQUIRE(a->KeepSession(60000).ok());
    a->Leave();
    left = WallNow();
  }
  const std::string note = "c host 1\ntopics t\n";
  REQUIRE(WriteFileAtomic(f.Members().get(), "c.lock",
                          std::as_bytes(std::span(note.data(), note.size())))
              .ok());
  REQUIRE(f.group->ListMemberFiles().value() == std::vector<std::string>{"a", "c"});

  auto absent = f.group->AbsentMembers();
  REQUIRE(absent);
  REQUIRE(absent->size() == 1);
  CHECK((*absent)[0].id == "a");
  CHECK((*absent)[0].lease.session_timeout_ms == 60000);
  CHECK((*absent)[0].session_end() >= left - 1000 + 60000);
  CHECK((*absent)[0].session_end() <= left + 60000);
  const int64_t end = (*absent)[0].session_end();
  // The session decides: at its end a is no member any more.
  CHECK(f.group->AbsentMembers(end - 1).value().size() == 1);
  CHECK(f.group->AbsentMembers(end).value().empty());
  CHECK(f.group->CheckNoAbsentMembers(end).ok());

  // Nothing holds group.lock, yet each admin write is refused (75).
  const Status busy = f.group->CheckNoAbsentMembers();
  CHECK(busy.code() == Code::kBusy);
  CHECK(cli::ExitCode(busy) == 75);
  CHECK_THAT(busy.message(), Catch::Contains("has live members") &&
                                 Catch::Contains("static member a ") &&
                                 Catch::Contains("members/a.lease"));
  CHECK_THAT(busy.message(), !Catch::Contains("static member c"));
  auto reset = f.group->LockForReset();
  REQUIRE_FALSE(reset);
  CHECK(reset.error().code() == Code::kBusy);
  CHECK(reset.error().message() == busy.message());
  std::vector<OffsetCommit> commits = {{"t", 0, 0, kNoLeaderEpoch, 0}};
  CHECK(f.group->Commit(commits, {}, CommitKind::kReset).code() == Code::kBusy);
  CHECK(f.group->DeleteOffsets("t", {}).error().code() == Code::kBusy);
  Status deleted = DeleteGroup(f.dir.path(), "g");
  CHECK(deleted.code() == Code::kBusy);
  CHECK_THAT(deleted.message(), Catch::Contains("static member a "));
  REQUIRE(Group::Open(f.dir.path(), "g", false));  // still there

  // A running member is not removed; an unknown one is not found.
  {
    auto b = GroupMember::Join(&*f.group, "b", "t", 4);
    REQUIRE(b);
    CHECK(f.group->RemoveMember("b").code() == Code::kBusy);
    CHECK(f.group->AbsentMembers().value().size() == 1);  // b is running, not absent
  }
  CHECK(f.group->RemoveMember("nosuch").code() == Code::kNotFound);

  // Removed, a is no member: its lease and lock file are gone, and the
  // reset goes ahead.
  REQUIRE(f.group->RemoveMember("a").ok());
  CHECK_FALSE(ReadMemberLease(f.Members().get(), "a").value());
  CHECK(f.group->ListMemberFiles().value() == std::vector<std::string>{"c"});
  CHECK(f.group->AbsentMembers().value().empty());
  CHECK(f.group->RemoveMember("a").code() == Code::kNotFound);
  auto lock = f.group->LockForReset();
  REQUIRE(lock);
  CHECK(f.group->Commit(commits, {}, CommitKind::kReset, kNoTimestamp, &*lock).ok());
}

TEST_CASE("static admin: an offset delete waits only for the absent members reading its topic") {
  Fixture f(2);
  TopicConfig config;
  config.partitions = 2;
  REQUIRE(f.dir.CreateTopic("u", config).ok());
  // Offsets of t and u committed; then a (static, reading t) stops.
  const std::vector<OffsetCommit> commits = {{"t", 0, 0, kNoLeaderEpoch, 0},
                                             {"u", 0, 0, kNoLeaderEpoch, 0},
                                             {"u", 1, 0, kNoLeaderEpoch, 0}};
  REQUIRE(f.group->Commit(commits, {}, CommitKind::kReset).ok());
  {
    auto a = GroupMember::Join(&*f.group, "a", "t", 2);
    REQUIRE(a);
    REQUIRE(a->KeepSession(60000).ok());
    a->Leave();
  }
  auto absent = f.group->AbsentMembers();
  REQUIRE(absent);
  REQUIRE(absent->size() == 1);
  CHECK((*absent)[0].topics == std::vector<std::string>{"t"});
  CHECK((*absent)[0].Reads("t"));
  CHECK_FALSE((*absent)[0].Reads("u"));

  // u is none of a's topics: its offsets go; t's wait for a (75).
  CHECK(f.group->CheckNoAbsentMembers(kNoTimestamp, "u").ok());
  auto deleted = f.group->DeleteOffsets("u", {});
  REQUIRE(deleted);
  CHECK(*deleted == std::vector<int32_t>{0, 1});
  const Status busy = f.group->DeleteOffsets("t", {}).error();
  CHECK(busy.code() == Code::kBusy);
  CHECK_THAT(busy.message(),
             Catch::Contains("static member a ") && Catch::Contains("members/a.lease"));
  // A reset of any topic still waits for every absent member.
  CHECK(f.group->LockForReset().error().code() == Code::kBusy);
  auto state = f.group->Read();
  REQUIRE(state);
  CHECK(state->Find("t", 0) != nullptr);
  CHECK(state->Find("u", 0) == nullptr);

  // A note with no topics line (an earlier mq's member): a may read any
  // topic, so an offset delete of any waits for it.
  const std::string note = "a host 1\n";
  REQUIRE(WriteFileAtomic(f.Members().get(), "a.lock",
                          std::as_bytes(std::span(note.data(), note.size())))
              .ok());
  absent = f.group->AbsentMembers();
  REQUIRE(absent);
  REQUIRE(absent->size() == 1);
  CHECK_FALSE((*absent)[0].topics);
  CHECK((*absent)[0].Reads("u"));
  CHECK(f.group->DeleteOffsets("u", {}).error().code() == Code::kBusy);
}

TEST_CASE("static admin: a lease that breaks R65 or has ended keeps no member") {
  Fixture f(2);
  {
    auto a = GroupMember::Join(&*f.group, "a", "t", 2);
    REQUIRE(a);
    REQUIRE(a->KeepSession(60000).ok());
    auto b = GroupMember::Join(&*f.group, "b", "t", 2);
    REQUIRE(b);
    REQUIRE(b->KeepSession(60000).ok());
    b->Leave();
    a->Leave();
  }
  CHECK(f.group->AbsentMembers().value().size() == 2);
  // b's lease says it was last seen 5 s ago (a session that has ended); a's
  // breaks R65 (a flipped crc byte).
  REQUIRE(WriteMemberLease(f.Members().get(), "b", {1000, WallNow() - 5000}).ok());
  {
    auto bytes = EncodeMemberLease({60000, WallNow()});
    bytes[8] ^= std::byte{1};
    REQUIRE(WriteFileAtomic(f.Members().get(), "a.lease", bytes, nullptr, "a.tmp", false).ok());
  }
  CHECK(f.group->AbsentMembers().value().empty());
  CHECK(f.group->LockForReset());
}

TEST_CASE("static admin: describe shows a static member's session and the partitions waiting") {
  Fixture f(6);
  const std::vector<std::string> both{"a", "b"};
  const std::vector<int32_t> a_share = AssignedTo(both, "t", 6, "a");
  REQUIRE_FALSE(a_share.empty());
  auto b = GroupMember::Join(&*f.group, "b", "t", 6);
  REQUIRE(b);
  REQUIRE(b->KeepSession(30000).ok());
  {
    auto a = GroupMember::Join(&*f.group, "a", "t", 6);
    REQUIRE(a);
    REQUIRE(a->KeepSession(60000).ok());
    a->Leave();
  }
  auto d = DescribeGroup(f.dir, *f.group);
  REQUIRE(d);
  REQUIRE(d->members.size() == 2);
  const GroupMemberStatus& a = d->members[0];
  CHECK(a.id == "a");
  CHECK(a.absent);
  CHECK(a.session_timeout_ms == 60000);
  CHECK_FALSE(a.pid);  // not running
  CHECK(a.topics == std::vector<std::string>{"t"});
  std::vector<std::pair<std::string, int32_t>> held;
  for (int32_t p : a_share) held.push_back({"t", p});
  CHECK(a.held == held);
  CHECK(a.owned.empty());
  const int64_t end = a.session_end;
  CHECK(end > WallNow());
  const GroupMemberStatus& running = d->members[1];
  CHECK(running.id == "b");
  CHECK_FALSE(running.absent);
  CHECK(running.session_timeout_ms == 30000);
  CHECK(running.held.empty());
  REQUIRE(d->partitions.size() == 6);
  for (const GroupPartitionStatus& s : d->partitions) {
    const bool mine = std::find(a_share.begin(), a_share.end(), s.partition) != a_share.end();
    CHECK(s.held_for == (mine ? std::optional<std::string>("a") : std::nullopt));
  }

  // Once a's session has ended, a is no member and nothing waits for it.
  d = DescribeGroup(f.dir, *f.group, std::nullopt, end);
  REQUIRE(d);
  REQUIRE(d->members.size() == 1);
  CHECK(d->members[0].id == "b");
  for (const GroupPartitionStatus& s : d->partitions) CHECK_FALSE(s.held_for);
}
