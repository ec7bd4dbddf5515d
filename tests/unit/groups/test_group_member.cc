// GroupMember (format-spec/group.md §14.6): membership by locks, balanced
// assignment, takeover of a dead member's partitions, never two owners.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "format/format.h"
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

TEST_CASE("group member: members reading different topics each own all of their topic") {
  // One group, member x reading topic a and y reading b: each topic's
  // partitions go to the members that read it, none to the other.
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto x = GroupMember::Join(&*group, "x", "a", 4);
  auto y = GroupMember::Join(&*group, "y", "b", 4);
  REQUIRE(x);
  REQUIRE(y);
  Settle({&*x, &*y});
  CHECK(x->owned() == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(y->owned() == std::vector<int32_t>{0, 1, 2, 3});
  auto view = x->Poll();
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"x", "y"});
  CHECK(view->subscribers == std::vector<std::string>{"x"});

  // A second reader of a shares a with x; y keeps all of b.
  auto z = GroupMember::Join(&*group, "z", "a", 4);
  REQUIRE(z);
  Settle({&*x, &*y, &*z});
  CHECK(x->owned().size() == 2);
  CHECK(z->owned().size() == 2);
  CHECK(y->owned() == std::vector<int32_t>{0, 1, 2, 3});
}

TEST_CASE("group member: the note says the member's topics, an earlier mq's reads every topic") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto x = GroupMember::Join(&*group, "x", "a", 4);
  REQUIRE(x);
  auto members = OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false);
  REQUIRE(members);
  auto note = ReadMemberNote(members->get(), "x");
  REQUIRE(note);
  CHECK(note->id == "x");
  CHECK(note->pid == ::getpid());
  CHECK(note->topics == std::vector<std::string>{"a"});

  const std::string two[] = {"b", "a", "b"};
  CHECK(FormatMemberNote("m", "h", 7, two) == "m h 7\ntopics a b\n");
  auto parsed = ParseMemberNote("m h 7\ntopics a b\n");
  REQUIRE(parsed);
  CHECK(parsed->host == "h");
  CHECK(parsed->topics == std::vector<std::string>{"a", "b"});
  // Being written (no newline at the end), or nothing: no note yet.
  CHECK_FALSE(ParseMemberNote(""));
  CHECK_FALSE(ParseMemberNote("m h 7\ntopics a"));
  // An earlier mq's note: no topics line.
  parsed = ParseMemberNote("m h 7\n");
  REQUIRE(parsed);
  CHECK(parsed->pid == 7);
  CHECK_FALSE(parsed->topics);

  // A live member whose file holds an earlier mq's note reads every topic:
  // x shares a with it, as that member (which counts x) expects.
  auto y = GroupMember::Join(&*group, "y", "b", 4);
  REQUIRE(y);
  auto rewrite = [&](const std::string& text) {
    auto fd = OpenRegularFileAt(members->get(), "y.lock", O_WRONLY | O_TRUNC);
    REQUIRE(fd);
    REQUIRE(::write(fd->get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  };
  // Being written: y is joining, left out (not counted, assigned nothing).
  rewrite("y host 1");
  auto view = x->Poll();
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"x"});
  CHECK(view->target.size() == 4);
  rewrite("y host 1\n");
  view = x->Poll();
  REQUIRE(view);
  CHECK(view->changed);
  CHECK(view->members == std::vector<std::string>{"x", "y"});
  CHECK(view->subscribers == std::vector<std::string>{"x", "y"});
  CHECK(view->target.size() == 2);
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

TEST_CASE(
    "group member: one that leaves while a forked child holds copies of its descriptors lets go at "
    "once") {
  // As when a handler another thread starts (fork, then exec) holds every
  // descriptor of the member: its membership and its partitions must be
  // free when it leaves, not when that child execs or exits.
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto a = GroupMember::Join(&*group, "a", "t", 2);
  REQUIRE(a);
  Settle({&*a});
  REQUIRE(a->owned() == std::vector<int32_t>{0, 1});
  ForkedHolder holder;
  REQUIRE(holder.ok());
  // One partition let go on its own (Release), the other with the member.
  REQUIRE(a->Release(1).ok());
  a->Leave();
  auto alive = group->IsMemberAlive("a");
  REQUIRE(alive);
  CHECK_FALSE(*alive);
  auto b = GroupMember::Join(&*group, "b", "t", 2, 0);
  REQUIRE(b);
  auto view = b->Poll();
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"b"});
  for (int32_t p : {0, 1}) {
    auto got = b->TryAcquire(p);
    REQUIRE(got);
    CHECK(*got);
  }
  REQUIRE(holder.Release());
}

