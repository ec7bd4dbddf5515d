// The data directory (format-spec/layout.md §1): meta.properties, topics/,
// and one directory per partition. Every path below the root is opened
// relative to the root's descriptor, refusing symlinks.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "format/format.h"
#include "io/properties.h"
#include "mq/file.h"
#include "mq/topic.h"
#include "mq/topic_admin.h"

namespace mq {
namespace {

// The root's creation lock (§1.3), a flock on the root's own descriptor,
// released explicitly when the scope ends (before the descriptor closes):
// a child another thread forks meanwhile holds a copy of the descriptor
// until it execs, and would keep a lock that is only closed.
class RootLock {
 public:
  RootLock(FileSystem* fs, int fd) : fs_(fs), fd_(fd) {}
  RootLock(const RootLock&) = delete;
  RootLock& operator=(const RootLock&) = delete;
  ~RootLock() {
    if (held_) (void)fs_->Unlock(fd_);
  }
  Status Lock(LockMode mode) {
    Status s = fs_->Lock(fd_, mode, LockWait::kBlock);
    held_ = s.ok();
    return s;
  }

 private:
  FileSystem* fs_;
  int fd_;
  bool held_ = false;
};

constexpr const char* kMetaFile = "meta.properties";
constexpr const char* kTopicsDir = "topics";
constexpr const char* kConfSuffix = ".conf";
constexpr size_t kMaxMetaBytes = 64 * 1024;

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Reads all of `name` in `dir_fd` if it holds at most `max_bytes`.
Result<std::string> ReadSmallFile(FileSystem* fs, int dir_fd, const std::string& name,
                                  size_t max_bytes) {
  auto bytes = ReadFileAt(dir_fd, name, max_bytes, fs);
  if (!bytes) return bytes.error();
  return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

// A group- or world-writable root would let another user swap a partition
// directory for a symlink or plant segments; mq refuses to run in it.
Status CheckModes(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(path, errno);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status(
        Code::kPermission,
        fmt::format("{}: the data directory is {}-writable (mode {:04o}): another "
                    "user could replace its files; run chmod go-w on it",
                    path, (st.st_mode & S_IWOTH) ? "world" : "group", st.st_mode & 07777));
  }
  return Status::Ok();
}

Result<bool> IsEmptyDirectory(FileSystem* fs, int fd, const std::string& path) {
  auto names = ListNames(fd, path, fs);
  if (!names) return names.error();
  return names->empty();
}

std::string MetaText() {
  return fmt::format("# mq data directory (format-spec/layout.md section 1)\nlayout.version={}\n",
                     DataDir::kLayoutVersion);
}

// Adopts `fd` as a new data directory: only if it is empty, so a typo never
// turns $HOME into a data directory.
Status Initialize(FileSystem* fs, int fd, const std::string& path) {
  auto empty = IsEmptyDirectory(fs, fd, path);
  if (!empty) return empty.error();
  if (!*empty) {
    return Status(
        Code::kInvalidArgument,
        fmt::format("{}: not an mq data directory (no {}) and not empty", path, kMetaFile));
  }
  MQ_RETURN_IF_ERROR(WriteFileAtomic(fd, kMetaFile, AsBytes(MetaText()), fs));
  auto topics = OpenDirectoryAt(fd, kTopicsDir, true, fs);
  if (!topics) return topics.error();
  return fs->SyncDir(fd);
}

std::string ConfName(std::string_view topic) { return fmt::format("{}{}", topic, kConfSuffix); }

}  // namespace

// meta.properties holds layout.version (R18).
Result<int> CheckLayoutVersion(std::string_view text, const std::string& file, int known) {
  int64_t version = 0;
  Status s = ForEachProperty(text, file, "R18", [&](const PropertyLine& p) -> Status {
    if (p.key != "layout.version") return Status::Ok();  // room for later keys
    if (!ParseInt64(p.value, 1, INT32_MAX, &version)) {
      return Status::Corruption(file, p.position, "R18",
                                fmt::format("line {}: bad layout.version", p.line));
    }
    return Status::Ok();
  });
  MQ_RETURN_IF_ERROR(s);
  if (version == 0) return Status::Corruption(file, 0, "R18", "missing layout.version");
  if (version > known) {
    return Status(Code::kUnsupported,
                  fmt::format("{}: layout.version {} is newer than this mq reads ({})", file,
                              version, known));
  }
  return static_cast<int>(version);
}

Result<DataDir> DataDir::Open(const std::string& path, bool create, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto fd = OpenDirectory(path, create, fs);
  if (!fd) return fd.error();
  MQ_RETURN_IF_ERROR(CheckModes(fd->get(), path));
  const std::string meta_path = path + "/" + kMetaFile;
  RootLock root_lock(fs, fd->get());
  auto meta = ReadSmallFile(fs, fd->get(), kMetaFile, kMaxMetaBytes);
  if (!meta && meta.error().code() == Code::kNotFound) {
    // Several processes may create the same data directory at once: the
    // creator initializes it under an exclusive flock on the directory, and
    // everyone who finds no meta.properties looks again under the lock (the
    // kernel drops it when the descriptor closes, or the holder dies).
    Status locked = root_lock.Lock(create ? LockMode::kExclusive : LockMode::kShared);
    if (!locked.ok()) return Status(locked.code(), path + ": " + locked.message());
    meta = ReadSmallFile(fs, fd->get(), kMetaFile, kMaxMetaBytes);
  }
  if (!meta && meta.error().code() == Code::kNotFound && create) {
    MQ_RETURN_IF_ERROR(Initialize(fs, fd->get(), path));
  } else if (!meta && meta.error().code() == Code::kNotFound) {
    return Status(Code::kNotFound,
                  fmt::format("{}: not an mq data directory (no {})", path, kMetaFile));
  } else if (!meta) {
    return meta.error();
  }
  DataDir dir;
  if (meta) {
    auto version = CheckLayoutVersion(*meta, meta_path);
    if (!version) return version.error();
    dir.layout_version_ = *version;
  }
  dir.path_ = path;
  dir.fs_ = fs;
  return dir;
}

Status DataDir::UpgradeLayout() {
  if (layout_version_ >= kLayoutVersion) return Status::Ok();
  auto fd = OpenDirectory(path_, false, fs_);
  if (!fd) return fd.error();
  // The creation lock of §1.3: no root is initialized or upgraded twice at once.
  RootLock root_lock(fs_, fd->get());
  Status locked = root_lock.Lock(LockMode::kExclusive);
  if (!locked.ok()) return Status(locked.code(), path_ + ": " + locked.message());
  const std::string meta_path = path_ + "/" + kMetaFile;
  auto meta = ReadSmallFile(fs_, fd->get(), kMetaFile, kMaxMetaBytes);
  if (!meta) return meta.error();
  auto version = CheckLayoutVersion(*meta, meta_path);
  if (!version) return version.error();
  if (*version < kLayoutVersion) {
    const std::string text = MetaText();
    MQ_RETURN_IF_ERROR(
        WriteFileAtomic(fd->get(), kMetaFile, std::as_bytes(std::span<const char>(text)), fs_));
  }
  layout_version_ = kLayoutVersion;
  return Status::Ok();
}

Result<TopicConfig> DataDir::ReadTopic(std::string_view topic) const {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  auto root = OpenDirectory(path_, false, fs_);
  if (!root) return root.error();
  const std::string file = fmt::format("{}/{}/{}", path_, kTopicsDir, ConfName(topic));
  auto topics = OpenDirectoryAt(root->get(), kTopicsDir, false, fs_);
  auto text = topics
                  ? ReadSmallFile(fs_, topics->get(), ConfName(topic), TopicConfig::kMaxFileBytes)
                  : Result<std::string>(topics.error());
  if (!text && text.error().code() == Code::kNotFound) {
    return Status(Code::kNotFound,
                  fmt::format("{}: no topic \"{}\" ({} not found)", path_, topic, file));
  }
  if (!text) return text.error();
  return TopicConfig::Parse(*text, file);
}

namespace {

// The partition directories of a topic, created if missing.
Status MakePartitionDirs(FileSystem* fs, int root_fd, std::string_view topic, int32_t partitions) {
  for (int32_t p = 0; p < partitions; ++p) {
    auto dir = OpenDirectoryAt(root_fd, fmt::format("{}-{}", topic, p), true, fs);
    if (!dir) return dir.error();
  }
  return fs->SyncDir(root_fd);
}

Status CompareExisting(const TopicConfig& existing, const TopicConfig& wanted,
                       std::string_view topic) {
  if (existing.partitions != wanted.partitions) {
    return Status(Code::kInvalidArgument,
                  fmt::format("topic \"{}\" exists with {} partitions, not {}", topic,
                              existing.partitions, wanted.partitions));
  }
  return Status::Ok();
}

// Publishes `text` as `name` in `dir_fd` only if `name` does not exist:
// writes a staging file (fsynced by WriteFileAtomic), then link(2), which
// fails with EEXIST instead of replacing. Returns false if it existed.
// (link(2) is the one call here outside the FileSystem seam.)
Result<bool> PublishIfAbsent(FileSystem* fs, int dir_fd, const std::string& name,
                             const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  // Never ends in .conf, so ListTopics never sees it; a crash may leave one
  // behind, which is harmless (layout.md §1).
  const std::string staging = fmt::format("create-{}-{}.staging", ::getpid(), counter++);
  MQ_RETURN_IF_ERROR(WriteFileAtomic(dir_fd, staging, AsBytes(text), fs));
  const int rc = ::linkat(dir_fd, staging.c_str(), dir_fd, name.c_str(), 0);
  const int err = errno;
  Status removed = fs->Unlink(dir_fd, staging);
  if (rc != 0 && err == EEXIST) return false;
  if (rc != 0) return ErrnoStatus(fmt::format("link {} to {}", staging, name), err);
  MQ_RETURN_IF_ERROR(removed);
  MQ_RETURN_IF_ERROR(fs->SyncDir(dir_fd));
  return true;
}

}  // namespace

Status DataDir::CreateTopic(std::string_view topic, const TopicConfig& config) const {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  // A deletion of the name that a crash interrupted ends first (R83): a new
  // topic never takes over the old one's partition directories.
  if (auto finished = FinishDeletions(*this, topic); !finished) return finished.error();
  MQ_RETURN_IF_ERROR(config.Validate());
  auto existing = ReadTopic(topic);
  if (existing) {
    MQ_RETURN_IF_ERROR(CompareExisting(*existing, config, topic));
  } else if (existing.error().code() != Code::kNotFound) {
    return existing.error();
  }
  auto root = OpenDirectory(path_, false, fs_);
  if (!root) return root.error();
  // Partition directories first: the .conf is the commit point, so a topic
  // that is listed always has all its partitions.
  const int32_t partitions = existing ? existing->partitions : config.partitions;
  MQ_RETURN_IF_ERROR(MakePartitionDirs(fs_, root->get(), topic, partitions));
  if (existing) return Status::Ok();
  auto topics = OpenDirectoryAt(root->get(), kTopicsDir, true, fs_);
  if (!topics) return topics.error();
  auto published = PublishIfAbsent(fs_, topics->get(), ConfName(topic), config.Serialize());
  if (!published) return published.error();
  if (*published) return Status::Ok();
  // Another process created it between our read and our link.
  auto winner = ReadTopic(topic);
  if (!winner) return winner.error();
  // Best effort: partition directories we made beyond the winner's count
  // are not part of the topic (layout.md §1.3); remove them while empty.
  for (int32_t p = winner->partitions; p < config.partitions; ++p) {
    (void)fs_->RemoveDir(root->get(), fmt::format("{}-{}", topic, p));
  }
  return CompareExisting(*winner, config, topic);
}

Result<std::vector<std::string>> DataDir::ListTopics() const {
  auto root = OpenDirectory(path_, false, fs_);
  if (!root) return root.error();
  auto topics = OpenDirectoryAt(root->get(), kTopicsDir, false, fs_);
  std::vector<std::string> names;
  if (!topics && topics.error().code() == Code::kNotFound) return names;
  if (!topics) return topics.error();
  auto entries = ListNames(topics->get(), path_ + "/" + kTopicsDir, fs_);
  if (!entries) return entries.error();
  const std::string_view suffix = kConfSuffix;
  for (const std::string& entry : *entries) {
    const std::string_view n = entry;
    if (n.size() <= suffix.size() || !n.ends_with(suffix)) continue;
    const std::string_view stem = n.substr(0, n.size() - suffix.size());
    if (ValidateName(stem, "topic").ok()) names.emplace_back(stem);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string DataDir::PartitionDir(std::string_view topic, int32_t partition) const {
  return fmt::format("{}/{}-{}", path_, topic, partition);
}

LogConfig DataDir::LogConfigFor(const TopicConfig& config) {
  LogConfig log;
  log.segment_bytes = config.segment_bytes;
  log.segment_ms = config.segment_ms;
  log.index_interval_bytes = config.index_interval_bytes;
  log.limits = DecodeLimitsFor(config);
  log.offsets = config.cleanup_policy == CleanupPolicy::kDelete ? OffsetPolicy::kContiguous
                                                                : OffsetPolicy::kGapsAllowed;
  return log;
}

DecodeLimits DataDir::DecodeLimitsFor(const TopicConfig& config, DecodeLimits base) {
  static_assert(kMessageOverheadBytes == format::kBatchHeaderSize + format::kMaxRecordOverhead);
  const uint32_t batch = config.max_message_bytes + kMessageOverheadBytes;
  base.max_batch_bytes = std::max(base.max_batch_bytes, batch);
  base.max_decompressed_bytes = std::max(base.max_decompressed_bytes, batch);
  return base;
}

}  // namespace mq
