// Topic configuration (R16), the data directory (R18), and Kafka's key
// partitioner.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "mq/topic.h"

namespace {

namespace fs = std::filesystem;

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// A private temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mq-topic-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

mq::Status ParseStatus(std::string_view text) {
  return mq::TopicConfig::Parse(text, "t.conf").status();
}

constexpr std::string_view kMinimal = "format.version=1\npartitions=3\n";

// kMinimal followed by `more` (built by append: g++ 12 warns falsely,
// -Warray-bounds, on a temporary std::string + a literal).
std::string Minimal(std::string_view more) {
  std::string s(kMinimal);
  s.append(more);
  return s;
}

}  // namespace

// ---- R16 topic configuration -------------------------------------------

TEST_CASE("R16 config: Serialize then Parse gives back every field") {
  mq::TopicConfig c;
  c.partitions = 12;
  c.replication_factor = 3;
  c.min_insync_replicas = 2;
  c.retention_ms = -1;
  c.retention_bytes = 1ll << 40;
  c.segment_bytes = 1 << 20;
  c.segment_ms = 3600000;
  c.index_interval_bytes = 0;
  c.max_message_bytes = 4096;
  c.cleanup_policy = mq::CleanupPolicy::kCompact;
  auto parsed = mq::TopicConfig::Parse(c.Serialize(), "t.conf");
  REQUIRE(parsed.has_value());
  CHECK(*parsed == c);
  CHECK(parsed->Serialize() == c.Serialize());
}

TEST_CASE("R16 config: the serialized text is byte-exact") {
  mq::TopicConfig c;
  c.partitions = 3;
  CHECK(c.Serialize() ==
        "# mq topic configuration (format-spec/layout.md section 2)\n"
        "format.version=1\n"
        "partitions=3\n"
        "replication.factor=1\n"
        "min.insync.replicas=1\n"
        "retention.ms=604800000\n"
        "retention.bytes=-1\n"
        "segment.bytes=1073741824\n"
        "segment.ms=604800000\n"
        "index.interval.bytes=4096\n"
        "max.message.bytes=1048588\n"
        "cleanup.policy=delete\n");
}

TEST_CASE(
    "R16 config: absent keys take their defaults, and comments, blanks and spaces are ignored") {
  auto c = mq::TopicConfig::Parse(
      "# a comment\n\n  format.version = 1\r\npartitions=3\n\t# indented comment\n"
      "segment.bytes= 2048 \n",
      "t.conf");
  REQUIRE(c.has_value());
  CHECK(c->partitions == 3);
  CHECK(c->segment_bytes == 2048);
  CHECK(c->replication_factor == mq::TopicConfig{}.replication_factor);
  CHECK(c->retention_ms == mq::TopicConfig{}.retention_ms);
}

TEST_CASE("R16 config: an unknown key names file, line and key") {
  std::string text(kMinimal);
  text += "retention.hours=5\n";
  auto s = ParseStatus(text);
  CHECK(s.code() == mq::Code::kCorruption);
  CHECK(s.rule() == "R16");
  CHECK(s.file() == "t.conf");
  CHECK(s.position() == kMinimal.size());
  CHECK_THAT(s.message(), Catch::Contains("line 3") && Catch::Contains("retention.hours") &&
                              Catch::Contains("unknown key"));
}

TEST_CASE("R16 config: a value that is not a number is refused") {
  for (const char* bad :
       {"partitions=three", "partitions=", "partitions=+3", "partitions=3x", "partitions=0x10",
        "partitions=3.0", "partitions=9999999999999999999999"}) {
    INFO(bad);
    auto s = ParseStatus(std::string("format.version=1\n") + bad + "\n");
    CHECK(s.code() == mq::Code::kCorruption);
    CHECK_THAT(s.message(), Catch::Contains("line 2") && Catch::Contains("partitions"));
  }
  auto policy = ParseStatus(Minimal("cleanup.policy=compact,delete\n"));
  CHECK_THAT(policy.message(), Catch::Contains("cleanup.policy"));
}

