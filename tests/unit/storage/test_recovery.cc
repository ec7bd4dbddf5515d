// Recovery at writer open (format-spec/segment.md §12, R20-R25).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "format/batch_cursor.h"
#include "format/coding.h"
#include "format/format.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "storage/segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

const std::string kLog0 = "00000000000000000000.log";
const std::string kIndex0 = "00000000000000000000.index";
const std::string kTimeIndex0 = "00000000000000000000.timeindex";
// A boot id no kernel has: opening under it is opening after a reboot (R27).
const char* kAfterReboot = "0000beef-0000-0000-0000-00000000beef";

// Writes `n` single-record batches of varying size (small index interval so
// the indexes have entries); returns each batch's end position.
std::vector<uint64_t> BuildSegment(const std::string& dir, int n, LogConfig config = {}) {
  config.index_interval_bytes = 200;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  std::vector<uint64_t> ends;
  uint64_t pos = 0;
  for (int i = 0; i < n; ++i) {
    auto b = MakeBatch(1 + i % 3, 1000 + i * 10, static_cast<size_t>(5 + i % 7));
    pos += b.size();
    ends.push_back(pos);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
  return ends;
}

Result<std::unique_ptr<PartitionWriter>> Reopen(const std::string& dir, RecoveryReport* report,
                                                LogConfig config = {}) {
  config.index_interval_bytes = 200;
  return PartitionWriter::Open(dir, config, false, report);
}

}  // namespace

TEST_CASE("R20 torn tail: every cut inside the last 3 batches keeps exactly the complete batches") {
  TempDir tmp;
  std::string base = tmp / "base-0";
  const int kBatches = 12;
  auto ends = BuildSegment(base, kBatches);
  auto original = ReadFile(base + "/" + kLog0);
  auto all = ReadAll(base);
  REQUIRE(all.size() == kBatches);
  int cases = 0;
  for (uint64_t cut = ends[kBatches - 4]; cut < ends.back(); ++cut) {
    std::string dir = tmp / fmt::format("cut{}-0", cut);
    CopyDir(base, dir);
    std::filesystem::resize_file(dir + "/" + kLog0, cut);
    size_t complete = 0;
    while (complete < ends.size() && ends[complete] <= cut) ++complete;
    uint64_t kept = complete == 0 ? 0 : ends[complete - 1];
    RecoveryReport report;
    ScopedBootId reboot(kAfterReboot);  // a torn tail is what a machine crash leaves
    auto w = Reopen(dir, &report);
    INFO("cut at " << cut);
    REQUIRE(w);
    CHECK(report.bytes_truncated == cut - kept);
    if (cut > kept) {
      REQUIRE(!report.repaired.empty());
      CHECK(report.repaired.front().position == kept);
    }
    CHECK(FileSize(dir + "/" + kLog0) == kept);
    auto got = ReadAll(dir);
    CHECK(got == std::vector<std::pair<int64_t, int64_t>>(all.begin(), all.begin() + complete));
    CHECK((*w)->log_end_offset() == all[complete - 1].second + 1);
    (void)(*w)->Close();
    std::filesystem::remove_all(dir);
    ++cases;
  }
  CHECK(cases > 100);
}

TEST_CASE("R21 garbage tail: 4 KiB of zeros after the last batch is truncated") {
  TempDir tmp;
  std::string dir = tmp / "g-0";
  auto ends = BuildSegment(dir, 5);
  AppendToFile(dir + "/" + kLog0, std::vector<std::byte>(4096));
  RecoveryReport report;
  ScopedBootId reboot(kAfterReboot);
  auto w = Reopen(dir, &report);
  REQUIRE(w);
  CHECK(report.bytes_truncated == 4096);
  REQUIRE(report.repaired.size() >= 1);
  CHECK(report.repaired[0].rule == "garbage-tail");
  CHECK(report.repaired[0].position == ends.back());
  CHECK(FileSize(dir + "/" + kLog0) == ends.back());
  CHECK(ReadAll(dir).size() == 5);
}

TEST_CASE("R21 garbage tail: random bytes after the last batch are truncated") {
  TempDir tmp;
  std::mt19937 rng(12345);
  for (int round = 0; round < 5; ++round) {
    std::string dir = tmp / fmt::format("r{}-0", round);
    auto ends = BuildSegment(dir, 4);
    std::vector<std::byte> junk(100 + rng() % 3000);
    for (auto& b : junk) b = std::byte(rng());
    AppendToFile(dir + "/" + kLog0, junk);
    RecoveryReport report;
    ScopedBootId reboot(kAfterReboot);
    auto w = Reopen(dir, &report);
    REQUIRE(w);
    CHECK(report.bytes_truncated == junk.size());
    CHECK(FileSize(dir + "/" + kLog0) == ends.back());
    auto more = MakeBatch(2);
    auto r = (*w)->Append(more);
    REQUIRE(r);
    CHECK(ReadAll(dir).size() == 5);
  }
}

