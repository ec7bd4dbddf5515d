#include "writer_lock.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <fmt/format.h>

namespace mq {

Result<WriterLock> WriterLock::Open(int dir_fd) {
  auto fd = OpenRegularFileAt(dir_fd, kWriterLockName, O_RDWR | O_CREAT);
  if (!fd) return fd.error();
  WriterLock lock;
  lock.fd_ = std::move(*fd);
  return lock;
}

Status WriterLock::Lock() {
  while (::flock(fd_.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoStatus(std::string("lock ") + kWriterLockName, errno);
  }
  return Status::Ok();
}

Status WriterLock::Unlock() {
  if (::flock(fd_.get(), LOCK_UN) != 0)
    return ErrnoStatus(std::string("unlock ") + kWriterLockName, errno);
  return Status::Ok();
}

}  // namespace mq
