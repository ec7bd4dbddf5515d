// FileLock: flock(2) on regular files opened by OpenRegularFileAt (mq/lock.h).
#include "mq/lock.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <fmt/format.h>

namespace mq {

namespace {

// A lock granted on a file that was replaced meanwhile is retried this
// often before the churn is reported.
constexpr int kMaxReplacedRetries = 100;

const char* ModeName(LockMode mode) {
  return mode == LockMode::kShared ? "shared" : "exclusive";
}

// True when `name` in `dir_fd` is still the file `fd` is open on.
bool StillNamed(int dir_fd, const std::string& name, int fd) {
  struct stat named, held;
  if (::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (::fstat(fd, &held) != 0) return false;
  return named.st_dev == held.st_dev && named.st_ino == held.st_ino;
}

}  // namespace

Result<FileLock> FileLock::Open(int dir_fd, const std::string& name, bool create) {
  auto fd = OpenRegularFileAt(dir_fd, name, create ? O_RDWR | O_CREAT : O_RDONLY);
  if (!fd) return fd.error();
  FileLock lock;
  lock.fd_ = std::move(*fd);
  lock.path_ = PathAt(dir_fd, name);
  return lock;
}

Result<FileLock> FileLock::Open(int dir_fd, const std::string& name, bool create,
                                std::string path) {
  auto fd = OpenRegularFileAt(dir_fd, name, create ? O_RDWR | O_CREAT : O_RDONLY);
  if (!fd) return fd.error();
  FileLock lock;
  lock.fd_ = std::move(*fd);
  lock.path_ = std::move(path);
  return lock;
}

Result<FileLock> FileLock::Acquire(int dir_fd, const std::string& name, LockMode mode,
                                   LockWait wait) {
  for (int attempt = 0;; ++attempt) {
    auto lock = Open(dir_fd, name, true);
    if (!lock) return lock.error();
    MQ_RETURN_IF_ERROR(lock->Lock(mode, wait));
    if (StillNamed(dir_fd, name, lock->fd())) return lock;
    if (attempt >= kMaxReplacedRetries) {
      return Status(Code::kBusy, fmt::format("{}: replaced {} times while being locked",
                                             lock->path(), attempt + 1));
    }
  }
}

Status FileLock::Lock(LockMode mode, LockWait wait) {
  int op = mode == LockMode::kShared ? LOCK_SH : LOCK_EX;
  if (wait == LockWait::kTry) op |= LOCK_NB;
  while (::flock(fd_.get(), op) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EWOULDBLOCK) {
      return Status(Code::kBusy,
                    fmt::format("{}: locked by another process ({} lock not granted)", path_,
                                ModeName(mode)));
    }
    return ErrnoStatus(fmt::format("{}: {} lock", path_, ModeName(mode)), err);
  }
  return Status::Ok();
}

Status FileLock::Unlock() {
  if (::flock(fd_.get(), LOCK_UN) != 0) return ErrnoStatus(path_ + ": unlock", errno);
  return Status::Ok();
}

Result<bool> IsLocked(int dir_fd, const std::string& name, LockMode probe) {
  auto lock = FileLock::Open(dir_fd, name, false);
  if (!lock && lock.error().code() == Code::kNotFound) return false;
  if (!lock) return lock.error();
  Status s = lock->Lock(probe, LockWait::kTry);
  if (s.code() == Code::kBusy) return true;
  MQ_RETURN_IF_ERROR(s);
  // Closing the probe's own description drops what it took.
  return false;
}

Status CheckFileSystemType(int64_t f_type, const std::string& path) {
  if (f_type == kNfsSuperMagic) {
    return Status(Code::kPermission,
                  fmt::format("{}: is on NFS, where kernel locks do not reliably follow "
                              "their holders' lives; use a local file system; refused",
                              path));
  }
  return Status::Ok();
}

Status CheckLockableFileSystem(int dir_fd, const std::string& path) {
  struct statfs st;
  if (::fstatfs(dir_fd, &st) != 0) return ErrnoStatus(path + ": statfs", errno);
  return CheckFileSystemType(static_cast<int64_t>(st.f_type), path);
}

}  // namespace mq
