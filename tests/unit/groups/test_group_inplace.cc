// The offsets file written in place (format-spec/group.md §14.2 R86,
// §14.3 R87): two copies, the current one by generation, one write and one
// fdatasync per commit, torn writes and SIGKILLs leaving the state before.
// Seeds: MQ_TEST_SEED=<n> repeats one seed (printed by every seeded test);
// MQ_GROUP_KILL_ROUNDS=<n> sets how many members the SIGKILL test kills
// (default 8, a bounded sample for CI).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "exit_code.h"  // tools/common: a status's exit status
#include "format/coding.h"
#include "format/format.h"
#include "mq/crc32c.h"
#include "mq/group.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

constexpr int64_t kT = 1700000000000;

std::string MakeDataDir(const TempDir& tmp) {
  std::string dir = tmp / "data";
  auto d = DataDir::Open(dir, true);
  REQUIRE(d);
  return dir;
}

Group OpenGroup(const std::string& dir, FileSystem* fs = nullptr) {
  auto g = Group::Open(dir, "g", true, fs);
  REQUIRE(g);
  return std::move(*g);
}

std::vector<OffsetCommit> One(int32_t p, int64_t offset) {
  return {OffsetCommit{"orders", p, offset, -1, 0}};
}

GroupOffsets State(int64_t generation, int64_t offset) {
  GroupOffsets s;
  s.generation = generation;
  s.update_timestamp = kT;
  s.offsets.push_back(CommittedOffset{"orders", 0, offset, 0, kT, "m1", 0});
  return s;
}

// A file of two 4 KiB slots holding `a` in copy 0 and `b` in copy 1 (each
// optional: a slot of zeros).
std::vector<std::byte> File2(const GroupOffsets* a, const GroupOffsets* b) {
  std::vector<std::byte> out(2 * format::kGroupOffsetsSlotAlign);
  if (a) {
    auto c = EncodeGroupOffsetsCopy(*a);
    std::copy(c.begin(), c.end(), out.begin());
  }
  if (b) {
    auto c = EncodeGroupOffsetsCopy(*b);
    std::copy(c.begin(), c.end(), out.begin() + format::kGroupOffsetsSlotAlign);
  }
  return out;
}

uint64_t Seed(const char* what) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("MQ_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("%s: seed %llu (MQ_TEST_SEED to repeat)\n", what,
              static_cast<unsigned long long>(seed));
  return seed;
}

// Counts writes, fsyncs, renames and directory fsyncs; with `tear` > 0,
// the next write keeps only its first (`tear` - 1) mod its size bytes and
// fails (a process that dies inside it).
class CountFs : public FileSystemWrapper {
 public:
  CountFs() : FileSystemWrapper(FileSystem::Default()) {}
  int writes = 0, syncs = 0, renames = 0, dir_syncs = 0;
  size_t tear = 0;

  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    auto f = target()->Open(dir_fd, name, mode);
    if (!f) return f.error();
    return std::unique_ptr<File>(new Counted(std::move(*f), this));
  }
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    ++renames;
    return target()->Rename(dir_fd, from, to);
  }
  Status SyncDir(int dir_fd) override {
    ++dir_syncs;
    return target()->SyncDir(dir_fd);
  }

 private:
  class Counted : public File {
   public:
    Counted(std::unique_ptr<File> f, CountFs* fs) : real_(std::move(f)), fs_(fs) {}
    Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
      ++fs_->writes;
      if (fs_->tear > 0) {
        // Never the whole copy: that write would have ended.
        const size_t keep = (fs_->tear - 1) % data.size();
        fs_->tear = 0;
        if (keep > 0) (void)real_->WriteAt(offset, data.first(keep));
        return Status(Code::kIoError, "torn");
      }
      return real_->WriteAt(offset, data);
    }
    Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) override {
      return real_->ReadAt(offset, data);
    }
    Result<uint64_t> Size() override { return real_->Size(); }
    Result<FileInfo> Stat() override { return real_->Stat(); }
    Status Truncate(uint64_t size) override { return real_->Truncate(size); }
    Status Sync() override {
      ++fs_->syncs;
      return real_->Sync();
    }
    int fd() const override { return real_->fd(); }

   private:
    std::unique_ptr<File> real_;
    CountFs* fs_;
  };
};

}  // namespace

