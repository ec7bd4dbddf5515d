// Truncation (format-spec/segment.md §6.4, §6.5, R40): a crash at any step
// leaves the old log or the truncated one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <unistd.h>

#include "exit_code.h"  // tools/common: a status's exit status
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"
#include "storage/recovery.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// A boot id no kernel has: opening under it is opening after a reboot (R27).
const char* kAfterReboot = "0000beef-0000-0000-0000-00000000beef";
const std::string kIntent = "truncate-to";

LogConfig SmallSegments(LogConfig config = {}) {
  config.segment_bytes = 600;
  config.index_interval_bytes = 100;
  return config;
}

// A log of `batches` batches of 2 records over several segments, some with
// a producer id (so snapshots exist past the cut).
void BuildLog(const std::string& dir, int batches) {
  auto w = PartitionWriter::Open(dir, SmallSegments(), true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < batches; ++i) {
    BatchOptions o;
    if (i % 3 == 0) {
      o.producer_id = 7;
      o.producer_epoch = 0;
      o.base_sequence = i / 3 * 2;
    }
    auto b = MakeBatch(2, 1000 + i, 20 + static_cast<size_t>(i % 5) * 7, o);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
}

// Copies the partition `from` to `to` and truncates the copy to `target`
// with a process that dies after `crash_at` changes. Returns true when the
// truncation finished first.
bool TruncateCrashing(const std::string& from, const std::string& to, int64_t target,
                      int crash_at) {
  CopyDir(from, to);
  CrashFs fs(1 << 30);
  LogConfig config = SmallSegments();
  config.fs = &fs;
  auto w = PartitionWriter::Open(to, config, false, nullptr);
  REQUIRE(w);
  fs = CrashFs(crash_at);
  Status s = (*w)->TruncateTo(target);
  CHECK(s.ok() == !fs.crashed());
  return !fs.crashed();
}

std::vector<std::pair<int64_t, int64_t>> Prefix(const std::vector<std::pair<int64_t, int64_t>>& all,
                                                int64_t end) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (auto b : all)
    if (b.second < end) out.push_back(b);
  return out;
}

}  // namespace

TEST_CASE("R40 truncation intent: a crash at every step leaves the old log or the truncated one") {
  TempDir tmp;
  const std::string base = tmp / "base-0";
  BuildLog(base, 24);  // offsets 0..47
  const auto old_log = ReadAll(base);
  REQUIRE(old_log.size() == 24);
  REQUIRE(ListDir(base).size() > 9);  // several segments
  const int64_t target = 13;          // batch 12-13 straddles: it goes whole
  const auto truncated = Prefix(old_log, 12);
  int points = 0, truncated_seen = 0, old_seen = 0;
  for (int k = 0;; ++k) {
    const std::string dir = tmp / fmt::format("k{}-0", k);
    const bool done = TruncateCrashing(base, dir, target, k);
    ++points;
    for (bool reboot : {false, true}) {
      INFO("crash after " << k << " changes; reopened after a reboot: " << reboot);
      const std::string copy = tmp / fmt::format("k{}r{}-0", k, reboot);
      CopyDir(dir, copy);
      std::optional<ScopedBootId> boot;
      if (reboot) boot.emplace(kAfterReboot);
      RecoveryReport report;
      auto w = PartitionWriter::Open(copy, SmallSegments(), false, &report);
      REQUIRE(w);
      auto now = ReadAll(copy);
      CHECK((now == old_log || now == truncated));
      if (now == truncated) ++truncated_seen;
      if (now == old_log) ++old_seen;
      CHECK(!Exists(copy + "/" + kIntent));
      std::vector<Problem> problems;
      REQUIRE((*w)->Close().ok());
      REQUIRE(VerifyPartition(copy, {}, &problems).ok());
      CHECK(problems.empty());
      // Appends continue from the end that was kept, with the producer
      // state of that log (no snapshot of the cut batches survives): the
      // producer's next sequence follows its last kept batch.
      auto again = PartitionWriter::Open(copy, SmallSegments(), false, nullptr);
      REQUIRE(again);
      BatchOptions o;
      o.producer_id = 7;
      o.producer_epoch = 0;
      o.base_sequence = static_cast<int32_t>((now.size() + 2) / 3 * 2);
      auto next = MakeBatch(1, 5000, 8, o);
      auto r = (*again)->Append(next);
      REQUIRE(r);
      CHECK(!r->duplicate);
      CHECK(r->base_offset == now.back().second + 1);
    }
    if (done) break;
    REQUIRE(k < 200);
  }
  INFO("crash points " << points);
  CHECK(points > 10);
  CHECK(old_seen > 0);
  CHECK(truncated_seen > 0);
}

TEST_CASE(
    "R40 truncation intent: a cut interrupted after publishing is completed at the next open") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  BuildLog(dir, 24);
  const auto old_log = ReadAll(dir);
  // Find a crash point after the intent is on disk and before the cut is
  // done: the intent file is left behind.
  for (int k = 1; k < 200; ++k) {
    const std::string d = tmp / fmt::format("k{}-0", k);
    (void)TruncateCrashing(dir, d, 13, k);
    if (!Exists(d + "/" + kIntent)) continue;
    ScopedBootId boot(kAfterReboot);
    RecoveryReport report;
    auto w = PartitionWriter::Open(d, SmallSegments(), false, &report);
    REQUIRE(w);
    CHECK((*w)->log_end_offset() == 12);
    bool reported = false;
    for (const Problem& p : report.repaired) reported |= p.rule == "R40";
    CHECK(reported);
    CHECK(ReadAll(d) == Prefix(old_log, 12));
    CHECK(!Exists(d + "/" + kIntent));
    return;
  }
  FAIL("no crash point left the intent behind");
}

TEST_CASE("R40 truncation intent: a file that is not one stops the open, naming file and rule") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  BuildLog(dir, 6);
  const auto before = ReadAll(dir);
  for (const char* text : {"truncate.to=x\n", "truncate.to=-1\n", "size=3\n", "# nothing\n",
                           "truncate.to=1\ntruncate.to=2\n", "no equals sign\n"}) {
    INFO(text);
    std::string s = text;
    WriteFile(dir + "/" + kIntent,
              std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                     reinterpret_cast<const std::byte*>(s.data()) + s.size()));
    auto w = PartitionWriter::Open(dir, SmallSegments(), false, nullptr);
    REQUIRE(!w);
    CHECK(w.error().code() == Code::kCorruption);
    CHECK_THAT(w.error().message(), Catch::Contains("R40"));
    CHECK_THAT(w.error().message(), Catch::Contains(kIntent));
    CHECK(ReadAll(dir) == before);  // nothing guessed, nothing changed
  }
  std::vector<std::byte> big(5000, std::byte{'#'});
  WriteFile(dir + "/" + kIntent, big);
  auto w = PartitionWriter::Open(dir, SmallSegments(), false, nullptr);
  REQUIRE(!w);
  CHECK_THAT(w.error().message(), Catch::Contains("R40"));
}

TEST_CASE("R40 truncation intent: verify reports an interrupted truncation as needing recovery") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  BuildLog(dir, 6);
  std::string s = "truncate.to=4\n";
  WriteFile(dir + "/" + kIntent,
            std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                   reinterpret_cast<const std::byte*>(s.data()) + s.size()));
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  bool found = false;
  for (const Problem& p : problems)
    if (p.rule == "R40") {
      found = true;
      CHECK(p.kind == Problem::Kind::kNeedsRecovery);
      CHECK_THAT(p.detail, Catch::Contains("4"));
    }
  CHECK(found);
}

