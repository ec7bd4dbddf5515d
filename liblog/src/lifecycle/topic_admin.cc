// Topic administration: summaries, effective configuration, configuration
// changes, partition increase and deletion (format-spec/layout.md
// §2.3-§2.6, R80-R85).

#include "mq/topic_admin.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/consumer.h"
#include "mq/file.h"
#include "mq/group.h"
#include "mq/group_status.h"
#include "mq/segment.h"
#include "storage/segment.h"
#include "storage/state_file.h"

namespace mq {
namespace {

constexpr const char* kTopicsDir = "topics";
constexpr const char* kDeletedDir = "deleted";
constexpr const char* kConfSuffix = ".conf";
// The staging name of a .conf replaced under the admin lock: short, so a
// 249-byte topic name still fits NAME_MAX, and never `*.conf`.
constexpr const char* kAlterStaging = "alter.tmp";

std::string ConfName(std::string_view topic) { return fmt::format("{}{}", topic, kConfSuffix); }
std::string PartName(std::string_view topic, int32_t p) { return fmt::format("{}-{}", topic, p); }

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// The partition number of a root entry `<topic>-<digits>` of `topic`, or -1.
int32_t PartitionOfEntry(std::string_view name, std::string_view topic) {
  if (name.size() <= topic.size() + 1 || !name.starts_with(topic) || name[topic.size()] != '-')
    return -1;
  const std::string_view digits = name.substr(topic.size() + 1);
  if (digits.size() > 5 || (digits.size() > 1 && digits[0] == '0')) return -1;
  int32_t p = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    p = p * 10 + (c - '0');
  }
  return p;
}

// R81: the admin lock, an exclusive flock on `topics/` held while a change
// reads and replaces a .conf or moves a topic's directories.
class AdminLock {
 public:
  static Result<AdminLock> Take(const DataDir& dir) {
    AdminLock l;
    l.fs_ = dir.fs();
    auto root = OpenDirectory(dir.path(), false, l.fs_);
    if (!root) return root.error();
    auto topics = OpenDirectoryAt(root->get(), kTopicsDir, true, l.fs_);
    if (!topics) return topics.error();
    Status s = l.fs_->Lock(topics->get(), LockMode::kExclusive, LockWait::kBlock);
    if (!s.ok())
      return Status(s.code(), fmt::format("{}/{}: {}", dir.path(), kTopicsDir, s.message()));
    l.root_ = std::move(*root);
    l.topics_ = std::move(*topics);
    l.held_ = true;
    return l;
  }
  AdminLock() = default;
  AdminLock(AdminLock&& o) noexcept
      : fs_(o.fs_), root_(std::move(o.root_)), topics_(std::move(o.topics_)), held_(o.held_) {
    o.held_ = false;
  }
  AdminLock& operator=(AdminLock&&) = delete;
  ~AdminLock() {
    if (held_) (void)fs_->Unlock(topics_.get());
  }
  int root() const { return root_.get(); }
  int topics() const { return topics_.get(); }

