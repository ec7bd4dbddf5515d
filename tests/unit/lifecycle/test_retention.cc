// Retention (format-spec/retention.md, R73-R78): the plan, the losses of
// consumer groups, and the two-phase deletion through PartitionWriter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "mq/consumer.h"
#include "mq/partition.h"
#include "mq/retention.h"
#include "mq/segment.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

constexpr int64_t kDay = 24LL * 3600 * 1000;

// Segments of 10 offsets and 100 bytes each; segment i's clock is
// day i (timestamps and append times alike); the last one is active.
RetentionLog TenSegments(int count = 10) {
  RetentionLog log;
  for (int i = 0; i < count; ++i) {
    RetentionSegment s;
    s.base = i * 10;
    s.end = s.base + 10;
    s.bytes = 100;
    s.max_timestamp = i * kDay;
    s.append_time_ms = i * kDay;
    s.active = i == count - 1;
    log.segments.push_back(s);
  }
  log.log_end_offset = count * 10;
  return log;
}

std::vector<int64_t> Bases(const RetentionPlan& p) {
  std::vector<int64_t> out;
  for (const auto& d : p.deletions) out.push_back(d.segment.base);
  return out;
}

}  // namespace

TEST_CASE("R74: segments older than retention.ms go, a run of the oldest, never the active one") {
  RetentionLog log = TenSegments();
  RetentionPolicy p;
  p.retention_ms = 5 * kDay;
  p.now_ms = 9 * kDay + 1;  // horizon: day 4 + 1 ms: days 0..4 are older
  auto plan = PlanRetention(log, p);
  CHECK(Bases(plan) == std::vector<int64_t>{0, 10, 20, 30, 40});
  CHECK(plan.new_log_start == 50);
  CHECK(plan.bytes() == 500);
  CHECK_FALSE(plan.roll_active);
  // A young segment ends the run even when an older one follows it.
  log.segments[1].append_time_ms = log.segments[1].max_timestamp = 9 * kDay;
  CHECK(Bases(PlanRetention(log, p)) == std::vector<int64_t>{0});
}

TEST_CASE("R74: the clock is min(max timestamp, append time): future timestamps pin nothing") {
  RetentionLog log = TenSegments();
  for (auto& s : log.segments) s.max_timestamp = 1000 * kDay;  // producer clocks far ahead
  RetentionPolicy p;
  p.retention_ms = 5 * kDay;
  p.now_ms = 9 * kDay + 1;
  CHECK(Bases(PlanRetention(log, p)) == std::vector<int64_t>{0, 10, 20, 30, 40});
  // And old timestamps in recently appended segments count as old.
  RetentionLog old = TenSegments();
  for (auto& s : old.segments) {
    s.append_time_ms = 9 * kDay;
    s.max_timestamp = 0;
  }
  old.segments.back().max_timestamp = -1;  // the active one: its append time only
  CHECK(PlanRetention(old, p).deletions.size() == 9);
}

TEST_CASE("R75: by size, oldest first, while what stays holds at least retention.bytes") {
  RetentionLog log = TenSegments();
  RetentionPolicy p;
  p.retention_bytes = 350;
  auto plan = PlanRetention(log, p);
  CHECK(Bases(plan) == std::vector<int64_t>{0, 10, 20, 30, 40, 50});  // 400 bytes stay
  CHECK(plan.new_log_start == 60);
  p.retention_bytes = 400;
  CHECK(PlanRetention(log, p).deletions.size() == 6);
  p.retention_bytes = 0;  // everything but the active segment
  CHECK(PlanRetention(log, p).deletions.size() == 9);
  p.retention_bytes = 1000;
  CHECK(PlanRetention(log, p).empty());
}

TEST_CASE("R76: the active segment is rolled when it qualifies by time, never at the HW or above") {
  RetentionLog log = TenSegments(3);
  RetentionPolicy p;
  p.retention_ms = kDay;
  p.now_ms = 100 * kDay;
  auto plan = PlanRetention(log, p);
  CHECK(plan.roll_active);
  CHECK(Bases(plan) == std::vector<int64_t>{0, 10, 20});
  CHECK(plan.new_log_start == 30);
  // An empty active segment is not rolled.
  log.segments.back().end = log.segments.back().base;
  log.log_end_offset = 20;
  CHECK_FALSE(PlanRetention(log, p).roll_active);
  // Replicated: nothing at or above the high watermark goes.
  RetentionLog rep = TenSegments(5);
  rep.high_watermark = 25;
  auto held = PlanRetention(rep, p);
  CHECK(Bases(held) == std::vector<int64_t>{0, 10});
  CHECK(held.new_log_start == 20);
  CHECK(held.held_by_high_watermark == 1);
  p.retention_ms = -1;
  p.delete_before = 40;
  CHECK(PlanRetention(rep, p).new_log_start == 25);
}

