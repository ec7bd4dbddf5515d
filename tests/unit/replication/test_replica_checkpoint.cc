// Replica checkpoints (format-spec/replication.md §16): the text layout
// (R35), leader-epoch entries (R36) and their derivation from the log
// (R37), the per-partition high watermark (R38), atomic replacement (R39);
// LeaderEpochCache against a model (seeded: MQ_TEST_SEED=<n> repeats one
// run), and hostile bytes that must only ever give corruption.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "format/format.h"
#include "io/checkpoint_file.h"
#include "mq/crc32c.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// The worked examples of replication.md §16.2 and §16.3, byte for byte.
const std::string kEpochExample("\x30\x0a\x32\x0a\x30\x20\x30\x0a\x33\x20\x31\x32\x30\x0a", 14);
const std::string kHwExample("\x30\x0a\x31\x0a\x6f\x72\x64\x65\x72\x73\x20\x30\x20\x34\x32\x0a",
                             16);
const std::pair<std::string, int32_t> kOrders0{"orders", 0};

uint64_t Seed() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

Status EpochError(const std::string& bytes) {
  return DecodeLeaderEpochCheckpoint(bytes, "f").status();
}
Status HwError(const std::string& bytes) {
  return DecodeReplicationOffsetCheckpoint(bytes, "f", kOrders0).status();
}

// The corruption `s` is: rule and position.
void CheckCorrupt(const Status& s, const char* rule, uint64_t position) {
  INFO(s.message());
  REQUIRE(s.code() == Code::kCorruption);
  CHECK(s.rule() == rule);
  CHECK(s.file() == "f");
  CHECK(s.position() == position);
}

UniqueFd OpenDir(const std::string& path) {
  auto fd = OpenDirectory(path, false);
  REQUIRE(fd);
  return std::move(*fd);
}

