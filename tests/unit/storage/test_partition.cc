// Partition writer and reader: appends, reads, seeks, rolls, truncation,
// retention (format-spec/segment.md §6-§9).
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/committed_end.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "storage/producer_state.h"
#include "storage/state_file.h"
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

namespace {

std::vector<std::string> Logs(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& n : ListDir(dir))
    if (n.size() == 24 && n.ends_with(".log")) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("partition: roll by size starts a new segment at the log end") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 1000;
  auto w = OpenWriter(dir, config);
  auto one = MakeBatch(3, 1000, 50);
  uint64_t per_segment = 1000 / one.size();
  for (int i = 0; i < 10; ++i) AppendOne(*w, 3, 1000 + i, 50);
  auto logs = Logs(dir);
  REQUIRE(logs.size() == (10 + per_segment - 1) / per_segment);
  for (size_t i = 0; i < logs.size(); ++i) {
    CHECK(logs[i] == SegmentFileName(static_cast<int64_t>(i * per_segment * 3), ".log"));
    CHECK(FileSize(dir + "/" + logs[i]) <= 1000);
  }
  auto all = ReadAll(dir);
  REQUIRE(all.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(all[static_cast<size_t>(i)].first == i * 3);
  // A rolled segment's time index ends with its largest timestamp.
  auto t = ReadTimeIndexFile(dir + "/" + SegmentFileName(0, ".timeindex"));
  REQUIRE(t);
  REQUIRE(!t->empty());
  CHECK(t->back().timestamp == 1000 + static_cast<int64_t>(per_segment) - 1 + 2);
  CHECK(t->back().offset == static_cast<int64_t>(per_segment) * 3 - 1);
}

TEST_CASE("partition: roll by age compares the first batch's max timestamp") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_ms = 1000;
  auto w = OpenWriter(dir, config);
  AppendOne(*w, 1, 10000);
  AppendOne(*w, 1, 10900);
  CHECK(Logs(dir).size() == 1);
  AppendOne(*w, 1, 11001);  // 1001 ms after the first batch
  auto logs = Logs(dir);
  REQUIRE(logs.size() == 2);
  CHECK(logs[1] == SegmentFileName(2, ".log"));
}

TEST_CASE("partition: TruncateTo removes every batch at or above the offset") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 600;
  config.index_interval_bytes = 100;
  auto w = OpenWriter(dir, config);
  for (int i = 0; i < 20; ++i) AppendOne(*w, 2, 1000 + i, 30);  // offsets 0..39
  REQUIRE(Logs(dir).size() > 2);
  REQUIRE(w->TruncateTo(13).ok());  // batch 12-13 straddles: it goes whole
  CHECK(w->log_end_offset() == 12);
  auto all = ReadAll(dir);
  REQUIRE(all.size() == 6);
  CHECK(all.back().second == 11);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  CHECK(problems.empty());
  // Appends continue from the new end, and a reopen agrees.
  CHECK(AppendOne(*w, 1).base_offset == 12);
  REQUIRE(w->Close().ok());
  RecoveryReport report;
  auto again = OpenWriter(dir, config, &report);
  CHECK(again->log_end_offset() == 13);
  CHECK(report.repaired.empty());
}

TEST_CASE("partition: DeleteSegmentsBefore removes whole old segments, never the active one") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 500;
  auto w = OpenWriter(dir, config);
  for (int i = 0; i < 20; ++i) AppendOne(*w, 2, 1000 + i, 30);
  auto logs = Logs(dir);
  REQUIRE(logs.size() >= 3);
  int64_t second = *SegmentBaseOffset(logs[1]);
  REQUIRE(w->DeleteSegmentsBefore(second + 1).ok());
  CHECK(w->log_start_offset() == second);
  CHECK(Logs(dir).size() == logs.size() - 1);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  CHECK((*r)->log_start_offset() == second);
  REQUIRE((*r)->Seek(0).ok());  // below the start: positions at the start
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == second);
  REQUIRE(w->DeleteSegmentsBefore(INT64_MAX).ok());
  CHECK(Logs(dir).size() == 1);  // the active segment stays
  CHECK(w->log_start_offset() == *SegmentBaseOffset(logs.back()));
}

