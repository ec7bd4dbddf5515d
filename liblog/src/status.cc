#include "mq/status.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace mq {

Status Status::Corruption(std::string file, uint64_t position, std::string rule,
                          std::string what) {
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

int Status::exit_code() const {
  switch (code_) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument: return 64;  // EX_USAGE
    case Code::kCorruption: return 65;       // EX_DATAERR
    case Code::kOutOfOrder: return 65;
    case Code::kDuplicate: return 65;
    case Code::kTooLarge: return 65;
    case Code::kUnsupported: return 65;
    case Code::kNotFound: return 66;          // EX_NOINPUT
    case Code::kInternal: return 70;          // EX_SOFTWARE
    case Code::kNoMemory: return 71;          // EX_OSERR
    case Code::kIoError: return 74;           // EX_IOERR
    case Code::kBusy: return 75;              // EX_TEMPFAIL
    case Code::kPermission: return 77;        // EX_NOPERM
    case Code::kNeedsRecovery: return 75;     // EX_TEMPFAIL: run a writer, then retry
    case Code::kFenced: return 75;            // EX_TEMPFAIL: retry with the new leader
    case Code::kUnavailable: return 69;       // EX_UNAVAILABLE: nothing appended
    // Replication outcomes sysexits(3) has no word for (mq-produce(1)):
    case Code::kNotEnoughReplicas: return 79;             // refused, nothing appended
    case Code::kNotEnoughReplicasAfterAppend: return 80;  // appended, outcome unknown
    case Code::kTimedOut: return 81;                      // appended, outcome unknown
  }
  return 70;
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
