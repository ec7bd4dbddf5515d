// The segment's read side (log_segment.h): index look-ups for a segment
// named by its base (format-spec/segment.md §7, §8) and the header walk,
// checked against the entries the files really hold.
#include <catch2/catch.hpp>

#include <vector>

#include "format/format.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "storage/log_segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// One segment of `n` single-record batches, timestamps 5000, 5010, ...,
// with an index entry every 100 bytes.
void Build(const std::string& dir, int n) {
  LogConfig config;
  config.index_interval_bytes = 100;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < n; ++i) {
    auto b = MakeBatch(1, 5000 + i * 10, 20);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
}

}  // namespace

TEST_CASE("§7 segment read side: FindOffsetEntry is the offset index's entry at or below",
          "[log_segment][index]") {
  TempDir tmp;
  Build(tmp.path(), 40);
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto entries = ReadOffsetIndexFile(tmp / SegmentFileName(0, format::kIndexSuffix));
  REQUIRE(entries);
  REQUIRE(entries->size() >= 3);
  FileSystem* fs = FileSystem::Default();
  const OffsetIndexEntry& second = (*entries)[1];
  auto at = LogSegment::FindOffsetEntry(fs, dir->get(), 0, second.offset);
  REQUIRE(at);
  CHECK(at->offset == second.offset);
  CHECK(at->position == second.position);
  auto between = LogSegment::FindOffsetEntry(fs, dir->get(), 0, (*entries)[2].offset - 1);
  REQUIRE(between);
  CHECK(between->offset == second.offset);
  CHECK_FALSE(LogSegment::FindOffsetEntry(fs, dir->get(), 0, entries->front().offset - 1));
  // No such segment: no entry (the index is a hint).
  CHECK_FALSE(LogSegment::FindOffsetEntry(fs, dir->get(), 1000, 1005));
}

TEST_CASE("§8 segment read side: LastTimeEntry and TimeEntryBelow", "[log_segment][index]") {
  TempDir tmp;
  Build(tmp.path(), 40);
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto entries = ReadTimeIndexFile(tmp / SegmentFileName(0, format::kTimeIndexSuffix));
  REQUIRE(entries);
  REQUIRE(entries->size() >= 2);
  FileSystem* fs = FileSystem::Default();
  uint64_t at = 0;
  auto last = LogSegment::LastTimeEntry(fs, dir->get(), 0, &at);
  REQUIRE(last);
  CHECK(last->timestamp == entries->back().timestamp);
  CHECK(last->offset == entries->back().offset);
  CHECK(at == (entries->size() - 1) * format::kTimeIndexEntrySize);
  // The entry before the first at or past a timestamp.
  const TimeIndexEntry& second = (*entries)[1];
  auto below = LogSegment::TimeEntryBelow(fs, dir->get(), 0, second.timestamp);
  REQUIRE(below);
  CHECK(below->timestamp == entries->front().timestamp);
  CHECK_FALSE(LogSegment::TimeEntryBelow(fs, dir->get(), 0, entries->front().timestamp));
  CHECK_FALSE(LogSegment::LastTimeEntry(fs, dir->get(), 1000));
}

TEST_CASE("§6 segment read side: ForEachHeaderFrom starts at a checked index entry",
          "[log_segment]") {
  TempDir tmp;
  Build(tmp.path(), 40);
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  FileSystem* fs = FileSystem::Default();
  std::vector<int64_t> all, from;
  REQUIRE(ForEachHeader(dir->get(), fs, {}, 0, 0, UINT64_MAX, [&](const BatchHeader& h, uint64_t) {
            all.push_back(h.base_offset);
          }).ok());
  REQUIRE(all.size() == 40);
  REQUIRE(
      ForEachHeaderFrom(dir->get(), fs, {}, 0, 30, UINT64_MAX, [&](const BatchHeader& h, uint64_t) {
        from.push_back(h.base_offset);
      }).ok());
  // Every batch from offset 30 on, and fewer than all: the walk started at
  // an index entry below 30, not at byte 0.
  REQUIRE_FALSE(from.empty());
  CHECK(from.back() == 39);
  CHECK(from.front() <= 30);
  CHECK(from.front() > 0);
}
