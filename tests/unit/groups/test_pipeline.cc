// A pipeline's output side (mq/pipeline.h, format-spec/pipeline.md):
// the bounded set of open output writers. Writers closed to open others and
// opened again continue each source partition's sequences (E1, E4), and a
// restart finds where each stopped (E6, E7), as with every writer open.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "mq/consumer.h"
#include "mq/pipeline.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

constexpr int32_t kOutPartitions = 16;

// One output record as the log holds it.
struct Out {
  int32_t partition = 0;
  int64_t producer_id = -1;
  int32_t sequence = -1;  // the record's: the batch's base sequence + its index
  std::string key, value, source, index;
};

// Every record of topic `topic`, partition by partition, in offset order.
std::vector<Out> ReadTopic(const DataDir& dir, const std::string& topic, int32_t partitions) {
  std::vector<Out> out;
  for (int32_t q = 0; q < partitions; ++q) {
    auto reader = PartitionReader::Open(dir.PartitionDir(topic, q));
    REQUIRE(reader);
    for (;;) {
      auto b = (*reader)->Next();
      REQUIRE(b);
      if (!*b) break;
      std::vector<std::byte> scratch;
      auto records = RecordReader::Open(**b, &scratch, DecodeLimits{});
      REQUIRE(records);
      RecordView r;
      int32_t i = 0;
      while (records->Read(&r)) {
        Out o;
        o.partition = q;
        o.producer_id = (*b)->header().producer_id;
        o.sequence = (*b)->header().base_sequence + i++;
        if (r.key) o.key = std::string(AsText(*r.key));
        if (r.value) o.value = std::string(AsText(*r.value));
        for (const Header& h : r.headers()) {
          if (h.key == kPipelineSourceHeader && h.value) o.source = std::string(AsText(*h.value));
          if (h.key == kPipelineSourceIndexHeader && h.value)
            o.index = std::string(AsText(*h.value));
        }
        out.push_back(std::move(o));
      }
      REQUIRE(records->status().ok());
    }
  }
  return out;
}

// The transform's output for source message `offset` of `partition`:
// `lines` keyed lines, spread over the output partitions by their keys.
std::string Output(int32_t partition, int64_t offset, int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i)
    s += fmt::format("k{}.{}.{}\t{}.{}.{}\n", partition, offset, i, partition, offset, i);
  return s;
}

// Each producer's records in each partition have sequences 0, 1, 2, ...
// (P3: none skipped, none twice), and each output is there once.
void CheckContiguous(const std::vector<Out>& outs) {
  std::map<std::pair<int32_t, int64_t>, int32_t> next;
  std::set<std::pair<std::string, std::string>> seen;
  for (const Out& o : outs) {
    int32_t& want = next[{o.partition, o.producer_id}];
    CHECK(o.sequence == want);
    want = o.sequence + 1;
    CHECK(seen.insert({o.source, o.index}).second);
  }
}

struct Fixture {
  TempDir tmp;
  DataDir dir;
  TopicConfig in;

  Fixture() : dir(Open(tmp.path())) {
    in.partitions = 4;
    REQUIRE(dir.CreateTopic("in", in).ok());
    TopicConfig out;
    out.partitions = kOutPartitions;
    REQUIRE(dir.CreateTopic("out", out).ok());
  }
  static DataDir Open(const std::string& path) {
    auto d = DataDir::Open(path, true);
    REQUIRE(d);
    return *d;
  }
  static PipelineConfig Options(size_t max_open) {
    PipelineConfig o;
    o.group = "g";
    o.out = "out";
    o.key_delimiter = "\t";
    o.max_open = max_open;
    return o;
  }
  // A pipeline of topic "in" writing to "out", open.
  static void Open(PipelineWriter& p, const DataDir& dir) {
    auto out = dir.ReadTopic("out");
    REQUIRE(out);
    REQUIRE(p.Open(*out).ok());
  }
};

}  // namespace

