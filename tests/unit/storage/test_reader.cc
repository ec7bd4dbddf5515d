// What a reader checks beyond each batch's own rules (format-spec README
// §11.1): offsets that continue (R10, R11, R26), segments as long as what was
// committed to them (R1), indexes as hints (R23), and a seek that passes
// over only batches it would hand out (R4: a damaged header's offsets and
// times are not believed). For each, the reader stops where --verify
// (VerifyPartition) reports the same bytes: same file, same byte position,
// same rule.
#include <catch2/catch.hpp>

#include <filesystem>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// A partition of `appends` batches of 5 records, 4 batches per segment.
std::string MakePartition(const TempDir& tmp, int appends = 20) {
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 4 * MakeBatch(5).size();
  config.index_interval_bytes = 1;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < appends; ++i) {
    auto b = MakeBatch(5, 1000 + 10 * i);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
  return dir;
}

std::string Seg(const std::string& dir, int64_t base, const char* suffix = format::kLogSuffix) {
  return dir + "/" + SegmentFileName(base, suffix);
}

struct ReadOutcome {
  std::vector<std::pair<int64_t, int64_t>> batches;
  Status error;
};

ReadOutcome ReadThrough(const std::string& dir, OffsetPolicy policy = OffsetPolicy::kContiguous,
                        int64_t from = 0) {
  ReadOptions o;
  o.offsets = policy;
  auto r = PartitionReader::Open(dir, o);
  REQUIRE(r);
  if (from > 0) REQUIRE((*r)->Seek(from).ok());
  ReadOutcome out;
  for (;;) {
    auto b = (*r)->Next();
    if (!b) {
      out.error = b.error();
      return out;
    }
    if (!*b) return out;
    out.batches.emplace_back((*b)->header().base_offset, (*b)->header().last_offset());
  }
}

// VerifyPartition reports the reader's error: same file, position and rule
// (among the other problems it finds, such as an index that points at the
// lost bytes).
void SameAsVerify(const std::string& dir, const Status& error, OffsetPolicy policy) {
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems, policy).ok());
  CHECK(error.code() == Code::kCorruption);
  std::string all;
  bool found = false;
  for (const Problem& p : problems) {
    all += fmt::format("\n  {}: {}: {}: {}", p.file, p.position, p.rule, p.detail);
    found |= p.rule == error.rule() && p.position == error.position() &&
             p.file.ends_with("/" + error.file());
  }
  INFO(error.message() << "; verify:" << all);
  CHECK(found);
}

void SetBase(const std::string& path, uint64_t pos, int64_t base) {
  auto bytes = ReadFile(path);
  coding::PutFixed64(bytes.data() + pos, static_cast<uint64_t>(base));
  WriteFile(path, bytes);
}

// Overwrites a header field of the batch at `pos` without fixing its CRC, as
// damage does.
void SetField32(const std::string& path, uint64_t pos, size_t field, uint32_t value) {
  auto bytes = ReadFile(path);
  coding::PutFixed32(bytes.data() + pos + field, value);
  WriteFile(path, bytes);
}
void SetField64(const std::string& path, uint64_t pos, size_t field, uint64_t value) {
  auto bytes = ReadFile(path);
  coding::PutFixed64(bytes.data() + pos + field, value);
  WriteFile(path, bytes);
}

// The batches a reader hands out after SeekTimestamp(`timestamp_ms`), and the
// error it stops with.
ReadOutcome ReadFromTime(const std::string& dir, int64_t timestamp_ms) {
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  ReadOutcome out;
  out.error = (*r)->SeekTimestamp(timestamp_ms);
  if (!out.error.ok()) return out;
  for (;;) {
    auto b = (*r)->Next();
    if (!b) {
      out.error = b.error();
      return out;
    }
    if (!*b) return out;
    out.batches.emplace_back((*b)->header().base_offset, (*b)->header().last_offset());
  }
}

}  // namespace

TEST_CASE("R26 contiguous offsets: a batch that skips offsets stops the reader", "[reader][R26]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  SetBase(Seg(dir, 20), 2 * size, 32);  // offsets 30..31 vanish
  auto out = ReadThrough(dir);
  CHECK(out.error.rule() == "R26");
  CHECK(out.error.position() == 2 * size);
  CHECK(out.error.file() == SegmentFileName(20, format::kLogSuffix));
  REQUIRE(!out.batches.empty());
  CHECK(out.batches.back().second == 29);  // everything before the damage, nothing after
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
}

