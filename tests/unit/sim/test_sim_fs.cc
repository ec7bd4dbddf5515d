// The simulator's file system (tests/sim/sim_fs.h): what a power cut keeps.
#include <catch2/catch.hpp>

#include <fcntl.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "sim_fs.h"
#include "test_support.h"

namespace mq::sim {
namespace {

std::vector<std::byte> Bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return std::vector<std::byte>(p, p + s.size());  // no memcpy from null for ""
}

std::string Contents(const std::string& path) {
  if (!test::Exists(path)) return "<none>";
  auto b = test::ReadFile(path);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Opens (creating) `name` in the root of `fs` and writes `text` at `at`.
std::unique_ptr<File> WriteNew(SimFs& fs, int dir, const std::string& name, const std::string& text,
                               uint64_t at = 0) {
  auto f = fs.Open(dir, name, FileSystem::kCreate);
  REQUIRE(f);
  REQUIRE((*f)->WriteAt(at, Bytes(text)).ok());
  return std::move(*f);
}

}  // namespace

TEST_CASE("sim fs: synced bytes survive a power cut, the directory entry with them", "[sim_fs]") {
  for (DiskOrder order :
       {DiskOrder::kOrdered, DiskOrder::kMetadataOrdered, DiskOrder::kIndependent}) {
    for (uint64_t seed = 1; seed <= 50; ++seed) {
      SimFs fs(order);
      auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
      REQUIRE(dir);
      auto f = WriteNew(fs, dir->get(), "a", "hello");
      REQUIRE(f->Sync().ok());
      REQUIRE(fs.SyncDir(dir->get()).ok());
      REQUIRE(f->WriteAt(5, Bytes(" world")).ok());  // not synced
      f.reset();
      dir = UniqueFd();
      Rng rng(seed);
      fs.PowerCut(rng);
      const std::string got = Contents(fs.root() + "/a");
      // Kept: the synced bytes and a prefix of the unsynced write.
      REQUIRE(got.substr(0, 5) == "hello");
      REQUIRE(std::string(" world").substr(0, got.size() - 5) == got.substr(5));
    }
  }
}

TEST_CASE("sim fs: unsynced writes may go, a prefix of them stays, drawn from the seed",
          "[sim_fs]") {
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SimFs fs(DiskOrder::kOrdered);
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    REQUIRE(dir);
    auto f = WriteNew(fs, dir->get(), "log", "");
    REQUIRE(f->Sync().ok());
    REQUIRE(f->WriteAt(0, Bytes("aaaa")).ok());
    REQUIRE(f->WriteAt(4, Bytes("bbbb")).ok());
    REQUIRE(f->WriteAt(8, Bytes("cccc")).ok());
    REQUIRE(fs.unsynced() == 3);
    REQUIRE(Contents(fs.root() + "/log") == "aaaabbbbcccc");  // the page cache
    f.reset();
    dir = UniqueFd();
    Rng rng(seed);
    fs.PowerCut(rng);
    const std::string got = Contents(fs.root() + "/log");
    REQUIRE(got == std::string("aaaabbbbcccc").substr(0, got.size()));
    seen.insert(got);
    // The same seed keeps the same.
    SimFs again(DiskOrder::kOrdered);
    auto d2 = again.OpenDir(AT_FDCWD, again.root(), false);
    auto g = WriteNew(again, d2->get(), "log", "");
    REQUIRE(g->Sync().ok());
    REQUIRE(g->WriteAt(0, Bytes("aaaa")).ok());
    REQUIRE(g->WriteAt(4, Bytes("bbbb")).ok());
    REQUIRE(g->WriteAt(8, Bytes("cccc")).ok());
    g.reset();
    d2 = UniqueFd();
    Rng rng2(seed);
    again.PowerCut(rng2);
    REQUIRE(Contents(again.root() + "/log") == got);
  }
  // Everything lost, everything kept, and torn writes in between.
  REQUIRE(seen.count(""));
  REQUIRE(seen.count("aaaabbbbcccc"));
  REQUIRE(seen.count("aaaab"));
  REQUIRE(seen.size() > 6);
}