TEST_CASE("partition: Seek by offset and by timestamp across segments") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 2000;
  config.index_interval_bytes = 150;
  auto w = OpenWriter(dir, config);
  for (int i = 0; i < 100; ++i) AppendOne(*w, 3, 100000 + i * 100, 20);  // offsets 0..299
  REQUIRE(Logs(dir).size() > 3);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  for (int64_t target : {0, 1, 2, 3, 150, 151, 152, 298, 299}) {
    REQUIRE((*r)->Seek(target).ok());
    auto b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    CHECK((*b)->header().base_offset == target / 3 * 3);
  }
  REQUIRE((*r)->Seek(300).ok());
  auto end = (*r)->Next();
  REQUIRE(end);
  CHECK(!*end);
  // Batch i has max timestamp 100000 + i*100 + 2.
  for (int i : {0, 1, 37, 99}) {
    REQUIRE((*r)->SeekTimestamp(100000 + i * 100).ok());
    auto b = (*r)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    CHECK((*b)->header().base_offset == i * 3);
    REQUIRE((*r)->SeekTimestamp(100000 + i * 100 + 3).ok());
    b = (*r)->Next();
    REQUIRE(b);
    if (i == 99) {
      CHECK(!*b);
    } else {
      REQUIRE(*b);
      CHECK((*b)->header().base_offset == (i + 1) * 3);
    }
  }
}

TEST_CASE("partition: a reader never sees bytes beyond the committed end") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto w = OpenWriter(dir);
  AppendOne(*w, 2);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  // Bytes of an append that was never published (a writer died mid-way).
  auto stray = MakeBatch(5);
  AppendToFile(dir + "/" + SegmentFileName(0, ".log"), stray);
  {
    auto dfd = OpenDirectory(dir, false);
    REQUIRE(dfd);
    bool recreated = false;
    auto st = StateFile::OpenForWrite(dfd->get(), nullptr, {}, &recreated);
    REQUIRE(st);
    st->SetAppending(true);  // what a writer that died mid-append leaves
  }
  CHECK((*r)->end_offset() == 2);
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  b = (*r)->Next();
  REQUIRE(b);
  CHECK(!*b);
  // The next append cuts them and takes their place.
  CHECK(AppendOne(*w, 1).base_offset == 2);
  CHECK(ReadAll(dir) == std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {2, 2}});
  // The same reader continues at the new end.
  b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 2);
}

TEST_CASE("partition: WaitForAppend wakes when another writer publishes") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto w = OpenWriter(dir);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  CHECK(!(*r)->WaitForAppend(0, 20));  // nothing yet: times out
  pid_t child = fork();
  if (child == 0) {
    auto cw = PartitionWriter::Open(dir, {}, false, nullptr);
    auto b = MakeBatch(1);
    bool ok = cw && (*cw)->Append(b);
    _exit(ok ? 0 : 1);
  }
  CHECK((*r)->WaitForAppend(0, 10000));
  CHECK((*r)->end_offset() == 1);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("partition: an idempotent producer's retried batch is not appended twice") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto w = OpenWriter(dir);
  BatchOptions o;
  o.producer_id = 7;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  auto first = MakeBatch(3, 1000, 8, o);
  auto r1 = w->Append(first);
  REQUIRE(r1);
  auto retry = MakeBatch(3, 1000, 8, o);
  auto r2 = w->Append(retry);
  REQUIRE(r2);
  CHECK(r2->duplicate);
  CHECK(r2->base_offset == r1->base_offset);
  CHECK(w->log_end_offset() == 3);
  o.base_sequence = 5;  // a gap
  auto gap = MakeBatch(1, 1000, 8, o);
  auto r3 = w->Append(gap);
  REQUIRE(!r3);
  CHECK(r3.error().code() == Code::kOutOfOrder);
  REQUIRE(w->Close().ok());
  auto last = LastProducerSequence(dir, 7);
  REQUIRE(last);
  CHECK(*last == std::optional<int32_t>(2));
  // The dedupe state survives a reopen.
  auto w2 = OpenWriter(dir);
  auto r4 = w2->Append(retry);
  REQUIRE(r4);
  CHECK(r4->duplicate);
}

TEST_CASE("partition: a producer that appended nothing has no last sequence") {
  TempDir tmp;
  // A partition never written: no directory yet, then a directory without
  // segments.
  std::string dir = tmp / "t-0";
  auto missing = LastProducerSequence(dir, 7);
  INFO((missing ? "" : missing.error().message()));
  REQUIRE(missing);
  CHECK(!missing->has_value());
  REQUIRE(OpenDirectory(dir, true));
  auto empty = LastProducerSequence(dir, 7);
  INFO((empty ? "" : empty.error().message()));
  REQUIRE(empty);
  CHECK(!empty->has_value());
  // Written, but by another producer.
  auto w = OpenWriter(dir);
  BatchOptions o;
  o.producer_id = 8;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  auto batch = MakeBatch(2, 1000, 8, o);
  REQUIRE(w->Append(batch));
  REQUIRE(w->Close().ok());
  auto other = LastProducerSequence(dir, 7);
  REQUIRE(other);
  CHECK(!other->has_value());
  auto eight = LastProducerSequence(dir, 8);
  REQUIRE(eight);
  CHECK(*eight == std::optional<int32_t>(1));
}