TEST_CASE(
    "R59 truncation history: verify reports a bad file, and a last cut past the log end, "
    "naming the line") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  BuildLog(dir, 6);  // 2 records a batch: the log ends at 12, published on this boot
  auto problems_with = [&](std::string_view text) {
    WriteFile(
        dir + "/truncations",
        std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                               reinterpret_cast<const std::byte*>(text.data()) + text.size()));
    std::vector<Problem> problems, r59;
    REQUIRE(VerifyPartition(dir, {}, &problems).ok());
    for (const Problem& p : problems)
      if (p.rule == "R59") r59.push_back(p);
    return r59;
  };
  CHECK(problems_with("cut=4 100\ncut=12 200\n").empty());  // a cut at the log end
  auto past = problems_with("cut=4 100\ncut=13 200\n");
  REQUIRE(past.size() == 1);
  CHECK(past[0].kind == Problem::Kind::kCorruption);
  CHECK(past[0].file == dir + "/truncations");
  CHECK(past[0].position == 10);  // the second line
  CHECK_THAT(past[0].detail, Catch::Contains("13") && Catch::Contains("12"));
  auto disorder = problems_with("cut=4 100\ncut=3 200\n");
  REQUIRE(disorder.size() == 1);
  CHECK(disorder[0].kind == Problem::Kind::kCorruption);
  CHECK(disorder[0].position == 10);
  auto junk = problems_with("cut=4 1x0\n");
  REQUIRE(junk.size() == 1);
  CHECK(junk[0].position == 0);
  // The last rewrites value: one the state file's counter reached, or the
  // next (a truncation under way or interrupted before it published: the
  // next writer publishes it), never one further.
  uint32_t rewrites = 0;
  {
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    auto v = (*r)->rewrites();
    REQUIRE(v);
    rewrites = *v;
  }
  auto with = [&](uint32_t last) {
    return problems_with(fmt::format("cut=4 100 {}\ncut=12 200 {}\n", last - 1, last));
  };
  CHECK(with(rewrites).empty());
  auto next = with(rewrites + 1);
  REQUIRE(next.size() == 1);
  CHECK(next[0].kind == Problem::Kind::kNeedsRecovery);
  CHECK(next[0].position == 11 + std::to_string(rewrites - 1).size());  // the second line
  auto beyond = with(rewrites + 2);
  REQUIRE(beyond.size() == 1);
  CHECK(beyond[0].kind == Problem::Kind::kCorruption);
  CHECK_THAT(beyond[0].detail, Catch::Contains(std::to_string(rewrites + 2)));
  auto disorder_rewrites =
      problems_with(fmt::format("cut=4 100 {}\ncut=12 200 {}\n", rewrites, rewrites - 1));
  REQUIRE(disorder_rewrites.size() == 1);
  CHECK(disorder_rewrites[0].kind == Problem::Kind::kCorruption);
}

// ---- leader epochs in the writer (replication.md §16.2) ----------------------

namespace {

// Every batch of a partition, byte for byte.
std::vector<int32_t> Epochs(const std::string& dir) {
  std::vector<int32_t> out;
  for (const auto& b : RawBatches(dir))
    out.push_back(DecodeBatchHeader(Bytes(b.data(), b.size())).partition_leader_epoch);
  return out;
}

std::vector<EpochEntry> Checkpoint(const std::string& dir) {
  auto fd = OpenDirectory(dir, false);
  REQUIRE(fd);
  auto c = LeaderEpochCache::Load(fd->get());
  REQUIRE(c);
  return c->entries();
}

AppendResult AppendBatch(PartitionWriter& w, int records = 2) {
  auto b = MakeBatch(records);
  auto r = w.Append(b);
  REQUIRE(r);
  return *r;
}

std::unique_ptr<PartitionWriter> Writer(const std::string& dir, int32_t epoch) {
  LogConfig config = SmallSegments();
  config.leader_epoch = epoch;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  return std::move(*w);
}

// Appends, for each (epoch, n) in turn, n batches of 2 records as the
// leader of that epoch.
void AppendInEpochs(const std::string& dir, std::vector<std::pair<int32_t, int>> runs) {
  for (auto [epoch, n] : runs) {
    auto w = Writer(dir, epoch);
    for (int i = 0; i < n; ++i) AppendBatch(*w);
  }
}

}  // namespace

TEST_CASE("leader epoch: a leader stamps its epoch into every batch and records where it starts") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  {
    auto w = Writer(dir, 3);
    AppendBatch(*w);
    AppendBatch(*w);
  }
  {
    auto w = Writer(dir, 5);
    AppendBatch(*w);
  }
  CHECK(Epochs(dir) == std::vector<int32_t>{3, 3, 5});
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{3, 0}, {5, 4}});
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  CHECK(problems.empty());
}

TEST_CASE(
    "leader epoch: a writer whose epoch is below the latest is fenced, even one opened before") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto old_leader = Writer(dir, 4);
  AppendBatch(*old_leader);
  auto new_leader = Writer(dir, 5);
  AppendBatch(*new_leader);
  auto b = MakeBatch(2);
  auto r = old_leader->Append(b);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kFenced);
  CHECK(cli::ExitCode(r.error()) == 75);
  CHECK_THAT(r.error().message(), Catch::Contains("no longer the leader"));
  CHECK(Epochs(dir) == std::vector<int32_t>{4, 5});
  auto later = PartitionWriter::Open(
      dir,
      [] {
        LogConfig c = SmallSegments();
        c.leader_epoch = 4;
        return c;
      }(),
      false, nullptr);
  REQUIRE(later);
  auto again = (*later)->Append(b);
  REQUIRE(!again);
  CHECK(again.error().code() == Code::kFenced);
}

TEST_CASE("leader epoch: an epoch begun without a batch fences a writer of an older one") {
  // As mq-replicate --serve begins the epoch it leads in before any batch
  // of it is appended (EnsureEpoch): a writer of the same log still in the
  // older epoch must find it at its next append.
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto old_leader = Writer(dir, 4);
  AppendBatch(*old_leader);
  auto new_leader = Writer(dir, 5);
  AppendBatch(*old_leader);  // the old leader has seen everything published so far
  REQUIRE(new_leader->BeginLeaderEpoch(5).ok());
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{4, 0}, {5, 4}});
  auto b = MakeBatch(2);
  auto r = old_leader->Append(b);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kFenced);
  CHECK(Epochs(dir) == std::vector<int32_t>{4, 4});
  // Another writer's open keeps the epoch (it starts at the log end).
  auto reader = Writer(dir, -1);
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{4, 0}, {5, 4}});
  // The new leader's first batch starts its epoch where it was begun.
  AppendBatch(*new_leader);
  CHECK(Epochs(dir) == std::vector<int32_t>{4, 4, 5});
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{4, 0}, {5, 4}});
}

TEST_CASE("leader epoch: a truncation drops the epochs that start past the new end") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  AppendInEpochs(dir, {{1, 3}, {2, 2}});  // offsets 0..5, then 6..9
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{1, 0}, {2, 6}});
  REQUIRE(Writer(dir, 2)->TruncateTo(6).ok());
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{1, 0}});
  auto w = Writer(dir, 3);
  AppendBatch(*w);
  CHECK(Checkpoint(dir) == std::vector<EpochEntry>{{1, 0}, {3, 6}});
  CHECK(Epochs(dir) == std::vector<int32_t>{1, 1, 1, 3});
}