TEST_CASE("sim fs: a process kill keeps the page cache, SyncAll makes it durable", "[sim_fs]") {
  SimFs fs;
  {
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    auto f = WriteNew(fs, dir->get(), "x", "kept");
  }  // the process objects are gone; nothing else happens at a kill
  REQUIRE(Contents(fs.root() + "/x") == "kept");
  fs.SyncAll();
  REQUIRE(fs.unsynced() == 0);
  Rng rng(7);
  fs.PowerCut(rng);
  REQUIRE(Contents(fs.root() + "/x") == "kept");
}

TEST_CASE("sim fs: a rename SyncDir did not make durable may be undone", "[sim_fs]") {
  // The atomic replacement of a file (WriteFileAtomic without its syncs):
  // a power cut leaves the old file or the new one, never a mix, in the
  // ordered disk.
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    SimFs fs(DiskOrder::kOrdered);
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    REQUIRE(dir);
    REQUIRE(WriteFileAtomic(dir->get(), "cp", Bytes("old"), &fs).ok());
    REQUIRE(WriteFileAtomic(dir->get(), "cp", Bytes("new"), &fs, {}, false).ok());
    REQUIRE(Contents(fs.root() + "/cp") == "new");
    dir = UniqueFd();
    Rng rng(seed);
    fs.PowerCut(rng);
    const std::string got = Contents(fs.root() + "/cp");
    REQUIRE((got == "old" || got == "new"));
    seen.insert(got);
  }
  REQUIRE(seen == std::set<std::string>{"old", "new"});
  // Synced (rename and the directory), it stays.
  SimFs fs;
  auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
  REQUIRE(WriteFileAtomic(dir->get(), "cp", Bytes("old"), &fs).ok());
  REQUIRE(WriteFileAtomic(dir->get(), "cp", Bytes("new"), &fs).ok());
  dir = UniqueFd();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    fs.PowerCut(rng);
    REQUIRE(Contents(fs.root() + "/cp") == "new");
  }
}

TEST_CASE("sim fs: independent files may keep a later file's write and lose an earlier one's",
          "[sim_fs]") {
  // What replication.md §17.9 does not support: only kIndependent does it.
  auto run = [](DiskOrder order) {
    bool inverted = false;
    for (uint64_t seed = 1; seed <= 200 && !inverted; ++seed) {
      SimFs fs(order);
      auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
      auto a = WriteNew(fs, dir->get(), "a", "");
      auto b = WriteNew(fs, dir->get(), "b", "");
      REQUIRE(fs.SyncDir(dir->get()).ok());
      REQUIRE(a->Sync().ok());
      REQUIRE(b->Sync().ok());
      REQUIRE(a->WriteAt(0, Bytes("1")).ok());
      REQUIRE(b->WriteAt(0, Bytes("2")).ok());
      a.reset();
      b.reset();
      dir = UniqueFd();
      Rng rng(seed);
      fs.PowerCut(rng);
      inverted = Contents(fs.root() + "/a").empty() && Contents(fs.root() + "/b") == "2";
    }
    return inverted;
  };
  REQUIRE(run(DiskOrder::kIndependent));
  REQUIRE_FALSE(run(DiskOrder::kOrdered));
}

TEST_CASE("sim fs: metadata in order, appended data may lag behind it", "[sim_fs]") {
  // A truncation (metadata) kept while an append before it was lost.
  bool lagged = false;
  for (uint64_t seed = 1; seed <= 200 && !lagged; ++seed) {
    SimFs fs(DiskOrder::kMetadataOrdered);
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    auto f = WriteNew(fs, dir->get(), "log", "");
    REQUIRE(f->Sync().ok());
    REQUIRE(f->WriteAt(0, Bytes("abcdef")).ok());
    REQUIRE(f->Truncate(3).ok());
    f.reset();
    dir = UniqueFd();
    Rng rng(seed);
    fs.PowerCut(rng);
    const std::string got = Contents(fs.root() + "/log");
    lagged = got == std::string(3, '\0');
  }
  REQUIRE(lagged);
}

