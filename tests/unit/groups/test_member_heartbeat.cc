// A running member's heartbeat and fencing a stuck member by termination
// (format-spec/group.md §14.5 R69, §14.6 Stuck members).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "format/format.h"
#include "io/fence_seam.h"
#include "mq/crc32c.h"
#include "mq/group_member.h"
#include "mq/member_heartbeat.h"
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

std::string Hex(std::span<const std::byte> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (std::byte b : bytes) {
    s += kDigits[static_cast<unsigned>(b) >> 4];
    s += kDigits[static_cast<unsigned>(b) & 15];
  }
  return s;
}

std::vector<std::byte> Recrc(std::vector<std::byte> bytes) {
  const uint32_t crc = Crc32c(std::span<const std::byte>(bytes).subspan(12));
  for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<std::byte>(crc >> (24 - 8 * i));
  return bytes;
}

void CheckBreaks(const std::vector<std::byte>& bytes, uint64_t position) {
  auto got = DecodeMemberHeartbeat(bytes, "a.alive");
  REQUIRE_FALSE(got);
  CHECK(got.error().code() == Code::kCorruption);
  CHECK(got.error().rule() == "R69");
  CHECK(got.error().position() == position);
}

std::string OwnHost() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

// A child that stops itself (SIGSTOP) once running; waited for until it is
// stopped.
pid_t StoppedChild() {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(status));
  return child;
}

// Whether `child` was killed by SIGKILL (reaped), or still exists.
bool KilledBySigkill(pid_t child) {
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}
bool StillThere(pid_t child) {
  int status = 0;
  return ::waitpid(child, &status, WNOHANG) == 0;
}
void Reap(pid_t child) {
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
}
// Kills and reaps a child a failed assertion left behind (stopped).
struct ChildGuard {
  pid_t pid;
  ~ChildGuard() {
    if (pid > 0 && StillThere(pid)) Reap(pid);
  }
};

}  // namespace

TEST_CASE("member heartbeat: R69 worked example and every rule") {
  const MemberHeartbeat hb{4242, 123456, 300000, 86400000};
  const std::vector<std::byte> bytes = EncodeMemberHeartbeat(hb);
  // group.md §14.5's worked example.
  CHECK(Hex(bytes) ==
        "4d51474800010000a6c32226"
        "00001092000000000001e240"
        "00000000000493e0"
        "0000000005265c00");
  auto back = DecodeMemberHeartbeat(bytes, "a.alive");
  REQUIRE(back);
  CHECK(*back == hb);

  auto bad = bytes;
  bad.push_back(std::byte{0});
  CheckBreaks(bad, 40);  // not 40 bytes
  CheckBreaks(std::vector<std::byte>(bytes.begin(), bytes.begin() + 20), 20);
  bad = bytes;
  bad[0] = std::byte{0};
  CheckBreaks(bad, 0);  // magic
  bad = bytes;
  bad[5] = std::byte{0};
  CheckBreaks(bad, 4);  // version 0
  bad = bytes;
  bad[5] = std::byte{2};
  auto newer = DecodeMemberHeartbeat(bad, "a.alive");
  REQUIRE_FALSE(newer);
  CHECK(newer.error().code() == Code::kUnsupported);
  bad = bytes;
  bad[7] = std::byte{1};
  CheckBreaks(bad, 6);  // reserved
  bad = bytes;
  bad[20] ^= std::byte{1};
  CheckBreaks(bad, 8);                                              // crc
  CheckBreaks(Recrc(EncodeMemberHeartbeat({0, 1, 1000, 1})), 12);   // pid 0
  CheckBreaks(Recrc(EncodeMemberHeartbeat({-5, 1, 1000, 1})), 12);  // pid < 0
  CheckBreaks(Recrc(EncodeMemberHeartbeat({1, -1, 1000, 1})), 16);  // start time
  CheckBreaks(Recrc(EncodeMemberHeartbeat({1, 1, 0, 1})), 24);      // deadline 0
  CheckBreaks(Recrc(EncodeMemberHeartbeat({1, 1, kMaxHeartbeatDeadlineMs + 1, 1})), 24);
  CheckBreaks(Recrc(EncodeMemberHeartbeat({1, 1, 1000, -1})), 32);  // last poll
}

