// mq::Consumer (mq/consumer.h): the consume loop mq-consume and consumer
// groups share. Per-partition order, positions and handed-out offsets,
// assignment changes at runtime, waiting for appends, and a property test
// of concurrent writers with assignment changes during the read.
//
// Seeds: MQ_TEST_SEED=<n> repeats one seed; MQ_CONSUMER_SEEDS=<n> sets how
// many seeds the property runs (default 10). Each seed is printed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "mq/consumer.h"
#include "mq/group_status.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

using K = StartPosition::Kind;

// A data directory with one topic of `partitions` partitions.
struct Topic {
  TempDir tmp;
  DataDir dir;
  TopicConfig config;
  std::string name = "t";

  explicit Topic(int32_t partitions, uint64_t segment_bytes = 1 << 20) {
    auto d = DataDir::Open(tmp / "data", true);
    REQUIRE(d);
    dir = *d;
    config.partitions = partitions;
    config.segment_bytes = segment_bytes;
    REQUIRE(dir.CreateTopic(name, config).ok());
  }

  std::unique_ptr<PartitionWriter> Writer(int32_t p) {
    auto w = PartitionWriter::Open(dir.PartitionDir(name, p), DataDir::LogConfigFor(config), true,
                                   nullptr);
    REQUIRE(w);
    return std::move(*w);
  }

  // Appends one batch of `count` records with timestamps ts, ts+1, ...
  void Append(int32_t p, int count, int64_t ts = 1000) {
    auto w = Writer(p);
    auto b = MakeBatch(count, ts);
    REQUIRE(w->Append(b));
  }

  std::unique_ptr<Consumer> Open(ConsumerOptions options = {}) {
    auto c = Consumer::Open(dir, name, std::move(options));
    REQUIRE(c);
    return std::move(*c);
  }
};

struct Got {
  int32_t partition;
  int64_t offset;
  bool operator==(const Got&) const = default;
};

// Next() until it finds nothing.
std::vector<Got> Drain(Consumer& c) {
  std::vector<Got> out;
  for (;;) {
    auto r = c.Next();
    INFO((r ? "" : r.error().message()));
    REQUIRE(r);
    if (!*r) return out;
    out.push_back({(*r)->partition, (*r)->record.offset});
  }
}

std::vector<int64_t> OffsetsOf(const std::vector<Got>& got, int32_t p) {
  std::vector<int64_t> out;
  for (const Got& g : got)
    if (g.partition == p) out.push_back(g.offset);
  return out;
}

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t o = from; o < to; ++o) out.push_back(o);
  return out;
}

}  // namespace