void WriteText(const std::string& path, const std::string& text) {
  WriteFile(path,
            std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                   reinterpret_cast<const std::byte*>(text.data()) + text.size()));
}
std::string ReadText(const std::string& path) {
  auto b = ReadFile(path);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

TEST_CASE("R35 constants mirror replication.md §16.1") {
  STATIC_REQUIRE(format::kCheckpointVersion == 0);
  STATIC_REQUIRE(format::kMaxCheckpointBytes == 1048576);
  STATIC_REQUIRE(std::string_view(format::kLeaderEpochCheckpointName) == "leader-epoch-checkpoint");
  STATIC_REQUIRE(std::string_view(format::kReplicationOffsetCheckpointName) ==
                 "replication-offset-checkpoint");
}

TEST_CASE("R35 worked examples: the exact bytes both ways") {
  auto cache = DecodeLeaderEpochCheckpoint(kEpochExample, "f");
  REQUIRE(cache);
  CHECK(cache->entries() == std::vector<EpochEntry>{{0, 0}, {3, 120}});
  CHECK(cache->Encode() == kEpochExample);
  auto hw = DecodeReplicationOffsetCheckpoint(kHwExample, "f", kOrders0);
  REQUIRE(hw);
  REQUIRE(*hw);
  CHECK(**hw == HighWatermarkEntry{"orders", 0, 42});
  CHECK(EncodeReplicationOffsetCheckpoint(**hw) == kHwExample);
  // Zero entries and a zero-byte file (Kafka creates one before writing).
  CHECK(LeaderEpochCache().Encode() == "0\n0\n");
  REQUIRE(DecodeLeaderEpochCheckpoint("0\n0\n", "f"));
  auto empty = DecodeLeaderEpochCheckpoint("", "f");
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("R35 version line: exactly 0") {
  CheckCorrupt(EpochError("1\n0\n"), "R35", 0);
  CHECK(EpochError("1\n0\n").message().find("unsupported") != std::string::npos);
  CheckCorrupt(EpochError("00\n0\n"), "R35", 0);
  CheckCorrupt(EpochError("-0\n0\n"), "R35", 0);
  CheckCorrupt(EpochError("0 \n0\n"), "R35", 1);
}

TEST_CASE("R35 count: exactly N entry lines, nothing after them") {
  CheckCorrupt(EpochError("0\n3\n0 0\n3 120\n"), "R35", 14);    // one short
  CheckCorrupt(EpochError("0\n1\n0 0\n3 120\n"), "R35", 8);     // one more
  CheckCorrupt(EpochError("0\n2\n0 0\n3 120\n\n"), "R35", 14);  // an empty line after
  CheckCorrupt(EpochError("0\n0\nx"), "R35", 4);
  CheckCorrupt(EpochError("0\n\n"), "R35", 2);  // no count
  // A count no file of at most 1 MiB can hold is refused where it stands.
  CheckCorrupt(EpochError("0\n262145\n0 0\n"), "R35", 2);
}

TEST_CASE("R35 lines: every one ends in LF, with single spaces and no CR or tab") {
  CheckCorrupt(EpochError("0\n2\n0 0\n3 120"), "R35", 13);  // no final LF
  CheckCorrupt(EpochError("0"), "R35", 1);
  CheckCorrupt(EpochError("0\r\n0\r\n"), "R35", 1);
  CheckCorrupt(EpochError("0\n1\n0  0\n"), "R35", 6);   // two spaces
  CheckCorrupt(EpochError("0\n1\n 0 0\n"), "R35", 4);   // leading space
  CheckCorrupt(EpochError("0\n1\n0 0 \n"), "R35", 8);   // trailing space
  CheckCorrupt(EpochError("0\n1\n0\t0\n"), "R35", 7);   // a tab: one field
  CheckCorrupt(EpochError("0\n1\n0\n"), "R35", 5);      // one field
  CheckCorrupt(EpochError("0\n1\n0 0 0\n"), "R35", 7);  // three fields
}

TEST_CASE("R35 numbers: decimal digits, no sign, no leading zero, no overflow") {
  CheckCorrupt(EpochError("0\n1\n+1 0\n"), "R35", 4);
  CheckCorrupt(EpochError("0\n1\n-1 0\n"), "R35", 4);
  CheckCorrupt(EpochError("0\n1\n01 0\n"), "R35", 4);
  CheckCorrupt(EpochError("0\n1\n1 0x10\n"), "R35", 7);
  CheckCorrupt(EpochError("0\n1\n1 9223372036854775808\n"), "R35", 6);
  CheckCorrupt(EpochError("0\n1\n1 99999999999999999999999\n"), "R35", 6);
  REQUIRE(DecodeLeaderEpochCheckpoint("0\n1\n1 9223372036854775807\n", "f"));
}

namespace {

// A file system whose files cannot be read: what it opens, it only sizes.
class NoReadFs : public FileSystemWrapper {
 public:
  class NoReadFile : public File {
   public:
    explicit NoReadFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
    Status WriteAt(uint64_t o, std::span<const std::byte> d) override { return f_->WriteAt(o, d); }
    Result<size_t> ReadAt(uint64_t, std::span<std::byte>) override {
      return Status(Code::kInternal, "read by a test that forbids it");
    }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    Status Sync() override { return f_->Sync(); }
    Result<FileInfo> Stat() override { return f_->Stat(); }
    int fd() const override { return f_->fd(); }

   private:
    std::unique_ptr<File> f_;
  };
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    auto f = Default()->Open(dir_fd, name, mode);
    if (!f) return f.error();
    return std::unique_ptr<File>(new NoReadFile(std::move(*f)));
  }
};

}  // namespace

TEST_CASE("R35 size: more than 1 MiB is refused before it is read") {
  TempDir dir;
  std::string big = "0\n0\n" + std::string(format::kMaxCheckpointBytes, '\n');
  WriteText(dir / kLeaderEpochCheckpointFile, big);
  UniqueFd fd = OpenDir(dir.path());
  NoReadFs no_read;
  auto loaded = LeaderEpochCache::Load(fd.get(), &no_read);
  REQUIRE(!loaded);
  CHECK(loaded.error().code() == Code::kCorruption);
  CHECK(loaded.error().rule() == "R35");
  CHECK(loaded.error().position() == format::kMaxCheckpointBytes);
  CHECK(loaded.error().message().find("more than the 1048576 allowed") != std::string::npos);
  // The parser refuses the same on its own.
  auto s = EpochError(big);
  CheckCorrupt(s, "R35", format::kMaxCheckpointBytes);
  // And the writer never writes one.
  std::vector<EpochEntry> many;
  for (int32_t e = 0; e < 70000; ++e) many.push_back({e, 1000000000000LL + e});
  auto cache = LeaderEpochCache::FromEntries(many);
  REQUIRE(cache);
  Status w = cache->Store(fd.get());
  CHECK(w.code() == Code::kTooLarge);
  CHECK(ReadText(dir / kLeaderEpochCheckpointFile) == big);
}

TEST_CASE("R36 epoch entries: epochs and start offsets strictly increase, epoch is an int32") {
  CheckCorrupt(EpochError("0\n2\n3 0\n3 120\n"), "R36", 8);     // same epoch
  CheckCorrupt(EpochError("0\n2\n3 0\n2 120\n"), "R36", 8);     // lower epoch
  CheckCorrupt(EpochError("0\n2\n0 120\n3 120\n"), "R36", 10);  // same start
  CheckCorrupt(EpochError("0\n2\n0 120\n3 7\n"), "R36", 10);    // lower start
  CheckCorrupt(EpochError("0\n1\n2147483648 0\n"), "R36", 4);
  REQUIRE(DecodeLeaderEpochCheckpoint("0\n1\n2147483647 0\n", "f"));
  CHECK(LeaderEpochCache::FromEntries({{1, 5}, {1, 6}}).status().code() == Code::kInvalidArgument);
  CHECK(LeaderEpochCache::FromEntries({{1, 5}, {2, 5}}).status().code() == Code::kInvalidArgument);
  CHECK(LeaderEpochCache::FromEntries({{-1, 5}}).status().code() == Code::kInvalidArgument);
}

TEST_CASE("R36 Assign keeps the rule: no-op, refusal, replacement") {
  LeaderEpochCache c;
  REQUIRE(c.Assign(2, 10).ok());
  REQUIRE(c.Assign(2, 50).ok());  // the latest epoch again: nothing
  CHECK(c.entries() == std::vector<EpochEntry>{{2, 10}});
  CHECK(c.Assign(1, 60).code() == Code::kInvalidArgument);  // lower epoch
  CHECK(c.Assign(3, 5).code() == Code::kInvalidArgument);   // starts before the latest
  CHECK(c.Assign(-1, 60).code() == Code::kInvalidArgument);
  CHECK(c.Assign(4, -1).code() == Code::kInvalidArgument);
  CHECK(c.entries() == std::vector<EpochEntry>{{2, 10}});
  REQUIRE(c.Assign(3, 10).ok());  // epoch 2 wrote nothing: replaced
  CHECK(c.entries() == std::vector<EpochEntry>{{3, 10}});
  REQUIRE(c.Assign(5, 20).ok());
  CHECK(c.entries() == std::vector<EpochEntry>{{3, 10}, {5, 20}});
}

TEST_CASE("R36 EndOffsetFor follows Kafka's LeaderEpochFileCache.endOffsetFor") {
  LeaderEpochCache c;
  CHECK(c.EndOffsetFor(0, 100) == EpochEndOffset{-1, -1});  // empty
  REQUIRE(c.Assign(2, 10).ok());
  REQUIRE(c.Assign(4, 30).ok());
  REQUIRE(c.Assign(7, 55).ok());
  CHECK(c.EndOffsetFor(-1, 100) == EpochEndOffset{-1, -1});  // UNDEFINED_EPOCH
  CHECK(c.EndOffsetFor(7, 100) == EpochEndOffset{7, 100});   // latest: the log end
  CHECK(c.EndOffsetFor(8, 100) == EpochEndOffset{-1, -1});   // above the latest
  CHECK(c.EndOffsetFor(4, 100) == EpochEndOffset{4, 55});
  CHECK(c.EndOffsetFor(5, 100) == EpochEndOffset{4, 55});  // largest epoch <= 5
  CHECK(c.EndOffsetFor(3, 100) == EpochEndOffset{2, 30});
  CHECK(c.EndOffsetFor(2, 100) == EpochEndOffset{2, 30});
  // Below the first epoch: the requested epoch and the first start offset.
  CHECK(c.EndOffsetFor(1, 100) == EpochEndOffset{1, 10});
  CHECK(c.EndOffsetFor(0, 100) == EpochEndOffset{0, 10});
}

TEST_CASE("R36 TruncateFromEnd and TruncateFromStart follow Kafka") {
  auto c = LeaderEpochCache::FromEntries({{2, 10}, {4, 30}, {7, 55}});
  REQUIRE(c);
  LeaderEpochCache a = *c;
  a.TruncateFromEnd(56);
  CHECK(a.entries() == c->entries());
  a.TruncateFromEnd(55);
  CHECK(a.entries() == std::vector<EpochEntry>{{2, 10}, {4, 30}});
  a.TruncateFromEnd(-1);
  CHECK(a.entries().size() == 2);
  a.TruncateFromEnd(0);
  CHECK(a.empty());

  LeaderEpochCache b = *c;
  b.TruncateFromStart(9);  // before every entry: nothing
  CHECK(b.entries() == c->entries());
  b.TruncateFromStart(30);  // exactly an entry's start: it stays
  CHECK(b.entries() == std::vector<EpochEntry>{{4, 30}, {7, 55}});
  b.TruncateFromStart(40);
  CHECK(b.entries() == std::vector<EpochEntry>{{4, 40}, {7, 55}});
  b.TruncateFromStart(90);
  CHECK(b.entries() == std::vector<EpochEntry>{{7, 90}});
}

namespace {

// A partition written by the writer, one batch per entry of `epochs`
// (partitionLeaderEpoch; -1 for none), `records` records each.
void WritePartition(const std::string& dir, const std::vector<int32_t>& epochs, int records = 3,
                    uint64_t segment_bytes = 1ull << 30) {
  LogConfig config;
  config.segment_bytes = segment_bytes;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  for (int32_t e : epochs) {
    BatchOptions o;
    o.partition_leader_epoch = e;
    auto b = MakeBatch(records, 1000, 8, o);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
}

}  // namespace

TEST_CASE("R37 Rebuild: an entry per epoch change, -1 batches add none") {
  TempDir root;
  const std::string dir = root / "t-0";
  WritePartition(dir, {-1, -1, 0, 0, -1, 3, 3, 5}, 3, 300);  // rolls several segments
  UniqueFd fd = OpenDir(dir);
  REQUIRE(ListDir(dir).size() > 6);  // more than one segment
  auto c = LeaderEpochCache::Rebuild(fd.get(), {});
  REQUIRE(c);
  CHECK(c->entries() == std::vector<EpochEntry>{{0, 6}, {3, 15}, {5, 21}});
  TempDir old;
  WritePartition(old / "t-0", {-1, -1, -1});
  UniqueFd ofd = OpenDir(old / "t-0");
  auto none = LeaderEpochCache::Rebuild(ofd.get(), {});
  REQUIRE(none);
  CHECK(none->empty());
}

TEST_CASE("R37 Rebuild: an epoch below an earlier one is corruption at its batch") {
  TempDir root;
  const std::string dir = root / "t-0";
  WritePartition(dir, {2, 4, -1, 3});
  UniqueFd fd = OpenDir(dir);
  auto c = LeaderEpochCache::Rebuild(fd.get(), {});
  REQUIRE(!c);
  INFO(c.error().message());
  CHECK(c.error().code() == Code::kCorruption);
  CHECK(c.error().rule() == "R37");
  CHECK(c.error().file() == dir + "/00000000000000000000.log");
  const uint64_t batch = MakeBatch(3).size();
  CHECK(c.error().position() == 3 * batch);
  TempDir neg;
  WritePartition(neg / "t-0", {-2});
  UniqueFd nfd = OpenDir(neg / "t-0");
  auto n = LeaderEpochCache::Rebuild(nfd.get(), {});
  REQUIRE(!n);
  CHECK(n.error().rule() == "R37");
}

TEST_CASE("R37 verify: a batch whose epoch goes back is reported where it starts") {
  TempDir root;
  const std::string dir = root / "t-0";
  WritePartition(dir, {-1, 2, 4, -1, 3, 4, 5});
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].rule == "R37");
  CHECK(problems[0].file == dir + "/00000000000000000000.log");
  CHECK(problems[0].position == 4 * MakeBatch(3).size());
  CHECK(problems[0].kind == Problem::Kind::kCorruption);
  TempDir ok;
  WritePartition(ok / "t-0", {-1, 2, -1, 2, 4});
  problems.clear();
  REQUIRE(VerifyPartition(ok / "t-0", {}, &problems).ok());
  CHECK(problems.empty());
}

