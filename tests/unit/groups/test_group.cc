// Consumer-group state (format-spec/group.md §14): the offsets file (R29,
// R30), forward-only commits (R31), atomic replacement (R32), the group
// locks (R33), and the kernel file lock under them (mq/lock.h).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exit_code.h"  // tools/common: a status's exit status
#include "format/coding.h"
#include "format/format.h"
#include "group_carry.h"  // tools/common: what mq-replicate carries
#include "mq/crc32c.h"
#include "mq/group.h"
#include "mq/lock.h"
#include "mq/topic.h"
#include "storage/writer_lock.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

constexpr int64_t kT = 1700000000000;

// A fresh data directory in `tmp`.
std::string MakeDataDir(const TempDir& tmp) {
  std::string dir = tmp / "data";
  auto d = DataDir::Open(dir, true);
  REQUIRE(d);
  return dir;
}

Group OpenGroup(const std::string& dir, const std::string& name = "g", FileSystem* fs = nullptr) {
  auto g = Group::Open(dir, name, true, fs);
  REQUIRE(g);
  return std::move(*g);
}

std::vector<OffsetCommit> One(const std::string& topic, int32_t p, int64_t offset,
                              int32_t epoch = -1) {
  return {OffsetCommit{topic, p, offset, epoch, 0}};
}

// The group.md §14.2 worked example.
GroupOffsets Example() {
  GroupOffsets s;
  s.generation = 1;
  s.update_timestamp = kT;
  s.offsets.push_back(CommittedOffset{"orders", 0, 42, 0, kT, "m1", 0});
  return s;
}

std::string Hex(const std::vector<std::byte>& b) {
  std::string s;
  for (std::byte x : b) s += fmt::format("{:02x}", static_cast<unsigned>(x));
  return s;
}

// Re-signs an edited image so a field check, not the crc, is what fails.
void Resign(std::vector<std::byte>* b) {
  coding::PutFixed32(b->data() + 8, Crc32c(std::span<const std::byte>(*b).subspan(12)));
}

Status Decode(const std::vector<std::byte>& b) { return DecodeGroupOffsets(b, "offsets").status(); }

// Writes only the first `keep` bytes of each write, then fails: a process
// that dies inside the write of the staging file.
class TornWriteFs : public FileSystemWrapper {
 public:
  explicit TornWriteFs(size_t keep) : keep_(keep) {}
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    auto f = real_->Open(dir_fd, name, mode);
    if (!f) return f.error();
    return std::unique_ptr<File>(new Torn(std::move(*f), keep_));
  }
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    return real_->Rename(dir_fd, from, to);
  }
  Status Unlink(int dir_fd, const std::string& name) override {
    return real_->Unlink(dir_fd, name);
  }
  Status SyncDir(int dir_fd) override { return real_->SyncDir(dir_fd); }

 private:
  class Torn : public File {
   public:
    Torn(std::unique_ptr<File> real, size_t keep) : real_(std::move(real)), keep_(keep) {}
    Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
      if (offset + data.size() <= keep_) return real_->WriteAt(offset, data);
      if (offset < keep_) (void)real_->WriteAt(offset, data.first(keep_ - offset));
      return Status(Code::kIoError, "crash");
    }
    Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) override {
      return real_->ReadAt(offset, data);
    }
    Result<uint64_t> Size() override { return real_->Size(); }
    Result<FileInfo> Stat() override { return real_->Stat(); }
    Status Truncate(uint64_t size) override { return real_->Truncate(size); }
    Status Sync() override { return real_->Sync(); }
    int fd() const override { return real_->fd(); }

   private:
    std::unique_ptr<File> real_;
    size_t keep_;
  };
  FileSystem* real_ = FileSystem::Default();
  size_t keep_;
};

// A child process that holds `fd` (inherited by fork) until `release` is
// written to or closed; the parent side of the pipe is returned.
struct Child {
  pid_t pid = -1;
  int release = -1;
};

Child ForkHolder() {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[1]);
    char c;
    while (::read(p[0], &c, 1) < 0) {
    }
    ::_exit(0);
  }
  ::close(p[0]);
  return {pid, p[1]};
}

void EndChild(Child* c) {
  ::close(c->release);
  int status = 0;
  REQUIRE(::waitpid(c->pid, &status, 0) == c->pid);
}

}  // namespace

// ---- FileLock ---------------------------------------------------------------

TEST_CASE("lock: a try-lock fails while another descriptor holds the lock, and is granted after") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto a = FileLock::Acquire(dir->get(), "x.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(a);
  auto b = FileLock::Acquire(dir->get(), "x.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(!b);
  CHECK(b.error().code() == Code::kBusy);
  CHECK_THAT(b.error().message(), Catch::Contains("x.lock"));
  CHECK(cli::ExitCode(b.error()) == 75);
  auto s = FileLock::Acquire(dir->get(), "x.lock", LockMode::kShared, LockWait::kTry);
  CHECK(!s);
  CHECK(*IsLocked(dir->get(), "x.lock", LockMode::kShared));
  a->Close();  // released on close
  CHECK_FALSE(*IsLocked(dir->get(), "x.lock", LockMode::kShared));
  auto c = FileLock::Acquire(dir->get(), "x.lock", LockMode::kExclusive, LockWait::kTry);
  CHECK(c);
}

TEST_CASE("lock: shared locks coexist and keep an exclusive one out") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto a = FileLock::Acquire(dir->get(), "x.lock", LockMode::kShared, LockWait::kTry);
  auto b = FileLock::Acquire(dir->get(), "x.lock", LockMode::kShared, LockWait::kTry);
  REQUIRE(a);
  REQUIRE(b);
  CHECK_FALSE(*IsLocked(dir->get(), "x.lock", LockMode::kShared));
  CHECK(*IsLocked(dir->get(), "x.lock", LockMode::kExclusive));
  auto x = FileLock::Acquire(dir->get(), "x.lock", LockMode::kExclusive, LockWait::kTry);
  CHECK(x.error().code() == Code::kBusy);
  a->Close();
  CHECK(!FileLock::Acquire(dir->get(), "x.lock", LockMode::kExclusive, LockWait::kTry));
  REQUIRE(b->Unlock().ok());
  CHECK(FileLock::Acquire(dir->get(), "x.lock", LockMode::kExclusive, LockWait::kTry));
}

