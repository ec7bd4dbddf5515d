#include "test_support.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace mq::test {

TempDir::TempDir() {
  // tmpfs when there is one: the recovery tests fsync a lot, and what they
  // check is the logic above the disk, not the disk.
  const char* base = std::getenv("MQ_TEST_TMPDIR");
  if (base == nullptr || *base == 0) base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : nullptr;
  if (base == nullptr) base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/mq-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::byte> MakeBatch(int count, int64_t ts, size_t value_bytes, BatchOptions options) {
  BatchBuilder b(options);
  std::vector<std::string> values;
  values.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    std::string v = fmt::format("v{}", i);
    if (v.size() < value_bytes) v.resize(value_bytes, '.');
    values.push_back(std::move(v));
  }
  for (int i = 0; i < count; ++i) {
    RecordInput r;
    r.timestamp = ts + i;
    r.value = AsBytes(values[static_cast<size_t>(i)]);
    b.Add(r);
  }
  std::vector<std::byte> out;
  if (!b.Finish(0, &out).ok()) throw std::runtime_error("BatchBuilder::Finish");
  return out;
}

std::vector<std::byte> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(data.size());
  if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());
  return out;
}

void WriteFile(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void AppendToFile(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

uint64_t FileSize(const std::string& path) { return std::filesystem::file_size(path); }
bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void CopyDir(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> ListDirEndingIn(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (auto& n : ListDir(dir))
    if (n.ends_with(suffix)) out.push_back(n);
  return out;
}

std::unique_ptr<PartitionWriter> SmallSegmentWriter(const std::string& dir, FileSystem* fs) {
  LogConfig config;
  config.segment_bytes = 400;
  config.fs = fs;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  if (!w) throw std::runtime_error(w.error().message());
  return std::move(*w);
}

void AppendSmallBatches(PartitionWriter& w, int batches) {
  for (int i = 0; i < batches; ++i) {
    auto b = MakeBatch(2, 1000 + i, 40);
    auto appended = w.Append(b);
    if (!appended) throw std::runtime_error(appended.error().message());
  }
}

std::vector<std::pair<int64_t, int64_t>> ReadAll(const std::string& dir) {
  std::vector<std::pair<int64_t, int64_t>> out;
  auto r = PartitionReader::Open(dir);
  if (!r) throw std::runtime_error(r.error().message());
  for (;;) {
    auto b = (*r)->Next();
    if (!b) throw std::runtime_error(b.error().message());
    if (!*b) break;
    out.emplace_back((*b)->header().base_offset, (*b)->header().last_offset());
  }
  return out;
}

namespace {

class FaultFile : public File {
 public:
  FaultFile(std::unique_ptr<File> real, FaultFs* fs) : real_(std::move(real)), fs_(fs) {}
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    MQ_RETURN_IF_ERROR(fs_->BeforeWrite(real_.get(), offset, data));
    return real_->WriteAt(offset, data);
  }
  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) override {
    return real_->ReadAt(offset, data);
  }
  Result<uint64_t> Size() override { return real_->Size(); }
  Result<FileInfo> Stat() override { return real_->Stat(); }
  Status Truncate(uint64_t size) override { return real_->Truncate(size); }
  Status Sync() override {
    MQ_RETURN_IF_ERROR(fs_->BeforeSync());
    return real_->Sync();
  }
  int fd() const override { return real_->fd(); }

 private:
  std::unique_ptr<File> real_;
  FaultFs* fs_;
};

}  // namespace

Result<std::unique_ptr<File>> FaultFs::Open(int dir_fd, const std::string& name, OpenMode mode) {
  auto f = real_->Open(dir_fd, name, mode);
  if (!f) return f.error();
  return std::unique_ptr<File>(new FaultFile(std::move(*f), this));
}

Status FaultFs::Rename(int dir_fd, const std::string& from, const std::string& to) {
  if (rename_n_ > 0 && ++renames_ == rename_n_) return ErrnoStatus("rename " + from, EIO);
  return real_->Rename(dir_fd, from, to);
}

Status FaultFs::Unlink(int dir_fd, const std::string& name) { return real_->Unlink(dir_fd, name); }

Status FaultFs::SyncDir(int dir_fd) {
  MQ_RETURN_IF_ERROR(BeforeSync());
  return real_->SyncDir(dir_fd);
}

FaultFs::Fault FaultFs::NextWriteFault() {
  if (write_n_ <= 0) return Fault::kNone;
  ++writes_;
  if (writes_ < write_n_ || (writes_ > write_n_ && !sticky_)) return Fault::kNone;
  return write_fault_;
}

Result<size_t> FaultFs::CopyRange(int in_fd, uint64_t* in_off, int out_fd, uint64_t* out_off,
                                  size_t len) {
  if (refuse_copy_) return Status(Code::kUnsupported, "injected copy_file_range: EXDEV");
  switch (NextWriteFault()) {
    case Fault::kNone:
      break;
    case Fault::kEio:
      return ErrnoStatus("injected copy_file_range", EIO);
    case Fault::kEnospc:
      return ErrnoStatus("injected copy_file_range", ENOSPC);
    case Fault::kShortWrite:
      // Half the bytes land, then the disk is full.
      (void)real_->CopyRange(in_fd, in_off, out_fd, out_off, len / 2);
      return ErrnoStatus("injected short copy_file_range", ENOSPC);
  }
  auto n = real_->CopyRange(in_fd, in_off, out_fd, out_off, len);
  if (n && *n > 0) ++kernel_copies_;
  return n;
}

Status FaultFs::BeforeWrite(File* f, uint64_t offset, std::span<const std::byte> data) {
  switch (NextWriteFault()) {
    case Fault::kNone:
      return Status::Ok();
    case Fault::kEio:
      return ErrnoStatus("injected write", EIO);
    case Fault::kEnospc:
      return ErrnoStatus("injected write", ENOSPC);
    case Fault::kShortWrite:
      // Half the bytes land, then the disk is full.
      (void)f->WriteAt(offset, data.first(data.size() / 2));
      return ErrnoStatus("injected short write", ENOSPC);
  }
  return Status::Ok();
}

Status FaultFs::BeforeSync() {
  ++total_syncs_;
  if (sync_n_ <= 0) return Status::Ok();
  ++syncs_;
  if (syncs_ == sync_n_ || (sticky_ && syncs_ > sync_n_)) return ErrnoStatus("injected fsync", EIO);
  return Status::Ok();
}

ScopedBootId::ScopedBootId(const char* id) {
  if (const char* old = std::getenv("MQ_TEST_BOOT_ID")) {
    had_ = true;
    old_ = old;
  }
  if (id)
    ::setenv("MQ_TEST_BOOT_ID", id, 1);
  else
    ::unsetenv("MQ_TEST_BOOT_ID");
}

ScopedBootId::~ScopedBootId() {
  if (had_)
    ::setenv("MQ_TEST_BOOT_ID", old_.c_str(), 1);
  else
    ::unsetenv("MQ_TEST_BOOT_ID");
}

std::vector<std::vector<std::byte>> RawBatches(const std::string& dir) {
  std::vector<std::vector<std::byte>> out;
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  for (;;) {
    auto b = (*r)->Next();
    REQUIRE(b);
    if (!*b) break;
    out.emplace_back((*b)->bytes().begin(), (*b)->bytes().end());
  }
  return out;
}

}  // namespace mq::test
