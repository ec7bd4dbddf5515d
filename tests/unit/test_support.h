// Shared helpers for the partition log tests: temporary directories, batch
// building, file surgery, and a fault-injecting FileSystem.
#pragma once

// MQ_TEST_ASAN: built with AddressSanitizer, by g++ (__SANITIZE_ADDRESS__)
// or by clang (__has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define MQ_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MQ_TEST_ASAN 1
#endif
#endif

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mq/batch.h"
#include "mq/file.h"
#include "mq/partition.h"

namespace mq::test {

// A child forked at construction that holds a copy of every descriptor of
// this process (as a handler another thread starts holds them between fork
// and exec) until Release: then it exits and is waited for. Release
// returns whether that went as planned.
class ForkedHolder {
 public:
  ForkedHolder() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      char c;
      while (::read(fds[0], &c, 1) < 0) {
      }
      ::_exit(0);
    }
    ::close(fds[0]);
    release_ = fds[1];
  }
  ForkedHolder(const ForkedHolder&) = delete;
  ForkedHolder& operator=(const ForkedHolder&) = delete;
  ~ForkedHolder() { Release(); }
  bool ok() const { return pid_ > 0; }
  bool Release() {
    if (release_ >= 0) ::close(release_);
    release_ = -1;
    if (pid_ <= 0) return false;
    int status = 0;
    const bool waited = ::waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    return waited;
  }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// One batch of `count` records with values "v<i>" of `value_bytes` bytes
// (padded), timestamps `ts`, ts+1, ...
std::vector<std::byte> MakeBatch(int count, int64_t ts = 1000, size_t value_bytes = 8,
                                 BatchOptions options = {});

std::vector<std::byte> ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::vector<std::byte>& bytes);
void AppendToFile(const std::string& path, const std::vector<std::byte>& bytes);
uint64_t FileSize(const std::string& path);
bool Exists(const std::string& path);
void CopyDir(const std::string& from, const std::string& to);
std::vector<std::string> ListDir(const std::string& dir);
// The names in `dir` that end in `suffix`, sorted.
std::vector<std::string> ListDirEndingIn(const std::string& dir, const std::string& suffix);
// A writer of `dir` (created) whose segments roll at 400 bytes, every few
// batches of AppendSmallBatches; `fs` its file system (nullptr: the real one).
// Throws when it does not open.
std::unique_ptr<PartitionWriter> SmallSegmentWriter(const std::string& dir,
                                                    FileSystem* fs = nullptr);
// Appends `batches` batches of 2 records of 40 bytes, the i-th with
// timestamp 1000 + i. Throws when an append fails.
void AppendSmallBatches(PartitionWriter& w, int batches);

// Reads every batch of a partition from the start: (base offset, last
// offset) pairs.
std::vector<std::pair<int64_t, int64_t>> ReadAll(const std::string& dir);
// Every batch of a partition from the start, its bytes as the log holds them.
std::vector<std::vector<std::byte>> RawBatches(const std::string& dir);