 private:
  FileSystem* fs_ = nullptr;
  UniqueFd root_;
  UniqueFd topics_;
  bool held_ = false;
};

// Replaces the topic's .conf with `config` (R84, R82): staging file,
// fsync, rename, fsync of topics/.
Status ReplaceConf(const DataDir& dir, const AdminLock& lock, std::string_view topic,
                   const TopicConfig& config) {
  return WriteFileAtomic(lock.topics(), ConfName(topic), AsBytes(config.Serialize()), dir.fs(),
                         kAlterStaging);
}

// Reads the state file of the partition directory `fd`: nullopt when it is
// missing or not valid (a writer was never here, or died creating it).
std::optional<StateFields> ReadState(int fd, FileSystem* fs) {
  auto file = fs->Open(fd, kStateFileName, FileSystem::kRead);
  if (!file) return std::nullopt;
  for (int attempt = 0; attempt < 3; ++attempt) {
    StateLayout image;
    auto got = (*file)->ReadAt(0, std::as_writable_bytes(std::span(&image, 1)));
    if (!got || *got != sizeof image) return std::nullopt;
    if (image.generation % 2 != 0) continue;  // a writer is publishing
    auto fields = DecodeState(image, kStateFileName);
    if (fields) return *fields;
  }
  return std::nullopt;
}

// Empties and removes the directory `name` in `dir_fd` (a partition
// directory moved into deleted/: files, and at most one level of
// directories below).
Status RemoveTree(FileSystem* fs, int dir_fd, const std::string& name, int depth = 0) {
  auto sub = OpenDirectoryAt(dir_fd, name, false, fs);
  if (!sub && sub.error().code() == Code::kNotFound) return Status::Ok();
  if (!sub) return sub.error();
  auto entries = ListDirectory(sub->get(), PathAt(dir_fd, name), fs);
  if (!entries) return entries.error();
  for (const DirEntry& e : *entries) {
    if (e.is_dir && depth < 2) {
      MQ_RETURN_IF_ERROR(RemoveTree(fs, sub->get(), e.name, depth + 1));
    } else {
      MQ_RETURN_IF_ERROR(fs->Unlink(sub->get(), e.name));
    }
  }
  return fs->RemoveDir(dir_fd, name);
}

// Steps 3-5 of R83 for `topic`, whose marker deleted/<topic>.conf exists:
// moves what is left of its partition directories into deleted/ (unless
// `keep_root`: the topic was created again, its directories are the new
// topic's), removes them, then the marker.
Status FinishOne(FileSystem* fs, int root_fd, int deleted_fd, const std::string& topic,
                 bool keep_root) {
  if (!keep_root) {
    auto names = ListNames(root_fd, "data directory", fs);
    if (!names) return names.error();
    bool moved = false;
    for (const std::string& n : *names) {
      if (PartitionOfEntry(n, topic) < 0) continue;
      MQ_RETURN_IF_ERROR(fs->Rename(root_fd, n, fmt::format("{}/{}", kDeletedDir, n)));
      moved = true;
    }
    if (moved) {
      MQ_RETURN_IF_ERROR(fs->SyncDir(root_fd));
      MQ_RETURN_IF_ERROR(fs->SyncDir(deleted_fd));
    }
  }
  auto names = ListNames(deleted_fd, kDeletedDir, fs);
  if (!names) return names.error();
  for (const std::string& n : *names) {
    if (PartitionOfEntry(n, topic) >= 0) MQ_RETURN_IF_ERROR(RemoveTree(fs, deleted_fd, n));
  }
  MQ_RETURN_IF_ERROR(fs->SyncDir(deleted_fd));
  MQ_RETURN_IF_ERROR(fs->Unlink(deleted_fd, ConfName(topic)));
  return fs->SyncDir(deleted_fd);
}

Result<std::vector<std::string>> FinishLocked(const DataDir& dir, const AdminLock& lock,
                                              std::optional<std::string_view> only) {
  FileSystem* fs = dir.fs();
  std::vector<std::string> finished;
  auto deleted = OpenDirectoryAt(lock.root(), kDeletedDir, false, fs);
  if (!deleted && deleted.error().code() == Code::kNotFound) return finished;
  if (!deleted) return deleted.error();
  auto names = ListNames(deleted->get(), dir.path() + "/" + kDeletedDir, fs);
  if (!names) return names.error();
  std::vector<std::string> markers;
  for (const std::string& n : *names) {
    const std::string_view v = n;
    if (!v.ends_with(kConfSuffix)) continue;
    const std::string topic(v.substr(0, v.size() - std::strlen(kConfSuffix)));
    if (!ValidateName(topic, "topic").ok()) continue;
    if (only && topic != *only) continue;
    markers.push_back(topic);
  }
  std::sort(markers.begin(), markers.end());
  for (const std::string& topic : markers) {
    auto again = fs->StatAt(lock.topics(), ConfName(topic));
    MQ_RETURN_IF_ERROR(FinishOne(fs, lock.root(), deleted->get(), topic, again.has_value()));
    finished.push_back(topic);
  }
  // Directories in deleted/ that no marker names (a marker was unlinked
  // before them by an older run) are never readable there; removed too.
  if (!only) {
    auto rest = ListDirectory(deleted->get(), dir.path() + "/" + kDeletedDir, fs);
    if (!rest) return rest.error();
    for (const DirEntry& e : *rest)
      if (e.is_dir) MQ_RETURN_IF_ERROR(RemoveTree(fs, deleted->get(), e.name));
  }
  return finished;
}

}  // namespace

