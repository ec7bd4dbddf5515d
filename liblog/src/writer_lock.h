// The partition writer lock (format-spec/segment.md §9): flock(LOCK_EX) on
// `writer.lock`. flock locks belong to the open file description, so the
// kernel releases them when the holder dies, and closing some other
// descriptor of the file (unlike classic fcntl locks) does not drop them.
#pragma once

#include <string>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

constexpr const char* kWriterLockName = "writer.lock";

class WriterLock {
 public:
  WriterLock() = default;
  // Opens (creating, mode 0640) `writer.lock` in `dir_fd`, refusing symlinks.
  static Result<WriterLock> Open(int dir_fd);
  // Blocks until held.
  Status Lock();
  Status Unlock();

 private:
  UniqueFd fd_;
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