TEST_CASE("R37 Open: a missing checkpoint is rebuilt and stored, one past the log end cut") {
  TempDir root;
  const std::string dir = root / "t-0";
  WritePartition(dir, {-1, 1, 1, 4});  // log end offset 12
  UniqueFd fd = OpenDir(dir);
  FaultFs fs;
  bool rebuilt = false;
  auto c = LeaderEpochCache::Open(fd.get(), 12, {}, &fs, &rebuilt);
  REQUIRE(c);
  CHECK(rebuilt);
  CHECK(c->entries() == std::vector<EpochEntry>{{1, 3}, {4, 9}});
  CHECK(ReadText(dir + "/" + kLeaderEpochCheckpointFile) == "0\n2\n1 3\n4 9\n");
  // Present and within the log: read, nothing written.
  const int syncs = fs.syncs();
  c = LeaderEpochCache::Open(fd.get(), 12, {}, &fs, &rebuilt);
  REQUIRE(c);
  CHECK(!rebuilt);
  CHECK(fs.syncs() == syncs);
  // An epoch assigned at the log end (begun, nothing appended in it yet)
  // stays, and nothing is written; one past the log end (a crash cut the
  // log after its batches) is dropped and the file stored again.
  REQUIRE(c->Assign(6, 12).ok());
  REQUIRE(c->Store(fd.get(), &fs).ok());
  const int stored = fs.syncs();
  c = LeaderEpochCache::Open(fd.get(), 12, {}, &fs, &rebuilt);
  REQUIRE(c);
  CHECK(!rebuilt);
  CHECK(c->entries().back() == EpochEntry{6, 12});
  CHECK(fs.syncs() == stored);
  REQUIRE(c->Assign(7, 14).ok());
  REQUIRE(c->Store(fd.get(), &fs).ok());
  c = LeaderEpochCache::Open(fd.get(), 12, {}, &fs, &rebuilt);
  REQUIRE(c);
  CHECK(!rebuilt);
  CHECK(c->entries() == std::vector<EpochEntry>{{1, 3}, {4, 9}, {6, 12}});
  CHECK(ReadText(dir + "/" + kLeaderEpochCheckpointFile) == "0\n3\n1 3\n4 9\n6 12\n");
  // A corrupt checkpoint is reported, not rebuilt over.
  WriteText(dir + "/" + kLeaderEpochCheckpointFile, "0\n2\n4 3\n1 9\n");
  auto bad = LeaderEpochCache::Open(fd.get(), 12, {}, &fs, &rebuilt);
  REQUIRE(!bad);
  CHECK(bad.error().rule() == "R36");
  CHECK(ReadText(dir + "/" + kLeaderEpochCheckpointFile) == "0\n2\n4 3\n1 9\n");
}