TEST_CASE(
    "lock: closing releases the lock although a forked child still holds a copy of its "
    "descriptor") {
  // As a handler another thread is starting holds every descriptor between
  // fork and exec: the next holder takes the lock at once, without waiting
  // for that child.
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto held = FileLock::Acquire(dir->get(), "p.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(held);
  Child child = ForkHolder();
  held->Close();
  CHECK_FALSE(*IsLocked(dir->get(), "p.lock"));
  CHECK(FileLock::Acquire(dir->get(), "p.lock", LockMode::kExclusive, LockWait::kTry));
  // The destructor, and assigning over a held lock, release it too.
  Child copy;
  {
    auto scoped = FileLock::Acquire(dir->get(), "d.lock", LockMode::kShared, LockWait::kTry);
    REQUIRE(scoped);
    copy = ForkHolder();
  }
  CHECK_FALSE(*IsLocked(dir->get(), "d.lock", LockMode::kExclusive));
  auto over = FileLock::Acquire(dir->get(), "e.lock", LockMode::kShared, LockWait::kTry);
  REQUIRE(over);
  Child copy2 = ForkHolder();
  auto next = FileLock::Open(dir->get(), "f.lock", true);
  REQUIRE(next);
  *over = std::move(*next);
  CHECK_FALSE(*IsLocked(dir->get(), "e.lock", LockMode::kExclusive));
  // Byte ranges too (a group's partition ownership).
  auto ranges = FileLock::Open(dir->get(), "r", true);
  REQUIRE(ranges);
  REQUIRE(ranges->LockRange(3, 1, LockMode::kExclusive, LockWait::kTry).ok());
  REQUIRE(ranges->LockRange(7, 1, LockMode::kExclusive, LockWait::kTry).ok());
  Child range_copy = ForkHolder();
  ranges->Close();
  auto other = FileLock::Open(dir->get(), "r", true);
  REQUIRE(other);
  CHECK(other->LockRange(3, 1, LockMode::kExclusive, LockWait::kTry).ok());
  CHECK(other->LockRange(7, 1, LockMode::kExclusive, LockWait::kTry).ok());
  // Latest first: each child holds the release pipes of those before it.
  EndChild(&range_copy);
  EndChild(&copy2);
  EndChild(&copy);
  EndChild(&child);
}

TEST_CASE(
    "lock: a forked child keeps a lock shared with children after the parent closes, and it is "
    "free once the child exits") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto held = FileLock::Acquire(dir->get(), "p.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(held);
  held->ShareWithChildren();
  Child child = ForkHolder();
  held->Close();  // the parent's copy only
  CHECK(*IsLocked(dir->get(), "p.lock"));
  auto other = FileLock::Acquire(dir->get(), "p.lock", LockMode::kExclusive, LockWait::kTry);
  CHECK(!other);
  EndChild(&child);
  CHECK_FALSE(*IsLocked(dir->get(), "p.lock"));
  CHECK(FileLock::Acquire(dir->get(), "p.lock", LockMode::kExclusive, LockWait::kTry));
}

TEST_CASE("lock: a holder killed with SIGKILL releases the lock") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto l = FileLock::Acquire(dir->get(), "k.lock", LockMode::kExclusive, LockWait::kBlock);
    char c = l ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  REQUIRE(c == 'y');
  CHECK(*IsLocked(dir->get(), "k.lock"));
  ::kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_FALSE(*IsLocked(dir->get(), "k.lock"));
}

TEST_CASE("lock: a child that execs with FD_CLOEXEC cleared holds the lock until it exits") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto held = FileLock::Acquire(dir->get(), "e.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(held);
  held->ShareWithChildren();
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::fcntl(held->fd(), F_SETFD, 0);
    ::dup2(p[0], 0);
    ::close(p[1]);
    ::execl("/bin/sh", "sh", "-c", "read x", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[0]);
  held->Close();
  CHECK(*IsLocked(dir->get(), "e.lock"));
  ::close(p[1]);  // sh reads EOF and exits
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK_FALSE(*IsLocked(dir->get(), "e.lock"));
}

TEST_CASE("lock: the lock file is opened without following symlinks and must be a regular file") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  REQUIRE(::symlink("/etc/passwd", (tmp / "s.lock").c_str()) == 0);
  auto s = FileLock::Acquire(dir->get(), "s.lock", LockMode::kShared, LockWait::kTry);
  REQUIRE(!s);
  CHECK(s.error().code() == Code::kPermission);
  REQUIRE(::mkfifo((tmp / "f.lock").c_str(), 0600) == 0);
  auto f = FileLock::Acquire(dir->get(), "f.lock", LockMode::kShared, LockWait::kTry);
  REQUIRE(!f);
  CHECK(f.error().code() == Code::kPermission);
  CHECK(!IsLocked(dir->get(), "f.lock"));
  CHECK_FALSE(*IsLocked(dir->get(), "missing.lock"));
  CHECK_FALSE(Exists(tmp / "missing.lock"));
}

// A FIFO put under the name after the look (OpenRegularFileAt with
// `looked`) is still refused, and the open never waits for a writer: for
// reading it is opened O_NONBLOCK, for reading and writing it never blocks
// (fifo(7)), so that open does without O_NONBLOCK.
TEST_CASE(
    "open: a FIFO swapped in after the look is refused without blocking, read or read-write") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  REQUIRE(::mkfifo((tmp / "f").c_str(), 0600) == 0);
  for (int flags : {O_RDONLY, O_RDWR}) {
    struct stat st;
    auto f = OpenRegularFileAt(dir->get(), "f", flags, 0640, &st, /*looked=*/true);
    REQUIRE(!f);
    CHECK(f.error().code() == Code::kPermission);
    CHECK(f.error().message().find("a FIFO") != std::string::npos);
  }
}

// A regular file opened for reading and writing is blocking: no O_NONBLOCK
// is left on it; one opened for reading has it cleared again.
TEST_CASE("open: regular files are left without O_NONBLOCK") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  for (int flags : {O_RDWR | O_CREAT, O_RDONLY}) {
    auto f = OpenRegularFileAt(dir->get(), "r", flags);
    REQUIRE(f);
    CHECK((::fcntl(f->get(), F_GETFL) & O_NONBLOCK) == 0);
  }
}