TEST_CASE("leader epoch: a truncation interrupted at any step keeps no epoch at or past the end") {
  TempDir tmp;
  const std::string base = tmp / "base-0";
  AppendInEpochs(base, {{1, 6}, {2, 6}});  // offsets 0..11, then 12..23
  REQUIRE(Checkpoint(base) == std::vector<EpochEntry>{{1, 0}, {2, 12}});
  int truncated_seen = 0;
  for (int k = 0;; ++k) {
    const std::string dir = tmp / fmt::format("k{}-0", k);
    const bool done = TruncateCrashing(base, dir, 12, k);
    INFO("crash after " << k << " changes");
    auto w = PartitionWriter::Open(dir, SmallSegments(), false, nullptr);
    REQUIRE(w);
    const int64_t end = (*w)->log_end_offset();
    REQUIRE((end == 12 || end == 24));
    if (end == 12) ++truncated_seen;
    CHECK(Checkpoint(dir) ==
          (end == 12 ? std::vector<EpochEntry>{{1, 0}} : std::vector<EpochEntry>{{1, 0}, {2, 12}}));
    if (done) break;
    REQUIRE(k < 200);
  }
  CHECK(truncated_seen > 1);
}

TEST_CASE("leader epoch: an unreplicated writer stamps nothing and writes no checkpoint") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = Writer(dir, -1);
  AppendBatch(*w);
  REQUIRE(w->TruncateTo(0).ok());
  AppendBatch(*w);
  CHECK(Epochs(dir) == std::vector<int32_t>{-1});
  CHECK(!Exists(dir + "/leader-epoch-checkpoint"));
}

// ---- a follower's append (PartitionWriter::AppendReplicated) ------------------

namespace {

std::vector<std::byte> Concat(const std::vector<std::vector<std::byte>>& batches, size_t from,
                              size_t to) {
  std::vector<std::byte> out;
  for (size_t i = from; i < to; ++i) out.insert(out.end(), batches[i].begin(), batches[i].end());
  return out;
}

}  // namespace

TEST_CASE(
    "replicated append: a follower's log is the leader's, byte for byte, epochs and producers "
    "kept") {
  TempDir tmp;
  const std::string leader = tmp / "leader-0", follower = tmp / "follower-0";
  const uint32_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  int32_t seq = 0;
  for (int32_t epoch : {0, 2, 5}) {
    auto w = Writer(leader, epoch);
    for (int i = 0; i < 8; ++i) {
      BatchOptions o;
      if (rng() % 2) {
        o.producer_id = 9;
        o.producer_epoch = 0;
        o.base_sequence = seq;
      }
      const int records = 1 + static_cast<int>(rng() % 4);
      if (o.producer_id >= 0) seq += records;
      auto b = MakeBatch(records, 1000 + i, 10 + rng() % 60, o);
      REQUIRE(w->Append(b));
    }
  }
  const auto batches = RawBatches(leader);
  REQUIRE(batches.size() == 24);
  {
    auto f = Writer(follower, -1);
    // Fetches of random sizes, as a follower would get them.
    for (size_t at = 0; at < batches.size();) {
      size_t n = std::min(batches.size() - at, size_t{1} + rng() % 5);
      auto bytes = Concat(batches, at, at + n);
      auto r = f->AppendReplicated(bytes);
      REQUIRE(r);
      CHECK(r->batches == static_cast<int32_t>(n));
      at += n;
    }
    auto last = RawBatches(leader).back();
    auto view = BatchView::Parse(Bytes(last.data(), last.size()), {}, "last", 0);
    REQUIRE(view);
    CHECK(f->log_end_offset() == view->header().last_offset() + 1);
  }
  CHECK(RawBatches(follower) == batches);
  for (const std::string& name : ListDir(leader))
    if (name.size() > 4 && name.substr(name.size() - 4) == ".log")
      CHECK(ReadFile(follower + "/" + name) == ReadFile(leader + "/" + name));
  CHECK(Checkpoint(follower) == Checkpoint(leader));
  // The follower's producer table is the leader's: as the next leader it
  // takes the producer's next sequence and recognizes a duplicate.
  auto next_leader = Writer(follower, 6);
  BatchOptions o;
  o.producer_id = 9;
  o.producer_epoch = 0;
  o.base_sequence = seq;
  auto b = MakeBatch(1, 9000, 8, o);
  auto r = next_leader->Append(b);
  REQUIRE(r);
  CHECK(!r->duplicate);
  auto dup = MakeBatch(1, 9000, 8, o);
  auto again = next_leader->Append(dup);
  REQUIRE(again);
  CHECK(again->duplicate);
}

TEST_CASE(
    "replicated append: offsets that do not continue the log, an epoch going back, a bad CRC are "
    "refused, nothing written") {
  TempDir tmp;
  const std::string leader = tmp / "leader-0";
  {
    auto w = Writer(leader, 3);
    for (int i = 0; i < 4; ++i) AppendBatch(*w);  // offsets 0..7
  }
  const auto batches = RawBatches(leader);
  const std::string dir = tmp / "f-0";
  auto f = Writer(dir, -1);
  auto first = Concat(batches, 0, 2);
  REQUIRE(f->AppendReplicated(first));
  const auto before = ReadAll(dir);

  auto gap = Concat(batches, 3, 4);  // skips offsets 4..5
  auto r = f->AppendReplicated(gap);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kOutOfOrder);

  auto again = Concat(batches, 0, 1);  // offsets already there
  r = f->AppendReplicated(again);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kOutOfOrder);

  auto back = Concat(batches, 2, 3);
  SetPartitionLeaderEpoch(back, 1);  // below epoch 3 (not under the CRC)
  r = f->AppendReplicated(back);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kCorruption);
  CHECK_THAT(r.error().message(), Catch::Contains("R37"));

  auto flipped = Concat(batches, 2, 3);
  flipped.back() ^= std::byte{1};
  r = f->AppendReplicated(flipped);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kCorruption);

  CHECK(ReadAll(dir) == before);
  auto rest = Concat(batches, 2, 4);
  REQUIRE(f->AppendReplicated(rest));
  CHECK(RawBatches(dir) == batches);
}

// ---- the high watermark (replication.md §16.3) ---------------------------------

TEST_CASE(
    "high watermark: a bounded reader hands out only records below it and wakes when it moves") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto w = Writer(dir, 1);
  for (int i = 0; i < 4; ++i) AppendBatch(*w);  // offsets 0..7
  ReadOptions options;
  options.bound_by_high_watermark = true;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  CHECK((*r)->end_offset() == 0);  // no high watermark yet: nothing readable
  auto b = (*r)->Next();
  REQUIRE(b);
  CHECK(!*b);
  REQUIRE(w->SetHighWatermark(4).ok());
  CHECK((*r)->WaitForAppend(0, 5000));
  CHECK((*r)->end_offset() == 4);
  std::vector<int64_t> bases;
  for (;;) {
    auto n = (*r)->Next();
    REQUIRE(n);
    if (!*n) break;
    bases.push_back((*n)->header().base_offset);
  }
  CHECK(bases == std::vector<int64_t>{0, 2});
  // It only moves forward, never past the log end.
  REQUIRE(w->SetHighWatermark(2).ok());
  CHECK((*r)->end_offset() == 4);
  CHECK(w->SetHighWatermark(9).code() == Code::kInvalidArgument);
  REQUIRE(w->SetHighWatermark(8).ok());
  CHECK((*r)->WaitForAppend(4, 5000));
  auto n = (*r)->Next();
  REQUIRE(n);
  REQUIRE(*n);
  CHECK((*n)->header().base_offset == 4);
  // The checkpoint names the partition (R38); an unbounded reader reads on.
  auto fd = OpenDirectory(dir, false);
  REQUIRE(fd);
  auto hw = LoadHighWatermark(fd->get(), "t", 0);
  REQUIRE(hw);
  CHECK(*hw == 8);
  AppendBatch(*w);
  auto plain = PartitionReader::Open(dir);
  REQUIRE(plain);
  CHECK((*plain)->end_offset() == 10);
  CHECK((*r)->end_offset() == 8);
}

