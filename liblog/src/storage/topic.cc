// Names that become paths (R12) and the topic configuration file (R16,
// format-spec/layout.md §2).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "format/format.h"
#include "io/properties.h"
#include "mq/address.h"
#include "mq/topic.h"
#include "mq/units.h"

namespace mq {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// A name fit for an error message: printable ASCII as is, anything else as
// \xNN, long names cut (the length is reported separately).
std::string Printable(std::string_view s) {
  constexpr size_t kShown = 40;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > kShown) out += "...";
  return out;
}

Status BadName(std::string_view what, std::string_view name, std::string_view why) {
  return Status(Code::kInvalidArgument,
                fmt::format("invalid {} name \"{}\": {} (R12)", what, Printable(name), why));
}

}  // namespace

Status ValidateName(std::string_view name, std::string_view what) {
  if (name.empty()) return BadName(what, name, "names are 1 to 249 characters");
  if (name.size() > kMaxNameLength) {
    return BadName(what, name,
                   fmt::format("{} characters, at most {} allowed", name.size(), kMaxNameLength));
  }
  if (name == "." || name == "..") return BadName(what, name, "\".\" and \"..\" are not allowed");
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i])) {
      return BadName(what, name,
                     fmt::format("character '{}' at position {} is not in [A-Za-z0-9._-]",
                                 Printable(name.substr(i, 1)), i));
    }
  }
  return Status::Ok();
}

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// One integer key of §2: its range, and where it lives in TopicConfig.
struct IntKey {
  std::string_view name;
  int64_t min;
  int64_t max;
  int64_t (*get)(const TopicConfig&);
  void (*set)(TopicConfig&, int64_t);
};

// In the order Serialize writes them (§2). cleanup.policy follows.
constexpr IntKey kIntKeys[] = {
    {"partitions", 1, 10000, [](const TopicConfig& c) -> int64_t { return c.partitions; },
     [](TopicConfig& c, int64_t v) { c.partitions = static_cast<int32_t>(v); }},
    {"replication.factor", 1, 32767,
     [](const TopicConfig& c) -> int64_t { return c.replication_factor; },
     [](TopicConfig& c, int64_t v) { c.replication_factor = static_cast<int32_t>(v); }},
    {"min.insync.replicas", 1, 32767,
     [](const TopicConfig& c) -> int64_t { return c.min_insync_replicas; },
     [](TopicConfig& c, int64_t v) { c.min_insync_replicas = static_cast<int32_t>(v); }},
    {"retention.ms", -1, kInt64Max, [](const TopicConfig& c) { return c.retention_ms; },
     [](TopicConfig& c, int64_t v) { c.retention_ms = v; }},
    {"retention.bytes", -1, kInt64Max, [](const TopicConfig& c) { return c.retention_bytes; },
     [](TopicConfig& c, int64_t v) { c.retention_bytes = v; }},
    {"segment.bytes", static_cast<int64_t>(format::kBatchHeaderSize),
     static_cast<int64_t>(format::kMaxSegmentBytes),
     [](const TopicConfig& c) { return static_cast<int64_t>(c.segment_bytes); },
     [](TopicConfig& c, int64_t v) { c.segment_bytes = static_cast<uint64_t>(v); }},
    {"segment.ms", 1, kInt64Max, [](const TopicConfig& c) { return c.segment_ms; },
     [](TopicConfig& c, int64_t v) { c.segment_ms = v; }},
    {"index.interval.bytes", 0, kInt32Max,
     [](const TopicConfig& c) -> int64_t { return c.index_interval_bytes; },
     [](TopicConfig& c, int64_t v) { c.index_interval_bytes = static_cast<uint32_t>(v); }},
    {"max.message.bytes", static_cast<int64_t>(format::kBatchHeaderSize), int64_t{1} << 30,
     [](const TopicConfig& c) -> int64_t { return c.max_message_bytes; },
     [](TopicConfig& c, int64_t v) { c.max_message_bytes = static_cast<uint32_t>(v); }},
};