TEST_CASE("R16 config: values outside their range are refused") {
  for (const char* bad :
       {"partitions=0", "partitions=10001", "replication.factor=0", "retention.ms=-2",
        "retention.bytes=-2", "segment.bytes=60", "segment.bytes=2147483648", "segment.ms=0",
        "index.interval.bytes=-1", "max.message.bytes=1073741825", "min.insync.replicas=0"}) {
    INFO(bad);
    const std::string line(bad);
    const std::string key = line.substr(0, line.find('='));
    std::string text =
        line.starts_with("partitions") ? "format.version=1\n" : "format.version=1\npartitions=1\n";
    auto s = ParseStatus(text + line + "\n");
    CHECK(s.code() == mq::Code::kCorruption);
    CHECK_THAT(s.message(), Catch::Contains(key) && Catch::Contains("expected an integer from"));
  }
  CHECK(ParseStatus(Minimal("segment.bytes=2147483647\nretention.ms=-1\n")).ok());
}

TEST_CASE("R16 config: partitions and format.version are required") {
  auto no_partitions = ParseStatus("format.version=1\nsegment.bytes=4096\n");
  CHECK(no_partitions.code() == mq::Code::kCorruption);
  CHECK_THAT(no_partitions.message(), Catch::Contains("missing key partitions"));
  auto no_version = ParseStatus("partitions=1\n");
  CHECK_THAT(no_version.message(), Catch::Contains("missing key format.version"));
  CHECK(ParseStatus("").code() == mq::Code::kCorruption);
}

TEST_CASE("R16 config: a newer format.version is unsupported, not corrupt") {
  auto s = ParseStatus("format.version=2\npartitions=1\n");
  CHECK(s.code() == mq::Code::kUnsupported);
  CHECK(ParseStatus("format.version=0\npartitions=1\n").code() == mq::Code::kCorruption);
}

TEST_CASE("R16 config: duplicate keys and lines without = are refused") {
  CHECK_THAT(ParseStatus(Minimal("partitions=4\n")).message(), Catch::Contains("given twice"));
  auto s = ParseStatus(Minimal("segment.bytes\n"));
  CHECK(s.code() == mq::Code::kCorruption);
  CHECK_THAT(s.message(), Catch::Contains("line 3: expected key=value"));
  CHECK_THAT(ParseStatus(Minimal("=5\n")).message(), Catch::Contains("expected key=value"));
}

TEST_CASE("R16 config: min.insync.replicas may not exceed replication.factor") {
  auto s = ParseStatus(Minimal("replication.factor=2\nmin.insync.replicas=3\n"));
  CHECK(s.code() == mq::Code::kCorruption);
  CHECK_THAT(s.message(), Catch::Contains("min.insync.replicas=3"));
}

TEST_CASE("R16 config: an oversized file is refused before parsing") {
  std::string text(kMinimal);
  text.append(mq::TopicConfig::kMaxFileBytes, '#');
  CHECK(ParseStatus(text).code() == mq::Code::kTooLarge);
}

TEST_CASE("R16 config: Set applies one override and names a bad key") {
  mq::TopicConfig c;
  REQUIRE(c.Set("retention.ms", "1000").ok());
  CHECK(c.retention_ms == 1000);
  REQUIRE(c.Set("cleanup.policy", "compact").ok());
  CHECK(c.cleanup_policy == mq::CleanupPolicy::kCompact);
  auto unknown = c.Set("retention.minutes", "1");
  CHECK(unknown.code() == mq::Code::kInvalidArgument);
  CHECK_THAT(unknown.message(), Catch::Contains("retention.minutes"));
  CHECK(c.Set("segment.bytes", "1").code() == mq::Code::kInvalidArgument);
  CHECK(c.segment_bytes == mq::TopicConfig{}.segment_bytes);  // unchanged on error
  CHECK(c.Set("format.version", "1").code() == mq::Code::kInvalidArgument);
}

// ---- The data directory ------------------------------------------------