// R38: the high watermark is never above the log end; a cut lowers it.
int64_t StoredHighWatermark(const std::string& dir) {
  auto fd = OpenDirectory(dir, false);
  REQUIRE(fd);
  auto hw = LoadHighWatermark(fd->get(), "t", 0);
  REQUIRE(hw);
  return *hw;
}

TEST_CASE("leader epoch: SeekAfter goes back to where the epoch of the last batch read ends") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  LogConfig config;
  config.leader_epoch = 0;
  {
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w);
    for (int i = 0; i < 2; ++i) {  // offsets 0..9 in epoch 0
      auto b = MakeBatch(5);
      REQUIRE((*w)->Append(b));
    }
    REQUIRE((*w)->TruncateTo(5).ok());
  }
  config.leader_epoch = 1;
  {
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(10, 5000);  // offsets 5..14 in epoch 1
    REQUIRE((*w)->Append(b));
  }
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  // After a batch of epoch 0 up to offset 10: epoch 0 ends at 5.
  REQUIRE((*r)->SeekAfter(10, 0).ok());
  CHECK((*r)->TakeCut() == std::optional<int64_t>(5));
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 5);
  // After a batch of epoch 1, or of no known epoch: where it was.
  REQUIRE((*r)->SeekAfter(10, 1).ok());
  CHECK_FALSE((*r)->TakeCut());
  REQUIRE((*r)->SeekAfter(10, -1).ok());
  CHECK_FALSE((*r)->TakeCut());
  // Past the log end: the log end.
  REQUIRE((*r)->SeekAfter(20, -1).ok());
  CHECK((*r)->TakeCut() == std::optional<int64_t>(15));
}

TEST_CASE(
    "leader epoch: a reader whose last epoch is gone from the log walks back over the "
    "epochs it read (an unclean leader held more of an older epoch)") {
  // Leader L wrote [0..2] and [3..5] in epoch 0; replica A got only the
  // first, led in epoch 1 and wrote [3..3]. L's copy U, outside the ISR, is
  // elected uncleanly in epoch 3 and writes [6..8]; A follows it: it cuts
  // its epoch 1 and takes [3..5] of epoch 0 and [6..8]. Epoch 1 now "ends"
  // at 6 (where epoch 3 starts), past the offset 3 that A's reader read in
  // epoch 1: it must go back to 3, not go on at 4.
  TempDir tmp;
  const std::string unclean = tmp / "u-0", reader_dir = tmp / "a-0";
  {
    auto w = Writer(unclean, 0);
    for (int i = 0; i < 2; ++i) {
      auto b = MakeBatch(3);
      REQUIRE(w->Append(b));
    }
  }
  {
    auto f = Writer(reader_dir, -1);
    auto first = RawBatches(unclean);
    REQUIRE(f->AppendReplicated(Concat(first, 0, 1)));
  }
  {
    auto w = Writer(reader_dir, 1);
    auto b = MakeBatch(1, 5000);
    REQUIRE(w->Append(b));
  }
  auto r = PartitionReader::Open(reader_dir);
  REQUIRE(r);
  std::vector<std::pair<int64_t, int32_t>> read;
  for (int i = 0; i < 2; ++i) {
    auto n = (*r)->Next();
    REQUIRE(n);
    REQUIRE(*n);
    read.emplace_back((*n)->header().base_offset, (*n)->header().partition_leader_epoch);
  }
  CHECK(read == std::vector<std::pair<int64_t, int32_t>>{{0, 0}, {3, 1}});
  {
    auto w = Writer(unclean, 3);
    auto b = MakeBatch(3, 9000);
    REQUIRE(w->Append(b));
  }
  {
    auto f = Writer(reader_dir, -1);
    REQUIRE(f->TruncateTo(3).ok());
    auto all = RawBatches(unclean);
    REQUIRE(all.size() == 3);
    REQUIRE(f->AppendReplicated(Concat(all, 1, 3)));
  }
  auto n = (*r)->Next();
  REQUIRE(n);
  REQUIRE(*n);
  CHECK((*r)->TakeCut() == std::optional<int64_t>(3));
  CHECK((*n)->header().base_offset == 3);
  CHECK((*n)->header().partition_leader_epoch == 0);
  // The rule alone, on that checkpoint: the last epoch's end is 6.
  LeaderEpochCache epochs;
  REQUIRE(epochs.Assign(0, 0).ok());
  REQUIRE(epochs.Assign(3, 6).ok());
  const std::vector<EpochEntry> both = {{0, 0}, {1, 3}};
  CHECK(ReaderResumeOffset(4, 9, both, &epochs) == 3);
  const std::vector<EpochEntry> last_only = {{1, 4}};
  CHECK(ReaderResumeOffset(4, 9, last_only, &epochs) == 4);
  const std::vector<EpochEntry> on_epoch_3 = {{0, 0}, {3, 6}};
  CHECK(ReaderResumeOffset(8, 9, on_epoch_3, &epochs) == 8);
  CHECK(ReaderResumeOffset(8, 7, on_epoch_3, &epochs) == 7);
  CHECK(ReaderResumeOffset(8, 9, both, nullptr) == 8);
}

TEST_CASE(
    "R38 a truncation lowers the high watermark: a crash at any step leaves it within the log") {
  TempDir tmp;
  std::filesystem::create_directories(tmp / "base");
  const std::string base = tmp / "base/t-0";
  AppendInEpochs(base, {{1, 6}, {2, 6}});  // offsets 0..11, then 12..23
  REQUIRE(Writer(base, 2)->SetHighWatermark(24).ok());
  int truncated_seen = 0;
  for (int k = 0;; ++k) {
    std::filesystem::create_directories(tmp / fmt::format("k{}", k));
    const std::string dir = tmp / fmt::format("k{}/t-0", k);
    const bool done = TruncateCrashing(base, dir, 12, k);
    INFO("crash after " << k << " changes");
    // Before any reopen, whatever the crash left: never above the end.
    auto seen = PartitionReader::Open(dir);
    REQUIRE(seen);
    const int64_t hw_now = StoredHighWatermark(dir);
    CHECK((hw_now == 12 || hw_now == 24));
    if (hw_now == 24) CHECK((*seen)->end_offset() == 24);
    auto w = PartitionWriter::Open(dir, SmallSegments(), false, nullptr);
    REQUIRE(w);
    const int64_t end = (*w)->log_end_offset();
    REQUIRE((end == 12 || end == 24));
    if (end == 12) ++truncated_seen;
    CHECK(StoredHighWatermark(dir) == end);
    if (done) break;
    REQUIRE(k < 200);
  }
  CHECK(truncated_seen > 1);
}