TEST_CASE("consumer: several partitions are read in offset order, round-robin by batch") {
  Topic t(3);
  // Partition p gets batches of p+1 records; partition 2 stays empty of a
  // second batch, partition 1 gets three.
  for (int32_t p = 0; p < 3; ++p) t.Append(p, p + 1);
  t.Append(0, 2);
  t.Append(1, 2);
  t.Append(1, 2);
  auto c = t.Open();
  for (int32_t p = 0; p < 3; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
  CHECK(c->assignment() == std::vector<int32_t>{0, 1, 2});
  std::vector<Got> got = Drain(*c);
  CHECK(OffsetsOf(got, 0) == Range(0, 3));
  CHECK(OffsetsOf(got, 1) == Range(0, 6));
  CHECK(OffsetsOf(got, 2) == Range(0, 3));
  // One batch of each partition in turn.
  std::vector<Got> want = {{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 2},  // first batches
                           {0, 1}, {0, 2}, {1, 2}, {1, 3},                  // second
                           {1, 4}, {1, 5}};                                 // third
  CHECK(got == want);
  CHECK_FALSE(c->finished());  // following: no stop condition
}

TEST_CASE("consumer: position and last handed-out offset per partition") {
  Topic t(4);
  for (int32_t p = 0; p < 4; ++p) t.Append(p, 10, 1000 + 100 * p);
  auto c = t.Open();
  REQUIRE(c->Assign(0, {K::kOffset, 3}).ok());
  REQUIRE(c->Assign(1, {K::kEnd, 0}).ok());
  REQUIRE(c->Assign(2, {K::kFromEnd, 4}).ok());
  REQUIRE(c->Assign(3, {K::kTimestamp, 1305}).ok());
  CHECK(c->position(0) == 3);
  CHECK(c->position(1) == 10);
  CHECK(c->position(2) == 6);
  CHECK(c->position(3) == std::nullopt);  // known once the timestamp is found
  for (int32_t p = 0; p < 4; ++p) CHECK(c->last_handed_out(p) == std::nullopt);

  auto r = c->Next();
  REQUIRE(r);
  REQUIRE(*r);
  CHECK((*r)->partition == 0);
  CHECK((*r)->record.offset == 3);
  CHECK(c->last_handed_out(0) == 3);
  CHECK(c->position(0) == 4);

  std::vector<Got> got = Drain(*c);
  CHECK(OffsetsOf(got, 0) == Range(4, 10));
  CHECK(OffsetsOf(got, 1).empty());
  CHECK(OffsetsOf(got, 2) == Range(6, 10));
  CHECK(OffsetsOf(got, 3) == Range(5, 10));
  for (int32_t p = 0; p < 4; ++p) CHECK(c->position(p) == 10);
  CHECK(c->last_handed_out(0) == 9);
  CHECK(c->last_handed_out(1) == std::nullopt);
  CHECK(c->last_handed_out(2) == 9);
  CHECK(c->last_handed_out(3) == 9);

  // Not assigned: nothing known.
  CHECK(c->Unassign(2));
  CHECK(c->position(2) == std::nullopt);
  CHECK(c->last_handed_out(2) == std::nullopt);
  CHECK_FALSE(c->Unassign(2));
}

TEST_CASE("consumer: assigning a partition twice or one the topic lacks is refused") {
  Topic t(2);
  auto c = t.Open();
  REQUIRE(c->Assign(1, {K::kBeginning, 0}).ok());
  CHECK(c->Assign(1, {K::kBeginning, 0}).code() == Code::kInvalidArgument);
  CHECK(c->Assign(2, {K::kBeginning, 0}).code() == Code::kInvalidArgument);
  CHECK(c->Assign(-1, {K::kBeginning, 0}).code() == Code::kInvalidArgument);
  CHECK(c->assignment() == std::vector<int32_t>{1});
  CHECK(Consumer::Open(t.dir, "absent", {}).error().code() == Code::kNotFound);
}

TEST_CASE("consumer: a removed partition hands out nothing more, even mid-batch") {
  Topic t(2);
  t.Append(0, 10);
  t.Append(0, 10);
  t.Append(1, 10);
  auto c = t.Open();
  REQUIRE(c->Assign(0, {K::kBeginning, 0}).ok());
  REQUIRE(c->Assign(1, {K::kBeginning, 0}).ok());
  auto r = c->Next();
  REQUIRE(r);
  REQUIRE(*r);
  REQUIRE((*r)->partition == 0);  // in the middle of partition 0's first batch
  REQUIRE(c->Unassign(0));
  CHECK(c->assignment() == std::vector<int32_t>{1});
  std::vector<Got> got = Drain(*c);
  CHECK(OffsetsOf(got, 0).empty());
  CHECK(OffsetsOf(got, 1) == Range(0, 10));
  // Appends to the removed partition stay unseen.
  t.Append(0, 5);
  CHECK(Drain(*c).empty());
}

TEST_CASE("consumer: a partition added at runtime starts at its given position") {
  Topic t(3);
  for (int32_t p = 0; p < 3; ++p) t.Append(p, 8);
  auto c = t.Open();
  REQUIRE(c->Assign(0, {K::kBeginning, 0}).ok());
  CHECK(OffsetsOf(Drain(*c), 0) == Range(0, 8));
  REQUIRE(c->Assign(2, {K::kOffset, 5}).ok());
  std::vector<Got> got = Drain(*c);
  CHECK(OffsetsOf(got, 0).empty());
  CHECK(OffsetsOf(got, 2) == Range(5, 8));
  // Removed and added again: from the new position, not where it stopped.
  REQUIRE(c->Unassign(2));
  REQUIRE(c->Assign(2, {K::kOffset, 1}).ok());
  CHECK(OffsetsOf(Drain(*c), 2) == Range(1, 8));
  // A partition nobody wrote to yet, added from the beginning.
  Topic u(2);
  u.Append(0, 1);
  auto d = u.Open();
  REQUIRE(d->Assign(1, {K::kBeginning, 0}).ok());
  CHECK(d->position(1) == 0);
  CHECK(Drain(*d).empty());
  u.Append(1, 3);
  CHECK(OffsetsOf(Drain(*d), 1) == Range(0, 3));
}

TEST_CASE("consumer: assigning while a batch is handed out with one open reader loses nothing") {
  Topic t(3);
  for (int32_t p = 0; p < 3; ++p) t.Append(p, 6);
  ConsumerOptions o;
  o.max_open = 1;
  auto c = t.Open(o);
  REQUIRE(c->Assign(0, {K::kBeginning, 0}).ok());
  std::vector<Got> got;
  for (int i = 0; i < 2; ++i) {
    auto r = c->Next();
    REQUIRE(r);
    REQUIRE(*r);
    got.push_back({(*r)->partition, (*r)->record.offset});
  }
  // Opening partition 1 closes partition 0's reader mid-batch.
  REQUIRE(c->Assign(1, {K::kBeginning, 0}).ok());
  REQUIRE(c->Assign(2, {K::kOffset, 4}).ok());
  for (const Got& g : Drain(*c)) got.push_back(g);
  CHECK(OffsetsOf(got, 0) == Range(0, 6));
  CHECK(OffsetsOf(got, 1) == Range(0, 6));
  CHECK(OffsetsOf(got, 2) == Range(4, 6));
}

TEST_CASE("consumer: stop_at_end and stop_timestamp finish partitions") {
  Topic t(3);
  t.Append(0, 4, 1000);
  t.Append(1, 4, 2000);
  SECTION("stop_at_end: the ends when assigned, not later appends") {
    ConsumerOptions o;
    o.stop_at_end = true;
    auto c = t.Open(o);
    for (int32_t p = 0; p < 3; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
    t.Append(0, 4, 3000);
    std::vector<Got> got = Drain(*c);
    CHECK(OffsetsOf(got, 0) == Range(0, 4));
    CHECK(OffsetsOf(got, 1) == Range(0, 4));
    CHECK(c->finished());
  }
  SECTION("stop_timestamp: up to the first record at or after it") {
    ConsumerOptions o;
    o.stop_timestamp = 2002;
    auto c = t.Open(o);
    for (int32_t p = 0; p < 2; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
    std::vector<Got> got = Drain(*c);
    CHECK(OffsetsOf(got, 0) == Range(0, 4));
    CHECK(OffsetsOf(got, 1) == Range(0, 2));
    CHECK_FALSE(c->finished());  // partition 0 has not reached 2002 yet
    t.Append(0, 4, 5000);
    CHECK(OffsetsOf(Drain(*c), 0).empty());
    CHECK(c->finished());
  }
}

TEST_CASE("consumer: WaitForAppend wakes on an append to any assigned partition") {
  const int32_t n = GENERATE(1, 3);
  Topic t(4);
  for (int32_t p = 0; p < 4; ++p) t.Append(p, 2);
  auto c = t.Open();
  for (int32_t p = 0; p < n; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
  REQUIRE(Drain(*c).size() == static_cast<size_t>(2 * n));
  // Nothing appended: it times out.
  CHECK_FALSE(c->WaitForAppend(50));
  // An append to a partition not assigned does not wake it.
  t.Append(3, 1);
  CHECK_FALSE(c->WaitForAppend(50));
  // An append to the last assigned partition, while it waits, does.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t.Append(n - 1, 1);
  });
  bool woke = c->WaitForAppend(60000);
  writer.join();
  CHECK(woke);
  std::vector<Got> got = Drain(*c);
  CHECK(got == std::vector<Got>{{n - 1, 2}});
  // After an assignment change it watches the new set.
  REQUIRE(c->Unassign(0));
  REQUIRE(c->Assign(3, {K::kEnd, 0}).ok());
  CHECK_FALSE(c->WaitForAppend(50));
  std::thread writer3([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t.Append(3, 1);
  });
  woke = c->WaitForAppend(60000);
  writer3.join();
  CHECK(woke);
  CHECK(Drain(*c) == std::vector<Got>{{3, 3}});
}

// ---- Property: concurrent writers, assignment changes during the read ----

namespace {

std::vector<uint64_t> Seeds() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return {std::strtoull(s, nullptr, 10)};
  int n = 10;
  if (const char* s = std::getenv("MQ_CONSUMER_SEEDS")) n = std::atoi(s);
  std::random_device rd;
  std::vector<uint64_t> seeds;
  for (int i = 0; i < n; ++i) seeds.push_back((uint64_t{rd()} << 32) | rd());
  return seeds;
}

// What the writers committed: each record's value by partition and offset.
struct Log {
  std::mutex mu;
  std::vector<std::map<int64_t, std::string>> values;
  int64_t end(int32_t p) {
    std::lock_guard lk(mu);
    return values[p].empty() ? 0 : values[p].rbegin()->first + 1;
  }
};

// Appends `appends` batches of 1 to 8 records to random partitions; values
// name the writer and the record, so every committed record is distinct.
Status Write(Topic& t, Log& log, uint64_t seed, int id, int appends) {
  std::mt19937_64 rng(seed);
  std::vector<std::unique_ptr<PartitionWriter>> writers(t.config.partitions);
  for (int i = 0; i < appends; ++i) {
    auto p = static_cast<int32_t>(rng() % static_cast<uint64_t>(t.config.partitions));
    if (!writers[p]) {
      auto w = PartitionWriter::Open(t.dir.PartitionDir(t.name, p), DataDir::LogConfigFor(t.config),
                                     true, nullptr);
      if (!w) return w.error();
      writers[p] = std::move(*w);
    }
    int count = std::uniform_int_distribution<int>(1, 8)(rng);
    std::vector<std::string> values;
    BatchBuilder b;
    for (int r = 0; r < count; ++r) values.push_back(fmt::format("w{}-a{}-r{}", id, i, r));
    for (int r = 0; r < count; ++r) {
      RecordInput in;
      in.timestamp = 1000 + i;
      in.value = AsBytes(values[r]);
      b.Add(in);
    }
    std::vector<std::byte> bytes;
    MQ_RETURN_IF_ERROR(b.Finish(0, &bytes));
    // The log entry and the append under one lock: an offset is in `log`
    // before any reader can see it.
    std::lock_guard lk(log.mu);
    auto res = writers[p]->Append(bytes);
    if (!res) return res.error();
    for (int r = 0; r < count; ++r) log.values[p][res->base_offset + r] = values[r];
    // Now and then a pause, so the reader catches up and waits.
    if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  return Status::Ok();
}

}  // namespace

TEST_CASE(
    "consumer: records handed out that a truncation cut are handed out again as the log "
    "has them now, with a notice") {
  Topic t(1);
  LogConfig config = DataDir::LogConfigFor(t.config);
  config.leader_epoch = 0;
  {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", 0), config, true, nullptr);
    REQUIRE(w);
    for (int i = 0; i < 2; ++i) {  // offsets 0..9 in epoch 0
      auto b = MakeBatch(5);
      REQUIRE((*w)->Append(b));
    }
  }
  std::vector<ConsumerNotice> notices;
  ConsumerOptions options;
  options.on_notice = [&](const ConsumerNotice& n) { notices.push_back(n); };
  auto c = t.Open(options);
  REQUIRE(c->Assign(0, {K::kBeginning, 0}).ok());
  CHECK(OffsetsOf(Drain(*c), 0) == Range(0, 10));
  // A failover: offsets 5..9 are cut and another leader's records take them.
  {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", 0), config, true, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->TruncateTo(5).ok());
  }
  config.leader_epoch = 1;
  {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", 0), config, true, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(5, 5000);
    REQUIRE((*w)->Append(b));
  }
  std::vector<int64_t> times;
  for (;;) {
    auto r = c->Next();
    REQUIRE(r);
    if (!*r) break;
    CHECK((*r)->record.offset == 5 + static_cast<int64_t>(times.size()));
    times.push_back((*r)->record.timestamp);
  }
  CHECK(times == std::vector<int64_t>{5000, 5001, 5002, 5003, 5004});
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].kind == ConsumerNotice::Kind::kTruncated);
  CHECK(notices[0].first_offset == 5);
  CHECK(notices[0].last_offset == 9);
  CHECK(c->position(0) == 10);
}