TEST_CASE("R38 high watermark: one entry naming this partition") {
  CheckCorrupt(HwError("0\n2\norders 0 42\norders 0 43\n"), "R38", 16);
  CheckCorrupt(HwError("0\n0\n"), "R38", 4);
  CheckCorrupt(HwError("0\n1\norders 1 42\n"), "R38", 4);
  CheckCorrupt(HwError("0\n1\nusers 0 42\n"), "R38", 4);
  CheckCorrupt(HwError("0\n1\nor/ders 0 42\n"), "R38", 4);
  CheckCorrupt(HwError("0\n1\n.. 0 42\n"), "R38", 4);
  CheckCorrupt(HwError("0\n1\norders 2147483648 42\n"), "R38", 11);
  CheckCorrupt(HwError("0\n1\norders 0 -1\n"), "R35", 13);
  // Without an expected partition the name is not checked.
  auto any = DecodeReplicationOffsetCheckpoint("0\n1\nusers 7 42\n", "f", std::nullopt);
  REQUIRE(any);
  CHECK(**any == HighWatermarkEntry{"users", 7, 42});
  auto none = DecodeReplicationOffsetCheckpoint("", "f", kOrders0);
  REQUIRE(none);
  CHECK(!*none);
  CHECK(PartitionOfDirName("orders-0") == kOrders0);
  CHECK(PartitionOfDirName("my-topic-12") == std::make_pair(std::string("my-topic"), 12));
  CHECK(!PartitionOfDirName("orders-01"));
  CHECK(!PartitionOfDirName("orders"));
  CHECK(!PartitionOfDirName("orders-"));
  CHECK(!PartitionOfDirName("-3"));
}

TEST_CASE("R38 Load and Store of the high watermark through a partition directory") {
  TempDir root;
  const std::string dir = root / "orders-0";
  REQUIRE(OpenDirectory(dir, true));
  UniqueFd fd = OpenDir(dir);
  CHECK(LoadHighWatermark(fd.get(), "orders", 0).status().code() == Code::kNotFound);
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 42).ok());
  CHECK(ReadText(dir + "/" + kHighWatermarkFile).size() == 1024);  // R61
  CHECK(!Exists(dir + "/" + kReplicationOffsetCheckpointFile));
  auto hw = LoadHighWatermark(fd.get(), "orders", 0);
  REQUIRE(hw);
  CHECK(*hw == 42);
  auto other = LoadHighWatermark(fd.get(), "orders", 1);
  REQUIRE(!other);
  CHECK(other.error().rule() == "R38");
  CHECK(other.error().file() == dir + "/" + kHighWatermarkFile);
  CHECK(other.error().position() == 24);  // the current copy's partition
  CHECK(StoreHighWatermark(fd.get(), "orders", 0, -1).code() == Code::kInvalidArgument);
  CHECK(StoreHighWatermark(fd.get(), "a/b", 0, 1).code() == Code::kInvalidArgument);
  auto file = ReadHighWatermarkFileByPath(dir + "/" + kHighWatermarkFile);
  REQUIRE(file);
  CHECK(*file->entry == HighWatermarkEntry{"orders", 0, 42});
}

