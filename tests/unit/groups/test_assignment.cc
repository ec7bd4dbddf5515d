// Group partition assignment (liblog/include/mq/assignment.h): balanced,
// one owner per partition, deterministic, sticky. Random cases print their
// seed; MQ_TEST_SEED=<n> repeats one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "mq/assignment.h"

using namespace mq;

namespace {

uint64_t Seed() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

std::vector<std::string> RandomMembers(std::mt19937_64& rng, size_t n) {
  std::set<std::string> ids;
  while (ids.size() < n) ids.insert(fmt::format("host{}-{}", rng() % 8, rng() % 100000));
  return {ids.begin(), ids.end()};
}

// Partitions whose owner (by id) differs between two assignments.
int Moved(const std::vector<std::string>& a, const std::vector<int32_t>& oa,
          const std::vector<std::string>& b, const std::vector<int32_t>& ob) {
  int moved = 0;
  for (size_t p = 0; p < oa.size(); ++p)
    if (a[oa[p]] != b[ob[p]]) ++moved;
  return moved;
}

}  // namespace

TEST_CASE("assignment: the weight is the documented hash") {
  // Values from an independent implementation of the definition in
  // format-spec/group.md (FNV-1a 64 over id NUL topic NUL partition-BE32,
  // then splitmix64's finalizer).
  CHECK(AssignmentWeight("m1", "orders", 0) == 0x89fc7e9ddd6cf05eull);
  CHECK(AssignmentWeight("", "", -1) == 0x98011d7d5181839full);
}

TEST_CASE("assignment: no members, no owners") {
  CHECK(AssignPartitions({}, "t", 3) == std::vector<int32_t>{-1, -1, -1});
  CHECK(AssignedTo({}, "t", 3, "a").empty());
  CHECK(AssignedTo({"a", "b"}, "t", 3, "c").empty());
}

TEST_CASE("assignment: balanced, one owner per partition, the same for every member") {
  const uint64_t seed = Seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const auto partitions = static_cast<int32_t>(1 + rng() % 200);
    const auto members = RandomMembers(rng, 1 + rng() % 20);
    const size_t m = members.size();
    const std::vector<int32_t> owner = AssignPartitions(members, "topic", partitions);
    REQUIRE(owner.size() == static_cast<size_t>(partitions));
    std::vector<int> load(m, 0);
    for (int32_t o : owner) {
      REQUIRE(o >= 0);
      REQUIRE(static_cast<size_t>(o) < m);
      ++load[o];
    }
    const int lo = partitions / static_cast<int>(m);
    const int hi = lo + (partitions % static_cast<int>(m) != 0 ? 1 : 0);
    for (int l : load) {
      CHECK(l >= lo);
      CHECK(l <= hi);
    }
    // Each member's own view agrees with the whole assignment.
    std::vector<int32_t> seen(partitions, 0);
    for (const std::string& id : members)
      for (int32_t p : AssignedTo(members, "topic", partitions, id)) ++seen[p];
    CHECK(std::all_of(seen.begin(), seen.end(), [](int32_t n) { return n == 1; }));
    CHECK(AssignPartitions(members, "topic", partitions) == owner);
  }
}

TEST_CASE("assignment: more members than partitions leaves the extra members idle") {
  const std::vector<std::string> members{"a", "b", "c", "d", "e"};
  const auto owner = AssignPartitions(members, "t", 3);
  std::set<int32_t> owners(owner.begin(), owner.end());
  CHECK(owners.size() == 3);
  int idle = 0;
  for (const auto& id : members) idle += AssignedTo(members, "t", 3, id).empty() ? 1 : 0;
  CHECK(idle == 2);
}

TEST_CASE("assignment: a member that leaves and comes back with its id gets its partitions back") {
  const std::vector<std::string> all{"a", "b", "c", "d"};
  const std::vector<std::string> without_c{"a", "b", "d"};
  const auto before = AssignedTo(all, "t", 12, "c");
  CHECK(before.size() == 3);
  CHECK(AssignedTo(without_c, "t", 12, "c").empty());
  CHECK(AssignedTo(all, "t", 12, "c") == before);
}

TEST_CASE("assignment: a join or a leave moves few partitions") {
  // Minimal moves: a joining member must take floor(P/(M+1)); a leaving
  // member's partitions must all move. Rendezvous weights keep the rest in
  // place except where the load bound displaces them: at most the minimum
  // twice over plus one per member.
  const uint64_t seed = Seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const auto partitions = static_cast<int32_t>(1 + rng() % 300);
    auto members = RandomMembers(rng, 1 + rng() % 16);
    const int m = static_cast<int>(members.size());
    const auto before = AssignPartitions(members, "topic", partitions);

    auto joined = members;
    joined.push_back("joiner");
    std::sort(joined.begin(), joined.end());
    const auto after_join = AssignPartitions(joined, "topic", partitions);
    const int need_join = partitions / (m + 1);
    INFO("P=" << partitions << " M=" << m);
    CHECK(Moved(members, before, joined, after_join) <= 2 * need_join + m + 1);

    if (m > 1) {
      auto left = members;
      const std::string gone = left[rng() % left.size()];
      left.erase(std::find(left.begin(), left.end(), gone));
      const auto after_leave = AssignPartitions(left, "topic", partitions);
      const int need_leave =
          static_cast<int>(AssignedTo(members, "topic", partitions, gone).size());
      CHECK(Moved(members, before, left, after_leave) <= 2 * need_leave + m);
    }
  }
}