TEST_CASE(
    "consumer: WaitForAppend wakes on a truncation of any assigned partition, with no "
    "append after it") {
  // One partition: the reader waits itself; two or three: the waiter's
  // threads do (MultiWaiter), and a truncation must wake them as an append
  // does, so that a follower hears of the cut records now, not at the next
  // append.
  const int32_t assigned = GENERATE(1, 2, 3);
  const int32_t cut = assigned - 1;  // the last partition assigned is truncated
  Topic t(3);
  LogConfig config = DataDir::LogConfigFor(t.config);
  config.leader_epoch = 0;
  for (int32_t p = 0; p < assigned; ++p) {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", p), config, true, nullptr);
    REQUIRE(w);
    for (int i = 0; i < 2; ++i) {  // offsets 0..9 in epoch 0
      auto b = MakeBatch(5);
      REQUIRE((*w)->Append(b));
    }
  }
  std::vector<ConsumerNotice> notices;
  ConsumerOptions options;
  options.on_notice = [&](const ConsumerNotice& n) { notices.push_back(n); };
  auto c = t.Open(options);
  for (int32_t p = 0; p < assigned; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
  REQUIRE(Drain(*c).size() == static_cast<size_t>(10 * assigned));
  CHECK_FALSE(c->WaitForAppend(50));
  std::thread truncate([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", cut), config, true, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->TruncateTo(5).ok());
  });
  bool woke = c->WaitForAppend(20000);
  truncate.join();
  CHECK(woke);
  CHECK(Drain(*c).empty());
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].kind == ConsumerNotice::Kind::kTruncated);
  CHECK(notices[0].partition == cut);
  CHECK(notices[0].first_offset == 5);
  CHECK(notices[0].last_offset == 9);
  CHECK(c->position(cut) == 5);
  // Once for the rewrite: then it waits again.
  CHECK_FALSE(c->WaitForAppend(50));
}