// Sets the boot id liblog sees (MQ_TEST_BOOT_ID, R27) for its lifetime;
// nullptr unsets it (the kernel's id). Changing it simulates a reboot.
class ScopedBootId {
 public:
  explicit ScopedBootId(const char* id);
  ~ScopedBootId();
  ScopedBootId(const ScopedBootId&) = delete;
  ScopedBootId& operator=(const ScopedBootId&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

// Wraps the real file system and fails chosen operations.
class FaultFs : public FileSystemWrapper {
 public:
  enum class Fault { kNone, kEio, kEnospc, kShortWrite };
  // The Nth (1-based) write / fsync / rename from now fails; with `sticky`
  // every later one fails too.
  void FailWrite(int n, Fault f, bool sticky = false) {
    write_n_ = n;
    write_fault_ = f;
    sticky_ = sticky;
    writes_ = 0;
  }
  void FailSync(int n, bool sticky = false) {
    sync_n_ = n;
    sticky_ = sticky;
    syncs_ = 0;
  }
  void FailRename(int n) {
    rename_n_ = n;
    renames_ = 0;
  }
  void Clear() { write_n_ = sync_n_ = rename_n_ = 0; }
  int syncs() const { return total_syncs_; }
  // Every copy_file_range is refused as across file systems (EXDEV): copies
  // go through the files' writes. A copy_file_range that is not refused
  // counts as a write (FailWrite; kShortWrite copies half of it).
  void RefuseCopy(bool refuse = true) { refuse_copy_ = refuse; }
  int kernel_copies() const { return kernel_copies_; }  // CopyRange calls that copied
  // When set, the times SetTimes was last given (atime, mtime, ns).
  std::pair<int64_t, int64_t> set_times() const { return set_times_; }

  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override;
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override;
  Status Unlink(int dir_fd, const std::string& name) override;
  Status SyncDir(int dir_fd) override;
  Result<size_t> CopyRange(int in_fd, uint64_t* in_off, int out_fd, uint64_t* out_off,
                           size_t len) override;
  Status SetTimes(int fd, int64_t atime_ns, int64_t mtime_ns) override {
    set_times_ = {atime_ns, mtime_ns};
    return real_->SetTimes(fd, atime_ns, mtime_ns);
  }

  // Called by the wrapped files.
  Status BeforeWrite(File* f, uint64_t offset, std::span<const std::byte> data);
  Status BeforeSync();

 private:
  FileSystem* real_ = FileSystem::Default();
  int write_n_ = 0, sync_n_ = 0, rename_n_ = 0;
  int writes_ = 0, syncs_ = 0, renames_ = 0, total_syncs_ = 0;
  Fault write_fault_ = Fault::kNone;
  bool sticky_ = false;
  bool refuse_copy_ = false;
  int kernel_copies_ = 0;
  std::pair<int64_t, int64_t> set_times_ = {0, 0};
  Fault NextWriteFault();  // the fault of the write about to be made
};

// A partition whose segments roll every few batches (700 bytes) and index
// every 100: replication tests cross many segments with a few appends.
inline LogConfig ReplicaTestLog() {
  LogConfig c;
  c.segment_bytes = 700;
  c.index_interval_bytes = 100;
  return c;
}

// The real file system until `crash_at` changes have been made; from then on
// every change fails and has no effect: a process killed between two of its
// system calls. Reads keep working (the dying process may still read).
class CrashFs : public FileSystemWrapper {
 public:
  explicit CrashFs(int crash_at) : left_(crash_at) {}
  bool crashed() const { return crashed_; }
  int changes() const { return changes_; }

  Status Change(const std::string& what) {
    if (left_ <= 0) {
      crashed_ = true;
      return Status(Code::kIoError, "crashed before " + what);
    }
    --left_;
    ++changes_;
    return Status::Ok();
  }

  class CrashFile : public File {
   public:
    CrashFile(std::unique_ptr<File> f, CrashFs* fs) : f_(std::move(f)), fs_(fs) {}
    Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
      MQ_RETURN_IF_ERROR(fs_->Change("write"));
      return f_->WriteAt(offset, data);
    }
    Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) override {
      return f_->ReadAt(offset, data);
    }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Truncate(uint64_t size) override {
      MQ_RETURN_IF_ERROR(fs_->Change("truncate"));
      return f_->Truncate(size);
    }
    Status Sync() override {
      MQ_RETURN_IF_ERROR(fs_->Change("fsync"));
      return f_->Sync();
    }
    Result<FileInfo> Stat() override { return f_->Stat(); }
    int fd() const override { return f_->fd(); }

   private:
    std::unique_ptr<File> f_;
    CrashFs* fs_;
  };

  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    if (mode == kCreate || mode == kCreateExclusive) MQ_RETURN_IF_ERROR(Change("create " + name));
    auto f = real_->Open(dir_fd, name, mode);
    if (!f) return f.error();
    return std::unique_ptr<File>(new CrashFile(std::move(*f), this));
  }
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    MQ_RETURN_IF_ERROR(Change("rename " + from));
    return real_->Rename(dir_fd, from, to);
  }
  Status Unlink(int dir_fd, const std::string& name) override {
    MQ_RETURN_IF_ERROR(Change("unlink " + name));
    return real_->Unlink(dir_fd, name);
  }
  Status SyncDir(int dir_fd) override {
    MQ_RETURN_IF_ERROR(Change("fsync directory"));
    return real_->SyncDir(dir_fd);
  }

 private:
  FileSystem* real_ = FileSystem::Default();
  int left_;
  int changes_ = 0;
  bool crashed_ = false;
};

}  // namespace mq::test
