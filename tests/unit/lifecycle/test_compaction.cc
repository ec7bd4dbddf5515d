// Key compaction (format-spec/compaction.md, R114-R125): the offset map,
// the plan, what a cleaned segment keeps, tombstones and the delete
// horizon, passes with a small map, the crash-safe swap, and a randomized
// comparison with a model. Seeds: MQ_TEST_SEED=<n> repeats one seed;
// MQ_COMPACTION_SEEDS=<n> sets how many the model test runs (default 20).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "format/format.h"
#include "mq/compaction.h"
#include "mq/lock.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

struct KV {
  std::string key;  // "" with null_key
  std::optional<std::string> value;
  bool null_key = false;
};

// One record as written, with the offset the log gave it.
struct Written {
  int64_t offset = 0;
  KV kv;
  int64_t ts = 0;
};

struct Seen {
  int64_t offset = 0;
  std::optional<std::string> key;
  std::optional<std::string> value;
  int64_t ts = 0;
  bool operator==(const Seen&) const = default;
};

LogConfig SmallSegments(FileSystem* fs = nullptr) {
  LogConfig c;
  c.segment_bytes = 300;
  c.offsets = OffsetPolicy::kGapsAllowed;
  c.fs = fs;
  return c;
}

std::unique_ptr<PartitionWriter> OpenWriter(const std::string& dir) {
  auto w = PartitionWriter::Open(dir, SmallSegments(), true, nullptr);
  REQUIRE(w);
  return std::move(*w);
}

// Appends one batch of `kvs`, timestamps ts, ts+1, ...; records what was written.
void Append(PartitionWriter& w, const std::vector<KV>& kvs, int64_t ts, std::vector<Written>* log,
            BatchOptions options = {}) {
  BatchBuilder b(options);
  for (size_t i = 0; i < kvs.size(); ++i) {
    RecordInput r;
    r.timestamp = ts + static_cast<int64_t>(i);
    if (!kvs[i].null_key) r.key = AsBytes(kvs[i].key);
    if (kvs[i].value) r.value = AsBytes(*kvs[i].value);
    b.Add(r);
  }
  std::vector<std::byte> out;
  REQUIRE(b.Finish(0, &out).ok());
  auto appended = w.Append(out);
  INFO((appended ? "" : appended.error().message()));
  REQUIRE(appended);
  for (size_t i = 0; i < kvs.size(); ++i)
    log->push_back(
        {appended->base_offset + static_cast<int64_t>(i), kvs[i], ts + static_cast<int64_t>(i)});
}

std::string Text(Bytes b) { return std::string(AsText(b)); }

// Every record a reader from the start hands out, in order.
std::vector<Seen> ReadRecords(const std::string& dir) {
  ReadOptions options;
  options.offsets = OffsetPolicy::kGapsAllowed;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  std::vector<Seen> out;
  std::vector<std::byte> scratch;
  for (;;) {
    auto b = (*r)->Next();
    INFO((b ? "" : b.error().message()));
    REQUIRE(b);
    if (!*b) break;
    if ((*b)->header().is_control()) continue;
    auto rr = RecordReader::Open(**b, &scratch, DecodeLimits{});
    REQUIRE(rr);
    RecordView v;
    while (rr->Read(&v)) {
      Seen s{v.offset, std::nullopt, std::nullopt, v.timestamp};
      if (v.key) s.key = Text(*v.key);
      if (v.value) s.value = Text(*v.value);
      out.push_back(s);
    }
    REQUIRE(rr->status().ok());
  }
  return out;
}

// The model: below `end`, the latest record of each key (null keys all
// kept); at or past it, every record. Tombstones below `tombstones_end` go
// too (their delete horizon passed).
std::vector<Seen> Model(const std::vector<Written>& log, int64_t end, int64_t tombstones_end = 0) {
  std::map<std::string, int64_t> latest;
  for (const Written& w : log)
    if (!w.kv.null_key && w.offset < end) latest[w.kv.key] = w.offset;
  std::vector<Seen> out;
  for (const Written& w : log) {
    const bool below = w.offset < end;
    if (below && !w.kv.null_key && latest[w.kv.key] != w.offset) continue;
    if (w.offset < tombstones_end && !w.kv.null_key && !w.kv.value) continue;
    Seen s{w.offset, std::nullopt, w.kv.value, w.ts};
    if (!w.kv.null_key) s.key = w.kv.key;
    out.push_back(s);
  }
  return out;
}

// Every batch from the start, its bytes as the log holds them (offset gaps allowed).
std::vector<std::vector<std::byte>> GapBatches(const std::string& dir) {
  ReadOptions options;
  options.offsets = OffsetPolicy::kGapsAllowed;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  std::vector<std::vector<std::byte>> out;
  for (;;) {
    auto b = (*r)->Next();
    REQUIRE(b);
    if (!*b) break;
    out.emplace_back((*b)->bytes().begin(), (*b)->bytes().end());
  }
  return out;
}