TEST_CASE(
    "consumer: a reader closed and opened again goes back to where the epoch of the last "
    "batch read ends, with a notice") {
  // One reader open at a time: partition 0's is closed while partition 1
  // is read, and a failover cuts partition 0 and its new leader's records
  // pass the offset the consumer stopped at before it is opened again.
  Topic t(2);
  LogConfig config = DataDir::LogConfigFor(t.config);
  config.leader_epoch = 0;
  for (int32_t p = 0; p < 2; ++p) {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", p), config, true, nullptr);
    REQUIRE(w);
    for (int i = 0; i < 2; ++i) {  // offsets 0..9 in epoch 0
      auto b = MakeBatch(5);
      REQUIRE((*w)->Append(b));
    }
  }
  std::vector<ConsumerNotice> notices;
  ConsumerOptions options;
  options.max_open = 1;
  options.on_notice = [&](const ConsumerNotice& n) { notices.push_back(n); };
  auto c = t.Open(options);
  for (int32_t p = 0; p < 2; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
  std::vector<Got> got = Drain(*c);
  CHECK(OffsetsOf(got, 0) == Range(0, 10));
  CHECK(OffsetsOf(got, 1) == Range(0, 10));
  {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", 0), config, true, nullptr);
    REQUIRE(w);
    REQUIRE((*w)->TruncateTo(5).ok());
  }
  config.leader_epoch = 1;
  {
    auto w = PartitionWriter::Open(t.dir.PartitionDir("t", 0), config, true, nullptr);
    REQUIRE(w);
    auto b = MakeBatch(10, 5000);  // offsets 5..14 in epoch 1
    REQUIRE((*w)->Append(b));
  }
  std::vector<int64_t> times;
  for (;;) {
    auto r = c->Next();
    REQUIRE(r);
    if (!*r) break;
    REQUIRE((*r)->partition == 0);
    CHECK((*r)->record.offset == 5 + static_cast<int64_t>(times.size()));
    times.push_back((*r)->record.timestamp);
  }
  CHECK(times.size() == 10);
  CHECK((!times.empty() && times.front() == 5000));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].kind == ConsumerNotice::Kind::kTruncated);
  CHECK(notices[0].partition == 0);
  CHECK(notices[0].first_offset == 5);
  CHECK(notices[0].last_offset == 9);
  CHECK(c->position(0) == 15);
}