TEST_CASE("pipeline: at most max_open writers are open, those opened again continue sequences") {
  Fixture f;
  {
    PipelineWriter p(f.Options(2), f.dir);
    Fixture::Open(p, f.dir);
    REQUIRE(p.Acquire(0, {"in", 0}, 0).has_value());
    CHECK(p.open_writers() == 0);  // nothing to recover in a new topic: none opened
    for (int64_t offset = 0; offset < 50; ++offset) {
      REQUIRE(p.Deliver(0, offset, 1000 + offset, Output(0, offset, 4)).has_value());
      CHECK(p.open_writers() <= 2);
    }
    CHECK(p.appended() == 200);
    REQUIRE(p.Close().ok());
  }
  auto outs = ReadTopic(f.dir, "out", kOutPartitions);
  REQUIRE(outs.size() == 200);
  CheckContiguous(outs);
  std::set<int32_t> used;
  for (const Out& o : outs) used.insert(o.partition);
  CHECK(used.size() >
        8);  // every partition was closed and opened again, most of them several times

  // A restart with one writer open at a time: E6 finds offsets below 49
  // complete and 49 started, E7 takes 49's outputs again without appending
  // them, and the next message continues every partition's sequences.
  PipelineWriter p(f.Options(1), f.dir);
  Fixture::Open(p, f.dir);
  REQUIRE(p.Acquire(0, {"in", 0}, 0).has_value());
  CHECK(p.open_writers() == 0);  // ends published on this boot: read, not recovered
  auto complete = p.Complete(0, 48);
  REQUIRE(complete);
  CHECK(*complete);
  complete = p.Complete(0, 49);
  REQUIRE(complete);
  CHECK_FALSE(*complete);
  CHECK(p.Started(0, 49));
  REQUIRE(p.Deliver(0, 49, 1049, Output(0, 49, 4)).has_value());
  CHECK(p.appended() == 0);
  for (int64_t offset = 50; offset < 60; ++offset)
    REQUIRE(p.Deliver(0, offset, 1000 + offset, Output(0, offset, 4)).has_value());
  CHECK(p.appended() == 40);
  CHECK(p.open_writers() == 1);
  REQUIRE(p.Close().ok());
  outs = ReadTopic(f.dir, "out", kOutPartitions);
  CHECK(outs.size() == 240);
  CheckContiguous(outs);
}

TEST_CASE("pipeline: a message partly appended is completed (E7) through writers opened again") {
  Fixture f;
  // The first run appended only some of offset 10's outputs (as a kill
  // between its batches leaves them): its first two lines, keyed so that
  // none of the other lines goes where they went.
  std::string tail;
  std::set<int32_t> taken;
  for (int i = 2; i < 6; ++i) {
    const std::string key = fmt::format("k{}", i);
    tail += fmt::format("{}\tv{}\n", key, i);
    taken.insert(PartitionForKey(AsBytes(key), kOutPartitions));
  }
  std::string part;
  for (int n = 0, lines = 0; lines < 2; ++n) {
    const std::string key = fmt::format("p{}", n);
    if (taken.contains(PartitionForKey(AsBytes(key), kOutPartitions))) continue;
    part += fmt::format("{}\tv{}\n", key, lines++);
  }
  const std::string full = part + tail;
  {
    PipelineWriter p(f.Options(1), f.dir);
    Fixture::Open(p, f.dir);
    REQUIRE(p.Acquire(1, {"in", 1}, 0).has_value());
    for (int64_t offset = 0; offset < 10; ++offset)
      REQUIRE(p.Deliver(1, offset, 1000 + offset, Output(1, offset, 6)).has_value());
    REQUIRE(p.Deliver(1, 10, 1010, part).has_value());
    REQUIRE(p.Close().ok());
  }
  PipelineWriter p(f.Options(1), f.dir);
  Fixture::Open(p, f.dir);
  REQUIRE(p.Acquire(1, {"in", 1}, 5).has_value());
  CHECK(p.Started(1, 10));
  // A transform that now gives other lines is refused; nothing is appended.
  std::string other = full;
  other[other.find('\t') + 1] = 'X';
  Status s = p.Deliver(1, 10, 1010, other).status();
  CHECK(s.code() == Code::kCorruption);
  CHECK(p.appended() == 0);
  REQUIRE(p.Deliver(1, 10, 1010, full).has_value());
  CHECK(p.appended() == 4);
  REQUIRE(p.Deliver(1, 11, 1011, Output(1, 11, 6)).has_value());
  REQUIRE(p.Close().ok());
  auto outs = ReadTopic(f.dir, "out", kOutPartitions);
  CHECK(outs.size() == 12 * 6);
  CHECK(std::count_if(outs.begin(), outs.end(),
                      [](const Out& o) { return o.source == "in/1/10"; }) == 6);
  CheckContiguous(outs);
}