TEST_CASE("data dir: create makes a 0750 directory with meta.properties and topics/") {
  TempDir tmp;
  const std::string root = tmp / "data";
  auto dir = mq::DataDir::Open(root, true);
  REQUIRE(dir.has_value());
  struct stat st;
  REQUIRE(::stat(root.c_str(), &st) == 0);
  CHECK((st.st_mode & 0022) == 0);
  CHECK((st.st_mode & 0700) == 0700);
  // format-spec/layout.md §1.2, byte for byte.
  CHECK(Slurp(root + "/meta.properties") ==
        "# mq data directory (format-spec/layout.md section 1)\nlayout.version=2\n");
  CHECK(fs::is_directory(root + "/topics"));
  // Reopening without create works; a missing directory does not.
  CHECK(mq::DataDir::Open(root, false).has_value());
  CHECK(mq::DataDir::Open(tmp / "absent", false).error().code() == mq::Code::kNotFound);
}

TEST_CASE("data dir: a group- or world-writable directory is refused with the reason") {
  TempDir tmp;
  const std::string root = tmp / "data";
  REQUIRE(mq::DataDir::Open(root, true).has_value());
  REQUIRE(::chmod(root.c_str(), 0770) == 0);
  auto group = mq::DataDir::Open(root, false);
  REQUIRE_FALSE(group.has_value());
  CHECK(group.error().code() == mq::Code::kPermission);
  CHECK_THAT(group.error().message(), Catch::Contains("group-writable") && Catch::Contains("0770"));
  REQUIRE(::chmod(root.c_str(), 0757) == 0);
  CHECK_THAT(mq::DataDir::Open(root, false).error().message(), Catch::Contains("world-writable"));
}

TEST_CASE("R18 data dir: a directory that is not an mq data directory is refused") {
  TempDir tmp;
  const std::string root = tmp / "plain";
  REQUIRE(::mkdir(root.c_str(), 0750) == 0);
  CHECK(mq::DataDir::Open(root, false).error().code() == mq::Code::kNotFound);
  Spit(root + "/notes.txt", "hello");
  auto adopt = mq::DataDir::Open(root, true);
  REQUIRE_FALSE(adopt.has_value());
  CHECK_THAT(adopt.error().message(), Catch::Contains("not empty"));
  CHECK_FALSE(fs::exists(root + "/meta.properties"));
}

TEST_CASE("R18 data dir: a bad or newer layout.version is refused") {
  TempDir tmp;
  const std::string root = tmp / "data";
  REQUIRE(mq::DataDir::Open(root, true).has_value());
  Spit(root + "/meta.properties",
       fmt::format("layout.version={}\n", mq::DataDir::kLayoutVersion + 1));
  CHECK(mq::DataDir::Open(root, false).error().code() == mq::Code::kUnsupported);
  Spit(root + "/meta.properties", "layout.version=one\n");
  auto bad = mq::DataDir::Open(root, false);
  CHECK(bad.error().code() == mq::Code::kCorruption);
  CHECK(bad.error().rule() == "R18");
  Spit(root + "/meta.properties", "# nothing\n");
  CHECK(mq::DataDir::Open(root, false).error().rule() == "R18");
}

TEST_CASE("data dir: CreateTopic writes the .conf and one directory per partition") {
  TempDir tmp;
  auto dir = mq::DataDir::Open(tmp / "data", true);
  REQUIRE(dir.has_value());
  mq::TopicConfig c;
  c.partitions = 3;
  c.segment_bytes = 1 << 20;
  REQUIRE(dir->CreateTopic("orders", c).ok());
  CHECK(Slurp(tmp / "data/topics/orders.conf") == c.Serialize());
  for (int p = 0; p < 3; ++p) CHECK(fs::is_directory(dir->PartitionDir("orders", p)));
  CHECK_FALSE(fs::exists(dir->PartitionDir("orders", 3)));
  CHECK(dir->PartitionDir("orders", 2) == tmp / "data/orders-2");
  auto back = dir->ReadTopic("orders");
  REQUIRE(back.has_value());
  CHECK(*back == c);
  // No staging file is left behind.
  const auto entries =
      std::distance(fs::directory_iterator(tmp / "data/topics"), fs::directory_iterator());
  CHECK(entries == 1);
}