TEST_CASE("consumer property: every record once per assignment period, in order") {
  for (uint64_t seed : Seeds()) {
    std::printf("consumer property seed %llu\n", static_cast<unsigned long long>(seed));
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const auto partitions = std::uniform_int_distribution<int32_t>(2, 5)(rng);
    Topic t(partitions, std::uniform_int_distribution<uint64_t>(500, 20000)(rng));
    Log log;
    log.values.resize(partitions);
    ConsumerOptions o;
    // From one open reader (every turn reopens) to all of them.
    o.max_open = std::uniform_int_distribution<size_t>(1, partitions + 1)(rng);
    auto c = t.Open(o);

    // Per assigned partition: the offset its next record must have.
    std::map<int32_t, int64_t> expect;
    auto assign = [&](int32_t p) {
      StartPosition start;
      int64_t known = log.end(p);  // at most the end the consumer sees
      switch (rng() % 3) {
        case 0:
          start = {K::kBeginning, 0};
          break;
        case 1:
          start = {K::kEnd, 0};
          break;
        default:
          start = {K::kOffset, std::uniform_int_distribution<int64_t>(0, known)(rng)};
      }
      Status s = c->Assign(p, start);
      INFO(s.message());
      REQUIRE(s.ok());
      std::optional<int64_t> pos = c->position(p);
      if (pos && start.kind == K::kBeginning) CHECK(*pos == 0);
      if (pos && start.kind == K::kOffset) CHECK(*pos == start.value);
      if (pos && start.kind == K::kEnd) CHECK(*pos >= known);
      // Unknown only while the partition has no log: it then starts at 0.
      expect[p] = pos.value_or(0);
    };
    for (int32_t p = 0; p < partitions; ++p)
      if (rng() % 2 == 0 || p == 0) assign(p);

    const int writers = std::uniform_int_distribution<int>(1, 3)(rng);
    std::vector<std::thread> threads;
    std::vector<Status> results(writers);
    std::atomic<int> running{writers};
    for (int w = 0; w < writers; ++w)
      threads.emplace_back([&, w, s = rng()] {
        results[w] = Write(t, log, s, w, 150);
        --running;
      });

    uint64_t handed = 0, changes = 0;
    auto check_record = [&](const ConsumedRecord& r) {
      auto it = expect.find(r.partition);
      INFO("record of partition " << r.partition << " offset " << r.record.offset);
      REQUIRE(it != expect.end());  // only assigned partitions
      REQUIRE(r.record.offset == it->second);
      std::string value;
      {
        std::lock_guard lk(log.mu);
        auto v = log.values[r.partition].find(r.record.offset);
        REQUIRE(v != log.values[r.partition].end());
        value = v->second;
      }
      REQUIRE(r.record.value);
      CHECK(AsText(*r.record.value) == value);
      CHECK(c->last_handed_out(r.partition) == r.record.offset);
      CHECK(c->position(r.partition) == r.record.offset + 1);
      ++it->second;
      ++handed;
    };
    // Draining starts once the writers are done. A round of Next() may
    // have begun before: the second round that finds nothing after it
    // started proves every partition is at its end.
    bool draining = false;
    int empty_rounds = 0;
    for (;;) {
      // At least kMinChanges changes, after the writers if need be.
      constexpr uint64_t kMinChanges = 40;
      if (!draining && running == 0 && changes >= kMinChanges) draining = true;
      uint64_t action = rng() % 100;
      if (!draining && action < (running == 0 ? 20u : 5u)) {
        // Remove a random assigned partition, or add one.
        auto p = static_cast<int32_t>(rng() % static_cast<uint64_t>(partitions));
        if (expect.count(p)) {
          if (rng() % 3 == 0) {
            REQUIRE(c->Unassign(p));
            expect.erase(p);
          }
        } else {
          assign(p);
        }
        ++changes;
        continue;
      }
      auto r = c->Next();
      INFO((r ? "" : r.error().message()));
      REQUIRE(r);
      if (*r) {
        check_record(**r);
        continue;
      }
      if (draining && ++empty_rounds == 2) break;
      (void)c->WaitForAppend(20);
    }
    for (auto& th : threads) th.join();
    for (const Status& s : results) {
      INFO(s.message());
      REQUIRE(s.ok());
    }
    // Whatever stays assigned was read to its end.
    for (auto [p, next] : expect) {
      INFO("partition " << p);
      CHECK(next == log.end(p));
      CHECK(c->position(p) == log.end(p));
    }
    std::printf(
        "  %d partitions, %d writers, max_open %zu: %llu records, %llu assignment changes\n",
        partitions, writers, o.max_open, static_cast<unsigned long long>(handed),
        static_cast<unsigned long long>(changes));
  }
}

