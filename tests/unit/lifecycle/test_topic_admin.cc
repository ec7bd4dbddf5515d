// Topic administration (format-spec/layout.md §2.3-§2.6, R80-R84) and the
// units of durations and sizes (mq/units.h).

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/topic.h"
#include "mq/topic_admin.h"
#include "mq/units.h"
#include "test_support.h"

namespace {

using mq::Code;
using mq::DataDir;
using mq::TopicConfig;
using mq::test::Exists;
using mq::test::TempDir;

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

DataDir NewRoot(const TempDir& tmp) {
  auto dir = DataDir::Open(tmp / "d", true);
  REQUIRE(dir);
  return *dir;
}

// Appends one record per key to `topic`'s partition `p`.
void AppendKeys(const DataDir& dir, const std::string& topic, int32_t p,
                const std::vector<std::string>& keys) {
  auto config = dir.ReadTopic(topic);
  REQUIRE(config);
  auto w = mq::PartitionWriter::Open(dir.PartitionDir(topic, p), DataDir::LogConfigFor(*config),
                                     true, nullptr);
  REQUIRE(w);
  mq::BatchBuilder b;
  for (const std::string& k : keys) b.Add({1000, AsBytes(k), AsBytes("v"), {}});
  std::vector<std::byte> bytes;
  REQUIRE(b.Finish(0, &bytes).ok());
  REQUIRE((*w)->Append(bytes).has_value());
  REQUIRE((*w)->Close().ok());
}

}  // namespace

TEST_CASE("units: durations take ms s m h d w, sizes powers of 1024") {
  CHECK(*mq::ParseDurationMs("7d", "x", -1, INT64_MAX) == 604800000);
  CHECK(*mq::ParseDurationMs("500ms", "x", -1, INT64_MAX) == 500);
  CHECK(*mq::ParseDurationMs("90s", "x", -1, INT64_MAX) == 90000);
  CHECK(*mq::ParseDurationMs("2h", "x", -1, INT64_MAX) == 7200000);
  CHECK(*mq::ParseDurationMs("1w", "x", -1, INT64_MAX) == 604800000);
  CHECK(*mq::ParseDurationMs("1234", "x", -1, INT64_MAX) == 1234);
  CHECK(*mq::ParseDurationMs("-1", "x", -1, INT64_MAX) == -1);
  CHECK(*mq::ParseSizeBytes("1GiB", "x", -1, INT64_MAX) == int64_t{1} << 30);
  CHECK(*mq::ParseSizeBytes("64k", "x", -1, INT64_MAX) == 65536);
  CHECK(*mq::ParseSizeBytes("1KB", "x", -1, INT64_MAX) == 1024);
  CHECK(*mq::ParseSizeBytes("3M", "x", -1, INT64_MAX) == 3 << 20);
  CHECK(*mq::ParseSizeBytes("2TiB", "x", -1, INT64_MAX) == int64_t{2} << 40);
  CHECK(*mq::ParseSizeBytes("1kib", "x", -1, INT64_MAX) == 1024);  // sizes: any case
  CHECK(!mq::ParseDurationMs("1D", "x", -1, INT64_MAX));           // durations: as written
}

TEST_CASE("units: a bad unit, a negative value with a unit, overflow and range are refused") {
  auto bad = mq::ParseDurationMs("7x", "retention.ms", -1, INT64_MAX);
  REQUIRE(!bad);
  CHECK(bad.error().code() == Code::kInvalidArgument);
  CHECK_THAT(bad.error().message(), Catch::Contains("retention.ms") && Catch::Contains("\"x\"") &&
                                        Catch::Contains("ms, s, m, h, d, w"));
  CHECK(!mq::ParseDurationMs("-1d", "x", -1, INT64_MAX));
  CHECK(!mq::ParseDurationMs("", "x", -1, INT64_MAX));
  CHECK(!mq::ParseDurationMs("d", "x", -1, INT64_MAX));
  CHECK(!mq::ParseDurationMs("1 d", "x", -1, INT64_MAX));
  CHECK(!mq::ParseSizeBytes("9999999999TiB", "x", -1, INT64_MAX));
  auto range = mq::ParseSizeBytes("3GiB", "segment.bytes", 61, INT32_MAX);
  REQUIRE(!range);
  CHECK_THAT(range.error().message(), Catch::Contains("outside 61..2147483647"));
}