TEST_CASE("R73: delete-records moves the log start to the offset, deleting whole segments below") {
  RetentionLog log = TenSegments();
  RetentionPolicy p;
  p.delete_before = 35;
  auto plan = PlanRetention(log, p);
  CHECK(plan.new_log_start == 35);
  CHECK(Bases(plan) == std::vector<int64_t>{0, 10, 20});
  p.delete_before = 1000;  // past the end: the log end
  CHECK(PlanRetention(log, p).new_log_start == 100);
  // Segments wholly below a published log start are planned first.
  log.log_start_offset = 25;
  RetentionPolicy none;
  auto left = PlanRetention(log, none);
  CHECK(Bases(left) == std::vector<int64_t>{0, 10});
  CHECK(left.new_log_start == 25);
}

TEST_CASE("R78: groups that would lose unread messages, and protection that keeps them") {
  RetentionLog log = TenSegments();
  RetentionPolicy p;
  p.retention_ms = 5 * kDay;
  p.now_ms = 9 * kDay + 1;
  auto plan = PlanRetention(log, p);  // start 0 -> 50
  std::vector<GroupPosition> groups = {
      {"fast", 80, 9 * kDay}, {"slow", 23, 9 * kDay}, {"dead", 5, 1 * kDay}};
  auto losses = RetentionLosses(plan, groups, p.now_ms, 3 * kDay);
  REQUIRE(losses.size() == 2);
  CHECK(losses[0].group == "slow");
  CHECK(losses[0].messages == 27);
  CHECK(losses[0].oldest_ms == 2 * kDay);  // segment 20 holds offset 23
  CHECK_FALSE(losses[0].expired);
  CHECK(losses[1].group == "dead");
  CHECK(losses[1].messages == 45);
  CHECK(losses[1].expired);  // no commit for 8 days, bound 3 days
  auto kept = ProtectGroups(plan, losses);
  CHECK(Bases(kept) == std::vector<int64_t>{0, 10});  // segment 20 holds slow's offset 23
  CHECK(kept.new_log_start == 20);
  CHECK(RetentionLosses(kept, {groups[1]}, p.now_ms, -1).empty());
  // Without a bound the dead group pins from offset 5: nothing goes.
  auto pinned = ProtectGroups(plan, RetentionLosses(plan, groups, p.now_ms, -1));
  CHECK(pinned.deletions.empty());
  CHECK(pinned.empty());
}

TEST_CASE("R77: deleted segments are renamed .deleted after the log start moves, purged later") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);
  auto before = ListDirEndingIn(dir, ".log");
  REQUIRE(before.size() >= 4);
  const int64_t third = *SegmentBaseOffset(before[2]);
  // A reader positioned in the first segment keeps reading it.
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  REQUIRE((*r)->Seek(0).ok());
  auto first = (*r)->Next();
  REQUIRE(first);
  REQUIRE(*first);
  REQUIRE(w->DeleteSegmentsBefore(third).ok());
  CHECK(w->log_start_offset() == third);
  CHECK(ListDirEndingIn(dir, ".log.deleted") ==
        std::vector<std::string>{before[0] + ".deleted", before[1] + ".deleted"});
  CHECK(ListDirEndingIn(dir, ".log").size() == before.size() - 2);
  int64_t expect = (*first)->header().last_offset() + 1;
  for (;;) {  // the rest of segment 0, then the log start: never a gap inside a segment read
    auto b = (*r)->Next();
    REQUIRE(b);
    if (!*b) break;
    const int64_t base = (*b)->header().base_offset;
    CHECK((base == expect || base == third));
    expect = (*b)->header().last_offset() + 1;
  }
  CHECK(expect == w->log_end_offset());
  // A fresh reader starts at the new log start.
  auto fresh = ReadAll(dir);
  REQUIRE(!fresh.empty());
  CHECK(fresh.front().first == third);
  // Purge: not before the delay, then all of them.
  auto kept = PurgeDeletedFiles(dir, ::time(nullptr) * 1000LL, 3600 * 1000);
  REQUIRE(kept);
  CHECK(*kept == 0);
  auto purged = PurgeDeletedFiles(dir, ::time(nullptr) * 1000LL + 1000, 0);
  REQUIRE(purged);
  CHECK(*purged == 6);  // .log, .index, .timeindex of two segments
  CHECK(ListDirEndingIn(dir, ".deleted").empty());
}

