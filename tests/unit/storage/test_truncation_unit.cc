// The truncation unit (truncation.h): finding a cut, writing it down
// before anything changes (R59, R40, R38), applying it, and completing an
// interrupted one (R40).
#include <catch2/catch.hpp>

#include "mq/replica_checkpoint.h"
#include "storage/recovery.h"
#include "storage/segment.h"
#include "storage/truncation.h"
#include "writer_units_support.h"

namespace mq {
namespace {

using test::OpenedView;
using test::TempDir;

LogConfig Small() {
  LogConfig c;
  c.segment_bytes = 700;
  return c;
}

}  // namespace

TEST_CASE(
    "R40 truncation unit: a cut is written down and published before anything goes, "
    "then applied and its intent removed") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 20, 2, {}, Small());  // offsets 0..39, several segments
  OpenedView v(dir, Small());
  REQUIRE(StoreHighWatermark(v.view.fd(), "t", 0, 40).ok());
  const uint32_t rewrites = v.view.fields.rewrites;
  auto cut = PlanCut(v.view, v.view.segments, 13);
  REQUIRE(cut);
  CHECK(cut->end == 12);  // the batch holding 12-13 goes whole
  REQUIRE(CommitCut(&v.view, *cut).ok());
  // Written down (R59 history naming the rewrites value, R40 intent, R38
  // high watermark) and published; nothing cut yet.
  CHECK(test::Exists(dir + "/" + format::kTruncateIntentName));
  auto history = ReadTruncations(v.view.fd(), v.view.fs, dir);
  REQUIRE(history);
  REQUIRE(history->size() == 1);
  CHECK(history->back().end == 12);
  CHECK(history->back().rewrites == rewrites + 1);
  CHECK(*LoadHighWatermark(v.view.fd(), "t", 0) == 12);
  CHECK(v.view.fields.log_end_offset == 12);
  CHECK(v.view.fields.rewrites == rewrites + 1);
  // Readers stop at the published end; the files still hold the rest.
  CHECK(test::ReadAll(dir).back().second == 11);
  auto listed = ListSegments(v.view.fd(), v.view.fs);
  REQUIRE(listed);
  CHECK(listed->back() > cut->keep);
  REQUIRE(ApplyCommittedCut(&v.view, *cut).ok());
  listed = ListSegments(v.view.fd(), v.view.fs);
  REQUIRE(listed);
  CHECK(listed->back() == cut->keep);
  CHECK(test::ReadAll(dir).back().second == 11);
  CHECK_FALSE(test::Exists(dir + "/" + format::kTruncateIntentName));
  CHECK(v.view.segments.back() == cut->keep);
}

TEST_CASE(
    "R40 truncation unit: an intent left behind is completed and reported, and the "
    "segments listed again") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 20, 2, {}, Small());
  PartitionDir d;
  test::FillDir(&d, dir, Small());
  REQUIRE(WriteTruncateIntent(d.fd(), d.fs, 13, true).ok());
  std::vector<int64_t> snapshots;
  auto segments = ListSegments(d.fd(), d.fs, &snapshots);
  REQUIRE(segments);
  const size_t before = segments->size();
  RecoveryReport report;
  // Not in the listing: not read, nothing done.
  auto skipped = CompleteTruncateIntent(d, false, &*segments, &snapshots, &report);
  REQUIRE(skipped);
  CHECK_FALSE(skipped->intent);
  CHECK(report.repaired.empty());
  auto done = CompleteTruncateIntent(d, true, &*segments, &snapshots, &report);
  REQUIRE(done);
  CHECK(done->intent);
  REQUIRE(done->truncated_to);
  CHECK(*done->truncated_to == 12);
  REQUIRE(report.repaired.size() == 1);
  CHECK(report.repaired[0].rule == "R40");
  CHECK(segments->size() < before);
  CHECK(test::Exists(dir + "/" + format::kTruncateIntentName));  // FinishCut removes it
  REQUIRE(FinishCut(d).ok());
  CHECK_FALSE(test::Exists(dir + "/" + format::kTruncateIntentName));
}

TEST_CASE("R56 truncation unit: a cut decided in an older leader epoch is fenced") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig leader = Small();
  leader.leader_epoch = 4;
  test::WriteLog(dir, 3, 2, {}, leader);
  OpenedView v(dir);
  Status stale = CheckCutEpoch(&v.view, 2, 3);
  CHECK(stale.code() == Code::kFenced);
  CHECK_THAT(stale.message(), Catch::Contains("R56"));
  CHECK(CheckCutEpoch(&v.view, 2, 4).ok());
  CHECK(CheckCutEpoch(&v.view, 2, -1).ok());
}

TEST_CASE("R38 truncation unit: a high watermark above the end is lowered and reported") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  test::WriteLog(dir, 3);
  PartitionDir d;
  test::FillDir(&d, dir);
  REQUIRE(StoreHighWatermark(d.fd(), "t", 0, 6).ok());
  RecoveryReport report;
  REQUIRE(LowerHighWatermarkTo(d, 6, &report).ok());
  CHECK(report.repaired.empty());
  REQUIRE(LowerHighWatermarkTo(d, 4, &report).ok());
  REQUIRE(report.repaired.size() == 1);
  CHECK(report.repaired[0].rule == "R38");
  CHECK(*LoadHighWatermark(d.fd(), "t", 0) == 4);
}

}  // namespace mq
