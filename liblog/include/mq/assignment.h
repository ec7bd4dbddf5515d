// Partition assignment of a consumer group without a coordinator: every
// member computes the same assignment from the same sorted list of live
// member ids, so members agree without talking to each other
// (format-spec/group.md, "Assignment"; mq-consume(1), GROUPS).
//
// The function is rendezvous hashing with bounded load:
//  - balance: with M members and P partitions, every member owns
//    floor(P/M) or ceil(P/M) partitions; the P mod M members with the
//    highest weight Weight(member, topic, -1) own one more;
//  - stickiness: partition p goes to the member with the highest
//    Weight(member, topic, p) that still has room, partitions taken in
//    order 0..P-1. A member's weights do not depend on the other members,
//    so when one member joins or leaves only the partitions that must move
//    to restore balance (and a few displaced by the load bound) move, and a
//    restarted member with the same id (static membership) gets the same
//    partitions back.
// Each topic is assigned among the members subscribed to it only (as
// Kafka's assignors do): a member never gets partitions of a topic it does
// not read, and members reading different topics share a group without
// starving each other.
// Weight is a fixed 64-bit hash (FNV-1a over the member id, a NUL, the topic,
// a NUL and the partition as 4 big-endian bytes, then the splitmix64
// finalizer): it is part of the format, so that members of different mq
// versions assign alike.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mq {

uint64_t AssignmentWeight(std::string_view member, std::string_view topic, int32_t partition);

// Owner of each partition 0..partitions-1 as an index into `members`, which
// must be sorted and free of duplicates; -1 for every partition when
// `members` is empty.
std::vector<int32_t> AssignPartitions(const std::vector<std::string>& members,
                                      std::string_view topic, int32_t partitions);

// The partitions `member` owns in that assignment (empty when it is not
// among `members` or when there are more members than partitions and it is
// one of the idle ones), ascending.
std::vector<int32_t> AssignedTo(const std::vector<std::string>& members, std::string_view topic,
                                int32_t partitions, std::string_view member);

// A live member and what it reads (format-spec/group.md §14.6): the topics
// of its subscription, or nullopt when its member file names none (written
// by an earlier mq, whose members all read one topic and assigned it among
// every live member): such a member counts as subscribed to every topic.
struct Subscription {
  std::string member;
  std::optional<std::vector<std::string>> topics;
};

// The ids of the members subscribed to `topic`, sorted and unique: the ones
// its partitions are assigned among (AssignPartitions, AssignedTo).
std::vector<std::string> SubscribersOf(std::span<const Subscription> members,
                                       std::string_view topic);

}  // namespace mq