TEST_CASE("R16 config: Set takes units for .ms and .bytes keys, a file does not") {
  TopicConfig c;
  REQUIRE(c.Set("retention.ms", "1d").ok());
  CHECK(c.retention_ms == 86400000);
  REQUIRE(c.Set("segment.bytes", "1MiB").ok());
  CHECK(c.segment_bytes == 1u << 20);
  REQUIRE(c.Set("max.message.bytes", "64k").ok());
  CHECK(c.max_message_bytes == 65536u);
  CHECK(!c.Set("partitions", "2k").ok());  // not a size
  CHECK(!c.Set("segment.bytes", "4GiB").ok());
  auto parsed = TopicConfig::Parse("format.version=1\npartitions=1\nretention.ms=1d\n", "t.conf");
  REQUIRE(!parsed);
  CHECK(parsed.error().code() == Code::kCorruption);
}

TEST_CASE("R16 config: an unknown key lists the valid ones") {
  TopicConfig c;
  mq::Status s = c.Set("retention.mss", "1");
  CHECK(s.code() == Code::kInvalidArgument);
  for (std::string_view k : TopicConfig::KeyNames())
    CHECK_THAT(s.message(), Catch::Contains(std::string(k)));
}

TEST_CASE("topic admin: a summary gives offsets, sizes and segments from the state file") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 3;
  REQUIRE(dir.CreateTopic("t", c).ok());
  AppendKeys(dir, "t", 1, {"a", "b", "c"});
  auto s = mq::SummarizeTopic(dir, "t");
  REQUIRE(s);
  REQUIRE(s->partitions.size() == 3);
  CHECK(s->partitions[0].log_end_offset == 0);
  CHECK(s->partitions[0].segments == 0);
  CHECK(s->partitions[1].log_end_offset == 3);
  CHECK(s->partitions[1].segments == 1);
  CHECK(s->partitions[1].bytes ==
        mq::test::FileSize(dir.PartitionDir("t", 1) + "/00000000000000000000.log"));
  CHECK(s->partitions[1].bytes > 0);
  CHECK(mq::SummarizeTopic(dir, "nope").error().code() == Code::kNotFound);
}

TEST_CASE("R84 effective configuration: each key says default or topic") {
  TopicConfig c;
  c.partitions = 2;
  c.retention_ms = 1000;
  auto e = mq::EffectiveConfig(c);
  REQUIRE(e.size() == TopicConfig::KeyNames().size());
  for (const auto& entry : e) {
    if (entry.key == "retention.ms") {
      CHECK(entry.value == "1000");
      CHECK(entry.source == "topic");
    }
    if (entry.key == "segment.ms") CHECK(entry.source == "default");
  }
}

TEST_CASE("R84 effective configuration: an empty or special value says what it means") {
  TopicConfig c;
  auto meaning = [](const TopicConfig& config, std::string_view key) {
    for (const auto& e : mq::EffectiveConfig(config))
      if (e.key == key) return std::pair(e.value, e.meaning);
    FAIL("no key " << key);
    return std::pair(std::string(), std::string());
  };
  CHECK(meaning(c, "retention.protect") ==
        std::pair<std::string, std::string>("", "none: no group"));
  CHECK(meaning(c, "retention.protect.max.ms") ==
        std::pair<std::string, std::string>("-1", "no limit"));
  CHECK(meaning(c, "segment.bytes").second.empty());
  REQUIRE(c.Set("retention.protect", "*").ok());
  REQUIRE(c.Set("retention.bytes", "-1").ok());
  CHECK(meaning(c, "retention.protect").second == "every group");
  CHECK(meaning(c, "retention.bytes").second == "no limit");
  REQUIRE(c.Set("retention.protect", "slow,late").ok());
  REQUIRE(c.Set("retention.ms", "1d").ok());
  CHECK(meaning(c, "retention.protect").second.empty());
  CHECK(meaning(c, "retention.ms").second.empty());
  CHECK(mq::ConfigValueMeaning("retention.protect", "-1").empty());
  CHECK(mq::ConfigValueMeaning("segment.ms", "-1").empty());
}

