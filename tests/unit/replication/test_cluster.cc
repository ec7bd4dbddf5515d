// The cluster state (format-spec/cluster.md §18): one test per rule
// (R41-R46), the spec's example byte for byte, round trips of random states,
// hostile files, and the compare-and-swap across processes.
//
// Seeds: MQ_TEST_SEED=<n> repeats one seed of the randomized tests; each
// prints the seed it runs.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "format/format.h"
#include "mq/cluster.h"
#include "mq/crc32c.h"
#include "mq/lock.h"
#include "test_support.h"

namespace {

using mq::test::TempDir;
namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  const std::vector<std::byte> bytes = mq::test::ReadFile(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void Spit(const std::string& path, std::string_view text) {
  const auto bytes = std::as_bytes(std::span<const char>(text.data(), text.size()));
  mq::test::WriteFile(path, std::vector<std::byte>(bytes.begin(), bytes.end()));
}

// The body's bytes with a correct crc32c line after them (R41), so a test
// reaches the rule behind the checksum.
std::string Signed(const std::string& body) {
  const uint32_t crc = mq::Crc32c(std::as_bytes(std::span<const char>(body.data(), body.size())));
  return body + fmt::format("crc32c {:08x}\n", crc);
}

// The example of cluster.md §18.2 without its crc line.
const std::string kExampleBody =
    "mq-cluster-state 1\n"
    "replica 0 /srv/mq/r0\n"
    "replica 1 /srv/mq/r1\n"
    "replica 2 /srv/mq/r2\n"
    "topic orders 2 3 2 30000\n"
    "partition orders 0 0,1,2 0 0 0 0,1,2\n"
    "partition orders 1 1,2,0 1 0 0 1,2,0\n";

mq::ClusterState Example() {
  mq::ClusterState s;
  s.replicas = {{0, "/srv/mq/r0"}, {1, "/srv/mq/r1"}, {2, "/srv/mq/r2"}};
  s.topics = {{"orders", 2, 3, 2, 30000}};
  s.partitions = {{"orders", 0, {0, 1, 2}, 0, 0, 0, {0, 1, 2}},
                  {"orders", 1, {1, 2, 0}, 1, 0, 0, {1, 2, 0}}};
  return s;
}

// Parses a body (re-signed) and expects corruption under `rule` at `pos`.
void ExpectBreach(const std::string& body, const char* rule, uint64_t pos) {
  auto r = mq::ClusterState::Parse(Signed(body), "cluster-state");
  INFO(body);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == mq::Code::kCorruption);
  CHECK(r.error().rule() == rule);
  CHECK(r.error().position() == pos);
  CHECK(r.error().file() == "cluster-state");
}

// `body` with the first `from` replaced by `to`.
std::string Edit(std::string body, const std::string& from, const std::string& to) {
  const size_t at = body.find(from);
  REQUIRE(at != std::string::npos);
  return body.replace(at, from.size(), to);
}

uint64_t Seed() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

}  // namespace

TEST_CASE("cluster state: the example of cluster.md 18.2, byte for byte") {
  const std::string text = Example().Serialize();
  CHECK(text == Signed(kExampleBody));
  CHECK(text.substr(text.size() - 16) == "crc32c 4b57a858\n");
  auto back = mq::ClusterState::Parse(text, "cluster-state");
  REQUIRE(back.has_value());
  CHECK(*back == Example());
  CHECK(mq::format::kClusterCrcLineBytes == std::string("crc32c 4b57a858\n").size());
}

TEST_CASE("R41 state file: size, version line, crc32c line") {
  const std::string good = Signed(kExampleBody);
  SECTION("larger than 1 MiB: refused by its size") {
    std::string big = good + std::string(mq::format::kMaxClusterStateBytes, 'x');
    auto r = mq::ClusterState::Parse(big, "cluster-state");
    CHECK(r.error().rule() == "R41");
    CHECK(r.error().position() == mq::format::kMaxClusterStateBytes);
  }
  SECTION("another version is unsupported, a bad first line corrupt") {
    auto v3 = mq::ClusterState::Parse(Signed(Edit(kExampleBody, "state 1", "state 3")), "f");
    CHECK(v3.error().code() == mq::Code::kUnsupported);
    CHECK_THAT(v3.error().message(), Catch::Contains("R41") && Catch::Contains("version 3"));
    auto bad = mq::ClusterState::Parse(Signed(Edit(kExampleBody, "mq-cluster", "xx-cluster")), "f");
    CHECK(bad.error().rule() == "R41");
    CHECK(bad.error().position() == 0);
  }
  SECTION("a byte changed behind the checksum") {
    std::string edited = good;
    edited[good.find("r1")] = 's';
    auto r = mq::ClusterState::Parse(edited, "cluster-state");
    CHECK(r.error().rule() == "R41");
    CHECK(r.error().position() == kExampleBody.size());
    CHECK_THAT(r.error().message(), Catch::Contains("crc32c"));
  }
  SECTION("torn: the file ends early, or in the crc line") {
    for (size_t cut : {size_t{1}, size_t{5}, size_t{16}, size_t{17}, good.size() / 2}) {
      auto r = mq::ClusterState::Parse(good.substr(0, good.size() - cut), "cluster-state");
      INFO(cut);
      CHECK(r.error().code() == mq::Code::kCorruption);
      CHECK(r.error().rule() == "R41");
    }
  }
  SECTION("bytes after the crc line") {
    auto r = mq::ClusterState::Parse(good + "replica 3 /x\n", "cluster-state");
    CHECK(r.error().rule() == "R41");
    CHECK(r.error().position() == good.size());
  }
  SECTION("a file of many megabytes is refused before it is read") {
    TempDir tmp;
    auto store = mq::FileClusterStore::Open(tmp / "c", true);
    REQUIRE(store.has_value());
    // Sparse: reading it all would take 64 GiB of memory.
    REQUIRE(::truncate((tmp / "c/cluster-state").c_str(), int64_t{64} << 30) == 0);
    auto r = (*store)->Load();
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().rule() == "R41");
    CHECK(r.error().file() == tmp / "c/cluster-state");
  }
}