TEST_CASE(
    "group member: at most once, what was committed ahead and not handed out is handed "
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

TEST_CASE("group member: a member of several topics owns its share of each (R64)") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  // x reads a and b, y reads b.
  auto x = GroupMember::Join(&*group, "x", std::vector<TopicPartitions>{{"b", 4}, {"a", 4}});
  auto y = GroupMember::Join(&*group, "y", "b", 4);
  REQUIRE(x);
  REQUIRE(y);
  CHECK(x->topics() == std::vector<TopicPartitions>{{"a", 4}, {"b", 4}});
  auto members = OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false);
  REQUIRE(members);
  auto note = ReadMemberNote(members->get(), "x");
  REQUIRE(note);
  CHECK(note->topics == std::vector<std::string>{"a", "b"});

  auto settle = [&] {
    for (int round = 0; round < 10; ++round) {
      bool done = true;
      for (GroupMember* m : {&*x, &*y}) {
        auto view = m->Poll();
        REQUIRE(view);
        for (const auto& t : view->topics) {
          for (int32_t p : t.release) REQUIRE(m->Release(t.topic, p).ok());
          for (int32_t p : t.acquire) {
            auto got = m->TryAcquire(t.topic, p);
            REQUIRE(got);
            done = done && *got;
          }
          done = done && t.release.empty();
        }
      }
      if (done) return;
    }
    FAIL("assignment did not settle");
  };
  settle();
  CHECK(x->owned("a") == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(y->owned("a").empty());
  CHECK(x->owned("b").size() == 2);
  CHECK(y->owned("b").size() == 2);
  std::set<int32_t> b;
  for (int32_t p : x->owned("b")) b.insert(p);
  for (int32_t p : y->owned("b")) b.insert(p);
  CHECK(b == std::set<int32_t>{0, 1, 2, 3});
  // A topic it does not read is refused.
  auto other = x->TryAcquire("c", 0);
  REQUIRE_FALSE(other);
  CHECK(other.error().code() == Code::kInvalidArgument);

  // y's subscription grows (a pattern matched a new topic c): its note
  // says so, x sees the change, and c is y's alone.
  auto view = x->Poll();
  REQUIRE(view);
  CHECK_FALSE(view->changed);
  REQUIRE(y->Subscribe(std::vector<TopicPartitions>{{"c", 2}, {"b", 4}}).ok());
  CHECK(y->topics() == std::vector<TopicPartitions>{{"b", 4}, {"c", 2}});
  note = ReadMemberNote(members->get(), "y");
  REQUIRE(note);
  CHECK(note->topics == std::vector<std::string>{"b", "c"});
  view = x->Poll();
  REQUIRE(view);
  CHECK(view->changed);
  settle();
  CHECK(y->owned("c") == std::vector<int32_t>{0, 1});
  CHECK(y->owned("b").size() == 2);  // b stays where it was

  // b is removed from the directory: y takes it out of its subscription,
  // letting its partitions of b go; its note says so, x sees the change,
  // and b's partitions are all x's (y is no reader of b any more).
  REQUIRE(y->Unsubscribe("b").ok());
  CHECK(y->topics() == std::vector<TopicPartitions>{{"c", 2}});
  CHECK(y->owned("b").empty());
  note = ReadMemberNote(members->get(), "y");
  REQUIRE(note);
  CHECK(note->topics == std::vector<std::string>{"c"});
  auto b_view = y->TryAcquire("b", 0);
  REQUIRE_FALSE(b_view);
  CHECK(b_view.error().code() == Code::kInvalidArgument);
  view = x->Poll();
  REQUIRE(view);
  CHECK(view->changed);
  settle();
  CHECK(x->owned("b") == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(y->owned("c") == std::vector<int32_t>{0, 1});
  // A topic not read is left alone.
  CHECK(y->Unsubscribe("nosuch").ok());
  CHECK(y->topics() == std::vector<TopicPartitions>{{"c", 2}});
}

// A rewritten note's old tail after the new note is ignored.
TEST_CASE("group member: a note's first topics line counts") {
  auto note = ParseMemberNote("y host 1\ntopics b c\nb\ntopics z\n");
  REQUIRE(note);
  CHECK(note->topics == std::vector<std::string>{"b", "c"});
}

TEST_CASE(
    "group member: at most once, a printing member commits its reading position before "
    "each write of its output (R67)") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  // Nothing committed yet; the buffer about to be written holds offsets
  // 0..1233 of partition 1 (some of several batches).
  auto first = OutputAheadCommit("t", 1, -1, 1234, 3);
  REQUIRE(first);
  CHECK(first->topic == "t");
  CHECK(first->partition == 1);
  CHECK(first->offset == 1234);  // past the buffer's last message, not past its batch
  CHECK(first->leader_epoch == 3);
  CHECK(first->lower_from == -1);
  CHECK(first->dead_letters_added == 0);
  REQUIRE(group->Commit(std::span<const OffsetCommit>(&*first, 1), "a").ok());
  auto state = group->Read();
  REQUIRE(state);
  CHECK(state->Find("t", 1)->offset == 1234);  // a crash now resumes past the buffer
  CHECK(state->Find("t", 1)->leader_epoch == 3);

  // The next buffer holds nothing of partition 1 (it was not read since):
  // no entry for it in that write's commit.
  CHECK_FALSE(OutputAheadCommit("t", 1, 1234, 1234, 3));
  CHECK_FALSE(OutputAheadCommit("t", 1, 1234, 1000, 3));
  CHECK_FALSE(OutputAheadCommit("t", 1, -1, -1, 3));
  auto next = OutputAheadCommit("t", 1, 1234, 2000, 3);
  REQUIRE(next);
  CHECK(next->offset == 2000);

  // A committed offset found past the log end (5000 over a log ending at
  // 1234): the commit before the first write lowers it (R31's exception).
  const std::vector<OffsetCommit> past{{"t", 4, 5000, 3, 0, -1}};
  REQUIRE(group->Commit(past, "a").ok());
  auto lowered = OutputAheadCommit("t", 4, 1234, 1300, 3, 5000);
  REQUIRE(lowered);
  CHECK(lowered->lower_from == 5000);
  REQUIRE(group->Commit(std::span<const OffsetCommit>(&*lowered, 1), "a").ok());
  state = group->Read();
  REQUIRE(state);
  CHECK(state->Find("t", 4)->offset == 1300);
}

