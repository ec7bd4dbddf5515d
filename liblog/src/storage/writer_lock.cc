#include "storage/writer_lock.h"

namespace mq {

namespace {
Result<WriterLock> Wrap(Result<FileLock> lock) {
  if (!lock) return lock.error();
  return WriterLock(std::move(*lock));
}
}  // namespace

Result<WriterLock> WriterLock::Open(int dir_fd, FileSystem* fs) {
  return Wrap(FileLock::Open(dir_fd, kWriterLockName, true, fs));
}

Result<WriterLock> WriterLock::Open(int dir_fd, const std::string& dir, FileSystem* fs) {
  return Wrap(FileLock::Open(dir_fd, kWriterLockName, true, dir + "/" + kWriterLockName, fs));
}

}  // namespace mq