TEST_CASE("data dir: CreateTopic is idempotent for the same partition count only") {
  TempDir tmp;
  auto dir = mq::DataDir::Open(tmp / "data", true);
  REQUIRE(dir.has_value());
  mq::TopicConfig c;
  c.partitions = 2;
  REQUIRE(dir->CreateTopic("t", c).ok());
  CHECK(dir->CreateTopic("t", c).ok());
  c.partitions = 4;
  auto s = dir->CreateTopic("t", c);
  CHECK(s.code() == mq::Code::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("2 partitions, not 4"));
  CHECK(dir->ReadTopic("t")->partitions == 2);
  CHECK_FALSE(fs::exists(dir->PartitionDir("t", 2)));
}

TEST_CASE("data dir: of racing creators with different partition counts exactly one count wins") {
  TempDir tmp;
  auto dir = mq::DataDir::Open(tmp / "data", true);
  REQUIRE(dir.has_value());
  constexpr int kThreads = 8;
  std::vector<mq::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      mq::TopicConfig c;
      c.partitions = 2 + i % 2;
      results[i] = dir->CreateTopic("raced", c);
    });
  }
  for (auto& t : threads) t.join();
  auto winner = dir->ReadTopic("raced");
  REQUIRE(winner.has_value());
  for (int i = 0; i < kThreads; ++i) {
    INFO(results[i].message());
    if (2 + i % 2 == winner->partitions) {
      CHECK(results[i].ok());
    } else {
      CHECK(results[i].code() == mq::Code::kInvalidArgument);
    }
  }
  CHECK(*dir->ListTopics() == std::vector<std::string>{"raced"});
}

TEST_CASE("data dir: racing creators of one new data directory all open it") {
  for (int round = 0; round < 20; ++round) {
    TempDir tmp;
    constexpr int kThreads = 6;
    std::vector<mq::Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] { results[i] = mq::DataDir::Open(tmp / "data", true).status(); });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : results) {
      INFO("round " << round << ": " << r.message());
      CHECK(r.ok());
    }
    CHECK(mq::DataDir::Open(tmp / "data", false).has_value());
  }
}

TEST_CASE("R12 data dir: topic names are validated before touching the disk") {
  TempDir tmp;
  auto dir = mq::DataDir::Open(tmp / "data", true);
  REQUIRE(dir.has_value());
  CHECK(dir->CreateTopic("../escape", mq::TopicConfig{}).code() == mq::Code::kInvalidArgument);
  CHECK(dir->ReadTopic("a/b").error().code() == mq::Code::kInvalidArgument);
  CHECK_FALSE(fs::exists(tmp / "escape-0"));
  mq::TopicConfig bad;
  bad.partitions = 0;
  CHECK(dir->CreateTopic("zero", bad).code() == mq::Code::kInvalidArgument);
}

TEST_CASE(
    "data dir: ReadTopic of a missing topic is kNotFound, and a corrupt .conf names its file") {
  TempDir tmp;
  auto dir = mq::DataDir::Open(tmp / "data", true);
  REQUIRE(dir.has_value());
  auto missing = dir->ReadTopic("nope");
  CHECK(missing.error().code() == mq::Code::kNotFound);
  CHECK_THAT(missing.error().message(), Catch::Contains("nope"));
  Spit(tmp / "data/topics/broken.conf", "format.version=1\npartitions=x\n");
  auto broken = dir->ReadTopic("broken");
  CHECK(broken.error().rule() == "R16");
  CHECK(broken.error().file() == tmp / "data/topics/broken.conf");
}

TEST_CASE("data dir: ListTopics lists valid .conf names, sorted, and ignores the rest") {
  TempDir tmp;
  auto dir = mq::DataDir::Open(tmp / "data", true);
  REQUIRE(dir.has_value());
  REQUIRE(dir->ListTopics()->empty());
  REQUIRE(dir->CreateTopic("zeta", mq::TopicConfig{}).ok());
  REQUIRE(dir->CreateTopic("alpha", mq::TopicConfig{}).ok());
  Spit(tmp / "data/topics/create-1-0.staging", "x");
  Spit(tmp / "data/topics/.conf", "x");
  Spit(tmp / "data/topics/bad name.conf", "x");
  auto topics = dir->ListTopics();
  REQUIRE(topics.has_value());
  CHECK(*topics == std::vector<std::string>{"alpha", "zeta"});
}