TEST_CASE("R38 recovery lowers a high watermark above the log it finds, and reports it") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  AppendInEpochs(dir, {{1, 3}});  // offsets 0..5
  {
    auto fd = OpenDirectory(dir, false);
    REQUIRE(fd);
    REQUIRE(StoreHighWatermark(fd->get(), "t", 0, 40).ok());  // appends a crash lost
  }
  REQUIRE(::unlink((dir + "/state").c_str()) == 0);  // recovery runs at the next open
  RecoveryReport report;
  auto w = PartitionWriter::Open(dir, SmallSegments(), false, &report);
  REQUIRE(w);
  CHECK(StoredHighWatermark(dir) == 6);
  const bool reported = std::any_of(report.repaired.begin(), report.repaired.end(), [](auto& p) {
    return p.rule == "R38" && p.file == "high-watermark" &&
           p.detail.find("high watermark 40 above the log end 6") != std::string::npos;
  });
  CHECK(reported);
}

TEST_CASE(
    "R59 truncation history: each cut is recorded with its time, later lower cuts replace "
    "higher ones, and a bad file is corruption") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  auto none = ReadTruncations(dir->get(), nullptr, tmp.path());
  REQUIRE(none);
  CHECK(none->empty());
  REQUIRE(RecordTruncation(dir->get(), nullptr, tmp.path(), 40, 1000, 3, false).ok());
  REQUIRE(RecordTruncation(dir->get(), nullptr, tmp.path(), 50, 2000, 5, false).ok());
  REQUIRE(
      RecordTruncation(dir->get(), nullptr, tmp.path(), 45, 3000, 6, false).ok());  // replaces 50
  REQUIRE(
      RecordTruncation(dir->get(), nullptr, tmp.path(), 60, 2500, 9, false).ok());  // clock back
  auto h = ReadTruncations(dir->get(), nullptr, tmp.path());
  REQUIRE(h);
  REQUIRE(h->size() == 3);
  CHECK((*h)[0].end == 40);
  CHECK((*h)[0].rewrites == std::optional<uint32_t>(3));
  CHECK((*h)[1].end == 45);
  CHECK((*h)[1].time_ms == 3000);
  CHECK((*h)[1].rewrites == std::optional<uint32_t>(6));
  CHECK((*h)[2].end == 60);
  CHECK((*h)[2].time_ms == 3000);
  CHECK((*h)[2].rewrites == std::optional<uint32_t>(9));
  // The cuts published after a counter value, and those under way: the
  // lowest of them (50 went with 45's entry, which covers it).
  CHECK(LowestCutAfter(*h, 2) == std::optional<int64_t>(40));
  CHECK(LowestCutAfter(*h, 3) == std::optional<int64_t>(45));
  CHECK(LowestCutAfter(*h, 8) == std::optional<int64_t>(60));
  CHECK(LowestCutAfter(*h, 9) == std::nullopt);
  CHECK(LowestCutAfter(*h, 4000000000u) == std::optional<int64_t>(40));  // the counter wraps
  // Where a position committed at a time was cut: the first cut since.
  CHECK(CutBelowSince(*h, 100, 500) == std::optional<int64_t>(40));
  CHECK(CutBelowSince(*h, 100, 1500) == std::optional<int64_t>(45));
  CHECK(CutBelowSince(*h, 45, 1500) ==
        std::nullopt);  // cut at the committed offset: nothing read went
  CHECK(CutBelowSince(*h, 100, 4000) == std::nullopt);  // committed after every cut
  for (int i = 0; i < 100; ++i)
    REQUIRE(
        RecordTruncation(dir->get(), nullptr, tmp.path(), 100 + i, 5000 + i, 10 + i, false).ok());
  h = ReadTruncations(dir->get(), nullptr, tmp.path());
  REQUIRE(h);
  CHECK(h->size() == format::kMaxTruncations);
  CHECK(h->back().end == 199);

  auto text = [](std::string_view t) {
    return std::vector<std::byte>(reinterpret_cast<const std::byte*>(t.data()),
                                  reinterpret_cast<const std::byte*>(t.data()) + t.size());
  };
  WriteFile(tmp / "truncations", text("cut=5 100\ncut=4 200\n"));
  auto bad = ReadTruncations(dir->get(), nullptr, tmp.path());
  REQUIRE(!bad);
  CHECK(bad.error().code() == Code::kCorruption);
  CHECK_THAT(bad.error().message(), Catch::Contains("R59"));
  CHECK_THAT(bad.error().message(), Catch::Contains(tmp / "truncations"));
  WriteFile(tmp / "truncations", text("cut=x 100\n"));
  CHECK(ReadTruncations(dir->get(), nullptr, tmp.path()).error().code() == Code::kCorruption);
  // The rewrites value: below 2^32, not decreasing, and once entries carry
  // it every later one does. Entries written before carry none (older
  // files stay readable) and send no reader back.
  auto bad_at = [&](std::string_view t) -> std::optional<uint64_t> {
    WriteFile(tmp / "truncations", text(t));
    auto r = ReadTruncations(dir->get(), nullptr, tmp.path());
    if (r) return std::nullopt;
    CHECK_THAT(r.error().message(), Catch::Contains("R59"));
    return r.error().position();
  };
  CHECK(bad_at("cut=4 100 4294967296\n") == std::optional<uint64_t>(0));
  CHECK(bad_at("cut=4 100 7 1\n") == std::optional<uint64_t>(0));
  CHECK(bad_at("cut=4 100 -7\n") == std::optional<uint64_t>(0));
  CHECK(bad_at("cut=4 100 7\ncut=5 100 6\n") == std::optional<uint64_t>(12));
  CHECK(bad_at("cut=4 100 7\ncut=5 100\n") == std::optional<uint64_t>(12));
  CHECK(bad_at("cut=4 100\ncut=5 100 7\ncut=6 100 7\n") == std::nullopt);
  h = ReadTruncations(dir->get(), nullptr, tmp.path());
  REQUIRE(h);
  CHECK(!(*h)[0].rewrites);
  CHECK(LowestCutAfter(*h, 0) == std::optional<int64_t>(5));
  CHECK(LowestCutAfter(*h, 7) == std::nullopt);
  // A new entry keeps the old ones as they are, and never names a value
  // below the last entry's.
  REQUIRE(RecordTruncation(dir->get(), nullptr, tmp.path(), 9, 200, 3, false).ok());
  h = ReadTruncations(dir->get(), nullptr, tmp.path());
  REQUIRE(h);
  REQUIRE(h->size() == 4);
  CHECK(!(*h)[0].rewrites);
  CHECK((*h)[3].rewrites == std::optional<uint32_t>(7));
}

