// The real file layer: POSIX calls behind the FileSystem seam (mq/file.h).
// Every name is opened relative to a directory descriptor with O_NOFOLLOW, so
// a symlink planted in a partition directory is refused, never followed.
#include "mq/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <climits>
#include <limits>

#include <fmt/format.h>

namespace mq {

constexpr mode_t kFileMode = 0640;
constexpr mode_t kDirMode = 0750;

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

UniqueFd::~UniqueFd() { reset(); }

void UniqueFd::reset(int fd) {
  // close(2) is never retried: on Linux the descriptor is gone even on EINTR.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool FileInfo::is_regular() const { return S_ISREG(mode); }
bool FileInfo::is_dir() const { return S_ISDIR(mode); }

namespace {

FileInfo InfoOf(const struct stat& st) {
  FileInfo info;
  info.size = static_cast<uint64_t>(st.st_size);
  info.dev = static_cast<uint64_t>(st.st_dev);
  info.ino = static_cast<uint64_t>(st.st_ino);
  info.mode = static_cast<uint32_t>(st.st_mode);
  info.mtime_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  info.ctime_ms = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000 + st.st_ctim.tv_nsec / 1000000;
  info.atime_ns = static_cast<int64_t>(st.st_atim.tv_sec) * 1000000000 + st.st_atim.tv_nsec;
  info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return info;
}

const char* KindOf(mode_t m) {
  if (S_ISLNK(m)) return "a symlink";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a regular file";
}

Status Refused(int dir_fd, const std::string& name, mode_t m) {
  return Status(Code::kPermission, fmt::format("{}: is {}, not a regular file; refused",
                                               PathAt(dir_fd, name), KindOf(m)));
}

// The path of an open file, for error messages: /proc/self/fd names it
// (or `name` when that fails). Looked up only when a message needs it,
// never on the open path.
std::string FdPath(int fd, const std::string& name) {
  char target[PATH_MAX];
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0 || target[0] != '/') return name;
  return std::string(target, static_cast<size_t>(n));
}

class PosixFile final : public File {
 public:
  PosixFile(UniqueFd fd, std::string name, FileInfo at_open)
      : fd_(std::move(fd)), name_(std::move(name)), at_open_(at_open) {}

  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    while (!data.empty()) {
      ssize_t n = ::pwrite(fd_.get(), data.data(), data.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Failed(fmt::format("write at {}", offset));
      }
      data = data.subspan(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::pread(fd_.get(), data.data() + done, data.size() - done,
                          static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Failed(fmt::format("read at {}", offset + done));
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return Failed("fstat");
    return static_cast<uint64_t>(st.st_size);
  }

  Result<FileInfo> Stat() override {
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) return Failed("fstat");
    return InfoOf(st);
  }

  Result<FileInfo> StatAtOpen() override { return at_open_; }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0)
      return Failed(fmt::format("truncate to {}", size));
    return Status::Ok();
  }

  Status Sync() override {
    if (::fdatasync(fd_.get()) != 0) return Failed("fdatasync");
    return Status::Ok();
  }

  int fd() const override { return fd_.get(); }

 private:
  // The error of the call that just failed (errno), naming the file.
  Status Failed(const std::string& what) const {
    const int err = errno;
    return ErrnoStatus(FdPath(fd_.get(), name_) + ": " + what, err);
  }

  UniqueFd fd_;
  std::string name_;  // as opened (relative to its directory)
  FileInfo at_open_;  // fstat at open (OpenRegularFileAt)
};

Result<UniqueFd> OpenDirFlags(int at_fd, const std::string& path, bool create) {
  // Messages name the directory with the path of `at_fd` (PathAt), looked
  // up only when one is made.
  if (create && ::mkdirat(at_fd, path.c_str(), kDirMode) != 0 && errno != EEXIST) {
    const int err = errno;
    return ErrnoStatus("mkdir " + PathAt(at_fd, path), err);
  }
  int fd = ::openat(at_fd, path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    struct stat st;
    if (err == ELOOP ||
        (::fstatat(at_fd, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)))
      return Status(Code::kPermission,
                    fmt::format("{}: is a symlink; refused", PathAt(at_fd, path)));
    // A FIFO, device or file where a directory belongs is refused as well.
    if (err == ENOTDIR && ::fstatat(at_fd, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISDIR(st.st_mode)) {
      return Status(Code::kPermission,
                    fmt::format("{}: is {}, not a directory; refused", PathAt(at_fd, path),
                                S_ISREG(st.st_mode) ? "a file" : KindOf(st.st_mode)));
    }
    return ErrnoStatus(PathAt(at_fd, path), err);
  }
  return UniqueFd(fd);
}

#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // <linux/mman.h>, Linux 5.14
#endif

// A struct flock for F_OFD_* on [start, start + len): l_pid must be 0.
// A range past off_t's reach gets l_len 0, which the callers refuse (0
// would mean "to the end of the file").
struct ::flock Range(short type, uint64_t start, uint64_t len) {
  struct ::flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
  if (len == 0 || start > kMax || len > kMax - start) return fl;
  fl.l_start = static_cast<off_t>(start);
  fl.l_len = static_cast<off_t>(len);
  return fl;
}

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      return Status(Code::kInvalidArgument, fmt::format("bad file name '{}'", name));
    int flags = 0;
    switch (mode) {
      case kRead:
        flags = O_RDONLY;
        break;
      case kReadWrite:
        flags = O_RDWR;
        break;
      case kCreate:
        flags = O_RDWR | O_CREAT;
        break;
      case kCreateExclusive:
        flags = O_RDWR | O_CREAT | O_EXCL;
        break;
    }
    struct stat st;
    auto owned = OpenRegularFileAt(dir_fd, name, flags, kFileMode, &st, false);
    if (!owned) return owned.error();
    return std::unique_ptr<File>(new PosixFile(std::move(*owned), name, InfoOf(st)));
  }

  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    if (::renameat(dir_fd, from.c_str(), dir_fd, to.c_str()) != 0) {
      const int err = errno;  // before PathAt's readlink
      return ErrnoStatus(fmt::format("rename {} to {}", PathAt(dir_fd, from), PathAt(dir_fd, to)),
                         err);
    }
    return Status::Ok();
  }

  Status Unlink(int dir_fd, const std::string& name) override {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0) {
      const int err = errno;
      return ErrnoStatus("unlink " + PathAt(dir_fd, name), err);
    }
    return Status::Ok();
  }

  Status SyncDir(int dir_fd) override {
    if (::fsync(dir_fd) != 0) {
      const int err = errno;
      return ErrnoStatus("fsync of directory " + FdPath(dir_fd, "(unknown)"), err);
    }
    return Status::Ok();
  }

  Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) override {
    return OpenDirFlags(at_fd, path, create);
  }

  Status RemoveDir(int dir_fd, const std::string& name) override {
    if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0) {
      const int err = errno;
      return ErrnoStatus("rmdir " + PathAt(dir_fd, name), err);
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(int dir_fd) override {
    // getdents64 on a fresh descriptor of the directory (its own position),
    // without the DIR machinery: a partition directory is listed at every
    // writer open.
    UniqueFd fd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) {
      const int err = errno;
      return ErrnoStatus("list directory " + FdPath(dir_fd, "(unknown)"), err);
    }
    std::vector<std::string> names;
    alignas(struct dirent64) char buf[8192];
    for (;;) {
      const ssize_t n = ::getdents64(fd.get(), buf, sizeof buf);
      if (n < 0) {
        const int err = errno;
        return ErrnoStatus("list directory " + FdPath(dir_fd, "(unknown)"), err);
      }
      if (n == 0) break;
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const struct dirent64*>(buf + at);
        at += e->d_reclen;
        if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
        names.emplace_back(e->d_name);
      }
    }
    return names;
  }

  Result<FileInfo> StatAt(int dir_fd, const std::string& name) override {
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      const int err = errno;  // before PathAt's readlink
      return ErrnoStatus(PathAt(dir_fd, name), err);
    }
    return InfoOf(st);
  }

  Result<Mapping> Map(int fd, size_t size, bool writable) override {
    const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    // Populated: the pages are mapped now rather than at the first access
    // (a fault each; the state file is mapped at every partition open). A
    // shared mapping is populated read-only, so a writer's mapping is
    // populated for writing instead (MADV_POPULATE_WRITE, Linux 5.14): its
    // first store would fault again (open, map, first store: 27 us here
    // with MAP_POPULATE, 21 us so).
    const bool populate_write = writable && populate_write_.load(std::memory_order_relaxed);
    void* at = ::mmap(nullptr, size, prot, MAP_SHARED | (populate_write ? 0 : MAP_POPULATE), fd, 0);
    if (at == MAP_FAILED) {
      const int err = errno;
      return ErrnoStatus(FdPath(fd, "(unknown file)") + ": mmap", err);
    }
    if (populate_write && ::madvise(at, size, kPopulateWrite) != 0) {
      // An older kernel (EINVAL): populated the other way from now on.
      populate_write_.store(false, std::memory_order_relaxed);
      (void)::madvise(at, size, MADV_WILLNEED);
    }
    Mapping m;
    m.region = std::shared_ptr<void>(at, [size](void* p) { ::munmap(p, size); });
    m.data = static_cast<std::byte*>(at);
    m.size = size;
    return m;
  }

  Status Lock(int fd, LockMode mode, LockWait wait) override {
    int op = mode == LockMode::kShared ? LOCK_SH : LOCK_EX;
    if (wait == LockWait::kTry) op |= LOCK_NB;
    while (::flock(fd, op) != 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("flock", errno);
    }
    return Status::Ok();
  }

  Status Unlock(int fd) override {
    if (::flock(fd, LOCK_UN) != 0) return ErrnoStatus("flock unlock", errno);
    return Status::Ok();
  }

  Status LockRange(int fd, uint64_t start, uint64_t len, LockMode mode, LockWait wait) override {
    struct ::flock fl = Range(mode == LockMode::kShared ? F_RDLCK : F_WRLCK, start, len);
    if (fl.l_len <= 0) return Status(Code::kInvalidArgument, "lock range out of bounds");
    while (::fcntl(fd, wait == LockWait::kTry ? F_OFD_SETLK : F_OFD_SETLKW, &fl) != 0) {
      if (errno == EINTR) continue;
      // A conflicting lock: EAGAIN or EACCES (fcntl(2) allows both).
      if (errno == EAGAIN || errno == EACCES) return Status(Code::kBusy, "range locked");
      return ErrnoStatus("fcntl F_OFD_SETLK", errno);
    }
    return Status::Ok();
  }

  Status UnlockRange(int fd, uint64_t start, uint64_t len) override {
    struct ::flock fl = Range(F_UNLCK, start, len);
    if (fl.l_len <= 0) return Status(Code::kInvalidArgument, "lock range out of bounds");
    while (::fcntl(fd, F_OFD_SETLK, &fl) != 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("fcntl F_OFD_SETLK unlock", errno);
    }
    return Status::Ok();
  }

  Result<bool> TestRange(int fd, uint64_t start, uint64_t len, LockMode probe) override {
    struct ::flock fl = Range(probe == LockMode::kShared ? F_RDLCK : F_WRLCK, start, len);
    if (fl.l_len <= 0) return Status(Code::kInvalidArgument, "lock range out of bounds");
    while (::fcntl(fd, F_OFD_GETLK, &fl) != 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("fcntl F_OFD_GETLK", errno);
    }
    return fl.l_type != F_UNLCK;
  }

  Result<size_t> CopyRange(int in_fd, uint64_t* in_off, int out_fd, uint64_t* out_off,
                           size_t len) override {
    loff_t from = static_cast<loff_t>(*in_off), to = static_cast<loff_t>(*out_off);
    ssize_t n;
    while ((n = ::copy_file_range(in_fd, &from, out_fd, &to, len, 0)) < 0 && errno == EINTR) {
    }
    if (n < 0) {
      const int err = errno;
      if (err == EXDEV || err == ENOSYS || err == EINVAL || err == EOPNOTSUPP)
        return Status(Code::kUnsupported, fmt::format("copy_file_range: {}", std::strerror(err)));
      return ErrnoStatus(FdPath(out_fd, "(unknown file)") + ": copy_file_range", err);
    }
    *in_off = static_cast<uint64_t>(from);
    *out_off = static_cast<uint64_t>(to);
    return static_cast<size_t>(n);
  }

  Status StartWriteback(int fd) override {
    if (::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0) {
      const int err = errno;
      return ErrnoStatus(FdPath(fd, "(unknown file)") + ": sync_file_range", err);
    }
    return Status::Ok();
  }

  Status SetTimes(int fd, int64_t atime_ns, int64_t mtime_ns) override {
    const struct timespec times[2] = {{atime_ns / 1000000000, atime_ns % 1000000000},
                                      {mtime_ns / 1000000000, mtime_ns % 1000000000}};
    if (::futimens(fd, times) != 0) {
      const int err = errno;
      return ErrnoStatus(FdPath(fd, "(unknown file)") + ": futimens", err);
    }
    return Status::Ok();
  }

 private:
  std::atomic<bool> populate_write_{true};
};

}  // namespace