TEST_CASE("member heartbeat: overdue after its deadline plus the margin") {
  const MemberHeartbeat hb{100, 1, 2000, 10000};
  CHECK_FALSE(HeartbeatOverdue(hb, 10000));
  CHECK_FALSE(HeartbeatOverdue(hb, 12000));  // the deadline itself: only slow
  CHECK_FALSE(HeartbeatOverdue(hb, 10000 + 2000 + kHeartbeatMarginMs));
  CHECK(HeartbeatOverdue(hb, 10000 + 2000 + kHeartbeatMarginMs + 1));
  CHECK(kHeartbeatMarginMs == 5000);
  CHECK(HeartbeatRefreshMs(2000) == 500);
  CHECK(HeartbeatRefreshMs(300000) == 1000);
  CHECK(HeartbeatRefreshMs(2) == 1);
  // --exec: every attempt (each up to the interval), the last one's kill
  // grace, and the backoffs between them (100, 200, capped at 150 here).
  CHECK(HandlerDeadlineMs(1000, 5000, 1, 100, 10000) == 6000);
  CHECK(HandlerDeadlineMs(1000, 5000, 3, 100, 10000) == 3000 + 5000 + 100 + 200);
  CHECK(HandlerDeadlineMs(1000, 0, 4, 100, 150) == 4000 + 100 + 150 + 150);
  CHECK(HandlerDeadlineMs(86400000, 5000, 1000000, 100, 10000) == kMaxHeartbeatDeadlineMs);
}

TEST_CASE("member heartbeat: stuck once overdue, confirmed, and unchanged for its deadline") {
  const MemberHeartbeat hb{100, 1, 2000, 10000};
  const int64_t overdue = 10000 + 2000 + kHeartbeatMarginMs + 1;
  // Watched from its last poll on: stuck once overdue and confirmed a
  // second later.
  HeartbeatWatch w;
  CHECK_FALSE(WatchHeartbeat(&w, hb, 10000));
  CHECK_FALSE(WatchHeartbeat(&w, hb, overdue - 1));
  CHECK_FALSE(WatchHeartbeat(&w, hb, overdue));
  CHECK(w.overdue_since == overdue);
  CHECK_FALSE(WatchHeartbeat(&w, hb, overdue + kFenceConfirmMs - 1));
  CHECK(WatchHeartbeat(&w, hb, overdue + kFenceConfirmMs));
  // A new heartbeat (its member polled, or another process has the id)
  // starts again, even one that is overdue by its timestamps already.
  MemberHeartbeat later = hb;
  later.last_poll = 10001;
  CHECK_FALSE(WatchHeartbeat(&w, later, overdue + kFenceConfirmMs + 1));
  CHECK(w.seen_since == overdue + kFenceConfirmMs + 1);
  MemberHeartbeat other = later;
  other.pid = 101;
  CHECK_FALSE(WatchHeartbeat(&w, other, overdue + 3 * kFenceConfirmMs));
  CHECK(w.seen_since == overdue + 3 * kFenceConfirmMs);
  // Overdue by its timestamps (a clock that reads differently, or a
  // reader that just started to watch), yet read unchanged for less than
  // its deadline plus the margin: not stuck, however long confirmed.
  HeartbeatWatch fresh;
  const int64_t t = 1000000;
  CHECK_FALSE(WatchHeartbeat(&fresh, hb, t));
  CHECK_FALSE(WatchHeartbeat(&fresh, hb, t + 2 * kFenceConfirmMs));
  CHECK_FALSE(WatchHeartbeat(&fresh, hb, t + 2000 + kHeartbeatMarginMs));
  CHECK(WatchHeartbeat(&fresh, hb, t + 2000 + kHeartbeatMarginMs + 1));
  // No longer overdue (its member polled): the confirmation starts again.
  HeartbeatWatch back;
  CHECK_FALSE(WatchHeartbeat(&back, hb, 10000));
  CHECK_FALSE(WatchHeartbeat(&back, hb, overdue));
  CHECK_FALSE(WatchHeartbeat(&back, hb, overdue - 1));  // a clock read earlier
  CHECK(back.overdue_since == -1);
  CHECK_FALSE(WatchHeartbeat(&back, hb, overdue + kFenceConfirmMs));
  CHECK(WatchHeartbeat(&back, hb, overdue + 2 * kFenceConfirmMs));
}

