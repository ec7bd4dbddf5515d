// Tiered segments (format-spec/retention.md §21, R93-R97): the pointer, the
// plan, the crash-safe move, reading through the one listing, retention.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mq/partition.h"
#include "mq/retention.h"
#include "mq/segment.h"
#include "mq/tier.h"
#include "storage/segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

constexpr int64_t kDay = 24LL * 3600 * 1000;

std::vector<Problem> Verify(const std::string& dir) {
  std::vector<Problem> problems;
  Status s = VerifyPartition(dir, DecodeLimits{}, &problems, OffsetPolicy::kContiguous);
  INFO(s.message());
  REQUIRE(s.ok());
  for (const Problem& p : problems) UNSCOPED_INFO(p.file << " " << p.rule << " " << p.detail);
  return problems;
}

// A partition `t-0` of several closed segments and its tier root, attached.
struct Tiered {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  std::string root = tmp / "cold";
  std::string tier = root + "/t-0";
  std::vector<std::pair<int64_t, int64_t>> records;
  std::vector<int64_t> bases;  // every segment, ascending
  Tiered() {
    auto w = SmallSegmentWriter(dir);
    AppendSmallBatches(*w, 20);
    REQUIRE(w->Close().ok());
    records = ReadAll(dir);
    for (const auto& n : ListDirEndingIn(dir, ".log")) bases.push_back(*SegmentBaseOffset(n));
    REQUIRE(bases.size() >= 4);
    REQUIRE(::mkdir(root.c_str(), 0750) == 0);
    REQUIRE(AttachTier(dir, tier).ok());
  }
};

RetentionSegment Seg(int64_t base, int64_t end, int64_t day, bool active = false) {
  RetentionSegment s;
  s.base = base;
  s.end = end;
  s.bytes = 100;
  s.max_timestamp = day * kDay;
  s.append_time_ms = day * kDay;
  s.active = active;
  return s;
}

}  // namespace

TEST_CASE("R93 tier pointer: written after its directory, read back, never changed") {
  Tiered t;
  const auto bytes = ReadFile(t.dir + "/tier");
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  CHECK(text == "# mq tier pointer (format-spec/retention.md section 21)\ndir=" + t.tier + "\n");
  CHECK(Exists(t.tier));
  auto dfd = OpenDirectory(t.dir, false);
  REQUIRE(dfd);
  auto p = ReadTierPointer(dfd->get());
  REQUIRE(p);
  REQUIRE(*p);
  CHECK(**p == t.tier);
  // The same directory again: nothing to do; another one: refused.
  CHECK(AttachTier(t.dir, t.tier).ok());
  Status other = AttachTier(t.dir, t.tmp / "elsewhere");
  CHECK(other.code() == Code::kInvalidArgument);
  CHECK(other.message().find("R93") != std::string::npos);
  CHECK(**ReadTierPointer(dfd->get()) == t.tier);
}

TEST_CASE("R93 tier pointer: a missing parent or another partition's directory is refused") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 3);
  REQUIRE(w->Close().ok());
  // No such mount: nothing created, no pointer.
  CHECK(!AttachTier(dir, tmp / "nomount/t-0").ok());
  CHECK(!Exists(tmp / "nomount"));
  CHECK(!Exists(dir + "/tier"));
  // Relative: refused.
  CHECK(AttachTier(dir, "cold/t-0").code() == Code::kInvalidArgument);
  // A directory holding segments no pointer of ours names: refused.
  REQUIRE(::mkdir((tmp / "cold").c_str(), 0750) == 0);
  REQUIRE(::mkdir((tmp / "cold/t-0").c_str(), 0750) == 0);
  WriteFile(tmp / "cold/t-0/00000000000000000000.log", {});
  Status s = AttachTier(dir, tmp / "cold/t-0");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(!Exists(dir + "/tier"));
  // An empty one (a crash before the pointer was written) is adopted.
  REQUIRE(::unlink((tmp / "cold/t-0/00000000000000000000.log").c_str()) == 0);
  CHECK(AttachTier(dir, tmp / "cold/t-0").ok());
  CHECK(Exists(dir + "/tier"));
}