// R90, R108: retention's and the tier's integer keys that follow
// cleanup.policy and retention.protect, written only when not at their
// default.
constexpr IntKey kRetentionIntKeys[] = {
    {"retention.protect.max.ms", -1, kInt64Max,
     [](const TopicConfig& c) { return c.retention_protect_max_ms; },
     [](TopicConfig& c, int64_t v) { c.retention_protect_max_ms = v; }},
    {"file.delete.delay.ms", 0, kInt64Max,
     [](const TopicConfig& c) { return c.file_delete_delay_ms; },
     [](TopicConfig& c, int64_t v) { c.file_delete_delay_ms = v; }},
    // R108: tiered segments' age (format-spec/retention.md §21.2).
    {"tier.after.ms", -1, kInt64Max, [](const TopicConfig& c) { return c.tier_after_ms; },
     [](TopicConfig& c, int64_t v) { c.tier_after_ms = v; }},
};

// Every integer key, kIntKeys then kRetentionIntKeys.
const IntKey* FindIntKey(std::string_view name) {
  for (const IntKey& k : kIntKeys)
    if (k.name == name) return &k;
  for (const IntKey& k : kRetentionIntKeys)
    if (k.name == name) return &k;
  return nullptr;
}

constexpr std::string_view kFormatVersionKey = "format.version";
constexpr std::string_view kCleanupPolicyKey = "cleanup.policy";
constexpr std::string_view kProtectKey = "retention.protect";
// §2.2: a replicated topic's link to its cluster state.
constexpr std::string_view kClusterKey = "cluster";
constexpr std::string_view kReplicaIdKey = "replica.id";
// Keys the cluster state holds for a replicated topic (one source of truth).
constexpr std::string_view kClusterOwnedKeys[] = {"replication.factor", "min.insync.replicas"};

std::string_view PolicyName(CleanupPolicy p) {
  return p == CleanupPolicy::kCompact ? "compact" : "delete";
}

// A key whose value is a duration (`*.ms`) or a size (`*.bytes`): given
// with Set, it takes units (mq/units.h); in a file it is a plain integer.
enum class Unit : uint8_t { kNone, kDuration, kSize };
Unit UnitOf(std::string_view key) {
  if (key.ends_with(".ms")) return Unit::kDuration;
  if (key.ends_with(".bytes")) return Unit::kSize;
  return Unit::kNone;
}

// Parses an integer key's value: with `units`, as UnitOf(key) says.
std::string ParseIntValue(const IntKey& k, std::string_view value, bool units, int64_t* v) {
  const Unit unit = units ? UnitOf(k.name) : Unit::kNone;
  if (unit != Unit::kNone) {
    auto r = unit == Unit::kDuration ? ParseDurationMs(value, {}, k.min, k.max)
                                     : ParseSizeBytes(value, {}, k.min, k.max);
    if (!r) return r.error().message();
    *v = *r;
    return {};
  }
  if (!ParseInt64(value, k.min, k.max, v)) {
    return fmt::format("bad value \"{}\": expected an integer from {} to {}", Printable(value),
                       k.min, k.max);
  }
  return {};
}

// R90: "" (no group), "*" (every group) or group names (R12) separated by
// commas; returns why not.
std::string CheckProtect(std::string_view value) {
  if (value.empty() || value == "*") return {};
  size_t from = 0;
  while (true) {
    const size_t comma = value.find(',', from);
    const std::string_view group = value.substr(from, comma - from);
    if (Status s = ValidateName(group, "group"); !s.ok())
      return fmt::format(
          "bad value \"{}\": expected \"\" (no group), \"*\" (every group) or group "
          "names separated by commas: {}",
          Printable(value), s.message());
    if (comma == std::string_view::npos) return {};
    from = comma + 1;
  }
}