TEST_CASE("partition: a partition directory written by liblog verifies clean") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 3000;
  config.index_interval_bytes = 300;
  auto w = OpenWriter(dir, config);
  for (int i = 0; i < 50; ++i) AppendOne(*w, 1 + i % 4, 1000 + i, 40);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  for (auto& p : problems) INFO(p.file << " " << p.position << " " << p.rule << " " << p.detail);
  CHECK(problems.empty());
}

TEST_CASE("partition: a reader at the end follows a truncation and the appends after it") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto w = OpenWriter(dir);
  for (int i = 0; i < 5; ++i) AppendOne(*w, 2, 1000 + i, 30);  // offsets 0..9
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  int n = 0;
  for (;;) {
    auto b = (*r)->Next();
    REQUIRE(b);
    if (!*b) break;
    ++n;
  }
  CHECK(n == 5);
  REQUIRE(w->TruncateTo(4).ok());
  AppendOne(*w, 7, 2000, 5);  // different sizes: old byte positions are stale
  auto b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().base_offset == 4);
  CHECK((*b)->header().last_offset() == 10);
}

TEST_CASE("partition: a reader of a partition nobody wrote yet sees it empty, then follows it") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  REQUIRE(OpenDirectory(dir, true));
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  CHECK((*r)->end_offset() == 0);
  REQUIRE((*r)->Seek(5).ok());
  REQUIRE((*r)->SeekTimestamp(5).ok());
  auto b = (*r)->Next();
  REQUIRE(b);
  CHECK(!*b);
  auto w = OpenWriter(dir);
  AppendOne(*w, 3);
  CHECK((*r)->WaitForAppend(0, 5000));
  b = (*r)->Next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->header().last_offset() == 2);
}

namespace {

size_t SnapshotCount(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().extension() == ".snapshot";
  return n;
}

// Appends `count` batches of `records` records with values of `value_bytes`
// for producer 7, continuing at *sequence; returns the last one's bytes.
std::vector<std::byte> AppendProducer(PartitionWriter& w, int32_t* sequence, int count, int records,
                                      size_t value_bytes) {
  std::vector<std::byte> last;
  for (int i = 0; i < count; ++i) {
    BatchOptions o;
    o.producer_id = 7;
    o.producer_epoch = 0;
    o.base_sequence = *sequence;
    last = MakeBatch(records, 1000, value_bytes, o);
    auto copy = last;
    auto r = w.Append(copy);
    INFO((r ? "" : r.error().message()));
    REQUIRE(r);
    REQUIRE(!r->duplicate);
    *sequence += records;
  }
  return last;
}

// Appending `batch` again is found a duplicate (P2).
void CheckDuplicate(PartitionWriter& w, std::vector<std::byte> batch) {
  auto r = w.Append(batch);
  REQUIRE(r);
  CHECK(r->duplicate);
}

// Producer 7's last sequence in the partition at `dir` is `last`.
void CheckLastSequence(const std::string& dir, int32_t last) {
  auto got = LastProducerSequence(dir, 7);
  REQUIRE(got);
  CHECK(*got == std::optional<int32_t>(last));
}

}  // namespace

TEST_CASE("P7 snapshot: a close after less than 256 KiB since the newest snapshot writes none") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  int32_t sequence = 0;
  auto w = OpenWriter(dir);
  auto small = AppendProducer(*w, &sequence, 3, 3, 8);
  REQUIRE(w->Close().ok());
  CHECK(SnapshotCount(dir) == 0);
  // The state is replayed from the log: the retry is still a duplicate.
  auto w2 = OpenWriter(dir);
  CheckDuplicate(*w2, small);
  // Past the threshold the close writes one.
  AppendProducer(*w2, &sequence, 40, 8, 1024);
  REQUIRE(w2->Close().ok());
  CHECK(SnapshotCount(dir) == 1);
  CheckLastSequence(dir, sequence - 1);
}