// A writer cuts an unreplicated partition's log while a reader is mid-way
// (or closed, to be opened again with what it knew: ReaderTrail), then
// appends at the cut offsets, past where the reader was. The reader has no
// leader epochs to go by: it must go back to the lowest cut below what it
// handed out (the truncation history, segment.md §6.6, §9.4), not to the
// log end it finds when it notices, and hand out every batch the log holds
// from there. MQ_TEST_SEED=<n> repeats one seed (printed when it fails).
TEST_CASE(
    "R59 a reader of an unreplicated log cut and regrown while it reads goes back to the "
    "lowest cut below what it handed out, open or reopened") {
  std::vector<uint64_t> seeds;
  if (const char* s = std::getenv("MQ_TEST_SEED")) {
    seeds.push_back(std::strtoull(s, nullptr, 10));
  } else {
    std::random_device rd;
    for (int i = 0; i < 40; ++i) seeds.push_back(rd());
  }
  for (uint64_t seed : seeds) {
    INFO("seed " << seed << " (MQ_TEST_SEED=" << seed << " repeats it)");
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {  // in [lo, hi]
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    TempDir tmp;
    const std::string dir = tmp / "t-0";
    auto w = PartitionWriter::Open(dir, LogConfig{}, true, nullptr);
    REQUIRE(w);
    int64_t ts = 1000;  // each batch's own timestamp: which batch is at an offset
    auto append = [&](int64_t batches) {
      for (int64_t i = 0; i < batches; ++i) {
        ts += 1000;
        auto b = MakeBatch(static_cast<int>(pick(1, 4)), ts);
        REQUIRE((*w)->Append(b));
      }
    };
    append(pick(3, 8));
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    REQUIRE((*r)->Seek(0).ok());
    int64_t next = 0;
    for (int64_t k = pick(1, 3); k > 0; --k) {
      auto b = (*r)->Next();
      REQUIRE(b);
      REQUIRE(*b);
      next = (*b)->header().last_offset() + 1;
    }
    const bool reopen = pick(0, 1) == 1;
    std::optional<ReaderTrail> trail;
    if (reopen) {
      trail = (*r)->trail();
      r->reset();
    }
    // One to three cuts, each followed by appends; the last regrows the
    // log past `next`.
    std::optional<int64_t> lowest;
    for (int64_t cuts = pick(1, 3); cuts > 0; --cuts) {
      REQUIRE((*w)->TruncateTo(pick(0, (*w)->log_end_offset() - 1)).ok());
      const int64_t left = (*w)->log_end_offset();
      if (left < next) lowest = std::min(left, lowest.value_or(left));
      append(pick(1, 4));
    }
    while ((*w)->log_end_offset() <= next + 2) append(1);
    if (reopen) {
      auto again = PartitionReader::Open(dir);
      REQUIRE(again);
      *r = std::move(*again);
      REQUIRE((*r)->SeekAfter(next, *trail).ok());
    }
    // What the log holds from where the reader must go on.
    const int64_t from = lowest.value_or(next);
    std::vector<std::pair<int64_t, int64_t>> want, got;
    {
      auto check = PartitionReader::Open(dir);
      REQUIRE(check);
      REQUIRE((*check)->Seek(from).ok());
      for (;;) {
        auto b = (*check)->Next();
        REQUIRE(b);
        if (!*b) break;
        want.emplace_back((*b)->header().base_offset, (*b)->header().max_timestamp);
      }
    }
    for (;;) {
      auto b = (*r)->Next();
      REQUIRE(b);
      if (!*b) break;
      got.emplace_back((*b)->header().base_offset, (*b)->header().max_timestamp);
    }
    CHECK((*r)->TakeCut() == lowest);
    CHECK(got == want);
  }
}

namespace {

// The real file system, that runs `hook` once right after the truncation
// history is replaced: a truncation is then stopped between its entry in
// the history and its publication (segment.md §6.6, §9.4), while readers
// position and read.
class HistoryStepFs : public FileSystemWrapper {
 public:
  std::function<void()> hook;
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    Status s = FileSystemWrapper::Rename(dir_fd, from, to);
    if (s.ok() && to == format::kTruncationsName && hook) std::exchange(hook, nullptr)();
    return s;
  }
};

// A reader and what it handed out: each batch as (base offset, max
// timestamp), the timestamp telling which append wrote it. `next` is
// where the next batch must start: after the last one, or where the
// reader said the log was cut below it (TakeCut).
struct Tracked {
  std::unique_ptr<PartitionReader> reader;
  std::vector<std::pair<int64_t, int64_t>> got;
  int64_t next = 0;
  std::optional<ReaderTrail> trail;  // while closed
  void TakeCut() {
    if (auto cut = reader->TakeCut()) {
      CHECK(*cut < next);
      next = *cut;
    }
  }
  // Everything it hands out now, each batch where the one before it ends.
  void Drain() {
    for (;;) {
      auto b = reader->Next();
      REQUIRE(b);
      TakeCut();
      if (!*b) return;
      CHECK((*b)->header().base_offset == next);
      got.emplace_back((*b)->header().base_offset, (*b)->header().max_timestamp);
      next = (*b)->header().last_offset() + 1;
    }
  }
  void Open(const std::string& dir) {
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    reader = std::move(*r);
    if (trail) {
      REQUIRE(reader->SeekAfter(next, *trail).ok());
      trail.reset();
      TakeCut();
    } else {
      REQUIRE(reader->Seek(next).ok());
    }
  }
  void Close() {
    trail = reader->trail();
    reader.reset();
  }
};

// The log's batches from `from` as (base offset, max timestamp).
std::vector<std::pair<int64_t, int64_t>> LogFrom(const std::string& dir, int64_t from) {
  std::vector<std::pair<int64_t, int64_t>> out;
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  REQUIRE((*r)->Seek(from).ok());
  for (;;) {
    auto b = (*r)->Next();
    REQUIRE(b);
    if (!*b) return out;
    out.emplace_back((*b)->header().base_offset, (*b)->header().max_timestamp);
  }
}

}  // namespace

// A truncation writes its history entry, then publishes its rewrites value
// (segment.md §6.6, §9.4). Readers of an unreplicated partition act
// between the two: each entry names the rewrites value that publishes it,
// so a reader tells the cuts made since it positioned, and one under way,
// from the ones it knew of, whatever it read the history while doing.
// One record a batch: offset o of append "a" has timestamp 1000 + o, of
// "b" 2000 + o, of "c" 3000 + o.
TEST_CASE(
    "R59 readers that position or read again between a truncation's history entry and its "
    "publication hand out each record of the log once, in order, and skip none") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  HistoryStepFs fs;
  LogConfig config;
  config.fs = &fs;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  auto append = [&](int64_t gen, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t o = (*w)->log_end_offset();
      auto b = MakeBatch(1, gen * 1000 + o);
      REQUIRE((*w)->Append(b));
    }
  };
  auto records = [](int64_t gen, int64_t from, int64_t to) {  // [from, to)
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t o = from; o < to; ++o) out.emplace_back(o, gen * 1000 + o);
    return out;
  };
  auto cat = [](std::vector<std::pair<int64_t, int64_t>> a,
                const std::vector<std::pair<int64_t, int64_t>>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  append(1, 20);  // a0..a19

  SECTION(
      "a reader that positions while a truncation is under way does not pass over the "
      "records appended at its offsets") {
    Tracked r;
    fs.hook = [&] {
      r.Open(dir);  // the entry for the cut at 6 is written, not published
      r.Drain();
    };
    REQUIRE((*w)->TruncateTo(6).ok());
    REQUIRE(fs.hook == nullptr);
    append(2, 7);  // b6..b12
    r.Drain();
    CHECK(r.got == cat(records(1, 0, 6), records(2, 6, 13)));
    CHECK(r.got == LogFrom(dir, 0));
  }

  SECTION(
      "a reader dealing with one truncation while the next is under way, whose entry replaced "
      "the first's, does not hand out again records the log still holds") {
    Tracked r;
    r.Open(dir);
    r.Drain();  // a0..a19
    REQUIRE((*w)->TruncateTo(15).ok());
    append(2, 3);                  // b15..b17
    fs.hook = [&] { r.Drain(); };  // the cut at 10 written (its entry replaces 15's), not published
    REQUIRE((*w)->TruncateTo(10).ok());
    append(3, 4);  // c10..c13
    r.Drain();
    CHECK(r.got == cat(records(1, 0, 20), records(3, 10, 14)));
  }

  SECTION(
      "a reader dealing with one truncation while a higher one is under way hands out the "
      "records appended at both") {
    Tracked r;
    r.Open(dir);
    r.Drain();  // a0..a19
    REQUIRE((*w)->TruncateTo(10).ok());
    append(2, 6);                  // b10..b15
    fs.hook = [&] { r.Drain(); };  // the cut at 13 written, not published
    REQUIRE((*w)->TruncateTo(13).ok());
    append(3, 3);  // c13..c15
    r.Drain();
    CHECK(r.got == cat(cat(records(1, 0, 20), records(2, 10, 13)), records(3, 13, 16)));
  }

  SECTION(
      "a reader reopened while a truncation is under way goes back to the cut made while it "
      "was closed and to the one under way") {
    Tracked r;
    r.Open(dir);
    r.Drain();  // a0..a19
    r.Close();
    REQUIRE((*w)->TruncateTo(15).ok());
    append(2, 3);  // b15..b17
    fs.hook = [&] {
      r.Open(dir);
      r.Drain();
    };
    REQUIRE((*w)->TruncateTo(10).ok());
    append(3, 4);  // c10..c13
    r.Drain();
    CHECK(r.got == cat(records(1, 0, 20), records(3, 10, 14)));
  }
}