void RequireVerified(const std::string& dir) {
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, DecodeLimits{}, &problems, OffsetPolicy::kGapsAllowed).ok());
  for (const Problem& p : problems) UNSCOPED_INFO(p.file << " " << p.rule << " " << p.detail);
  for (const Problem& p : problems) CHECK(p.kind != Problem::Kind::kCorruption);
}

CompactionPolicy Forced(int64_t now = 1000000, size_t memory = 1 << 20) {
  CompactionPolicy p;
  p.now_ms = now;
  p.force = true;
  p.max_memory_bytes = memory;
  return p;
}

CompactionReport Compact(const std::string& dir, const CompactionPolicy& policy) {
  auto r = CompactPartition(dir, policy);
  INFO((r ? "" : r.error().message()));
  REQUIRE(r);
  return *r;
}

// Repeats passes until one has nothing dirty left; returns the passes made.
int CompactFully(const std::string& dir, const CompactionPolicy& policy, int64_t* end) {
  int passes = 0;
  for (;; ++passes) {
    REQUIRE(passes < 1000);
    CompactionReport r = Compact(dir, policy);
    *end = r.plan.cleanable_end;
    if (!r.compacted) return passes;
  }
}

RetentionSegment Seg(int64_t base, int64_t end, uint64_t bytes, int64_t clock,
                     bool active = false) {
  RetentionSegment s;
  s.base = base;
  s.end = end;
  s.bytes = bytes;
  s.max_timestamp = clock;
  s.append_time_ms = clock;
  s.active = active;
  return s;
}

std::vector<KV> Keys(std::initializer_list<std::pair<const char*, const char*>> kvs) {
  std::vector<KV> out;
  for (const auto& [k, v] : kvs) {
    KV kv{k, std::nullopt};
    if (v != nullptr) kv.value = v;
    out.push_back(kv);
  }
  return out;
}

}  // namespace

TEST_CASE("R116 offset map: 24 bytes a slot, the latest offset per key, full at 90 percent") {
  STATIC_REQUIRE(OffsetMap::kBytesPerSlot == 24);
  OffsetMap map(24 * 100);
  CHECK(map.slots() == 100);
  CHECK(map.capacity() == 90);
  CHECK(map.memory_bytes() == 2400);
  CHECK_FALSE(map.Get(AsBytes("a")));
  REQUIRE(map.Put(AsBytes("a"), 5));
  REQUIRE(map.Put(AsBytes("a"), 9));
  CHECK(map.Get(AsBytes("a")) == 9);
  CHECK(map.size() == 1);
  for (int i = 0; i < 89; ++i) REQUIRE(map.Put(AsBytes("k" + std::to_string(i)), i));
  CHECK(map.size() == 90);
  CHECK_FALSE(map.Put(AsBytes("one more"), 1));
  CHECK_FALSE(map.Get(AsBytes("one more")));
  CHECK(map.Put(AsBytes("k3"), 1000));  // a key it holds still moves
  CHECK(map.Get(AsBytes("k3")) == 1000);
  for (int i = 0; i < 89; ++i)
    if (i != 3) CHECK(map.Get(AsBytes("k" + std::to_string(i))) == i);
  CHECK(map.Get(AsBytes("")) == std::nullopt);
  map.Clear();
  CHECK(map.size() == 0);
  CHECK_FALSE(map.Get(AsBytes("a")));
  REQUIRE(map.Put(Bytes{}, 7));  // an empty key is a key
  CHECK(map.Get(Bytes{}) == 7);
}

TEST_CASE("R116 key hash: 128 bits that differ for every key of a large sample") {
  std::map<std::pair<uint64_t, uint64_t>, int> seen;
  for (int i = 0; i < 100000; ++i) {
    const std::string k = "key-" + std::to_string(i);
    uint64_t a = 0, b = 0;
    KeyHash128(AsBytes(k), &a, &b);
    seen[{a, b}]++;
    uint64_t c = 0, d = 0;
    KeyHash128(AsBytes(k), &c, &d);
    REQUIRE((a == c && b == d));
  }
  CHECK(seen.size() == 100000);
  // Every tail length (0-31 bytes) reaches the hash.
  std::string s;
  std::map<std::pair<uint64_t, uint64_t>, int> tails;
  for (int n = 0; n < 32; ++n, s += 'x') {
    uint64_t a = 0, b = 0;
    KeyHash128(AsBytes(s), &a, &b);
    tails[{a, b}]++;
  }
  CHECK(tails.size() == 32);
}