TEST_CASE("member heartbeat: a process's start time tells it from a later one with its pid") {
  auto own = ProcessStartTime(static_cast<int32_t>(::getpid()));
  REQUIRE(own);
  auto hb = OwnHeartbeat(1000, 5);
  REQUIRE(hb);
  CHECK(hb->pid == ::getpid());
  CHECK(hb->start_time == *own);
  CHECK(hb->deadline_ms == 1000);
  CHECK(hb->last_poll == 5);
  const pid_t child = StoppedChild();
  ChildGuard guard{child};
  auto theirs = ProcessStartTime(child);
  REQUIRE(theirs);
  CHECK(*theirs >= *own);
  Reap(child);
  auto gone = ProcessStartTime(child);
  REQUIRE_FALSE(gone);
  CHECK(gone.error().code() == Code::kNotFound);
}

TEST_CASE("member heartbeat: fencing kills only the process that wrote it, on this host") {
  const std::string host = OwnHost();
  const pid_t child = StoppedChild();
  ChildGuard guard{child};
  auto start = ProcessStartTime(child);
  REQUIRE(start);
  const MemberHeartbeat hb{static_cast<int32_t>(child), *start, 1000, 0};

  // Another host's member (its note says so), or a note without a host:
  // never touched.
  auto r = FenceStuckMember(hb, host + "-other", child, host);
  REQUIRE(r);
  CHECK(*r == Fence::kOtherHost);
  r = FenceStuckMember(hb, "", child, host);
  REQUIRE(r);
  CHECK(*r == Fence::kOtherHost);
  // The note's pid is not the heartbeat's.
  r = FenceStuckMember(hb, host, child + 1, host);
  REQUIRE(r);
  CHECK(*r == Fence::kMismatch);
  r = FenceStuckMember(hb, host, std::nullopt, host);
  REQUIRE(r);
  CHECK(*r == Fence::kMismatch);
  // Another process under the pid (its start time differs).
  MemberHeartbeat reused = hb;
  reused.start_time = *start + 1;
  r = FenceStuckMember(reused, host, child, host);
  REQUIRE(r);
  CHECK(*r == Fence::kGone);
  // The caller itself.
  auto self = OwnHeartbeat(1000, 0);
  REQUIRE(self);
  r = FenceStuckMember(*self, host, ::getpid(), host);
  REQUIRE(r);
  CHECK(*r == Fence::kSelf);
  CHECK(StillThere(child));

  // The process that wrote it, stopped: killed.
  r = FenceStuckMember(hb, host, child, host);
  REQUIRE(r);
  CHECK(*r == Fence::kKilled);
  CHECK(KilledBySigkill(child));
  // Gone: nothing more is sent.
  r = FenceStuckMember(hb, host, child, host);
  REQUIRE(r);
  CHECK(*r == Fence::kGone);
}

