// GroupMember (format-spec/group.md §14.6): membership by locks, balanced
// assignment, takeover of a dead member's partitions, never two owners.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "mq/group_member.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

std::string MakeDataDir(const TempDir& tmp) {
  std::string dir = tmp / "data";
  auto d = DataDir::Open(dir, true);
  REQUIRE(d);
  return dir;
}

// Polls and acquires until `member` owns its target (a few rounds: a
// partition is free once its previous owner has polled and released).
void Settle(std::vector<GroupMember*> members) {
  for (int round = 0; round < 10; ++round) {
    bool done = true;
    for (GroupMember* m : members) {
      auto view = m->Poll();
      REQUIRE(view);
      for (int32_t p : view->release) m->Release(p);
      for (int32_t p : view->acquire) {
        auto got = m->TryAcquire(p);
        REQUIRE(got);
        done = done && *got;
      }
      done = done && view->release.empty();
    }
    if (done) return;
  }
  FAIL("assignment did not settle");
}

}  // namespace

TEST_CASE("group member: members split the partitions, each owned once") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto a = GroupMember::Join(&*group, "a", "t", 12);
  auto b = GroupMember::Join(&*group, "b", "t", 12);
  auto c = GroupMember::Join(&*group, "c", "t", 12);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  Settle({&*a, &*b, &*c});
  std::multiset<int32_t> all;
  for (GroupMember* m : {&*a, &*b, &*c}) {
    CHECK(m->owned().size() == 4);
    for (int32_t p : m->owned()) all.insert(p);
  }
  CHECK(all.size() == 12);
  CHECK(std::set<int32_t>(all.begin(), all.end()).size() == 12);
  // A partition owned by one member cannot be taken by another.
  const int32_t p = a->owned().front();
  auto stolen = b->TryAcquire(p);
  REQUIRE(stolen);
  CHECK_FALSE(*stolen);

  // c leaves: a and b take its partitions, and keep most of theirs (the
  // bound of test_assignment.cc: twice the minimum plus one per member).
  const auto a_before = a->owned();
  const auto b_before = b->owned();
  c->Leave();
  Settle({&*a, &*b});
  CHECK(a->owned().size() == 6);
  CHECK(b->owned().size() == 6);
  int kept = 0;
  for (int32_t q : a_before) kept += a->owns(q) ? 1 : 0;
  for (int32_t q : b_before) kept += b->owns(q) ? 1 : 0;
  CHECK(12 - kept <= 2 * 4 + 3);
  auto stats = group->Read();
  REQUIRE(stats);
  CHECK(stats->rebalances >= 2);
}

TEST_CASE("group member: a live member's id is refused, a dead one's is taken over") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto a = GroupMember::Join(&*group, "a", "t", 4);
  REQUIRE(a);
  auto again = GroupMember::Join(&*group, "a", "t", 4, 50);
  REQUIRE_FALSE(again);
  CHECK(again.error().code() == Code::kBusy);
  CHECK_THAT(again.error().message(), Catch::Contains("in use"));

  // A member in a child process that is killed: its member file and its
  // partitions' locks go with it.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    auto g = Group::Open(dir, "g", false);
    if (!g) ::_exit(1);
    auto m = GroupMember::Join(&*g, "doomed", "t", 4);
    if (!m) ::_exit(2);
    auto v = m->Poll();
    if (!v) ::_exit(3);
    for (int32_t p : v->acquire) (void)m->TryAcquire(p);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char x;
  REQUIRE(::read(ready[0], &x, 1) == 1);
  ::close(ready[0]);
  auto alive = group->IsMemberAlive("doomed");
  REQUIRE(alive);
  CHECK(*alive);
  auto view = a->Poll();
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"a", "doomed"});
  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  view = a->Poll();
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"a"});
  CHECK(view->removed_dead == 1);
  CHECK(view->changed);
  for (int32_t p : view->acquire) {
    auto got = a->TryAcquire(p);
    REQUIRE(got);
    CHECK(*got);
  }
  CHECK(a->owned() == std::vector<int32_t>{0, 1, 2, 3});
  auto files = group->ListMemberFiles();
  REQUIRE(files);
  CHECK(*files == std::vector<std::string>{"a"});
}

TEST_CASE("group member: extra members are idle, and a reset waits for no member") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto a = GroupMember::Join(&*group, "a", "t", 1);
  auto b = GroupMember::Join(&*group, "b", "t", 1);
  REQUIRE(a);
  REQUIRE(b);
  Settle({&*a, &*b});
  CHECK(a->owned().size() + b->owned().size() == 1);
  const std::vector<OffsetCommit> reset{OffsetCommit{"t", 0, 0, -1, 0}};
  CHECK(group->Commit(reset, "", CommitKind::kReset).code() == Code::kBusy);
  a->Leave();
  b->Leave();
  CHECK(group->Commit(reset, "", CommitKind::kReset).ok());
}

TEST_CASE("group member: at most once, what was committed ahead and not handed out is handed "
          "back when the partition is let go") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  // A batch of offsets 0..999 committed before its first message was
  // handed out; 400 were handed out when the partition moves.
  const std::vector<OffsetCommit> ahead{{"t", 2, 1000, 5, 0, -1}};
  REQUIRE(group->Commit(ahead, "a").ok());
  auto back = HandBackCommit("t", 2, 1000, 400, 5);
  REQUIRE(back);
  CHECK(back->topic == "t");
  CHECK(back->partition == 2);
  CHECK(back->offset == 400);
  CHECK(back->leader_epoch == 5);
  CHECK(back->lower_from == 1000);
  CHECK(back->dead_letters_added == 0);
  REQUIRE(group->Commit(std::span<const OffsetCommit>(&*back, 1), "a").ok());
  auto state = group->Read();
  REQUIRE(state);
  const CommittedOffset* c = state->Find("t", 2);
  REQUIRE(c != nullptr);
  CHECK(c->offset == 400);  // the next owner starts at the first message not handed out
  CHECK(c->leader_epoch == 5);

  // Nothing to hand back: every message committed was handed out, nothing
  // was committed ahead, or nothing is known.
  CHECK_FALSE(HandBackCommit("t", 2, 1000, 1000, 5));
  CHECK_FALSE(HandBackCommit("t", 2, 1000, 1200, 5));
  CHECK_FALSE(HandBackCommit("t", 2, -1, 400, 5));
  CHECK_FALSE(HandBackCommit("t", 2, 1000, -1, 5));

  // Accepted only while the offset is still the one committed ahead: once
  // anything else was committed (R31), the hand-back is refused whole.
  const std::vector<OffsetCommit> later{{"t", 2, 1500, 5, 0, -1}};
  REQUIRE(group->Commit(later, "a").ok());
  auto stale = HandBackCommit("t", 2, 1000, 600, 5);
  REQUIRE(stale);
  Status refused = group->Commit(std::span<const OffsetCommit>(&*stale, 1), "a");
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("R31"));
  state = group->Read();
  REQUIRE(state);
  CHECK(state->Find("t", 2)->offset == 1500);
}