TEST_CASE("R114 cleanable section: sealed, local, from the log start, below the HW and the lag") {
  RetentionLog log;
  log.log_start_offset = 10;
  log.log_end_offset = 60;
  log.segments = {Seg(0, 10, 100, 1000), Seg(10, 20, 100, 2000), Seg(20, 30, 100, 3000),
                  Seg(30, 40, 100, 4000), Seg(40, 60, 100, 5000, true)};
  CompactionPolicy policy;
  policy.now_ms = 10000;
  CompactionPlan plan = PlanCompaction(log, {0, -1}, policy);
  REQUIRE(plan.segments.size() == 3);  // not below the log start, not the active one
  CHECK(plan.segments.front().base == 10);
  CHECK(plan.cleanable_end == 40);
  CHECK(plan.first_dirty == 10);  // raised to the log start

  log.high_watermark = 35;  // R76's bound: wholly below the HW
  plan = PlanCompaction(log, {0, -1}, policy);
  CHECK(plan.segments.size() == 2);
  CHECK(plan.cleanable_end == 30);
  log.high_watermark.reset();

  policy.min_compaction_lag_ms = 7500;  // segments with a clock after 2500 wait
  plan = PlanCompaction(log, {0, -1}, policy);
  CHECK(plan.segments.size() == 1);
  CHECK(plan.cleanable_end == 20);

  policy.min_compaction_lag_ms = 0;
  log.segments[1].tiered = true;  // tiered segments are not rewritten
  plan = PlanCompaction(log, {0, -1}, policy);
  REQUIRE(plan.segments.size() == 2);
  CHECK(plan.segments.front().base == 20);
}

TEST_CASE("R115 dirty ratio, min.cleanable.dirty.ratio and max.compaction.lag.ms") {
  RetentionLog log;
  log.log_end_offset = 50;
  log.segments = {Seg(0, 10, 300, 1000), Seg(10, 20, 100, 2000), Seg(20, 30, 100, 3000),
                  Seg(30, 50, 100, 4000, true)};
  CompactionPolicy policy;
  policy.now_ms = 10000;
  CompactionPlan plan = PlanCompaction(log, {10, -1}, policy);
  CHECK(plan.clean_bytes == 300);
  CHECK(plan.dirty_bytes == 200);
  CHECK(plan.dirty_ratio == Approx(0.4));
  CHECK_FALSE(plan.due);  // below 0.5
  policy.min_cleanable_dirty_ratio = 0.4;
  CHECK(PlanCompaction(log, {10, -1}, policy).due);
  policy.min_cleanable_dirty_ratio = 0.5;
  policy.max_compaction_lag_ms = 7000;  // the first dirty segment's clock 2000 < 10000 - 7000
  plan = PlanCompaction(log, {10, -1}, policy);
  CHECK(plan.due);
  CHECK(std::string(plan.why) == "max.compaction.lag.ms");
  policy.max_compaction_lag_ms = 8500;  // 2000 is not older than 1500
  CHECK_FALSE(PlanCompaction(log, {10, -1}, policy).due);
  // Nothing dirty: never due, even forced.
  policy.force = true;
  plan = PlanCompaction(log, {30, -1}, policy);
  CHECK(plan.dirty_bytes == 0);
  CHECK_FALSE(plan.due);
  // The segment holding the first dirty offset counts as dirty.
  plan = PlanCompaction(log, {15, -1}, policy);
  CHECK(plan.dirty_bytes == 200);
}

TEST_CASE("R117 R118 R122 compaction keeps the latest record per key, offsets and order kept") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  for (int round = 0; round < 6; ++round) {
    Append(*w, Keys({{"a", "a1"}, {"b", "b1"}, {"c", "c1"}}), 1000 + round * 10, &log);
    Append(*w, Keys({{"a", "a2"}, {"d", "d1"}}), 1005 + round * 10, &log);
    Append(*w, {KV{"", std::string("no key"), true}}, 1008 + round * 10, &log);
  }
  const uint64_t segments_before = ListDirEndingIn(dir, ".log").size();
  REQUIRE(segments_before >= 4);
  const std::vector<Seen> before = ReadRecords(dir);

  CompactionReport r = Compact(dir, Forced());
  REQUIRE(r.compacted);
  CHECK(r.keys == 4);
  CHECK(r.map_memory_bytes < Forced().max_memory_bytes);  // sized to the dirty records
  CHECK(r.map_memory_bytes >= 24 * 4);
  CHECK(r.bytes_after < r.bytes_before);
  CHECK(r.records_removed > 0);
  CHECK(r.batches_rewritten > 0);  // the last round's first batch loses a, keeps b and c
  CHECK(r.segments_cleaned == static_cast<int>(segments_before) - 1);
  CHECK(r.map_end == r.plan.cleanable_end);
  CHECK(ListDirEndingIn(dir, ".log").size() == segments_before);  // R122: same segments
  const std::vector<Seen> after = ReadRecords(dir);
  CHECK(after == Model(log, r.plan.cleanable_end));
  CHECK(after.size() < before.size());
  RequireVerified(dir);

  // A second pass with nothing dirty does nothing.
  CompactionReport again = Compact(dir, Forced());
  CHECK_FALSE(again.compacted);
  CHECK(std::string(again.plan.why) == "no dirty segment");
  // Appends go on after a pass, with the same writer.
  Append(*w, Keys({{"a", "a3"}}), 2000, &log);
  REQUIRE(w->Close().ok());
  CHECK(ReadRecords(dir) == Model(log, r.plan.cleanable_end));
}