namespace {

// R96: the tiered segments of the partition `fd` (listed as every reader
// lists them), added to `s`.
Status SummarizeTier(int fd, PartitionSummary* s, FileSystem* fs) {
  PartitionListing listing;
  auto bases = ListSegments(fd, fs, nullptr, &listing);
  if (!bases) return bases.error();
  s->tier_dir = listing.tier_dir;
  for (int64_t base : listing.tiered) {
    auto st = fs->StatAt(listing.tier_fd.get(), SegmentFileName(base, format::kLogSuffix));
    if (!st) return st.error();
    ++s->tier_segments;
    s->tier_bytes += st->size;
  }
  s->segments += s->tier_segments;
  s->bytes += s->tier_bytes;
  return Status::Ok();
}

// SummarizePartition of the directory `fd` (its path: `partition_dir`).
Result<PartitionSummary> SummarizeOpen(Result<UniqueFd> fd, const std::string& partition_dir,
                                       int32_t partition, FileSystem* fs) {
  PartitionSummary s;
  s.partition = partition;
  if (!fd && fd.error().code() == Code::kNotFound) {
    s.log_end_offset = 0;
    return s;
  }
  if (!fd) return fd.error();
  s.present = true;
  auto names = ListNames(fd->get(), partition_dir, fs);
  if (!names) return names.error();
  int64_t first_base = -1;
  bool has_state = false;
  bool tiered = false;
  for (const std::string& n : *names) {
    if (n == kStateFileName) has_state = true;
    if (n == format::kTierPointerName) tiered = true;
    const int64_t base = NumberedFileOffset(n, format::kLogSuffix);
    if (base < 0) continue;
    auto st = fs->StatAt(fd->get(), n);
    if (!st) return st.error();
    ++s.segments;
    s.bytes += st->size;
    if (first_base < 0 || base < first_base) first_base = base;
  }
  if (tiered) MQ_RETURN_IF_ERROR(SummarizeTier(fd->get(), &s, fs));
  const auto state = has_state ? ReadState(fd->get(), fs) : std::nullopt;
  if (state) {
    s.log_start_offset = state->log_start_offset;
    s.log_end_offset = state->log_end_offset;
  } else {
    s.log_start_offset = std::max<int64_t>(first_base, 0);
    if (s.segments == 0) s.log_end_offset = 0;
  }
  return s;
}

}  // namespace

Result<PartitionSummary> SummarizePartition(const std::string& partition_dir, int32_t partition,
                                            FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  return SummarizeOpen(OpenDirectory(partition_dir, false, fs), partition_dir, partition, fs);
}

Result<TopicSummary> SummarizeTopic(const DataDir& dir, std::string_view topic) {
  auto config = dir.ReadTopic(topic);
  if (!config) return config.error();
  TopicSummary t;
  t.topic = std::string(topic);
  t.config = *config;
  t.partitions.reserve(static_cast<size_t>(config->partitions));
  auto root = OpenDirectory(dir.path(), false, dir.fs());
  if (!root) return root.error();
  for (int32_t p = 0; p < config->partitions; ++p) {
    auto s = SummarizeOpen(OpenDirectoryAt(root->get(), PartName(topic, p), false, dir.fs()),
                           dir.PartitionDir(topic, p), p, dir.fs());
    if (!s) return s.error();
    t.partitions.push_back(*s);
  }
  return t;
}

std::string ConfigValueMeaning(std::string_view key, std::string_view value) {
  if (key == "retention.protect") {
    if (value.empty()) return "none: no group";
    if (value == "*") return "every group";
    return {};
  }
  const bool limit =
      key == "retention.ms" || key == "retention.bytes" || key == "retention.protect.max.ms";
  return limit && value == "-1" ? "no limit" : std::string();
}

std::vector<ConfigEntry> EffectiveConfig(
    const TopicConfig& config, const std::optional<std::pair<int32_t, int32_t>>& replicated) {
  const TopicConfig defaults;
  std::vector<ConfigEntry> out;
  for (std::string_view key : TopicConfig::KeyNames()) {
    ConfigEntry e{std::string(key), *config.Get(key), ""};
    const bool owned = key == "replication.factor" || key == "min.insync.replicas";
    if (!config.cluster.empty() && owned) {
      e.source = "cluster";
      if (replicated)
        e.value =
            fmt::format("{}", key == "replication.factor" ? replicated->first : replicated->second);
      else
        e.value = "-";
    } else {
      e.source = e.value == *defaults.Get(key) ? "default" : "topic";
    }
    e.meaning = ConfigValueMeaning(e.key, e.value);
    out.push_back(std::move(e));
  }
  if (!config.cluster.empty()) {
    out.push_back({"cluster", config.cluster, "topic"});
    out.push_back({"replica.id", fmt::format("{}", config.replica_id), "topic"});
  }
  return out;
}

