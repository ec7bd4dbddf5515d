// Partition writer and reader: appends, reads, seeks, rolls, truncation,
// retention (format-spec/segment.md §6-§9).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "format.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

std::unique_ptr<PartitionWriter> OpenWriter(const std::string& dir, LogConfig config = {},
                                            RecoveryReport* report = nullptr) {
  auto w = PartitionWriter::Open(dir, config, true, report);
  INFO((w ? "" : w.error().message()));
  REQUIRE(w);
  return std::move(*w);
}

AppendResult AppendOne(PartitionWriter& w, int count, int64_t ts = 1000, size_t value_bytes = 8) {
  auto b = MakeBatch(count, ts, value_bytes);
  auto r = w.Append(b);
  INFO((r ? "" : r.error().message()));
  REQUIRE(r);
  return *r;
}

}  // namespace

TEST_CASE("partition: appends get consecutive offsets and read back in order") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto w = OpenWriter(dir);
  CHECK(w->log_end_offset() == 0);
  auto a = AppendOne(*w, 3);
  CHECK(a.base_offset == 0);
  CHECK(a.last_offset == 2);
  auto b = AppendOne(*w, 5);
  CHECK(b.base_offset == 3);
  CHECK(b.last_offset == 7);
  CHECK(w->log_end_offset() == 8);

  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  CHECK((*r)->end_offset() == 8);
  std::vector<std::byte> scratch;
  int64_t expect = 0;
  for (;;) {
    auto v = (*r)->Next();
    REQUIRE(v);
    if (!*v) break;
    auto rr = RecordReader::Open(**v, &scratch, {});
    REQUIRE(rr);
    for (;;) {
      auto rec = rr->Next();
      REQUIRE(rec);
      if (!*rec) break;
      CHECK((*rec)->offset == expect);
      ++expect;
    }
  }
  CHECK(expect == 8);
  CHECK(w->Close().ok());
}

TEST_CASE("partition: several batches in one Append call") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto w = OpenWriter(dir);
  auto buf = MakeBatch(2);
  auto second = MakeBatch(4);
  buf.insert(buf.end(), second.begin(), second.end());
  auto r = w->Append(buf);
  REQUIRE(r);
  CHECK(r->base_offset == 0);
  CHECK(r->last_offset == 5);
  CHECK(r->batches == 2);
  CHECK(ReadAll(dir) == std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {2, 5}});
}

TEST_CASE("partition: reopen continues at the log end") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  {
    auto w = OpenWriter(dir);
    AppendOne(*w, 10);
    CHECK(w->Close().ok());
  }
  RecoveryReport report;
  auto w = OpenWriter(dir, {}, &report);
  CHECK(report.repaired.empty());
  CHECK(w->log_end_offset() == 10);
  CHECK(AppendOne(*w, 1).base_offset == 10);
}