TEST_CASE("R118 a rewritten batch keeps baseOffset, lastOffsetDelta and its producer fields") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  BatchOptions opts;
  opts.producer_id = 42;
  opts.producer_epoch = 3;
  opts.base_sequence = 0;
  opts.compression = Compression::kZstd;
  Append(*w, Keys({{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}}), 1000, &log, opts);
  for (int i = 0; i < 12; ++i) Append(*w, Keys({{"a", "x"}, {"c", "y"}}), 1100 + i, &log);
  REQUIRE(w->Close().ok());
  const auto first_before = GapBatches(dir).front();
  const BatchHeader hb = DecodeBatchHeader(first_before);
  REQUIRE(ListDirEndingIn(dir, ".log").size() >= 3);

  CompactionReport r = Compact(dir, Forced());
  REQUIRE(r.compacted);
  const auto first_after = GapBatches(dir).front();
  auto view = BatchView::Parse(first_after, DecodeLimits{});  // R4: the CRC holds
  REQUIRE(view);
  const BatchHeader& ha = view->header();
  CHECK(ha.base_offset == hb.base_offset);
  CHECK(ha.last_offset_delta == hb.last_offset_delta);
  CHECK(ha.records_count == 2);  // b and d
  CHECK(ha.producer_id == 42);
  CHECK(ha.producer_epoch == 3);
  CHECK(ha.base_sequence == 0);
  CHECK(ha.compression() == Compression::kZstd);
  CHECK(ha.max_timestamp == hb.max_timestamp);
  CHECK(ha.last_sequence() == hb.last_sequence());
  std::vector<std::byte> scratch;
  auto rr = RecordReader::Open(*view, &scratch, DecodeLimits{});
  REQUIRE(rr);
  std::vector<std::pair<int64_t, std::string>> got;
  RecordView v;
  while (rr->Read(&v)) got.emplace_back(v.offset, Text(*v.key));
  REQUIRE(rr->status().ok());
  CHECK(got == std::vector<std::pair<int64_t, std::string>>{{hb.base_offset + 1, "b"},
                                                            {hb.base_offset + 3, "d"}});
  CHECK(ReadRecords(dir) == Model(log, r.plan.cleanable_end));
  RequireVerified(dir);
}

TEST_CASE("R119 the last batch of a producer id stays, emptied, so its sequence survives") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  BatchOptions opts;
  opts.producer_id = 7;
  opts.producer_epoch = 0;
  opts.base_sequence = 0;
  Append(*w, Keys({{"p", "1"}, {"q", "1"}}), 1000, &log, opts);
  opts.base_sequence = 2;
  Append(*w, Keys({{"p", "2"}, {"q", "2"}, {"r", "2"}}), 1001, &log, opts);
  for (int i = 0; i < 12; ++i)
    Append(*w, Keys({{"p", "z"}, {"q", "z"}, {"r", "z"}}), 1100 + i, &log);
  REQUIRE(w->Close().ok());
  auto seq = LastProducerSequence(dir, 7);
  REQUIRE(seq);
  REQUIRE(*seq == 4);

  CompactionReport r = Compact(dir, Forced());
  REQUIRE(r.compacted);
  CHECK(r.batches_removed >= 1);  // the first batch of producer 7
  // The producer state is read back from the log alone: no snapshot.
  for (const std::string& n : ListDirEndingIn(dir, ".snapshot"))
    REQUIRE(::unlink((dir + "/" + n).c_str()) == 0);
  const auto batches = GapBatches(dir);
  int of_producer = 0;
  for (const auto& b : batches) {
    const BatchHeader h = DecodeBatchHeader(b);
    if (h.producer_id != 7) continue;
    ++of_producer;
    CHECK(h.base_sequence == 2);
    CHECK(h.records_count == 0);
    CHECK(h.last_offset_delta == 2);
    CHECK(h.last_sequence() == 4);
    CHECK(BatchView::Parse(b, DecodeLimits{}));
  }
  CHECK(of_producer == 1);
  seq = LastProducerSequence(dir, 7);
  REQUIRE(seq);
  CHECK(*seq == 4);
  CHECK(ReadRecords(dir) == Model(log, r.plan.cleanable_end));
  RequireVerified(dir);
  // The producer resumes: its next sequence is accepted, a duplicate refused as one.
  w = OpenWriter(dir);
  BatchOptions resume;
  resume.producer_id = 7;
  resume.producer_epoch = 0;
  resume.base_sequence = 2;
  BatchBuilder b(resume);
  for (int i = 0; i < 3; ++i) {
    RecordInput in;
    in.timestamp = 1001;
    in.key = AsBytes("p");
    in.value = AsBytes("2");
    b.Add(in);
  }
  std::vector<std::byte> dup;
  REQUIRE(b.Finish(0, &dup).ok());
  auto again = w->Append(dup);
  REQUIRE(again);
  CHECK(again->duplicate);
}