// A truncation to a segment's base offset removes that segment, and the
// appends after it create a new file of the same name (the segment before
// is full). A reader that had opened the removed file (it read into it, or
// stopped there at the cut of the truncation under way) goes back into the
// segment when it finds its offset again: it reads the new file, never
// the removed one it held (segment.md §9.4). One segment a batch; offset
// o of append "a" has timestamp 1000 + o, of "b" 2000 + o (a batch's max
// timestamp is its last record's).
TEST_CASE(
    "R59 a reader that goes back into a segment a truncation removed and appends created "
    "again reads the new file, not the removed one it held") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  HistoryStepFs fs;
  LogConfig config;
  config.fs = &fs;
  config.segment_bytes = 1;  // every batch rolls: one segment a batch
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  auto append = [&](int64_t gen, int records) {
    const int64_t o = (*w)->log_end_offset();
    auto b = MakeBatch(records, gen * 1000 + o);
    REQUIRE((*w)->Append(b));
  };
  for (int i = 0; i < 5; ++i) append(1, 1);  // a0..a4, segment 4 holds a4
  const std::vector<std::pair<int64_t, int64_t>> a = {
      {0, 1000}, {1, 1001}, {2, 1002}, {3, 1003}, {4, 1004}};
  // b4..b5 in one batch, longer than a4: the new segment 4 is longer
  // than the removed one.
  const std::vector<std::pair<int64_t, int64_t>> b = {{4, 2005}};

  SECTION("a reader stopped at the cut of a truncation under way, in the segment it removes") {
    Tracked r;
    fs.hook = [&] {  // the entry for the cut at 4 is written, not published
      r.Open(dir);
      r.Drain();  // a0..a3, then stops before a4, segment 4 open
    };
    REQUIRE((*w)->TruncateTo(4).ok());
    REQUIRE(fs.hook == nullptr);
    CHECK(r.got == std::vector<std::pair<int64_t, int64_t>>(a.begin(), a.begin() + 4));
    append(2, 2);  // b4..b5: a new segment 4
    r.Drain();
    CHECK(r.got == LogFrom(dir, 0));
    CHECK(r.got.back() == b.back());
    CHECK(r.next == 6);
  }

  SECTION("a reader that handed out the removed segment's records") {
    Tracked r;
    r.Open(dir);
    r.Drain();  // a0..a4, segment 4 open
    CHECK(r.got == a);
    REQUIRE((*w)->TruncateTo(4).ok());
    append(2, 2);  // b4..b5: a new segment 4
    r.Drain();     // back to the cut at 4 (TakeCut), then b4..b5
    auto want = a;
    want.push_back(b.back());
    CHECK(r.got == want);
    CHECK(r.next == 6);
  }
}

// A reader bound by the high watermark stops at a batch past it and keeps
// the batch's bytes (read ahead, or in the file it holds open). Two cuts
// later the log holds other records at that offset, committed: the counter
// moved, so the reader finds the offset again in the log as it is now and
// hands them out, rather than waiting on bytes the truncations removed.
TEST_CASE(
    "R59 a reader positioned before two truncations, stopped at a batch past the high "
    "watermark, hands out the records appended at its offset since") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 1;  // every batch rolls: one segment a batch
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  auto append = [&](int64_t gen, int records) {
    const int64_t o = (*w)->log_end_offset();
    auto b = MakeBatch(records, gen * 1000 + o);
    REQUIRE((*w)->Append(b));
  };
  for (int i = 0; i < 11; ++i) append(1, 1);  // a0..a10
  append(1, 2);                               // a11..a12, segment 11
  REQUIRE((*w)->SetHighWatermark(11).ok());
  ReadOptions options;
  options.bound_by_high_watermark = true;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  REQUIRE((*r)->Seek(0).ok());
  std::vector<std::pair<int64_t, int64_t>> got;
  auto drain = [&] {
    for (;;) {
      auto b = (*r)->Next();
      REQUIRE(b);
      CHECK(!(*r)->TakeCut());  // nothing it handed out was cut
      if (!*b) return;
      got.emplace_back((*b)->header().base_offset, (*b)->header().max_timestamp);
    }
  };
  drain();  // a0..a10, then stops at a11..a12, past the high watermark
  REQUIRE(got.size() == 11);
  CHECK(got.back() == std::pair<int64_t, int64_t>(10, 1010));
  const uint32_t positioned = (*r)->positioned_rewrites();

  REQUIRE((*w)->TruncateTo(11).ok());  // removes segment 11
  append(2, 1);                        // b11
  append(2, 2);                        // b12..b13
  REQUIRE((*w)->TruncateTo(12).ok());  // removes b12..b13
  REQUIRE((*w)->SetHighWatermark(12).ok());
  auto fd = OpenDirectory(dir, false);
  REQUIRE(fd);
  auto history = ReadTruncations(fd->get(), nullptr, dir);
  REQUIRE(history);
  REQUIRE(history->size() == 2);
  CHECK(LowestCutAfter(*history, positioned) == std::optional<int64_t>(11));
  CHECK((*r)->end_offset() == 12);

  drain();
  REQUIRE(got.size() == 12);
  CHECK(got.back() == std::pair<int64_t, int64_t>(11, 2011));
  CHECK((*r)->positioned_rewrites() != positioned);
}