TEST_CASE("lock: a lock granted on a file that was replaced meanwhile is taken on the new file") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto old = FileLock::Acquire(dir->get(), "r.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(old);
  REQUIRE(::unlink((tmp / "r.lock").c_str()) == 0);
  // The old holder still locks the removed file; a new lock is on the name.
  auto fresh = FileLock::Acquire(dir->get(), "r.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(fresh);
  CHECK(*IsLocked(dir->get(), "r.lock"));
}

TEST_CASE("lock: the writer lock is a FileLock: an exclusive flock on writer.lock") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto w = WriterLock::Open(dir->get());
  REQUIRE(w);
  REQUIRE(w->Lock().ok());
  auto probe = FileLock::Acquire(dir->get(), kWriterLockName, LockMode::kShared, LockWait::kTry);
  CHECK(probe.error().code() == Code::kBusy);
  REQUIRE(w->Unlock().ok());
  CHECK_FALSE(*IsLocked(dir->get(), kWriterLockName, LockMode::kExclusive));
}

TEST_CASE("lock: NFS is refused with a clear error, and a local file system is not") {
  Status nfs = CheckFileSystemType(kNfsSuperMagic, "/mnt/data");
  CHECK(nfs.code() == Code::kPermission);
  CHECK(cli::ExitCode(nfs) == 77);
  CHECK_THAT(nfs.message(), Catch::Contains("/mnt/data") && Catch::Contains("NFS"));
  CHECK(CheckFileSystemType(0xEF53 /* ext4 */, "/x").ok());
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  CHECK(CheckLockableFileSystem(dir->get(), tmp.path()).ok());
}

// ---- R29, R30: the offsets file ----------------------------------------------

TEST_CASE("R29 offsets file: the worked example's bytes, and every header rule") {
  const std::vector<std::byte> bytes = EncodeGroupOffsets(Example());
  CHECK(bytes.size() == 92);
  CHECK(Hex(bytes) ==
        "4d51474f00010000"
        "5b30a5d3"
        "00000001"
        "0000000000000001"
        "0000018bcfe56800"
        "0000000000000000"
        "ffffffffffffffff"
        "00066f7264657273"
        "00000000"
        "000000000000002a"
        "00000000"
        "0000018bcfe56800"
        "0000000000000000"
        "00026d31");
  auto back = DecodeGroupOffsets(bytes, "offsets");
  REQUIRE(back);
  CHECK(*back == Example());

  auto rule = [](std::vector<std::byte> b, size_t at, uint8_t value, bool resign) {
    b[at] = std::byte{value};
    if (resign) Resign(&b);
    return Decode(b);
  };
  Status s = rule(bytes, 0, 0x4e, false);
  CHECK(s.rule() == "R29");
  CHECK(s.position() == 0);
  CHECK_THAT(s.message(), Catch::Contains("magic"));
  s = rule(bytes, 5, 3, false);  // version 3: a later format (2 is R86's)
  CHECK(s.code() == Code::kUnsupported);
  CHECK(cli::ExitCode(s) == 65);
  CHECK(rule(bytes, 5, 0, false).rule() == "R29");  // version 0
  CHECK(rule(bytes, 7, 1, false).rule() == "R29");  // reserved
  s = rule(bytes, 60, 0x41, false);                 // a topic byte: crc
  CHECK(s.rule() == "R29");
  CHECK(s.position() == 8);
  CHECK_THAT(s.message(), Catch::Contains("crc"));
  CHECK(rule(bytes, 23, 0, true).rule() == "R29");     // generation 0
  CHECK(rule(bytes, 32, 0x80, true).rule() == "R29");  // rebalances < 0
  CHECK(rule(bytes, 15, 2, true).rule() == "R29");     // count 2: entries do not fill it
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  Resign(&longer);
  s = Decode(longer);
  CHECK(s.rule() == "R29");
  CHECK(s.position() == 92);
  CHECK(DecodeGroupOffsets(std::vector<std::byte>(format::kMaxGroupOffsetsBytes + 1), "offsets")
            .error()
            .rule() == "R29");
}

TEST_CASE(
    "R29 offsets file: a truncated file is corruption at every length, naming file, position and "
    "rule") {
  GroupOffsets state = Example();
  state.offsets.push_back(CommittedOffset{"orders", 1, 7, -1, kT, "", 3});
  const std::vector<std::byte> bytes = EncodeGroupOffsets(state);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    auto r = DecodeGroupOffsets(cut, "groups/g/offsets");
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(r.error().rule() == "R29");
    CHECK(r.error().file() == "groups/g/offsets");
  }
}

TEST_CASE("R30 offset entries: names, ranges and order") {
  const std::vector<std::byte> bytes = EncodeGroupOffsets(Example());
  auto at = [&](size_t pos, std::initializer_list<uint8_t> v) {
    std::vector<std::byte> b = bytes;
    for (uint8_t x : v) b[pos++] = std::byte{x};
    Resign(&b);
    return Decode(b);
  };
  // Entry at 48: topicLength(2) "orders"(6) partition@56 offset@60 epoch@68
  // timestamp@72 deadLetters@80 memberIdLength@88 "m1"@90.
  Status s = at(50, {'/'});
  CHECK(s.rule() == "R30");
  CHECK(s.position() == 50);
  CHECK(at(48, {0x00, 0x00}).rule() == "R30");              // empty topic
  CHECK(at(56, {0x00, 0x00, 0x27, 0x10}).rule() == "R30");  // partition 10000
  CHECK(at(56, {0xff}).rule() == "R30");                    // partition < 0
  CHECK(at(60, {0x80}).rule() == "R30");                    // offset < 0
  CHECK(at(68, {0xff, 0xff, 0xff, 0xfe}).rule() == "R30");  // epoch -2
  CHECK(at(68, {0xff, 0xff, 0xff, 0xff}).ok());             // epoch -1: none
  CHECK(at(80, {0x80}).rule() == "R30");                    // dead letters < 0
  CHECK(at(90, {'.', '.'}).rule() == "R30");                // member ".."
  // Two entries out of order, and a repeated one.
  GroupOffsets two = Example();
  two.offsets.push_back(CommittedOffset{"a", 0, 1, -1, kT, "", 0});
  s = Decode(EncodeGroupOffsets(two));
  CHECK(s.rule() == "R30");
  CHECK(s.position() == 92);
  two.offsets[1] = two.offsets[0];
  CHECK(Decode(EncodeGroupOffsets(two)).rule() == "R30");
  two.offsets[1].partition = 1;
  CHECK(Decode(EncodeGroupOffsets(two)).ok());
}

