#include "mq/status.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace mq {

Status Status::Corruption(std::string file, uint64_t position, std::string rule, std::string what) {
  Status s(Code::kCorruption, fmt::format("{}: position {}: {}: {}", file, position, rule, what));
  s.detail_->rule = std::move(rule);
  s.detail_->file = std::move(file);
  s.detail_->position = position;
  return s;
}

const std::string& Status::Empty() {
  static const std::string empty;
  return empty;
}

Status ErrnoStatus(const std::string& context, int err) {
  Code code = Code::kIoError;
  if (err == ENOENT || err == ENOTDIR) code = Code::kNotFound;
  if (err == EACCES || err == EPERM) code = Code::kPermission;
  if (err == EFBIG || err == EMSGSIZE) code = Code::kTooLarge;
  if (err == EWOULDBLOCK) code = Code::kBusy;
  if (err == ENOMEM) code = Code::kNoMemory;
  return Status(code, fmt::format("{}: {}", context, std::strerror(err)));
}

}  // namespace mq
