// FileLock: flock(2) on regular files opened by OpenRegularFileAt (mq/lock.h).
#include "mq/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <cerrno>

#include <limits>
#include <utility>

#include <fmt/format.h>

namespace mq {

namespace {

// A lock granted on a file that was replaced meanwhile is retried this
// often before the churn is reported.
constexpr int kMaxReplacedRetries = 100;

const char* ModeName(LockMode mode) { return mode == LockMode::kShared ? "shared" : "exclusive"; }

// True when `name` in `dir_fd` is still the file `held` is open on.
Result<bool> StillNamed(FileSystem* fs, int dir_fd, const std::string& name, File* held) {
  auto named = fs->StatAt(dir_fd, name);
  if (!named && named.error().code() == Code::kNotFound) return false;
  if (!named) return named.error();
  auto mine = held->Stat();
  if (!mine) return mine.error();
  return named->dev == mine->dev && named->ino == mine->ino;
}

}  // namespace

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this == &other) return *this;
  Close();
  file_ = std::move(other.file_);
  fs_ = other.fs_;
  path_ = std::move(other.path_);
  flocked_ = std::exchange(other.flocked_, false);
  ranges_ = std::exchange(other.ranges_, false);
  shared_with_children_ = std::exchange(other.shared_with_children_, false);
  return *this;
}

void FileLock::Close() {
  if (!file_) return;
  if (!shared_with_children_) {
    // Through the seam, so that a test sees (and may fail) the release.
    if (flocked_) (void)fs_->Unlock(file_->fd());
    if (ranges_)
      (void)fs_->UnlockRange(file_->fd(), 0,
                             static_cast<uint64_t>(std::numeric_limits<off_t>::max()));
  }
  flocked_ = false;
  ranges_ = false;
  file_.reset();
}

Result<FileLock> FileLock::Open(int dir_fd, const std::string& name, bool create, FileSystem* fs) {
  return Open(dir_fd, name, create, PathAt(dir_fd, name), fs);
}

Result<FileLock> FileLock::Open(int dir_fd, const std::string& name, bool create, std::string path,
                                FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto file = fs->Open(dir_fd, name, create ? FileSystem::kCreate : FileSystem::kRead);
  if (!file) return file.error();
  FileLock lock;
  lock.file_ = std::move(*file);
  lock.fs_ = fs;
  lock.path_ = std::move(path);
  return lock;
}

Result<FileLock> FileLock::Acquire(int dir_fd, const std::string& name, LockMode mode,
                                   LockWait wait, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  for (int attempt = 0;; ++attempt) {
    auto lock = Open(dir_fd, name, true, fs);
    if (!lock) return lock.error();
    MQ_RETURN_IF_ERROR(lock->Lock(mode, wait));
    auto still = StillNamed(fs, dir_fd, name, lock->file_.get());
    if (!still) return still.error();
    if (*still) return lock;
    if (attempt >= kMaxReplacedRetries) {
      return Status(Code::kBusy, fmt::format("{}: replaced {} times while being locked",
                                             lock->path(), attempt + 1));
    }
  }
}

Status FileLock::Lock(LockMode mode, LockWait wait) {
  if (!file_) return Status(Code::kInvalidArgument, path_ + ": lock file is closed");
  Status s = fs_->Lock(file_->fd(), mode, wait);
  if (s.ok()) flocked_ = true;
  if (s.ok()) return s;
  if (s.code() == Code::kBusy && wait == LockWait::kTry) {
    return Status(Code::kBusy, fmt::format("{}: locked by another process ({} lock not granted)",
                                           path_, ModeName(mode)));
  }
  return Status(s.code(), fmt::format("{}: {} lock: {}", path_, ModeName(mode), s.message()));
}

Status FileLock::Unlock() {
  if (!file_) return Status(Code::kInvalidArgument, path_ + ": lock file is closed");
  Status s = fs_->Unlock(file_->fd());
  if (!s.ok()) return Status(s.code(), path_ + ": unlock: " + s.message());
  flocked_ = false;
  return s;
}

Status FileLock::LockRange(uint64_t start, uint64_t len, LockMode mode, LockWait wait) {
  if (!file_) return Status(Code::kInvalidArgument, path_ + ": lock file is closed");
  Status s = fs_->LockRange(file_->fd(), start, len, mode, wait);
  if (s.ok()) ranges_ = true;
  if (s.ok()) return s;
  if (s.code() == Code::kBusy && wait == LockWait::kTry) {
    return Status(Code::kBusy,
                  fmt::format("{}: bytes {}-{} locked by another process ({} lock not granted)",
                              path_, start, start + len - 1, ModeName(mode)));
  }
  return Status(s.code(), fmt::format("{}: {} lock of bytes {}-{}: {}", path_, ModeName(mode),
                                      start, start + len - 1, s.message()));
}

Status FileLock::UnlockRange(uint64_t start, uint64_t len) {
  if (!file_) return Status(Code::kInvalidArgument, path_ + ": lock file is closed");
  Status s = fs_->UnlockRange(file_->fd(), start, len);
  if (!s.ok())
    return Status(s.code(), fmt::format("{}: unlock of bytes {}-{}: {}", path_, start,
                                        start + len - 1, s.message()));
  return s;
}

Result<bool> FileLock::IsRangeLocked(uint64_t start, uint64_t len, LockMode probe) const {
  if (!file_) return Status(Code::kInvalidArgument, path_ + ": lock file is closed");
  auto held = fs_->TestRange(file_->fd(), start, len, probe);
  if (!held)
    return Status(held.error().code(), fmt::format("{}: probe of bytes {}-{}: {}", path_, start,
                                                   start + len - 1, held.error().message()));
  return held;
}

Result<bool> IsLocked(int dir_fd, const std::string& name, LockMode probe, FileSystem* fs) {
  auto lock = FileLock::Open(dir_fd, name, false, fs);
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