TEST_CASE("R12 group names: a group's name follows the topic name rule") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  for (const char* bad : {"", ".", "..", "a/b", "a b", "g\n"}) {
    auto g = Group::Open(dir, bad, true);
    REQUIRE(!g);
    CHECK(g.error().code() == Code::kInvalidArgument);
    CHECK(cli::ExitCode(g.error()) == 64);
  }
  CHECK(!Group::Open(dir, std::string(250, 'g'), true));
  CHECK(Group::Open(dir, std::string(249, 'g'), true));
  CHECK(Group::Open(dir, "Orders.EU_west-1", true));
  auto listed = ListGroups(dir);
  REQUIRE(listed);
  CHECK(*listed == std::vector<std::string>{"Orders.EU_west-1", std::string(249, 'g')});
}

// ---- R31, R32: committing ------------------------------------------------------

TEST_CASE(
    "R31 forward only: a commit below the committed offset is refused, and a reset moves back") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  REQUIRE(g.Commit(One("orders", 0, 10, 3), "m2", CommitKind::kForward, kT + 1).ok());  // equal
  Status back = g.Commit(One("orders", 0, 9), "m1", CommitKind::kForward, kT + 2);
  CHECK(back.code() == Code::kInvalidArgument);
  CHECK_THAT(back.message(), Catch::Contains("R31") && Catch::Contains("orders-0") &&
                                 Catch::Contains("below the committed offset 10"));
  // Refused whole: the other partition of the same commit is not written.
  std::vector<OffsetCommit> mixed = {{"orders", 1, 5, -1, 0}, {"orders", 0, 3, -1, 0}};
  CHECK(!g.Commit(mixed, "m1", CommitKind::kForward, kT + 3).ok());
  auto s = g.Read();
  REQUIRE(s);
  CHECK(s->generation == 2);
  REQUIRE(s->offsets.size() == 1);
  CHECK(s->offsets[0] == CommittedOffset{"orders", 0, 10, 3, kT + 1, "m2", 0});

  REQUIRE(g.Commit(One("orders", 0, 2), "", CommitKind::kReset, kT + 4).ok());
  s = g.Read();
  REQUIRE(s);
  CHECK(s->Find("orders", 0)->offset == 2);
  CHECK(s->Find("orders", 0)->member_id.empty());
  CHECK(s->generation == 3);
}

TEST_CASE("R31 forward only: an owner lowers an offset past a truncated log's end, naming it") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  // Naming another offset than the committed one: refused as any commit back.
  std::vector<OffsetCommit> stale = {{"orders", 0, 3, -1, 0, 9}};
  Status refused = g.Commit(stale, "m1", CommitKind::kForward, kT + 1);
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK_THAT(refused.message(), Catch::Contains("R31"));
  std::vector<OffsetCommit> lower = {{"orders", 0, 3, -1, 1, 10}};
  REQUIRE(g.Commit(lower, "m1", CommitKind::kForward, kT + 2).ok());
  auto s = g.Read();
  REQUIRE(s);
  CHECK(s->Find("orders", 0)->offset == 3);
  CHECK(s->Find("orders", 0)->member_id == "m1");
  CHECK(s->Find("orders", 0)->dead_letters == 1);
  // Once lowered, the same commit again is a commit back like any other.
  CHECK(g.Commit(std::vector<OffsetCommit>{{"orders", 0, 2, -1, 0, 10}}, "m1", CommitKind::kForward,
                 kT + 3)
            .code() == Code::kInvalidArgument);
  CHECK(g.Read()->Find("orders", 0)->offset == 3);
}

namespace {

// Runs `hook` (once) before the first lock taken through it.
class LockHookFs : public FileSystemWrapper {
 public:
  std::function<void()> hook;
  Status Lock(int fd, LockMode mode, LockWait wait) override {
    if (hook) std::exchange(hook, nullptr)();
    return FileSystemWrapper::Lock(fd, mode, wait);
  }
};

wire::CarriedOffset Carried(int64_t offset, int64_t dead_letters, int64_t at) {
  return {"g", CommittedOffset{"orders", 0, offset, 4, at, "leader-m", dead_letters}};
}

}  // namespace

TEST_CASE(
    "R31 carry: at the same offset the leader's later leader epoch replaces the follower's entry, "
    "an earlier or equal one writes nothing") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  // The follower holds offset 10 after a record of epoch 0 (carried before
  // a failover cut 5..9); the leader's member read the new 5..9 of epoch
  // 1 and committed 10 again.
  REQUIRE(g.Commit(One("orders", 0, 10, 0), "m1", CommitKind::kForward, kT).ok());
  const wire::CarriedOffset reread{"g", CommittedOffset{"orders", 0, 10, 1, kT + 5, "leader-m", 0}};
  REQUIRE(ApplyGroupOffsets(dir, std::span(&reread, 1)).ok());
  auto s = g.Read();
  REQUIRE(s);
  CHECK(*s->Find("orders", 0) == CommittedOffset{"orders", 0, 10, 1, kT + 5, "leader-m", 0});
  const int64_t generation = s->generation;
  // The same epoch again, or an earlier one: nothing is written.
  REQUIRE(ApplyGroupOffsets(dir, std::span(&reread, 1)).ok());
  const wire::CarriedOffset older{"g", CommittedOffset{"orders", 0, 10, 0, kT + 9, "leader-m", 0}};
  REQUIRE(ApplyGroupOffsets(dir, std::span(&older, 1)).ok());
  CHECK(g.Read()->generation == generation);
  // Decided again under commit.lock (what a carrier read may be stale):
  // a later epoch at the same offset replaces the entry, an earlier one
  // leaves it.
  OffsetCommit later{"orders", 0, 10, 2, 0};
  later.dead_letters = 0;
  REQUIRE(
      g.Commit(std::span<const OffsetCommit>(&later, 1), "leader-m", CommitKind::kCarry, kT + 10)
          .ok());
  CHECK(*g.Read()->Find("orders", 0) ==
        CommittedOffset{"orders", 0, 10, 2, kT + 10, "leader-m", 0});
  OffsetCommit earlier{"orders", 0, 10, 1, 0};
  earlier.dead_letters = 0;
  REQUIRE(
      g.Commit(std::span<const OffsetCommit>(&earlier, 1), "leader-m", CommitKind::kCarry, kT + 11)
          .ok());
  CHECK(*g.Read()->Find("orders", 0) ==
        CommittedOffset{"orders", 0, 10, 2, kT + 10, "leader-m", 0});
}