TEST_CASE("R86 offsets written in place: of the whole copies the higher generation is current") {
  const GroupOffsets one = State(1, 10), two = State(2, 11);
  auto decoded = DecodeGroupOffsetsFile(File2(&one, nullptr), "offsets");
  REQUIRE(decoded);
  CHECK(decoded->state == one);
  CHECK(decoded->current == 0);
  CHECK(decoded->slot_bytes == format::kGroupOffsetsSlotAlign);
  decoded = DecodeGroupOffsetsFile(File2(&one, &two), "offsets");
  REQUIRE(decoded);
  CHECK(decoded->state == two);
  CHECK(decoded->current == 1);
  const GroupOffsets three = State(3, 12);
  decoded = DecodeGroupOffsetsFile(File2(&three, &two), "offsets");
  REQUIRE(decoded);
  CHECK(decoded->state.generation == 3);
  CHECK(decoded->current == 0);
  // A copy whose crc does not match is a write cut short: the other one.
  std::vector<std::byte> b = File2(&one, &two);
  b[format::kGroupOffsetsSlotAlign + 70] ^= std::byte{1};
  decoded = DecodeGroupOffsetsFile(b, "offsets");
  REQUIRE(decoded);
  CHECK(decoded->state == one);
  // An imageBytes past the slot: not whole either.
  coding::PutFixed32(b.data() + format::kGroupOffsetsSlotAlign + 48, 5000);
  CHECK(DecodeGroupOffsets(b, "offsets").value() == one);
}

TEST_CASE("R86 offsets written in place: what is corruption, naming file, position and rule") {
  const GroupOffsets one = State(1, 10);
  auto rule = [](const std::vector<std::byte>& b) { return DecodeGroupOffsets(b, "g/offsets"); };
  // Neither copy whole.
  std::vector<std::byte> b = File2(&one, nullptr);
  b[70] ^= std::byte{1};
  auto r = rule(b);
  REQUIRE(!r);
  CHECK(r.error().rule() == "R86");
  CHECK(r.error().file() == "g/offsets");
  CHECK(cli::ExitCode(r.error()) == 65);
  // Both copies of one generation.
  r = rule(File2(&one, &one));
  REQUIRE(!r);
  CHECK(r.error().rule() == "R86");
  CHECK(r.error().position() == format::kGroupOffsetsSlotAlign + 16);
  // Every size that is not two slots of whole pages (a file cut short).
  const std::vector<std::byte> good = File2(&one, nullptr);
  for (size_t n :
       {size_t{48}, size_t{56}, size_t{100}, size_t{4096}, size_t{8191}, size_t{12288}}) {
    std::vector<std::byte> cut(good.begin(),
                               good.begin() + static_cast<ptrdiff_t>(std::min(n, good.size())));
    cut.resize(n);
    r = rule(cut);
    REQUIRE(!r);
    CHECK(r.error().rule() == "R86");
  }
  // A whole copy that breaks R29 or R30 is corruption, not a torn write.
  auto resigned = [&](size_t at, std::byte v) {
    std::vector<std::byte> x = File2(&one, nullptr);
    x[at] = v;
    const uint32_t image = coding::GetFixed32(x.data() + 48);
    coding::PutFixed32(x.data() + 8, Crc32c(std::span<const std::byte>(x).subspan(12, image - 12)));
    return rule(x);
  };
  CHECK(resigned(0, std::byte{0x4e}).error().rule() == "R86");   // magic
  CHECK(resigned(7, std::byte{1}).error().rule() == "R86");      // reserved
  CHECK(resigned(55, std::byte{1}).error().rule() == "R86");     // reserved int32
  CHECK(resigned(23, std::byte{0}).error().rule() == "R29");     // generation 0
  CHECK(resigned(56, std::byte{0x7f}).error().rule() == "R30");  // topic length
  // A later version than 2 is unsupported, never guessed at.
  std::vector<std::byte> v3 = EncodeGroupOffsets(one);
  v3[5] = std::byte{3};
  r = DecodeGroupOffsets(v3, "g/offsets");
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kUnsupported);
}