TEST_CASE("assignment: a topic is assigned among the members subscribed to it") {
  const std::vector<Subscription> members{
      {"x", std::vector<std::string>{"a"}},
      {"y", std::vector<std::string>{"b", "c"}},
      {"w", std::vector<std::string>{}},  // a topics line naming none: reads nothing
      {"old", std::nullopt},              // an earlier mq's note: every topic
  };
  CHECK(SubscribersOf(members, "a") == std::vector<std::string>{"old", "x"});
  CHECK(SubscribersOf(members, "b") == std::vector<std::string>{"old", "y"});
  CHECK(SubscribersOf(members, "d") == std::vector<std::string>{"old"});
  // Without the earlier member, each topic goes whole to its only reader.
  const std::vector<Subscription> two{members[0], members[1]};
  const auto a = SubscribersOf(two, "a");
  CHECK(AssignedTo(a, "a", 4, "x") == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(AssignedTo(a, "a", 4, "y").empty());
  CHECK(AssignedTo(SubscribersOf(two, "c"), "c", 3, "y") == std::vector<int32_t>{0, 1, 2});
  CHECK(SubscribersOf(two, "d").empty());
}

TEST_CASE("assignment: a member of several topics gets its share of each, by its readers (R64)") {
  // x reads a and b, y reads b: a is x's alone, b is split between them,
  // and every partition of each topic has exactly one owner.
  const std::vector<Subscription> members{
      {"x", std::vector<std::string>{"a", "b"}},
      {"y", std::vector<std::string>{"b"}},
  };
  const std::vector<TopicPartitions> xt{{"a", 4}, {"b", 4}};
  const std::vector<TopicPartitions> yt{{"b", 4}};
  const auto x = AssignSubscription(members, xt, "x");
  const auto y = AssignSubscription(members, yt, "y");
  REQUIRE(x.size() == 2);
  REQUIRE(y.size() == 1);
  CHECK(x[0].topic == "a");
  CHECK(x[0].subscribers == std::vector<std::string>{"x"});
  CHECK(x[0].partitions == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(x[1].topic == "b");
  CHECK(x[1].subscribers == std::vector<std::string>{"x", "y"});
  CHECK(y[0].subscribers == std::vector<std::string>{"x", "y"});
  CHECK(x[1].partitions.size() == 2);
  CHECK(y[0].partitions.size() == 2);
  std::vector<int32_t> b = x[1].partitions;
  b.insert(b.end(), y[0].partitions.begin(), y[0].partitions.end());
  std::sort(b.begin(), b.end());
  CHECK(b == std::vector<int32_t>{0, 1, 2, 3});
  // The same as each topic's assignment among its readers.
  CHECK(x[1].partitions == AssignedTo({"x", "y"}, "b", 4, "x"));
  // A topic nobody else reads, and a member reading none.
  CHECK(AssignSubscription(members, std::vector<TopicPartitions>{}, "x").empty());
}

TEST_CASE("assignment: topic arguments are names or ^patterns matched against the topics (R64)") {
  CHECK(IsTopicPattern("^logs"));
  CHECK_FALSE(IsTopicPattern("logs"));
  CHECK_FALSE(IsTopicPattern("lo^gs"));
  const std::vector<std::string> existing{"logs", "logs.app", "logs.db", "metrics", "xlogs"};
  auto match = [&](std::vector<std::string> args) {
    auto r = MatchTopics(args, existing);
    REQUIRE(r);
    return *r;
  };
  // Anchored at the start (not "xlogs"), the rest of the name free.
  CHECK(match({"^logs"}) == std::vector<std::string>{"logs", "logs.app", "logs.db"});
  CHECK(match({"^logs\\..*"}) == std::vector<std::string>{"logs.app", "logs.db"});
  // '$' anchors the end; extended syntax (alternation, groups).
  CHECK(match({"^(metrics|logs)$"}) == std::vector<std::string>{"logs", "metrics"});
  CHECK(match({"^nothing"}).empty());
  // Names are kept whether or not they exist; patterns and names merge,
  // sorted, without duplicates.
  CHECK(match({"new", "^logs.db", "logs.db", "metrics"}) ==
        std::vector<std::string>{"logs.db", "metrics", "new"});
  // A pattern that does not compile, a name breaking R12.
  auto bad = MatchTopics(std::vector<std::string>{"^(logs"}, existing);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Code::kInvalidArgument);
  CHECK_THAT(bad.error().message(), Catch::Contains("^(logs") && Catch::Contains("R64"));
  CHECK(ValidateTopicArgs(std::vector<std::string>{"a b"}).code() == Code::kInvalidArgument);
  CHECK(ValidateTopicArgs(std::vector<std::string>{"a", "^a.*[0-9]+$"}).ok());
}