Result<TopicConfig> AlterTopicConfig(const DataDir& dir, std::string_view topic,
                                     std::span<const std::pair<std::string, std::string>> set,
                                     std::span<const std::string> reset, bool* changed) {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  auto lock = AdminLock::Take(dir);
  if (!lock) return lock.error();
  auto old = dir.ReadTopic(topic);
  if (!old) return old.error();
  const auto keys = TopicConfig::KeyNames();
  auto check_key = [&](std::string_view key) -> Status {
    if (key == "partitions") {
      return Status(Code::kInvalidArgument,
                    "partitions: the partition count is changed with --partitions (R82), not "
                    "as a configuration key");
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      TopicConfig probe;  // the unknown-key error, listing the keys
      Status s = probe.Set(key, "0");
      if (s.ok())
        s = Status(Code::kInvalidArgument, fmt::format("{}: set by mq, not changed (R84)", key));
      return s;
    }
    if (!old->cluster.empty() && (key == "replication.factor" || key == "min.insync.replicas")) {
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: topic \"{}\" is replicated; its cluster state {} holds {} "
                                "(mq-isr), not its configuration (R84)",
                                key, topic, old->cluster, key));
    }
    return Status::Ok();
  };
  TopicConfig next = *old;
  const TopicConfig defaults;
  for (const std::string& key : reset) {
    MQ_RETURN_IF_ERROR(check_key(key));
    MQ_RETURN_IF_ERROR(next.Set(key, *defaults.Get(key)));
  }
  for (size_t i = 0; i < set.size(); ++i) {
    const auto& [key, value] = set[i];
    MQ_RETURN_IF_ERROR(check_key(key));
    for (size_t j = 0; j < i; ++j) {
      if (set[j].first == key && set[j].second != value) {
        return Status(Code::kInvalidArgument, fmt::format("{}: given twice, as {} and as {} (R84)",
                                                          key, set[j].second, value));
      }
    }
    if (std::find(reset.begin(), reset.end(), key) != reset.end()) {
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: both set and reset to its default (R84)", key));
    }
    MQ_RETURN_IF_ERROR(next.Set(key, value));
  }
  if (Status s = next.Validate(); !s.ok()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("topic \"{}\": {}; nothing changed", topic, s.message()));
  }
  if (changed) *changed = !(next == *old);
  if (next == *old) return next;
  MQ_RETURN_IF_ERROR(ReplaceConf(dir, *lock, topic, next));
  return next;
}

Status CheckPartitionDirs(const DataDir& dir, std::string_view topic, const TopicConfig& config) {
  auto root = OpenDirectory(dir.path(), false, dir.fs());
  if (!root) return root.error();
  std::vector<int32_t> missing;
  for (int32_t p = 0; p < config.partitions; ++p) {
    // Only an absent name counts: anything else there (a file, a FIFO) is
    // refused by whoever opens it, with its own error.
    auto st = dir.fs()->StatAt(root->get(), PartName(topic, p));
    if (st) continue;
    if (st.error().code() != Code::kNotFound) return st.error();
    missing.push_back(p);
  }
  if (missing.empty()) return Status::Ok();
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 5; ++i)
    list += fmt::format("{}{}", i ? ", " : "", PartName(topic, missing[i]));
  if (missing.size() > 5) list += fmt::format(" and {} more", missing.size() - 5);
  return Status::Corruption(
      fmt::format("{}/{}/{}", dir.path(), kTopicsDir, ConfName(topic)), 0, "R80",
      fmt::format("partitions={} but {} of its partition directories are missing ({}): the "
                  "partition count was changed without creating them; mq-topic alter "
                  "--partitions creates them first",
                  config.partitions, missing.size(), list));
}

Result<KeyMoves> CountMovingKeys(const DataDir& dir, std::string_view topic,
                                 const TopicConfig& config, int32_t partitions,
                                 int64_t per_partition) {
  KeyMoves moves;
  ConsumerOptions options;
  options.stop_at_end = true;
  options.max_open = 64;
  auto consumer = Consumer::Open(dir, std::string(topic), std::move(options));
  if (!consumer) return consumer.error();
  for (int32_t p = 0; p < config.partitions; ++p) {
    MQ_RETURN_IF_ERROR((*consumer)->Assign(p, {StartPosition::Kind::kFromEnd, per_partition}));
  }
  std::unordered_set<std::string> seen;
  while (true) {
    auto next = (*consumer)->Next();
    if (!next) return next.error();
    const ConsumedRecord* r = *next;
    if (r == nullptr) break;
    ++moves.records;
    if (!r->record.key) continue;
    const Bytes key = *r->record.key;
    if (!seen.emplace(reinterpret_cast<const char*>(key.data()), key.size()).second) continue;
    ++moves.keys;
    if (PartitionForKey(key, config.partitions) != PartitionForKey(key, partitions)) ++moves.moved;
  }
  return moves;
}