TEST_CASE("member heartbeat: a member the kernel does not let us signal is left alone") {
  // A stuck member under another uid: pidfd_send_signal fails with EPERM.
  // Fencing says so (kDenied: the caller warns, and the member keeps its
  // partitions while its lock is held) and sends nothing.
  const std::string host = OwnHost();
  const pid_t child = StoppedChild();
  ChildGuard guard{child};
  auto start = ProcessStartTime(child);
  REQUIRE(start);
  const MemberHeartbeat hb{static_cast<int32_t>(child), *start, 1000, 0};
  static int calls = 0;
  calls = 0;
  const fence_seam::SendSignal real = fence_seam::send_signal;
  fence_seam::send_signal = [](int, int) {
    ++calls;
    errno = EPERM;
    return -1;
  };
  auto r = FenceStuckMember(hb, host, child, host);
  fence_seam::send_signal = real;
  REQUIRE(r);
  CHECK(*r == Fence::kDenied);
  CHECK(calls == 1);
  CHECK(StillThere(child));
  // Any other failure of the signal is an error naming the call.
  fence_seam::send_signal = [](int, int) {
    errno = EINVAL;
    return -1;
  };
  r = FenceStuckMember(hb, host, child, host);
  fence_seam::send_signal = real;
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("pidfd_send_signal"));
  CHECK(StillThere(child));
}

TEST_CASE("member heartbeat: a stopped member is fenced once overdue and confirmed") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  const int64_t t0 = MonotonicNowMs();
  for (const bool heartbeat : {false, true}) {
    INFO("heartbeat " << heartbeat);
    // a joins in a child process, keeps a heartbeat (deadline 1000 ms),
    // owns every partition, then stops.
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
      if (heartbeat && !m->KeepHeartbeat(1000, t0).ok()) ::_exit(3);
      auto v = m->Poll(kNoTimestamp, t0);
      if (!v) ::_exit(4);
      for (int32_t p : v->acquire) (void)m->TryAcquire(p);
      (void)!::write(ready[1], "x", 1);
      ::raise(SIGSTOP);
      ::_exit(0);
    }
    ChildGuard guard{child};
    ::close(ready[1]);
    char x;
    REQUIRE(::read(ready[0], &x, 1) == 1);
    ::close(ready[0]);
    int status = 0;
    REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
    REQUIRE(WIFSTOPPED(status));

    auto b = GroupMember::Join(&*group, "b", "t", 4);
    REQUIRE(b);
    REQUIRE(b->KeepHeartbeat(1000, t0).ok());
    const int64_t overdue = t0 + 1000 + kHeartbeatMarginMs + 1;
    // b watches a's heartbeat from the time a wrote it.
    auto view = b->Poll(kNoTimestamp, t0);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    // Within the deadline and the margin: a is only slow.
    view = b->Poll(kNoTimestamp, overdue - 1);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    // Overdue: confirmed only by a Poll at least kFenceConfirmMs later.
    view = b->Poll(kNoTimestamp, overdue);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    CHECK(view->members == std::vector<std::string>{"a", "b"});
    view = b->Poll(kNoTimestamp, overdue + kFenceConfirmMs - 1);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    CHECK(StillThere(child));
    if (!heartbeat) {
      // No heartbeat (an earlier mq): never fenced, however late.
      view = b->Poll(kNoTimestamp, overdue + 100 * kFenceConfirmMs);
      REQUIRE(view);
      CHECK(view->fenced.empty());
      CHECK(StillThere(child));
      Reap(child);
      b->Leave();
      continue;
    }
    // A heartbeat written since (a poll of a's: its lastPoll moved, still
    // overdue by now) starts the watch again: b fences a only once it has
    // read that heartbeat unchanged for a's deadline plus the margin.
    auto members = OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false);
    REQUIRE(members);
    auto hb = ReadMemberHeartbeat(members->get(), "a");
    REQUIRE(hb);
    REQUIRE(*hb);
    CHECK((*hb)->pid == child);
    MemberHeartbeat later = **hb;
    later.last_poll = t0 + 1;
    REQUIRE(WriteMemberHeartbeat(members->get(), "a", later).ok());
    const int64_t rewritten = overdue + kFenceConfirmMs + 1;
    view = b->Poll(kNoTimestamp, rewritten);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    view = b->Poll(kNoTimestamp, rewritten + kFenceConfirmMs);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    view = b->Poll(kNoTimestamp, rewritten + 1000 + kHeartbeatMarginMs);
    REQUIRE(view);
    CHECK(view->fenced.empty());
    CHECK(StillThere(child));
    view = b->Poll(kNoTimestamp, rewritten + 1000 + kHeartbeatMarginMs + 1);
    REQUIRE(view);
    REQUIRE(view->fenced.size() == 1);
    CHECK(view->fenced[0].id == "a");
    CHECK(view->fenced[0].outcome == Fence::kKilled);
    CHECK(view->fenced[0].heartbeat.pid == child);
    CHECK(KilledBySigkill(child));
    // Its locks went with it: the next Poll removes its files and gives b
    // every partition.
    view = b->Poll(kNoTimestamp, rewritten + 1000 + kHeartbeatMarginMs + 2);
    REQUIRE(view);
    CHECK(view->members == std::vector<std::string>{"b"});
    CHECK(view->target == std::vector<int32_t>{0, 1, 2, 3});
    CHECK(view->removed_dead == 1);
    auto left = ReadMemberHeartbeat(members->get(), "a");
    REQUIRE(left);
    CHECK_FALSE(*left);
    b->Leave();
    // b left: its own heartbeat is gone too.
    auto own = ReadMemberHeartbeat(members->get(), "b");
    REQUIRE(own);
    CHECK_FALSE(*own);
  }
}