TEST_CASE("R42 lines: kinds, order, fields, numbers") {
  // An unknown kind.
  ExpectBreach(Edit(kExampleBody, "replica 1 ", "replicant 1 "), "R42",
               kExampleBody.find("replica 1"));
  // Kinds out of order: a replica line after a topic line.
  ExpectBreach(kExampleBody + "replica 9 /srv/mq/r9\n", "R42", kExampleBody.size());
  // A field missing, one too many.
  const uint64_t topic_at = kExampleBody.find("topic");
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2 30000", "topic orders 2 3 2"), "R42",
               topic_at);
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2 30000", "topic orders 2 3 2 30000 1"), "R42",
               topic_at + 24);
  // Two spaces between fields.
  ExpectBreach(Edit(kExampleBody, "topic orders 2", "topic  orders 2"), "R42", topic_at + 6);
  // Numbers: a leading zero, a sign, a letter, an overflow, a leader below -1.
  const uint64_t p0 = kExampleBody.find("partition orders 0");
  ExpectBreach(
      Edit(kExampleBody, "partition orders 0 0,1,2 0 0 0", "partition orders 0 0,1,2 0 00 0"),
      "R42", p0 + 27);
  ExpectBreach(Edit(kExampleBody, "replica 2 ", "replica +2 "), "R42",
               kExampleBody.find("replica 2") + 8);
  ExpectBreach(Edit(kExampleBody, "replica 2 ", "replica 2x "), "R42",
               kExampleBody.find("replica 2") + 8);
  ExpectBreach(Edit(kExampleBody, "replica 2 ", "replica 2147483648 "), "R42",
               kExampleBody.find("replica 2") + 8);
  ExpectBreach(Edit(kExampleBody, "partition orders 0 0,1,2 0", "partition orders 0 0,1,2 -2"),
               "R42", p0 + 25);
  // An empty replica list, a list with an empty member.
  ExpectBreach(Edit(kExampleBody, "partition orders 0 0,1,2", "partition orders 0 -"), "R42",
               p0 + 19);
  ExpectBreach(Edit(kExampleBody, "partition orders 0 0,1,2", "partition orders 0 0,,2"), "R42",
               p0 + 21);
  // A control byte in a line (a tab, a CR).
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r0", "/srv/mq/r0\r"), "R42",
               kExampleBody.find("/srv/mq/r0") + 10);
  // A leader of -1 and an empty ISR are not breaches.
  auto none =
      mq::ClusterState::Parse(Signed(Edit(kExampleBody, "partition orders 0 0,1,2 0 0 0 0,1,2",
                                          "partition orders 0 0,1,2 -1 0 0 -")),
                              "f");
  REQUIRE(none.has_value());
  CHECK(none->partitions[0].leader == -1);
  CHECK(none->partitions[0].isr.empty());
}

TEST_CASE("R43 replicas: increasing ids, absolute distinct dirs") {
  const uint64_t r1 = kExampleBody.find("replica 1");
  ExpectBreach(Edit(kExampleBody, "replica 1 ", "replica 0 "), "R43", r1);
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r1", "/srv/mq/r0"), "R43", r1);
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r1", "srv/mq/r1"), "R43", r1);
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r1", "/srv/mq/../r1"), "R43", r1);
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r1", "/srv/mq/r1/"), "R43", r1);
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r1", "/srv//r1"), "R43", r1);
  // A dir with a space is the rest of the line.
  auto spaced =
      mq::ClusterState::Parse(Signed(Edit(kExampleBody, "/srv/mq/r1", "/srv/my disk/r1")), "f");
  REQUIRE(spaced.has_value());
  CHECK(spaced->replicas[1].dir == "/srv/my disk/r1");
  CHECK(mq::CheckAbsoluteDir("/", "dir").code() == mq::Code::kInvalidArgument);
}