// A writer that appends no producer batch never builds the table (the open
// defers it); at close it builds it only when a snapshot may be due.
TEST_CASE("P7 snapshot: a writer that never needed the table writes one at close past 256 KiB") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  int32_t sequence = 0;
  std::vector<std::byte> small;
  {
    auto w = OpenWriter(dir);
    small = AppendProducer(*w, &sequence, 3, 3, 8);
    REQUIRE(w->Close().ok());
  }
  REQUIRE(SnapshotCount(dir) == 0);
  {
    auto w = OpenWriter(dir);
    for (int i = 0; i < 10; ++i) AppendOne(*w, 4, 1000, 64);
    REQUIRE(w->Close().ok());
  }
  CHECK(SnapshotCount(dir) == 0);  // a short replay: none
  {
    auto w = OpenWriter(dir);
    for (int i = 0; i < 40; ++i) AppendOne(*w, 8, 1000, 1024);
    REQUIRE(w->Close().ok());
  }
  CHECK(SnapshotCount(dir) == 1);
  // It holds producer 7: a retry of its last batch is a duplicate.
  auto w = OpenWriter(dir);
  CheckDuplicate(*w, small);
  CheckLastSequence(dir, sequence - 1);
}

namespace {

// Counts flock calls (Lock) through the seam.
class LockCountingFs : public FileSystemWrapper {
 public:
  Status Lock(int fd, LockMode mode, LockWait wait) override {
    ++locks;
    return FileSystemWrapper::Lock(fd, mode, wait);
  }
  int locks = 0;
};

// A partition directory whose writers' flock calls are counted; Close
// without fsync (else its Flush takes the lock).
struct LockCounted {
  LockCounted() {
    config.fs = &fs;
    config.sync_on_close = false;
  }
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LockCountingFs fs;
  LogConfig config;
};

}  // namespace

// Close decides on its own view of the log whether a snapshot may be due;
// when none may be, it takes no lock at all (with many partitions a close
// is one of a few operations per partition and run).
TEST_CASE("P7 snapshot: a close with no snapshot due takes no lock, one past 256 KiB does") {
  LockCounted c;
  int32_t sequence = 0;
  {
    auto w = OpenWriter(c.dir, c.config);
    AppendProducer(*w, &sequence, 3, 3, 8);
    const int before = c.fs.locks;
    REQUIRE(w->Close().ok());
    CHECK(c.fs.locks == before);
  }
  CHECK(SnapshotCount(c.dir) == 0);
  {
    auto w = OpenWriter(c.dir, c.config);
    AppendProducer(*w, &sequence, 40, 8, 1024);
    const int before = c.fs.locks;
    REQUIRE(w->Close().ok());
    CHECK(c.fs.locks == before + 1);
  }
  CHECK(SnapshotCount(c.dir) == 1);
  CheckLastSequence(c.dir, sequence - 1);
}

// An active segment past 256 KiB that runs append to a little at a time
// (many partitions): the offset index shows that the newest snapshot is
// close to the end, so a writer that never needed the table neither takes
// the lock nor reads the log back at close, until the batches after the
// snapshot reach 256 KiB.
TEST_CASE(
    "P7 snapshot: a close with 256 KiB in the active segment but not after the newest snapshot "
    "takes no lock") {
  LockCounted c;
  int32_t sequence = 0;
  std::vector<std::byte> last;
  {
    auto w = OpenWriter(c.dir, c.config);
    last = AppendProducer(*w, &sequence, 40, 8, 1024);  // > 256 KiB: a snapshot at close
    REQUIRE(w->Close().ok());
  }
  REQUIRE(SnapshotCount(c.dir) == 1);
  // Runs of 16 KiB without a producer id: 12 of them stay under 256 KiB
  // after the snapshot.
  for (int run = 0; run < 12; ++run) {
    auto w = OpenWriter(c.dir, c.config);
    for (int i = 0; i < 4; ++i) AppendOne(*w, 4, 1000, 1024);
    const int before = c.fs.locks;
    REQUIRE(w->Close().ok());
    INFO("run " << run);
    CHECK(c.fs.locks == before);
    CHECK(SnapshotCount(c.dir) == 1);
  }
  // Past 256 KiB after it, the close builds the table and writes one.
  {
    auto w = OpenWriter(c.dir, c.config);
    for (int i = 0; i < 16; ++i) AppendOne(*w, 4, 1000, 1024);
    const int before = c.fs.locks;
    REQUIRE(w->Close().ok());
    CHECK(c.fs.locks == before + 1);
  }
  CHECK(SnapshotCount(c.dir) == 2);
  auto w = OpenWriter(c.dir);
  CheckDuplicate(*w, last);
  CheckLastSequence(c.dir, sequence - 1);
}