Status IncreasePartitions(const DataDir& dir, std::string_view topic, int32_t partitions) {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  auto lock = AdminLock::Take(dir);
  if (!lock) return lock.error();
  auto old = dir.ReadTopic(topic);
  if (!old) return old.error();
  if (!old->cluster.empty()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("topic \"{}\" is replicated (cluster {}): its partitions are in "
                              "the cluster state, which mq-topic does not change (R82)",
                              topic, old->cluster));
  }
  if (partitions < old->partitions) {
    return Status(Code::kInvalidArgument,
                  fmt::format("topic \"{}\" has {} partitions: the count cannot go down to {}, "
                              "since the records of the partitions removed would be lost and "
                              "keys would move; copy the topic into a new one with fewer "
                              "partitions instead (R82)",
                              topic, old->partitions, partitions));
  }
  TopicConfig next = *old;
  MQ_RETURN_IF_ERROR(next.Set("partitions", fmt::format("{}", partitions)));
  if (partitions == old->partitions) return Status::Ok();
  // Every partition directory first (existing ones kept), the root synced:
  // once the .conf says `partitions`, all of them exist (R82).
  for (int32_t p = 0; p < partitions; ++p) {
    auto d = OpenDirectoryAt(lock->root(), PartName(topic, p), true, dir.fs());
    if (!d) return d.error();
  }
  MQ_RETURN_IF_ERROR(dir.fs()->SyncDir(lock->root()));
  return ReplaceConf(dir, *lock, topic, next);
}

Result<TopicHolders> FindTopicHolders(const DataDir& dir, std::string_view topic) {
  auto config = dir.ReadTopic(topic);
  if (!config) return config.error();
  TopicHolders h;
  FileSystem* fs = dir.fs();
  for (int32_t p = 0; p < config->partitions; ++p) {
    auto pd = OpenDirectory(dir.PartitionDir(topic, p), false, fs);
    if (!pd && pd.error().code() == Code::kNotFound) continue;
    if (!pd) return pd.error();
    // R85: an open writer holds the directory's flock shared.
    Status s = fs->Lock(pd->get(), LockMode::kExclusive, LockWait::kTry);
    if (s.code() == Code::kBusy) {
      h.written.push_back(p);
    } else if (!s.ok()) {
      return s;
    } else {
      (void)fs->Unlock(pd->get());
    }
  }
  auto groups = LiveGroupsReading(dir, topic);
  if (!groups) return groups.error();
  h.groups = std::move(*groups);
  return h;
}

Result<std::vector<std::string>> LiveGroupsReading(const DataDir& dir, std::string_view topic) {
  std::vector<std::string> out;
  auto groups = ListGroups(dir.path());
  if (!groups) return groups.error();
  for (const std::string& name : *groups) {
    auto group = Group::Open(dir.path(), name, false, dir.fs());
    if (!group) continue;  // removed meanwhile
    auto live = HasLiveMembers(*group);
    if (!live || !*live) continue;
    auto d = DescribeGroup(dir, *group, topic);
    if (!d) continue;  // the group has nothing of this topic
    for (const GroupMemberStatus& m : d->members) {
      if (m.absent) continue;
      if (!m.topics || std::find(m.topics->begin(), m.topics->end(), topic) != m.topics->end()) {
        out.push_back(name);
        break;
      }
    }
  }
  return out;
}