TEST_CASE("R84 alter: a valid change replaces the .conf, an invalid one changes nothing") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  REQUIRE(dir.CreateTopic("t", TopicConfig{}).ok());
  const std::string conf = tmp / "d/topics/t.conf";
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  bool changed = false;
  auto ok = mq::AlterTopicConfig(dir, "t", Pairs{{"retention.ms", "1d"}}, {}, &changed);
  REQUIRE(ok);
  CHECK(changed);
  CHECK(dir.ReadTopic("t")->retention_ms == 86400000);
  const auto before = mq::test::ReadFile(conf);
  for (const Pairs& bad :
       {Pairs{{"retention.mss", "1"}}, Pairs{{"segment.bytes", "1"}},
        Pairs{{"min.insync.replicas", "2"}}, Pairs{{"retention.ms", "1"}, {"retention.ms", "2"}},
        Pairs{{"partitions", "4"}}, Pairs{{"cluster", "/x"}},
        Pairs{{"retention.ms", "2d"}, {"segment.bytes", "x"}}}) {
    auto r = mq::AlterTopicConfig(dir, "t", bad, {});
    REQUIRE(!r);
    CHECK(r.error().code() == Code::kInvalidArgument);
    CHECK(mq::test::ReadFile(conf) == before);
  }
  const std::vector<std::string> reset{"retention.ms"};
  REQUIRE(mq::AlterTopicConfig(dir, "t", Pairs{}, reset));
  CHECK(dir.ReadTopic("t")->retention_ms == TopicConfig{}.retention_ms);
  CHECK(mq::AlterTopicConfig(dir, "none", Pairs{{"retention.ms", "1"}}, {}).error().code() ==
        Code::kNotFound);
}

TEST_CASE("R80 partition directories: a count that disagrees with them is corruption") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 2;
  REQUIRE(dir.CreateTopic("t", c).ok());
  CHECK(mq::CheckPartitionDirs(dir, "t", c).ok());
  c.partitions = 4;  // as a hand edit of partitions= would say
  mq::Status s = mq::CheckPartitionDirs(dir, "t", c);
  CHECK(s.code() == Code::kCorruption);
  CHECK_THAT(s.message(),
             Catch::Contains("R80") && Catch::Contains("t-2, t-3") && Catch::Contains("t.conf"));
}

TEST_CASE("R82 partition increase: directories first, then the count, never down") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 2;
  REQUIRE(dir.CreateTopic("t", c).ok());
  REQUIRE(mq::IncreasePartitions(dir, "t", 5).ok());
  CHECK(dir.ReadTopic("t")->partitions == 5);
  for (int p = 0; p < 5; ++p) CHECK(Exists(dir.PartitionDir("t", p)));
  CHECK(mq::CheckPartitionDirs(dir, "t", *dir.ReadTopic("t")).ok());
  mq::Status down = mq::IncreasePartitions(dir, "t", 3);
  CHECK(down.code() == Code::kInvalidArgument);
  CHECK_THAT(down.message(), Catch::Contains("new one"));
  CHECK(dir.ReadTopic("t")->partitions == 5);
  CHECK(mq::IncreasePartitions(dir, "t", 5).ok());
  CHECK(mq::IncreasePartitions(dir, "t", 10001).code() == Code::kInvalidArgument);
}