TEST_CASE("R26 contiguous offsets: gaps stop a delete-policy reader, not a compacted one",
          "[reader][R26]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  SetBase(Seg(dir, 80), 3 * size, 97);  // the last batch: 97..101 instead of 95..99
  auto out = ReadThrough(dir);
  CHECK(out.error.rule() == "R26");
  CHECK(out.error.position() == 3 * size);
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
  // A compacted topic may have gaps: the same bytes read through.
  auto compacted = ReadThrough(dir, OffsetPolicy::kGapsAllowed);
  CHECK(compacted.error.ok());
  CHECK(compacted.batches.size() == 20);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems, OffsetPolicy::kGapsAllowed).ok());
  for (const Problem& p : problems) CHECK(p.rule != "R26");
}

TEST_CASE("R26 contiguous offsets: a rolled segment cut at a batch boundary stops the reader",
          "[reader][R26]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  ::truncate(Seg(dir, 20).c_str(), static_cast<off_t>(3 * size));  // its last batch is gone
  auto out = ReadThrough(dir);
  CHECK(out.error.rule() == "R26");
  CHECK(out.error.file() == SegmentFileName(20, format::kLogSuffix));
  CHECK(out.error.position() == 3 * size);
  CHECK(out.batches.back().second == 34);
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
}

TEST_CASE("R10 segment offsets: a batch whose baseOffset goes back stops the reader",
          "[reader][R10]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  SetBase(Seg(dir, 40), 2 * size, 0);
  for (OffsetPolicy policy : {OffsetPolicy::kContiguous, OffsetPolicy::kGapsAllowed}) {
    auto out = ReadThrough(dir, policy);
    CHECK(out.error.rule() == "R10");
    CHECK(out.error.position() == 2 * size);
    CHECK(out.batches.back().second == 49);
    SameAsVerify(dir, out.error, policy);
  }
}

TEST_CASE("R19 offset range: a reader stops at a batch whose offsets overflow", "[reader][R19]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  SetBase(Seg(dir, 40), size, INT64_MAX - 3);
  auto out = ReadThrough(dir);
  CHECK(out.error.rule() == "R19");
  CHECK(out.batches.back().second == 44);
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
}

TEST_CASE("R1 complete: a rolled segment cut inside a batch stops the reader, never a tail",
          "[reader][R1]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  ::truncate(Seg(dir, 20).c_str(), static_cast<off_t>(3 * size + 10));
  auto out = ReadThrough(dir);
  CHECK(out.error.rule() == "R1");
  CHECK(out.error.position() == 3 * size);
  CHECK(out.batches.back().second == 34);
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
}

TEST_CASE("R1 complete: the active segment cut below the committed end stops the reader",
          "[reader][R1]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  for (uint64_t cut : {3 * size + 10, 3 * size, uint64_t{0}}) {
    ::truncate(Seg(dir, 80).c_str(), static_cast<off_t>(cut));
    auto out = ReadThrough(dir);
    INFO("cut at " << cut << ": " << out.error.message());
    CHECK(out.error.code() == Code::kCorruption);
    CHECK(out.error.rule() == "R1");
    CHECK(out.error.file() == SegmentFileName(80, format::kLogSuffix));
    CHECK(out.error.position() == cut / size * size);
    CHECK(out.batches.back().second == 79 + static_cast<int64_t>(cut / size) * 5);
  }
}

TEST_CASE("R23 index: a reader checks index entries against the log, scans and warns",
          "[reader][R23]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  for (int64_t base : {0, 20, 40, 60, 80}) {
    for (const char* suffix : {format::kIndexSuffix, format::kTimeIndexSuffix}) {
      std::string path = Seg(dir, base, suffix);
      auto bytes = ReadFile(path);
      std::fill(bytes.begin(), bytes.end(), std::byte{0});
      WriteFile(path, bytes);
    }
  }
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  // Batch i holds offsets 5i..5i+4 with timestamps 1000+10i...
  REQUIRE((*r)->SeekTimestamp(1000 + 10 * 9 + 2).ok());
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 45);
  auto warnings = (*r)->TakeWarnings();
  REQUIRE(!warnings.empty());
  CHECK(warnings[0].rule == "R23");
  CHECK(std::any_of(warnings.begin(), warnings.end(),
                    [](const Problem& p) { return p.file.ends_with(".timeindex"); }));
  REQUIRE((*r)->Seek(57).ok());
  b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 55);
  warnings = (*r)->TakeWarnings();
  REQUIRE(!warnings.empty());
  CHECK(warnings[0].file.ends_with(".index"));
  // And a full read delivers everything.
  auto out = ReadThrough(dir);
  CHECK(out.error.ok());
  CHECK(out.batches.size() == 20);
}