std::string PathAt(int dir_fd, const std::string& name) {
  if (dir_fd == AT_FDCWD) return name;
  char target[PATH_MAX];
  const std::string link = fmt::format("/proc/self/fd/{}", dir_fd);
  ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0 || target[0] != '/') return name;
  std::string dir(target, static_cast<size_t>(n));
  return dir == "/" ? "/" + name : dir + "/" + name;
}

Result<UniqueFd> OpenRegularFileAt(int dir_fd, const std::string& name, int flags, unsigned mode) {
  struct stat st;
  return OpenRegularFileAt(dir_fd, name, flags, mode, &st, false);
}

Result<UniqueFd> OpenRegularFileAt(int dir_fd, const std::string& name, int flags, unsigned mode,
                                   struct ::stat* out, bool looked) {
  // Look before opening: refuses a planted FIFO or device without opening
  // it at all (opening a device can have effects). The fstat below closes
  // the race with a swap between the two calls.
  struct stat& st = *out;
  if (!looked && ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISREG(st.st_mode))
    return Refused(dir_fd, name, st.st_mode);
  // O_NONBLOCK keeps a FIFO from blocking the open until a writer comes. A
  // FIFO opened for reading and writing never blocks on Linux (fifo(7)), so
  // those opens do without it and without the fcntl that clears it again.
  const bool read_write = (flags & O_ACCMODE) == O_RDWR;
  int fd =
      ::openat(dir_fd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | (read_write ? 0 : O_NONBLOCK),
               static_cast<mode_t>(mode));
  if (fd < 0) {
    const int err = errno;
    // ELOOP: a symlink (O_NOFOLLOW); ENXIO: a FIFO opened write-only with
    // no reader; EISDIR, ENODEV, EOPNOTSUPP (a socket): other non-files.
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
      return Refused(dir_fd, name, st.st_mode);
    return ErrnoStatus(PathAt(dir_fd, name), err);
  }
  UniqueFd owned(fd);
  if (::fstat(fd, &st) != 0) return ErrnoStatus(PathAt(dir_fd, name) + ": fstat", errno);
  if (!S_ISREG(st.st_mode)) return Refused(dir_fd, name, st.st_mode);
  // F_SETFL changes only the status flags (the access mode and creation
  // flags in `flags` are ignored): the ones asked for, without O_NONBLOCK.
  if (!read_write && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return ErrnoStatus(PathAt(dir_fd, name) + ": fcntl", errno);
  return owned;
}

FileSystem* FileSystem::Default() {
  static PosixFileSystem fs;
  return &fs;
}

Result<UniqueFd> OpenDirectory(const std::string& path, bool create, FileSystem* fs) {
  if (path.empty()) return Status(Code::kInvalidArgument, "empty directory path");
  return (fs ? fs : FileSystem::Default())->OpenDir(AT_FDCWD, path, create);
}

Result<std::vector<std::string>> ListNames(int dir_fd, const std::string& path, FileSystem* fs) {
  auto names = (fs ? fs : FileSystem::Default())->ListDir(dir_fd);
  if (!names)
    return Status(names.error().code(),
                  (path.empty() ? PathAt(dir_fd, ".") : path) + ": " + names.error().message());
  return names;
}

Result<std::vector<DirEntry>> ListDirectory(int dir_fd, const std::string& path, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto names = ListNames(dir_fd, path, fs);
  if (!names) return names.error();
  std::vector<DirEntry> out;
  out.reserve(names->size());
  for (std::string& n : *names) {
    // Gone since the listing, or not lstat-able: not a directory.
    auto info = fs->StatAt(dir_fd, n);
    out.push_back({std::move(n), info && info->is_dir()});
  }
  return out;
}

Result<UniqueFd> OpenDirectoryAt(int dir_fd, const std::string& name, bool create, FileSystem* fs) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return Status(Code::kInvalidArgument, fmt::format("bad directory name '{}'", name));
  return (fs ? fs : FileSystem::Default())->OpenDir(dir_fd, name, create);
}

