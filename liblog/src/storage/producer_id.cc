#include "mq/producer_id.h"

#include <fmt/format.h>

#include "format/format.h"
#include "mq/cluster.h"
#include "mq/topic.h"
#include "storage/producer_registry.h"

namespace mq {
namespace {

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

// Allocates or looks up the id of `name` under the registry directory lock
// (ids from 0, P8).
Result<int64_t> LookUp(FileSystem* fs, int dir_fd, const std::string& name,
                       const std::string& registry) {
  RegistryLock lock(fs);
  MQ_RETURN_IF_ERROR(lock.Take(dir_fd, registry));
  return LookUpProducerId(fs, dir_fd, registry, name, 0);
}

}  // namespace

Result<ProducerIdentity> ProducerIdentity::Acquire(const std::string& data_dir,
                                                   std::string_view name, ClusterStore* cluster,
                                                   FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  MQ_RETURN_IF_ERROR(ValidateName(name, "producer id"));
  auto root = OpenDirectory(data_dir, false, fs);
  if (!root) return root.error();
  auto dir = OpenDirectoryAt(root->get(), format::kProducerRegistryDir, true, fs);
  if (!dir) return dir.error();
  const std::string registry = data_dir + "/" + format::kProducerRegistryDir;
  const std::string lock_name = std::string(name) + ".lock";

  auto lock = FileLock::Acquire(dir->get(), lock_name, LockMode::kExclusive, LockWait::kTry, fs);
  if (!lock && lock.error().code() == Code::kBusy) {
    return Status(Code::kBusy,
                  fmt::format("producer id '{}' is in use by another run ({}/{} is locked)", name,
                              registry, lock_name));
  }
  if (!lock) return lock.error();
  // A replicated topic's ids come from its cluster (P10): the root's
  // registry is neither read nor changed, so what it holds (or what an
  // earlier mq carried into it) never decides a replicated partition's id.
  auto id =
      cluster ? cluster->ProducerId(name) : LookUp(fs, dir->get(), std::string(name), registry);
  if (!id) return id.error();
  return ProducerIdentity(std::move(*lock), *id);
}

}  // namespace mq