TEST_CASE("R43 replicas on other hosts: host:path in a version 2 state") {
  const uint64_t r1 = kExampleBody.find("replica 1");
  // A host needs version 2 (an older mq refuses it as unsupported).
  ExpectBreach(Edit(kExampleBody, "/srv/mq/r1", "db2:/srv/mq/r1"), "R43", r1);
  const std::string v2 =
      Edit(Edit(kExampleBody, "state 1", "state 2"), "/srv/mq/r1", "mq@db2.example:/srv/mq/r1");
  auto s = mq::ClusterState::Parse(Signed(v2), "f");
  REQUIRE(s.has_value());
  CHECK(s->replicas[1].dir == "mq@db2.example:/srv/mq/r1");
  CHECK(s->HasHosts());
  CHECK(s->Serialize() == Signed(v2));
  CHECK(mq::ClusterState::Parse(s->Serialize(), "f").value() == *s);
  // Without a host the state is written as version 1.
  auto local = mq::ClusterState::Parse(Signed(kExampleBody), "f");
  CHECK(local->Serialize().starts_with("mq-cluster-state 1\n"));
  for (const char* bad : {"-oProxyCommand=x:/srv/mq/r1", "db2;x:/srv/mq/r1", ":/srv/mq/r1",
                          "db2:srv/mq/r1", "a@:/srv/mq/r1", "a@-b:/srv/mq/r1", "d b:/srv/mq/r1"}) {
    INFO(bad);
    ExpectBreach(Edit(v2, "mq@db2.example:/srv/mq/r1", bad), "R43", r1);
  }
  auto a = mq::ParseAddress("db2:/srv/my disk", "dir");
  REQUIRE(a.has_value());
  CHECK(a->host == "db2");
  CHECK(a->path == "/srv/my disk");
  CHECK(a->ToString() == "db2:/srv/my disk");
  CHECK(mq::ParseAddress("/srv/a:b", "dir")->host.empty());
}

TEST_CASE("R44 topics: valid sorted names, ranges, min.insync.replicas <= replication.factor") {
  const uint64_t t = kExampleBody.find("topic");
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2", "topic orders 2 3 4"), "R44", t);
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2", "topic orders 2 3 0"), "R44", t);
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2", "topic orders 2 4 2"), "R44",
               t);  // 3 replicas
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2", "topic orders 10001 3 2"), "R44", t);
  ExpectBreach(Edit(kExampleBody, "topic orders 2 3 2 30000", "topic orders 2 3 2 0"), "R44", t);
  ExpectBreach(Edit(kExampleBody, "topic orders ", "topic or/ders "), "R44", t);
  // Names strictly increase.
  std::string two = kExampleBody;
  two.insert(two.find("partition"), "topic alpha 1 1 1 30000\n");
  ExpectBreach(two, "R44", two.find("topic alpha"));
}

TEST_CASE("R45 partitions: complete, sorted, replicas and ISR consistent") {
  // Four replicas so that a known id can be outside a partition's replicas.
  const std::string body = Edit(kExampleBody, "topic", "replica 3 /srv/mq/r3\ntopic");
  const uint64_t p0 = body.find("partition orders 0");
  const uint64_t p1 = body.find("partition orders 1");
  SECTION("ISR within the replicas") {
    ExpectBreach(Edit(body, "0 0 0 0,1,2\n", "0 0 0 0,1,3\n"), "R45", p0);
  }
  SECTION("the leader in the ISR, or -1") {
    ExpectBreach(Edit(body, "0,1,2 0 0 0 0,1,2", "0,1,2 0 0 0 1,2"), "R45", p0);
    ExpectBreach(Edit(body, "0,1,2 0 0 0 0,1,2", "0,1,2 3 0 0 0,1,2"), "R45", p0);
  }
  SECTION("replicas: replication.factor of them, distinct, known") {
    ExpectBreach(Edit(body, "orders 0 0,1,2", "orders 0 0,1"), "R45", p0);
    ExpectBreach(Edit(body, "orders 0 0,1,2 0 0 0 0,1,2", "orders 0 0,1,1 0 0 0 0,1"), "R45", p0);
    ExpectBreach(Edit(body, "orders 0 0,1,2 0 0 0 0,1,2", "orders 0 0,1,7 0 0 0 0,1"), "R45", p0);
    ExpectBreach(Edit(body, "0,1,2 0 0 0 0,1,2", "0,1,2 0 0 0 0,1,1"), "R45", p0);
  }
  SECTION("one line per partition, sorted, of a known topic") {
    ExpectBreach(Edit(body, "partition orders 1 1,2,0 1 0 0 1,2,0\n", ""), "R45",
                 body.find("topic"));
    ExpectBreach(body + "partition orders 1 1,2,0 1 0 0 1,2,0\n", "R45", body.size());
    ExpectBreach(body + "partition orders 2 1,2,0 1 0 0 1,2,0\n", "R45", body.size());
    ExpectBreach(body + "partition other 0 1,2,0 1 0 0 1,2,0\n", "R45", body.size());
    ExpectBreach(Edit(body, "partition orders 1", "partition orders 0"), "R45", p1);
  }
  SECTION("an empty ISR only without a leader (the leader is not in it)") {
    ExpectBreach(Edit(body, "0,1,2 0 0 0 0,1,2", "0,1,2 0 0 0 -"), "R45", p0);
  }
}