namespace {

// Bytes of the active (only) segment an open would replay to rebuild the
// producer table: from the first batch at or after the newest snapshot's
// offset (the segment start when there is none) to the log end.
uint64_t ReplayBytes(const std::string& dir) {
  int64_t newest = -1;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".snapshot")
      newest = std::max<int64_t>(newest, std::stoll(e.path().stem().string()));
  }
  const std::vector<std::byte> log = ReadFile(dir + "/00000000000000000000.log");
  uint64_t pos = 0;
  while (pos + 12 <= log.size()) {
    int64_t base = 0;
    uint32_t length = 0;
    for (int i = 0; i < 8; ++i) base = (base << 8) | std::to_integer<int>(log[pos + i]);
    for (int i = 8; i < 12; ++i) length = (length << 8) | std::to_integer<uint32_t>(log[pos + i]);
    if (base >= newest) break;
    pos += 12 + length;
  }
  return log.size() - pos;
}

}  // namespace

// Random runs (a few batches each, of random sizes, some from producer 7,
// fsync at close or not, indexes sparse or dense): after every close the replay an open may face
// stays under 256 KiB, whichever way the close decided (the index's tail,
// the table built, a snapshot written or not), and the table rebuilt from
// the snapshot and the log answers as the whole history does.
TEST_CASE("P7 snapshot: after any close the replay from the newest snapshot is under 256 KiB") {
  uint64_t seed = std::random_device{}();
  if (const char* env = std::getenv("MQ_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::printf("P7 replay bound: seed %llu (MQ_TEST_SEED to repeat)\n",
              static_cast<unsigned long long>(seed));
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  TempDir tmp;
  std::string dir = tmp / "t-0";
  int32_t sequence = 0;
  std::vector<std::byte> last;
  int snapshots_seen = 0;
  // Sparse or dense offset indexes (every batch indexed at 1).
  const uint32_t interval = std::array<uint32_t, 3>{1, 512, 4096}[rng() % 3];
  INFO("index.interval.bytes " << interval);
  for (int run = 0; run < 80; ++run) {
    INFO("run " << run);
    LogConfig config;
    config.index_interval_bytes = interval;
    config.sync_on_close = rng() % 2 == 0;
    auto w = OpenWriter(dir, config);
    const int batches = 1 + static_cast<int>(rng() % 6);
    for (int b = 0; b < batches; ++b) {
      const int records = 1 + static_cast<int>(rng() % 8);
      const size_t value_bytes = 8 + rng() % 2048;
      if (rng() % 4 == 0) {
        last = AppendProducer(*w, &sequence, 1, records, value_bytes);
      } else {
        AppendOne(*w, records, 1000, value_bytes);
      }
    }
    REQUIRE(w->Close().ok());
    CHECK(ReplayBytes(dir) < kSnapshotReplayBytes);
    snapshots_seen = std::max(snapshots_seen, static_cast<int>(SnapshotCount(dir)));
  }
  CHECK(snapshots_seen > 0);  // the runs passed 256 KiB: the bound was tested
  if (!last.empty()) {
    auto w = OpenWriter(dir);
    CheckDuplicate(*w, last);
    CheckLastSequence(dir, sequence - 1);
  }
}

TEST_CASE("P7 snapshot: replay from a snapshot inside the active segment, index intact or not") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.index_interval_bytes = 512;
  int32_t sequence = 0;
  std::vector<std::byte> after;
  {
    auto w = OpenWriter(dir, config);
    AppendProducer(*w, &sequence, 40, 8, 1024);  // > 256 KiB: a snapshot at close
    REQUIRE(w->Close().ok());
    REQUIRE(SnapshotCount(dir) == 1);
    auto w2 = OpenWriter(dir, config);
    after = AppendProducer(*w2, &sequence, 20, 2, 64);  // replayed at the next open
    REQUIRE(w2->Close().ok());
    REQUIRE(SnapshotCount(dir) == 1);
  }
  SECTION("intact index") {}
  SECTION("index entries naming no batch") {
    // Every entry but the last points one byte past its batch: the cheap
    // checks of R25 pass, the replay must not trust them.
    std::string index = dir + "/00000000000000000000.index";
    auto bytes = ReadFile(index);
    REQUIRE(bytes.size() >= 16);
    for (size_t at = 0; at + 8 < bytes.size(); at += 8) bytes[at + 7] ^= std::byte{1};
    WriteFile(index, bytes);
  }
  auto w = OpenWriter(dir, config);
  auto retry_after = after;
  auto r1 = w->Append(retry_after);
  REQUIRE(r1);
  CHECK(r1->duplicate);
  BatchOptions o;
  o.producer_id = 7;
  o.producer_epoch = 0;
  o.base_sequence = sequence;
  auto next = MakeBatch(1, 1000, 8, o);
  auto r2 = w->Append(next);
  REQUIRE(r2);
  CHECK(!r2->duplicate);
  CHECK(r2->base_offset == 40 * 8 + 20 * 2);
  auto last = LastProducerSequence(dir, 7);
  REQUIRE(last);
  CHECK(*last == std::optional<int32_t>(sequence));
}