TEST_CASE("R121 tombstones get a delete horizon and stay until it passes") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  Append(*w, Keys({{"a", "1"}, {"b", "1"}}), 1000, &log);
  Append(*w, Keys({{"a", nullptr}, {"c", "1"}}), 1010, &log);  // a's tombstone
  for (int i = 0; i < 12; ++i) Append(*w, Keys({{"c", "x"}, {"d", "y"}}), 1100 + i, &log);
  REQUIRE(w->Close().ok());

  const int64_t now = 50000;
  CompactionPolicy policy = Forced(now);
  policy.delete_retention_ms = 1000;
  CompactionReport r = Compact(dir, policy);
  REQUIRE(r.compacted);
  CHECK(r.horizons_set == 1);
  CHECK(r.tombstones_removed == 0);
  const std::vector<Seen> after = ReadRecords(dir);
  CHECK(after == Model(log, r.plan.cleanable_end));
  bool found = false;
  for (const auto& b : GapBatches(dir)) {
    const BatchHeader h = DecodeBatchHeader(b);
    if (!h.has_delete_horizon()) continue;
    found = true;
    CHECK((h.attributes & format::kDeleteHorizonBit) != 0);
    CHECK(h.base_timestamp == now + 1000);  // KIP-534: baseTimestamp is the horizon
  }
  CHECK(found);
  for (const Seen& s : after)
    if (s.key == "a") CHECK(s.ts == 1010);  // the tombstone keeps its timestamp
  RequireVerified(dir);

  // Before the horizon, another pass keeps it (and does not move it).
  policy.now_ms = now + 999;
  r = Compact(dir, policy);
  CHECK(r.tombstones_removed == 0);
  CHECK(r.horizons_set == 0);
  CHECK(ReadRecords(dir) == Model(log, r.plan.cleanable_end));
  // R115: the checkpoint names the horizon, so the partition is due then,
  // with nothing dirty.
  auto dfd = OpenDirectory(dir, false);
  REQUIRE(dfd);
  auto checkpoint = ReadCompactionCheckpoint(dfd->get());
  REQUIRE(checkpoint);
  REQUIRE(*checkpoint);
  CHECK((*checkpoint)->offset == r.plan.cleanable_end);
  CHECK((*checkpoint)->delete_horizon == now + 1000);
  // At the horizon it goes.
  policy.now_ms = now + 1000;
  policy.force = false;
  r = Compact(dir, policy);
  CHECK(r.compacted);
  CHECK(std::string(r.plan.why) == "delete horizon");
  CHECK(r.tombstones_removed == 1);
  checkpoint = ReadCompactionCheckpoint(dfd->get());
  REQUIRE(checkpoint);
  REQUIRE(*checkpoint);
  CHECK((*checkpoint)->delete_horizon == -1);
  const std::vector<Seen> gone = ReadRecords(dir);
  for (const Seen& s : gone) CHECK(s.key != std::optional<std::string>("a"));
  CHECK(gone == Model(log, r.plan.cleanable_end, r.plan.cleanable_end));
  RequireVerified(dir);
}

TEST_CASE("R116 a map too small for the keys cleans in passes up to the map end") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  for (int round = 0; round < 3; ++round)
    for (int k = 0; k < 40; k += 4)
      Append(*w,
             Keys({{("k" + std::to_string(k)).c_str(), "v"},
                   {("k" + std::to_string(k + 1)).c_str(), "v"},
                   {("k" + std::to_string(k + 2)).c_str(), "v"},
                   {("k" + std::to_string(k + 3)).c_str(), "v"}}),
             1000 + round * 100 + k, &log);
  REQUIRE(w->Close().ok());
  // 40 keys, a map of 12 (11 keys at 90 %, 2 batches of 4): many passes.
  const CompactionPolicy policy = Forced(100000, 24 * 12);
  CompactionReport first = Compact(dir, policy);
  REQUIRE(first.compacted);
  CHECK(first.map_full);
  CHECK(first.keys <= 11);
  CHECK(first.map_end < first.plan.cleanable_end);
  CHECK(ReadRecords(dir) == ReadRecords(dir));
  int64_t end = 0;
  const int passes = CompactFully(dir, policy, &end);
  CHECK(passes >= 3);
  CHECK(ReadRecords(dir) == Model(log, end));
  RequireVerified(dir);
  // A map that cannot hold one batch is refused, nothing changed.
  TempDir tmp2;
  const std::string dir2 = tmp2 / "t-0";
  std::vector<Written> log2;
  auto w2 = OpenWriter(dir2);
  for (int i = 0; i < 10; ++i)
    Append(*w2, Keys({{"a", "1"}, {"b", "1"}, {"c", "1"}}), 1000 + i, &log2);
  REQUIRE(w2->Close().ok());
  auto refused = CompactPartition(dir2, Forced(100000, 24 * 3));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Code::kInvalidArgument);
  CHECK(ReadRecords(dir2) == Model(log2, 0));
}