TEST_CASE("R82 key moves: rehashing the recent keys with murmur2") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 1;
  REQUIRE(dir.CreateTopic("t", c).ok());
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back(fmt::format("key{}", i));
  keys.push_back("key0");  // counted once
  AppendKeys(dir, "t", 0, keys);
  uint64_t expected = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string k = fmt::format("key{}", i);
    if (mq::PartitionForKey(AsBytes(k), 3) != 0) ++expected;
  }
  auto m = mq::CountMovingKeys(dir, "t", c, 3, 1000);
  REQUIRE(m);
  CHECK(m->records == 101);
  CHECK(m->keys == 100);
  CHECK(m->moved == expected);
  CHECK(m->moved > 0);
  auto last = mq::CountMovingKeys(dir, "t", c, 3, 10);
  REQUIRE(last);
  CHECK(last->records == 10);
}

TEST_CASE("R83 R85 delete: refused while a writer has a partition open, unless forced") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 2;
  REQUIRE(dir.CreateTopic("t", c).ok());
  AppendKeys(dir, "t", 0, {"a"});
  {
    // R85: an open writer holds its partition directory's flock shared.
    auto w = mq::PartitionWriter::Open(dir.PartitionDir("t", 1), DataDir::LogConfigFor(c), false,
                                       nullptr);
    REQUIRE(w);
    auto holders = mq::FindTopicHolders(dir, "t");
    REQUIRE(holders);
    CHECK(holders->written == std::vector<int32_t>{1});
    mq::Status busy = mq::DeleteTopic(dir, "t", false);
    CHECK(busy.code() == Code::kBusy);
    CHECK_THAT(busy.message(), Catch::Contains("partition 1"));
    CHECK(dir.ReadTopic("t"));
    CHECK(Exists(dir.PartitionDir("t", 0) + "/00000000000000000000.log"));
    REQUIRE(mq::DeleteTopic(dir, "t", true).ok());
    (void)(*w)->Close();
  }
  CHECK(mq::FindTopicHolders(dir, "t").error().code() == Code::kNotFound);
  CHECK(dir.ReadTopic("t").error().code() == Code::kNotFound);
  CHECK(!Exists(dir.PartitionDir("t", 0)));
  CHECK(!Exists(dir.PartitionDir("t", 1)));
  CHECK(mq::test::ListDir(tmp / "d/deleted").empty());
  CHECK(mq::CheckTopicExists(dir, "t").code() == Code::kNotFound);
}

TEST_CASE("R83 a data directory moved away from its path is not a deleted topic") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 1;
  REQUIRE(dir.CreateTopic("t", c).ok());
  CHECK(mq::CheckTopicExists(dir, "t").ok());
  // The old leader's root moved away (a lost host) or made unreadable: a
  // follower of it keeps waiting, as it did before deletions existed.
  REQUIRE(::rename((tmp / "d").c_str(), (tmp / "d.away").c_str()) == 0);
  CHECK(mq::CheckTopicExists(dir, "t").ok());
  REQUIRE(::rename((tmp / "d.away").c_str(), (tmp / "d").c_str()) == 0);
  REQUIRE(::unlink((tmp / "d/topics/t.conf").c_str()) == 0);
  CHECK(mq::CheckTopicExists(dir, "t").code() == Code::kNotFound);
}

