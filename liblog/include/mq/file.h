// The file layer: the one virtual seam in liblog beneath every path that
// can fail, so a test can inject any failure (as LevelDB's Env and SQLite's
// aSyscall[]). Through it go opening, reading, writing, sizing, fstat,
// truncating and fdatasync of files (File); and mkdir and opening of
// directories, directory listing, lstat of a name, rename, unlink, rmdir,
// fsync of a directory, mmap, flock, copy_file_range, sync_file_range and
// futimens (FileSystem).
//
// What uses it: the partition writer and reader (segments, indexes, the
// state file and its mapping, writer.lock, directory listings, producer
// snapshots, recovery, the replica checkpoints), every atomic replacement
// of a file (WriteFileAtomic), whole-file reads (ReadFileAt), FileLock,
// DataDir, Group (offsets, locks, members, partitions), the producer-id
// registries (a root's and a cluster's) and the cluster store.
// PartitionWriter and PartitionReader take theirs from LogConfig::fs and
// ReadOptions::fs, DataDir, Group and FileClusterStore from their Open,
// ProducerIdentity from Acquire, verification (storage/verify.h, VerifyFile)
// and the replication files read and written by path (leader-claim,
// follower-stopped, the replica positions) from an argument,
// RepairFollowerLog from LogConfig::fs; null everywhere means
// FileSystem::Default().
//
// What stays outside, each for a reason: close(2) (never retried, nothing
// to act on); link(2) when a topic is created (DataDir) and the fstat of the
// root's mode; fstatfs for the NFS check; readlink of /proc/self/fd for
// messages; futex waits and wake-ups; the kernel boot id and a process's
// start time (/proc); ReadGroupOffsetsFile (mq-inspect, by path); the
// best-effort notes: a member's lock file (written by the member, read by
// ReadMemberNote) and the member id in its partitions/<topic> slot (for
// --describe).
// Through it, but always with the default file system: mq-inspect's reads
// (and its verification, which passes none), the group listing and
// deletion (ListGroups, DeleteGroup).
//
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
  [[nodiscard]] int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// What lstat/fstat says of a file.
struct FileInfo {
  uint64_t size = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint32_t mode = 0;     // st_mode: type and permissions
  int64_t mtime_ms = 0;  // last modification (ms since the epoch)
  int64_t ctime_ms = 0;  // last status change, a rename included
  int64_t atime_ns = 0;  // last access (ns since the epoch)
  int64_t mtime_ns = 0;  // mtime_ms to the nanosecond (what SetTimes restores)
  bool is_regular() const;
  bool is_dir() const;
};

enum class LockMode : uint8_t { kShared, kExclusive };
enum class LockWait : uint8_t { kBlock, kTry };

// A shared mapping of a file's first `size` bytes; unmapped when the last
// copy goes.
struct Mapping {
  std::shared_ptr<void> region;
  std::byte* data = nullptr;
  size_t size = 0;
};

