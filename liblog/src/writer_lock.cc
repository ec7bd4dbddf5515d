#include "writer_lock.h"

namespace mq {

Result<WriterLock> WriterLock::Open(int dir_fd) {
  auto lock = FileLock::Open(dir_fd, kWriterLockName, true);
  if (!lock) return lock.error();
  WriterLock out;
  out.lock_ = std::move(*lock);
  return out;
}

Result<WriterLock> WriterLock::Open(int dir_fd, const std::string& dir) {
  auto lock = FileLock::Open(dir_fd, kWriterLockName, true, dir + "/" + kWriterLockName);
  if (!lock) return lock.error();
  WriterLock out;
  out.lock_ = std::move(*lock);
  return out;
}

}  // namespace mq
