#include "mq/assignment.h"

#include <algorithm>
#include <numeric>

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
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return w[a] != w[b] ? w[a] > w[b] : a < b;
  });
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

}  // namespace mq