TEST_CASE("R93 tier pointer: a pointer breaking the rule is corruption naming the file") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 3);
  REQUIRE(w->Close().ok());
  auto dfd = OpenDirectory(dir, false);
  REQUIRE(dfd);
  for (const char* bad : {"dir=relative/x\n", "where=/x\n", "# nothing\n", "dir=/a\ndir=/b\n"}) {
    INFO(bad);
    const std::string text = bad;
    WriteFile(dir + "/tier", std::vector<std::byte>(
                                 reinterpret_cast<const std::byte*>(text.data()),
                                 reinterpret_cast<const std::byte*>(text.data()) + text.size()));
    auto p = ReadTierPointer(dfd->get());
    REQUIRE(!p);
    CHECK(p.error().code() == Code::kCorruption);
    CHECK(p.error().message().find("R93") != std::string::npos);
    CHECK(p.error().message().find("tier") != std::string::npos);
    // Readers refuse the partition rather than read it without its tier.
    CHECK(!PartitionReader::Open(dir));
  }
}

TEST_CASE("R95 which segments move: sealed, local, at or above the log start, below the HW, old") {
  RetentionLog log;
  for (int i = 0; i < 6; ++i) log.segments.push_back(Seg(i * 10, i * 10 + 10, i, i == 5));
  log.segments[1].tiered = true;
  log.log_start_offset = 10;  // segment 0 is retention's
  log.log_end_offset = 60;
  TierPolicy p;
  p.now_ms = 10 * kDay;
  auto bases = [](const std::vector<RetentionSegment>& v) {
    std::vector<int64_t> out;
    for (const auto& s : v) out.push_back(s.base);
    return out;
  };
  p.tier_after_ms = -1;
  CHECK(PlanTier(log, p).empty());
  p.tier_after_ms = 0;  // every sealed one: never the active one (50)
  CHECK(bases(PlanTier(log, p)) == std::vector<int64_t>{20, 30, 40});
  p.tier_after_ms = 7 * kDay;  // horizon day 3: days 2 only (day 3 is not older)
  CHECK(bases(PlanTier(log, p)) == std::vector<int64_t>{20});
  p.tier_after_ms = 0;
  log.high_watermark = 40;  // segment 40 holds offsets at the HW and above
  CHECK(bases(PlanTier(log, p)) == std::vector<int64_t>{20, 30});
  auto usage = UsageByTier(log);
  CHECK(usage.segments[0] == 5);
  CHECK(usage.segments[1] == 1);
  CHECK(usage.bytes[1] == 100);
}

TEST_CASE("R96 one listing: tiered segments read, verify and recover as local ones") {
  Tiered t;
  const size_t moved = t.bases.size() - 2;
  for (size_t i = 0; i < moved; ++i) REQUIRE(MoveToTier(t.dir, t.bases[i]).ok());
  CHECK(ListDirEndingIn(t.dir, ".log").size() == 2);
  CHECK(ListDirEndingIn(t.tier, ".log").size() == moved);
  CHECK(ListDirEndingIn(t.dir, ".index").size() == 2);
  CHECK(ListDirEndingIn(t.tier, ".timeindex").size() == moved);
  auto dfd = OpenDirectory(t.dir, false);
  REQUIRE(dfd);
  PartitionListing listing;
  auto listed = ListSegments(dfd->get(), nullptr, nullptr, &listing);
  REQUIRE(listed);
  CHECK(*listed == t.bases);
  CHECK(listing.tiered == std::vector<int64_t>(t.bases.begin(), t.bases.begin() + moved));
  CHECK(ReadAll(t.dir) == t.records);
  CHECK(Verify(t.dir).empty());
  // A seek into a tiered segment goes through its index in the tier.
  auto r = PartitionReader::Open(t.dir);
  REQUIRE(r);
  REQUIRE((*r)->Seek(t.bases[1] + 1).ok());
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().last_offset() >= t.bases[1] + 1);
  // A writer after a reboot (state not trusted) keeps the log start and
  // appends after the end.
  {
    ScopedBootId reboot("tier-test-reboot");
    auto w = SmallSegmentWriter(t.dir);
    CHECK(w->log_start_offset() == 0);
    AppendSmallBatches(*w, 2);
    REQUIRE(w->Close().ok());
  }
  auto all = ReadAll(t.dir);
  REQUIRE(all.size() == t.records.size() + 2);
  CHECK(std::equal(t.records.begin(), t.records.end(), all.begin()));
  CHECK(Verify(t.dir).empty());
}