Result<BoundedFile> OpenBounded(int dir_fd, const std::string& name, uint64_t max_bytes,
                                FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto file = fs->Open(dir_fd, name, FileSystem::kRead);
  if (!file) return file.error();
  auto size = (*file)->Size();
  if (!size) return size.error();
  if (*size > max_bytes)
    return Status(Code::kTooLarge, fmt::format("{}: {} bytes, more than {}", PathAt(dir_fd, name),
                                               *size, max_bytes));
  return BoundedFile{std::move(*file), *size};
}

namespace {

constexpr size_t kCopyChunk = size_t{1} << 20;

// CopyFileContents from `at` on, through File.
Status CopyThroughFile(File& in, File& out, uint64_t at, uint64_t size) {
  std::vector<std::byte> buf(std::min<uint64_t>(kCopyChunk, std::max<uint64_t>(size - at, 1)));
  while (at < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
    auto n = in.ReadAt(at, std::span(buf.data(), want));
    if (!n) return n.error();
    if (*n == 0)
      return Status(Code::kIoError, fmt::format("the file shrank to {} bytes while copied", at));
    MQ_RETURN_IF_ERROR(out.WriteAt(at, std::span(buf.data(), *n)));
    at += *n;
  }
  return Status::Ok();
}

}  // namespace