TEST_CASE("cluster state: Parse(Serialize(x)) == x for random states") {
  const uint64_t seed = Seed();
  std::printf("cluster state round trip: MQ_TEST_SEED=%llu\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 200; ++round) {
    mq::ClusterState s;
    const int n = static_cast<int>(pick(1, 6));
    int32_t id = static_cast<int32_t>(pick(0, 3));
    for (int i = 0; i < n; ++i) {
      s.replicas.push_back({id, fmt::format("/srv/mq {}/r{}", pick(0, 9), id)});
      id += static_cast<int32_t>(pick(1, 1000));
    }
    const int topics = static_cast<int>(pick(0, 4));
    for (int t = 0; t < topics; ++t) {
      mq::ReplicatedTopic topic;
      topic.name = fmt::format("t{}.{}", t, pick(0, 99));
      topic.partitions = static_cast<int32_t>(pick(1, 5));
      topic.replication_factor = static_cast<int32_t>(pick(1, n));
      topic.min_insync_replicas = static_cast<int32_t>(pick(1, topic.replication_factor));
      topic.replica_lag_time_max_ms = pick(1, INT64_MAX);
      s.topics.push_back(topic);
      for (int32_t p = 0; p < topic.partitions; ++p) {
        std::vector<int32_t> ids;
        for (const auto& r : s.replicas) ids.push_back(r.id);
        std::shuffle(ids.begin(), ids.end(), rng);
        mq::PartitionState ps;
        ps.topic = topic.name;
        ps.partition = p;
        ps.replicas.assign(ids.begin(), ids.begin() + topic.replication_factor);
        ps.isr = ps.replicas;
        std::shuffle(ps.isr.begin(), ps.isr.end(), rng);
        ps.isr.resize(static_cast<size_t>(pick(0, topic.replication_factor)));
        ps.leader = ps.isr.empty() || pick(0, 5) == 0
                        ? -1
                        : ps.isr[static_cast<size_t>(pick(0, ps.isr.size() - 1))];
        ps.leader_epoch = static_cast<int32_t>(pick(0, INT32_MAX));
        ps.partition_epoch = static_cast<int32_t>(pick(0, INT32_MAX));
        s.partitions.push_back(ps);
      }
    }
    REQUIRE(s.Validate().ok());
    auto back = mq::ClusterState::Parse(s.Serialize(), "cluster-state");
    INFO("seed " << seed << " round " << round);
    REQUIRE(back.has_value());
    CHECK(*back == s);
  }
}

