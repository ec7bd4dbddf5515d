// Topic administration (format-spec/layout.md §2.3-§2.6, R80-R85): what a
// data directory's topics hold, a topic's effective configuration, and the
// crash-safe changes mq-topic makes: configuration, partition count,
// deletion. Changes are made under the root's admin lock (R81), an
// exclusive flock on `topics/`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mq/status.h"
#include "mq/topic.h"

namespace mq {

// One partition as kafka-get-offsets and kafka-log-dirs show it, read from
// its directory's names, its segments' sizes and its state file only (no
// segment is read).
struct PartitionSummary {
  int32_t partition = 0;
  // The directory exists (a partition never created reads as empty).
  bool present = false;
  int64_t log_start_offset = 0;
  // The committed end as the state file publishes it; nullopt when it has
  // no valid state file but holds segments (no writer has opened it since).
  std::optional<int64_t> log_end_offset;
  uint64_t bytes = 0;     // the sizes of its .log files
  uint32_t segments = 0;  // its .log files
  // Tiered segments (retention.md §21): the tier pointer's directory ("" if
  // none) and the segments and bytes there (also counted above).
  std::string tier_dir;
  uint32_t tier_segments = 0;
  uint64_t tier_bytes = 0;
};

struct TopicSummary {
  std::string topic;
  TopicConfig config;
  std::vector<PartitionSummary> partitions;  // 0 .. partitions-1
};

// The summary of one topic (kNotFound when it does not exist; a corrupt
// configuration is its kCorruption).
Result<TopicSummary> SummarizeTopic(const DataDir& dir, std::string_view topic);
// One partition's summary, from its directory `partition_dir`.
Result<PartitionSummary> SummarizePartition(const std::string& partition_dir, int32_t partition,
                                            FileSystem* fs = nullptr);

// One key of a topic's effective configuration and where its value comes
// from: "default" (mq's default value, which Kafka's DEFAULT_CONFIG is),
// "topic" (the topic's own value, in its .conf) or "cluster" (a replicated
// topic's replication settings, held by its cluster state).
struct ConfigEntry {
  std::string key;
  std::string value;
  std::string source;
  std::string meaning;  // ConfigValueMeaning(key, value)
};
// What a value means when its text does not say it, as the manuals name
// it: retention.protect "" is "none" (no group) and "*" every group;
// retention.ms, retention.bytes and retention.protect.max.ms -1 are "no
// limit"; "" for any other value.
std::string ConfigValueMeaning(std::string_view key, std::string_view value);
// Every key of TopicConfig::KeyNames in order, then cluster and replica.id
// for a replicated topic. `replicated`: the topic's settings in its
// cluster state, when read.
std::vector<ConfigEntry> EffectiveConfig(
    const TopicConfig& config,
    const std::optional<std::pair<int32_t, int32_t>>& replicated = std::nullopt);

// R84: applies `set` (key, value; units as TopicConfig::Set) and `reset`
// (keys back to their defaults) to the topic's configuration and replaces
// its .conf atomically under the admin lock. Nothing is written unless
// every change is valid (kInvalidArgument naming the key: unknown, out of
// range, not changed this way — partitions, cluster, replica.id, a
// replicated topic's replication settings — given twice with two values,
// or contradicting another key, TopicConfig::Validate). Returns the new
// configuration; `changed` says whether it differs from the old one.
Result<TopicConfig> AlterTopicConfig(const DataDir& dir, std::string_view topic,
                                     std::span<const std::pair<std::string, std::string>> set,
                                     std::span<const std::string> reset, bool* changed = nullptr);

// R80: every partition directory `<topic>-0` .. `<topic>-<partitions-1>`
// exists; kCorruption naming the .conf and the missing directories
// otherwise (a partition count edited by hand).
Status CheckPartitionDirs(const DataDir& dir, std::string_view topic, const TopicConfig& config);

// How many of the keys recently appended to a topic map to another
// partition with `partitions` partitions: the last `per_partition` records
// of each partition are read, and each distinct key rehashed (murmur2,
// PartitionForKey).
struct KeyMoves {
  uint64_t records = 0;  // records read
  uint64_t keys = 0;     // distinct keys among them
  uint64_t moved = 0;    // of those, the ones whose partition changes
};
Result<KeyMoves> CountMovingKeys(const DataDir& dir, std::string_view topic,
                                 const TopicConfig& config, int32_t partitions,
                                 int64_t per_partition);

// R82: raises the topic's partition count to `partitions`: creates every
// new partition directory and syncs the root, then replaces the .conf
// atomically, under the admin lock. A lower count is kInvalidArgument
// (saying why); the same count changes nothing; a replicated topic is
// kInvalidArgument (its partitions are in its cluster state).
Status IncreasePartitions(const DataDir& dir, std::string_view topic, int32_t partitions);

// Who holds a topic: a producer (a partition's writer.lock) or a live
// consumer group member reading it.
struct TopicHolders {
  std::vector<int32_t> written;     // partitions whose writer.lock is held
  std::vector<std::string> groups;  // groups with a live member reading it
  bool empty() const { return written.empty() && groups.empty(); }
};
Result<TopicHolders> FindTopicHolders(const DataDir& dir, std::string_view topic);
// The groups with a live (running) member reading `topic`: its
// subscription names it, or is not known.
Result<std::vector<std::string>> LiveGroupsReading(const DataDir& dir, std::string_view topic);

// R83: deletes the topic. Refused (kBusy, naming the holders) while a
// producer or a live group member holds it, unless `force`; a replicated
// topic is refused (kInvalidArgument: its replicas and cluster state are
// not changed by mq-topic). The order: the .conf moves to
// `deleted/<topic>.conf` (the commit: the topic no longer exists), each
// partition directory moves into `deleted/`, is emptied and removed, then
// the marker is unlinked.
Status DeleteTopic(const DataDir& dir, std::string_view topic, bool force);

// R83: finishes every deletion a crash interrupted (a marker
// `deleted/<topic>.conf` and what is left of its partition directories).
// Returns the topics finished. With `topic`, only that one.
Result<std::vector<std::string>> FinishDeletions(const DataDir& dir,
                                                 std::optional<std::string_view> topic = {});

// Which topic of a name a follower opened: the device and inode of the
// directory of a partition it reads (R83). A topic deleted and created
// again has new partition directories; the follower's open descriptor of
// the old one keeps its inode from being reused, so the two never compare
// equal.
struct TopicIdentity {
  int32_t partition = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool operator==(const TopicIdentity&) const = default;
};
Result<TopicIdentity> ReadTopicIdentity(const DataDir& dir, std::string_view topic,
                                        int32_t partition);

// kNotFound saying the topic was deleted when the data directory opens and
// `topics/<topic>.conf` is not in it (a follower of the topic stops with
// it), or, given the identity of the topic the follower `opened`, when the
// topic of that name is another one (deleted and created again); OK
// otherwise, also when the data directory cannot be opened (moved away,
// unreadable): that is not a deletion.
Status CheckTopicExists(const DataDir& dir, std::string_view topic,
                        const std::optional<TopicIdentity>& opened = std::nullopt);

}  // namespace mq