Status DeleteTopic(const DataDir& dir, std::string_view topic, bool force) {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  auto lock = AdminLock::Take(dir);
  if (!lock) return lock.error();
  FileSystem* fs = dir.fs();
  auto config = dir.ReadTopic(topic);
  if (!config) return config.error();
  if (!config->cluster.empty()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("topic \"{}\" is replicated (cluster {}): deleting it needs every "
                              "replica and the cluster state changed together, which mq-topic "
                              "does not do; nothing was deleted (R83)",
                              topic, config->cluster));
  }
  // R85: each partition directory's flock, exclusive, held until the
  // directory has moved: busy while a writer has it open, and no writer
  // opens it meanwhile (PartitionWriter::Open is refused, kBusy).
  std::vector<UniqueFd> held;
  std::vector<int32_t> written;
  for (int32_t p = 0; p < config->partitions; ++p) {
    auto pd = OpenDirectoryAt(lock->root(), PartName(topic, p), false, fs);
    if (!pd && pd.error().code() == Code::kNotFound) continue;
    if (!pd) return pd.error();
    Status s = fs->Lock(pd->get(), LockMode::kExclusive, LockWait::kTry);
    if (s.code() == Code::kBusy) {
      written.push_back(p);
      continue;
    }
    MQ_RETURN_IF_ERROR(s);
    held.push_back(std::move(*pd));
  }
  if (!force) {
    auto groups = LiveGroupsReading(dir, topic);
    if (!groups) return groups.error();
    std::string why;
    if (!written.empty()) {
      std::string parts;
      for (int32_t p : written) parts += fmt::format("{}{}", parts.empty() ? "" : ",", p);
      why += fmt::format("a producer has partition {} open", parts);
    }
    for (const std::string& g : *groups)
      why += fmt::format("{}group \"{}\" has a live member reading it", why.empty() ? "" : "; ", g);
    if (!why.empty()) {
      return Status(Code::kBusy, fmt::format("topic \"{}\" is in use: {}; nothing was deleted "
                                             "(--force deletes it anyway) (R83)",
                                             topic, why));
    }
  }
  // Step 1: deleted/ exists. Step 2, the commit: the .conf moves into it.
  auto deleted = OpenDirectoryAt(lock->root(), kDeletedDir, true, fs);
  if (!deleted) return deleted.error();
  MQ_RETURN_IF_ERROR(fs->SyncDir(lock->root()));
  MQ_RETURN_IF_ERROR(fs->Rename(lock->root(), fmt::format("{}/{}", kTopicsDir, ConfName(topic)),
                                fmt::format("{}/{}", kDeletedDir, ConfName(topic))));
  MQ_RETURN_IF_ERROR(fs->SyncDir(deleted->get()));
  MQ_RETURN_IF_ERROR(fs->SyncDir(lock->topics()));
  // Steps 3-5.
  return FinishOne(fs, lock->root(), deleted->get(), std::string(topic), false);
}

Result<std::vector<std::string>> FinishDeletions(const DataDir& dir,
                                                 std::optional<std::string_view> topic) {
  auto lock = AdminLock::Take(dir);
  if (!lock) return lock.error();
  return FinishLocked(dir, *lock, topic);
}

Result<TopicIdentity> ReadTopicIdentity(const DataDir& dir, std::string_view topic,
                                        int32_t partition) {
  auto root = OpenDirectory(dir.path(), false, dir.fs());
  if (!root) return root.error();
  auto st = dir.fs()->StatAt(root->get(), PartName(topic, partition));
  if (!st) return st.error();
  return TopicIdentity{partition, st->dev, st->ino};
}

Status CheckTopicExists(const DataDir& dir, std::string_view topic,
                        const std::optional<TopicIdentity>& opened) {
  // Only a topic file missing from a data directory that opens is the topic
  // deleted (R83). The data directory gone from its path or unreadable
  // (moved away, its disk unmounted, its mode changed) is not: a follower
  // keeps reading what its open descriptors hold, as before.
  auto root = OpenDirectory(dir.path(), false, dir.fs());
  if (!root) return Status::Ok();
  auto st = dir.fs()->StatAt(root->get(), fmt::format("{}/{}", kTopicsDir, ConfName(topic)));
  if (!st && st.error().code() == Code::kNotFound)
    return Status(Code::kNotFound,
                  fmt::format("topic \"{}\" was deleted ({}/{}/{} is gone): nothing more will be "
                              "appended to it",
                              topic, dir.path(), kTopicsDir, ConfName(topic)));
  if (!st || !opened) return Status::Ok();
  // The topic file is there: is it still the topic that was opened? A
  // partition directory missing (a deletion's step 3 under way) says
  // nothing yet; the next look decides.
  const std::string part_name = PartName(topic, opened->partition);
  auto part = dir.fs()->StatAt(root->get(), part_name);
  if (!part || TopicIdentity{opened->partition, part->dev, part->ino} == *opened)
    return Status::Ok();
  return Status(Code::kNotFound,
                fmt::format("topic \"{}\" was deleted and created again ({}/{} is a new "
                            "directory): nothing more will be appended to the topic read so far; "
                            "start again to read the new one",
                            topic, dir.path(), part_name));
}

}  // namespace mq