class File {
 public:
  virtual ~File() = default;
  // Writes all of `data` at `offset` (loops on short writes and EINTR).
  virtual Status WriteAt(uint64_t offset, std::span<const std::byte> data) = 0;
  // Reads up to data.size() bytes at `offset`; returns how many were read.
  virtual Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) = 0;
  virtual Result<uint64_t> Size() = 0;
  // fstat of the open file.
  virtual Result<FileInfo> Stat() = 0;
  // The fstat made when the file was opened, without another system call
  // (the file as it was then: for a caller that has just opened it and that
  // no other process writes meanwhile). By default, Stat().
  virtual Result<FileInfo> StatAtOpen() { return Stat(); }
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

  // Opens the directory `path` relative to `at_fd` (AT_FDCWD: the working
  // directory) with O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC; with `create`, mkdir
  // 0750 first. A symlink, file, FIFO or device there is kPermission.
  virtual Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) = 0;
  // rmdir of `name` inside `dir_fd` (unlinkat AT_REMOVEDIR).
  virtual Status RemoveDir(int dir_fd, const std::string& name) = 0;
  // The names in the directory `dir_fd` (not "." or ".."), in directory
  // order, read through a descriptor of its own (the caller's keeps its
  // position).
  virtual Result<std::vector<std::string>> ListDir(int dir_fd) = 0;
  // lstat of `name` in `dir_fd` (never follows a symlink); kNotFound when
  // there is no such name.
  virtual Result<FileInfo> StatAt(int dir_fd, const std::string& name) = 0;
  // mmap (MAP_SHARED) of the first `size` (> 0) bytes of the open file `fd`,
  // read-only or read/write.
  virtual Result<Mapping> Map(int fd, size_t size, bool writable) = 0;
  // flock(2) on `fd`: LOCK_SH or LOCK_EX, LOCK_NB with kTry (kBusy when
  // another open file description holds a conflicting lock); EINTR retried.
  virtual Status Lock(int fd, LockMode mode, LockWait wait) = 0;
  virtual Status Unlock(int fd) = 0;
  // Open-file-description byte-range locks (fcntl F_OFD_SETLK, F_OFD_SETLKW
  // with kBlock) on the `len` (> 0) bytes of `fd` from `start`: F_RDLCK or
  // F_WRLCK (`fd` open for writing), kBusy when another open file
  // description holds a conflicting lock on one of the bytes; EINTR retried.
  virtual Status LockRange(int fd, uint64_t start, uint64_t len, LockMode mode, LockWait wait) = 0;
  virtual Status UnlockRange(int fd, uint64_t start, uint64_t len) = 0;
  // F_OFD_GETLK: true when another open file description holds a lock on
  // one of the bytes that conflicts with `probe` (kShared: an exclusive
  // lock; kExclusive: any lock). Nothing is taken.
  virtual Result<bool> TestRange(int fd, uint64_t start, uint64_t len, LockMode probe) = 0;
  // copy_file_range(2): up to `len` bytes of the open file `in_fd` from
  // `*in_off` to `out_fd` at `*out_off` (both advanced by what was copied),
  // in the kernel (a reflink where the file system shares extents); the
  // bytes copied, 0 at the input's end; EINTR retried. kUnsupported when the
  // kernel or the file systems refuse the call (EXDEV, ENOSYS, EINVAL,
  // EOPNOTSUPP): the caller copies through File instead (CopyFileContents).
  virtual Result<size_t> CopyRange(int in_fd, uint64_t* in_off, int out_fd, uint64_t* out_off,
                                   size_t len) = 0;
  // sync_file_range(2) SYNC_FILE_RANGE_WRITE of the whole open file `fd`:
  // starts the writeback of its dirty pages and waits for none of it. Makes
  // nothing durable (File::Sync does); a File::Sync after it waits less.
  virtual Status StartWriteback(int fd) = 0;
  // futimens(2): sets the access and modification times of the open file
  // `fd` (ns since the epoch).
  virtual Status SetTimes(int fd, int64_t atime_ns, int64_t mtime_ns) = 0;
};

// Forwards every call to another FileSystem: a test double overrides only
// what it changes (LevelDB's EnvWrapper).
class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(FileSystem* target = FileSystem::Default()) : target_(target) {}
  FileSystem* target() const { return target_; }
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    return target_->Open(dir_fd, name, mode);
  }
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    return target_->Rename(dir_fd, from, to);
  }
  Status Unlink(int dir_fd, const std::string& name) override {
    return target_->Unlink(dir_fd, name);
  }
  Status SyncDir(int dir_fd) override { return target_->SyncDir(dir_fd); }
  Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) override {
    return target_->OpenDir(at_fd, path, create);
  }
  Status RemoveDir(int dir_fd, const std::string& name) override {
    return target_->RemoveDir(dir_fd, name);
  }
  Result<std::vector<std::string>> ListDir(int dir_fd) override { return target_->ListDir(dir_fd); }
  Result<FileInfo> StatAt(int dir_fd, const std::string& name) override {
    return target_->StatAt(dir_fd, name);
  }
  Result<Mapping> Map(int fd, size_t size, bool writable) override {
    return target_->Map(fd, size, writable);
  }
  Status Lock(int fd, LockMode mode, LockWait wait) override {
    return target_->Lock(fd, mode, wait);
  }
  Status Unlock(int fd) override { return target_->Unlock(fd); }
  Status LockRange(int fd, uint64_t start, uint64_t len, LockMode mode, LockWait wait) override {
    return target_->LockRange(fd, start, len, mode, wait);
  }
  Status UnlockRange(int fd, uint64_t start, uint64_t len) override {
    return target_->UnlockRange(fd, start, len);
  }
  Result<bool> TestRange(int fd, uint64_t start, uint64_t len, LockMode probe) override {
    return target_->TestRange(fd, start, len, probe);
  }
  Result<size_t> CopyRange(int in_fd, uint64_t* in_off, int out_fd, uint64_t* out_off,
                           size_t len) override {
    return target_->CopyRange(in_fd, in_off, out_fd, out_off, len);
  }
  Status StartWriteback(int fd) override { return target_->StartWriteback(fd); }
  Status SetTimes(int fd, int64_t atime_ns, int64_t mtime_ns) override {
    return target_->SetTimes(fd, atime_ns, mtime_ns);
  }

 private:
  FileSystem* target_;
};