TEST_CASE(
    "R22 corrupt batch: a bit flip in a middle batch fails Open naming file, position, rule") {
  TempDir tmp;
  std::string dir = tmp / "c-0";
  auto ends = BuildSegment(dir, 8);
  std::string log = dir + "/" + kLog0;
  auto bytes = ReadFile(log);
  uint64_t victim = ends[3];              // batch 4 starts here
  bytes[victim + 70] ^= std::byte{0x10};  // inside its records: CRC breaks
  WriteFile(log, bytes);
  auto before = ListDir(dir);
  auto index_before = ReadFile(dir + "/" + kIndex0);
  // Recovery point covers everything after a clean close: force a full check.
  std::filesystem::remove(dir + "/state");
  auto w = Reopen(dir, nullptr);
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kCorruption);
  CHECK(w.error().rule() == "R4");
  CHECK(w.error().position() == victim);
  CHECK(w.error().file() == kLog0);
  CHECK(w.error().message().find(kLog0) != std::string::npos);
  CHECK(ReadFile(log) == bytes);  // nothing truncated
  CHECK(ReadFile(dir + "/" + kIndex0) == index_before);
}

TEST_CASE("R22 corrupt batch: damage in a rolled (non-last) segment fails Open") {
  TempDir tmp;
  std::string dir = tmp / "c-0";
  LogConfig config;
  config.segment_bytes = 400;
  BuildSegment(dir, 12, config);
  auto segs = ListDir(dir);
  REQUIRE(std::count_if(segs.begin(), segs.end(), [](auto& s) { return s.ends_with(".log"); }) >=
          3);
  // Chop the tail of the first segment: torn, but not the last segment.
  std::string log = dir + "/" + kLog0;
  uint64_t size = FileSize(log);
  std::filesystem::resize_file(log, size - 10);
  std::filesystem::remove(dir + "/state");
  auto w = Reopen(dir, nullptr, config);
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kCorruption);
  CHECK(w.error().file() == kLog0);
  CHECK(FileSize(log) == size - 10);
}

namespace {

LogConfig R88Config() {
  LogConfig config;
  config.segment_bytes = 400;
  config.durability = Durability::kNone;
  config.sync_on_close = false;
  return config;
}

// A log of several segments (durability none, no fsync at close: recovery
// walks every segment; 400-byte segments) whose
// last segment lost every byte and the one before it its last 10 bytes:
// what a power loss leaves when a roll's new segment was created
// (journaled metadata) but neither the sealed segment's last append nor
// the new segment's appends reached the disk. Returns the batches the log
// held before, with the base of the emptied segment in *emptied.
std::vector<std::pair<int64_t, int64_t>> BuildRolledTornTail(const std::string& dir,
                                                             int64_t* emptied, std::string* torn) {
  BuildSegment(dir, 12, R88Config());
  auto before = ReadAll(dir);
  std::vector<std::string> logs;
  for (const std::string& name : ListDir(dir))
    if (name.ends_with(".log")) logs.push_back(name);
  std::sort(logs.begin(), logs.end());
  REQUIRE(logs.size() >= 3);
  *emptied = *SegmentBaseOffset(logs.back());
  *torn = logs[logs.size() - 2];
  std::filesystem::resize_file(dir + "/" + logs.back(), 0);
  std::filesystem::resize_file(dir + "/" + *torn, FileSize(dir + "/" + *torn) - 10);
  return before;
}

// A reboot's verify of a rolled tail R88 repairs: it needs recovery, it is
// not corruption, as the writer judges it.
void CheckNeedsRecovery(const std::string& dir) {
  std::vector<Problem> judged;
  REQUIRE(VerifyPartition(dir, {}, &judged, OffsetPolicy::kContiguous).ok());
  CHECK(!judged.empty());
  for (const Problem& p : judged) {
    INFO(p.file << " " << p.position << " " << p.rule << " " << p.detail);
    CHECK(p.kind == Problem::Kind::kNeedsRecovery);
  }
}

// After R88 repaired a rolled tail: the emptied segment at `emptied` is
// removed and reported, the log reads as the first `kept` batches of
// `before`, and the segment before it is the active one again (appends
// continue it) in a log that verifies.
void CheckRolledTailRepaired(const std::string& dir, PartitionWriter* w,
                             const RecoveryReport& report, int64_t emptied,
                             const std::vector<std::pair<int64_t, int64_t>>& before, size_t kept) {
  const std::string empty_log = SegmentFileName(emptied, format::kLogSuffix);
  CHECK(!Exists(dir + "/" + empty_log));
  CHECK(std::any_of(report.repaired.begin(), report.repaired.end(),
                    [&](const Problem& p) { return p.rule == "R88" && p.file == empty_log; }));
  auto after = ReadAll(dir);
  REQUIRE(after.size() == kept);
  CHECK(std::equal(after.begin(), after.end(), before.begin()));
  CHECK(w->log_end_offset() == after.back().second + 1);
  auto more = MakeBatch(2);
  REQUIRE(w->Append(more));
  REQUIRE(w->Close().ok());
  CHECK(ReadAll(dir).size() == kept + 1);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  CHECK(problems.empty());
}

}  // namespace

