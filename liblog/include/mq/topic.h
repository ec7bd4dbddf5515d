// Data directory layout, topic configuration and key partitioning
// (format-spec §1 and §2).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

// Topic and group names become paths: [A-Za-z0-9._-], 1 to 249 characters,
// not "." or "..". `what` ("topic", "group") labels the error.
Status ValidateName(std::string_view name, std::string_view what);

enum class CleanupPolicy : uint8_t { kDelete, kCompact };

// Topic configuration: `<dir>/topics/<topic>.conf` (format-spec §2). Keys are
// Kafka's topic property names.
struct TopicConfig {
  int32_t partitions = 1;
  int32_t replication_factor = 1;
  int32_t min_insync_replicas = 1;
  int64_t retention_ms = 7LL * 24 * 3600 * 1000;  // -1 = no limit
  int64_t retention_bytes = -1;                   // -1 = no limit
  uint64_t segment_bytes = 1ull << 30;
  int64_t segment_ms = 7LL * 24 * 3600 * 1000;
  uint32_t index_interval_bytes = 4096;
  uint32_t max_message_bytes = 1048588;
  CleanupPolicy cleanup_policy = CleanupPolicy::kDelete;

  // Parses the text of a .conf file; errors name `file`, the line and the key.
  static Result<TopicConfig> Parse(std::string_view text, const std::string& file);
  // The text of a .conf file, every key written out.
  std::string Serialize() const;
  // Applies one "key=value" override (the same keys as the file).
  Status Set(std::string_view key, std::string_view value);
};

// A data directory: one replica's log root (format-spec §1).
class DataDir {
 public:
  // Opens `path`; with `create`, creates it (mode 0750) and writes its
  // meta.properties. Refuses a directory that is group- or world-writable.
  static Result<DataDir> Open(const std::string& path, bool create);

  const std::string& path() const { return path_; }
  Result<TopicConfig> ReadTopic(std::string_view topic) const;
  // Creates the topic's .conf and partition directories (kInvalidArgument if
  // it exists with a different partition count).
  Status CreateTopic(std::string_view topic, const TopicConfig& config) const;
  Result<std::vector<std::string>> ListTopics() const;
  // `<dir>/<topic>-<partition>`.
  std::string PartitionDir(std::string_view topic, int32_t partition) const;
  // The LogConfig for a topic's partitions.
  static LogConfig LogConfigFor(const TopicConfig& config);

 private:
  std::string path_;
};

// Kafka's murmur2 (seed 0x9747b28c) over `key`.
int32_t Murmur2(std::span<const std::byte> key);
// Kafka's partition for a keyed record: toPositive(murmur2(key)) % partitions.
int32_t PartitionForKey(std::span<const std::byte> key, int32_t partitions);

}  // namespace mq