TEST_CASE("R73: the log start is durable before any file is renamed, and a later run finishes") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  FaultFs fs;
  {
    auto w = SmallSegmentWriter(dir, &fs);
    AppendSmallBatches(*w, 20);
  }
  auto logs = ListDirEndingIn(dir, ".log");
  const int64_t third = *SegmentBaseOffset(logs[2]);
  {
    auto w = SmallSegmentWriter(dir, &fs);
    fs.FailRename(1);  // the first rename: the state file was published and synced before it
    CHECK_FALSE(w->DeleteSegmentsBefore(third).ok());
    fs.Clear();
  }
  CHECK(ListDirEndingIn(dir, ".log") == logs);  // every segment still there
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  CHECK((*r)->log_start_offset() == third);
  CHECK(ReadAll(dir).front().first == third);
  auto log = ListRetentionSegments(dir);
  REQUIRE(log);
  auto plan = PlanRetention(*log, RetentionPolicy{});
  CHECK(plan.deletions.size() == 2);  // below the start: a later run renames them
  auto w = SmallSegmentWriter(dir);
  CHECK(w->log_start_offset() == third);
  REQUIRE(w->DeleteSegmentsBefore(plan.new_log_start).ok());
  CHECK(ListDirEndingIn(dir, ".log").size() == logs.size() - 2);
  CHECK(ListDirEndingIn(dir, ".log.deleted").size() == 2);
}

TEST_CASE("R76: a rolled active segment leaves an empty log starting at its end") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);
  const int64_t end = w->log_end_offset();
  SegmentDeletion how;
  how.roll_active = true;
  REQUIRE(w->DeleteSegmentsBefore(end, how).ok());
  CHECK(w->log_start_offset() == end);
  CHECK(w->log_end_offset() == end);
  CHECK(ListDirEndingIn(dir, ".log") == std::vector<std::string>{SegmentFileName(end, ".log")});
  CHECK(ReadAll(dir).empty());
  AppendSmallBatches(*w, 1);
  CHECK(ReadAll(dir).front().first == end);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems, OffsetPolicy::kContiguous).ok());
  for (auto& p : problems) CHECK(p.kind != Problem::Kind::kCorruption);
}

TEST_CASE("R73: delete-records sets the log start inside a segment, readers start there") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);
  auto logs = ListDirEndingIn(dir, ".log");
  const int64_t second = *SegmentBaseOffset(logs[1]);
  SegmentDeletion how;
  how.exact_start = true;
  REQUIRE(w->DeleteSegmentsBefore(second + 3, how).ok());
  CHECK(w->log_start_offset() == second + 3);
  CHECK(ListDirEndingIn(dir, ".log").size() == logs.size() - 1);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  CHECK((*r)->log_start_offset() == second + 3);
  // Reopened (recovery keeps the published start).
  w.reset();
  auto again = SmallSegmentWriter(dir);
  CHECK(again->log_start_offset() == second + 3);
}

TEST_CASE("R73: a seek below the log start goes to it and reports the offset out of range") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);
  const int64_t third = *SegmentBaseOffset(ListDirEndingIn(dir, ".log")[2]);
  REQUIRE(w->DeleteSegmentsBefore(third).ok());
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  REQUIRE((*r)->Seek(3).ok());
  auto oor = (*r)->TakeOutOfRange();
  REQUIRE(oor);
  CHECK(oor->offset == 3);
  CHECK(oor->log_start_offset == third);
  CHECK(oor->status(dir).message().find("offset 3 is out of range") != std::string::npos);
  CHECK_FALSE((*r)->TakeOutOfRange());
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == third);
  REQUIRE((*r)->Seek(third).ok());
  CHECK_FALSE((*r)->TakeOutOfRange());
}