TEST_CASE(
    "R88 rolled tail: after a reboot a rolled segment's torn tail before empty segments is cut") {
  TempDir tmp;
  std::string dir = tmp / "r88-0";
  int64_t emptied = 0;
  std::string torn;
  auto before = BuildRolledTornTail(dir, &emptied, &torn);
  const size_t kept = static_cast<size_t>(
      std::count_if(before.begin(), before.end(), [&](auto& b) { return b.second < emptied; }) - 1);
  ScopedBootId reboot(kAfterReboot);
  CheckNeedsRecovery(dir);
  RecoveryReport report;
  auto w = Reopen(dir, &report, R88Config());
  REQUIRE(w);
  // The torn batch is cut (R20) and the emptied segment removed (R88).
  CHECK(!Exists(dir + "/" + SegmentFileName(emptied, format::kIndexSuffix)));
  CHECK(!Exists(dir + "/" + SegmentFileName(emptied, format::kTimeIndexSuffix)));
  CHECK(std::any_of(report.repaired.begin(), report.repaired.end(),
                    [&](const Problem& p) { return p.rule == "torn-tail" && p.file == torn; }));
  CheckRolledTailRepaired(dir, w->get(), report, emptied, before, kept);
}

// The start of the last batch of the segment file `log` (batches are laid
// out back to back: baseOffset, then batchLength, big-endian).
uint64_t LastBatchStart(const std::string& log) {
  const uint64_t size = FileSize(log);
  std::ifstream in(log, std::ios::binary);
  uint64_t at = 0, last = 0;
  while (at + 12 <= size) {
    unsigned char len[4];
    in.seekg(static_cast<std::streamoff>(at + 8));
    in.read(reinterpret_cast<char*>(len), 4);
    last = at;
    at += 12 + (uint64_t{len[0]} << 24 | uint64_t{len[1]} << 16 | uint64_t{len[2]} << 8 | len[3]);
  }
  return last;
}

TEST_CASE(
    "R88 rolled tail: after a reboot a rolled segment that lost whole batches before empty "
    "segments is the tail") {
  // A power loss that took the sealed segment's last appends whole (no
  // torn write): it ends at a batch boundary, before the base of the
  // empty segment rolled after it (a gap, R26, on the boot that
  // published the state).
  TempDir tmp;
  std::string dir = tmp / "r88w-0";
  int64_t emptied = 0;
  std::string torn;
  auto before = BuildRolledTornTail(dir, &emptied, &torn);
  const std::string sealed = dir + "/" + torn;
  std::filesystem::resize_file(sealed, LastBatchStart(sealed));
  // Its last batch went whole: it ends at a batch boundary, nothing torn.
  const size_t kept = static_cast<size_t>(
      std::count_if(before.begin(), before.end(), [&](auto& b) { return b.second < emptied; }) - 1);
  ScopedBootId reboot(kAfterReboot);
  CheckNeedsRecovery(dir);
  // Contiguous offsets (a replicated log's): the gap tells the lost tail.
  LogConfig config = R88Config();
  config.offsets = OffsetPolicy::kContiguous;
  RecoveryReport report;
  auto w = Reopen(dir, &report, config);
  REQUIRE(w);
  CheckRolledTailRepaired(dir, w->get(), report, emptied, before, kept);
}

TEST_CASE("R88 rolled tail: on the boot that published the state it is R22 damage") {
  TempDir tmp;
  std::string dir = tmp / "r88s-0";
  int64_t emptied = 0;
  std::string torn;
  BuildRolledTornTail(dir, &emptied, &torn);
  const uint64_t torn_size = FileSize(dir + "/" + torn);
  std::vector<Problem> judged;
  REQUIRE(VerifyPartition(dir, {}, &judged, OffsetPolicy::kContiguous).ok());
  CHECK(std::any_of(judged.begin(), judged.end(), [&](const Problem& p) {
    return p.kind == Problem::Kind::kCorruption && p.file == dir + "/" + torn;
  }));
  auto w = Reopen(dir, nullptr, R88Config());
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kCorruption);
  CHECK(w.error().file() == torn);
  CHECK(FileSize(dir + "/" + torn) == torn_size);
  CHECK(Exists(dir + "/" + SegmentFileName(emptied, format::kLogSuffix)));
}