TEST_CASE("R38 a high watermark above the log end is corruption wherever it is read") {
  TempDir root;
  const std::string dir = root / "orders-0";
  WritePartition(dir, {0, 0});  // log end 6
  UniqueFd fd = OpenDir(dir);
  const std::string file = dir + "/" + kHighWatermarkFile;
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 1000).ok());
  // The loader given the log end: at the offset field of the current copy
  // (R61: copy 0, byte 16).
  auto within = LoadHighWatermarkWithin(fd.get(), "orders", 0, 6);
  REQUIRE(!within);
  CHECK(within.error().code() == Code::kCorruption);
  CHECK(within.error().rule() == "R38");
  CHECK(within.error().position() == 16);
  CHECK(within.error().file() == file);
  // --verify.
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].rule == "R38");
  CHECK(problems[0].file == file);
  CHECK(problems[0].position == 16);
  CHECK(problems[0].kind == Problem::Kind::kCorruption);
  // A reader bounded by it is refused rather than read to the log end.
  ReadOptions options;
  options.bound_by_high_watermark = true;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kCorruption);
  CHECK(r.error().rule() == "R38");
  // At the log end it is what it says.
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 6).ok());
  auto at_end = LoadHighWatermarkWithin(fd.get(), "orders", 0, 6);
  REQUIRE(at_end);
  CHECK(*at_end == 6);
  problems.clear();
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  CHECK(problems.empty());
  auto fresh = PartitionReader::Open(dir, options);
  REQUIRE(fresh);
  int batches = 0;
  for (;;) {
    auto b = (*fresh)->Next();
    REQUIRE(b);
    if (!*b) break;
    ++batches;
  }
  CHECK(batches == 2);
}

TEST_CASE("R37 verify: a leader-epoch checkpoint the log does not imply is reported at its entry") {
  TempDir root;
  const std::string dir = root / "t-0";
  WritePartition(dir, {-1, 0, 0, 3, 3});  // epoch 0 from offset 3, epoch 3 from 9; end 15
  const std::string file = dir + "/" + kLeaderEpochCheckpointFile;
  auto verify = [&](const std::string& text) {
    WriteText(file, text);
    std::vector<Problem> problems;
    REQUIRE(VerifyPartition(dir, {}, &problems).ok());
    return problems;
  };
  // What the log implies, with or without an epoch begun at the log end.
  CHECK(verify("0\n2\n0 3\n3 9\n").empty());
  CHECK(verify("0\n3\n0 3\n3 9\n5 15\n").empty());
  // A forged epoch inside the log, a wrong start, a missing epoch.
  for (auto [text, position] :
       std::vector<std::pair<std::string, uint64_t>>{{"0\n2\n0 3\n9 12\n", 8},
                                                     {"0\n2\n0 3\n3 6\n", 8},
                                                     {"0\n1\n0 3\n", 8},
                                                     {"0\n2\n1 3\n3 9\n", 4}}) {
    INFO(text);
    auto problems = verify(text);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].rule == "R37");
    CHECK(problems[0].file == file);
    CHECK(problems[0].position == position);
    CHECK(problems[0].kind == Problem::Kind::kCorruption);
  }
}

TEST_CASE("R39 atomic update: a failed write, fsync or rename leaves the old file") {
  TempDir root;
  UniqueFd fd = OpenDir(root.path());
  auto c = LeaderEpochCache::FromEntries({{0, 0}, {3, 120}});
  REQUIRE(c);
  FaultFs fs;
  REQUIRE(c->Store(fd.get(), &fs).ok());
  CHECK(ReadText(root / kLeaderEpochCheckpointFile) == kEpochExample);
  CHECK(fs.syncs() == 2);  // the file and the directory
  LeaderEpochCache next = *c;
  REQUIRE(next.Assign(9, 200).ok());
  fs.FailWrite(1, FaultFs::Fault::kEnospc);
  CHECK(!next.Store(fd.get(), &fs).ok());
  CHECK(ReadText(root / kLeaderEpochCheckpointFile) == kEpochExample);
  fs.Clear();
  fs.FailSync(1);
  CHECK(!next.Store(fd.get(), &fs).ok());
  CHECK(ReadText(root / kLeaderEpochCheckpointFile) == kEpochExample);
  fs.Clear();
  fs.FailRename(1);
  CHECK(!next.Store(fd.get(), &fs).ok());
  CHECK(ReadText(root / kLeaderEpochCheckpointFile) == kEpochExample);
  fs.Clear();
  // A leftover staging file is replaced, and gone after the rename.
  WriteText(root / (std::string(kLeaderEpochCheckpointFile) + ".tmp"), "junk");
  REQUIRE(next.Store(fd.get(), &fs).ok());
  CHECK(!Exists(root / (std::string(kLeaderEpochCheckpointFile) + ".tmp")));
  auto back = LeaderEpochCache::Load(fd.get(), &fs);
  REQUIRE(back);
  CHECK(back->entries() == next.entries());
  // The high watermark's file is created the same way (then written in
  // place, R61).
  fs.FailRename(1);
  CHECK(!StoreHighWatermark(fd.get(), "orders", 0, 42, &fs).ok());
  CHECK(!Exists(root / kHighWatermarkFile));
  fs.Clear();
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 42, &fs).ok());
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 42);
}

namespace {

// The model: Kafka's semantics restated over a plain list, one rule at a
// time, by linear scans.
struct Model {
  std::vector<EpochEntry> e;
  bool Assign(int32_t epoch, int64_t start) {
    if (e.empty()) {
      e.push_back({epoch, start});
      return true;
    }
    if (epoch == e.back().epoch) return true;
    if (epoch < e.back().epoch || start < e.back().start_offset) return false;
    if (start == e.back().start_offset) e.pop_back();
    e.push_back({epoch, start});
    return true;
  }
  EpochEndOffset EndOffsetFor(int32_t epoch, int64_t leo) const {
    if (epoch < 0 || e.empty() || epoch > e.back().epoch) return {-1, -1};
    if (epoch == e.back().epoch) return {epoch, leo};
    int32_t floor = -1;
    for (const auto& x : e) {
      if (x.epoch > epoch) return {floor < 0 ? epoch : floor, x.start_offset};
      floor = x.epoch;
    }
    return {-1, -1};
  }
  void TruncateFromEnd(int64_t end) {
    if (end < 0) return;
    std::vector<EpochEntry> k;
    for (const auto& x : e)
      if (x.start_offset < end) k.push_back(x);
    e = k;
  }
  void TruncateFromStart(int64_t start) {
    std::vector<EpochEntry> k;
    std::optional<int32_t> last;
    for (const auto& x : e) {
      if (x.start_offset <= start)
        last = x.epoch;
      else
        k.push_back(x);
    }
    if (last) k.insert(k.begin(), {*last, start});
    e = k;
  }
};

}  // namespace

