#include "io/mapped_file.h"

#include <fmt/format.h>

namespace mq {

Result<MappedFile> MappedFile::Open(int dir_fd, const std::string& name, uint64_t max_bytes,
                                    FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto opened = OpenBounded(dir_fd, name, max_bytes, fs);
  if (!opened) return opened.error();
  MappedFile out;
  if (opened->size == 0) return out;
  // The mapping outlives the descriptor (closed on return).
  auto m = fs->Map(opened->file->fd(), static_cast<size_t>(opened->size), false);
  if (!m) return Status(m.error().code(), PathAt(dir_fd, name) + ": " + m.error().message());
  out.bytes_ = Bytes(m->data, m->size);
  out.region_ = std::move(m->region);
  return out;
}

}  // namespace mq