TEST_CASE("R88 rolled tail: a later segment holding bytes keeps R22 after a reboot") {
  TempDir tmp;
  std::string dir = tmp / "r88d-0";
  int64_t emptied = 0;
  std::string torn;
  BuildRolledTornTail(dir, &emptied, &torn);
  // One byte on disk after the damage: not what a power loss leaves.
  AppendToFile(dir + "/" + SegmentFileName(emptied, format::kLogSuffix),
               std::vector<std::byte>{std::byte{0}});
  const uint64_t torn_size = FileSize(dir + "/" + torn);
  ScopedBootId reboot(kAfterReboot);
  auto w = Reopen(dir, nullptr, R88Config());
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kCorruption);
  CHECK(w.error().file() == torn);
  CHECK(FileSize(dir + "/" + torn) == torn_size);
}

TEST_CASE("R22 corrupt batch: a garbage header followed by a valid batch is not truncated") {
  TempDir tmp;
  std::string dir = tmp / "c-0";
  auto ends = BuildSegment(dir, 6);
  std::string log = dir + "/" + kLog0;
  auto bytes = ReadFile(log);
  // Zero the length of batch 2: the resync scan finds batch 3 after it.
  for (int i = 8; i < 12; ++i) bytes[ends[1] + i] = std::byte{0};
  WriteFile(log, bytes);
  std::filesystem::remove(dir + "/state");
  auto w = Reopen(dir, nullptr);
  REQUIRE(!w);
  CHECK(w.error().rule() == "R2");
  CHECK(w.error().position() == ends[1]);
  CHECK(FileSize(log) == bytes.size());
}

TEST_CASE("R23 index: deleted, truncated or scrambled indexes are rebuilt and lookups work") {
  TempDir tmp;
  std::string base = tmp / "base-0";
  BuildSegment(base, 30);
  auto good_index = ReadFile(base + "/" + kIndex0);
  auto good_time = ReadFile(base + "/" + kTimeIndex0);
  REQUIRE(good_index.size() >= 16);
  REQUIRE(good_time.size() >= 12);
  std::mt19937 rng(7);
  for (int damage = 0; damage < 4; ++damage) {
    std::string dir = tmp / fmt::format("d{}-0", damage);
    CopyDir(base, dir);
    std::string idx = dir + "/" + kIndex0;
    if (damage == 0) std::filesystem::remove(idx);
    if (damage == 1) std::filesystem::resize_file(idx, good_index.size() - 3);
    if (damage == 2) {
      auto junk = good_index;
      for (auto& b : junk) b = std::byte(rng());
      WriteFile(idx, junk);
    }
    if (damage == 3) std::filesystem::remove(dir + "/" + kTimeIndex0);
    // A reader copes before any writer repairs: Seek checks the entry.
    if (damage == 2) {
      auto r = PartitionReader::Open(dir);
      REQUIRE(r);
      REQUIRE((*r)->Seek(40).ok());
      auto b = (*r)->Next();
      REQUIRE(b);
      REQUIRE(*b);
      CHECK((*b)->header().base_offset <= 40);
      CHECK((*b)->header().last_offset() >= 40);
    }
    RecoveryReport report;
    auto w = Reopen(dir, &report);
    REQUIRE(w);
    INFO("damage " << damage);
    CHECK(report.indexes_rebuilt == 1);
    REQUIRE(!report.repaired.empty());
    CHECK(report.repaired.back().rule == "index-rebuilt");
    CHECK(ReadFile(idx) == good_index);
    CHECK(ReadFile(dir + "/" + kTimeIndex0) == good_time);
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    REQUIRE((*r)->Seek(33).ok());
    auto b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    CHECK((*b)->header().base_offset <= 33);
    CHECK((*b)->header().last_offset() >= 33);
  }
}

TEST_CASE("R24 state file: a missing or invalid state file is rebuilt from the log") {
  TempDir tmp;
  std::string dir = tmp / "s-0";
  BuildSegment(dir, 5);
  auto all = ReadAll(dir);
  SECTION("missing") { std::filesystem::remove(dir + "/state"); }
  SECTION("bad checksum") {
    auto s = ReadFile(dir + "/state");
    s[20] ^= std::byte{1};
    WriteFile(dir + "/state", s);
  }
  SECTION("wrong size") { WriteFile(dir + "/state", std::vector<std::byte>(10)); }
  RecoveryReport report;
  auto w = Reopen(dir, &report);
  REQUIRE(w);
  bool reported = false;
  for (auto& p : report.repaired) reported |= p.rule == "R24";
  CHECK(reported);
  CHECK((*w)->log_end_offset() == all.back().second + 1);
  CHECK(ReadAll(dir) == all);
}