TEST_CASE(
    "sim fs: a truncation an fsync made durable ahead of earlier writes drops their bytes past it",
    "[sim_fs]") {
  // The log is truncated (metadata) while an append before it is still in
  // the page cache; an fsync of another file makes the truncation durable
  // (kMetadataOrdered: every metadata operation) but not the append. The
  // kernel dropped the pages past the new size at the truncation: the
  // append's bytes past it never reach the disk, those below it may.
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SimFs fs(DiskOrder::kMetadataOrdered);
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    auto f = WriteNew(fs, dir->get(), "log", "");
    REQUIRE(f->Sync().ok());
    REQUIRE(fs.SyncDir(dir->get()).ok());
    REQUIRE(f->WriteAt(0, Bytes("abcdef")).ok());
    REQUIRE(f->Truncate(3).ok());
    auto other = WriteNew(fs, dir->get(), "other", "x");
    REQUIRE(other->Sync().ok());
    other.reset();
    f.reset();
    dir = UniqueFd();
    Rng rng(seed);
    fs.PowerCut(rng);
    const std::string got = Contents(fs.root() + "/log");
    INFO("seed " << seed << ": " << got.size() << " bytes");
    REQUIRE(got.size() == 3);
    for (size_t i = 0; i < got.size(); ++i) REQUIRE((got[i] == '\0' || got[i] == "abc"[i]));
    seen.insert(got);
  }
  // Both the lost append and the kept part below the truncation occur.
  REQUIRE(seen.count(std::string(3, '\0')) == 1);
  REQUIRE(seen.count("abc") == 1);
}

TEST_CASE("sim fs: metadata in order, a file written whole and renamed comes with its data",
          "[sim_fs]") {
  // replication.md §17.9: the checkpoint files, each written whole and
  // renamed over the old one, are kept in order with the metadata.
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    SimFs fs(DiskOrder::kMetadataOrdered);
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    REQUIRE(WriteFileAtomic(dir->get(), "cp", Bytes("old"), &fs).ok());
    REQUIRE(WriteFileAtomic(dir->get(), "cp", Bytes("newer"), &fs, {}, false).ok());
    dir = UniqueFd();
    Rng rng(seed);
    fs.PowerCut(rng);
    const std::string got = Contents(fs.root() + "/cp");
    REQUIRE((got == "old" || got == "newer"));
    seen.insert(got);
  }
  REQUIRE(seen == std::set<std::string>{"old", "newer"});
}

TEST_CASE("sim fs: an unsynced file creation may be lost, a synced directory keeps it",
          "[sim_fs]") {
  std::set<bool> existed;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SimFs fs(DiskOrder::kIndependent);
    auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
    auto sub = fs.OpenDir(dir->get(), "p-0", true);
    REQUIRE(sub);
    REQUIRE(fs.SyncDir(dir->get()).ok());
    auto f = WriteNew(fs, sub->get(), "seg", "data");
    REQUIRE(f->Sync().ok());  // the data, not the name
    f.reset();
    sub = UniqueFd();
    dir = UniqueFd();
    Rng rng(seed);
    fs.PowerCut(rng);
    REQUIRE(test::Exists(fs.root() + "/p-0"));
    existed.insert(test::Exists(fs.root() + "/p-0/seg"));
  }
  REQUIRE(existed == std::set<bool>{false, true});
}

TEST_CASE("sim fs: an injected write error writes the prefix asked for and fails", "[sim_fs]") {
  SimFs fs;
  auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
  auto f = WriteNew(fs, dir->get(), "f", "ab");
  fs.FailNextWrite(2);
  Status s = f->WriteAt(2, Bytes("cdef"));
  REQUIRE(s.code() == Code::kIoError);
  REQUIRE(fs.write_failed());
  REQUIRE(Contents(fs.root() + "/f") == "abcd");
  REQUIRE(f->WriteAt(4, Bytes("ef")).ok());  // only the next one
  REQUIRE(Contents(fs.root() + "/f") == "abcdef");
}

TEST_CASE("sim fs: a file written through a writable mapping is kept or lost whole", "[sim_fs]") {
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SimFs fs;
    {
      auto dir = fs.OpenDir(AT_FDCWD, fs.root(), false);
      auto f = WriteNew(fs, dir->get(), "state", "00000000");
      REQUIRE(f->Sync().ok());
      auto m = fs.Map(f->fd(), 8, true);
      REQUIRE(m);
      std::memcpy(m->data, "11111111", 8);
    }
    Rng rng(seed);
    fs.PowerCut(rng);
    const std::string got = Contents(fs.root() + "/state");
    REQUIRE((got == "00000000" || got == "11111111"));
    seen.insert(got);
  }
  REQUIRE(seen.size() == 2);
}

}  // namespace mq::sim
