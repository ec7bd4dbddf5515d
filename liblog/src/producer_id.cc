#include "mq/producer_id.h"

#include <charconv>
#include <span>

#include <fmt/format.h>

#include "mq/batch.h"
#include "mq/cluster.h"
#include "mq/topic.h"

namespace mq {
namespace {

constexpr const char* kRegistryDir = "producers";
// Holds the next id to allocate. Its name has no ".id"/".lock" suffix, so
// no producer name can collide with it.
constexpr const char* kNextIdFile = "next-producer-id";
// A registry file is one decimal number and a newline.
constexpr size_t kMaxIdFileBytes = 32;
// Registry files are written through this one staging name, under the
// registry lock: `<name>.id.tmp` would be 256 bytes for a 249-byte name, one
// over NAME_MAX. It ends in neither ".id" nor ".lock", so no name collides.
constexpr const char* kStagingFile = "id.tmp";

// Reads a registry file: nullopt if absent, kCorruption if not a number.
Result<std::optional<int64_t>> ReadId(FileSystem* fs, int dir_fd, const std::string& name,
                                      const std::string& label) {
  auto opened = fs->Open(dir_fd, name, FileSystem::kRead);
  if (!opened && opened.error().code() == Code::kNotFound) return std::optional<int64_t>();
  if (!opened) return opened.error();
  // One byte past the limit: a longer file is told from one at the limit.
  char buf[kMaxIdFileBytes + 1];
  auto got = (*opened)->ReadAt(0, std::as_writable_bytes(std::span<char>(buf)));
  if (!got) return got.error();
  const size_t n = *got;
  std::string_view text(buf, n);
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  int64_t id = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || id < 0 ||
      n > kMaxIdFileBytes) {
    return Status::Corruption(label, 0, "P8", "not a producer id (one decimal number >= 0)");
  }
  return std::optional<int64_t>(id);
}

// The registry directory's own lock (flock on its descriptor, through the
// FileSystem seam), exclusive, released explicitly when this goes out of
// scope (mq/lock.h: a child another thread forks holds a copy of the
// descriptor until it execs).
class RegistryLock {
 public:
  explicit RegistryLock(FileSystem* fs) : fs_(fs) {}
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
  ~RegistryLock() {
    if (fd_ >= 0) (void)fs_->Unlock(fd_);
  }
  Status Take(int dir_fd, const std::string& registry) {
    Status s = fs_->Lock(dir_fd, LockMode::kExclusive, LockWait::kBlock);
    if (!s.ok()) return Status(s.code(), registry + ": lock: " + s.message());
    fd_ = dir_fd;
    return Status::Ok();
  }

 private:
  FileSystem* fs_;
  int fd_ = -1;
};

Status WriteId(FileSystem* fs, int dir_fd, const std::string& name, int64_t id) {
  std::string text = fmt::format("{}\n", id);
  return WriteFileAtomic(dir_fd, name, AsBytes(text), fs, kStagingFile);
}

// Allocates or looks up the id of `name` under the registry directory lock.
Result<int64_t> LookUp(FileSystem* fs, int dir_fd, const std::string& name,
                       const std::string& registry) {
  RegistryLock lock(fs);
  MQ_RETURN_IF_ERROR(lock.Take(dir_fd, registry));

  std::string id_file = name + ".id";
  auto existing = ReadId(fs, dir_fd, id_file, registry + "/" + id_file);
  if (!existing) return existing.error();
  if (existing->has_value()) return **existing;

  auto next = ReadId(fs, dir_fd, kNextIdFile, registry + "/" + kNextIdFile);
  if (!next) return next.error();
  int64_t id = next->value_or(0);
  if (id == INT64_MAX) return Status(Code::kTooLarge, registry + ": producer ids exhausted");
  // The counter first: a crash between the two writes wastes an id, never
  // gives one to two names.
  MQ_RETURN_IF_ERROR(WriteId(fs, dir_fd, kNextIdFile, id + 1));
  MQ_RETURN_IF_ERROR(WriteId(fs, dir_fd, id_file, id));
  return id;
}

}  // namespace

Result<ProducerIdentity> ProducerIdentity::Acquire(const std::string& data_dir,
                                                   std::string_view name,
                                                   ClusterStore* cluster, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  MQ_RETURN_IF_ERROR(ValidateName(name, "producer id"));
  auto root = OpenDirectory(data_dir, false, fs);
  if (!root) return root.error();
  auto dir = OpenDirectoryAt(root->get(), kRegistryDir, true, fs);
  if (!dir) return dir.error();
  const std::string registry = data_dir + "/" + kRegistryDir;
  const std::string lock_name = std::string(name) + ".lock";

  auto lock =
      FileLock::Acquire(dir->get(), lock_name, LockMode::kExclusive, LockWait::kTry, fs);
  if (!lock && lock.error().code() == Code::kBusy) {
    return Status(Code::kBusy,
                  fmt::format("producer id '{}' is in use by another run ({}/{} is locked)", name,
                              registry, lock_name));
  }
  if (!lock) return lock.error();
  // A replicated topic's ids come from its cluster (P10): the root's
  // registry is neither read nor changed, so what it holds (or what an
  // earlier mq carried into it) never decides a replicated partition's id.
  auto id = cluster ? cluster->ProducerId(name)
                    : LookUp(fs, dir->get(), std::string(name), registry);
  if (!id) return id.error();
  return ProducerIdentity(std::move(*lock), *id);
}

}  // namespace mq