TEST_CASE("R31 forward only: a follower's carried commit leaves a member's newer commit as it is") {
  // mq-replicate moves a follower's group forward to its leader's commits
  // while a member of the follower's root may commit too.
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group member = OpenGroup(dir);
  REQUIRE(member.Commit(One("orders", 0, 2), "m1", CommitKind::kForward, kT).ok());
  // The carrier read 2 (behind the leader's 5); the member commits 8 before
  // the carrier takes commit.lock.
  LockHookFs fs;
  fs.hook = [&] {
    REQUIRE(member.Commit(One("orders", 0, 8), "m2", CommitKind::kForward, kT + 1).ok());
  };
  const wire::CarriedOffset behind = Carried(5, 1, kT - 5);
  REQUIRE(ApplyGroupOffsets(dir, std::span(&behind, 1), &fs).ok());
  CHECK(!fs.hook);  // it ran
  auto s = member.Read();
  REQUIRE(s);
  CHECK(*s->Find("orders", 0) == CommittedOffset{"orders", 0, 8, -1, kT + 1, "m2", 0});

  // Ahead of the follower: carried whole, the dead letters raised to the
  // leader's count (not added to it), whatever the rounds.
  const wire::CarriedOffset ahead = Carried(12, 3, kT + 7);
  REQUIRE(ApplyGroupOffsets(dir, std::span(&ahead, 1)).ok());
  const wire::CarriedOffset further = Carried(13, 3, kT + 8);
  REQUIRE(ApplyGroupOffsets(dir, std::span(&further, 1)).ok());
  s = member.Read();
  REQUIRE(s);
  CHECK(*s->Find("orders", 0) == CommittedOffset{"orders", 0, 13, 4, kT + 8, "leader-m", 3});
  // Not ahead: nothing is written.
  const int64_t generation = s->generation;
  REQUIRE(ApplyGroupOffsets(dir, std::span(&ahead, 1)).ok());
  CHECK(member.Read()->generation == generation);
}

TEST_CASE(
    "R32 atomic update: a commit keeps other partitions, counts generations, records dead letters "
    "and rebalances") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  auto empty = g.Read();
  REQUIRE(empty);
  CHECK(empty->generation == 0);
  CHECK(empty->offsets.empty());
  std::vector<OffsetCommit> two = {{"b", 1, 5, 0, 0}, {"a", 0, 7, 2, 1}};
  REQUIRE(g.Commit(two, "m1", CommitKind::kForward, kT).ok());
  REQUIRE(g.Commit(std::vector<OffsetCommit>{{"a", 0, 8, 2, 2}}, "m2", CommitKind::kForward, kT + 5)
              .ok());
  REQUIRE(g.RecordRebalance(kT + 9).ok());
  auto s = g.Read();
  REQUIRE(s);
  CHECK(s->generation == 3);
  CHECK(s->rebalances == 1);
  CHECK(s->last_rebalance_timestamp == kT + 9);
  CHECK(s->update_timestamp == kT + 9);
  REQUIRE(s->offsets.size() == 2);
  CHECK(s->offsets[0] == CommittedOffset{"a", 0, 8, 2, kT + 5, "m2", 3});
  CHECK(s->offsets[1] == CommittedOffset{"b", 1, 5, 0, kT, "m1", 0});
  CHECK(s->dead_letters() == 3);
  // Plain files: a copy of `offsets` is the whole state (what a replica gets).
  auto copied = ReadGroupOffsetsFile(dir + "/groups/g/offsets");
  REQUIRE(copied);
  CHECK(*copied == *s);
  CHECK_FALSE(Exists(dir + "/groups/g/offsets.tmp"));
}

TEST_CASE(
    "R32 atomic update: a crash at every byte of the write leaves the old state, and the next "
    "commit succeeds") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  {
    Group g = OpenGroup(dir);
    REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  }
  auto old_state = OpenGroup(dir).Read();
  REQUIRE(old_state);
  GroupOffsets want = *old_state;
  want.generation = 2;
  want.update_timestamp = kT + 1;
  want.offsets[0].offset = 11;
  want.offsets[0].commit_timestamp = kT + 1;
  const std::vector<std::byte> image = EncodeGroupOffsets(want);
  for (size_t keep = 0; keep < image.size(); ++keep) {
    TornWriteFs crash(keep);
    Group g = OpenGroup(dir, "g", &crash);
    CHECK(!g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1).ok());
    auto seen = g.Read();
    REQUIRE(seen);
    CHECK(*seen == *old_state);
    // What the process would have left had it died there: a torn staging
    // file, which is not part of the state.
    std::vector<std::byte> torn(image.begin(), image.begin() + static_cast<ptrdiff_t>(keep));
    WriteFile(dir + "/groups/g/offsets.tmp", torn);
    seen = g.Read();
    REQUIRE(seen);
    CHECK(*seen == *old_state);
  }
  // A crash after the rename of a new file (the first commit over an older
  // mq's file, R87; the directory fsync fails): the new state.
  WriteFile(dir + "/groups/g/offsets", EncodeGroupOffsets(*old_state));
  FaultFs fault;
  fault.FailSync(2);  // the file's fdatasync passes, the directory's fails
  Group g = OpenGroup(dir, "g", &fault);
  CHECK(!g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1).ok());
  auto seen = g.Read();
  REQUIRE(seen);
  CHECK(*seen == want);
  // And the leftover staging file never blocks a later commit.
  WriteFile(dir + "/groups/g/offsets.tmp", std::vector<std::byte>(5));
  REQUIRE(OpenGroup(dir).Commit(One("orders", 0, 12), "m1", CommitKind::kForward, kT + 2).ok());
  CHECK(OpenGroup(dir).Read()->Find("orders", 0)->offset == 12);
}

