#include "writer_lock.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <fmt/format.h>

namespace mq {

Result<WriterLock> WriterLock::Open(int dir_fd) {
  int fd = ::openat(dir_fd, kWriterLockName, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) {
    if (errno == ELOOP)
      return Status(Code::kPermission, fmt::format("{}: is a symlink; refused", kWriterLockName));
    return ErrnoStatus(kWriterLockName, errno);
  }
  WriterLock lock;
  lock.fd_.reset(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(kWriterLockName, errno);
  if (!S_ISREG(st.st_mode))
    return Status(Code::kPermission, fmt::format("{}: not a regular file; refused", kWriterLockName));
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