TEST_CASE("R96 one listing: an unmounted tier is an error, never a shorter log") {
  Tiered t;
  REQUIRE(MoveToTier(t.dir, t.bases[0]).ok());
  REQUIRE(::rename(t.tier.c_str(), (t.root + "/away").c_str()) == 0);
  auto r = PartitionReader::Open(t.dir);
  if (r) {
    auto s = (*r)->Seek(0);
    CHECK(!s.ok());
    CHECK(s.code() == Code::kUnavailable);
  } else {
    CHECK(r.error().code() == Code::kUnavailable);
  }
  std::vector<Problem> problems;
  CHECK(VerifyPartition(t.dir, DecodeLimits{}, &problems).code() == Code::kUnavailable);
  LogConfig config;
  auto w = PartitionWriter::Open(t.dir, config, false, nullptr);
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kUnavailable);
  REQUIRE(::rename((t.root + "/away").c_str(), t.tier.c_str()) == 0);
  CHECK(ReadAll(t.dir) == t.records);
}

TEST_CASE("R94 move order: a failure at any step leaves every record readable once") {
  // Each failure point of a move: the copies' writes and fsyncs, the
  // renames (the .log's is the publication), the directory fsyncs. A step
  // that fails is where a crash stops the move; the next run finishes it.
  struct Point {
    const char* what;
    int n;
  };
  const Point points[] = {{"write", 1},  {"write", 2},  {"sync", 1}, {"sync", 3},
                          {"rename", 1}, {"rename", 3}, {"sync", 4}, {"sync", 5}};
  for (const Point& at : points) {
    INFO(at.what << " " << at.n);
    Tiered t;
    FaultFs fs;
    const std::string w = at.what;
    if (w == "write") fs.FailWrite(at.n, FaultFs::Fault::kEio);
    if (w == "sync") fs.FailSync(at.n);
    if (w == "rename") fs.FailRename(at.n);
    CHECK(!MoveToTier(t.dir, t.bases[0], &fs).ok());
    CHECK(ReadAll(t.dir) == t.records);
    CHECK(Verify(t.dir).empty());
    auto finished = FinishTierMoves(t.dir);
    REQUIRE(finished);
    CHECK(ReadAll(t.dir) == t.records);
    CHECK(ListDirEndingIn(t.tier, ".tmp").empty());
    // Moved again (or finished): the segment is in the tier only.
    if (Exists(t.dir + "/" + SegmentFileName(t.bases[0], ".log")))
      REQUIRE(MoveToTier(t.dir, t.bases[0]).ok());
    CHECK(!Exists(t.dir + "/" + SegmentFileName(t.bases[0], ".log")));
    CHECK(!Exists(t.dir + "/" + SegmentFileName(t.bases[0], ".index")));
    CHECK(Exists(t.tier + "/" + SegmentFileName(t.bases[0], ".timeindex")));
    CHECK(ReadAll(t.dir) == t.records);
    CHECK(Verify(t.dir).empty());
  }
}

TEST_CASE("R94 move order: a crash after the publication leaves both copies, the local one read") {
  Tiered t;
  // The tier holds the segment (published), the local files are still
  // there, one index already unlinked: as a crash in step 3 leaves it.
  const int64_t base = t.bases[0];
  for (const char* s : {".log", ".index", ".timeindex"})
    WriteFile(t.tier + "/" + SegmentFileName(base, s),
              ReadFile(t.dir + "/" + SegmentFileName(base, s)));
  CHECK(ReadAll(t.dir) == t.records);
  auto dfd = OpenDirectory(t.dir, false);
  PartitionListing listing;
  REQUIRE(ListSegments(dfd->get(), nullptr, nullptr, &listing));
  CHECK(listing.tiered.empty());  // R96: the local copy wins
  REQUIRE(::unlink((t.dir + "/" + SegmentFileName(base, ".log")).c_str()) == 0);
  CHECK(ReadAll(t.dir) == t.records);
  auto finished = FinishTierMoves(t.dir);
  REQUIRE(finished);
  CHECK(*finished == 2);  // the local .index and .timeindex
  CHECK(ListDirEndingIn(t.dir, ".index").size() == t.bases.size() - 1);
  CHECK(ReadAll(t.dir) == t.records);
  CHECK(Verify(t.dir).empty());
}