TEST_CASE("leader epoch cache: random Assign/Truncate/EndOffsetFor sequences agree with a model") {
  const uint64_t seed = Seed();
  std::printf("leader epoch cache model: seed %llu (MQ_TEST_SEED to repeat)\n",
              static_cast<unsigned long long>(seed));
  INFO("MQ_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  for (int run = 0; run < 200; ++run) {
    LeaderEpochCache c;
    Model m;
    int64_t leo = 0;
    for (int step = 0; step < 60; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 5) {
        const int32_t epoch = static_cast<int32_t>(rng() % 12);
        const int64_t start = static_cast<int64_t>(rng() % 100);
        const bool ok = m.Assign(epoch, start);
        Status s = c.Assign(epoch, start);
        REQUIRE(s.ok() == ok);
        if (ok) leo = std::max(leo, start);
      } else if (op < 7) {
        const int64_t end = static_cast<int64_t>(rng() % 110) - 5;
        m.TruncateFromEnd(end);
        c.TruncateFromEnd(end);
      } else if (op < 8) {
        const int64_t start = static_cast<int64_t>(rng() % 100);
        m.TruncateFromStart(start);
        c.TruncateFromStart(start);
      } else {
        leo += static_cast<int64_t>(rng() % 10);
      }
      REQUIRE(c.entries() == m.e);
      for (int32_t q = -1; q <= 13; ++q) REQUIRE(c.EndOffsetFor(q, leo) == m.EndOffsetFor(q, leo));
      // R36 holds after every step, and the file round-trips.
      auto back = DecodeLeaderEpochCheckpoint(c.Encode(), "f");
      REQUIRE(back);
      REQUIRE(back->entries() == c.entries());
    }
  }
}

TEST_CASE("checkpoint hostile input: random bytes, cuts and flips give corruption, never a crash") {
  const uint64_t seed = Seed();
  std::printf("checkpoint hostile input: seed %llu (MQ_TEST_SEED to repeat)\n",
              static_cast<unsigned long long>(seed));
  INFO("MQ_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  auto check = [](const std::string& bytes, bool may_pass) {
    INFO("bytes: " << bytes.size());
    for (int kind = 0; kind < 2; ++kind) {
      Status s = kind == 0 ? EpochError(bytes) : HwError(bytes);
      if (s.ok()) {
        REQUIRE(may_pass);
        // Strict means canonical: what passes is exactly what the writer
        // writes for it.
        if (bytes.empty()) continue;
        if (kind == 0)
          REQUIRE(DecodeLeaderEpochCheckpoint(bytes, "f")->Encode() == bytes);
        else
          REQUIRE(EncodeReplicationOffsetCheckpoint(
                      **DecodeReplicationOffsetCheckpoint(bytes, "f", kOrders0)) == bytes);
        continue;
      }
      REQUIRE(s.code() == Code::kCorruption);
      REQUIRE(s.file() == "f");
      REQUIRE(s.position() <= bytes.size());
      REQUIRE((s.rule() == "R35" || s.rule() == "R36" || s.rule() == "R38"));
    }
  };
  // Every proper cut of the examples (but the empty file) is corruption.
  for (const std::string& ex : {kEpochExample, kHwExample}) {
    for (size_t n = 1; n < ex.size(); ++n) {
      INFO("cut at " << n);
      REQUIRE(!EpochError(ex.substr(0, n)).ok());
      REQUIRE(!HwError(ex.substr(0, n)).ok());
      check(ex.substr(0, n), false);
    }
  }
  const std::string alphabet = "0123456789 \n\t\r-+xorders.";
  for (int i = 0; i < 20000; ++i) {
    std::string b = (rng() % 2) ? kEpochExample : kHwExample;
    switch (rng() % 4) {
      case 0:  // flips
        for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k)
          b[rng() % b.size()] = static_cast<char>(rng());
        break;
      case 1:  // characters that matter
        for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k)
          b[rng() % b.size()] = alphabet[rng() % alphabet.size()];
        break;
      case 2:  // insertions
        b.insert(rng() % (b.size() + 1), 1, alphabet[rng() % alphabet.size()]);
        break;
      default: {  // random text
        b.clear();
        for (size_t k = 0, n = rng() % 40; k < n; ++k) b += alphabet[rng() % alphabet.size()];
      }
    }
    check(b, true);
  }
}

namespace {

// R61: a high-watermark file of the copies `c0` and `c1` (empty: zero bytes).
std::vector<std::byte> HwImage(const std::vector<std::byte>& c0, const std::vector<std::byte>& c1) {
  std::vector<std::byte> out(1024);
  std::copy(c0.begin(), c0.end(), out.begin());
  std::copy(c1.begin(), c1.end(), out.begin() + 512);
  return out;
}
std::vector<std::byte> HwCopy(int64_t offset, uint64_t sequence, std::string topic = "orders",
                              int32_t partition = 0) {
  auto copy = EncodeHighWatermarkCopy({std::move(topic), partition, offset}, sequence);
  REQUIRE(copy);
  return *copy;
}
// The copy's CRC made to match its bytes again after an edit.
void Reseal(std::vector<std::byte>* image, int copy) {
  std::byte* p = image->data() + 512 * copy;
  const uint32_t crc = Crc32c(std::span<const std::byte>(p, 508));
  for (int i = 0; i < 4; ++i) p[508 + i] = static_cast<std::byte>(crc >> (24 - 8 * i));
}

}  // namespace