TEST_CASE("R25 recovery point: segments below it are not re-read at open") {
  TempDir tmp;
  std::string dir = tmp / "p-0";
  LogConfig config;
  config.segment_bytes = 400;
  BuildSegment(dir, 12, config);  // Close flushed: recovery point = log end
  std::string log = dir + "/" + kLog0;
  auto bytes = ReadFile(log);
  bytes[bytes.size() - 3] ^= std::byte{0x01};
  WriteFile(log, bytes);
  ScopedBootId reboot(kAfterReboot);  // on the same boot nothing is re-read (R27)
  {
    RecoveryReport report;
    auto w = Reopen(dir, &report, config);
    REQUIRE(w);  // the damaged segment is below the recovery point
    CHECK(report.segments_checked == 1);
  }
  std::filesystem::remove(dir + "/state");  // recovery point 0: everything is checked
  auto w = Reopen(dir, nullptr, config);
  REQUIRE(!w);
  CHECK(w.error().rule() == "R4");
}

namespace {

// Appends `count` more batches to the partition at `dir` as a writer that
// died before publishing them would leave them: the bytes (and any segment
// they rolled into) are on disk, the state file still holds the committed
// end from before.
void AppendUnpublished(const std::string& dir, int count, LogConfig config = {}) {
  auto state = ReadFile(dir + "/state");
  {
    config.index_interval_bytes = 200;
    config.sync_on_close = false;
    auto w = PartitionWriter::Open(dir, config, false, nullptr);
    REQUIRE(w);
    for (int i = 0; i < count; ++i) {
      auto b = MakeBatch(2, 5000 + i, 300);
      REQUIRE((*w)->Append(b));
    }
  }
  WriteFile(dir + "/state", state);
}

}  // namespace

TEST_CASE("R27 committed end: on the same boot, bytes past it are cut, never adopted") {
  TempDir tmp;
  std::string dir = tmp / "u-0";
  LogConfig config;
  config.segment_bytes = 2000;
  BuildSegment(dir, 3, config);
  auto before = ReadAll(dir);
  auto segments_before = ListDir(dir);
  AppendUnpublished(dir, 12, config);             // rolls: unpublished segments too
  REQUIRE(ReadAll(dir).size() == before.size());  // readers stop at the committed end
  RecoveryReport report;
  auto w = Reopen(dir, &report, config);
  REQUIRE(w);
  CHECK((*w)->log_end_offset() == before.back().second + 1);
  CHECK(report.batches_checked == 0);  // nothing re-validated
  bool cut = false;
  for (auto& p : report.repaired) cut |= p.rule == "unpublished-tail";
  CHECK(cut);
  CHECK(report.bytes_truncated > 0);
  // The next append gets the next offset, and only it becomes visible.
  auto one = MakeBatch(1);
  auto r = (*w)->Append(one);
  REQUIRE(r);
  CHECK(r->base_offset == before.back().second + 1);
  auto after = ReadAll(dir);
  REQUIRE(after.size() == before.size() + 1);
  CHECK(std::vector(after.begin(), after.end() - 1) == before);
  REQUIRE((*w)->Close().ok());
  // No segment of the dead writer is left.
  for (const auto& name : ListDir(dir))
    if (name.ends_with(".log"))
      CHECK(std::find(segments_before.begin(), segments_before.end(), name) !=
            segments_before.end());
}

TEST_CASE("R27 committed end: after a reboot, the valid prefix past it is kept") {
  TempDir tmp;
  std::string dir = tmp / "v-0";
  LogConfig config;
  config.segment_bytes = 2000;
  BuildSegment(dir, 3, config);
  AppendUnpublished(dir, 12, config);
  // What a writer wrote may have been acknowledged with --fsync batch before
  // the crash; the state file is not fsynced and may be older.
  ScopedBootId reboot(kAfterReboot);
  RecoveryReport report;
  auto w = Reopen(dir, &report, config);
  REQUIRE(w);
  CHECK(report.bytes_truncated == 0);
  CHECK(ReadAll(dir).size() == 15);
  CHECK((*w)->log_end_offset() == ReadAll(dir).back().second + 1);
}

