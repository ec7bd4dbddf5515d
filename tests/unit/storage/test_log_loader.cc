// The log loader (log_loader.h): a partition's recovery when its writer
// opens it (segment.md §12; R24, R27, R40).
#include <catch2/catch.hpp>

#include "storage/recovery.h"
#include "storage/state_file.h"
#include "writer_units_support.h"

namespace mq {
namespace {

using test::OpenedView;
using test::ScopedBootId;
using test::TempDir;

}  // namespace

TEST_CASE(
    "R27 log loader: a same-boot open cuts what lies past the committed end and defers "
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

TEST_CASE(
    "R59 log loader: a recovered state file older than the truncation history goes on "
    "from the history's counter") {
  // A power loss can keep an older page of the state file (its counter
  // from before two cuts) beside the truncation history, which was synced
  // when each cut began. Recovery must not publish a counter the history
  // already names: readers would take those cuts for ones still under way
  // and hold the log back from its start.
  TempDir tmp;
  std::string dir = tmp / "t-0";
  const std::string state = dir + "/" + kStateFileName;
  std::vector<std::byte> old_state;
  {
    ScopedBootId boot("0000aaaa-0000-0000-0000-00000000aaaa");
    test::WriteLog(dir, 5);  // offsets 0..9
    old_state = test::ReadFile(state);
    auto w = PartitionWriter::Open(dir, LogConfig{}, false, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->TruncateTo(8).ok());
    REQUIRE((*w)->TruncateTo(6).ok());
    REQUIRE((*w)->Close().ok());
  }
  uint32_t last_cut = 0;
  {
    PartitionDir d;
    test::FillDir(&d, dir);
    auto history = ReadTruncations(d.fd(), d.fs, dir);
    REQUIRE(history);
    REQUIRE(!history->empty());
    REQUIRE(history->back().rewrites);
    last_cut = *history->back().rewrites;
  }
  test::WriteFile(state, old_state);  // the page the power loss kept
  ScopedBootId reboot("0000bbbb-0000-0000-0000-00000000bbbb");
  {
    OpenedView v(dir);
    INFO("published " << v.view.fields.rewrites << ", the history's last cut " << last_cut);
    CHECK(RewritesAfter(v.view.fields.rewrites, last_cut));
    CHECK(v.view.fields.log_end_offset == 6);
  }
  auto got = test::ReadAll(dir);
  REQUIRE(got.size() == 3);
  CHECK(got.front().first == 0);
  CHECK(got.back().second == 5);
}

TEST_CASE(
    "R37 log loader: the epochs are loaded at open for a writer stamping one, or when a "
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
