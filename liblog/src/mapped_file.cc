#include "mapped_file.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>

#include <boost/interprocess/mapped_region.hpp>
#include <fmt/format.h>

#include "mq/file.h"

namespace mq {

namespace {
namespace bip = boost::interprocess;

// What mapped_region needs from a mappable object: a handle. We already hold
// an fd opened without following symlinks, so wrap it rather than let
// file_mapping reopen the file by path.
struct FdMapping {
  int fd;
  bip::mapping_handle_t get_mapping_handle() const {
    return bip::ipcdetail::mapping_handle_from_file_handle(fd);
  }
};
}  // namespace

Result<MappedFile> MappedFile::Open(int dir_fd, const std::string& name, uint64_t max_bytes) {
  auto owned = OpenRegularFileAt(dir_fd, name, O_RDONLY);
  if (!owned) return owned.error();
  const int fd = owned->get();
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(PathAt(dir_fd, name) + ": fstat", errno);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    return Status(Code::kTooLarge,
                  fmt::format("{}: {} bytes, more than {}", PathAt(dir_fd, name), size, max_bytes));
  MappedFile out;
  if (size == 0) return out;
  try {
    auto region = std::make_shared<bip::mapped_region>(FdMapping{fd}, bip::read_only, 0,
                                                       static_cast<size_t>(size));
    out.bytes_ = Bytes(static_cast<const std::byte*>(region->get_address()), region->get_size());
    out.region_ = std::move(region);
  } catch (const bip::interprocess_exception& e) {
    return Status(Code::kIoError, fmt::format("{}: mmap: {}", name, e.what()));
  }
  return out;
}

}  // namespace mq
