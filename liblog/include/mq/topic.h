// Data directory layout, topic configuration and key partitioning
// (format-spec §1 and §2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/file.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

// Topic and group names become paths: [A-Za-z0-9._-], 1 to 249 characters,
// not "." or ".." (R12). `what` ("topic", "group") labels the error, which
// is kInvalidArgument naming the (escaped) name and the first bad character
// and its position.
constexpr size_t kMaxNameLength = 249;
Status ValidateName(std::string_view name, std::string_view what);

enum class CleanupPolicy : uint8_t { kDelete, kCompact };

// Topic configuration: `<dir>/topics/<topic>.conf` (format-spec/layout.md
// §2). Keys are Kafka's topic property names. Ranges, checked by Parse and
// Set (R16):
//   partitions 1..10000 (required in a file), replication.factor 1..32767,
//   min.insync.replicas 1..32767 and <= replication.factor,
//   retention.ms and retention.bytes -1..2^63-1, segment.bytes 61..2^31-1,
//   segment.ms 1..2^63-1, index.interval.bytes 0..2^31-1,
//   max.message.bytes 61..2^30, cleanup.policy delete|compact,
//   retention.protect "" | "*" | group[,group]..., retention.protect.max.ms
//   -1..2^63-1, file.delete.delay.ms 0..2^63-1 (R90), tier.after.ms
//   -1..2^63-1 (R108).
struct TopicConfig {
  static constexpr int kFormatVersion = 1;
  static constexpr size_t kMaxFileBytes = 64 * 1024;  // larger .conf: kTooLarge

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
  // R90 (format-spec/retention.md §20.4): the groups whose unread messages
  // retention keeps ("": none, "*": every group, else group names separated
  // by commas), how long after its last commit a group stops protecting
  // (-1: no bound), and how long a `.deleted` file waits before it is
  // unlinked (R77). Written to a file only when not the default.
  std::string retention_protect;
  int64_t retention_protect_max_ms = -1;
  int64_t file_delete_delay_ms = 60000;
  // R108 (format-spec/retention.md §21.2): how old a sealed segment must be
  // to move to the partition's tier (mq-compact --tier-dir); -1: none moves
  // unless the run says (--tier-after). Written only when not -1.
  int64_t tier_after_ms = -1;
  // A replicated topic (format-spec/layout.md §2.2): the absolute path of
  // its cluster directory (format-spec/cluster.md) and this root's replica
  // id there; empty and -1 for a topic of one root. With `cluster` set,
  // replication.factor and min.insync.replicas live in the cluster state
  // only: the file holds neither, and the two fields keep their defaults.
  std::string cluster;
  int32_t replica_id = -1;

  // Parses the text of a .conf file. A line breaking R16 is kCorruption
  // naming `file`, the byte position and line, and the key; a
  // format.version above kFormatVersion is kUnsupported.
  static Result<TopicConfig> Parse(std::string_view text, const std::string& file);
  // The text of a .conf file: a comment, format.version, then every key in
  // the order of §2, one `key=value\n` each. Parse(Serialize()) == *this.
  std::string Serialize() const;
  // Applies one "key=value" override (the same keys as the file, except
  // format.version); kInvalidArgument naming the key if unknown or out of
  // range. Cross-key rules are left to Validate().
  // Durations (keys ending in `.ms`) and sizes (`.bytes`) take units here
  // (`7d`, `1GiB`, mq/units.h), never in a file. An unknown key's error
  // lists the valid ones.
  Status Set(std::string_view key, std::string_view value);
  // The keys Set takes that a user sets (not format.version, cluster,
  // replica.id), in the order of §2.
  static std::vector<std::string_view> KeyNames();
  // `key`'s value as Serialize writes it; nullopt for an unknown key (and
  // for cluster and replica.id of a topic without them).
  std::optional<std::string> Get(std::string_view key) const;
  // Checks the rules that span keys (min.insync.replicas <=
  // replication.factor; cluster and replica.id together, the cluster path
  // absolute, replication.factor and min.insync.replicas at their defaults
  // with a cluster); kInvalidArgument.
  Status Validate() const;