TEST_CASE("cluster state: hostile files are corruption naming file, position and rule") {
  const uint64_t seed = Seed();
  std::printf("cluster state hostile: MQ_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const std::string good = Example().Serialize();
  for (int round = 0; round < 2000; ++round) {
    std::string bad = good;
    const int how = static_cast<int>(rng() % 4);
    const size_t at = rng() % bad.size();
    if (how == 0)
      bad.resize(at);
    else if (how == 1)
      bad[at] = static_cast<char>(rng());
    else if (how == 2)
      bad.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
    else
      bad = Signed(
          good.substr(0, good.size() - 16)
              .insert(std::min(at, good.size() - 16), std::string(1, static_cast<char>(rng()))));
    auto r = mq::ClusterState::Parse(bad, "cs");
    INFO("seed " << seed << " round " << round << " text " << bad);
    if (r.has_value()) {
      CHECK(r->Validate().ok());  // an edit that kept it valid (a digit for a digit)
      continue;
    }
    const auto code = r.error().code();
    REQUIRE((code == mq::Code::kCorruption || code == mq::Code::kUnsupported));
    CHECK_THAT(r.error().message(), Catch::StartsWith("cs: position ") && Catch::Contains(": R4"));
    if (code == mq::Code::kCorruption) CHECK(r.error().position() <= bad.size());
  }
}

// ---- the store (R46) ----------------------------------------------------------

namespace {

std::unique_ptr<mq::FileClusterStore> ExampleStore(const TempDir& tmp) {
  auto store = mq::FileClusterStore::Open(tmp / "cluster", true);
  REQUIRE(store.has_value());
  mq::ReplicatedTopic t{"orders", 2, 3, 2, 30000};
  REQUIRE((*store)->CreateTopic(t, {"/srv/mq/r0", "/srv/mq/r1", "/srv/mq/r2"}).ok());
  return std::move(*store);
}

}  // namespace

TEST_CASE("cluster store: Open creates the directory with an empty state") {
  TempDir tmp;
  CHECK(mq::FileClusterStore::Open(tmp / "none", false).error().code() == mq::Code::kNotFound);
  CHECK(mq::FileClusterStore::Open("relative/dir", true).error().code() ==
        mq::Code::kInvalidArgument);
  auto store = mq::FileClusterStore::Open(tmp / "cluster", true);
  REQUIRE(store.has_value());
  CHECK(Slurp(tmp / "cluster/cluster-state") == Signed("mq-cluster-state 1\n"));
  auto empty = (*store)->Load();
  REQUIRE(empty.has_value());
  CHECK(empty->topics.empty());
  // A plain directory is no cluster directory without create.
  fs::create_directory(tmp / "plain");
  CHECK(mq::FileClusterStore::Open(tmp / "plain", false).error().code() == mq::Code::kNotFound);
}

TEST_CASE("cluster store: CreateTopic assigns ids and rotates the replicas per partition") {
  TempDir tmp;
  auto store = ExampleStore(tmp);
  CHECK(Slurp(tmp / "cluster/cluster-state") == Signed(kExampleBody));
  // The same again changes nothing; other settings or roots are refused.
  REQUIRE((*store)
              .CreateTopic({"orders", 2, 3, 2, 30000}, {"/srv/mq/r0", "/srv/mq/r1", "/srv/mq/r2"})
              .ok());
  CHECK(Slurp(tmp / "cluster/cluster-state") == Signed(kExampleBody));
  CHECK(store->CreateTopic({"orders", 3, 3, 2, 30000}, {"/srv/mq/r0", "/srv/mq/r1", "/srv/mq/r2"})
            .code() == mq::Code::kInvalidArgument);
  CHECK(store->CreateTopic({"orders", 2, 3, 2, 30000}, {"/srv/mq/r0", "/srv/mq/r1", "/srv/mq/r3"})
            .code() == mq::Code::kInvalidArgument);
  CHECK(store->CreateTopic({"x", 1, 2, 1, 1}, {"/a", "/a"}).code() == mq::Code::kInvalidArgument);
  CHECK(store->CreateTopic({"x", 1, 2, 1, 1}, {"/a"}).code() == mq::Code::kInvalidArgument);
  // A second topic reuses known roots' ids and adds new ones.
  REQUIRE(store->CreateTopic({"events", 3, 2, 1, 100}, {"/srv/mq/r2", "/srv/mq/r9"}).ok());
  auto s = store->Load();
  REQUIRE(s.has_value());
  CHECK(s->Replica(3)->dir == "/srv/mq/r9");
  CHECK(s->Partition("events", 0)->replicas == std::vector<int32_t>{2, 3});
  CHECK(s->Partition("events", 1)->replicas == std::vector<int32_t>{3, 2});
  CHECK(s->Partition("events", 2)->leader == 2);
  CHECK(s->topics[0].name == "events");  // sorted
}

TEST_CASE("R46 atomic update: AlterPartition is a compare-and-swap on the partition epoch") {
  TempDir tmp;
  auto store = ExampleStore(tmp);
  const std::string path = tmp / "cluster/cluster-state";
  auto s = store->Load();
  REQUIRE(s.has_value());
  mq::PartitionState next = *s->Partition("orders", 0);
  next.leader = 1;
  next.leader_epoch = 1;
  next.isr = {1, 2};
  auto stored = store->AlterPartition(next, "clean election: leader 0 unavailable");
  REQUIRE(stored.has_value());
  CHECK(stored->partition_epoch == 1);
  CHECK(stored->leader == 1);
  CHECK(stored->isr == std::vector<int32_t>{1, 2});
  CHECK(*store->Load()->Partition("orders", 0) == *stored);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  // The stale proposal (partition epoch 0 again) is fenced; nothing changes.
  const std::string before = Slurp(path);
  const std::string log_before = Slurp(tmp / "cluster/isr-changes");
  next.isr = {1};
  auto stale = store->AlterPartition(next, "isr shrink");
  REQUIRE_FALSE(stale.has_value());
  CHECK(stale.error().code() == mq::Code::kFenced);
  CHECK(Slurp(path) == before);
  CHECK(Slurp(tmp / "cluster/isr-changes") == log_before);
  // A proposal that would break R45 is refused, nothing written.
  mq::PartitionState outside = *stored;
  outside.leader = 0;  // not in the ISR {1,2}
  auto invalid = store->AlterPartition(outside, "bad");
  CHECK(invalid.error().code() == mq::Code::kInvalidArgument);
  CHECK_THAT(invalid.error().message(), Catch::Contains("R45"));
  CHECK(Slurp(path) == before);
  // The change log: one line per partition created, one per change.
  std::istringstream log(log_before);
  std::vector<std::string> lines;
  for (std::string l; std::getline(log, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[0],
             Catch::Matches(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z orders 0 leader ->0 )"
                            R"(leader_epoch ->0 partition_epoch ->0 isr ->0,1,2 reason create)"));
  CHECK_THAT(lines[2],
             Catch::EndsWith(" orders 0 leader 0>1 leader_epoch 0>1 partition_epoch 0>1 "
                             "isr 0,1,2>1,2 reason clean election: leader 0 unavailable"));
}

TEST_CASE("R46 atomic update: of two processes racing AlterPartition exactly one wins") {
  TempDir tmp;
  auto store = ExampleStore(tmp);
  for (int round = 0; round < 10; ++round) {
    auto s = store->Load();
    REQUIRE(s.has_value());
    const mq::PartitionState read = *s->Partition("orders", 1);
    int go[2];
    REQUIRE(::pipe(go) == 0);
    pid_t kids[2];
    for (int k = 0; k < 2; ++k) {
      kids[k] = ::fork();
      REQUIRE(kids[k] >= 0);
      if (kids[k] == 0) {
        ::close(go[1]);
        auto mine = mq::FileClusterStore::Open(tmp / "cluster", false);
        if (!mine) ::_exit(10);
        mq::PartitionState next = read;  // both decided on the same read
        next.isr = {read.leader};
        char c;
        if (::read(go[0], &c, 1) != 0) ::_exit(11);  // released when the pipe closes
        auto r = (*mine)->AlterPartition(next, fmt::format("racer {}", k));
        ::_exit(r ? 0 : r.error().code() == mq::Code::kFenced ? 3 : 12);
      }
    }
    ::close(go[0]);
    ::close(go[1]);
    int wins = 0, fenced = 0;
    for (pid_t kid : kids) {
      int status = 0;
      REQUIRE(::waitpid(kid, &status, 0) == kid);
      REQUIRE(WIFEXITED(status));
      if (WEXITSTATUS(status) == 0) ++wins;
      if (WEXITSTATUS(status) == 3) ++fenced;
    }
    CHECK(wins == 1);
    CHECK(fenced == 1);
    CHECK(store->Load()->Partition("orders", 1)->partition_epoch == read.partition_epoch + 1);
    // Back to the full ISR for the next round.
    mq::PartitionState full = *store->Load()->Partition("orders", 1);
    full.isr = full.replicas;
    REQUIRE(store->AlterPartition(full, "expand").has_value());
  }
}

TEST_CASE("cluster store: a damaged state file is corruption naming it, never a crash") {
  TempDir tmp;
  auto store = ExampleStore(tmp);
  const std::string path = tmp / "cluster/cluster-state";
  std::string text = Slurp(path);
  Spit(path, text.substr(0, text.size() / 2));
  auto torn = store->Load();
  REQUIRE_FALSE(torn.has_value());
  CHECK(torn.error().code() == mq::Code::kCorruption);
  CHECK(torn.error().file() == path);
  CHECK_THAT(torn.error().message(), Catch::Contains(path) && Catch::Contains("R41"));
  // A change refuses to build on it, and leaves it as it is.
  mq::PartitionState p{"orders", 0, {0, 1, 2}, 0, 0, 0, {0}};
  CHECK(store->AlterPartition(p, "x").error().code() == mq::Code::kCorruption);
  CHECK(Slurp(path) == text.substr(0, text.size() / 2));
  ::unlink(path.c_str());
  CHECK(store->Load().error().code() == mq::Code::kNotFound);
}

TEST_CASE("cluster store: a failed rename or fsync changes nothing, and says so") {
  TempDir tmp;
  { auto store = ExampleStore(tmp); }
  mq::test::FaultFs faults;
  auto store = mq::FileClusterStore::Open(tmp / "cluster", false, &faults);
  REQUIRE(store.has_value());
  const std::string path = tmp / "cluster/cluster-state";
  const std::string before = Slurp(path);
  const std::string log_before = Slurp(tmp / "cluster/isr-changes");
  mq::PartitionState next = *(*store)->Load()->Partition("orders", 0);
  next.isr = {0, 1};
  faults.FailRename(1);
  auto renamed = (*store)->AlterPartition(next, "isr shrink");
  REQUIRE_FALSE(renamed.has_value());
  CHECK(renamed.error().code() == mq::Code::kIoError);
  faults.Clear();
  faults.FailSync(1);
  auto synced = (*store)->AlterPartition(next, "isr shrink");
  REQUIRE_FALSE(synced.has_value());
  CHECK(synced.error().code() == mq::Code::kIoError);
  faults.Clear();
  CHECK(Slurp(path) == before);
  CHECK(Slurp(tmp / "cluster/isr-changes") == log_before);
  // The same proposal then succeeds: the failures left the epoch as it was.
  auto ok = (*store)->AlterPartition(next, "isr shrink");
  REQUIRE(ok.has_value());
  CHECK(ok->partition_epoch == 1);
}

TEST_CASE("cluster store: WithSharedLock holds cluster.lock shared while it runs") {
  TempDir tmp;
  auto store = ExampleStore(tmp);
  auto dir = mq::OpenDirectory(tmp / "cluster", false);
  REQUIRE(dir.has_value());
  bool ran = false;
  REQUIRE(store
              ->WithSharedLock([&](const mq::ClusterState& s) {
                ran = true;
                CHECK(s.Topic("orders") != nullptr);
                // A writer would wait: someone holds the lock; no one holds it exclusively.
                CHECK(*mq::IsLocked(dir->get(), "cluster.lock", mq::LockMode::kExclusive));
                CHECK_FALSE(*mq::IsLocked(dir->get(), "cluster.lock", mq::LockMode::kShared));
                return mq::Status::Ok();
              })
              .ok());
  CHECK(ran);
  CHECK_FALSE(*mq::IsLocked(dir->get(), "cluster.lock", mq::LockMode::kExclusive));
  // fn's error is returned.
  CHECK(
      store
          ->WithSharedLock([](const mq::ClusterState&) { return mq::Status(mq::Code::kBusy, "x"); })
          .code() == mq::Code::kBusy);
}

namespace {

// Counts the files opened, by name, and the flock calls.
class LoadCountingFs : public mq::FileSystemWrapper {
 public:
  std::map<std::string, int> opens;
  int locks = 0;
  mq::Result<std::unique_ptr<mq::File>> Open(int dir_fd, const std::string& name,
                                             OpenMode mode) override {
    ++opens[name];
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  mq::Status Lock(int fd, mq::LockMode mode, mq::LockWait wait) override {
    ++locks;
    return FileSystemWrapper::Lock(fd, mode, wait);
  }
};

}  // namespace

TEST_CASE("R46 a store reads cluster-state again only once another store changed it") {
  TempDir tmp;
  LoadCountingFs fs;
  auto changer = ExampleStore(tmp);  // another process's store
  auto store = mq::FileClusterStore::Open(tmp / "cluster", false, &fs);
  REQUIRE(store.has_value());
  auto first = (*store)->Load();
  REQUIRE(first.has_value());
  CHECK(fs.opens["cluster-state"] == 1);
  // Unchanged since: the state it read, with neither the lock nor a read
  // (the name still names the file it keeps open).
  fs.opens.clear();
  fs.locks = 0;
  for (int i = 0; i < 3; ++i) {
    auto again = (*store)->Load();
    REQUIRE(again.has_value());
    CHECK(*again == *first);
  }
  CHECK(fs.opens["cluster-state"] == 0);
  CHECK(fs.locks == 0);
  // A change through the other store (a new file renamed over the name,
  // R46) is seen at the next load, read under the shared lock.
  mq::PartitionState p = *first->Partition("orders", 0);
  p.leader = p.isr.back();
  p.leader_epoch++;
  auto changed = changer->AlterPartition(p, "elect");
  REQUIRE(changed.has_value());
  auto after = (*store)->Load();
  REQUIRE(after.has_value());
  CHECK(after->Partition("orders", 0)->leader_epoch ==
        first->Partition("orders", 0)->leader_epoch + 1);
  CHECK(after->Partition("orders", 0)->leader == p.leader);
  CHECK(fs.opens["cluster-state"] == 1);
  CHECK(fs.locks == 1);
  // The file removed and written again by hand (not through a store): read
  // again too, never taken for the one kept.
  const std::string path = tmp / "cluster/cluster-state";
  const std::string text = Slurp(path);
  fs::remove(path);
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  fs.opens.clear();
  REQUIRE((*store)->Load().has_value());
  CHECK(fs.opens["cluster-state"] == 1);
}

TEST_CASE("R46 atomic update: changes from several processes at once are all kept") {
  TempDir tmp;
  REQUIRE(mq::FileClusterStore::Open(tmp / "cluster", true).has_value());
  constexpr int kProcs = 4;
  pid_t kids[kProcs];
  for (int k = 0; k < kProcs; ++k) {
    kids[k] = ::fork();
    REQUIRE(kids[k] >= 0);
    if (kids[k] == 0) {
      auto store = mq::FileClusterStore::Open(tmp / "cluster", false);
      if (!store) ::_exit(10);
      // Each adds its own topic, and one shared root, to the same state.
      mq::ReplicatedTopic t{fmt::format("t{}", k), 2, 2, 1, 30000};
      mq::Status s = (*store)->CreateTopic(t, {"/srv/shared", fmt::format("/srv/r{}", k)});
      ::_exit(s.ok() ? 0 : 11);
    }
  }
  for (pid_t kid : kids) {
    int status = 0;
    REQUIRE(::waitpid(kid, &status, 0) == kid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  auto s = mq::FileClusterStore::Open(tmp / "cluster", false).value()->Load();
  REQUIRE(s.has_value());
  CHECK(s->topics.size() == kProcs);
  CHECK(s->replicas.size() == kProcs + 1);
  CHECK(s->partitions.size() == 2 * kProcs);
  std::istringstream log(Slurp(tmp / "cluster/isr-changes"));
  int lines = 0;
  for (std::string l; std::getline(log, l);) ++lines;
  CHECK(lines == 2 * kProcs);
}

TEST_CASE("P10 cluster producer ids: one id per name on every root, never one id for two names") {
  TempDir tmp;
  // Two roots' views of one cluster directory, as a leader and the root
  // elected after it: what either allocates, the other resolves the same.
  auto a = ExampleStore(tmp);
  auto opened = mq::FileClusterStore::Open(tmp / "cluster", false);
  REQUIRE(opened.has_value());
  auto& b = *opened;
  const int64_t first = mq::kFirstClusterProducerId;
  CHECK(first == int64_t{4294967296});
  CHECK(a->ProducerId("ingestA").value() == first);
  // The second name on another root gets the next id, never the first
  // name's (a root's own registry would have started it at 0 again).
  CHECK(b->ProducerId("ingestB").value() == first + 1);
  CHECK(b->ProducerId("ingestA").value() == first);
  CHECK(a->ProducerId("ingestB").value() == first + 1);
  CHECK(Slurp(tmp / "cluster/producers/ingestA.id") == "4294967296\n");
  CHECK(Slurp(tmp / "cluster/producers/next-producer-id") == "4294967298\n");
  CHECK_FALSE(fs::exists(tmp / "cluster/producers/id.tmp"));
  // A name is a topic name (R12); nothing is written for one that is not.
  CHECK(a->ProducerId("../x").error().code() == mq::Code::kInvalidArgument);
  CHECK(a->ProducerId("").error().code() == mq::Code::kInvalidArgument);
  CHECK(Slurp(tmp / "cluster/producers/next-producer-id") == "4294967298\n");
  // The cluster state itself is not changed by an allocation.
  CHECK(Slurp(tmp / "cluster/cluster-state") == Signed(kExampleBody));
  // A damaged id file is corruption naming it, never a new id.
  Spit(tmp / "cluster/producers/ingestA.id", "12x\n");
  auto bad = b->ProducerId("ingestA");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code() == mq::Code::kCorruption);
  CHECK(bad.error().rule() == "P8");
  CHECK(bad.error().file() == tmp / "cluster/producers/ingestA.id");
  CHECK(Slurp(tmp / "cluster/producers/next-producer-id") == "4294967298\n");
  // A store that keeps no registry says so.
  struct NoRegistry : mq::ClusterStore {
    mq::Result<mq::ClusterState> Load() override { return mq::ClusterState{}; }
    mq::Result<mq::PartitionState> AlterPartition(const mq::PartitionState& p,
                                                  std::string_view) override {
      return p;
    }
  } none;
  CHECK(none.ProducerId("x").error().code() == mq::Code::kUnsupported);
}

TEST_CASE("P10 cluster producer ids: processes racing for the same names agree, ids distinct") {
  TempDir tmp;
  { auto store = ExampleStore(tmp); }
  constexpr int kNames = 12;
  const std::string out0 = tmp / "ids0", out1 = tmp / "ids1";
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t kids[2];
  for (int k = 0; k < 2; ++k) {
    kids[k] = ::fork();
    REQUIRE(kids[k] >= 0);
    if (kids[k] == 0) {
      ::close(go[1]);
      auto mine = mq::FileClusterStore::Open(tmp / "cluster", false);
      if (!mine) ::_exit(10);
      char c;
      if (::read(go[0], &c, 1) != 0) ::_exit(11);
      std::vector<int64_t> ids(kNames);
      // One walks the names up, the other down: every name is asked for
      // by both, most while the other allocates.
      for (int j = 0; j < kNames; ++j) {
        const int i = k == 0 ? j : kNames - 1 - j;
        auto id = (*mine)->ProducerId(fmt::format("name{}", i));
        if (!id) ::_exit(12);
        ids[static_cast<size_t>(i)] = *id;
      }
      std::ofstream o(k == 0 ? out0 : out1);
      for (int64_t id : ids) o << id << "\n";
      o.close();
      ::_exit(o ? 0 : 13);
    }
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t kid : kids) {
    int status = 0;
    REQUIRE(::waitpid(kid, &status, 0) == kid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }
  CHECK(Slurp(out0) == Slurp(out1));
  std::istringstream in(Slurp(out0));
  std::set<int64_t> distinct;
  for (int64_t id; in >> id;) {
    CHECK(id >= mq::kFirstClusterProducerId);
    CHECK(id < mq::kFirstClusterProducerId + kNames);
    distinct.insert(id);
  }
  CHECK(distinct.size() == kNames);
}

TEST_CASE("P10 cluster producer ids: a write that fails between counter and name wastes an id") {
  TempDir tmp;
  { auto store = ExampleStore(tmp); }
  mq::test::FaultFs faults;
  auto store = mq::FileClusterStore::Open(tmp / "cluster", false, &faults);
  REQUIRE(store.has_value());
  const int64_t first = mq::kFirstClusterProducerId;
  // The counter's rename succeeds, the name's fails: no id for the name,
  // the counter past the id it was to get.
  faults.FailRename(2);
  auto failed = (*store)->ProducerId("ingestA");
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code() == mq::Code::kIoError);
  faults.Clear();
  CHECK_FALSE(fs::exists(tmp / "cluster/producers/ingestA.id"));
  CHECK(Slurp(tmp / "cluster/producers/next-producer-id") == "4294967297\n");
  // Asked again, the name gets the next id; the wasted one is nobody's.
  CHECK((*store)->ProducerId("ingestA").value() == first + 1);
  CHECK((*store)->ProducerId("ingestB").value() == first + 2);
  // A failed fsync of the counter: nothing allocated, nothing wasted.
  faults.FailSync(1);
  CHECK((*store)->ProducerId("ingestC").error().code() == mq::Code::kIoError);
  faults.Clear();
  CHECK_FALSE(fs::exists(tmp / "cluster/producers/ingestC.id"));
  CHECK((*store)->ProducerId("ingestC").value() == first + 3);
}
