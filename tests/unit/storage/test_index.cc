// Offset and time index files (format-spec/segment.md §7, §8), segment
// names (R12) and the offset rules checked across a partition (R10, R11).
#include <catch2/catch.hpp>

#include <filesystem>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "storage/offset_index.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

std::string Hex(const std::vector<std::byte>& b) {
  std::string s;
  for (auto x : b) s += fmt::format("{:02x}", std::to_integer<int>(x));
  return s;
}

std::vector<std::byte> Unhex(const std::string& h) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(std::byte(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

bool HasRule(const std::vector<Problem>& ps, const std::string& rule) {
  for (auto& p : ps)
    if (p.rule == rule) return true;
  return false;
}

// A segment of `n` single-record batches with small index intervals.
void Build(const std::string& dir, int n, uint64_t segment_bytes = 1 << 30) {
  LogConfig config;
  config.index_interval_bytes = 100;
  config.segment_bytes = segment_bytes;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < n; ++i) {
    auto b = MakeBatch(1, 5000 + i * 10, 20);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
}

}  // namespace

TEST_CASE("§7 offset index entry: worked example (base 100, offset 142 at position 4242)") {
  std::vector<std::byte> e(8);
  EncodeOffsetEntry(e.data(), 100, {142, 4242});
  CHECK(Hex(e) == "0000002a00001092");
  auto back = DecodeOffsetEntry(Unhex("0000002a00001092").data(), 100);
  CHECK(back.offset == 142);
  CHECK(back.position == 4242);
}

TEST_CASE("§8 time index entry: worked example (base 100, 1700000000000 at offset 142)") {
  std::vector<std::byte> e(12);
  EncodeTimeEntry(e.data(), 100, {1700000000000, 142});
  CHECK(Hex(e) == "0000018bcfe568000000002a");
  auto back = DecodeTimeEntry(e.data(), 100);
  CHECK(back.timestamp == 1700000000000);
  CHECK(back.offset == 142);
}

TEST_CASE("§7 index rule: a batch more than the interval after the last indexed one is indexed") {
  // Batches of 100 bytes at 0, 100, 200, ...; interval 150: Kafka's rebuild
  // rule indexes the batch at 200 (200 - 0 > 150), then 400, 600.
  IndexBuilder ib(0, 150);
  std::vector<std::byte> off, tim;
  for (int i = 0; i < 7; ++i) {
    BatchHeader h;
    h.base_offset = i;
    h.batch_length = 88;
    h.max_timestamp = 1000 + (i == 3 ? -500 : i);
    ib.Add(h, static_cast<uint64_t>(i) * 100, &off, &tim);
  }
  auto entries = DecodeOffsetIndex(off, 0, "x");
  REQUIRE(entries);
  REQUIRE(entries->size() == 3);
  CHECK((*entries)[0].offset == 2);
  CHECK((*entries)[0].position == 200);
  CHECK((*entries)[1].position == 400);
  CHECK((*entries)[2].position == 600);
  auto times = DecodeTimeIndex(tim, 0, "x");
  REQUIRE(times);
  REQUIRE(times->size() == 3);
  CHECK((*times)[0].timestamp == 1002);
  CHECK((*times)[1].timestamp == 1004);
  CHECK((*times)[1].offset == 4);
}

TEST_CASE("R12 names: segment files are 20 digits plus .log, .index or .timeindex") {
  CHECK(*SegmentBaseOffset("00000000000000000042.log") == 42);
  CHECK(*SegmentBaseOffset("dir/00000000000000368769.index") == 368769);
  CHECK(*SegmentBaseOffset("09223372036854775807.timeindex") == INT64_MAX);
  for (const char* bad :
       {"42.log", "0000000000000000042.log", "000000000000000000042.log",
        "0000000000000000004x.log", "00000000000000000042.txt", "00000000000000000042",
        "99999999999999999999.log", "-0000000000000000042.log"})
    CHECK(!SegmentBaseOffset(bad));
  CHECK(SegmentFileName(42, ".log") == "00000000000000000042.log");
}

TEST_CASE("R13 offset index: size, order and pointers are checked against the log") {
  TempDir tmp;
  std::string dir = tmp / "i-0";
  Build(dir, 20);
  std::string idx = dir + "/" + SegmentFileName(0, ".index");
  auto good = ReadFile(idx);
  REQUIRE(good.size() >= 24);
  std::vector<Problem> problems;
  REQUIRE(VerifyFile(idx, {}, &problems).ok());
  CHECK(problems.empty());

  auto bad = good;
  bad.pop_back();
  WriteFile(idx, bad);
  problems.clear();
  REQUIRE(VerifyFile(idx, {}, &problems).ok());
  CHECK(HasRule(problems, "R13"));
  CHECK(!ReadOffsetIndexFile(idx));

  bad = good;
  bad[7] = std::byte(std::to_integer<int>(bad[7]) + 1);  // position off by one
  WriteFile(idx, bad);
  problems.clear();
  REQUIRE(VerifyFile(idx, {}, &problems).ok());
  REQUIRE(HasRule(problems, "R13"));
  CHECK(problems[0].position == 0);

  bad = good;
  std::swap_ranges(bad.begin(), bad.begin() + 8, bad.begin() + 8);  // order
  WriteFile(idx, bad);
  problems.clear();
  REQUIRE(VerifyFile(idx, {}, &problems).ok());
  CHECK(HasRule(problems, "R13"));
}

TEST_CASE("R14 time index: size, increasing timestamps and batch offsets are checked") {
  TempDir tmp;
  std::string dir = tmp / "i-0";
  Build(dir, 20);
  std::string tidx = dir + "/" + SegmentFileName(0, ".timeindex");
  auto good = ReadFile(tidx);
  REQUIRE(good.size() >= 24);
  std::vector<Problem> problems;
  REQUIRE(VerifyFile(tidx, {}, &problems).ok());
  CHECK(problems.empty());

  auto bad = good;
  bad.resize(bad.size() - 5);
  WriteFile(tidx, bad);
  problems.clear();
  REQUIRE(VerifyFile(tidx, {}, &problems).ok());
  CHECK(HasRule(problems, "R14"));

  bad = good;
  std::swap_ranges(bad.begin(), bad.begin() + 12, bad.begin() + 12);
  WriteFile(tidx, bad);
  problems.clear();
  REQUIRE(VerifyFile(tidx, {}, &problems).ok());
  CHECK(HasRule(problems, "R14"));

  bad = good;
  bad[11] = std::byte(std::to_integer<int>(bad[11]) + 100);  // offset of no batch
  WriteFile(tidx, bad);
  problems.clear();
  REQUIRE(VerifyFile(tidx, {}, &problems).ok());
  CHECK(HasRule(problems, "R14"));
}

TEST_CASE("R10 segment offsets: a batch below its segment's base offset") {
  TempDir tmp;
  std::string dir = tmp / "o-0";
  Build(dir, 5);
  for (const char* suffix : {".log", ".index", ".timeindex"})
    std::filesystem::rename(dir + "/" + SegmentFileName(0, suffix),
                            dir + "/" + SegmentFileName(3, suffix));
  std::vector<Problem> problems;
  REQUIRE(VerifyFile(dir + "/" + SegmentFileName(3, ".log"), {}, &problems).ok());
  REQUIRE(HasRule(problems, "R10"));
  CHECK(problems[0].position == 0);
  std::filesystem::remove(dir + "/state");
  auto w = PartitionWriter::Open(dir, {}, false, nullptr);
  REQUIRE(!w);
  CHECK(w.error().rule() == "R10");
}

TEST_CASE("R11 log offsets: a segment's base must follow the last offset before it") {
  TempDir tmp;
  std::string a = tmp / "a-0", b = tmp / "b-0";
  Build(a, 10);       // one segment, offsets 0..9
  Build(b, 15, 300);  // several segments
  auto bases = ListDir(b);
  std::string second;
  for (auto& n : bases)
    if (n.ends_with(".log") && n != SegmentFileName(0, ".log")) {
      second = n;
      break;
    }
  REQUIRE(!second.empty());
  REQUIRE(*SegmentBaseOffset(second) <= 9);
  for (const char* suffix : {".log", ".index", ".timeindex"})
    std::filesystem::copy_file(a + "/" + SegmentFileName(0, suffix),
                               b + "/" + SegmentFileName(0, suffix),
                               std::filesystem::copy_options::overwrite_existing);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(b, {}, &problems).ok());
  CHECK(HasRule(problems, "R11"));
  std::filesystem::remove(b + "/state");
  auto w = PartitionWriter::Open(b, {}, false, nullptr);
  REQUIRE(!w);
  CHECK(w.error().rule() == "R11");
}