TEST_CASE("E6 LastProducerBatch: a producer's last batch, among others' and after a reopen") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  auto none = LastProducerBatch(dir, 7);
  REQUIRE(none);
  CHECK(!none->has_value());
  auto w = OpenWriter(dir);
  BatchOptions seven, eight;
  seven.producer_id = 7;
  seven.producer_epoch = 0;
  seven.base_sequence = 0;
  eight.producer_id = 8;
  eight.producer_epoch = 0;
  eight.base_sequence = 0;
  auto a = MakeBatch(3, 1000, 8, seven);  // offsets 0-2
  REQUIRE(w->Append(a));
  seven.base_sequence = 3;
  auto b = MakeBatch(2, 1000, 8, seven);  // offsets 3-4: the last of 7
  REQUIRE(w->Append(b));
  auto c = MakeBatch(4, 1000, 8, eight);  // offsets 5-8
  REQUIRE(w->Append(c));
  auto other = MakeBatch(1, 1000, 8);  // offset 9, no producer
  REQUIRE(w->Append(other));
  auto check = [&] {
    auto last = LastProducerBatch(dir, 7);
    INFO((last ? "" : last.error().message()));
    REQUIRE(last);
    REQUIRE(last->has_value());
    CHECK((*last)->base_offset == 3);
    CHECK((*last)->last_offset == 4);
    CHECK((*last)->first_sequence == 3);
    CHECK((*last)->last_sequence == 4);
    auto view = BatchView::Parse(Bytes((*last)->bytes), DecodeLimits{});
    REQUIRE(view);
    CHECK(view->header().base_offset == 3);
    CHECK(view->header().producer_id == 7);
    CHECK(view->header().records_count == 2);
  };
  check();  // from the log replayed (no snapshot yet)
  REQUIRE(w->Close().ok());
  check();  // from the snapshot the close wrote
  auto e = LastProducerBatch(dir, 8);
  REQUIRE(e);
  REQUIRE(e->has_value());
  CHECK((*e)->base_offset == 5);
  CHECK(!(*e)->bytes.empty());
}

// A pipeline's takeover (format-spec/pipeline.md) reads its producer's last
// batch in an output partition through a reader, opening a writer (which
// recovers) first only when MayKeepPastCommittedEnd says recovery could keep
// more than the published end. A crash between an append of the producer
// and its publication: on the same boot the next writer cuts the batch
// (R27), so it is not there and is appended again; after a reboot the
// next writer keeps it (R28), so it is found and not appended twice.
TEST_CASE("E6 MayKeepPastCommittedEnd: a producer's batch appended but never published") {
  const bool reboot = GENERATE(false, true);
  INFO("reboot " << reboot);
  TempDir tmp;
  const std::string dir = tmp / "out-0";
  std::optional<ScopedBootId> boot;
  boot.emplace("11111111-2222-3333-4444-555555555555");
  auto missing = MayKeepPastCommittedEnd(dir);
  REQUIRE(missing);
  CHECK(!*missing);  // no directory: nothing there
  std::filesystem::create_directories(dir);
  auto empty = MayKeepPastCommittedEnd(dir);
  REQUIRE(empty);
  CHECK(!*empty);  // a topic's new partition: no state file, no segment
  BatchOptions seven;
  seven.producer_id = 7;
  seven.producer_epoch = 0;
  seven.base_sequence = 0;
  {
    auto w = OpenWriter(dir);
    auto a = MakeBatch(3, 1000, 8, seven);  // offsets 0-2, sequences 0-2
    REQUIRE(w->Append(a));
    auto other = MakeBatch(1);  // offset 3
    REQUIRE(w->Append(other));
    REQUIRE(w->Close().ok());
  }
  auto published = MayKeepPastCommittedEnd(dir);
  REQUIRE(published);
  CHECK(!*published);
  // The crash: the batch is in the segment, the state file still ends at
  // offset 4 (the close's snapshot past it stands for a roll's).
  const auto state = ReadFile(dir + "/state");
  {
    LogConfig c;
    c.sync_on_close = false;
    auto w = OpenWriter(dir, c);
    seven.base_sequence = 3;
    auto b = MakeBatch(2, 1000, 8, seven);  // offsets 4-5, sequences 3-4
    REQUIRE(w->Append(b));
    REQUIRE(w->Close().ok());
  }
  WriteFile(dir + "/state", state);
  if (reboot) boot.emplace("66666666-7777-8888-9999-aaaaaaaaaaaa");
  auto may = MayKeepPastCommittedEnd(dir);
  REQUIRE(may);
  CHECK(*may == reboot);
  auto read = LastProducerBatch(dir, 7);  // up to the published end
  REQUIRE(read);
  REQUIRE(read->has_value());
  CHECK((*read)->base_offset == 0);
  if (*may) {
    // After a reboot the reader misses what the log will keep: recover.
    RecoveryReport report;
    auto w = OpenWriter(dir, {}, &report);
    REQUIRE(w->Close().ok());
  }
  auto found = LastProducerBatch(dir, 7);
  REQUIRE(found);
  REQUIRE(found->has_value());
  CHECK((*found)->base_offset == (reboot ? 4 : 0));
  CHECK((*found)->last_sequence == (reboot ? 4 : 2));
  CHECK(!(*found)->bytes.empty());
  // The answer is the recovered log's, whoever opens a writer next.
  {
    auto w = OpenWriter(dir);
    REQUIRE(w->Close().ok());
  }
  auto recovered = LastProducerBatch(dir, 7);
  REQUIRE(recovered);
  REQUIRE(recovered->has_value());
  CHECK((*recovered)->base_offset == (*found)->base_offset);
  CHECK((*recovered)->last_sequence == (*found)->last_sequence);
  auto after = MayKeepPastCommittedEnd(dir);
  REQUIRE(after);
  CHECK(!*after);  // the writer published on this boot
}

