// A static member's session (format-spec/group.md §14.5 R65, §14.6): the
// lease file's rules, when a session holds, and a member's partitions
// waiting for it through its session.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "format/format.h"
#include "mq/assignment.h"
#include "mq/crc32c.h"
#include "mq/group_member.h"
#include "mq/member_lease.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string MakeDataDir(const TempDir& tmp) {
  std::string dir = tmp / "data";
  auto d = DataDir::Open(dir, true);
  REQUIRE(d);
  return dir;
}

std::string Hex(std::span<const std::byte> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (std::byte b : bytes) {
    s += kDigits[static_cast<unsigned>(b) >> 4];
    s += kDigits[static_cast<unsigned>(b) & 15];
  }
  return s;
}

// `bytes` with the crc recomputed (a rule past the crc is what breaks).
std::vector<std::byte> Recrc(std::vector<std::byte> bytes) {
  const uint32_t crc = Crc32c(std::span<const std::byte>(bytes).subspan(12));
  for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<std::byte>(crc >> (24 - 8 * i));
  return bytes;
}

void CheckBreaks(const std::vector<std::byte>& bytes, uint64_t position) {
  auto got = DecodeMemberLease(bytes, "a.lease");
  REQUIRE_FALSE(got);
  CHECK(got.error().code() == Code::kCorruption);
  CHECK(got.error().rule() == "R65");
  CHECK(got.error().position() == position);
}

}  // namespace

TEST_CASE("member lease: R65 worked example and every rule") {
  const MemberLease lease{45000, 1700000000000};
  const std::vector<std::byte> bytes = EncodeMemberLease(lease);
  // group.md §14.5's worked example.
  CHECK(Hex(bytes) ==
        "4d51474c00010000bbb0d935"
        "00000000000000000000afc80000018bcfe56800");
  auto back = DecodeMemberLease(bytes, "a.lease");
  REQUIRE(back);
  CHECK(*back == lease);

  auto bad = bytes;
  bad.push_back(std::byte{0});
  CheckBreaks(bad, 32);  // not 32 bytes
  CheckBreaks(std::vector<std::byte>(bytes.begin(), bytes.begin() + 20), 20);
  bad = bytes;
  bad[0] = std::byte{0};
  CheckBreaks(bad, 0);  // magic
  bad = bytes;
  bad[5] = std::byte{0};
  CheckBreaks(bad, 4);  // version 0
  bad = bytes;
  bad[5] = std::byte{2};
  auto newer = DecodeMemberLease(bad, "a.lease");
  REQUIRE_FALSE(newer);
  CHECK(newer.error().code() == Code::kUnsupported);
  bad = bytes;
  bad[7] = std::byte{1};
  CheckBreaks(bad, 6);  // reserved
  bad = bytes;
  bad[20] ^= std::byte{1};
  CheckBreaks(bad, 8);  // crc
  bad = bytes;
  bad[15] = std::byte{1};
  CheckBreaks(Recrc(bad), 12);                        // second reserved field
  CheckBreaks(Recrc(EncodeMemberLease({0, 1})), 16);  // timeout 0
  CheckBreaks(Recrc(EncodeMemberLease({kMaxSessionTimeoutMs + 1, 1})), 16);
  CheckBreaks(Recrc(EncodeMemberLease({1000, -1})), 24);  // last seen
}

TEST_CASE("member lease: a session holds until last seen plus its timeout") {
  CHECK_FALSE(LeaseHolds(std::nullopt, 0));
  const MemberLease lease{3000, 10000};
  CHECK(LeaseHolds(lease, 10000));
  CHECK(LeaseHolds(lease, 12999));
  CHECK_FALSE(LeaseHolds(lease, 13000));
  CHECK_FALSE(LeaseHolds(lease, 20000));
  CHECK(LeaseRefreshMs(3000) == 750);
  CHECK(LeaseRefreshMs(45000) == 1000);
  CHECK(LeaseRefreshMs(2) == 1);
}