TEST_CASE("R27 committed end: a log shorter than it on the same boot is recovered and reported") {
  TempDir tmp;
  std::string dir = tmp / "w-0";
  auto ends = BuildSegment(dir, 6);
  std::filesystem::resize_file(dir + "/" + kLog0, ends[3] + 5);
  RecoveryReport report;
  auto w = Reopen(dir, &report);
  REQUIRE(w);
  REQUIRE(!report.repaired.empty());
  CHECK(report.repaired.front().rule == "R27");
  CHECK(FileSize(dir + "/" + kLog0) == ends[3]);
  CHECK(ReadAll(dir).size() == 4);
}

TEST_CASE(
    "R21 garbage tail: a 16 MiB random tail is truncated after a reboot, cut on the same boot") {
  TempDir tmp;
  std::string base = tmp / "big-0";
  auto ends = BuildSegment(base, 4);
  std::vector<std::byte> junk((16u << 20) + 12345);
  std::mt19937_64 rng(20240611);
  for (size_t i = 0; i + 8 <= junk.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(junk.data() + i, &v, 8);
  }
  AppendToFile(base + "/" + kLog0, junk);
  for (bool reboot : {true, false}) {
    std::string dir = tmp / fmt::format("big{}-0", reboot);
    CopyDir(base, dir);
    std::optional<ScopedBootId> boot;
    if (reboot) boot.emplace(kAfterReboot);
    RecoveryReport report;
    auto w = Reopen(dir, &report);
    INFO("after a reboot: " << reboot);
    REQUIRE(w);
    CHECK(report.bytes_truncated == junk.size());
    REQUIRE(!report.repaired.empty());
    CHECK(report.repaired[0].rule == (reboot ? "garbage-tail" : "unpublished-tail"));
    CHECK(FileSize(dir + "/" + kLog0) == ends.back());
    auto more = MakeBatch(2);
    REQUIRE((*w)->Append(more));
    CHECK(ReadAll(dir).size() == 5);
  }
}

TEST_CASE("R22 resync: hostile candidate headers end in a decision, linear in the tail") {
  // Every 64 bytes a header that passes every cheap check and claims the
  // rest of the file, with a wrong CRC: each candidate would need a CRC over
  // up to the whole tail (quadratic), which once made the scan give up.
  TempDir tmp;
  auto proto = MakeBatch(1);
  for (bool valid_after : {false, true}) {
    std::vector<std::byte> file(64, std::byte{0xee});  // the damaged batch at 0
    const size_t tail = 4u << 20;
    size_t end = 64 + tail + (valid_after ? proto.size() : 0);
    for (size_t p = 64; p + 64 <= 64 + tail; p += 64) {
      std::vector<std::byte> h(proto.begin(), proto.begin() + format::kBatchHeaderSize);
      coding::PutFixed32(h.data() + format::kBatchLengthOffset,
                         static_cast<uint32_t>(end - p - format::kLogOverhead));
      coding::PutFixed32(h.data() + format::kCrcOffset, 0x12345678);
      h.resize(64, std::byte{0});
      file.insert(file.end(), h.begin(), h.end());
    }
    if (valid_after) file.insert(file.end(), proto.begin(), proto.end());
    REQUIRE(file.size() == end);
    std::string name = fmt::format("hostile{}.log", valid_after);
    std::string path = tmp / name;
    WriteFile(path, file);
    auto dfd = OpenDirectory(tmp.path(), false);
    REQUIRE(dfd);
    auto f = FileSystem::Default()->Open(dfd->get(), name, FileSystem::kRead);
    REQUIRE(f);
    DecodeLimits limits;
    BatchCursor cursor(limits);
    cursor.Reset(f->get(), path, end);
    auto next = cursor.FindNextValid(0);
    REQUIRE(next);
    if (valid_after) {
      REQUIRE(*next);
      CHECK(**next == 64 + tail);
    } else {
      CHECK(!*next);
    }
  }
}

namespace {

std::vector<Problem> Verify(const std::string& dir) {
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, DecodeLimits{}, &problems).ok());
  return problems;
}

bool Only(const std::vector<Problem>& problems, Problem::Kind kind) {
  return !problems.empty() && std::all_of(problems.begin(), problems.end(),
                                          [&](const Problem& p) { return p.kind == kind; });
}

}  // namespace

TEST_CASE("R27 verify: unpublished bytes past the committed end are notes on the same boot") {
  TempDir tmp;
  std::string dir = tmp / "n-0";
  LogConfig config;
  config.segment_bytes = 2000;
  BuildSegment(dir, 3, config);
  CHECK(Verify(dir).empty());
  AppendUnpublished(dir, 12, config);  // what a killed writer leaves
  auto problems = Verify(dir);
  CHECK(Only(problems, Problem::Kind::kNote));
  for (const auto& p : problems) CHECK(p.rule == "R27");
  // The same bytes after a reboot: the valid prefix a writer keeps.
  ScopedBootId reboot(kAfterReboot);
  CHECK(Verify(dir).empty());
}