TEST_CASE("R73: a reader whose next segments retention deleted goes on at the log start") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);
  auto logs = ListDirEndingIn(dir, ".log");
  REQUIRE(logs.size() >= 4);
  const int64_t second = *SegmentBaseOffset(logs[1]);
  const int64_t fourth = *SegmentBaseOffset(logs[3]);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  REQUIRE((*r)->Seek(0).ok());
  auto first = (*r)->Next();  // segment 0 is open now
  REQUIRE(first);
  REQUIRE(*first);
  REQUIRE(w->DeleteSegmentsBefore(fourth).ok());  // segments 0-2 go
  std::vector<int64_t> bases;
  for (;;) {
    auto b = (*r)->Next();
    INFO((b ? "" : b.error().message()));
    REQUIRE(b);
    if (!*b) break;
    bases.push_back((*b)->header().base_offset);
  }
  REQUIRE(!bases.empty());
  // The rest of segment 0 (open), then the log start: no R26 for the gap.
  auto at = std::find(bases.begin(), bases.end(), fourth);
  REQUIRE(at != bases.end());
  CHECK(std::all_of(bases.begin(), at, [&](int64_t b) { return b < second; }));
  auto oor = (*r)->TakeOutOfRange();
  REQUIRE(oor);
  CHECK(oor->offset == second);
  CHECK(oor->log_start_offset == fourth);
}

TEST_CASE("R73: a log start below the first segment (files removed by hand) is raised to it") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);
  w.reset();
  auto logs = ListDirEndingIn(dir, ".log");
  const int64_t second = *SegmentBaseOffset(logs[1]);
  for (const char* suffix : {".log", ".index", ".timeindex"})
    REQUIRE(::unlink((dir + "/" + SegmentFileName(0, suffix)).c_str()) == 0);
  auto log = ListRetentionSegments(dir);
  REQUIRE(log);
  CHECK(log->log_start_offset == 0);  // the state file still says 0
  auto plan = PlanRetention(*log, RetentionPolicy{});
  CHECK(plan.deletions.empty());
  CHECK(plan.new_log_start == second);
  CHECK_FALSE(plan.empty());
  auto again = SmallSegmentWriter(dir);
  REQUIRE(again->DeleteSegmentsBefore(plan.new_log_start).ok());
  CHECK(again->log_start_offset() == second);
  CHECK(ListDirEndingIn(dir, ".log").size() == logs.size() - 1);
}

TEST_CASE(
    "R78: headroom: how long until retention by time reaches a group's oldest unread message") {
  RetentionLog log = TenSegments();
  RetentionPolicy p;
  p.retention_ms = 5 * kDay;
  p.now_ms = 6 * kDay;
  // Offset 23 is in segment 20 (day 2): due on day 7, one day from now.
  auto h = RetentionHeadroomMs(log, p, 23);
  REQUIRE(h);
  CHECK(*h == kDay);
  CHECK(*RetentionHeadroomMs(log, p, 5) == 0);    // segment 0 (day 0) is due already
  CHECK_FALSE(RetentionHeadroomMs(log, p, 100));  // read everything
  p.retention_ms = -1;
  CHECK_FALSE(RetentionHeadroomMs(log, p, 23));
}

TEST_CASE("R110: the append rate: the newest segments' bytes over the time since the reference") {
  RetentionLog log = TenSegments();  // segment i: 100 bytes, last append on day i
  // Reference: segment 1 (8 before the active one, 9); segments 2-9 since.
  auto r = EstimateAppendRate(log, 10 * kDay);
  REQUIRE(r);
  CHECK(r->since_ms == kDay);
  CHECK(r->bytes == 800);
  CHECK(r->segments == 8);
  CHECK(r->bytes_per_ms(10 * kDay) == Approx(800.0 / (9 * kDay)));
  // Idle time counts: a day later the rate is lower.
  CHECK(r->bytes_per_ms(11 * kDay) < r->bytes_per_ms(10 * kDay));
  // Fewer segments than the window: the first is the reference.
  auto three = EstimateAppendRate(TenSegments(3), 3 * kDay);
  REQUIRE(three);
  CHECK(three->since_ms == 0);
  CHECK(three->bytes == 200);
  // A tiered segment's mtime is its move's: never the reference.
  RetentionLog tiered = TenSegments(3);
  tiered.segments[0].tiered = true;
  auto t = EstimateAppendRate(tiered, 3 * kDay);
  REQUIRE(t);
  CHECK(t->since_ms == kDay);
  CHECK(t->bytes == 100);
  // Not known: the active segment alone, every earlier one tiered, a clock
  // not past the reference.
  CHECK_FALSE(EstimateAppendRate(TenSegments(1), 3 * kDay));
  tiered.segments[1].tiered = true;
  CHECK_FALSE(EstimateAppendRate(tiered, 3 * kDay));
  CHECK_FALSE(EstimateAppendRate(TenSegments(3), 0));
}

