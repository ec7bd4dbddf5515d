// The producer-id registry (mq/producer_id.h, format-spec/producer.md
// §10.3, P8): a name's id, the lock a run holds on it, and the registry
// files, read and written through the FileSystem seam so that every
// failure of them can be injected.
#include <catch2/catch.hpp>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mq/cluster.h"
#include "mq/producer_id.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Fails what the registry does besides writing: taking a lock (kTry: the
// name's lock file, kBlock: the registry directory's), opening a file or
// a directory by name.
class FailingFs : public FileSystemWrapper {
 public:
  LockWait fail_lock_wait = LockWait::kBlock;
  Code lock_code = Code::kOk;  // kOk: locks are taken
  std::string fail_open;       // a file name whose open fails with EIO
  std::string fail_open_dir;   // a directory name whose open fails with EACCES
  Status Lock(int fd, LockMode mode, LockWait wait) override {
    if (lock_code != Code::kOk && wait == fail_lock_wait)
      return lock_code == Code::kBusy ? Status(Code::kBusy, "held") : ErrnoStatus("flock", EIO);
    return FileSystemWrapper::Lock(fd, mode, wait);
  }
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (name == fail_open) return ErrnoStatus("open " + name, EIO);
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) override {
    if (path == fail_open_dir) return ErrnoStatus("open " + path, EACCES);
    return FileSystemWrapper::OpenDir(at_fd, path, create);
  }
};

}  // namespace

TEST_CASE(
    "P8 producer-id registry: a name keeps its id, a new name gets the next, a held name is busy") {
  TempDir tmp;
  int64_t first = -1;
  {
    auto a = ProducerIdentity::Acquire(tmp.path(), "ingestA");
    REQUIRE(a.has_value());
    first = a->id();
    CHECK(first == 0);
    auto b = ProducerIdentity::Acquire(tmp.path(), "ingestB");
    REQUIRE(b.has_value());
    CHECK(b->id() == 1);
    // A second run under a held name is kept out, without waiting.
    auto again = ProducerIdentity::Acquire(tmp.path(), "ingestA");
    REQUIRE_FALSE(again.has_value());
    CHECK(again.error().code() == Code::kBusy);
    CHECK(again.error().message().find(tmp / "producers/ingestA.lock") != std::string::npos);
  }
  // Released, the name is free again and keeps its id.
  auto a = ProducerIdentity::Acquire(tmp.path(), "ingestA");
  REQUIRE(a.has_value());
  CHECK(a->id() == first);
  CHECK(Slurp(tmp / "producers/ingestA.id") == "0\n");
  CHECK(Slurp(tmp / "producers/ingestB.id") == "1\n");
  CHECK(Slurp(tmp / "producers/next-producer-id") == "2\n");
  CHECK_FALSE(Exists(tmp / "producers/id.tmp"));
  // A name is a topic name (R12): nothing is created for one that is not.
  CHECK(ProducerIdentity::Acquire(tmp.path(), "../x").error().code() == Code::kInvalidArgument);
  CHECK(ProducerIdentity::Acquire(tmp.path(), "").error().code() == Code::kInvalidArgument);
  CHECK(Slurp(tmp / "producers/next-producer-id") == "2\n");
  // A data directory that does not exist is not created.
  CHECK(ProducerIdentity::Acquire(tmp / "none", "x").error().code() == Code::kNotFound);
}

TEST_CASE(
    "P8 producer-id registry: a damaged registry file is corruption naming it, never a new id") {
  TempDir tmp;
  { REQUIRE(ProducerIdentity::Acquire(tmp.path(), "ingestA").has_value()); }
  for (const std::string& bad :
       std::vector<std::string>{"12x\n", "-1\n", "\n", "", std::string(33, '1')}) {
    INFO("ingestA.id holds '" << bad << "'");
    Spit(tmp / "producers/ingestA.id", bad);
    auto got = ProducerIdentity::Acquire(tmp.path(), "ingestA");
    REQUIRE_FALSE(got.has_value());
    CHECK(got.error().code() == Code::kCorruption);
    CHECK(got.error().rule() == "P8");
    CHECK(got.error().file() == tmp / "producers/ingestA.id");
    CHECK(Slurp(tmp / "producers/next-producer-id") == "1\n");
  }
  // 32 bytes (a number and its newline) is the most a registry file holds.
  std::string padded(18, '0');
  padded.append("7\n");  // appended: g++ 12 warns falsely on a temporary + a literal
  Spit(tmp / "producers/ingestA.id", padded);
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestA").value().id() == 7);
  Spit(tmp / "producers/next-producer-id", "x");
  auto next = ProducerIdentity::Acquire(tmp.path(), "ingestB");
  REQUIRE_FALSE(next.has_value());
  CHECK(next.error().file() == tmp / "producers/next-producer-id");
  CHECK_FALSE(Exists(tmp / "producers/ingestB.id"));
}