TEST_CASE("R28 needs recovery: a segment shorter than an untrusted committed end") {
  TempDir tmp;
  std::string dir = tmp / "s-0";
  auto ends = BuildSegment(dir, 6);
  std::filesystem::resize_file(dir + "/" + kLog0, ends[3] + 5);  // torn inside batch 4
  {
    // On the boot that published the committed end: committed bytes are
    // gone, reported where a reader stops (R1 at the torn batch).
    auto problems = Verify(dir);
    bool r1 = false;
    for (const auto& p : problems)
      r1 |= p.rule == "R1" && p.kind == Problem::Kind::kCorruption && p.position == ends[3];
    CHECK(r1);
  }
  ScopedBootId reboot(kAfterReboot);
  auto problems = Verify(dir);
  CHECK(Only(problems, Problem::Kind::kNeedsRecovery));
  bool r28 = false, torn = false;
  for (const auto& p : problems) {
    r28 |= p.rule == "R28";
    torn |= p.rule == "R1" && p.position == ends[3];
  }
  CHECK(r28);
  CHECK(torn);
  // A writer recovers it (keeping the valid prefix), after which it is clean.
  auto w = Reopen(dir, nullptr);
  REQUIRE(w);
  CHECK((*w)->log_end_offset() == ReadAll(dir).back().second + 1);
  CHECK(ReadAll(dir).size() == 4);
  (void)(*w)->Close();
  CHECK(Verify(dir).empty());
  // Damage that a valid batch follows stays corruption after a reboot.
  auto bytes = ReadFile(dir + "/" + kLog0);
  bytes[ends[1] + 30] ^= std::byte{0x10};
  WriteFile(dir + "/" + kLog0, bytes);
  problems = Verify(dir);
  CHECK(!problems.empty());
  CHECK(std::any_of(problems.begin(), problems.end(),
                    [](const Problem& p) { return p.kind == Problem::Kind::kCorruption; }));
}

TEST_CASE("R26 contiguous offsets: recovery of a delete-policy log stops at offsets that skip") {
  TempDir tmp;
  std::string dir = tmp / "s-0";
  auto ends = BuildSegment(dir, 6);
  // The last batch (after ends[4]) claims offsets past the ones before it:
  // its CRC is intact (baseOffset is outside it), so only continuity sees it.
  auto bytes = ReadFile(dir + "/" + kLog0);
  BatchHeader h;
  REQUIRE(ProbeBatch(Bytes(bytes).subspan(ends[4]), &h, {}, "x", 0));
  coding::PutFixed64(bytes.data() + ends[4], static_cast<uint64_t>(h.base_offset + 3));
  WriteFile(dir + "/" + kLog0, bytes);
  std::filesystem::remove(dir + "/state");  // R24: validate everything again
  LogConfig contiguous;
  contiguous.offsets = OffsetPolicy::kContiguous;
  RecoveryReport report;
  auto w = Reopen(dir, &report, contiguous);
  REQUIRE_FALSE(w);
  CHECK(w.error().rule() == "R26");
  CHECK(w.error().position() == ends[4]);
  // A compacted topic may have gaps.
  std::filesystem::remove(dir + "/state");
  LogConfig gaps;
  gaps.offsets = OffsetPolicy::kGapsAllowed;
  CHECK(Reopen(dir, &report, gaps));
}

namespace {

LogConfig PageCacheOnly() {
  LogConfig config;
  config.durability = Durability::kNone;
  config.sync_on_close = false;
  return config;
}

}  // namespace

TEST_CASE("R34 page-cache creation: a new partition is created and written without any fsync") {
  TempDir tmp;
  FaultFs fs;
  LogConfig config = PageCacheOnly();
  config.fs = &fs;
  auto w = PartitionWriter::Open(tmp / "p-0", config, true, nullptr);
  INFO((w ? "" : w.error().message()));
  REQUIRE(w);
  auto b = MakeBatch(3);
  REQUIRE((*w)->Append(b));
  REQUIRE((*w)->Close().ok());
  CHECK(fs.syncs() == 0);
  CHECK(ReadAll(tmp / "p-0") == std::vector<std::pair<int64_t, int64_t>>{{0, 2}});
  // Any other policy fsyncs what it creates.
  FaultFs durable_fs;
  LogConfig durable;
  durable.fs = &durable_fs;
  auto d = PartitionWriter::Open(tmp / "p-1", durable, true, nullptr);
  REQUIRE(d);
  CHECK(durable_fs.syncs() > 0);
}

