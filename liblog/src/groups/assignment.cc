#include "mq/assignment.h"

#include <regex.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "mq/topic.h"

namespace mq {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

uint64_t Splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t AssignmentWeight(std::string_view member, std::string_view topic, int32_t partition) {
  uint64_t h = Fnv1a(kFnvOffset, member);
  h = Fnv1a(h, std::string_view("\0", 1));
  h = Fnv1a(h, topic);
  h = Fnv1a(h, std::string_view("\0", 1));
  const auto p = static_cast<uint32_t>(partition);
  const char be[4] = {static_cast<char>(p >> 24), static_cast<char>(p >> 16),
                      static_cast<char>(p >> 8), static_cast<char>(p)};
  h = Fnv1a(h, std::string_view(be, 4));
  return Splitmix64(h);
}

std::vector<int32_t> AssignPartitions(const std::vector<std::string>& members,
                                      std::string_view topic, int32_t partitions) {
  const auto count = static_cast<size_t>(std::max(partitions, 0));
  std::vector<int32_t> owner(count, -1);
  const size_t m = members.size();
  if (m == 0) return owner;

  // Capacities: floor(P/M) each, one more for the P mod M heaviest members
  // (ties, which need equal 64-bit weights, go to the smaller id).
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<uint64_t> w(m);
  for (size_t i = 0; i < m; ++i) w[i] = AssignmentWeight(members[i], topic, -1);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return w[a] != w[b] ? w[a] > w[b] : a < b; });
  std::vector<size_t> room(m, count / m);
  for (size_t k = 0; k < count % m; ++k) ++room[order[k]];

  // Every (partition, member) pair by descending weight: a pair is taken
  // when its partition is still free and its member has room.
  struct Pair {
    uint64_t weight;
    uint32_t partition;
    uint32_t member;
  };
  std::vector<Pair> pairs;
  pairs.reserve(count * m);
  for (size_t p = 0; p < count; ++p)
    for (size_t i = 0; i < m; ++i)
      pairs.push_back({AssignmentWeight(members[i], topic, static_cast<int32_t>(p)),
                       static_cast<uint32_t>(p), static_cast<uint32_t>(i)});
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    if (a.weight != b.weight) return a.weight > b.weight;
    return a.partition != b.partition ? a.partition < b.partition : a.member < b.member;
  });
  size_t left = count;
  for (const Pair& pair : pairs) {
    if (left == 0) break;
    if (owner[pair.partition] != -1 || room[pair.member] == 0) continue;
    owner[pair.partition] = static_cast<int32_t>(pair.member);
    --room[pair.member];
    --left;
  }
  return owner;
}

std::vector<int32_t> AssignedTo(const std::vector<std::string>& members, std::string_view topic,
                                int32_t partitions, std::string_view member) {
  std::vector<int32_t> mine;
  auto it = std::find(members.begin(), members.end(), member);
  if (it == members.end()) return mine;
  const auto self = static_cast<int32_t>(it - members.begin());
  const std::vector<int32_t> owner = AssignPartitions(members, topic, partitions);
  for (size_t p = 0; p < owner.size(); ++p)
    if (owner[p] == self) mine.push_back(static_cast<int32_t>(p));
  return mine;
}

std::vector<std::string> SubscribersOf(std::span<const Subscription> members,
                                       std::string_view topic) {
  std::vector<std::string> ids;
  for (const Subscription& m : members)
    if (!m.topics || std::find(m.topics->begin(), m.topics->end(), topic) != m.topics->end())
      ids.push_back(m.member);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<TopicAssignment> AssignSubscription(std::span<const Subscription> members,
                                                std::span<const TopicPartitions> topics,
                                                std::string_view member) {
  std::vector<TopicAssignment> out;
  out.reserve(topics.size());
  for (const TopicPartitions& t : topics) {
    TopicAssignment a;
    a.topic = t.topic;
    a.subscribers = SubscribersOf(members, t.topic);
    a.partitions = AssignedTo(a.subscribers, t.topic, t.partitions, member);
    out.push_back(std::move(a));
  }
  return out;
}

bool IsTopicPattern(std::string_view arg) { return arg.starts_with('^'); }

namespace {

// A compiled pattern, freed with it.
class Pattern {
 public:
  Pattern() = default;
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
  ~Pattern() {
    if (compiled_) ::regfree(&re_);
  }
  Status Compile(const std::string& text) {
    const int rc = ::regcomp(&re_, text.c_str(), REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char why[256] = {};
      ::regerror(rc, &re_, why, sizeof why);
      return Status(Code::kInvalidArgument,
                    fmt::format("topic pattern \"{}\": {} (R64: a POSIX extended regular "
                                "expression)",
                                text, why));
    }
    compiled_ = true;
    return Status::Ok();
  }
  bool Matches(const std::string& name) const {
    return ::regexec(&re_, name.c_str(), 0, nullptr, 0) == 0;
  }

 private:
  regex_t re_{};
  bool compiled_ = false;
};

}  // namespace

Status ValidateTopicArgs(std::span<const std::string> args) {
  for (const std::string& a : args) {
    if (IsTopicPattern(a)) {
      Pattern p;
      MQ_RETURN_IF_ERROR(p.Compile(a));
    } else {
      MQ_RETURN_IF_ERROR(ValidateName(a, "topic"));
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> MatchTopics(std::span<const std::string> args,
                                             std::span<const std::string> existing) {
  MQ_RETURN_IF_ERROR(ValidateTopicArgs(args));
  std::vector<std::string> topics;
  for (const std::string& a : args) {
    if (!IsTopicPattern(a)) {
      topics.push_back(a);
      continue;
    }
    Pattern p;
    MQ_RETURN_IF_ERROR(p.Compile(a));
    for (const std::string& t : existing)
      if (p.Matches(t)) topics.push_back(t);
  }
  std::sort(topics.begin(), topics.end());
  topics.erase(std::unique(topics.begin(), topics.end()), topics.end());
  return topics;
}

}  // namespace mq