// Opens `name` in `dir_fd` as a regular file, never blocking and never
// following a symlink: open(2) with `flags` (the access mode, O_CREAT, O_EXCL,
// O_TRUNC) | O_NOFOLLOW | O_CLOEXEC, plus O_NONBLOCK when the access mode is
// not O_RDWR (a FIFO opened for reading would otherwise block the open until
// a writer comes, ignoring SIGTERM; one opened O_RDWR never blocks on Linux,
// fifo(7)), then fstat. A symlink, FIFO, device, socket or directory under
// the name is refused (kPermission, exit 77) with a message naming the file
// with its directory; then O_NONBLOCK is cleared. Every file of a data
// directory is opened by this helper.
Result<UniqueFd> OpenRegularFileAt(int dir_fd, const std::string& name, int flags,
                                   unsigned mode = 0640);
// The same, filling `*st` with the opened file's fstat. With `looked` the
// caller has just found a regular file under the name (fstatat, no follow),
// so the look before opening is not made again (the fstat after still is).
Result<UniqueFd> OpenRegularFileAt(int dir_fd, const std::string& name, int flags, unsigned mode,
                                   struct ::stat* st, bool looked);
// "<path of the directory dir_fd>/<name>", for messages: names a file with
// its partition directory. `name` alone when dir_fd is AT_FDCWD or the
// directory's path is unknown.
std::string PathAt(int dir_fd, const std::string& name);

// Opens a directory (O_DIRECTORY|O_NOFOLLOW). With `create`, mkdir 0750 first.
// (`fs` null: the real file system, here and below.)
Result<UniqueFd> OpenDirectory(const std::string& path, bool create, FileSystem* fs = nullptr);
// Opens `name` (one path component) inside `dir_fd` as a directory,
// refusing symlinks.
Result<UniqueFd> OpenDirectoryAt(int dir_fd, const std::string& name, bool create,
                                 FileSystem* fs = nullptr);

// The entries of the directory `dir_fd` (not "." or ".."), each with whether
// it is a directory (lstat: a symlink to one is not). `path` names the
// directory in errors. The one directory-listing loop of liblog
// (FileSystem::ListDir); ListSegments filters its names.
struct DirEntry {
  std::string name;
  bool is_dir = false;
};
Result<std::vector<DirEntry>> ListDirectory(int dir_fd, const std::string& path,
                                            FileSystem* fs = nullptr);
// The same, names only (no lstat per entry).
Result<std::vector<std::string>> ListNames(int dir_fd, const std::string& path,
                                           FileSystem* fs = nullptr);

// Copies the first `size` bytes of `in` to `out` from offset 0: in the
// kernel (FileSystem::CopyRange) and, when the kernel or the file systems
// refuse that, through ReadAt and WriteAt in 1 MiB chunks. kIoError when
// `in` ends before `size`. The one file copy of liblog (a tier move's,
// R94); `fs` null: the real file system.
Status CopyFileContents(File& in, File& out, uint64_t size, FileSystem* fs = nullptr);

// Reads the whole regular file `name` in `dir_fd`. kTooLarge, naming it,
// when it holds more than `max_bytes`. The one whole-file reader of liblog.
// Opens `name` in `dir_fd` for reading and gives its size: kTooLarge
// (naming the path) when it is over `max_bytes`. What ReadFileAt and
// MappedFile share.
struct BoundedFile {
  std::unique_ptr<File> file;
  uint64_t size = 0;
};
Result<BoundedFile> OpenBounded(int dir_fd, const std::string& name, uint64_t max_bytes,
                                FileSystem* fs = nullptr);
Result<std::vector<std::byte>> ReadFileAt(int dir_fd, const std::string& name, uint64_t max_bytes,
                                          FileSystem* fs = nullptr);

// Writes `contents` to `name` inside `dir_fd` atomically (the one atomic file
// writer of liblog): `<name>.tmp` (or
// `tmp` when given: a caller whose names may be NAME_MAX long writes through
// a shorter staging name, under a lock of its own), fsync, rename, fsync of
// the directory. Mode 0640. A symlink, FIFO, device or directory under
// `name` is refused (kPermission), never replaced. With `sync` false,
// neither fsync (page-cache durability): a reader still sees the old or the
// new file, a machine crash may leave either, or none, or an empty one.
Status WriteFileAtomic(int dir_fd, const std::string& name, std::span<const std::byte> contents,
                       FileSystem* fs = nullptr, const std::string& tmp = {}, bool sync = true);

}  // namespace mq
