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

#include "mq/status.h"

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
  bool operator==(const Subscription&) const = default;
};

// The ids of the members subscribed to `topic`, sorted and unique: the ones
// its partitions are assigned among (AssignPartitions, AssignedTo).
std::vector<std::string> SubscribersOf(std::span<const Subscription> members,
                                       std::string_view topic);

// A topic a member reads and its partition count.
struct TopicPartitions {
  std::string topic;
  int32_t partitions = 0;
  bool operator==(const TopicPartitions&) const = default;
};

// One topic of a member's subscription in the group's assignment.
struct TopicAssignment {
  std::string topic;
  std::vector<std::string> subscribers;  // SubscribersOf(members, topic)
  std::vector<int32_t> partitions;       // what `member` owns of it, ascending
};

// For each topic of `topics` (what `member` reads), in that order: its
// subscribers among `members` and the partitions of it assigned to
// `member` (AssignedTo among the subscribers only, format-spec/group.md
// §14.6, R64).
std::vector<TopicAssignment> AssignSubscription(std::span<const Subscription> members,
                                                std::span<const TopicPartitions> topics,
                                                std::string_view member);

// Topic arguments of a subscription (mq-consume -G -t, as kcat -G and
// Kafka's subscribe(Pattern)), format-spec/group.md R64: an argument
// starting with '^' is a pattern, a POSIX extended regular expression
// searched for in each topic name (its '^' anchors it at the start; it
// matches the whole name only if it ends in '$'); any other is a topic name
// (R12).
bool IsTopicPattern(std::string_view arg);
// kInvalidArgument naming the argument: a name breaking R12, or a pattern
// that is no valid extended regular expression.
Status ValidateTopicArgs(std::span<const std::string> args);
// The topics `args` subscribe to among `existing` (the data directory's
// topics, DataDir::ListTopics): every name given, and every existing topic
// a pattern matches; sorted, unique. kInvalidArgument as ValidateTopicArgs.
Result<std::vector<std::string>> MatchTopics(std::span<const std::string> args,
                                             std::span<const std::string> existing);

}  // namespace mq
