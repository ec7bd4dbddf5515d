#include "mapped_file.h"

#include <fmt/format.h>

namespace mq {

Result<MappedFile> MappedFile::Open(int dir_fd, const std::string& name, uint64_t max_bytes,
                                    FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto file = fs->Open(dir_fd, name, FileSystem::kRead);
  if (!file) return file.error();
  auto size = (*file)->Size();
  if (!size) return size.error();
  if (*size > max_bytes)
    return Status(Code::kTooLarge,
                  fmt::format("{}: {} bytes, more than {}", PathAt(dir_fd, name), *size, max_bytes));
  MappedFile out;
  if (*size == 0) return out;
  // The mapping outlives the descriptor (closed on return).
  auto m = fs->Map((*file)->fd(), static_cast<size_t>(*size), false);
  if (!m) return Status(m.error().code(), PathAt(dir_fd, name) + ": " + m.error().message());
  out.bytes_ = Bytes(m->data, m->size);
  out.region_ = std::move(m->region);
  return out;
}

}  // namespace mq