// Applies one key; on failure returns why, without file or line (the caller
// adds those). `units`: durations and sizes may carry units (Set).
std::string Apply(TopicConfig& config, std::string_view key, std::string_view value,
                  bool units = false) {
  if (key == kClusterKey) {
    if (auto a = ParseAddress(value, "cluster"); !a) return a.error().message();
    config.cluster = std::string(value);
    return {};
  }
  if (key == kReplicaIdKey) {
    int64_t v = 0;
    if (!ParseInt64(value, 0, kInt32Max, &v))
      return fmt::format("bad value \"{}\": expected an integer from 0 to {}", Printable(value),
                         kInt32Max);
    config.replica_id = static_cast<int32_t>(v);
    return {};
  }
  if (key == kCleanupPolicyKey) {
    if (value == "delete") {
      config.cleanup_policy = CleanupPolicy::kDelete;
    } else if (value == "compact") {
      config.cleanup_policy = CleanupPolicy::kCompact;
    } else {
      return fmt::format("bad value \"{}\": expected delete or compact", Printable(value));
    }
    return {};
  }
  if (key == kProtectKey) {
    if (std::string why = CheckProtect(value); !why.empty()) return why;
    config.retention_protect = std::string(value);
    return {};
  }
  if (const IntKey* k = FindIntKey(key)) {
    int64_t v = 0;
    if (std::string why = ParseIntValue(*k, value, units, &v); !why.empty()) return why;
    k->set(config, v);
    return {};
  }
  return "unknown key";
}

Status CheckVersion(const PropertyLine& p, const std::string& file) {
  int64_t version = 0;
  if (!ParseInt64(p.value, 1, kInt32Max, &version)) {
    return Status::Corruption(
        file, p.position, "R16",
        fmt::format("line {}: key format.version: bad value \"{}\"", p.line, Printable(p.value)));
  }
  if (version > TopicConfig::kFormatVersion) {
    return Status(Code::kUnsupported,
                  fmt::format("{}: line {}: format.version {} is newer than this mq reads ({})",
                              file, p.line, version, TopicConfig::kFormatVersion));
  }
  return Status::Ok();
}

}  // namespace

Result<TopicConfig> TopicConfig::Parse(std::string_view text, const std::string& file) {
  if (text.size() > kMaxFileBytes) {
    return Status(Code::kTooLarge, fmt::format("{}: {} bytes, a topic configuration holds at "
                                               "most {}",
                                               file, text.size(), kMaxFileBytes));
  }
  TopicConfig config;
  std::vector<std::string_view> seen;
  std::vector<PropertyLine> owned;  // lines of keys a cluster state holds
  Status status = ForEachProperty(text, file, "R16", [&](const PropertyLine& p) -> Status {
    for (std::string_view s : seen) {
      if (s == p.key) {
        return Status::Corruption(
            file, p.position, "R16",
            fmt::format("line {}: key {}: given twice", p.line, Printable(p.key)));
      }
    }
    seen.push_back(p.key);
    for (std::string_view k : kClusterOwnedKeys)
      if (p.key == k) owned.push_back(p);
    if (p.key == kFormatVersionKey) return CheckVersion(p, file);
    const std::string why = Apply(config, p.key, p.value);
    if (why.empty()) return Status::Ok();
    return Status::Corruption(file, p.position, "R16",
                              fmt::format("line {}: key {}: {}", p.line, Printable(p.key), why));
  });
  if (!status.ok()) return status;
  for (std::string_view required : {kFormatVersionKey, std::string_view("partitions")}) {
    if (std::find(seen.begin(), seen.end(), required) == seen.end()) {
      return Status::Corruption(file, 0, "R16", fmt::format("missing key {}", required));
    }
  }
  // §2.2: a replicated topic's replication settings are in its cluster state.
  if (!config.cluster.empty() && !owned.empty()) {
    return Status::Corruption(file, owned[0].position, "R16",
                              fmt::format("line {}: key {}: not allowed with cluster= (the "
                                          "cluster state {} holds it)",
                                          owned[0].line, owned[0].key, config.cluster));
  }
  if (Status s = config.Validate(); !s.ok()) {
    return Status::Corruption(file, 0, "R16", s.message());
  }
  return config;
}