TEST_CASE("R4 crc: a reader never passes over a damaged batch on its way to the log start",
          "[reader][R4]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  // The first batch's lastOffsetDelta turns negative: its header claims
  // offsets before 0, which a seek to 0 would step over.
  SetField32(Seg(dir, 0), 0, format::kLastOffsetDeltaOffset, 0xa9000004);
  for (OffsetPolicy policy : {OffsetPolicy::kContiguous, OffsetPolicy::kGapsAllowed}) {
    auto out = ReadThrough(dir, policy);
    INFO(out.error.message());
    CHECK(out.batches.empty());
    CHECK(out.error.rule() == "R4");
    CHECK(out.error.file() == SegmentFileName(0, format::kLogSuffix));
    CHECK(out.error.position() == 0);
    SameAsVerify(dir, out.error, policy);
  }
}

TEST_CASE("R4 crc: a seek never passes over a damaged batch to reach its offset", "[reader][R4]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  // Batch 25..29 claims to end at 25: a seek to 27 would step over it and
  // (gaps allowed) hand out 30.. as if 27..29 did not exist.
  SetField32(Seg(dir, 20), size, format::kLastOffsetDeltaOffset, 0);
  for (OffsetPolicy policy : {OffsetPolicy::kContiguous, OffsetPolicy::kGapsAllowed}) {
    auto out = ReadThrough(dir, policy, 27);
    INFO(out.error.message());
    CHECK(out.batches.empty());
    CHECK(out.error.rule() == "R4");
    CHECK(out.error.file() == SegmentFileName(20, format::kLogSuffix));
    CHECK(out.error.position() == size);
    SameAsVerify(dir, out.error, policy);
  }
}

TEST_CASE("R4 crc: a timestamp seek never passes over a damaged batch", "[reader][R4]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  // Batch i holds timestamps 1000+10i..1000+10i+4. Batch 5 (offsets 25..29,
  // the second of segment 20) claims maxTimestamp 0: a seek to 1052 would
  // step over it to batch 6.
  SetField64(Seg(dir, 20), size, format::kMaxTimestampOffset, 0);
  auto out = ReadFromTime(dir, 1052);
  INFO(out.error.message());
  CHECK(out.batches.empty());
  CHECK(out.error.rule() == "R4");
  CHECK(out.error.file() == SegmentFileName(20, format::kLogSuffix));
  CHECK(out.error.position() == size);
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
}

TEST_CASE("R3 magic: a timestamp seek stops at damage in a segment it cannot prove older",
          "[reader][R3]") {
  TempDir tmp;
  std::string dir = MakePartition(tmp);
  uint64_t size = MakeBatch(5).size();
  // Without time indexes the reader reads segment 20's batches to learn
  // whether all of it is older than 1092; a garbage header (magic 7) in it
  // proves nothing, so the seek cannot skip the segment.
  for (int64_t base : {0, 20, 40, 60, 80})
    ::truncate(Seg(dir, base, format::kTimeIndexSuffix).c_str(), 0);
  auto bytes = ReadFile(Seg(dir, 20));
  bytes[size + format::kMagicOffset] = std::byte{7};
  WriteFile(Seg(dir, 20), bytes);
  auto out = ReadFromTime(dir, 1092);
  INFO(out.error.message());
  CHECK(out.batches.empty());
  CHECK(out.error.rule() == "R3");
  CHECK(out.error.file() == SegmentFileName(20, format::kLogSuffix));
  CHECK(out.error.position() == size);
  SameAsVerify(dir, out.error, OffsetPolicy::kContiguous);
}

// ---- §9.2 rewrites: bytes a truncation replaced are never handed out --------

namespace {

// A partition t-0 of `batches` batches of 2 records, timestamps from 1000.
std::unique_ptr<PartitionWriter> SmallLog(const std::string& dir, int batches) {
  auto w = PartitionWriter::Open(dir, LogConfig{}, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < batches; ++i) {
    auto b = MakeBatch(2, 1000 + 10 * i);
    REQUIRE((*w)->Append(b));
  }
  return std::move(*w);
}

// Cuts the log at `offset` and writes `batches` batches of the same size in
// its place, timestamps from `ts`: the same byte positions, other bytes.
void Replace(PartitionWriter& w, int64_t offset, int batches, int64_t ts = 5000) {
  REQUIRE(w.TruncateTo(offset).ok());
  for (int i = 0; i < batches; ++i) {
    auto b = MakeBatch(2, ts + 10 * i);
    REQUIRE(w.Append(b));
  }
}

}  // namespace

TEST_CASE(
    "rewrites (segment.md §9.2): a reader never hands out batches it read before a truncation "
    "replaced them",
    "[reader][rewrites]") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallLog(dir, 3);  // offsets 0..5
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  auto b = (*r)->Next();  // reads ahead: batches 2 and 4 are in its buffer too
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 0);
  Replace(*w, 2, 2);
  b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 2);
  CHECK((*b)->header().max_timestamp == 5001);  // the log's batch, not the one cut
  b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().max_timestamp == 5011);
}