TEST_CASE("data dir: LogConfigFor carries the segment and index settings") {
  mq::TopicConfig c;
  c.segment_bytes = 1 << 16;
  c.segment_ms = 1000;
  c.index_interval_bytes = 128;
  c.max_message_bytes = 256 << 20;
  mq::LogConfig log = mq::DataDir::LogConfigFor(c);
  CHECK(log.segment_bytes == c.segment_bytes);
  CHECK(log.segment_ms == 1000);
  CHECK(log.index_interval_bytes == 128);
  CHECK(log.limits.max_batch_bytes >= c.max_message_bytes);
  c.max_message_bytes = 100;  // lowering it never shrinks what readers accept
  CHECK(mq::DataDir::LogConfigFor(c).limits.max_batch_bytes == mq::DecodeLimits{}.max_batch_bytes);
}

// ---- Kafka's key partitioner -------------------------------------------

TEST_CASE("murmur2: Kafka's published values") {
  // From Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/
  // UtilsTest.java, testMurmur2.
  CHECK(mq::Murmur2(Bytes("21")) == -973932308);
  CHECK(mq::Murmur2(Bytes("foobar")) == -790332482);
  CHECK(mq::Murmur2(Bytes("a-little-bit-long-string")) == -985981536);
  CHECK(mq::Murmur2(Bytes("a-little-bit-longer-string")) == -1486304829);
  CHECK(mq::Murmur2(Bytes("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8")) == -58897971);
  CHECK(mq::Murmur2(Bytes("abc")) == 479470107);
}

TEST_CASE("murmur2: librdkafka's values, checked there against the Java client") {
  // From librdkafka src/rdmurmur2.c, unittest_murmur2(): every tail length
  // (0-3 bytes), short and long keys.
  struct Case {
    std::string_view key;
    uint32_t hash;
  };
  const std::string_view unaligned = "PreAmbleWillBeRemoved,ThePrePartThatIs";
  const Case cases[] = {
      {"kafka", 0xd067cf64},
      {"giberish123456789", 0x8f552b0c},
      {"1234", 0x9fc97b14},
      {"234", 0xe7c009ca},
      {"34", 0x873930da},
      {"4", 0x5a4b5ca1},
      {unaligned, 0x78424f1c},
      {unaligned.substr(1), 0x4a62b377},
      {unaligned.substr(2), 0xe0e4e09e},
      {unaligned.substr(3), 0x62b8b43f},
      {"", 0x106e08d9},
  };
  for (const Case& c : cases) {
    INFO(c.key);
    CHECK(static_cast<uint32_t>(mq::Murmur2(Bytes(c.key))) == c.hash);
  }
}

TEST_CASE("murmur2: the partition clears the sign bit (Kafka's toPositive), not abs()") {
  // murmur2("21") = -973932308; & 0x7fffffff = 1173551340, so partition 0 of
  // 10 (abs() would give 8).
  CHECK(mq::PartitionForKey(Bytes("21"), 10) == 0);
  CHECK(mq::PartitionForKey(Bytes("foobar"), 10) == 6);  // 1357151166 % 10
  CHECK(mq::PartitionForKey(Bytes("abc"), 7) == 4);      // 479470107 % 7
  CHECK(mq::PartitionForKey(Bytes("abc"), 1) == 0);
  CHECK(mq::PartitionForKey(Bytes("abc"), 0) == -1);
}

TEST_CASE("murmur2: keys spread evenly over partitions") {
  constexpr int kPartitions = 8;
  constexpr int kKeys = 16000;
  std::vector<int> counts(kPartitions, 0);
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "user-" + std::to_string(i);
    const int32_t p = mq::PartitionForKey(Bytes(key), kPartitions);
    REQUIRE(p >= 0);
    REQUIRE(p < kPartitions);
    counts[p]++;
  }
  for (int c : counts) {
    CHECK(c > kKeys / kPartitions * 9 / 10);
    CHECK(c < kKeys / kPartitions * 11 / 10);
  }
}

// ---- Layout version 2 (layout.md §1.6) and replicated topics (§2.2) -------