TEST_CASE("R83 a topic deleted and created again is not the topic a follower opened") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 2;
  REQUIRE(dir.CreateTopic("t", c).ok());
  AppendKeys(dir, "t", 1, {"a"});
  auto opened = mq::ReadTopicIdentity(dir, "t", 1);
  REQUIRE(opened);
  CHECK(opened->partition == 1);
  CHECK(mq::CheckTopicExists(dir, "t", *opened).ok());
  // A follower holds its partition's directory open, as a reader does.
  const int held = ::open(dir.PartitionDir("t", 1).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(held >= 0);
  // Another change of the topic (its configuration altered) is the same topic.
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  REQUIRE(mq::AlterTopicConfig(dir, "t", Pairs{{"retention.ms", "1000"}}, {}));
  CHECK(mq::CheckTopicExists(dir, "t", *opened).ok());
  REQUIRE(mq::DeleteTopic(dir, "t", true).ok());
  REQUIRE(dir.CreateTopic("t", c).ok());
  // Without the identity only the name is checked: it exists.
  CHECK(mq::CheckTopicExists(dir, "t").ok());
  mq::Status s = mq::CheckTopicExists(dir, "t", *opened);
  CHECK(s.code() == Code::kNotFound);
  CHECK_THAT(s.message(), Catch::Contains("deleted and created again"));
  CHECK_THAT(s.message(), Catch::Contains("t-1"));
  // The new topic's own identity is its own.
  auto now = mq::ReadTopicIdentity(dir, "t", 1);
  REQUIRE(now);
  CHECK(mq::CheckTopicExists(dir, "t", *now).ok());
  ::close(held);
}

TEST_CASE("R83 delete: an interrupted deletion is finished, and a new topic never adopts it") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  TopicConfig c;
  c.partitions = 2;
  REQUIRE(dir.CreateTopic("t", c).ok());
  AppendKeys(dir, "t", 0, {"a", "b"});
  // A crash right after the commit: the marker holds the .conf, the
  // partition directories are still at the root.
  REQUIRE(::mkdir((tmp / "d/deleted").c_str(), 0750) == 0);
  REQUIRE(::rename((tmp / "d/topics/t.conf").c_str(), (tmp / "d/deleted/t.conf").c_str()) == 0);
  CHECK(dir.ReadTopic("t").error().code() == Code::kNotFound);
  // Creating the name again finishes the deletion first: the new topic's
  // partition 0 is empty.
  REQUIRE(dir.CreateTopic("t", c).ok());
  CHECK(!Exists(tmp / "d/deleted/t.conf"));
  CHECK(!Exists(dir.PartitionDir("t", 0) + "/00000000000000000000.log"));
  auto s = mq::SummarizeTopic(dir, "t");
  REQUIRE(s);
  CHECK(s->partitions[0].log_end_offset == 0);
  // A marker with its directories half moved.
  AppendKeys(dir, "t", 1, {"x"});
  REQUIRE(::rename((tmp / "d/topics/t.conf").c_str(), (tmp / "d/deleted/t.conf").c_str()) == 0);
  REQUIRE(::rename(dir.PartitionDir("t", 1).c_str(), (tmp / "d/deleted/t-1").c_str()) == 0);
  auto finished = mq::FinishDeletions(dir);
  REQUIRE(finished);
  CHECK(*finished == std::vector<std::string>{"t"});
  CHECK(!Exists(dir.PartitionDir("t", 0)));
  CHECK(mq::test::ListDir(tmp / "d/deleted").empty());
  CHECK(mq::FinishDeletions(dir)->empty());
}

TEST_CASE("R81 admin lock: two processes' changes of one topic both land") {
  TempDir tmp;
  DataDir dir = NewRoot(tmp);
  REQUIRE(dir.CreateTopic("t", TopicConfig{}).ok());
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  constexpr int kRounds = 30;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    bool ok = true;
    for (int i = 1; i <= kRounds; ++i)
      ok = ok && mq::AlterTopicConfig(dir, "t", Pairs{{"segment.ms", fmt::format("{}", i)}}, {})
                     .has_value();
    ::_exit(ok ? 0 : 1);
  }
  for (int i = 1; i <= kRounds; ++i)
    REQUIRE(mq::AlterTopicConfig(dir, "t", Pairs{{"retention.ms", fmt::format("{}", i)}}, {}));
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  auto c = dir.ReadTopic("t");
  REQUIRE(c);
  CHECK(c->retention_ms == kRounds);
  CHECK(c->segment_ms == kRounds);
}