namespace {

// Stops the process (SIGSTOP) at its rename of the offsets file, after
// saying so on `ready`: a member stopped inside its commit, holding
// commit.lock with offsets.tmp written and not renamed yet.
class StopAtRename : public FileSystemWrapper {
 public:
  StopAtRename(FileSystem* target, int ready) : FileSystemWrapper(target), ready_(ready) {}
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    if (to == kGroupOffsetsFile) {
      (void)!::write(ready_, "x", 1);
      ::raise(SIGSTOP);
    }
    return FileSystemWrapper::Rename(dir_fd, from, to);
  }

 private:
  int ready_;
};

// A member `id` of group g reading 2 partitions of t, joined in a child
// process, whose heartbeat says it last polled a minute ago with a deadline
// of 1000 ms (overdue for every reader from the start), stopped inside its
// commit of t-0 at 7 (StopAtRename); waited for until it is stopped.
pid_t MemberStoppedInCommit(const std::string& dir, const std::string& id) {
  const int64_t t0 = MonotonicNowMs() - 60000;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    StopAtRename fs(FileSystem::Default(), ready[1]);
    auto g = Group::Open(dir, "g", false, &fs);
    if (!g) ::_exit(1);
    auto m = GroupMember::Join(&*g, id, "t", 2);
    if (!m) ::_exit(2);
    if (!m->KeepHeartbeat(1000, t0).ok()) ::_exit(3);
    const OffsetCommit c{"t", 0, 7};
    (void)g->Commit(std::span(&c, 1), id);
    ::_exit(0);
  }
  ::close(ready[1]);
  char x;
  const bool said = ::read(ready[0], &x, 1) == 1;
  ::close(ready[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(said);
  REQUIRE(WIFSTOPPED(status));
  return child;
}

}  // namespace