TEST_CASE("R97 retention of tiered segments: judged in the tier, renamed .deleted there, purged") {
  Tiered t;
  REQUIRE(MoveToTier(t.dir, t.bases[0]).ok());
  REQUIRE(MoveToTier(t.dir, t.bases[1]).ok());
  auto log = ListRetentionSegments(t.dir);
  REQUIRE(log);
  CHECK(log->tier_dir == t.tier);
  REQUIRE(log->segments.size() == t.bases.size());
  CHECK(log->segments[0].tiered);
  CHECK(log->segments[1].tiered);
  CHECK(!log->segments[2].tiered);
  CHECK(log->segments[0].bytes == FileSize(t.tier + "/" + SegmentFileName(t.bases[0], ".log")));
  CHECK(log->segments[0].max_timestamp >= 1000);
  {
    auto w = SmallSegmentWriter(t.dir);
    REQUIRE(w->DeleteSegmentsBefore(t.bases[2]).ok());
    CHECK(w->log_start_offset() == t.bases[2]);
    REQUIRE(w->Close().ok());
  }
  CHECK(ListDirEndingIn(t.tier, ".log").empty());
  CHECK(ListDirEndingIn(t.tier, ".deleted").size() == 6);
  auto all = ReadAll(t.dir);
  REQUIRE(!all.empty());
  CHECK(all.front().first == t.bases[2]);
  CHECK(Verify(t.dir).empty());
  auto purged = PurgeDeletedFiles(t.tier, ::time(nullptr) * 1000LL + 1000, 0);
  REQUIRE(purged);
  CHECK(*purged == 6);
  CHECK(ListDir(t.tier).empty());
}

TEST_CASE("R96 one listing: a writer whose recovery point is below tiered segments flushes") {
  Tiered t;
  const size_t moved = t.bases.size() - 1;
  REQUIRE(MoveToTier(t.dir, std::vector<int64_t>(t.bases.begin(), t.bases.begin() + moved)).ok());
  // Without a state file the writer rebuilds it with the recovery point at
  // 0: its flush walks every segment above it, tiered ones included.
  REQUIRE(::unlink((t.dir + "/state").c_str()) == 0);
  auto w = SmallSegmentWriter(t.dir);
  AppendSmallBatches(*w, 2);
  Status s = w->Flush();
  INFO(s.message());
  CHECK(s.ok());
  REQUIRE(w->Close().ok());
  auto all = ReadAll(t.dir);
  REQUIRE(all.size() == t.records.size() + 2);
  CHECK(std::equal(t.records.begin(), t.records.end(), all.begin()));
  CHECK(Verify(t.dir).empty());
}

