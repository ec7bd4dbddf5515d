// The partition writer lock (format-spec/segment.md §9): an exclusive
// FileLock (mq/lock.h, flock) on `writer.lock`, released by the kernel when
// the holder dies.
#pragma once

#include <string>

#include "format/format.h"
#include "mq/file.h"
#include "mq/lock.h"
#include "mq/status.h"

namespace mq {

using format::kWriterLockName;  // format.h §9

class WriterLock {
 public:
  WriterLock() = default;
  explicit WriterLock(FileLock lock) : lock_(std::move(lock)) {}
  // Opens (creating, mode 0640) `writer.lock` in `dir_fd`, refusing symlinks.
  // Through `fs` (null: the real file system).
  static Result<WriterLock> Open(int dir_fd, FileSystem* fs = nullptr);
  // The same, naming the lock `<dir>/writer.lock` in messages (`dir`: the
  // directory `dir_fd` is open on), without a look-up in /proc.
  static Result<WriterLock> Open(int dir_fd, const std::string& dir, FileSystem* fs = nullptr);
  // Blocks until held.
  Status Lock() { return lock_.Lock(LockMode::kExclusive, LockWait::kBlock); }
  Status Unlock() { return lock_.Unlock(); }

 private:
  FileLock lock_;
};

// Holds a WriterLock for a scope. A failed unlock is not reported (best
// effort): the lock then stays held until the descriptor closes (Close, or
// the process's exit), so other writers wait longer; nothing is lost.
// A guard made empty holds nothing until Hold() is given a lock just
// taken.
class LockGuard {
 public:
  LockGuard() = default;
  explicit LockGuard(WriterLock* lock) : lock_(lock) {}
  ~LockGuard() {
    if (lock_) (void)lock_->Unlock();
  }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

  // Releases `lock` (held by the caller) when the guard goes.
  void Hold(WriterLock* lock) { lock_ = lock; }
  bool held() const { return lock_ != nullptr; }

 private:
  WriterLock* lock_ = nullptr;
};

}  // namespace mq