  // This configuration for a new topic of one root made "like" this one
  // (--like, a dead-letter or pipeline output topic): the replication link
  // (cluster, replica.id) is not copied; the cluster state knows only the
  // topics mq-isr created.
  TopicConfig LocalCopy() const {
    TopicConfig c = *this;
    c.cluster.clear();
    c.replica_id = -1;
    return c;
  }

  bool operator==(const TopicConfig&) const = default;
};

// A data directory: one replica's log root (format-spec/layout.md §1).
class DataDir {
 public:
  // 2: replicated topics (format-spec/layout.md §1.6). Roots of version 1
  // are still opened; newer ones are refused.
  static constexpr int kLayoutVersion = 2;

  // Opens `path`; with `create`, creates it (mode 0750, parent must exist),
  // writes its meta.properties and its topics/ directory. Refuses a
  // directory that is group- or world-writable (kPermission, saying why),
  // one without meta.properties (kNotFound; with `create`, only an empty
  // directory is adopted), and a newer layout.version (kUnsupported).
  // Every file call goes through `fs` (null: the real file system).
  static Result<DataDir> Open(const std::string& path, bool create, FileSystem* fs = nullptr);

  const std::string& path() const { return path_; }
  // The file system every call goes through.
  FileSystem* fs() const { return fs_; }
  // The root's layout.version as read at Open (kLayoutVersion for a root
  // this Open created).
  int layout_version() const { return layout_version_; }
  // Raises the root's layout.version to kLayoutVersion: meta.properties is
  // replaced atomically (§1.5) under an exclusive flock on the root. A root
  // at kLayoutVersion already is left as is.
  Status UpgradeLayout();
  // kNotFound if the topic has no .conf.
  Result<TopicConfig> ReadTopic(std::string_view topic) const;
  // Creates the topic's partition directories, then its .conf (atomically,
  // and only if absent: of two racing creators exactly one writes it). A
  // topic that exists with the same partition count is OK (its partition
  // directories are completed, its .conf left as is); a different count is
  // kInvalidArgument.
  Status CreateTopic(std::string_view topic, const TopicConfig& config) const;
  // Topic names with a valid `topics/<name>.conf`, sorted; other files in
  // topics/ are ignored.
  Result<std::vector<std::string>> ListTopics() const;
  // `<dir>/<topic>-<partition>`.
  std::string PartitionDir(std::string_view topic, int32_t partition) const;
  // The LogConfig for a topic's partitions (segment.bytes, segment.ms,
  // index.interval.bytes; decode limits from DecodeLimitsFor).
  static LogConfig LogConfigFor(const TopicConfig& config);
  // What writers and readers of a topic accept: `base` (the default limits,
  // or a reader's own), raised to a batch holding one message of
  // max.message.bytes (kMessageOverheadBytes more). Lowering
  // max.message.bytes never makes written batches unreadable.
  static DecodeLimits DecodeLimitsFor(const TopicConfig& config, DecodeLimits base = {});
  // A batch header and one record's fields around a message.
  static constexpr uint32_t kMessageOverheadBytes = 61 + 36;

 private:
  std::string path_;
  FileSystem* fs_ = FileSystem::Default();
  int layout_version_ = kLayoutVersion;
};

// The layout.version of a root's meta.properties text (R18): kUnsupported
// when above `known` (so a tool of an older layout refuses a newer root),
// kCorruption naming `file` on a breach.
Result<int> CheckLayoutVersion(std::string_view meta_text, const std::string& file,
                               int known = DataDir::kLayoutVersion);

// Kafka's murmur2 (seed 0x9747b28c) over `key`.
int32_t Murmur2(std::span<const std::byte> key);
// Kafka's partition for a keyed record: toPositive(murmur2(key)) % partitions,
// toPositive(h) = h & 0x7fffffff. Returns -1 if partitions < 1.
int32_t PartitionForKey(std::span<const std::byte> key, int32_t partitions);

}  // namespace mq