namespace {

std::map<std::string, std::vector<std::byte>> Logs(const std::string& dir) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const std::string& n : ListDirEndingIn(dir, ".log")) out[n] = ReadFile(dir + "/" + n);
  return out;
}

// The value the reader saw last for each key.
std::map<std::string, std::optional<std::string>> LastPerKey(const std::vector<Seen>& seen) {
  std::map<std::string, std::optional<std::string>> out;
  for (const Seen& s : seen)
    if (s.key) out[*s.key] = s.value;
  return out;
}

}  // namespace

TEST_CASE("R123 R124 a crash at each step of the swap leaves old or new segments, never a mix") {
  TempDir tmp;
  const std::string base = tmp / "t-0";
  std::vector<Written> log;
  {
    auto w = OpenWriter(base);
    for (int i = 0; i < 16; ++i) {
      const std::string v = "v" + std::to_string(i);
      Append(*w, Keys({{"a", v.c_str()}, {"b", i % 5 == 4 ? nullptr : v.c_str()}, {"c", "c"}}),
             1000 + i, &log);
    }
    REQUIRE(w->Close().ok());
  }
  const auto old_logs = Logs(base);
  REQUIRE(old_logs.size() >= 4);
  const CompactionPolicy policy = Forced();
  TempDir ref_tmp;
  const std::string ref = ref_tmp / "t-0";
  CopyDir(base, ref);
  const CompactionReport full = Compact(ref, policy);
  REQUIRE(full.segments_cleaned >= 3);
  const auto new_logs = Logs(ref);
  const std::vector<Seen> want = ReadRecords(ref);
  const auto latest = LastPerKey(ReadRecords(base));

  int crashes = 0;
  for (int n = 1;; ++n) {
    REQUIRE(n < 10000);
    TempDir run_tmp;
    const std::string run = run_tmp / "t-0";
    CopyDir(base, run);
    CrashFs fs(n - 1);  // killed before its nth change
    auto r = CompactPartition(run, policy, &fs);
    if (r) break;  // every step done: no crash left to try
    ++crashes;
    INFO("killed at step " << n << ": " << r.error().message());
    // Each segment is old or new, never a mix.
    for (const auto& [name, bytes] : Logs(run)) {
      const bool is_old = bytes == old_logs.at(name);
      const bool is_new = bytes == new_logs.at(name);
      CHECK((is_old || is_new));
    }
    // A reader sees each key's latest value; the log verifies.
    CHECK(LastPerKey(ReadRecords(run)) == latest);
    RequireVerified(run);
    // The next run finishes or discards the swap and cleans the rest.
    Compact(run, policy);
    CHECK(Logs(run) == new_logs);
    CHECK(ReadRecords(run) == want);
    for (const std::string& name : ListDir(run)) {
      CHECK(name.find(".cleaned") == std::string::npos);
      CHECK(name.find(".swap") == std::string::npos);
    }
    RequireVerified(run);
  }
  // Three files written, synced, renamed twice per segment: many steps.
  CHECK(crashes > 10 * full.segments_cleaned);
}

TEST_CASE("R114-R121 randomized: compaction against a model, with appends between passes") {
  uint64_t first = std::random_device{}();
  int seeds = 20;
  if (const char* s = std::getenv("MQ_COMPACTION_SEEDS")) seeds = std::atoi(s);
  if (const char* s = std::getenv("MQ_TEST_SEED")) {
    first = std::strtoull(s, nullptr, 10);
    seeds = 1;
  }
  for (int i = 0; i < seeds; ++i) {
    const uint64_t seed = first + static_cast<uint64_t>(i);
    std::printf("compaction model: seed %llu (MQ_TEST_SEED to repeat)\n",
                static_cast<unsigned long long>(seed));
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    TempDir tmp;
    const std::string dir = tmp / "t-0";
    std::vector<Written> log;
    auto w = OpenWriter(dir);
    const int keys = pick(1, 30);
    const int batches = pick(10, 120);
    const int64_t now = 1000000;
    for (int b = 0; b < batches; ++b) {
      std::vector<KV> kvs(static_cast<size_t>(pick(1, 4)));
      for (KV& kv : kvs) {
        kv.key = "k" + std::to_string(pick(0, keys - 1));
        kv.null_key = pick(0, 19) == 0;
        if (pick(0, 9) != 0)
          kv.value =
              std::string(static_cast<size_t>(pick(0, 30)), static_cast<char>('a' + pick(0, 25)));
      }
      Append(*w, kvs, 1000 + b * 10, &log);
      if (pick(0, 14) == 0) {  // a pass while the writer appends, killed at a random step or not
        CompactionPolicy policy = Forced(now, 24 * static_cast<size_t>(pick(8, 64)));
        policy.delete_retention_ms = 1000;
        CrashFs crash(pick(0, 1) == 0 ? pick(0, 59) : 1 << 30);
        auto r = CompactPartition(dir, policy, &crash);
        if (!r) REQUIRE(r.error().code() == Code::kIoError);  // killed
        CHECK(LastPerKey(ReadRecords(dir)) == LastPerKey(Model(log, 0)));
      }
    }
    CompactionPolicy policy = Forced(now, 1 << 20);
    policy.delete_retention_ms = 1000;
    int64_t end1 = 0;
    CompactFully(dir, policy, &end1);
    CHECK(ReadRecords(dir) == Model(log, end1));
    RequireVerified(dir);
    // Past the horizon: the tombstones below end1 go once new keys seal a segment.
    const size_t sealed = ListDirEndingIn(dir, ".log").size();
    for (int f = 0; ListDirEndingIn(dir, ".log").size() < sealed + 1; ++f)
      Append(*w, Keys({{("fill" + std::to_string(f)).c_str(), "x"}}), 5000 + f, &log);
    policy.now_ms = now + 1000;
    int64_t end2 = 0;
    CompactFully(dir, policy, &end2);
    CHECK(ReadRecords(dir) == Model(log, end2, end1));
    RequireVerified(dir);
    REQUIRE(w->Close().ok());
  }
}

