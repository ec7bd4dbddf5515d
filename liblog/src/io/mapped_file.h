// A whole small file mapped read-only through FileSystem::Map (index files,
// §7-§8). The mapping lives as long as the object; a file the
// writer rewrites is replaced by rename, so a live mapping never loses pages.
#pragma once

#include <memory>
#include <string>

#include "mq/batch.h"
#include "mq/file.h"
#include "mq/status.h"

namespace mq {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `name` in `dir_fd` (OpenRegularFileAt: a symlink, FIFO or device is
  // refused). kNotFound when missing; an empty
  // file maps to no bytes. Files over `max_bytes` are kTooLarge.
  static Result<MappedFile> Open(int dir_fd, const std::string& name, uint64_t max_bytes,
                                 FileSystem* fs = nullptr);
  Bytes bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> region_;  // Mapping::region
  Bytes bytes_;
};

}  // namespace mq