TEST_CASE("R110: headroom by size: the bytes until retention.bytes reaches a group, and when") {
  RetentionLog log = TenSegments();
  RetentionPolicy p;
  p.retention_bytes = 1000;
  p.now_ms = 10 * kDay;
  // Offset 23 is in segment 20: 700 bytes after it, 300 to go, at 800
  // bytes per 9 days.
  auto h = RetentionSizeHeadroom(log, p, 23);
  REQUIRE(h);
  CHECK(h->bytes_to_go == 300);
  REQUIRE(h->rate);
  REQUIRE(h->ms);
  CHECK(*h->ms == static_cast<int64_t>(std::ceil(300.0 * 9 * kDay / 800)));
  // Segment 0 would go now at 900 bytes: due.
  p.retention_bytes = 900;
  auto due = RetentionSizeHeadroom(log, p, 5);
  REQUIRE(due);
  CHECK(due->bytes_to_go == 0);
  CHECK(*due->ms == 0);
  // A group in the active segment: all of retention.bytes is still to come.
  CHECK(RetentionSizeHeadroom(log, p, 95)->bytes_to_go == 900);
  // The rate not known (one segment): the bytes, no time.
  RetentionLog one = TenSegments(1);
  auto unknown = RetentionSizeHeadroom(one, p, 3);
  REQUIRE(unknown);
  CHECK(unknown->bytes_to_go == 900);
  CHECK_FALSE(unknown->rate);
  CHECK_FALSE(unknown->ms);
  // Nothing to say: read everything, or no retention by size.
  CHECK_FALSE(RetentionSizeHeadroom(log, p, 100));
  p.retention_bytes = -1;
  CHECK_FALSE(RetentionSizeHeadroom(log, p, 23));
}

TEST_CASE(
    "R90: retention.protect, retention.protect.max.ms and file.delete.delay.ms are topic keys") {
  TopicConfig c;
  REQUIRE(c.Set("retention.protect", "billing,audit.v2").ok());
  REQUIRE(c.Set("retention.protect.max.ms", "7d").ok());
  REQUIRE(c.Set("file.delete.delay.ms", "2m").ok());
  CHECK(c.retention_protect == "billing,audit.v2");
  CHECK(c.retention_protect_max_ms == 7 * kDay);
  CHECK(c.file_delete_delay_ms == 120000);
  // Written when set, read back the same.
  const std::string text = c.Serialize();
  CHECK(text.find("retention.protect=billing,audit.v2\n") != std::string::npos);
  CHECK(text.find("retention.protect.max.ms=604800000\n") != std::string::npos);
  CHECK(text.find("file.delete.delay.ms=120000\n") != std::string::npos);
  auto back = TopicConfig::Parse(text, "t.conf");
  REQUIRE(back);
  CHECK(*back == c);
  // At their defaults they are not written: such a file is as before.
  const std::string plain = TopicConfig{}.Serialize();
  CHECK(plain.find("protect") == std::string::npos);
  CHECK(plain.find("file.delete.delay.ms") == std::string::npos);
  // Bad values are refused, naming the key, and change nothing.
  TopicConfig d;
  for (auto [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"retention.protect", "a,,b"},
                                                        {"retention.protect", "bad/name"},
                                                        {"retention.protect", "*,a"},
                                                        {"retention.protect.max.ms", "-2"},
                                                        {"retention.protect.max.ms", "1y"},
                                                        {"file.delete.delay.ms", "-1"}}) {
    Status s = d.Set(key, value);
    INFO(key << "=" << value);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find(key) != std::string::npos);
  }
  CHECK(d == TopicConfig{});
  auto bad =
      TopicConfig::Parse("format.version=1\npartitions=1\nretention.protect=a b\n", "t.conf");
  REQUIRE(!bad);
  CHECK(bad.error().code() == Code::kCorruption);
  REQUIRE(d.Set("retention.protect", "*").ok());
  REQUIRE(d.Set("retention.protect", "").ok());
  CHECK(d.retention_protect.empty());
}