TEST_CASE(
    "E6 MayKeepPastCommittedEnd: no state file, a dead publication, a pending truncation or a "
    "short segment") {
  ScopedBootId boot("11111111-2222-3333-4444-555555555555");
  TempDir tmp;
  const std::string dir = tmp / "out-0";
  {
    auto w = OpenWriter(dir);
    AppendOne(*w, 3);
    REQUIRE(w->Close().ok());
  }
  auto may = [&] {
    auto r = MayKeepPastCommittedEnd(dir);
    INFO((r ? "" : r.error().message()));
    REQUIRE(r);
    return *r;
  };
  REQUIRE(!may());
  const auto state = ReadFile(dir + "/state");
  SECTION("no state file (R24)") {
    std::filesystem::remove(dir + "/state");
    CHECK(may());
  }
  SECTION("an invalid state file (R15)") {
    auto bad = state;
    bad[20] ^= std::byte{1};  // a checksummed field
    WriteFile(dir + "/state", bad);
    CHECK(may());
  }
  SECTION("a writer died inside a publication (odd generation)") {
    auto odd = state;
    uint32_t generation;
    std::memcpy(&generation, odd.data() + offsetof(StateLayout, generation), 4);
    generation |= 1;
    std::memcpy(odd.data() + offsetof(StateLayout, generation), &generation, 4);
    WriteFile(dir + "/state", odd);
    CHECK(may());
  }
  SECTION("a pending truncation (R40)") {
    WriteFile(dir + "/truncate-to", std::vector<std::byte>(8));
    CHECK(may());
  }
  SECTION("a segment shorter than the committed end (R27)") {
    const std::string log = dir + "/" + SegmentFileName(0, ".log");
    std::filesystem::resize_file(log, std::filesystem::file_size(log) - 1);
    CHECK(may());
  }
  SECTION("a segment longer than the committed end: cut by the next writer") {
    auto w = OpenWriter(dir);
    AppendOne(*w, 1);
    REQUIRE(w->Close().ok());
    WriteFile(dir + "/state", state);
    CHECK(!may());
  }
}

namespace {

uint64_t TestSeed() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

}  // namespace