TEST_CASE("member lease: a static member's partitions wait for it through its session") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  const std::vector<std::string> both{"a", "b"};
  const std::vector<int32_t> a_share = AssignedTo(both, "t", 8, "a");
  const std::vector<int32_t> b_share = AssignedTo(both, "t", 8, "b");
  REQUIRE_FALSE(a_share.empty());

  // a is static with a session of 60 s, and owns its share; it stops (a
  // clean stop, as a crash: its locks go, its lease and note stay).
  {
    auto a = GroupMember::Join(&*group, "a", "t", 8);
    REQUIRE(a);
    REQUIRE(a->KeepSession(60000).ok());
    auto b = GroupMember::Join(&*group, "b", "t", 8);
    REQUIRE(b);
    auto view = a->Poll();
    REQUIRE(view);
    CHECK(view->target == a_share);
    for (int32_t p : view->acquire) REQUIRE(a->TryAcquire(p).value());
    a->Leave();
    const int64_t left = NowMs();

    // Within the session b keeps its share and takes nothing of a's: a is
    // a member still, not running.
    view = b->Poll();
    REQUIRE(view);
    CHECK(view->members == both);
    CHECK(view->absent == std::vector<std::string>{"a"});
    CHECK(view->target == b_share);
    CHECK(view->removed_dead == 0);
    auto lease = ReadMemberLease(
        OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false).value().get(), "a");
    REQUIRE(lease);
    REQUIRE(*lease);
    CHECK((*lease)->session_timeout_ms == 60000);
    CHECK((*lease)->last_seen >= left - 1000);
    CHECK((*lease)->last_seen <= left);
    for (int32_t p : view->acquire) REQUIRE(b->TryAcquire(p).value());

    // a restarts under its id within the session: the same share, which
    // nobody took meanwhile, and no change of members.
    auto again = GroupMember::Join(&*group, "a", "t", 8);
    REQUIRE(again);
    REQUIRE(again->KeepSession(60000).ok());
    view = again->Poll();
    REQUIRE(view);
    CHECK(view->target == a_share);
    CHECK(view->acquire == a_share);
    for (int32_t p : view->acquire) CHECK(again->TryAcquire(p).value());
    view = b->Poll();
    REQUIRE(view);
    CHECK(view->absent.empty());
    CHECK_FALSE(view->changed);
    again->Leave();

    // Once the session has ended (a Poll at a later time), a is gone: its
    // files are removed and b is assigned every partition.
    view = b->Poll(NowMs() + 60001);
    REQUIRE(view);
    CHECK(view->members == std::vector<std::string>{"b"});
    CHECK(view->absent.empty());
    CHECK(view->removed_dead == 1);
    CHECK(view->target == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
    auto files = group->ListMemberFiles();
    REQUIRE(files);
    CHECK(*files == std::vector<std::string>{"b"});
    auto gone = ReadMemberLease(
        OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false).value().get(), "a");
    REQUIRE(gone);
    CHECK_FALSE(*gone);
  }
}

