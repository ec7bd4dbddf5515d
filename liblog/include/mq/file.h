// The file layer: the one virtual seam in liblog, so tests can inject
// failures (short writes, ENOSPC, EIO on fsync) beneath the partition log.
// Every path is relative to a directory descriptor and opened with
// O_NOFOLLOW | O_CLOEXEC; files are created with explicit modes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mq/status.h"

struct stat;

namespace mq {

// An owned file descriptor; closes on destruction, never retries close.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  [[nodiscard]] int release() { int fd = fd_; fd_ = -1; return fd; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

class File {
 public:
  virtual ~File() = default;
  // Writes all of `data` at `offset` (loops on short writes and EINTR).
  virtual Status WriteAt(uint64_t offset, std::span<const std::byte> data) = 0;
  // Reads up to data.size() bytes at `offset`; returns how many were read.
  virtual Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) = 0;
  virtual Result<uint64_t> Size() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // fdatasync. A failure is final: the caller must not retry and acknowledge.
  virtual Status Sync() = 0;
  virtual int fd() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // The process-wide real file system.
  static FileSystem* Default();

  enum OpenMode : uint8_t { kRead, kReadWrite, kCreate /* O_CREAT|O_RDWR */, kCreateExclusive };
  // Opens `name` (one path component) inside the directory `dir_fd`.
  virtual Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name,
                                             OpenMode mode) = 0;
  virtual Status Rename(int dir_fd, const std::string& from, const std::string& to) = 0;
  virtual Status Unlink(int dir_fd, const std::string& name) = 0;
  // fsync of a directory: makes created, renamed and removed names durable.
  virtual Status SyncDir(int dir_fd) = 0;
};

// Opens `name` in `dir_fd` as a regular file, never blocking and never
// following a symlink: open(2) with `flags` (the access mode, O_CREAT, O_EXCL,
// O_TRUNC) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK (a FIFO would otherwise block
// the open until a writer comes, ignoring SIGTERM), then fstat. A symlink,
// FIFO, device, socket or directory under the name is refused (kPermission,
// exit 77) with a message naming the file with its directory; then O_NONBLOCK
// is cleared. Every file of a data directory is opened by this helper.
Result<UniqueFd> OpenRegularFileAt(int dir_fd, const std::string& name, int flags,
                                   unsigned mode = 0640);
// The same, filling `*st` with the opened file's fstat. With `looked` the
// caller has just found a regular file under the name (fstatat, no follow),
// so the look before opening is not made again (the fstat after still is).
Result<UniqueFd> OpenRegularFileAt(int dir_fd, const std::string& name, int flags,
                                   unsigned mode, struct ::stat* st, bool looked);
// "<path of the directory dir_fd>/<name>", for messages: names a file with
// its partition directory. `name` alone when dir_fd is AT_FDCWD or the
// directory's path is unknown.
std::string PathAt(int dir_fd, const std::string& name);

// Opens a directory (O_DIRECTORY|O_NOFOLLOW). With `create`, mkdir 0750 first.
Result<UniqueFd> OpenDirectory(const std::string& path, bool create);
// Opens `name` inside `dir_fd` as a directory, refusing symlinks.
Result<UniqueFd> OpenDirectoryAt(int dir_fd, const std::string& name, bool create);

// The entries of the directory `dir_fd` (not "." or ".."), each with whether
// it is a directory (lstat: a symlink to one is not). `path` names the
// directory in errors.
struct DirEntry {
  std::string name;
  bool is_dir = false;
};
Result<std::vector<DirEntry>> ListDirectory(int dir_fd, const std::string& path);

// Writes `contents` to `name` inside `dir_fd` atomically: `<name>.tmp` (or
// `tmp` when given: a caller whose names may be NAME_MAX long writes through
// a shorter staging name, under a lock of its own), fsync, rename, fsync of
// the directory. Mode 0640. A symlink, FIFO, device or directory under
// `name` is refused (kPermission), never replaced. With `sync` false,
// neither fsync (page-cache durability): a reader still sees the old or the
// new file, a machine crash may leave either, or none, or an empty one.
Status WriteFileAtomic(int dir_fd, const std::string& name, std::span<const std::byte> contents,
                       FileSystem* fs = nullptr, const std::string& tmp = {}, bool sync = true);

}  // namespace mq