Status CopyFileContents(File& in, File& out, uint64_t size, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  uint64_t from = 0, to = 0;
  while (from < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size - from, uint64_t{1} << 30));
    auto n = fs->CopyRange(in.fd(), &from, out.fd(), &to, want);
    if (!n && n.error().code() == Code::kUnsupported) return CopyThroughFile(in, out, from, size);
    if (!n) return n.error();
    if (*n == 0)
      return Status(Code::kIoError, fmt::format("the file shrank to {} bytes while copied", from));
  }
  return Status::Ok();
}

Result<std::vector<std::byte>> ReadFileAt(int dir_fd, const std::string& name, uint64_t max_bytes,
                                          FileSystem* fs) {
  auto opened = OpenBounded(dir_fd, name, max_bytes, fs);
  if (!opened) return opened.error();
  std::vector<std::byte> data(static_cast<size_t>(opened->size));
  auto got = opened->file->ReadAt(0, data);
  if (!got) return got.error();
  data.resize(*got);
  return data;
}

Status WriteFileAtomic(int dir_fd, const std::string& name, std::span<const std::byte> contents,
                       FileSystem* fs, const std::string& tmp_name, bool sync) {
  if (fs == nullptr) fs = FileSystem::Default();
  const std::string tmp = tmp_name.empty() ? name + ".tmp" : tmp_name;
  // The rename would replace a symlink, FIFO or device planted under the
  // name: refused like an open of it.
  auto info = fs->StatAt(dir_fd, name);
  if (info && !info->is_regular()) return Refused(dir_fd, name, info->mode);
  if (!info && info.error().code() != Code::kNotFound) return info.error();
  // A stale temporary from a crashed writer is ours to replace. One that
  // cannot be removed because it is no file (a directory planted under the
  // name) is refused like a planted `name`.
  Status stale = fs->Unlink(dir_fd, tmp);
  if (!stale.ok() && stale.code() != Code::kNotFound) {
    auto planted = fs->StatAt(dir_fd, tmp);
    if (planted && !planted->is_regular()) return Refused(dir_fd, tmp, planted->mode);
    return stale;
  }
  auto file = fs->Open(dir_fd, tmp, FileSystem::kCreateExclusive);
  if (!file) return file.error();
  Status s = (*file)->WriteAt(0, contents);
  if (s.ok() && sync) s = (*file)->Sync();
  file->reset();
  if (s.ok()) s = fs->Rename(dir_fd, tmp, name);
  if (!s.ok()) {
    // Best effort: a temporary left behind is replaced by the next writer.
    (void)fs->Unlink(dir_fd, tmp);
    return s;
  }
  return sync ? fs->SyncDir(dir_fd) : Status::Ok();
}

}  // namespace mq