TEST_CASE("R120 control batches are never removed or changed") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  BatchOptions txn;
  txn.producer_id = 9;
  txn.producer_epoch = 0;
  txn.base_sequence = 0;
  txn.is_transactional = true;
  Append(*w, Keys({{"a", "1"}, {"b", "1"}}), 1000, &log, txn);
  BatchOptions marker = txn;
  marker.base_sequence = -1;
  marker.is_control = true;
  BatchBuilder b(marker);
  b.AddControl(1001, ControlType::kCommit, 0);
  std::vector<std::byte> commit;
  REQUIRE(b.Finish(0, &commit).ok());
  auto appended = w->Append(commit);
  INFO((appended ? "" : appended.error().message()));
  REQUIRE(appended);
  for (int i = 0; i < 12; ++i) Append(*w, Keys({{"a", "x"}, {"b", "y"}}), 1100 + i, &log);
  REQUIRE(w->Close().ok());
  std::vector<std::byte> before;
  for (const auto& raw : GapBatches(dir))
    if (DecodeBatchHeader(raw).is_control()) before = raw;
  REQUIRE_FALSE(before.empty());

  CompactionReport r = Compact(dir, Forced());
  REQUIRE(r.compacted);
  int controls = 0;
  for (const auto& raw : GapBatches(dir)) {
    if (!DecodeBatchHeader(raw).is_control()) continue;
    ++controls;
    CHECK(raw == before);
  }
  CHECK(controls == 1);
  CHECK(ReadRecords(dir) == Model(log, r.plan.cleanable_end));
  RequireVerified(dir);
}

TEST_CASE(
    "R125 a reader open across a pass reads on: each segment old or new, offsets increasing") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  auto w = OpenWriter(dir);
  for (int i = 0; i < 20; ++i) Append(*w, Keys({{"a", "1"}, {"b", "2"}}), 1000 + i, &log);
  ReadOptions options;
  options.offsets = OffsetPolicy::kGapsAllowed;
  auto reader = PartitionReader::Open(dir, options);
  REQUIRE(reader);
  std::vector<int64_t> seen;
  for (int i = 0; i < 3; ++i) {
    auto b = (*reader)->Next();
    REQUIRE(b);
    REQUIRE(*b);
    seen.push_back((*b)->header().base_offset);
  }
  const CompactionReport r = Compact(dir, Forced());
  REQUIRE(r.compacted);
  Append(*w, Keys({{"a", "3"}}), 3000, &log);  // the writer appends on
  for (;;) {
    auto b = (*reader)->Next();
    INFO((b ? "" : b.error().message()));
    REQUIRE(b);
    if (!*b) break;
    CHECK((*b)->header().base_offset > seen.back());
    seen.push_back((*b)->header().base_offset);
  }
  CHECK(seen.back() == log.back().offset);
  CHECK(ReadRecords(dir) == Model(log, r.plan.cleanable_end));
  REQUIRE(w->Close().ok());
}