TEST_CASE("pipeline: transforms of several source partitions at once share the bounded writers") {
  Fixture f;
  constexpr int kThreads = 4;
  constexpr int64_t kMessages = 100;
  for (size_t max_open : {size_t{1}, size_t{3}, size_t{kOutPartitions}}) {
    INFO("max_open " << max_open);
    TempDir tmp;
    DataDir dir = Fixture::Open(tmp.path());
    REQUIRE(dir.CreateTopic("in", f.in).ok());
    TopicConfig out;
    out.partitions = kOutPartitions;
    REQUIRE(dir.CreateTopic("out", out).ok());
    PipelineWriter p(f.Options(max_open), dir);
    Fixture::Open(p, dir);
    for (int32_t partition = 0; partition < kThreads; ++partition)
      REQUIRE(p.Acquire(partition, {"in", partition}, 0).has_value());
    std::vector<Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int32_t partition = 0; partition < kThreads; ++partition) {
      threads.emplace_back([&, partition] {
        for (int64_t offset = 0; offset < kMessages && results[partition].ok(); ++offset)
          results[partition] =
              p.Deliver(partition, offset, 1000 + offset, Output(partition, offset, 3)).status();
      });
    }
    for (std::thread& t : threads) t.join();
    for (const Status& s : results) CHECK(s.ok());
    // More only while more threads than max_open appended at once.
    CHECK(p.open_writers() <= std::max<size_t>(max_open, kThreads));
    REQUIRE(p.Close().ok());
    auto outs = ReadTopic(dir, "out", kOutPartitions);
    CHECK(outs.size() == kThreads * kMessages * 3);
    CheckContiguous(outs);
  }
}

TEST_CASE("pipeline: the writers' share of the open-file budget") {
  // A reader and a writer per share; shares past the source's partitions
  // open no reader, and their readers' descriptors hold writers.
  // (mq-consume's: a reader holds 4 descriptors, a writer 8, at most 4096.)
  auto budget = [](size_t shares, int32_t partitions) {
    return PipelineWriterBudget(shares, partitions, 4, 8, 4096);
  };
  CHECK(budget(19, 4) == 19 + 15 * 4 / 8);
  CHECK(budget(19, 100) == 19);
  CHECK(budget(1, 1) == 1);
  CHECK(budget(0, 4) == 1);
  CHECK(budget(4096, 1) == 4096);
  CHECK(budget(4096, 0) == 4096);  // no more than the most
}

TEST_CASE(
    "pipeline: a released source partition's producer id is free at once, while a forked child "
    "holds a copy of its lock's descriptor") {
  // With --parallel a handler another thread is starting holds every
  // descriptor of the member between fork and exec; the member that takes
  // the partition next must not find the producer id in use (exit 75).
  Fixture f;
  PipelineWriter first(f.Options(4), f.dir);
  Fixture::Open(first, f.dir);
  REQUIRE(first.Acquire(2, {"in", 2}, 0).has_value());
  ForkedHolder holder;
  REQUIRE(holder.ok());
  first.Release(2);
  PipelineWriter next(f.Options(4), f.dir);
  Fixture::Open(next, f.dir);
  Status taken = next.Acquire(2, {"in", 2}, 0).status();
  CHECK(taken.ok());
  CHECK(taken.message() == "");
  REQUIRE(holder.Release());
}