TEST_CASE(
    "R32 atomic update: an atomic commit of a new file (R87) fsyncs it before the rename and "
    "leaves the directory unsynced, a durable one syncs both") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  FaultFs fault;
  Group g = OpenGroup(dir, "g", &fault);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  // Each commit below writes a new file: the file before it is an older
  // mq's (version 1, R87's upgrade).
  auto v1 = [&] {
    auto now = g.Read();
    REQUIRE(now);
    WriteFile(dir + "/groups/g/offsets", EncodeGroupOffsets(*now));
  };
  // Durable (the default): the new file, then the directory.
  v1();
  int before = fault.syncs();
  REQUIRE(g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1).ok());
  CHECK(fault.syncs() - before == 2);
  // Atomic: the new file only.
  v1();
  before = fault.syncs();
  REQUIRE(g.Commit(One("orders", 0, 12), "m1", CommitKind::kForward, kT + 2, nullptr,
                   CommitSync::kAtomic)
              .ok());
  CHECK(fault.syncs() - before == 1);
  CHECK(g.Read()->Find("orders", 0)->offset == 12);
  CHECK_FALSE(Exists(dir + "/groups/g/offsets.tmp"));
  // A failing directory fsync fails a durable commit (after its rename)
  // and is never reached by an atomic one.
  v1();
  fault.FailSync(2);
  CHECK(!g.Commit(One("orders", 0, 13), "m1", CommitKind::kForward, kT + 3).ok());
  CHECK(g.Read()->Find("orders", 0)->offset == 13);
  v1();
  fault.FailSync(2);
  REQUIRE(g.Commit(One("orders", 0, 14), "m1", CommitKind::kForward, kT + 4, nullptr,
                   CommitSync::kAtomic)
              .ok());
  CHECK(g.Read()->Find("orders", 0)->offset == 14);
  // The new file's fsync fails: it is never renamed over the offsets (a
  // machine crash could leave it empty there), the old state stays.
  v1();
  fault.FailSync(1);
  CHECK(!g.Commit(One("orders", 0, 15), "m1", CommitKind::kForward, kT + 5, nullptr,
                  CommitSync::kAtomic)
             .ok());
  fault.Clear();
  auto seen = g.Read();
  REQUIRE(seen);
  CHECK(seen->Find("orders", 0)->offset == 14);
  CHECK(seen->generation == 5);
  // A reset and a carried commit are durable whatever is asked.
  v1();
  before = fault.syncs();
  REQUIRE(
      g.Commit(One("orders", 0, 0), "", CommitKind::kReset, kT + 6, nullptr, CommitSync::kAtomic)
          .ok());
  CHECK(fault.syncs() - before == 2);
  v1();
  before = fault.syncs();
  REQUIRE(
      g.Commit(One("orders", 0, 20), "m1", CommitKind::kCarry, kT + 7, nullptr, CommitSync::kAtomic)
          .ok());
  CHECK(fault.syncs() - before == 2);
  // The rebalance count changes no offset: atomic.
  v1();
  before = fault.syncs();
  v1();
  fault.FailSync(2);
  REQUIRE(g.RecordRebalance(kT + 8).ok());
  fault.Clear();
  CHECK(fault.syncs() - before == 1);
  seen = g.Read();
  REQUIRE(seen);
  CHECK(seen->rebalances == 1);
  CHECK(seen->last_rebalance_timestamp == kT + 8);
  CHECK(seen->Find("orders", 0)->offset == 20);
}

TEST_CASE(
    "R32 atomic update: an atomic commit cut at every byte of its write leaves the old state") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  REQUIRE(OpenGroup(dir).Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  auto old_state = OpenGroup(dir).Read();
  REQUIRE(old_state);
  GroupOffsets want = *old_state;
  want.generation = 2;
  want.update_timestamp = kT + 1;
  want.offsets[0].offset = 11;
  want.offsets[0].commit_timestamp = kT + 1;
  const std::vector<std::byte> image = EncodeGroupOffsets(want);
  for (size_t keep = 0; keep < image.size(); ++keep) {
    TornWriteFs crash(keep);
    Group g = OpenGroup(dir, "g", &crash);
    CHECK(!g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1, nullptr,
                    CommitSync::kAtomic)
               .ok());
    auto seen = g.Read();
    REQUIRE(seen);
    CHECK(*seen == *old_state);
  }
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1, nullptr,
                   CommitSync::kAtomic)
              .ok());
  CHECK(*g.Read() == want);
  // R87: in place, the second copy.
  const std::vector<std::byte> copy = EncodeGroupOffsetsCopy(want);
  const std::vector<std::byte> file = ReadFile(dir + "/groups/g/offsets");
  REQUIRE(file.size() == 2 * format::kGroupOffsetsSlotAlign);
  CHECK(std::equal(copy.begin(), copy.end(), file.begin() + format::kGroupOffsetsSlotAlign));
}

TEST_CASE(
    "R32 atomic update: a corrupt offsets file is reported, never read as no commits, never "
    "replaced") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  const std::string file = dir + "/groups/g/offsets";
  std::vector<std::byte> good = ReadFile(file);
  for (size_t n = 0; n < good.size(); ++n) {
    WriteFile(file, std::vector<std::byte>(good.begin(), good.begin() + static_cast<ptrdiff_t>(n)));
    auto r = g.Read();
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kCorruption);
    CHECK(cli::ExitCode(r.error()) == 65);
    CHECK(r.error().file() == file);
    CHECK_THAT(r.error().message(),
               Catch::Contains(file) && (Catch::Contains("R29") || Catch::Contains("R86")));
    Status c = g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1);
    CHECK(c.code() == Code::kCorruption);
    CHECK(ReadFile(file).size() == n);
  }
}

// ---- R33: group locks -----------------------------------------------------------

TEST_CASE("R33 group locks: reset and delete are refused while a member holds group.lock") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  auto member = g.LockGroup(LockMode::kShared, LockWait::kTry);
  REQUIRE(member);
  auto second = g.LockGroup(LockMode::kShared, LockWait::kTry);  // members share it
  REQUIRE(second);
  // Members commit forward while holding it.
  REQUIRE(g.Commit(One("orders", 0, 11), "m1", CommitKind::kForward, kT + 1).ok());
  Status reset = g.Commit(One("orders", 0, 0), "", CommitKind::kReset, kT + 2);
  CHECK(reset.code() == Code::kBusy);
  CHECK(cli::ExitCode(reset) == 75);
  CHECK_THAT(reset.message(), Catch::Contains("live members") && Catch::Contains("group.lock"));
  Status del = DeleteGroup(dir, "g");
  CHECK(del.code() == Code::kBusy);
  CHECK(OpenGroup(dir).Read()->Find("orders", 0)->offset == 11);
  member->Close();
  second->Close();
  REQUIRE(g.Commit(One("orders", 0, 0), "", CommitKind::kReset, kT + 3).ok());
  CHECK(OpenGroup(dir).Read()->Find("orders", 0)->offset == 0);
  REQUIRE(DeleteGroup(dir, "g").ok());
  CHECK(ListGroups(dir)->empty());
  CHECK(DeleteGroup(dir, "g").code() == Code::kNotFound);
  CHECK(ListDir(dir + "/groups").empty());
}