// An open on the boot that published the committed end builds the producer
// table only when it is first needed (producer.md §10.2). Two writers of one
// partition, reopened at random, append batches with and without producer
// ids, retries and gaps, over small segments (rolls write snapshots): every
// answer is the one the rules give for the whole history (P2, P3, P5).
TEST_CASE("P7 producer state: a table built when first needed answers as the whole history does") {
  const uint64_t seed = TestSeed();
  INFO("MQ_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 12; ++round) {
    TempDir tmp;
    const std::string dir = tmp / "t-0";
    LogConfig c;
    c.segment_bytes = 400 + rng() % 3000;
    c.index_interval_bytes = 64 + rng() % 512;
    struct Sent {
      std::vector<std::byte> bytes;  // as built (offsets not yet assigned)
      AppendResult result;
    };
    struct Model {
      int32_t next = 0;
      std::vector<Sent> sent;
    };
    std::map<int64_t, Model> model;
    std::unique_ptr<PartitionWriter> w[2];
    int64_t end = 0;
    for (int op = 0; op < 80; ++op) {
      const int k = static_cast<int>(rng() % 2);
      if (!w[k]) w[k] = OpenWriter(dir, c);
      const int64_t pid = 1 + static_cast<int64_t>(rng() % 3);
      Model& m = model[pid];
      const int what = static_cast<int>(rng() % 7);
      INFO("round " << round << " op " << op << " writer " << k << " what " << what << " pid "
                    << pid);
      if (what <= 1) {
        auto b = MakeBatch(1 + static_cast<int>(rng() % 4), 1000 + op, 8 + rng() % 200);
        auto r = w[k]->Append(b);
        REQUIRE(r);
        CHECK_FALSE(r->duplicate);
        CHECK(r->base_offset == end);
        end = r->last_offset + 1;
      } else if (what <= 3) {
        BatchOptions o;
        o.producer_id = pid;
        o.producer_epoch = 0;
        o.base_sequence = m.next;
        const int count = 1 + static_cast<int>(rng() % 3);
        auto b = MakeBatch(count, 1000 + op, 8 + rng() % 200, o);
        Sent s{b, {}};
        auto r = w[k]->Append(b);
        REQUIRE(r);
        CHECK_FALSE(r->duplicate);
        CHECK(r->base_offset == end);
        end = r->last_offset + 1;
        s.result = *r;
        m.sent.push_back(std::move(s));
        m.next += count;
      } else if (what == 4 && !m.sent.empty()) {
        // A retry of one of its last five batches (P2).
        const size_t n = std::min<size_t>(5, m.sent.size());
        Sent s = m.sent[m.sent.size() - 1 - rng() % n];
        auto r = w[k]->Append(s.bytes);
        REQUIRE(r);
        CHECK(r->duplicate);
        CHECK(r->base_offset == s.result.base_offset);
        CHECK(r->last_offset == s.result.last_offset);
      } else if (what == 5 && !m.sent.empty()) {
        // A gap after a known producer's last batch (P3).
        BatchOptions o;
        o.producer_id = pid;
        o.producer_epoch = 0;
        o.base_sequence = m.next + 1;
        auto b = MakeBatch(1, 1000 + op, 8, o);
        auto r = w[k]->Append(b);
        REQUIRE_FALSE(r);
        CHECK(r.error().code() == Code::kOutOfOrder);
      } else if (what == 6) {
        REQUIRE(w[k]->Close().ok());
        w[k].reset();
      }
    }
    for (auto& x : w)
      if (x) REQUIRE(x->Close().ok());
    CHECK(ReadAll(dir).back().second == end - 1);
    for (const auto& [pid, m] : model) {
      auto last = LastProducerSequence(dir, pid);
      REQUIRE(last);
      if (m.sent.empty())
        CHECK_FALSE(last->has_value());
      else
        CHECK(*last == std::optional<int32_t>(m.next - 1));
    }
  }
}

// The deferred table still removes, at open, a snapshot past the committed
// end: appends past it must not make it look valid later.
TEST_CASE("P7 producer state: an open that defers the table still removes snapshots past the end") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  BatchOptions o;
  o.producer_id = 7;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  {
    auto w = OpenWriter(dir);
    auto b = MakeBatch(3, 1000, 8, o);
    REQUIRE(w->Append(b));
    REQUIRE(w->Close().ok());
  }
  {
    // A snapshot at offset 50, past the end (3), that has producer 7 at
    // sequence 40.
    ProducerStateTable t;
    BatchHeader h;
    h.producer_id = 7;
    h.producer_epoch = 0;
    h.base_sequence = 38;
    h.last_offset_delta = 2;
    h.records_count = 3;
    h.base_offset = 47;
    h.max_timestamp = 1000;
    t.Update(h);
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(t.WriteSnapshot(fd.get(), 50).ok());
  }
  REQUIRE(Exists(dir + "/00000000000000000050.snapshot"));
  auto w = OpenWriter(dir);
  CHECK_FALSE(Exists(dir + "/00000000000000000050.snapshot"));
  // Past offset 50 with batches without a producer id, then producer 7 goes
  // on at sequence 3, which the stale snapshot (sequence 40) would refuse.
  for (int i = 0; i < 50; ++i) AppendOne(*w, 1);
  o.base_sequence = 3;
  auto b = MakeBatch(1, 1000, 8, o);
  auto r = w->Append(b);
  INFO((r ? "" : r.error().message()));
  REQUIRE(r);
  CHECK_FALSE(r->duplicate);
}