// Appends, truncations (each stopped between its history entry and its
// publication while readers act), and readers that open, read, close and
// reopen (SeekAfter with their trail) at random steps. Each reader hands
// out exactly the records of the log, in order, once: every batch starts
// where the one before it ended or where the reader said the log was cut
// (TakeCut), no batch twice, and at the end every batch of the log from
// the start. MQ_TEST_SEED=<n> repeats one seed (printed when it fails).
TEST_CASE(
    "R59 property: readers of an unreplicated log cut and regrown at random steps hand out "
    "every record of the log once, in order") {
  std::vector<uint64_t> seeds;
  if (const char* s = std::getenv("MQ_TEST_SEED")) {
    seeds.push_back(std::strtoull(s, nullptr, 10));
  } else {
    std::random_device rd;
    for (int i = 0; i < 30; ++i) seeds.push_back(rd());
  }
  for (uint64_t seed : seeds) {
    INFO("seed " << seed << " (MQ_TEST_SEED=" << seed << " repeats it)");
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {  // in [lo, hi]
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    TempDir tmp;
    const std::string dir = tmp / "t-0";
    HistoryStepFs fs;
    LogConfig config;
    config.fs = &fs;
    config.segment_bytes = 700;  // cuts across segments too
    config.index_interval_bytes = 100;
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w);
    int64_t ts = 0;  // each batch's own timestamp: which append wrote it
    auto append = [&](int64_t batches) {
      for (int64_t i = 0; i < batches; ++i) {
        ts += 1000;
        auto b = MakeBatch(static_cast<int>(pick(1, 3)), ts);
        REQUIRE((*w)->Append(b));
      }
    };
    std::vector<Tracked> readers(3);
    // A reader's turn: opens (from the start), reads, closes or reopens.
    auto act = [&](int times) {
      for (int k = 0; k < times; ++k) {
        Tracked& r = readers[static_cast<size_t>(pick(0, 2))];
        if (!r.reader) {
          r.Open(dir);
        } else if (pick(0, 3) == 0) {
          r.Close();
          continue;
        }
        if (pick(0, 3) != 0) r.Drain();
      }
    };
    append(pick(2, 8));
    for (int64_t step = pick(10, 30); step > 0; --step) {
      switch (pick(0, 3)) {
        case 0:
          append(pick(1, 4));
          break;
        case 1:
        case 2: {
          const int64_t end = (*w)->log_end_offset();
          if (end == 0) break;
          const int in_window = static_cast<int>(pick(0, 3));
          fs.hook = [&] { act(in_window); };
          REQUIRE((*w)->TruncateTo(pick(0, end - 1)).ok());
          fs.hook = nullptr;
          break;
        }
        default:
          act(static_cast<int>(pick(1, 3)));
      }
    }
    const auto log = LogFrom(dir, 0);
    for (Tracked& r : readers) {
      if (!r.reader) r.Open(dir);
      r.Drain();
      std::vector<int64_t> stamps;
      for (const auto& g : r.got) stamps.push_back(g.second);
      std::sort(stamps.begin(), stamps.end());
      CHECK(std::adjacent_find(stamps.begin(), stamps.end()) == stamps.end());  // none twice
      for (const auto& l : log)  // every batch of the log
        CHECK(std::binary_search(stamps.begin(), stamps.end(), l.second));
      CHECK(r.next == (*w)->log_end_offset());
    }
  }
}

// The rewrites value an entry names is one the state file's counter
// reaches: a truncation that fails after its entry publishes it all the
// same (readers go back to its cut, at least once, rather than wait at
// it), and a state file rebuilt (R24) starts past the last entry's.
TEST_CASE(
    "R59 every rewrites value the history names is published: a truncation failing after "
    "its entry, and a state file rebuilt") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  FaultFs fs;
  LogConfig config;
  config.fs = &fs;
  {
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w);
    for (int i = 0; i < 10; ++i) {
      auto b = MakeBatch(1, 1000 + i);
      REQUIRE((*w)->Append(b));
    }
    auto r = PartitionReader::Open(dir);
    REQUIRE(r);
    const auto before = (*r)->rewrites();
    REQUIRE(before);
    fs.FailRename(2);  // the history's is the first, the intent's the second
    CHECK(!(*w)->TruncateTo(6).ok());
    fs.Clear();
    auto dfd = OpenDirectory(dir, false);
    REQUIRE(dfd);
    auto h = ReadTruncations(dfd->get(), nullptr, dir);
    REQUIRE(h);
    REQUIRE(h->size() == 1);
    CHECK(h->back().rewrites == std::optional<uint32_t>(*before + 1));
    CHECK((*r)->rewrites() == std::optional<uint32_t>(*before + 1));
    // Nothing was cut: a reader hands out the whole log, held nowhere.
    auto all = LogFrom(dir, 0);
    CHECK(all.size() == 10);
    REQUIRE((*w)->TruncateTo(4).ok());
  }
  auto dfd = OpenDirectory(dir, false);
  REQUIRE(dfd);
  auto h = ReadTruncations(dfd->get(), nullptr, dir);
  REQUIRE(h);
  REQUIRE(h->back().rewrites);
  const uint32_t last = *h->back().rewrites;
  REQUIRE(::unlink((dir + "/state").c_str()) == 0);
  auto w = PartitionWriter::Open(dir, LogConfig{}, false, nullptr);
  REQUIRE(w);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  auto now = (*r)->rewrites();
  REQUIRE(now);
  CHECK(RewritesAfter(*now, last));
}

static std::vector<std::byte> TextBytes(const std::string& s) {
  return std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                reinterpret_cast<const std::byte*>(s.data()) + s.size());
}

TEST_CASE("R40 truncation intent: a zeroed tail after a power loss goes with the completed cut") {
  // A power loss can keep the last segment's size without its last bytes
  // (ext4 keeps the size a truncation set while the data before it has not
  // reached the disk): zeros where batches were, and an intent on disk.
  // Completing the cut must not stop at those zeros: they are a garbage
  // tail (R21), whether the cut is below them or they start where it is.
  TempDir tmp;
  const std::string base = tmp / "base-0";
  BuildLog(base, 24);  // offsets 0..47
  const auto old_log = ReadAll(base);
  auto segments = ListDir(base);
  std::string last;
  for (const std::string& n : segments)
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".log") == 0) last = std::max(last, n);
  REQUIRE(!last.empty());
  for (int64_t target : {int64_t{44}, int64_t{48}, int64_t{60}}) {
    INFO("truncate.to=" << target);
    const std::string dir = tmp / fmt::format("t{}-0", target);
    CopyDir(base, dir);
    AppendToFile(dir + "/" + last, std::vector<std::byte>(150, std::byte{0}));
    WriteFile(dir + "/" + kIntent, TextBytes(fmt::format("truncate.to={}\n", target)));
    ScopedBootId boot(kAfterReboot);
    RecoveryReport report;
    auto w = PartitionWriter::Open(dir, SmallSegments(), false, &report);
    INFO((w ? std::string() : w.error().message()));
    REQUIRE(w);
    const int64_t end = std::min<int64_t>(target, 48);
    CHECK((*w)->log_end_offset() == end);
    CHECK(ReadAll(dir) == Prefix(old_log, end));
    CHECK(!Exists(dir + "/" + kIntent));
  }
}

TEST_CASE(
    "R40 truncation intent: damage with a valid batch after it is not cut by the completion") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  BuildLog(dir, 24);
  std::string last;
  for (const std::string& n : ListDir(dir))
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".log") == 0) last = std::max(last, n);
  // Zeros over the last segment's first batch header: valid batches follow.
  auto bytes = ReadFile(dir + "/" + last);
  REQUIRE(bytes.size() > 100);
  std::fill(bytes.begin(), bytes.begin() + 12, std::byte{0});
  WriteFile(dir + "/" + last, bytes);
  WriteFile(dir + "/" + kIntent, TextBytes("truncate.to=60\n"));
  ScopedBootId boot(kAfterReboot);
  auto w = PartitionWriter::Open(dir, SmallSegments(), false, nullptr);
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kCorruption);
  CHECK(FileSize(dir + "/" + last) == bytes.size());
}