TEST_CASE(
    "rewrites (segment.md §9.2): a bounded reader never hands out a batch it kept above the high "
    "watermark once a truncation replaced it and the watermark passed it",
    "[reader][rewrites]") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallLog(dir, 3);  // offsets 0..5
  REQUIRE(w->SetHighWatermark(2).ok());
  ReadOptions options;
  options.bound_by_high_watermark = true;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 0);
  b = (*r)->Next();  // batch 2 is read, and kept: above the high watermark
  REQUIRE(b);
  CHECK(!*b);
  // A failover: the records above the watermark are cut, others replace
  // them, and the watermark rises past them.
  Replace(*w, 2, 2);
  REQUIRE(w->SetHighWatermark(6).ok());
  CHECK((*r)->WaitForAppend(2, 5000));
  std::vector<int64_t> times;
  for (;;) {
    b = (*r)->Next();
    REQUIRE(b);
    if (!*b) break;
    times.push_back((*b)->header().max_timestamp);
  }
  CHECK(times == std::vector<int64_t>{5001, 5011});
}

TEST_CASE(
    "rewrites (segment.md §9.2): a reader finds the offset it sought again after a "
    "truncation, not the bytes it read there before",
    "[reader][rewrites]") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallLog(dir, 4);  // offsets 0..7, batch 4 at times 1020-1021
  SECTION("by offset") {
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    REQUIRE((*r)->Seek(4).ok());
    Replace(*w, 2, 3);
    auto b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    CHECK((*b)->header().base_offset == 4);
    CHECK((*b)->header().max_timestamp == 5011);
  }
  SECTION("by timestamp") {
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    REQUIRE((*r)->SeekTimestamp(1020).ok());
    Replace(*w, 2, 3);
    auto b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    CHECK((*b)->header().base_offset == 4);
    CHECK((*b)->header().max_timestamp == 5011);
  }
}

TEST_CASE(
    "rewrites (segment.md §9.2): a reader whose batches a truncation cut goes back to "
    "where the log diverged, and says so",
    "[reader][rewrites]") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  LogConfig config;
  config.leader_epoch = 0;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < 3; ++i) {  // offsets 0..5 in epoch 0
    auto b = MakeBatch(2, 1000 + 10 * i);
    REQUIRE((*w)->Append(b));
  }
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  for (int i = 0; i < 3; ++i) {
    auto b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
  }
  CHECK_FALSE((*r)->TakeCut());
  REQUIRE((*w)->TruncateTo(2).ok());
  (*w).reset();
  SECTION("the log end below the reader's position") {
    auto b = (*r)->Next();
    REQUIRE(b);
    CHECK_FALSE(*b);
    CHECK((*r)->TakeCut() == std::optional<int64_t>(2));
    CHECK_FALSE((*r)->TakeCut());
  }
  SECTION("another leader's batches at the offsets cut") {
    // The log end is where it was; the leader epoch of the last batch
    // returned ends at 2 now.
    config.leader_epoch = 1;
    auto w1 = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w1);
    for (int i = 0; i < 2; ++i) {
      auto b = MakeBatch(2, 5000 + 10 * i);
      REQUIRE((*w1)->Append(b));
    }
    std::vector<int64_t> times;
    for (;;) {
      auto b = (*r)->Next();
      REQUIRE(b);
      if (!*b) break;
      times.push_back((*b)->header().max_timestamp);
    }
    CHECK(times == std::vector<int64_t>{5001, 5011});
    CHECK((*r)->TakeCut() == std::optional<int64_t>(2));
  }
}

TEST_CASE(
    "a reader bounded by the high watermark keeps the high-watermark file open, and reads the "
    "file the name names once it is created again",
    "[reader][high-watermark]") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallLog(dir, 3);  // offsets 0..5
  REQUIRE(w->SetHighWatermark(2).ok());
  ReadOptions options;
  options.bound_by_high_watermark = true;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  CHECK(!(*r)->WaitForAppend(2, 0));
  CHECK((*r)->end_offset() == 2);
  // Raised in place: the kept file is read again.
  REQUIRE(w->SetHighWatermark(4).ok());
  CHECK((*r)->WaitForAppend(2, 5000));
  CHECK((*r)->end_offset() == 4);
  // Removed and created again (a new file under the name): the reader
  // reads the new one, not the one it kept open.
  REQUIRE(std::filesystem::remove(dir + "/high-watermark"));
  REQUIRE(w->SetHighWatermark(6).ok());
  CHECK((*r)->WaitForAppend(4, 5000));
  CHECK((*r)->end_offset() == 6);
}