TEST_CASE("consumer: ReadNext reads a partition next, putting aside the batch being handed out") {
  Topic t(3);
  t.Append(0, 10);
  t.Append(1, 10);
  t.Append(2, 10);
  auto c = t.Open();
  REQUIRE(c->Assign(0, {K::kBeginning, 0}).ok());
  REQUIRE(c->Assign(1, {K::kBeginning, 0}).ok());
  std::vector<Got> got;
  for (int i = 0; i < 3; ++i) {  // in the middle of partition 0's batch
    auto r = c->Next();
    REQUIRE(r);
    REQUIRE(*r);
    got.push_back({(*r)->partition, (*r)->record.offset});
  }
  REQUIRE(got.back() == Got{0, 2});
  // Partition 2 is taken over: its first record comes next, before the
  // rest of partition 0's batch and before partition 1's.
  REQUIRE(c->Assign(2, {K::kOffset, 4}).ok());
  CHECK(c->ReadNext(2));
  CHECK(c->position(0) == 3);
  auto r = c->Next();
  REQUIRE(r);
  REQUIRE(*r);
  CHECK(Got{(*r)->partition, (*r)->record.offset} == Got{2, 4});
  got.push_back({(*r)->partition, (*r)->record.offset});
  for (const Got& g : Drain(*c)) got.push_back(g);
  // Nothing lost or repeated; partition 0 goes on right after partition 2's batch.
  CHECK(OffsetsOf(got, 0) == Range(0, 10));
  CHECK(OffsetsOf(got, 1) == Range(0, 10));
  CHECK(OffsetsOf(got, 2) == Range(4, 10));
  const std::vector<Got> order(got.begin() + 3, got.begin() + 17);
  std::vector<Got> want;
  for (int64_t o = 4; o < 10; ++o) want.push_back({2, o});
  for (int64_t o = 3; o < 10; ++o) want.push_back({0, o});
  want.push_back({1, 0});
  CHECK(order == want);
  CHECK_FALSE(c->ReadNext(7));
  // The one being read already: nothing changes.
  t.Append(0, 2);
  r = c->Next();
  REQUIRE(r);
  REQUIRE(*r);
  CHECK((*r)->partition == 0);
  CHECK(c->ReadNext(0));
  r = c->Next();
  REQUIRE(r);
  REQUIRE(*r);
  CHECK(Got{(*r)->partition, (*r)->record.offset} == Got{0, 11});
}

