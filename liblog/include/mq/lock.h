// Kernel file locks (format-spec/group.md §14.5): flock(2) on a file opened
// relative to a directory descriptor, shared or exclusive, blocking or not;
// and open-file-description byte-range locks (fcntl F_OFD_SETLK) on ranges
// of one, for many locks behind one descriptor (a consumer group's
// partition ownership, group.md §14.5).
//
// Both kinds belong to the open file description, so both are released by
// the kernel when the last descriptor of it closes (the holder exits or
// dies), are kept by a child that inherits the descriptor across fork(2)
// (and exec(2) once the child clears FD_CLOEXEC), and are not dropped when
// some other descriptor of the same file is closed (classic fcntl locks
// are). flock is whole-file, and it is what every lock file of a data
// directory uses (writer.lock, producers/, the root's creation lock) except
// the one whose bytes are locks of their own (a group's
// partitions/<topic>, byte-range locks only): on Linux flock and fcntl
// locks do not see each other, so one kind per lock file keeps any two
// holders of one file in conflict. flock's one weakness, a
// shared->exclusive change that is not atomic, is avoided by never changing
// a held lock's mode (take a new FileLock instead). On NFS flock is
// emulated with byte-range locks whose release after a client dies is not
// reliable: lock users that need it refuse NFS (CheckLockableFileSystem).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// LockMode and LockWait: mq/file.h (FileSystem::Lock).

// One open file description of a lock file and the flock held on it.
//
// Closing (the destructor, Close, assigning over it) first releases what it
// holds explicitly (flock LOCK_UN, and F_OFD_SETLK F_UNLCK over the whole
// file if it took byte ranges), then drops this process's descriptor. The
// explicit release matters when another thread forks: between fork and
// exec (or _exit) the child holds a copy of every descriptor, close-on-exec
// ones included, and a lock only closed stays held until the last copy
// closes, so the next holder (another process, taking it without blocking)
// would find it busy although its owner had let go. A release through any
// copy ends the lock for every process sharing the description. A lock a
// child is meant to inherit (ShareWithChildren) is only closed.
class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& other) noexcept { *this = std::move(other); }
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { Close(); }

  // Opens (with `create`, creating mode 0640) `name` in `dir_fd`: one path
  // component, O_NOFOLLOW, a regular file (OpenRegularFileAt), close-on-exec.
  // Nothing is locked yet.
  // Opened, locked and unlocked through `fs` (null: the real file system).
  static Result<FileLock> Open(int dir_fd, const std::string& name, bool create = true,
                               FileSystem* fs = nullptr);
  // The same, with the path messages name the file by given by the caller
  // (who knows it) rather than looked up in /proc at open.
  static Result<FileLock> Open(int dir_fd, const std::string& name, bool create, std::string path,
                               FileSystem* fs = nullptr);
  // Open, then Lock(mode, wait). When the lock is granted on a file that is
  // no longer `name` in `dir_fd` (removed or replaced meanwhile), it is
  // dropped and the new file is opened and locked instead, so a holder
  // always holds the file the name designates.
  static Result<FileLock> Acquire(int dir_fd, const std::string& name, LockMode mode, LockWait wait,
                                  FileSystem* fs = nullptr);

  // flock(LOCK_SH or LOCK_EX, LOCK_NB with kTry). kTry while another open
  // file description holds a conflicting lock: kBusy (exit 75) naming the
  // file. kBlock waits (EINTR is retried). A lock already held in the other
  // mode must not be changed through here (flock converts non-atomically).
  Status Lock(LockMode mode, LockWait wait);
  // flock(LOCK_UN): released for every process sharing the description.
  Status Unlock();

  // Byte-range locks (fcntl F_OFD_SETLK) on the `len` bytes from `start`,
  // held by this open file description, independent of its flock and of
  // its locks on other ranges (keep a description's ranges apart: the
  // kernel merges touching ranges of one mode into one lock). kExclusive
  // needs the file opened for writing (Open with `create`). kTry while
  // another description holds a conflicting lock on one of the bytes:
  // kBusy (exit 75) naming the file and the range.
  Status LockRange(uint64_t start, uint64_t len, LockMode mode, LockWait wait);
  Status UnlockRange(uint64_t start, uint64_t len);
  // Without taking it: true when another open file description holds a
  // lock on one of the bytes that conflicts with `probe` (F_OFD_GETLK).
  Result<bool> IsRangeLocked(uint64_t start, uint64_t len,
                             LockMode probe = LockMode::kExclusive) const;
  // Releases the locks this description holds (unless shared with
  // children), then closes this process's descriptor (see the class
  // comment). A failed release is not reported: the kernel still releases
  // the locks once the last copy of the descriptor closes.
  void Close();
  // Marks the lock as one a child process inherits (a handler run's,
  // Ownership::LockForHandler): closing it then drops this process's
  // descriptor only, and the lock stays held while a child keeps its copy
  // (and every process it passed it to), released when the last one exits.
  void ShareWithChildren() { shared_with_children_ = true; }

  bool is_open() const { return file_ != nullptr; }
  // The descriptor, for a child that is to inherit the lock: after fork,
  // the child clears FD_CLOEXEC on it before exec (fcntl(fd, F_SETFD, 0)).
  int fd() const { return file_ ? file_->fd() : -1; }
  // fstat of the lock file (through the FileSystem it was opened with).
  Result<FileInfo> Stat() const {
    if (!file_) return Status(Code::kInvalidArgument, path_ + ": lock file is closed");
    return file_->Stat();
  }
  // The file's path, for messages.
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<File> file_;
  FileSystem* fs_ = nullptr;
  std::string path_;
  bool flocked_ = false;  // a flock taken and not unlocked since
  bool ranges_ = false;   // a byte range taken
  bool shared_with_children_ = false;
};

// Without taking it: true if another open file description holds a lock on
// `name` in `dir_fd` that conflicts with `probe` (kShared: someone holds it
// exclusively; kExclusive: someone holds it at all). A missing file is not
// locked (false); the file is never created.
Result<bool> IsLocked(int dir_fd, const std::string& name, LockMode probe = LockMode::kShared,
                      FileSystem* fs = nullptr);

// statfs f_type values of file systems whose locks are not reliable for
// liveness (a dead holder's lock may outlive it, or a live one's be lost).
constexpr int64_t kNfsSuperMagic = 0x6969;  // NFS_SUPER_MAGIC

// kPermission (exit 77, "refused") if a file system of type `f_type` does
// not keep reliable kernel locks (NFS), naming `path`; OK otherwise.
Status CheckFileSystemType(int64_t f_type, const std::string& path);
// fstatfs of `dir_fd`, then CheckFileSystemType.
Status CheckLockableFileSystem(int dir_fd, const std::string& path);

}  // namespace mq