TEST_CASE("R18 layout version: a root at 1 opens and upgrades to 2, a newer root is refused") {
  TempDir tmp;
  const std::string root = tmp / "data";
  REQUIRE(mq::DataDir::Open(root, true).has_value());
  Spit(root + "/meta.properties",
       "# mq data directory (format-spec/layout.md section 1)\n"
       "layout.version=1\n");
  auto old = mq::DataDir::Open(root, false);
  REQUIRE(old.has_value());
  CHECK(old->layout_version() == 1);
  REQUIRE(old->UpgradeLayout().ok());
  CHECK(Slurp(root + "/meta.properties") ==
        "# mq data directory (format-spec/layout.md section 1)\nlayout.version=2\n");
  CHECK(mq::DataDir::Open(root, false)->layout_version() == 2);
  CHECK_FALSE(fs::exists(root + "/meta.properties.tmp"));
  // A tool that knows only layout 1 refuses a layout-2 root, and this one a
  // root newer than it knows.
  auto v1 = mq::CheckLayoutVersion(Slurp(root + "/meta.properties"), "meta.properties", 1);
  REQUIRE_FALSE(v1.has_value());
  CHECK(v1.error().code() == mq::Code::kUnsupported);
  CHECK_THAT(v1.error().message(), Catch::Contains("layout.version 2 is newer"));
  Spit(root + "/meta.properties",
       fmt::format("layout.version={}\n", mq::DataDir::kLayoutVersion + 1));
  auto newer = mq::DataDir::Open(root, true);
  REQUIRE_FALSE(newer.has_value());
  CHECK(newer.error().code() == mq::Code::kUnsupported);
}

TEST_CASE("R16 topic configuration: cluster and replica.id link a replicated topic") {
  mq::TopicConfig c;
  c.partitions = 2;
  c.cluster = "/srv/mq/cluster";
  c.replica_id = 1;
  const std::string text = c.Serialize();
  CHECK(text ==
        "# mq topic configuration (format-spec/layout.md section 2)\n"
        "format.version=1\n"
        "partitions=2\n"
        "retention.ms=604800000\n"
        "retention.bytes=-1\n"
        "segment.bytes=1073741824\n"
        "segment.ms=604800000\n"
        "index.interval.bytes=4096\n"
        "max.message.bytes=1048588\n"
        "cleanup.policy=delete\n"
        "cluster=/srv/mq/cluster\n"
        "replica.id=1\n");
  auto back = mq::TopicConfig::Parse(text, "t.conf");
  REQUIRE(back.has_value());
  CHECK(*back == c);
  // One source of truth: replication.factor with cluster= is refused.
  const std::string with_rf =
      "format.version=1\npartitions=2\nreplication.factor=3\n"
      "cluster=/c\nreplica.id=0\n";
  auto rf = mq::TopicConfig::Parse(with_rf, "t.conf");
  REQUIRE_FALSE(rf.has_value());
  CHECK(rf.error().rule() == "R16");
  CHECK(rf.error().position() == with_rf.find("replication.factor"));
  auto min = mq::TopicConfig::Parse(
      "format.version=1\npartitions=2\ncluster=/c\nreplica.id=0\nmin.insync.replicas=1\n", "t");
  CHECK(min.error().rule() == "R16");
  // Both or neither; an absolute cluster path.
  CHECK(
      mq::TopicConfig::Parse("format.version=1\npartitions=2\ncluster=/c\n", "t").error().rule() ==
      "R16");
  CHECK(mq::TopicConfig::Parse("format.version=1\npartitions=2\nreplica.id=0\n", "t")
            .error()
            .rule() == "R16");
  CHECK(mq::TopicConfig::Parse("format.version=1\npartitions=2\ncluster=rel\nreplica.id=0\n", "t")
            .error()
            .rule() == "R16");
  CHECK(mq::TopicConfig::Parse("format.version=1\npartitions=2\ncluster=/c\nreplica.id=-1\n", "t")
            .error()
            .rule() == "R16");
  // Without cluster, rf and min.isr stay in the file as before.
  CHECK(mq::TopicConfig::Parse("format.version=1\npartitions=2\nreplication.factor=3\n", "t")
            .has_value());
}
