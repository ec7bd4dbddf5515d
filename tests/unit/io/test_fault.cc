// Failures beneath the log, through the FileSystem seam: fsync errors poison
// the writer (fsyncgate), write errors leave no partial batch, symlinks are
// refused.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <filesystem>

#include "mq/file.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

TEST_CASE("fault: a failed fsync fails the Append and poisons the writer") {
  TempDir tmp;
  std::string dir = tmp / "f-0";
  FaultFs fs;
  LogConfig config;
  config.fs = &fs;
  config.durability = Durability::kEveryBatch;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  auto ok = MakeBatch(2);
  REQUIRE((*w)->Append(ok));
  fs.FailSync(1);
  auto bad = MakeBatch(3);
  auto r = (*w)->Append(bad);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kIoError);
  fs.Clear();  // the disk "recovers": the writer must still refuse
  auto again = MakeBatch(1);
  auto r2 = (*w)->Append(again);
  REQUIRE(!r2);
  CHECK((*w)->Flush().code() == Code::kIoError);
  // Readers never saw the unacknowledged batch.
  auto reader = PartitionReader::Open(dir);
  REQUIRE(reader);
  CHECK((*reader)->end_offset() == 2);
  (void)(*w)->Close();
  // A new writer starts from what was acknowledged.
  auto w2 = PartitionWriter::Open(dir, LogConfig{}, false, nullptr);
  REQUIRE(w2);
  CHECK((*w2)->log_end_offset() == 2);
}

TEST_CASE("fault: a failed fsync in Flush is returned and never retried into success") {
  TempDir tmp;
  std::string dir = tmp / "f-0";
  FaultFs fs;
  LogConfig config;
  config.fs = &fs;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  auto b = MakeBatch(2);
  REQUIRE((*w)->Append(b));
  fs.FailSync(1);
  CHECK((*w)->Flush().code() == Code::kIoError);
  fs.Clear();
  CHECK(!(*w)->Flush().ok());
  CHECK(!(*w)->Close().ok());
}

TEST_CASE("fault: write errors (EIO, ENOSPC, short write) leave no partial batch after reopen") {
  using Fault = FaultFs::Fault;
  for (Fault fault : {Fault::kEio, Fault::kEnospc, Fault::kShortWrite}) {
    for (int n = 1; n <= 3; ++n) {
      TempDir tmp;
      std::string dir = tmp / "f-0";
      FaultFs fs;
      LogConfig config;
      config.fs = &fs;
      config.index_interval_bytes = 50;
      auto w = PartitionWriter::Open(dir, config, true, nullptr);
      REQUIRE(w);
      for (int i = 0; i < 3; ++i) {
        auto b = MakeBatch(2, 1000 + i, 40);
        REQUIRE((*w)->Append(b));
      }
      fs.FailWrite(n, fault);
      auto b = MakeBatch(4, 2000, 40);
      auto r = (*w)->Append(b);
      INFO("fault " << static_cast<int>(fault) << " at write " << n);
      if (r) continue;  // the Nth write was not in this append
      CHECK(r.error().code() != Code::kOk);
      (void)(*w)->Close();
      w->reset();
      RecoveryReport report;
      auto w2 = PartitionWriter::Open(dir, LogConfig{}, false, &report);
      REQUIRE(w2);
      CHECK((*w2)->log_end_offset() == 6);
      auto all = ReadAll(dir);
      CHECK(all.size() == 3);
      std::vector<Problem> problems;
      REQUIRE(VerifyPartition(dir, {}, &problems).ok());
      CHECK(problems.empty());
    }
  }
}

TEST_CASE("fault: a symlink planted in place of a segment or the state file is refused") {
  TempDir tmp;
  std::string dir = tmp / "f-0";
  {
    auto w = PartitionWriter::Open(dir, {}, true, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(1);
    REQUIRE((*w)->Append(b));
  }
  std::string victim = tmp / "victim";
  WriteFile(victim, std::vector<std::byte>(100, std::byte{'x'}));
  SECTION("segment") {
    std::string log = dir + "/" + SegmentFileName(0, ".log");
    std::filesystem::remove(log);
    std::filesystem::create_symlink(victim, log);
    auto w = PartitionWriter::Open(dir, {}, false, nullptr);
    REQUIRE(!w);
    CHECK(w.error().code() == Code::kPermission);
    auto r = PartitionReader::Open(dir);
    if (r) {
      auto b = (*r)->Next();
      CHECK(!b);
    }
  }
  SECTION("state file") {
    std::filesystem::remove(dir + "/state");
    std::filesystem::create_symlink(victim, dir + "/state");
    auto w = PartitionWriter::Open(dir, {}, false, nullptr);
    REQUIRE(!w);
    CHECK(w.error().code() == Code::kPermission);
    auto r = PartitionReader::Open(dir);
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kPermission);
  }
  SECTION("partition directory") {
    std::string link = tmp / "link-0";
    std::filesystem::create_directory_symlink(dir, link);
    auto w = PartitionWriter::Open(link, {}, false, nullptr);
    REQUIRE(!w);
    CHECK(w.error().code() == Code::kPermission);
  }
  CHECK(ReadFile(victim) == std::vector<std::byte>(100, std::byte{'x'}));
}