TEST_CASE("R87 one write, one fdatasync: commits alternate the copies of one file in place") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  const std::string file = dir + "/groups/g/offsets";
  CountFs fs;
  Group g = OpenGroup(dir, &fs);
  const int opened_dir_syncs = fs.dir_syncs;  // groups/ and the group made
  // The first commit writes a new file: staging, fsync, rename, directory.
  REQUIRE(g.Commit(One(0, 10), "m1", CommitKind::kForward, kT).ok());
  CHECK(fs.renames == 1);
  CHECK(fs.dir_syncs == opened_dir_syncs + 1);
  struct stat first;
  REQUIRE(::stat(file.c_str(), &first) == 0);
  CHECK(first.st_size == 2 * 4096);
  for (int i = 1; i <= 6; ++i) {
    const int writes = fs.writes, syncs = fs.syncs;
    const CommitSync sync = i % 2 ? CommitSync::kAtomic : CommitSync::kDurable;
    REQUIRE(g.Commit(One(0, 10 + i), "m1", CommitKind::kForward, kT + i, nullptr, sync).ok());
    CHECK(fs.writes - writes == 1);
    CHECK(fs.syncs - syncs == 1);
    CHECK(fs.renames == 1);
    CHECK(fs.dir_syncs == opened_dir_syncs + 1);
    auto d = DecodeGroupOffsetsFile(ReadFile(file), file);
    REQUIRE(d);
    CHECK(d->current == i % 2);
    CHECK(d->state.generation == 1 + i);
    CHECK(d->state.Find("orders", 0)->offset == 10 + i);
  }
  struct stat after;
  REQUIRE(::stat(file.c_str(), &after) == 0);
  CHECK(after.st_ino == first.st_ino);
  CHECK(after.st_size == first.st_size);
  // A reset and a rebalance count go the same way.
  REQUIRE(g.Commit(One(0, 0), "", CommitKind::kReset, kT + 9).ok());
  REQUIRE(g.RecordRebalance(kT + 10).ok());
  CHECK(fs.renames == 1);
  auto seen = g.Read();
  REQUIRE(seen);
  CHECK(seen->Find("orders", 0)->offset == 0);
  CHECK(seen->rebalances == 1);
}

TEST_CASE("R87 one write, one fdatasync: a version 1 file is upgraded and a full slot grows") {
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  const std::string file = dir + "/groups/g/offsets";
  Group g = OpenGroup(dir);
  // An older mq's file: the first commit replaces it with two copies,
  // every entry kept.
  GroupOffsets old = State(7, 42);
  old.rebalances = 3;
  WriteFile(file, EncodeGroupOffsets(old));
  REQUIRE(g.Commit(One(1, 5), "m2", CommitKind::kForward, kT + 1).ok());
  auto d = DecodeGroupOffsetsFile(ReadFile(file), file);
  REQUIRE(d);
  CHECK(d->current == 0);
  CHECK(d->state.generation == 8);
  CHECK(d->state.rebalances == 3);
  CHECK(d->state.Find("orders", 0)->offset == 42);
  CHECK(d->state.Find("orders", 1)->offset == 5);
  // Entries beyond a slot's room: a new file of larger slots, then in place.
  std::vector<OffsetCommit> many;
  for (int32_t p = 0; p < 200; ++p) many.push_back({"orders", p, 100 + p, -1, 0});
  REQUIRE(g.Commit(many, "m2", CommitKind::kForward, kT + 2).ok());
  d = DecodeGroupOffsetsFile(ReadFile(file), file);
  REQUIRE(d);
  CHECK(d->slot_bytes > 4096);
  CHECK(d->slot_bytes % 4096 == 0);
  CHECK(d->state.offsets.size() == 200);
  CHECK(d->state.Find("orders", 199)->offset == 299);
  REQUIRE(g.Commit(One(3, 500), "m2", CommitKind::kForward, kT + 3).ok());
  CHECK(g.Read()->Find("orders", 3)->offset == 500);
}