TEST_CASE(
    "P8 producer-id registry: a write that fails between counter and name wastes an id, never "
    "gives one twice") {
  TempDir tmp;
  FaultFs faults;
  { REQUIRE(ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &faults).has_value()); }
  // The counter's rename succeeds, the name's fails: no id for the name,
  // the counter past the id it was to get.
  faults.FailRename(2);
  auto failed = ProducerIdentity::Acquire(tmp.path(), "ingestB", nullptr, &faults);
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code() == Code::kIoError);
  faults.Clear();
  CHECK_FALSE(Exists(tmp / "producers/ingestB.id"));
  CHECK(Slurp(tmp / "producers/next-producer-id") == "2\n");
  // The failed run let the name go: asked again, it gets the next id.
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestB", nullptr, &faults).value().id() == 2);
  // A full disk writing the counter, a failed fsync of it: nothing
  // allocated, nothing wasted, no staging file left.
  faults.FailWrite(1, FaultFs::Fault::kEnospc);
  auto full = ProducerIdentity::Acquire(tmp.path(), "ingestC", nullptr, &faults);
  REQUIRE_FALSE(full.has_value());
  CHECK(full.error().code() == Code::kIoError);
  CHECK(full.error().message().find("No space left") != std::string::npos);
  faults.Clear();
  faults.FailSync(1);
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestC", nullptr, &faults).error().code() ==
        Code::kIoError);
  faults.Clear();
  CHECK(Slurp(tmp / "producers/next-producer-id") == "3\n");
  CHECK_FALSE(Exists(tmp / "producers/ingestC.id"));
  CHECK_FALSE(Exists(tmp / "producers/id.tmp"));
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestC", nullptr, &faults).value().id() == 3);
  // A name's own id is read, never written again.
  faults.FailWrite(1, FaultFs::Fault::kEio, true);
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &faults).value().id() == 0);
}

TEST_CASE(
    "P8 producer-id registry: a failed lock, open or directory is an error, nothing allocated") {
  TempDir tmp;
  FailingFs fs;
  // The registry directory's lock fails: an I/O error naming the registry.
  fs.lock_code = Code::kIoError;
  auto locked = ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &fs);
  REQUIRE_FALSE(locked.has_value());
  CHECK(locked.error().code() == Code::kIoError);
  CHECK(locked.error().message().find(tmp / "producers: lock:") != std::string::npos);
  CHECK_FALSE(Exists(tmp / "producers/next-producer-id"));
  // The name's lock held elsewhere (kTry): busy, naming the lock file.
  fs.lock_code = Code::kBusy;
  fs.fail_lock_wait = LockWait::kTry;
  auto busy = ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &fs);
  REQUIRE_FALSE(busy.has_value());
  CHECK(busy.error().code() == Code::kBusy);
  CHECK(busy.error().message().find("producer id 'ingestA' is in use") != std::string::npos);
  fs.lock_code = Code::kOk;
  // The counter cannot be read: its error, no id.
  fs.fail_open = "next-producer-id";
  auto unread = ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &fs);
  REQUIRE_FALSE(unread.has_value());
  CHECK(unread.error().code() == Code::kIoError);
  CHECK_FALSE(Exists(tmp / "producers/ingestA.id"));
  fs.fail_open.clear();
  // The registry directory cannot be opened: permission, nothing created.
  fs.fail_open_dir = "producers";
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &fs).error().code() ==
        Code::kPermission);
  fs.fail_open_dir.clear();
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestA", nullptr, &fs).value().id() == 0);
}

TEST_CASE(
    "P10 producer-id registry: a cluster's name takes the cluster's id, the root's registry "
    "untouched") {
  TempDir tmp;
  struct OneId : ClusterStore {
    int calls = 0;
    Result<ClusterState> Load() override { return ClusterState{}; }
    Result<PartitionState> AlterPartition(const PartitionState& p, std::string_view) override {
      return p;
    }
    Result<int64_t> ProducerId(std::string_view name) override {
      ++calls;
      if (name == "gone") return Status(Code::kUnavailable, "cluster down");
      return int64_t{4294967296};
    }
  } cluster;
  FaultFs faults;
  // Every write of the root's registry would fail: none is made.
  faults.FailWrite(1, FaultFs::Fault::kEio, true);
  auto id = ProducerIdentity::Acquire(tmp.path(), "ingestA", &cluster, &faults);
  REQUIRE(id.has_value());
  CHECK(id->id() == 4294967296);
  CHECK(cluster.calls == 1);
  CHECK_FALSE(Exists(tmp / "producers/next-producer-id"));
  CHECK_FALSE(Exists(tmp / "producers/ingestA.id"));
  // The name stays locked while the id is held.
  CHECK(ProducerIdentity::Acquire(tmp.path(), "ingestA", &cluster).error().code() == Code::kBusy);
  CHECK(ProducerIdentity::Acquire(tmp.path(), "gone", &cluster).error().code() ==
        Code::kUnavailable);
}