TEST_CASE("R32 R69: a member stopped inside its commit is fenced by a member waiting to commit") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  const pid_t child = MemberStoppedInCommit(dir, "a");
  ChildGuard guard{child};
  auto b = GroupMember::Join(&*group, "b", "t", 2);
  REQUIRE(b);
  REQUIRE(b->KeepHeartbeat(1000).ok());
  // b first read a's heartbeat 10 s ago (its Poll is given that time):
  // long enough for R69's confirmation and a's deadline plus the margin.
  // a (the smallest id) counts rebalances: b's Poll writes nothing.
  auto view = b->Poll(kNoTimestamp, MonotonicNowMs() - 10000);
  REQUIRE(view);
  CHECK(view->fenced.empty());
  CHECK(view->members == std::vector<std::string>{"a", "b"});
  CHECK(StillThere(child));
  auto held = FileLock::Acquire(group->dir_fd(), format::kGroupCommitLock, LockMode::kExclusive,
                                LockWait::kTry);
  REQUIRE_FALSE(held);
  CHECK(held.error().code() == Code::kBusy);

  SECTION("b's commit waits, fences a as one of b's polls, then commits") {
    const OffsetCommit c{"t", 1, 5};
    int waits = 0;
    const CommitWait wait = [&] {
      ++waits;
      return b->WhileLockedOut();
    };
    REQUIRE(group
                ->Commit(std::span(&c, 1), "b", CommitKind::kForward, kNoTimestamp, nullptr,
                         CommitSync::kDurable, wait)
                .ok());
    CHECK(waits >= 1);
    CHECK(KilledBySigkill(child));
    auto state = group->Read();
    REQUIRE(state);
    const CommittedOffset* mine = state->Find("t", 1);
    REQUIRE(mine != nullptr);
    CHECK(mine->offset == 5);
    CHECK(mine->member_id == "b");
    // a's commit, cut before its rename, is not in the file.
    CHECK(state->Find("t", 0) == nullptr);
    // The next Poll reports the fencing done while waiting and, a's locks
    // gone with it, gives b every partition.
    view = b->Poll();
    REQUIRE(view);
    REQUIRE(view->fenced.size() == 1);
    CHECK(view->fenced[0].id == "a");
    CHECK(view->fenced[0].outcome == Fence::kKilled);
    CHECK(view->fenced[0].heartbeat.pid == child);
    CHECK(view->members == std::vector<std::string>{"b"});
    CHECK(view->target == std::vector<int32_t>{0, 1});
    view = b->Poll();
    REQUIRE(view);
    CHECK(view->fenced.empty());
  }
  SECTION("an interrupt ends the wait: nothing is written") {
    volatile std::sig_atomic_t interrupted = 1;
    b->InterruptWaitsOn(&interrupted);
    const OffsetCommit c{"t", 1, 5};
    Status s = group->Commit(std::span(&c, 1), "b", CommitKind::kForward, kNoTimestamp, nullptr,
                             CommitSync::kDurable, b->LockedOutWait());
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == Code::kBusy);
    CHECK_THAT(s.message(), Catch::Contains("interrupted") && Catch::Contains("commit.lock"));
    CHECK(StillThere(child));
    auto state = group->Read();
    REQUIRE(state);
    CHECK(state->offsets.empty());
  }
}

TEST_CASE(
    "R32 R69: a rebalance count waiting for commit.lock fences a member stopped inside its "
    "commit") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  auto group = Group::Open(dir, "g", true);
  REQUIRE(group);
  const pid_t child = MemberStoppedInCommit(dir, "z");
  ChildGuard guard{child};
  auto b = GroupMember::Join(&*group, "b", "t", 2);
  REQUIRE(b);
  REQUIRE(b->KeepHeartbeat(1000).ok());
  // b's first Poll is a change it counts (the smallest running id): the
  // count waits for commit.lock, and the wait fences z, whose heartbeat
  // this Poll (given a time 10 s ago) started watching.
  auto view = b->Poll(kNoTimestamp, MonotonicNowMs() - 10000);
  REQUIRE(view);
  CHECK(view->members == std::vector<std::string>{"b", "z"});
  CHECK(KilledBySigkill(child));
  auto state = group->Read();
  REQUIRE(state);
  CHECK(state->rebalances == 1);
  CHECK(state->offsets.empty());
  view = b->Poll();
  REQUIRE(view);
  REQUIRE(view->fenced.size() == 1);
  CHECK(view->fenced[0].id == "z");
  CHECK(view->members == std::vector<std::string>{"b"});
}