TEST_CASE("R87 one write, one fdatasync: a commit torn at any byte leaves the state before it") {
  const uint64_t seed = Seed("R87 torn commits");
  std::mt19937_64 rng(seed);
  TempDir tmp;
  const std::string dir = MakeDataDir(tmp);
  CountFs fs;
  Group g = OpenGroup(dir, &fs);
  REQUIRE(g.Commit(One(0, 1), "m1", CommitKind::kForward, kT).ok());
  int64_t committed = 1;
  int kept_before = 0, tears = 0;
  for (int round = 0; round < 200; ++round) {
    INFO("seed " << seed << " round " << round);
    // Some partitions, so the copy's length varies.
    std::vector<OffsetCommit> c = One(0, committed + 1);
    for (int32_t p = 1; p < 1 + static_cast<int32_t>(rng() % 8); ++p)
      c.push_back({"orders", p, committed + 1, -1, 0});
    auto before = g.Read();
    REQUIRE(before);
    if (rng() % 3 != 0) {
      fs.tear = 1 + rng() % 400;  // cut somewhere inside the copy
      ++tears;
      CHECK(!g.Commit(c, "m1", CommitKind::kForward, kT + round).ok());
      auto after = g.Read();
      REQUIRE(after);
      if (*after == *before) {
        ++kept_before;
        continue;
      }
      // The bytes it did not write already held the new ones (the slot's
      // older copy agreed there): the write is whole, the new state, never
      // a mix.
      CHECK(after->generation == before->generation + 1);
      for (const OffsetCommit& x : c) CHECK(after->Find("orders", x.partition)->offset == x.offset);
      ++committed;
    } else {
      REQUIRE(g.Commit(c, "m1", CommitKind::kForward, kT + round).ok());
      ++committed;
      CHECK(g.Read()->Find("orders", 0)->offset == committed);
    }
  }
  // Most cuts fall before the copy's last new byte.
  CHECK(kept_before * 4 > tears);
}

TEST_CASE("R87 one write, one fdatasync: a member killed with SIGKILL mid-commit loses no commit") {
  const uint64_t seed = Seed("R87 kill -9");
  std::mt19937_64 rng(seed);
  const char* env = std::getenv("MQ_GROUP_KILL_ROUNDS");
  const int rounds = env ? std::atoi(env) : 8;
  for (int round = 0; round < rounds; ++round) {
    INFO("seed " << seed << " round " << round);
    TempDir tmp;
    const std::string dir = MakeDataDir(tmp);
    int p[2];
    REQUIRE(::pipe(p) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(p[0]);
      auto g = Group::Open(dir, "g", true);
      if (!g) ::_exit(1);
      for (int64_t i = 1;; ++i) {
        std::vector<OffsetCommit> c;
        for (int32_t q = 0; q < 4; ++q) c.push_back({"orders", q, i, -1, 0});
        if (!g->Commit(c, "m1", CommitKind::kForward, kT + i).ok()) ::_exit(2);
        // Reported once the commit returned.
        if (::write(p[1], &i, sizeof i) != sizeof i) ::_exit(3);
      }
    }
    ::close(p[1]);
    ::usleep(static_cast<useconds_t>(5000 + rng() % 50000));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    int64_t last = 0, i = 0;
    while (::read(p[0], &i, sizeof i) == sizeof i) last = i;
    ::close(p[0]);
    auto seen = OpenGroup(dir).Read();
    REQUIRE(seen);
    // Every returned commit is there; the one under way may be too.
    for (int32_t q = 0; q < 4; ++q) {
      const CommittedOffset* e = seen->Find("orders", q);
      if (last == 0 && e == nullptr) continue;
      REQUIRE(e != nullptr);
      CHECK(e->offset >= last);
      CHECK(e->offset <= last + 1);
      CHECK(e->offset == seen->Find("orders", 0)->offset);
    }
    // And the next commit goes on from it.
    REQUIRE(OpenGroup(dir).Commit(One(0, last + 5), "m2", CommitKind::kForward, kT).ok());
  }
}