namespace {

using Files = std::vector<std::pair<std::string, std::vector<std::byte>>>;

// Every file of the partition directory `dir` with its bytes.
Files Snapshot(const std::string& dir) {
  Files out;
  for (const std::string& n : ListDir(dir)) out.emplace_back(n, ReadFile(dir + "/" + n));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("R94 move order: a failing kernel copy leaves the old state, the next run finishes") {
  // The copies go through copy_file_range (FileSystem::CopyRange); the Nth
  // fails outright or after half its bytes, as a full disk does.
  for (const auto fault : {FaultFs::Fault::kShortWrite, FaultFs::Fault::kEio})
    for (int n = 1; n <= 4; ++n) {
      INFO("fault " << static_cast<int>(fault) << " at copy " << n);
      Tiered t;
      const auto before = Snapshot(t.dir);
      const std::vector<int64_t> two(t.bases.begin(), t.bases.begin() + 2);
      FaultFs fs;
      fs.FailWrite(n, fault);
      Status s = MoveToTier(t.dir, two, &fs);
      CHECK(!s.ok());
      CHECK(s.message().find("copy_file_range") != std::string::npos);
      CHECK(fs.kernel_copies() == n - 1);  // the copies before it went through the kernel
      CHECK(Snapshot(t.dir) == before);
      CHECK(ListDirEndingIn(t.tier, ".log").empty());  // nothing published
      CHECK(!ListDirEndingIn(t.tier, ".tmp").empty());
      CHECK(ReadAll(t.dir) == t.records);
      CHECK(Verify(t.dir).empty());
      auto finished = FinishTierMoves(t.dir);
      REQUIRE(finished);
      CHECK(ListDir(t.tier).empty());
      CHECK(Snapshot(t.dir) == before);
      REQUIRE(MoveToTier(t.dir, two).ok());
      CHECK(ListDirEndingIn(t.tier, ".log").size() == 2);
      CHECK(ReadAll(t.dir) == t.records);
      CHECK(Verify(t.dir).empty());
    }
}

TEST_CASE("R94 move order: a kernel that refuses copy_file_range copies through reads and writes") {
  Tiered t;
  const auto before = Snapshot(t.dir);
  const std::vector<int64_t> two(t.bases.begin(), t.bases.begin() + 2);
  SECTION("the copies are byte for byte the local files") {
    FaultFs fs;
    fs.RefuseCopy();
    REQUIRE(MoveToTier(t.dir, two, &fs).ok());
    CHECK(fs.kernel_copies() == 0);
    for (int64_t base : two)
      for (const char* s : {".log", ".index", ".timeindex"}) {
        const std::string name = SegmentFileName(base, s);
        const auto local = std::find_if(before.begin(), before.end(),
                                        [&](const auto& f) { return f.first == name; });
        REQUIRE(local != before.end());
        CHECK(ReadFile(t.tier + "/" + name) == local->second);
        CHECK(!Exists(t.dir + "/" + name));
      }
    CHECK(ReadAll(t.dir) == t.records);
    CHECK(Verify(t.dir).empty());
  }
  SECTION("a write of the fallback that fails leaves the old state") {
    FaultFs fs;
    fs.RefuseCopy();
    fs.FailWrite(2, FaultFs::Fault::kShortWrite);
    CHECK(!MoveToTier(t.dir, two, &fs).ok());
    CHECK(Snapshot(t.dir) == before);
    CHECK(ListDirEndingIn(t.tier, ".log").empty());
    CHECK(ReadAll(t.dir) == t.records);
    REQUIRE(FinishTierMoves(t.dir));
    CHECK(ListDir(t.tier).empty());
  }
}

TEST_CASE("R97 retention of tiered segments: a tiered segment keeps its files' times") {
  Tiered t;
  // Times retention judges by (R74: the .log's mtime is the last append
  // time), set to the nanosecond on every file of two segments.
  constexpr int64_t kMtimeNs = 1'600'000'000'123'456'789;
  constexpr int64_t kAtimeNs = 1'600'000'100'000'000'007;
  const struct timespec times[2] = {{kAtimeNs / 1000000000, kAtimeNs % 1000000000},
                                    {kMtimeNs / 1000000000, kMtimeNs % 1000000000}};
  const std::vector<int64_t> two(t.bases.begin(), t.bases.begin() + 2);
  for (int64_t base : two)
    for (const char* s : {".log", ".index", ".timeindex"})
      REQUIRE(::utimensat(AT_FDCWD, (t.dir + "/" + SegmentFileName(base, s)).c_str(), times, 0) ==
              0);
  auto log_before = ListRetentionSegments(t.dir);
  REQUIRE(log_before);
  // The source's access times as the move finds them (reading a time index
  // tail may have updated them).
  std::vector<int64_t> atimes;
  for (int64_t base : two)
    for (const char* s : {".log", ".index", ".timeindex"}) {
      struct stat st;
      REQUIRE(::stat((t.dir + "/" + SegmentFileName(base, s)).c_str(), &st) == 0);
      atimes.push_back(st.st_atim.tv_sec * 1000000000LL + st.st_atim.tv_nsec);
    }
  CHECK(atimes[0] == kAtimeNs);  // the .log: retention reads no segment's contents
  FaultFs fs;
  REQUIRE(MoveToTier(t.dir, two, &fs).ok());
  CHECK(fs.set_times().second == kMtimeNs);
  size_t i = 0;
  for (int64_t base : two)
    for (const char* s : {".log", ".index", ".timeindex"}) {
      struct stat st;
      REQUIRE(::stat((t.tier + "/" + SegmentFileName(base, s)).c_str(), &st) == 0);
      CHECK(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == kMtimeNs);
      CHECK(st.st_atim.tv_sec * 1000000000LL + st.st_atim.tv_nsec == atimes[i++]);
    }
  auto log_after = ListRetentionSegments(t.dir);
  REQUIRE(log_after);
  REQUIRE(log_after->segments.size() == log_before->segments.size());
  for (i = 0; i < 2; ++i) {
    CHECK(log_after->segments[i].tiered);
    CHECK(log_after->segments[i].append_time_ms == kMtimeNs / 1000000);
    CHECK(log_after->segments[i].clock_ms() == log_before->segments[i].clock_ms());
  }
}

TEST_CASE(
    "R108 tier.after.ms: a topic key with units, written only when set, refused out of range") {
  TopicConfig c;
  CHECK(c.tier_after_ms == -1);
  CHECK(c.Serialize().find("tier.after.ms") == std::string::npos);
  REQUIRE(c.Set("tier.after.ms", "7d").ok());
  CHECK(c.tier_after_ms == 7 * kDay);
  CHECK(c.Get("tier.after.ms") == std::optional<std::string>("604800000"));
  const std::string text = c.Serialize();
  CHECK(text.find("\ntier.after.ms=604800000\n") != std::string::npos);
  auto back = TopicConfig::Parse(text, "t.conf");
  REQUIRE(back);
  CHECK(back->tier_after_ms == 7 * kDay);
  REQUIRE(c.Set("tier.after.ms", "0").ok());
  CHECK(c.tier_after_ms == 0);
  for (const char* bad : {"-2", "soon", "3y", ""}) {
    INFO(bad);
    TopicConfig d;
    Status s = d.Set("tier.after.ms", bad);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("tier.after.ms") != std::string::npos);
    CHECK(d.tier_after_ms == -1);
  }
  auto names = TopicConfig::KeyNames();
  CHECK(std::find(names.begin(), names.end(), "tier.after.ms") != names.end());
  CHECK(!TopicConfig::Parse("format.version=1\npartitions=1\ntier.after.ms=1d\n", "t.conf"));
}

TEST_CASE("R108 tier.after.ms: the run's --tier-after replaces the topic's, neither moves none") {
  TopicConfig none, week;
  week.tier_after_ms = 7 * kDay;
  CHECK(TierAfterFor(none, -1) == -1);
  CHECK(TierAfterFor(week, -1) == 7 * kDay);
  CHECK(TierAfterFor(week, 0) == 0);
  CHECK(TierAfterFor(none, kDay) == kDay);
  // Segments of days 1, 5 and 9, judged on day 10.
  RetentionLog log;
  log.segments = {Seg(0, 10, 1), Seg(10, 20, 5), Seg(20, 30, 9), Seg(30, 30, 10, true)};
  auto moved = [&](const TopicConfig& topic, int64_t run) {
    std::vector<int64_t> bases;
    for (const RetentionSegment& s : PlanTier(log, {TierAfterFor(topic, run), 10 * kDay}))
      bases.push_back(s.base);
    return bases;
  };
  CHECK(moved(none, -1).empty());
  CHECK(moved(week, -1) == std::vector<int64_t>{0});
  CHECK(moved(week, 2 * kDay) == std::vector<int64_t>{0, 10});
  CHECK(moved(none, 0) == std::vector<int64_t>{0, 10, 20});
}