TEST_CASE(
    "R61 high-watermark file: the whole copy with the higher sequence, a torn copy an unfinished "
    "write") {
  STATIC_REQUIRE(std::string_view(format::kHighWatermarkName) == "high-watermark");
  // The layout: magic "MQHW", version 1, sequence, high watermark,
  // partition, topic length, topic; big-endian.
  const auto c = HwCopy(42, 1);
  REQUIRE(c.size() == 512);
  const unsigned char head[] = {0x4d, 0x51, 0x48, 0x57, 0, 0, 0,   1,   0,   0,   0,   0,   0,
                                0,    0,    1,    0,    0, 0, 0,   0,   0,   0,   42,  0,   0,
                                0,    0,    0,    0,    0, 6, 'o', 'r', 'd', 'e', 'r', 's', 0};
  for (size_t i = 0; i < sizeof head; ++i) CHECK(c[i] == std::byte{head[i]});
  // The higher sequence wins, in either copy.
  auto both = DecodeHighWatermarkFile(HwImage(HwCopy(42, 1), HwCopy(43, 2)), "f", kOrders0);
  REQUIRE(both);
  CHECK(both->entry->offset == 43);
  CHECK(both->sequence == 2);
  CHECK(both->copy == 1);
  auto swapped = DecodeHighWatermarkFile(HwImage(HwCopy(44, 3), HwCopy(43, 2)), "f", kOrders0);
  REQUIRE(swapped);
  CHECK(swapped->entry->offset == 44);
  CHECK(swapped->copy == 0);
  // A torn newer copy (half written) leaves the older one current.
  auto torn_image = HwImage(HwCopy(42, 1), HwCopy(43, 2));
  std::fill(torn_image.begin() + 512 + 256, torn_image.end(), std::byte{0});
  auto torn = DecodeHighWatermarkFile(torn_image, "f", kOrders0);
  REQUIRE(torn);
  CHECK(torn->entry->offset == 42);
  CHECK(torn->copy == 0);
  // Only copy 0, as a new file holds it.
  auto fresh = DecodeHighWatermarkFile(HwImage(HwCopy(42, 1), {}), "f", kOrders0);
  REQUIRE(fresh);
  CHECK(fresh->entry->offset == 42);
  // Zero bytes: no high watermark.
  auto none = DecodeHighWatermarkFile({}, "f", kOrders0);
  REQUIRE(none);
  CHECK(!none->entry);
  CHECK(none->copy == -1);
}

TEST_CASE("R61 high-watermark file: every breach is corruption naming the byte position") {
  auto error = [](const std::vector<std::byte>& image) {
    return DecodeHighWatermarkFile(image, "f", kOrders0).status();
  };
  CheckCorrupt(error(std::vector<std::byte>(1000)), "R61", 1000);          // not 1024 bytes
  CheckCorrupt(error(HwImage({}, {})), "R61", 508);                        // neither copy whole
  CheckCorrupt(error(HwImage(HwCopy(42, 5), HwCopy(43, 5))), "R61", 520);  // equal sequences
  auto edited = [&](size_t at, std::byte value) {
    auto image = HwImage(HwCopy(42, 1), HwCopy(43, 2));
    image[512 + at] = value;
    Reseal(&image, 1);
    return image;
  };
  CheckCorrupt(error(edited(0, std::byte{0})), "R61", 512 + 0);       // magic
  CheckCorrupt(error(edited(7, std::byte{9})), "R61", 512 + 4);       // version
  CheckCorrupt(error(edited(16, std::byte{0x80})), "R61", 512 + 16);  // negative HW
  CheckCorrupt(error(edited(24, std::byte{0x80})), "R61", 512 + 24);  // negative partition
  CheckCorrupt(error(edited(31, std::byte{0})), "R61", 512 + 28);     // topic length 0
  CheckCorrupt(error(edited(33, std::byte{'/'})), "R61", 512 + 32);   // topic breaks R12
  CheckCorrupt(error(edited(100, std::byte{1})), "R61", 512 + 100);   // bytes after the topic
  // A whole copy naming another partition is never this one's (R38).
  CheckCorrupt(error(HwImage(HwCopy(42, 1, "orders", 1), {})), "R38", 24);
  CheckCorrupt(error(HwImage(HwCopy(42, 1), HwCopy(43, 2, "users"))), "R38", 512 + 24);
  // Out of range: nothing encoded.
  CHECK(!EncodeHighWatermarkCopy({"orders", 0, -1}, 1));
  CHECK(!EncodeHighWatermarkCopy({"orders", -1, 1}, 1));
  CHECK(!EncodeHighWatermarkCopy({"a/b", 0, 1}, 1));
  CHECK(!EncodeHighWatermarkCopy({"orders", 0, 1}, 0));
}