TEST_CASE("consumer: with stop_corrupt a corrupt batch stops its partition and the others go on") {
  Topic t(3);
  for (int i = 0; i < 3; ++i)
    for (int32_t p = 0; p < 3; ++p) t.Append(p, 2);
  // Partition 1's second batch fails its CRC (R4).
  const std::string log = t.dir.PartitionDir("t", 1) + "/00000000000000000000.log";
  auto bytes = ReadFile(log);
  const size_t batch = bytes.size() / 3;
  REQUIRE(batch * 3 == bytes.size());
  bytes[2 * batch - 5] ^= std::byte{0xff};
  WriteFile(log, bytes);

  std::vector<ConsumerNotice> notices;
  ConsumerOptions o;
  o.stop_at_end = true;
  o.stop_corrupt = true;
  o.on_notice = [&](const ConsumerNotice& n) { notices.push_back(n); };
  auto c = t.Open(o);
  for (int32_t p = 0; p < 3; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
  std::vector<Got> got = Drain(*c);
  CHECK(OffsetsOf(got, 0) == Range(0, 6));
  CHECK(OffsetsOf(got, 1) == Range(0, 2));
  CHECK(OffsetsOf(got, 2) == Range(0, 6));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].kind == ConsumerNotice::Kind::kStoppedPartition);
  CHECK(notices[0].partition == 1);
  CHECK(notices[0].first_offset == 2);
  CHECK(notices[0].error.code() == Code::kCorruption);
  CHECK_THAT(notices[0].error.message(), Catch::Contains(log) &&
                                             Catch::Contains(fmt::format("position {}", batch)) &&
                                             Catch::Contains("R4"));
  CHECK(c->stopped(1));
  CHECK_FALSE(c->stopped(0));
  CHECK(c->position(1) == std::optional<int64_t>(2));
  CHECK(c->finished());

  // Assigned at the corrupt batch: stopped there, the others read.
  notices.clear();
  auto again = t.Open(o);
  REQUIRE(again->Assign(1, {K::kOffset, 2}).ok());
  REQUIRE(again->Assign(2, {K::kOffset, 4}).ok());
  got = Drain(*again);
  CHECK(OffsetsOf(got, 1).empty());
  CHECK(OffsetsOf(got, 2) == Range(4, 6));
  CHECK(again->stopped(1));
  CHECK(again->position(1) == std::optional<int64_t>(2));
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].first_offset == 2);

  // What a member resuming at an offset meets first (--describe).
  CHECK(CheckReadableAt(t.dir, "t", 1, 0).ok());
  // Past it, a seek that scans the segment from before it (no index entry
  // in between: the index is sparse) meets it too.
  CHECK(CheckReadableAt(t.dir, "t", 1, 4).code() == Code::kCorruption);
  Status at = CheckReadableAt(t.dir, "t", 1, 2);
  CHECK(at.code() == Code::kCorruption);
  CHECK_THAT(at.message(), Catch::Contains("R4") && Catch::Contains(log));
  CHECK(CheckReadableAt(t.dir, "t", 1, 6).ok());  // the log end: nothing to read

  // Without stop_corrupt the batch fails Next().
  auto plain = t.Open();
  REQUIRE(plain->Assign(1, {K::kOffset, 2}).ok());
  auto r = plain->Next();
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Code::kCorruption);
}