TEST_CASE(
    "R33 group locks: deleting a topic's offsets removes its entries only, with no member alive") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  REQUIRE(g.Commit(One("orders", 2, 12), "m1", CommitKind::kForward, kT).ok());
  REQUIRE(g.Commit(One("other", 0, 5), "m1", CommitKind::kForward, kT).ok());
  {
    auto member = g.LockGroup(LockMode::kShared, LockWait::kTry);
    REQUIRE(member);
    auto busy = g.DeleteOffsets("orders", {});
    REQUIRE_FALSE(busy);
    CHECK(busy.error().code() == Code::kBusy);
  }
  const int32_t two[] = {2, 3};
  auto removed = g.DeleteOffsets("orders", two);
  REQUIRE(removed);
  CHECK(*removed == std::vector<int32_t>{2});
  auto state = g.Read();
  REQUIRE(state);
  CHECK(state->generation == 4);
  CHECK(state->Find("orders", 0)->offset == 10);
  CHECK(state->Find("orders", 2) == nullptr);
  removed = g.DeleteOffsets("orders", {});
  REQUIRE(removed);
  CHECK(*removed == std::vector<int32_t>{0});
  state = g.Read();
  REQUIRE(state);
  REQUIRE(state->offsets.size() == 1);
  CHECK(state->offsets[0].topic == "other");
  // Nothing left to remove: nothing written.
  removed = g.DeleteOffsets("orders", {});
  REQUIRE(removed);
  CHECK(removed->empty());
  CHECK(g.Read()->generation == 5);
}

TEST_CASE("R33 group locks: a reset holds group.lock before it reads, and commits under it") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  REQUIRE(g.Commit(One("orders", 0, 10), "m1", CommitKind::kForward, kT).ok());
  {
    auto member = g.LockGroup(LockMode::kShared, LockWait::kTry);
    REQUIRE(member);
    auto refused = g.LockForReset();
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code() == Code::kBusy);
    CHECK_THAT(refused.error().message(), Catch::Contains("live members"));
  }
  auto held = g.LockForReset();
  REQUIRE(held);
  // Held, no member joins: its shared lock is refused.
  CHECK(g.LockGroup(LockMode::kShared, LockWait::kTry).error().code() == Code::kBusy);
  // The plan read under the lock is what the reset writes over: a commit
  // with the lock it holds (without it, the reset's own second lock would
  // be refused).
  const int64_t plan = g.Read()->Find("orders", 0)->offset - 3;
  CHECK(g.Commit(One("orders", 0, plan), "", CommitKind::kReset, kT + 1).code() == Code::kBusy);
  REQUIRE(g.Commit(One("orders", 0, plan), "", CommitKind::kReset, kT + 1, &*held).ok());
  CHECK(g.Read()->Find("orders", 0)->offset == 7);
  FileLock closed;
  CHECK(g.Commit(One("orders", 0, 1), "", CommitKind::kReset, kT + 2, &closed).code() ==
        Code::kInvalidArgument);
}