TEST_CASE("member lease: an absent static member keeps its share of each topic it reads") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  // a and b read x and y, c reads y only (R64): each topic is assigned
  // among its own subscribers, a absent included.
  const std::vector<TopicPartitions> xy{{"x", 8}, {"y", 6}};
  const std::vector<std::string> ab{"a", "b"}, abc{"a", "b", "c"};
  auto a = GroupMember::Join(&*group, "a", xy);
  REQUIRE(a);
  REQUIRE(a->KeepSession(60000).ok());
  auto b = GroupMember::Join(&*group, "b", xy);
  REQUIRE(b);
  auto c = GroupMember::Join(&*group, "c", std::vector<TopicPartitions>{{"y", 6}});
  REQUIRE(c);
  auto view = a->Poll();
  REQUIRE(view);
  REQUIRE(view->topics.size() == 2);
  const std::vector<int32_t> a_y = view->topics[1].target;
  CHECK(a_y == AssignedTo(abc, "y", 6, "a"));
  REQUIRE_FALSE(a_y.empty());
  a->Leave();
  // Nobody takes a's partitions of y while its session holds.
  auto none_of_a = [&](const std::vector<int32_t>& target) {
    for (int32_t p : a_y)
      if (std::find(target.begin(), target.end(), p) != target.end()) return false;
    return true;
  };

  view = b->Poll();
  REQUIRE(view);
  CHECK(view->absent == std::vector<std::string>{"a"});
  REQUIRE(view->topics.size() == 2);
  CHECK(view->topics[0].topic == "x");
  CHECK(view->topics[0].subscribers == ab);
  CHECK(view->topics[0].target == AssignedTo(ab, "x", 8, "b"));
  CHECK(view->topics[1].topic == "y");
  CHECK(view->topics[1].subscribers == abc);
  CHECK(view->topics[1].target == AssignedTo(abc, "y", 6, "b"));
  CHECK(none_of_a(view->topics[1].target));
  view = c->Poll();
  REQUIRE(view);
  REQUIRE(view->topics.size() == 1);
  CHECK(view->topics[0].subscribers == abc);
  CHECK(view->topics[0].target == AssignedTo(abc, "y", 6, "c"));
  CHECK(none_of_a(view->topics[0].target));

  // Once a's session has ended, b and c share y, and b has all of x.
  view = c->Poll(NowMs() + 60001);
  REQUIRE(view);
  CHECK(view->absent.empty());
  CHECK(view->topics[0].target == AssignedTo(std::vector<std::string>{"b", "c"}, "y", 6, "c"));
  view = b->Poll(NowMs() + 60001);
  REQUIRE(view);
  CHECK(view->topics[0].target == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(view->topics[1].target == AssignedTo(std::vector<std::string>{"b", "c"}, "y", 6, "b"));
}

TEST_CASE("member lease: a killed static member keeps its share, a dynamic one does not") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  for (const int64_t session : {int64_t{0}, int64_t{60000}}) {
    INFO("session " << session);
    auto b = GroupMember::Join(&*group, "b", "t", 4);
    REQUIRE(b);
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(ready[0]);
      auto g = Group::Open(dir, "g", false);
      if (!g) ::_exit(1);
      auto m = GroupMember::Join(&*g, "a", "t", 4);
      if (!m) ::_exit(2);
      if (session > 0 && !m->KeepSession(session).ok()) ::_exit(3);
      auto v = m->Poll();
      if (!v) ::_exit(4);
      for (int32_t p : v->acquire) (void)m->TryAcquire(p);
      (void)!::write(ready[1], "x", 1);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char x;
    REQUIRE(::read(ready[0], &x, 1) == 1);
    ::close(ready[0]);
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    auto view = b->Poll();
    REQUIRE(view);
    if (session == 0) {
      CHECK(view->members == std::vector<std::string>{"b"});
      CHECK(view->target == std::vector<int32_t>{0, 1, 2, 3});
    } else {
      CHECK(view->members == std::vector<std::string>{"a", "b"});
      CHECK(view->absent == std::vector<std::string>{"a"});
      CHECK(view->target == AssignedTo(std::vector<std::string>{"a", "b"}, "t", 4, "b"));
      // The session ends: a's partitions move to b.
      view = b->Poll(NowMs() + session + 1);
      REQUIRE(view);
      CHECK(view->target == std::vector<int32_t>{0, 1, 2, 3});
    }
    b->Leave();
  }
}

TEST_CASE("member lease: a lease that breaks R65 is no session") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  auto a = GroupMember::Join(&*group, "a", "t", 4);
  REQUIRE(a);
  REQUIRE(a->KeepSession(60000).ok());
  a->Leave();
  const std::string path = dir + "/groups/g/members/a.lease";
  {
    const int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, "\xff", 1, 20) == 1);
    ::close(fd);
  }
  auto read = ReadMemberLeaseFile(path);
  REQUIRE_FALSE(read);
  CHECK(read.error().rule() == "R65");
  auto b = GroupMember::Join(&*group, "b", "t", 4);
  REQUIRE(b);
  auto view = b->Poll();
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"b"});
  CHECK(view->target == std::vector<int32_t>{0, 1, 2, 3});
}