TEST_CASE("consumer: set_max_open lowers the readers open at once, losing nothing") {
  Topic t(4);
  for (int32_t p = 0; p < 4; ++p) t.Append(p, 5);
  auto c = t.Open();
  for (int32_t p = 0; p < 4; ++p) REQUIRE(c->Assign(p, {K::kBeginning, 0}).ok());
  std::vector<Got> got = Drain(*c);
  CHECK(c->open_readers() == 4);
  // A member of several topics shares its budget among one topic more.
  c->set_max_open(2);
  CHECK(c->open_readers() == 2);
  for (int32_t p = 0; p < 4; ++p) t.Append(p, 3);
  for (const Got& g : Drain(*c)) got.push_back(g);
  CHECK(c->open_readers() <= 2);
  for (int32_t p = 0; p < 4; ++p) CHECK(OffsetsOf(got, p) == Range(0, 8));
  // Raised again: readers are opened as partitions are read, up to it.
  c->set_max_open(8);
  for (int32_t p = 0; p < 4; ++p) t.Append(p, 1);
  for (const Got& g : Drain(*c)) got.push_back(g);
  CHECK(c->open_readers() == 4);
  for (int32_t p = 0; p < 4; ++p) CHECK(OffsetsOf(got, p) == Range(0, 9));
}