TEST_CASE("R115 compaction-offset file: offset and delete.horizon, anything else is corruption") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  auto dfd = OpenDirectory(dir, true);
  REQUIRE(dfd);
  auto none = ReadCompactionCheckpoint(dfd->get());
  REQUIRE(none);
  CHECK_FALSE(*none);
  auto write = [&](const std::string& text) {
    WriteFile(
        dir + "/compaction-offset",
        std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                               reinterpret_cast<const std::byte*>(text.data()) + text.size()));
  };
  write("# comment\noffset=120\ndelete.horizon=5000\n");
  auto c = ReadCompactionCheckpoint(dfd->get());
  REQUIRE(c);
  REQUIRE(*c);
  CHECK((*c)->offset == 120);
  CHECK((*c)->delete_horizon == 5000);
  write("offset=7\n");
  c = ReadCompactionCheckpoint(dfd->get());
  REQUIRE(c);
  REQUIRE(*c);
  CHECK((*c)->offset == 7);
  CHECK((*c)->delete_horizon == -1);
  for (const char* bad :
       {"offset=-1\n", "offset=x\n", "delete.horizon=5\n", "offset=1\nother=2\n"}) {
    write(bad);
    c = ReadCompactionCheckpoint(dfd->get());
    REQUIRE_FALSE(c);
    CHECK(c.error().code() == Code::kCorruption);
    CHECK(c.error().message().find("R115") != std::string::npos);
  }
}

namespace {

// Watches a pass's swap (R123): at each rename of steps 2 and 3 it tries
// the partition's writer lock, which must be busy (held by the pass); at
// the start of each segment's step 1 (its `.log.cleaned` created) a writer
// opens the partition and appends, between two swaps.
class SwapWatchFs : public FileSystemWrapper {
 public:
  std::function<void()> between_swaps;
  int renames = 0, busy = 0, free = 0;

  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    if (from.find(".cleaned") != std::string::npos || from.find(".swap") != std::string::npos) {
      ++renames;
      auto lock = FileLock::Open(dir_fd, format::kWriterLockName, false);
      REQUIRE(lock);
      Status s = lock->Lock(LockMode::kExclusive, LockWait::kTry);
      (s.ok() ? free : busy) += 1;
      if (s.ok())
        REQUIRE(lock->Unlock().ok());
      else
        CHECK(s.code() == Code::kBusy);
    }
    return FileSystemWrapper::Rename(dir_fd, from, to);
  }
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (mode != kRead && name.ends_with(".log.cleaned") && between_swaps) between_swaps();
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
};

}  // namespace

TEST_CASE("R125 each swap runs under the writer lock: writers open and append between swaps") {
  TempDir tmp;
  const std::string dir = tmp / "t-0";
  std::vector<Written> log;
  {
    auto w = OpenWriter(dir);
    for (int i = 0; i < 24; ++i) {
      const std::string v = "v" + std::to_string(i);
      Append(*w, Keys({{"a", v.c_str()}, {"b", v.c_str()}, {"c", "c"}}), 1000 + i, &log);
    }
    REQUIRE(w->Close().ok());
  }
  SwapWatchFs fs;
  int opened = 0;
  fs.between_swaps = [&] {
    // A writer opened now (the lock free) appends and closes; a writer
    // blocked by a swap would hang here instead.
    auto w = OpenWriter(dir);
    Append(*w, Keys({{"a", "between"}}), 5000 + opened, &log);
    REQUIRE(w->Close().ok());
    ++opened;
  };
  auto r = CompactPartition(dir, Forced(), &fs);
  INFO((r ? "" : r.error().message()));
  REQUIRE(r);
  REQUIRE(r->segments_cleaned >= 3);
  CHECK(opened == r->segments_cleaned);
  CHECK(fs.renames == 6 * r->segments_cleaned);  // 3 files, renamed twice each
  CHECK(fs.free == 0);
  CHECK(fs.busy == fs.renames);
  // The log is consistent: each key's latest value, offsets kept, every
  // index matches its log (a writer opening now rebuilds none).
  CHECK(ReadRecords(dir) == Model(log, r->map_end));
  RequireVerified(dir);
  RecoveryReport report;
  auto w = PartitionWriter::Open(dir, SmallSegments(), false, &report);
  REQUIRE(w);
  CHECK(report.indexes_rebuilt == 0);
  REQUIRE((*w)->Close().ok());
}

TEST_CASE("R126 a compacted topic refuses a message without a key") {
  TopicConfig compact;
  compact.cleanup_policy = CleanupPolicy::kCompact;
  TopicConfig del;
  CHECK(CheckMessageKey(compact, "t", true, "in", 7).ok());
  CHECK(CheckMessageKey(del, "t", false, "in", 7).ok());
  CHECK(CheckMessageKey(del, "t", true, "in", 7).ok());
  Status s = CheckMessageKey(compact, "t", false, "in: line 2", 7);
  REQUIRE(!s.ok());
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.rule() == "R126");
  CHECK(s.message().find("in: line 2: position 7: R126: a message without a key") == 0);
  CHECK(s.message().find("topic \"t\" has cleanup.policy=compact") != std::string::npos);
  // Through Set, as a topic's file sets it.
  TopicConfig set;
  REQUIRE(set.Set("cleanup.policy", "compact").ok());
  CHECK(!CheckMessageKey(set, "t", false, "in", 0).ok());
}