TEST_CASE("pipeline: E1 producer names, E3 output lines, E4 routes") {
  // E1: each name's length first, so dots in names cannot make two equal.
  CHECK(PipelineProducerName("g", "in", "out", 3) == "pipeline.1.g.2.in.3.out.3");
  CHECK(PipelineProducerName("a.b", "c", "d", 0) != PipelineProducerName("a", "b.c", "d", 0));
  // E3: one output per line, the last without its newline too; with a key
  // delimiter, split at its first occurrence, a line without it keyless.
  auto outs = SplitPipelineOutput("a=1\nb\n\nc=2=3", std::string("="));
  REQUIRE(outs.size() == 4);
  CHECK(outs[0].key == std::optional<std::string>("a"));
  CHECK(outs[0].value == "1");
  CHECK_FALSE(outs[1].key.has_value());
  CHECK(outs[1].value == "b");
  CHECK(outs[2].value == "");
  CHECK(outs[3].key == std::optional<std::string>("c"));
  CHECK(outs[3].value == "2=3");
  CHECK(SplitPipelineOutput("", std::nullopt).empty());
  auto plain = SplitPipelineOutput("a=1\n", std::nullopt);
  REQUIRE(plain.size() == 1);
  CHECK_FALSE(plain[0].key.has_value());
  CHECK(plain[0].value == "a=1");
  // E4: a key by murmur2, keyless by the source partition.
  CHECK(PipelineRoute(5, outs[0], kOutPartitions) == PartitionForKey(AsBytes("a"), kOutPartitions));
  CHECK(PipelineRoute(5, outs[1], 4) == 1);
  CHECK(PipelineRoute(2, outs[1], 4) == 2);
}

TEST_CASE("pipeline: E6 Acquire says where a restart resumes") {
  Fixture f;
  {
    PipelineWriter p(Fixture::Options(4), f.dir);
    Fixture::Open(p, f.dir);
    auto fresh = p.Acquire(3, {"in", 3}, 0);
    REQUIRE(fresh.has_value());
    CHECK(*fresh == -1);  // nothing appended yet
    for (int64_t offset = 0; offset < 8; ++offset)
      REQUIRE(p.Deliver(3, offset, 1000 + offset, Output(3, offset, 2)).has_value());
    // A message without outputs is filtered out: nothing appended.
    auto none = p.Deliver(3, 8, 1008, "");
    REQUIRE(none.has_value());
    CHECK(none->batches == 0);
    CHECK_FALSE(none->completed);
    REQUIRE(p.Close().ok());
  }
  PipelineWriter p(Fixture::Options(4), f.dir);
  Fixture::Open(p, f.dir);
  // H is 7, the last message with outputs; from a start past it, none.
  auto resume = p.Acquire(3, {"in", 3}, 2);
  REQUIRE(resume.has_value());
  CHECK(*resume == 7);
  CHECK(p.Complete(3, 6).value());
  CHECK_FALSE(p.Complete(3, 7).value());
  CHECK(p.Started(3, 7));
  auto again = p.Deliver(3, 7, 1007, Output(3, 7, 2));
  REQUIRE(again.has_value());
  CHECK(again->completed);
  CHECK(again->batches == 0);
  CHECK_FALSE(p.Started(3, 7));
  p.Release(3);
  CHECK(p.Complete(3, 0).error().code() == Code::kInternal);
  auto later = p.Acquire(3, {"in", 3}, 8);
  REQUIRE(later.has_value());
  CHECK(*later == -1);
  // Another source topic's partition 3 is another producer: nothing found.
  auto other = p.Acquire(4, {"in2", 3}, 0);
  REQUIRE(other.has_value());
  CHECK(*other == -1);
}
