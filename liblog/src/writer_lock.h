// The partition writer lock (format-spec/segment.md §9): an exclusive
// FileLock (mq/lock.h, flock) on `writer.lock`, released by the kernel when
// the holder dies.
#pragma once

#include <string>

#include "mq/file.h"
#include "mq/lock.h"
#include "mq/status.h"

namespace mq {

constexpr const char* kWriterLockName = "writer.lock";

class WriterLock {
 public:
  WriterLock() = default;
  // Opens (creating, mode 0640) `writer.lock` in `dir_fd`, refusing symlinks.
  static Result<WriterLock> Open(int dir_fd);
  // The same, naming the lock `<dir>/writer.lock` in messages (`dir`: the
  // directory `dir_fd` is open on), without a look-up in /proc.
  static Result<WriterLock> Open(int dir_fd, const std::string& dir);
  // Blocks until held.
  Status Lock() { return lock_.Lock(LockMode::kExclusive, LockWait::kBlock); }
  Status Unlock() { return lock_.Unlock(); }

 private:
  FileLock lock_;
};

// Holds a WriterLock for a scope.
class LockGuard {
 public:
  explicit LockGuard(WriterLock* lock) : lock_(lock) {}
  ~LockGuard() {
    if (lock_) (void)lock_->Unlock();
  }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  WriterLock* lock_;
};

}  // namespace mq