TEST_CASE(
    "R61 a store overwrites the copy that is not current, in place, and a torn store leaves the "
    "one before") {
  TempDir root;
  const std::string dir = root / "orders-0";
  REQUIRE(OpenDirectory(dir, true));
  UniqueFd fd = OpenDir(dir);
  FaultFs fs;
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 42, &fs).ok());  // created whole
  auto read = [&] {
    auto r = ReadHighWatermarkFileByPath(dir + "/" + kHighWatermarkFile);
    REQUIRE(r);
    return *r;
  };
  CHECK(read().copy == 0);
  CHECK(read().sequence == 1);
  const auto first = ReadFile(dir + "/" + kHighWatermarkFile);
  // No rename from here on: a store with every rename failing succeeds.
  fs.FailRename(1);
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 43, &fs).ok());
  CHECK(read().copy == 1);
  CHECK(read().sequence == 2);
  const auto second = ReadFile(dir + "/" + kHighWatermarkFile);
  // Copy 0 was not touched.
  CHECK(std::equal(first.begin(), first.begin() + 512, second.begin()));
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 44, &fs).ok());
  CHECK(read().copy == 0);
  CHECK(read().sequence == 3);
  CHECK(!Exists(dir + "/" + kHighWatermarkFile + ".tmp"));
  // A crash in the middle of a store: half the copy written. The other
  // copy stays current, and the next store goes over the torn one.
  fs.Clear();
  fs.FailWrite(1, FaultFs::Fault::kShortWrite);
  CHECK(!StoreHighWatermark(fd.get(), "orders", 0, 45, &fs).ok());
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 44);
  CHECK(read().copy == 0);
  fs.Clear();
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 46, &fs).ok());
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 46);
  CHECK(read().copy == 1);
  CHECK(read().sequence == 4);
  // fdatasync of the file when the writer's policy asks, none without.
  const int syncs = fs.syncs();
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 47, &fs, false).ok());
  CHECK(fs.syncs() == syncs);
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 48, &fs, true).ok());
  CHECK(fs.syncs() == syncs + 1);
  fs.FailSync(1);
  CHECK(!StoreHighWatermark(fd.get(), "orders", 0, 49, &fs, true).ok());
  fs.Clear();
  // Raise moves it only forward.
  auto lower = RaiseHighWatermark(fd.get(), "orders", 0, 10, &fs);
  REQUIRE(lower);
  CHECK(!*lower);
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 49);
  auto higher = RaiseHighWatermark(fd.get(), "orders", 0, 50, &fs);
  REQUIRE(higher);
  CHECK(*higher);
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 50);
  // Lowered (a cut of the log): in place, fsynced.
  const int before_lower = fs.syncs();
  auto lowered = LowerHighWatermark(fd.get(), "orders", 0, 6, &fs);
  REQUIRE(lowered);
  CHECK(*lowered == std::optional<int64_t>(50));
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 6);
  CHECK(fs.syncs() == before_lower + 1);
}

TEST_CASE(
    "R61 an older mq's replication-offset-checkpoint is read while high-watermark is missing, and "
    "replaced at the first store") {
  TempDir root;
  const std::string dir = root / "orders-0";
  WritePartition(dir, {0, 0});  // log end 6
  UniqueFd fd = OpenDir(dir);
  const std::string legacy = dir + "/" + kReplicationOffsetCheckpointFile;
  const std::string file = dir + "/" + kHighWatermarkFile;
  WriteText(legacy, "0\n1\norders 0 5\n");
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 5);
  CHECK(std::string(HighWatermarkFileAt(fd.get())) == kReplicationOffsetCheckpointFile);
  // Not above it: nothing written.
  auto same = RaiseHighWatermark(fd.get(), "orders", 0, 5);
  REQUIRE(same);
  CHECK(!*same);
  CHECK(!Exists(file));
  // The first store creates high-watermark and removes the older file.
  REQUIRE(*RaiseHighWatermark(fd.get(), "orders", 0, 6));
  CHECK(!Exists(legacy));
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 6);
  CHECK(std::string(HighWatermarkFileAt(fd.get())) == kHighWatermarkFile);
  // A leftover of an older mq beside high-watermark is not read.
  WriteText(legacy, "0\n1\norders 0 3\n");
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 6);
  // Lowered from the older file: moved to high-watermark the same way.
  ::unlink(file.c_str());
  WriteText(legacy, "0\n1\norders 0 1000\n");
  // Above the log end it names the older file and its offset (R38).
  auto within = LoadHighWatermarkWithin(fd.get(), "orders", 0, 6);
  REQUIRE(!within);
  CHECK(within.error().rule() == "R38");
  CHECK(within.error().file() == legacy);
  CHECK(within.error().position() == 13);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == legacy);
  auto lowered = LowerHighWatermark(fd.get(), "orders", 0, 6);
  REQUIRE(lowered);
  CHECK(*lowered == std::optional<int64_t>(1000));
  CHECK(!Exists(legacy));
  CHECK(*LoadHighWatermark(fd.get(), "orders", 0) == 6);
  // A damaged older file is still checked by --verify (R35).
  WriteText(legacy, "garbage");
  problems.clear();
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == legacy);
  CHECK(problems[0].rule == "R35");
}

TEST_CASE(
    "R61 --verify and every reader report a damaged high-watermark with file, byte position and "
    "R61") {
  TempDir root;
  const std::string dir = root / "orders-0";
  WritePartition(dir, {0, 0});  // log end 6
  UniqueFd fd = OpenDir(dir);
  const std::string file = dir + "/" + kHighWatermarkFile;
  REQUIRE(StoreHighWatermark(fd.get(), "orders", 0, 3).ok());
  // Copy 0 (the only whole one) with another magic, its CRC matching.
  auto image = ReadFile(file);
  image[1] = std::byte{0};
  Reseal(&image, 0);
  WriteFile(file, image);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].file == file);
  CHECK(problems[0].position == 0);
  CHECK(problems[0].rule == "R61");
  auto hw = LoadHighWatermark(fd.get(), "orders", 0);
  REQUIRE(!hw);
  CHECK(hw.error().code() == Code::kCorruption);
  CHECK(hw.error().rule() == "R61");
  ReadOptions options;
  options.bound_by_high_watermark = true;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(!r);
  CHECK(r.error().rule() == "R61");
  // Neither copy whole: at the first copy's CRC.
  WriteFile(file, std::vector<std::byte>(1024, std::byte{7}));
  problems.clear();
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].position == 508);
  CHECK(problems[0].rule == "R61");
  // A store refuses to write over a damaged file.
  CHECK(StoreHighWatermark(fd.get(), "orders", 0, 4).code() == Code::kCorruption);
}