std::string TopicConfig::Serialize() const {
  std::string out = "# mq topic configuration (format-spec/layout.md section 2)\n";
  out += fmt::format("{}={}\n", kFormatVersionKey, kFormatVersion);
  for (const IntKey& k : kIntKeys) {
    const bool owned = std::find(std::begin(kClusterOwnedKeys), std::end(kClusterOwnedKeys),
                                 k.name) != std::end(kClusterOwnedKeys);
    if (owned && !cluster.empty()) continue;  // the cluster state holds it
    out += fmt::format("{}={}\n", k.name, k.get(*this));
  }
  out += fmt::format("{}={}\n", kCleanupPolicyKey, PolicyName(cleanup_policy));
  // R90: written only when set, so that a topic without them reads as before.
  if (!retention_protect.empty()) out += fmt::format("{}={}\n", kProtectKey, retention_protect);
  const TopicConfig defaults;
  for (const IntKey& k : kRetentionIntKeys)
    if (k.get(*this) != k.get(defaults)) out += fmt::format("{}={}\n", k.name, k.get(*this));
  if (!cluster.empty()) {
    out += fmt::format("{}={}\n{}={}\n", kClusterKey, cluster, kReplicaIdKey, replica_id);
  }
  return out;
}

Status TopicConfig::Set(std::string_view key, std::string_view value) {
  if (key == kFormatVersionKey) {
    return Status(Code::kInvalidArgument, "format.version is written by mq, not set");
  }
  const std::string why = Apply(*this, key, value, true);
  if (why.empty()) return Status::Ok();
  if (why == "unknown key") {
    std::string valid;
    for (std::string_view k : KeyNames()) valid += (valid.empty() ? "" : ", ") + std::string(k);
    return Status(Code::kInvalidArgument,
                  fmt::format("topic config key {}: unknown key; the keys are {} (R16)",
                              Printable(key), valid));
  }
  return Status(Code::kInvalidArgument,
                fmt::format("topic config key {}: {} (R16)", Printable(key), why));
}

std::vector<std::string_view> TopicConfig::KeyNames() {
  std::vector<std::string_view> names;
  for (const IntKey& k : kIntKeys) names.push_back(k.name);
  names.push_back(kCleanupPolicyKey);
  names.push_back(kProtectKey);
  for (const IntKey& k : kRetentionIntKeys) names.push_back(k.name);
  return names;
}

std::optional<std::string> TopicConfig::Get(std::string_view key) const {
  if (const IntKey* k = FindIntKey(key)) return fmt::format("{}", k->get(*this));
  if (key == kCleanupPolicyKey) return std::string(PolicyName(cleanup_policy));
  if (key == kProtectKey) return retention_protect;
  if (key == kClusterKey) return cluster.empty() ? std::nullopt : std::optional(cluster);
  if (key == kReplicaIdKey)
    return replica_id < 0 ? std::nullopt : std::optional(fmt::format("{}", replica_id));
  return std::nullopt;
}

Status TopicConfig::Validate() const {
  for (std::span<const IntKey> keys :
       {std::span<const IntKey>(kIntKeys), std::span<const IntKey>(kRetentionIntKeys)}) {
    for (const IntKey& k : keys) {
      const int64_t v = k.get(*this);
      if (v < k.min || v > k.max) {
        return Status(Code::kInvalidArgument,
                      fmt::format("{}={} is outside {}..{} (R16)", k.name, v, k.min, k.max));
      }
    }
  }
  if (std::string why = CheckProtect(retention_protect); !why.empty())
    return Status(Code::kInvalidArgument, fmt::format("{}: {} (R90)", kProtectKey, why));
  if (min_insync_replicas > replication_factor) {
    return Status(Code::kInvalidArgument,
                  fmt::format("min.insync.replicas={} exceeds replication.factor={} (R16)",
                              min_insync_replicas, replication_factor));
  }
  if (cluster.empty() != (replica_id < 0)) {
    return Status(Code::kInvalidArgument,
                  "cluster and replica.id are given together or not at all (R16)");
  }
  if (!cluster.empty()) {
    if (auto a = ParseAddress(cluster, "cluster"); !a) {
      return Status(Code::kInvalidArgument, a.error().message() + " (R16)");
    }
    const TopicConfig defaults;
    if (replication_factor != defaults.replication_factor ||
        min_insync_replicas != defaults.min_insync_replicas) {
      return Status(Code::kInvalidArgument,
                    "replication.factor and min.insync.replicas of a topic with cluster= are "
                    "set in the cluster state, not in its configuration (R16)");
    }
  }
  return Status::Ok();
}

}  // namespace mq