TEST_CASE("R90: a run's flags replace the topic's protection and delay, key by key") {
  TopicConfig c;
  RetentionOverrides none;
  RetentionGuard g = RetentionGuardFor(c, none);
  CHECK_FALSE(g.Protects("a"));
  CHECK(g.protect_max_ms == -1);
  CHECK(g.delete_delay_ms == 60000);

  c.retention_protect = "a,b";
  c.retention_protect_max_ms = 5000;
  c.file_delete_delay_ms = 10;
  g = RetentionGuardFor(c, none);
  CHECK(g.Protects("a"));
  CHECK(g.Protects("b"));
  CHECK_FALSE(g.Protects("c"));
  CHECK_FALSE(g.Protects("a,b"));
  CHECK(g.protect_max_ms == 5000);
  CHECK(g.delete_delay_ms == 10);

  c.retention_protect = "*";
  CHECK(RetentionGuardFor(c, none).Protects("anyone"));

  RetentionOverrides run;
  run.protect_groups = {"c"};
  run.protect_max_ms = 0;
  run.delete_delay_ms = 0;
  g = RetentionGuardFor(c, run);
  CHECK(g.Protects("c"));
  CHECK_FALSE(g.Protects("a"));  // the flags replace the topic's "*"
  CHECK(g.protect_max_ms == 0);
  CHECK(g.delete_delay_ms == 0);
  run = {};
  run.protect_all = true;
  c.retention_protect.clear();
  CHECK(RetentionGuardFor(c, run).Protects("z"));
}

TEST_CASE("R91: a reader that goes on at a log start inside a batch says where it went on") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);  // batches of 2 records
  auto logs = ListDirEndingIn(dir, ".log");
  REQUIRE(logs.size() >= 4);
  const int64_t fourth = *SegmentBaseOffset(logs[3]);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  // A seek inside a batch: the offset sought.
  REQUIRE((*r)->Seek(3).ok());
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 2);
  CHECK((*r)->first_offset() == 3);
  b = (*r)->Next();
  REQUIRE(*b);
  CHECK((*r)->first_offset() == 4);  // the next batch: its base
  // Delete-records puts the log start inside the fourth segment's first
  // batch while the reader reads the first segment.
  SegmentDeletion how;
  how.exact_start = true;
  REQUIRE(w->DeleteSegmentsBefore(fourth + 1, how).ok());
  for (;;) {
    b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    if ((*b)->header().base_offset >= fourth - 1) break;
  }
  CHECK((*b)->header().base_offset == fourth);
  CHECK((*r)->first_offset() == fourth + 1);
  auto oor = (*r)->TakeOutOfRange();
  REQUIRE(oor);
  CHECK(oor->log_start_offset == fourth + 1);
}

TEST_CASE("R91: a consumer hands out no record below a log start it jumped to mid-batch") {
  TempDir tmp;
  auto data = DataDir::Open(tmp / "data", true);
  REQUIRE(data);
  TopicConfig config;
  config.segment_bytes = 400;
  REQUIRE(data->CreateTopic("t", config).ok());
  const std::string dir = data->PartitionDir("t", 0);
  auto w = SmallSegmentWriter(dir);
  AppendSmallBatches(*w, 20);  // batches of 2 records, 4 segments or more
  auto logs = ListDirEndingIn(dir, ".log");
  REQUIRE(logs.size() >= 4);
  const int64_t second = *SegmentBaseOffset(logs[1]);
  const int64_t fourth = *SegmentBaseOffset(logs[3]);
  std::vector<ConsumerNotice> notices;
  ConsumerOptions options;
  options.on_notice = [&](const ConsumerNotice& n) { notices.push_back(n); };
  auto c = Consumer::Open(*data, "t", options);
  REQUIRE(c);
  REQUIRE((*c)->Assign(0, {StartPosition::Kind::kBeginning, 0}).ok());
  auto first = (*c)->Next();
  REQUIRE(first);
  REQUIRE(*first);
  CHECK((*first)->record.offset == 0);
  // The log start moves inside the first batch of the fourth segment
  // while the consumer reads the first one (open: read to its end).
  SegmentDeletion how;
  how.exact_start = true;
  REQUIRE(w->DeleteSegmentsBefore(fourth + 1, how).ok());
  std::vector<int64_t> offsets;
  for (;;) {
    auto r = (*c)->Next();
    INFO((r ? "" : r.error().message()));
    REQUIRE(r);
    if (!*r) break;
    offsets.push_back((*r)->record.offset);
  }
  REQUIRE(!offsets.empty());
  for (int64_t o : offsets) {
    INFO("offset " << o);
    CHECK((o < second || o > fourth));
  }
  CHECK(std::find(offsets.begin(), offsets.end(), fourth + 1) != offsets.end());
  CHECK(offsets.back() == w->log_end_offset() - 1);
  auto gone = std::find_if(notices.begin(), notices.end(), [](const ConsumerNotice& n) {
    return n.kind == ConsumerNotice::Kind::kOutOfRange;
  });
  REQUIRE(gone != notices.end());
  CHECK(gone->last_offset == fourth);
}
