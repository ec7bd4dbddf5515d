// Segment forensics (mq/segment.h): SegmentScanner and the index file
// readers. Files are named by path; only the last component is opened
// without following symlinks.
#include <fmt/format.h>

#include "format/batch_cursor.h"
#include "format/format.h"
#include "io/mapped_file.h"
#include "mq/file.h"
#include "mq/segment.h"
#include "storage/offset_index.h"
#include "storage/segment.h"

namespace mq {

namespace {

struct SplitPath {
  std::string dir;
  std::string name;
};
SplitPath Split(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

Result<MappedFile> MapByPath(const std::string& path, FileSystem* fs) {
  SplitPath sp = Split(path);
  auto dir = OpenDirectory(sp.dir, false, fs);
  if (!dir) return dir.error();
  auto m = MappedFile::Open(dir->get(), sp.name, format::kMaxIndexFileBytes, fs);
  if (!m) return Status(m.error().code(), path + ": " + m.error().message());
  return m;
}

}  // namespace

Result<std::unique_ptr<File>> OpenFileByPath(const std::string& path, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  SplitPath sp = Split(path);
  auto dir = OpenDirectory(sp.dir, false, fs);
  if (!dir) return dir.error();
  auto f = fs->Open(dir->get(), sp.name, FileSystem::kRead);
  if (!f) return Status(f.error().code(), path + ": " + f.error().message());
  return f;
}

Result<FileInfo> StatByPath(const std::string& path, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  SplitPath sp = Split(path);
  auto dir = OpenDirectory(sp.dir, false, fs);
  if (!dir) return dir.error();
  return fs->StatAt(dir->get(), sp.name);
}

Result<std::vector<OffsetIndexEntry>> ReadOffsetIndexFile(const std::string& path, FileSystem* fs) {
  auto base = SegmentBaseOffset(path);
  if (!base) return base.error();
  auto m = MapByPath(path, fs);
  if (!m) return m.error();
  return DecodeOffsetIndex(m->bytes(), *base, path);
}

Result<std::vector<TimeIndexEntry>> ReadTimeIndexFile(const std::string& path, FileSystem* fs) {
  auto base = SegmentBaseOffset(path);
  if (!base) return base.error();
  auto m = MapByPath(path, fs);
  if (!m) return m.error();
  return DecodeTimeIndex(m->bytes(), *base, path);
}

Result<std::vector<OffsetIndexEntry>> ReadOffsetIndexFile(const std::string& path) {
  return ReadOffsetIndexFile(path, nullptr);
}

Result<std::vector<TimeIndexEntry>> ReadTimeIndexFile(const std::string& path) {
  return ReadTimeIndexFile(path, nullptr);
}

struct SegmentScanner::Impl {
  explicit Impl(const DecodeLimits& l) : cursor(l) {}
  std::unique_ptr<File> file;
  std::string path;
  uint64_t size = 0;
  BatchCursor cursor;
  uint64_t pos = 0;
  uint64_t last_pos = 0;
  uint64_t trailing = 0;
  std::optional<uint64_t> resync_from;
  bool done = false;
};

SegmentScanner::SegmentScanner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SegmentScanner::~SegmentScanner() = default;

Result<std::unique_ptr<SegmentScanner>> SegmentScanner::Open(const std::string& path,
                                                             const DecodeLimits& limits,
                                                             FileSystem* fs) {
  auto impl = std::make_unique<Impl>(limits);
  auto f = OpenFileByPath(path, fs);
  if (!f) return f.error();
  impl->file = std::move(*f);
  auto size = impl->file->Size();
  if (!size) return size.error();
  impl->size = *size;
  impl->path = path;
  impl->cursor.Reset(impl->file.get(), path, *size);
  return std::unique_ptr<SegmentScanner>(new SegmentScanner(std::move(impl)));
}

Result<std::optional<BatchView>> SegmentScanner::Next() {
  Impl& s = *impl_;
  if (s.done) return std::optional<BatchView>();
  if (s.resync_from) {
    auto next = s.cursor.FindNextValid(*s.resync_from);
    if (!next) {
      s.trailing = s.size - *s.resync_from;
      s.done = true;
      return next.error();
    }
    if (!*next) {
      s.trailing = s.size - *s.resync_from;
      s.done = true;
      return std::optional<BatchView>();
    }
    s.pos = **next;
    s.resync_from.reset();
  }
  BatchView view;
  auto step = s.cursor.Read(s.pos, &view);
  if (!step) {
    s.last_pos = s.pos;
    s.resync_from = s.pos;
    return step.error();
  }
  if (*step != BatchCursor::Step::kBatch) {
    s.trailing = s.size - s.pos;
    s.done = true;
    return std::optional<BatchView>();
  }
  s.last_pos = s.pos;
  s.pos += view.header().size_bytes();
  return std::optional<BatchView>(view);
}

uint64_t SegmentScanner::position() const { return impl_->last_pos; }
uint64_t SegmentScanner::file_size() const { return impl_->size; }
uint64_t SegmentScanner::trailing_bytes() const { return impl_->trailing; }

}  // namespace mq
