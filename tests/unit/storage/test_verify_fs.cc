// Verification (VerifyPartition, VerifyForLeadership, FindLogDamage,
// VerifyFile) and the follower's repair (RepairFollowerLog) read through
// the FileSystem seam their caller passes, as the writer and the reader
// do, so a simulated or failing file system sees every read.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "format/format.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replication.h"
#include "mq/segment.h"
#include "storage/state_file.h"
#include "storage/verify.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The real file system, but an open of a name ending in `suffix` fails
// with an I/O error.
class FailSuffixFs : public FileSystemWrapper {
 public:
  explicit FailSuffixFs(std::string suffix) : suffix_(std::move(suffix)) {}
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (EndsWith(name, suffix_)) {
      ++failed;
      return Status(Code::kIoError, "injected: open " + name);
    }
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  int failed = 0;

 private:
  std::string suffix_;
};

// A partition of a few segments, closed (its state file published).
std::string WrittenPartition(const TempDir& tmp) {
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 12);
  REQUIRE(w->Close().ok());
  return dir;
}

}  // namespace

TEST_CASE("verify reads every file through the FileSystem passed in") {
  TempDir tmp;
  const std::string dir = WrittenPartition(tmp);
  std::vector<Problem> clean;
  REQUIRE(VerifyPartition(dir, {}, &clean).ok());
  CHECK(clean.empty());
  REQUIRE(ListDirEndingIn(dir, format::kLogSuffix).size() > 1);
  for (const std::string suffix :
       {std::string(format::kLogSuffix), std::string(format::kIndexSuffix),
        std::string(format::kTimeIndexSuffix), std::string(kStateFileName)}) {
    CAPTURE(suffix);
    FailSuffixFs fs(suffix);
    std::vector<Problem> problems;
    Status s = VerifyPartition(dir, {}, &problems, OffsetPolicy::kGapsAllowed, nullptr, &fs);
    CHECK(s.code() == Code::kIoError);
    CHECK(fs.failed > 0);
    CHECK(VerifyForLeadership(dir, {}, &fs).code() == Code::kIoError);
    auto damage = FindLogDamage(dir, {}, &fs);
    REQUIRE(!damage);
    CHECK(damage.error().code() == Code::kIoError);
  }
  // One file verified alone, a .log and an index against its .log.
  const std::string first = dir + "/" + ListDirEndingIn(dir, format::kLogSuffix).front();
  const std::string index = first.substr(0, first.size() - 4) + format::kTimeIndexSuffix;
  for (const std::string& path : {first, index}) {
    CAPTURE(path);
    std::vector<Problem> problems;
    REQUIRE(VerifyFile(path, {}, &problems).ok());
    FailSuffixFs fs(format::kLogSuffix);
    CHECK(VerifyFile(path, {}, &problems, nullptr, &fs).code() == Code::kIoError);
    CHECK(fs.failed == 1);
  }
}

TEST_CASE("repair of a follower's log verifies it through its LogConfig's FileSystem") {
  TempDir tmp;
  const std::string dir = WrittenPartition(tmp);
  LogConfig config;
  auto nothing = RepairFollowerLog(dir, config);  // the real file system: nothing damaged
  REQUIRE(nothing);
  CHECK(!*nothing);
  FailSuffixFs fs(format::kLogSuffix);
  config.fs = &fs;
  auto repaired = RepairFollowerLog(dir, config);
  REQUIRE(!repaired);
  CHECK(repaired.error().code() == Code::kIoError);
  CHECK(fs.failed > 0);
}
