// The log loader (log_loader.h): a partition's recovery when its writer
// opens it (segment.md §12; R24, R27, R40).
#include <catch2/catch.hpp>

#include "recovery.h"
#include "state_file.h"
#include "writer_units_support.h"

namespace mq {
namespace {

using test::OpenedView;
using test::TempDir;

}  // namespace

TEST_CASE("R27 log loader: a same-boot open cuts what lies past the committed end and defers "
          "the producer table") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  BatchOptions o;
  o.producer_id = 3;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  test::WriteLog(dir, 3, 2, o);
  const std::string log = dir + "/00000000000000000000.log";
  const uint64_t committed = test::FileSize(log);
  test::AppendToFile(log, test::MakeBatch(2));  // never published
  OpenedView v(dir);
  CHECK(v.Repaired("unpublished-tail"));
  CHECK(v.report.bytes_truncated > 0);
  CHECK(test::FileSize(log) == committed);
  CHECK(v.view.fields.log_end_offset == 6);
  CHECK_FALSE(v.view.producers.loaded());
  REQUIRE(v.view.EnsureProducers().ok());
  CHECK(*v.view.producers.table().LastSequence(3) == 5);
}

TEST_CASE("R24 log loader: a missing state file is rebuilt from the log and reported") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 4);
  REQUIRE(::unlink((dir + "/" + kStateFileName).c_str()) == 0);
  OpenedView v(dir);
  CHECK(v.Repaired("R24"));
  CHECK(v.view.fields.log_end_offset == 8);
  CHECK(v.view.producers.loaded());
  auto state = StateFile::OpenForRead(v.view.fd());
  REQUIRE(state);
  CHECK(state->Read()->log_end_offset == 8);
}

TEST_CASE("R40 log loader: an interrupted truncation is completed before the log is recovered") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 5);  // offsets 0..9
  {
    PartitionDir d;
    test::FillDir(&d, dir);
    REQUIRE(WriteTruncateIntent(d.fd(), d.fs, 4, true).ok());
  }
  OpenedView v(dir);
  CHECK(v.Repaired("R40"));
  CHECK(v.view.fields.log_end_offset == 4);
  CHECK(test::ReadAll(dir).back().second == 3);
  CHECK_FALSE(test::Exists(dir + "/" + format::kTruncateIntentName));
}

TEST_CASE("R37 log loader: the epochs are loaded at open for a writer stamping one, or when a "
          "checkpoint is listed") {
  TempDir tmp;
  std::string plain = tmp / "p-0";
  test::WriteLog(plain, 2);
  OpenedView unstamped(plain);
  CHECK_FALSE(unstamped.view.epochs.loaded());
  std::string led = tmp / "l-0";
  LogConfig leader;
  leader.leader_epoch = 2;
  test::WriteLog(led, 2, 2, {}, leader);
  OpenedView reader(led);  // stamps no epoch, finds the checkpoint
  REQUIRE(reader.view.epochs.loaded());
  CHECK(reader.view.epochs.cache().latest()->epoch == 2);
}

}  // namespace mq