TEST_CASE(
    "group member: R72 a split batch cut short by a stop or a revoke hands over what its "
    "messages handled alone reached") {
  // A unit of offsets 10..15 handled whole: past it.
  CHECK(UnitHandledEnd(15, true, -1) == std::optional<int64_t>(16));
  CHECK(UnitHandledEnd(15, true, 12) == std::optional<int64_t>(16));
  // Its handler failed, it was split, and offsets 10..12 were handled alone
  // when a revoke cut the split short: up to 13, so that the partition's
  // next owner does not run them again (no repeat without a crash), and
  // not past it (13..15 were not handled).
  CHECK(UnitHandledEnd(15, false, 13) == std::optional<int64_t>(13));
  // Every message handled alone before the cut: the whole unit.
  CHECK(UnitHandledEnd(15, false, 16) == std::optional<int64_t>(16));
  // Never past the unit.
  CHECK(UnitHandledEnd(15, false, 40) == std::optional<int64_t>(16));
  // Cut before any was handled (or its one message not handled): nothing.
  CHECK_FALSE(UnitHandledEnd(15, false, -1));
  CHECK_FALSE(UnitHandledEnd(-1, true, -1));
}

TEST_CASE(
    "group member: a live cut below what was handed over lowers it, and marks a committed "
    "offset above it for lowering (R31's exception)") {
  // At least once: 60 handed over and committed; the log is cut to 40.
  PartitionOffsets o{60, 60, 3, -1, -1, -1};
  LowerToCut(40, &o);
  CHECK(o.handed == 40);
  CHECK(o.epoch == -1);
  CHECK(o.committed == 40);
  CHECK(o.lower_from == 60);  // the stored offset, which the next commit lowers
  // A second cut, lower, before that commit: the stored offset is still 60.
  LowerToCut(30, &o);
  CHECK(o.handed == 30);
  CHECK(o.committed == 30);
  CHECK(o.lower_from == 60);
  // At most once: committed ahead to 80, printed up to 70; cut to 75.
  PartitionOffsets a{80, 70, 2, 80, 2, -1};
  LowerToCut(75, &a);
  CHECK(a.handed == 70);
  CHECK(a.epoch == 2);
  CHECK(a.ahead == 75);
  CHECK(a.ahead_epoch == -1);
  CHECK(a.committed == 75);
  CHECK(a.lower_from == 80);
  // A cut at or above everything changes nothing.
  PartitionOffsets b{50, 50, 1, 50, 1, -1};
  LowerToCut(50, &b);
  CHECK(b.committed == 50);
  CHECK(b.handed == 50);
  CHECK(b.ahead == 50);
  CHECK(b.lower_from == -1);
  // Nothing committed: nothing to lower.
  PartitionOffsets c{-1, 20, 0, -1, -1, -1};
  LowerToCut(10, &c);
  CHECK(c.committed == -1);
  CHECK(c.lower_from == -1);
  CHECK(c.handed == 10);
}
