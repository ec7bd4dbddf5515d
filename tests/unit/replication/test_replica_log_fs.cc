// The free functions of replica_log.cc (mq/replication.h: the follower-stop
// record R58, the fetch positions R60, the leader claim R53/R55) do their
// I/O through the FileSystem seam their caller passes, so a simulated or
// failing file system sees every call, as the ReplicaLog's own calls do.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>
#include <utility>

#include "format/format.h"
#include "mq/file.h"
#include "mq/replication.h"
#include "storage/state_file.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// The real file system, but an open or unlink of a name that holds `part`
// (the file, or the temporary file an atomic write renames over it) fails
// with an I/O error.
class FailNameFs : public FileSystemWrapper {
 public:
  explicit FailNameFs(std::string part) : part_(std::move(part)) {}
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (name.find(part_) != std::string::npos) {
      ++failed;
      return Status(Code::kIoError, "injected: open " + name);
    }
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  Status Unlink(int dir_fd, const std::string& name) override {
    if (name.find(part_) != std::string::npos) {
      ++failed;
      return Status(Code::kIoError, "injected: unlink " + name);
    }
    return FileSystemWrapper::Unlink(dir_fd, name);
  }
  int failed = 0;

 private:
  std::string part_;
};

std::string PartitionDir(const TempDir& tmp) {
  const std::string dir = tmp / "t-0";
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  return dir;
}

}  // namespace

TEST_CASE("R58 follower-stop record, read and clear go through the FileSystem passed in") {
  TempDir tmp;
  const std::string dir = PartitionDir(tmp);
  const FollowerStop stop{1234, 69};
  FailNameFs fs(format::kFollowerStoppedName);
  Status recorded = RecordFollowerStop(dir, stop, &fs);
  CHECK(recorded.code() == Code::kIoError);
  CHECK(fs.failed == 1);
  auto none = ReadFollowerStop(dir);  // the real file system: nothing was written
  REQUIRE(none);
  CHECK(!*none);

  REQUIRE(RecordFollowerStop(dir, stop).ok());
  auto read = ReadFollowerStop(dir, &fs);
  REQUIRE(!read);
  CHECK(read.error().code() == Code::kIoError);
  Status cleared = ClearFollowerStop(dir, &fs);
  CHECK(cleared.code() == Code::kIoError);
  CHECK(fs.failed == 3);
  auto kept = ReadFollowerStop(dir);  // the failed clear left the record
  REQUIRE(kept);
  REQUIRE(*kept);
  CHECK(**kept == stop);
}

TEST_CASE("R60 ReadReplicaPositions goes through the FileSystem passed in") {
  TempDir tmp;
  const std::string dir = PartitionDir(tmp);
  auto none = ReadReplicaPositions(dir);  // no file: no follower
  REQUIRE(none);
  CHECK(none->empty());
  FailNameFs fs(format::kFetchPositionsName);
  auto read = ReadReplicaPositions(dir, &fs);
  REQUIRE(!read);
  CHECK(read.error().code() == Code::kIoError);
  CHECK(fs.failed == 1);
}

TEST_CASE("R55 RestartedSinceClaim goes through the FileSystem passed in") {
  TempDir tmp;
  const std::string dir = PartitionDir(tmp);
  const std::string text = EncodeLeaderClaim({3, CurrentBootId()});
  WriteFile(dir + "/" + format::kLeaderClaimName,
            std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                   reinterpret_cast<const std::byte*>(text.data()) + text.size()));
  auto same = RestartedSinceClaim(dir);
  REQUIRE(same);
  CHECK(!*same);  // claimed on this boot
  FailNameFs fs(format::kLeaderClaimName);
  auto read = RestartedSinceClaim(dir, &fs);
  REQUIRE(!read);
  CHECK(read.error().code() == Code::kIoError);
  CHECK(fs.failed == 1);
}