TEST_CASE(
    "R34 page-cache creation: an every-batch writer fsyncs the directory with its first append") {
  TempDir tmp;
  std::string dir = tmp / "p-0";
  {
    auto w = PartitionWriter::Open(dir, PageCacheOnly(), true, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->Close().ok());
  }
  FaultFs fs;
  LogConfig config;
  config.durability = Durability::kEveryBatch;
  config.fs = &fs;
  auto w = PartitionWriter::Open(dir, config, false, nullptr);
  REQUIRE(w);
  int before = fs.syncs();
  auto b = MakeBatch(1);
  REQUIRE((*w)->Append(b));
  CHECK(fs.syncs() - before == 2);  // the segment, then the directory
  auto c = MakeBatch(1);
  REQUIRE((*w)->Append(c));
  CHECK(fs.syncs() - before == 3);  // the segment only
}

TEST_CASE("R34 page-cache creation: what a crash may leave of a new partition is rebuilt") {
  TempDir tmp;
  std::string dir = tmp / "p-0";
  {
    auto w = PartitionWriter::Open(dir, PageCacheOnly(), true, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(2);
    REQUIRE((*w)->Append(b));
    REQUIRE((*w)->Close().ok());
  }
  auto remove_segment = [&] {
    for (const auto& f : {kLog0, kIndex0, kTimeIndex0}) std::filesystem::remove(dir + "/" + f);
  };
  int64_t kept = 2;  // offsets the crash left in the log
  SECTION("no state file") { std::filesystem::remove(dir + "/state"); }
  SECTION("an empty state file") { WriteFile(dir + "/state", {}); }
  SECTION("a state file of zeros") { WriteFile(dir + "/state", std::vector<std::byte>(80)); }
  SECTION("no segment files") {
    remove_segment();
    kept = 0;
  }
  SECTION("empty segment files") {
    for (const auto& f : {kLog0, kIndex0, kTimeIndex0}) WriteFile(dir + "/" + f, {});
    kept = 0;
  }
  SECTION("nothing but the directory") {
    remove_segment();
    std::filesystem::remove(dir + "/state");
    kept = 0;
  }
  ScopedBootId reboot(kAfterReboot);
  RecoveryReport report;
  auto w = PartitionWriter::Open(dir, PageCacheOnly(), false, &report);
  INFO((w ? "" : w.error().message()));
  REQUIRE(w);
  CHECK((*w)->log_end_offset() == kept);
  auto b = MakeBatch(1);
  auto r = (*w)->Append(b);
  REQUIRE(r);
  CHECK(r->base_offset == kept);
  REQUIRE((*w)->Close().ok());
  auto all = ReadAll(dir);
  REQUIRE(!all.empty());
  CHECK(all.back() == std::make_pair(kept, kept));
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  for (auto& p : problems) INFO(p.file << " " << p.position << " " << p.rule << " " << p.detail);
  CHECK(problems.empty());
}

TEST_CASE("ListSegments tells whether truncate-to and leader-epoch-checkpoint are there") {
  TempDir tmp;
  BuildSegment(tmp.path(), 3);
  auto dfd = OpenDirectory(tmp.path(), false);
  REQUIRE(dfd);
  PartitionListing listed;
  listed.truncate_intent = listed.epoch_checkpoint = true;  // reset by the listing
  auto bases = ListSegments(dfd->get(), nullptr, nullptr, &listed);
  REQUIRE(bases);
  CHECK(*bases == std::vector<int64_t>{0});
  CHECK_FALSE(listed.truncate_intent);
  CHECK_FALSE(listed.epoch_checkpoint);
  WriteFile(tmp / "truncate-to", {});
  WriteFile(tmp / "leader-epoch-checkpoint", {});
  bases = ListSegments(dfd->get(), nullptr, nullptr, &listed);
  REQUIRE(bases);
  CHECK(listed.truncate_intent);
  CHECK(listed.epoch_checkpoint);
}

TEST_CASE("StatAtOpen is the file as it was opened, Stat the file now") {
  TempDir tmp;
  WriteFile(tmp / "f", std::vector<std::byte>(10));
  auto dfd = OpenDirectory(tmp.path(), false);
  REQUIRE(dfd);
  auto f = FileSystem::Default()->Open(dfd->get(), "f", FileSystem::kReadWrite);
  REQUIRE(f);
  REQUIRE((*f)->WriteAt(10, std::vector<std::byte>(5)).ok());
  auto at_open = (*f)->StatAtOpen();
  REQUIRE(at_open);
  CHECK(at_open->size == 10);
  CHECK(at_open->is_regular());
  auto now = (*f)->Stat();
  REQUIRE(now);
  CHECK(now->size == 15);
  CHECK(now->ino == at_open->ino);
}