TEST_CASE(
    "R33 group locks: member locks count live members, and a partition has one owner at a time") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  CHECK_FALSE(*g.IsMemberAlive("m1"));
  auto m1 = g.LockMember("m1", LockWait::kTry);
  REQUIRE(m1);
  CHECK(*g.IsMemberAlive("m1"));
  CHECK(*g.IsMemberAlive("m1"));  // probes do not take the member's place
  CHECK(g.LockMember("m1", LockWait::kTry).error().code() == Code::kBusy);
  CHECK(Exists(dir + "/groups/g/members/m1.lock"));
  m1->Close();
  CHECK_FALSE(*g.IsMemberAlive("m1"));
  CHECK(!g.LockMember("../x", LockWait::kTry));

  // Partition ownership: a byte-range lock per partition on one file per
  // topic, each member through a description of its own.
  auto a = Ownership::Open(g, "orders");
  auto b = Ownership::Open(g, "orders");
  REQUIRE(a);
  REQUIRE(b);
  struct ::stat st;
  REQUIRE(::lstat((dir + "/groups/g/partitions/orders").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(*a->TryOwn(3, "m1"));
  CHECK(*a->TryOwn(3, "m1"));  // already owned
  CHECK_FALSE(*b->TryOwn(3, "m2"));
  CHECK(*b->TryOwn(4, "m2"));
  CHECK_FALSE(*a->TryOwn(4, "m1"));
  CHECK(a->owned() == std::vector<int32_t>{3});
  CHECK(b->owned() == std::vector<int32_t>{4});
  // Letting go of one leaves the others.
  REQUIRE(b->Disown(4).ok());
  CHECK(*a->TryOwn(4, "m1"));
  CHECK_FALSE(*b->TryOwn(3, "m2"));
  CHECK(a->TryOwn(kMaxGroupPartition + 1, "m1").error().code() == Code::kInvalidArgument);
  CHECK(a->TryOwn(-1, "m1").error().code() == Code::kInvalidArgument);
  // A topic name of 249 bytes and the last partition still fit.
  auto longest = Ownership::Open(g, std::string(249, 't'));
  REQUIRE(longest);
  CHECK(*longest->TryOwn(kMaxGroupPartition, "m1"));
  CHECK(!Ownership::Open(g, "../x"));
}

namespace {

// A child process that holds only `keep` of the parent's descriptors (as
// a handler holds only its handler lock) until EndChild; returned once it
// has closed the others.
Child ForkHolding(int keep) {
  int p[2], ready[2];
  REQUIRE(::pipe(p) == 0);
  REQUIRE(::pipe(ready) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int fd = 3; fd < 4096; ++fd)
      if (fd != keep && fd != p[0] && fd != ready[1]) ::close(fd);
    ::close(ready[1]);  // closed: the others are
    char c;
    while (::read(p[0], &c, 1) < 0) {
    }
    ::_exit(0);
  }
  ::close(p[0]);
  ::close(ready[1]);
  char c;
  while (::read(ready[0], &c, 1) < 0) {
  }
  ::close(ready[0]);
  return {pid, p[1]};
}

// A data directory with the group "g", whose members own partitions of
// "orders" (Own).
struct OwnershipFixture {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  Group g = OpenGroup(dir);
  Ownership Own() {
    auto o = Ownership::Open(g, "orders");
    REQUIRE(o);
    return std::move(*o);
  }
};

size_t OpenDescriptors() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE(
    "R33 group locks: a handler's lock keeps its partition from the next owner until the handler "
    "is gone") {
  OwnershipFixture f;
  std::optional<Ownership> owner = f.Own();
  REQUIRE(*owner->TryOwn(3, "m1"));
  REQUIRE(*owner->TryOwn(5, "m1"));
  auto handler_lock = owner->LockForHandler(3);
  REQUIRE(handler_lock);
  // Runs of a partition never refuse each other (an earlier run's lock may
  // outlive it a little in the handler's children): each holds it.
  auto lingering = owner->LockForHandler(3);
  REQUIRE(lingering);
  Child handler = ForkHolding(handler_lock->fd());
  Child child = ForkHolding(lingering->fd());
  handler_lock->Close();
  lingering->Close();
  // The owner dies; its handler of partition 3 is still running.
  owner.reset();
  std::optional<Ownership> next = f.Own();
  CHECK_FALSE(*next->TryOwn(3, "m2"));
  CHECK(*next->TryOwn(5, "m2"));                    // the handler holds its own partition only
  CHECK(next->owned() == std::vector<int32_t>{5});  // the refused one is not held
  EndChild(&handler);
  CHECK_FALSE(*next->TryOwn(3, "m2"));
  EndChild(&child);
  CHECK(*next->TryOwn(3, "m2"));
}

TEST_CASE("R33 group locks: a member owns every partition of a topic through one descriptor") {
  OwnershipFixture f;
  std::optional<Ownership> owner = f.Own();
  const size_t before = OpenDescriptors();
  for (int32_t p = 0; p <= kMaxGroupPartition; ++p) REQUIRE(*owner->TryOwn(p, "m1"));
  CHECK(OpenDescriptors() == before);
  std::optional<Ownership> rival = f.Own();
  for (int32_t p : {0, 1, 255, 256, 4321, kMaxGroupPartition}) CHECK_FALSE(*rival->TryOwn(p, "m2"));
  // Letting go of every other one splits no lock of another partition.
  for (int32_t p = 0; p <= kMaxGroupPartition; p += 2) REQUIRE(owner->Disown(p).ok());
  for (int32_t p : {0, 2, 4320, kMaxGroupPartition - 1}) CHECK(*rival->TryOwn(p, "m2"));
  for (int32_t p : {1, 3, 4321, kMaxGroupPartition}) CHECK_FALSE(*rival->TryOwn(p, "m2"));
  CHECK(owner->owned().size() == (kMaxGroupPartition + 1) / 2);
}

namespace {

// Fails the chosen byte-range lock calls as the kernel would (ENOLCK).
class RangeFaultFs : public FileSystemWrapper {
 public:
  bool fail_lock = false, fail_unlock = false, fail_test = false;
  Status LockRange(int fd, uint64_t start, uint64_t len, LockMode mode, LockWait wait) override {
    if (fail_lock) return ErrnoStatus("fcntl F_OFD_SETLK", ENOLCK);
    return FileSystemWrapper::LockRange(fd, start, len, mode, wait);
  }
  Status UnlockRange(int fd, uint64_t start, uint64_t len) override {
    if (fail_unlock) return ErrnoStatus("fcntl F_OFD_SETLK unlock", ENOLCK);
    return FileSystemWrapper::UnlockRange(fd, start, len);
  }
  Result<bool> TestRange(int fd, uint64_t start, uint64_t len, LockMode probe) override {
    if (fail_test) return ErrnoStatus("fcntl F_OFD_GETLK", ENOLCK);
    return FileSystemWrapper::TestRange(fd, start, len, probe);
  }
};

}  // namespace

TEST_CASE(
    "R33 group locks: a failing lock call is an error naming the file and bytes, never ownership") {
  TempDir tmp;
  std::string dir = MakeDataDir(tmp);
  RangeFaultFs fs;
  Group g = OpenGroup(dir, "g", &fs);
  auto owner = Ownership::Open(g, "orders");
  REQUIRE(owner);
  fs.fail_lock = true;
  auto r = owner->TryOwn(2, "m1");
  REQUIRE_FALSE(r);
  CHECK(r.error().code() != Code::kBusy);
  CHECK_THAT(r.error().message(), Catch::Contains("groups/g/partitions/orders: exclusive lock of "
                                                  "bytes 512-512") &&
                                      Catch::Contains("No locks available"));
  CHECK(owner->owned().empty());
  CHECK(!owner->LockForHandler(2));
  fs.fail_lock = false;
  // The probe of the handler byte fails: the ownership byte is let go.
  fs.fail_test = true;
  r = owner->TryOwn(2, "m1");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message(), Catch::Contains("probe of bytes 513-513"));
  fs.fail_test = false;
  auto rival = Ownership::Open(g, "orders");
  REQUIRE(rival);
  CHECK(*rival->TryOwn(2, "m2"));
  CHECK(rival->Disown(2).ok());
  // A release that fails leaves the partition owned (the member then stops).
  REQUIRE(*owner->TryOwn(2, "m1"));
  fs.fail_unlock = true;
  CHECK_THAT(owner->Disown(2).message(), Catch::Contains("unlock of bytes 512-512"));
  CHECK(owner->owns(2));
  fs.fail_unlock = false;
  CHECK_FALSE(*rival->TryOwn(2, "m2"));
}

TEST_CASE(
    "R33 group locks: an earlier mq's directory of partition lock files is replaced once none is "
    "held") {
  OwnershipFixture f;
  Group& g = f.g;
  const std::string old = f.dir + "/groups/g/partitions/orders";
  REQUIRE(std::filesystem::create_directories(old));
  auto old_dir = OpenDirectory(old, false);
  REQUIRE(old_dir);
  auto held = FileLock::Acquire(old_dir->get(), "1.lock", LockMode::kExclusive, LockWait::kTry);
  REQUIRE(held);
  REQUIRE(FileLock::Acquire(old_dir->get(), "0.lock", LockMode::kExclusive, LockWait::kTry));
  auto refused = Ownership::Open(g, "orders");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Code::kBusy);
  CHECK_THAT(refused.error().message(),
             Catch::Contains("partitions/orders/1.lock") && Catch::Contains("earlier mq"));
  CHECK(std::filesystem::is_directory(old));
  held->Close();
  std::optional<Ownership> owner = f.Own();
  CHECK(std::filesystem::is_regular_file(old));
  CHECK(*owner->TryOwn(1, "m1"));
  // An earlier member starting now fails: a file where it wants a directory.
  CHECK(!OpenDirectory(old, true));
}
