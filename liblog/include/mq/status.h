// Status and Result<T>: errors as values on every hot path.
//
// A Status is OK or carries a Code, a message, and (for corruption) the file
// and byte position where it was found plus the format-spec rule it breaks.
// Result<T> holds a T or a non-OK Status. Method names follow tl::expected
// (has_value, value, error) so a later switch to std::expected is a rename.
// The exit status a tool ends with for a Status is the tools' decision
// (tools/common/exit_code.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

namespace mq {

enum class Code : uint8_t {
  kOk = 0,
  kInvalidArgument,    // bad name, bad flag value, bad config
  kNotFound,           // missing directory, topic, partition, file, offset
  kCorruption,         // data breaks a format-spec rule (see rule())
  kUnsupported,        // valid but unsupported (R5 attribute bit or codec, newer version)
  kTooLarge,           // a length over its configured maximum
  kIoError,            // read/write/fsync/rename failed (errno in message)
  kBusy,               // lock held by another process; retry later
  kPermission,         // EACCES/EPERM, unsafe directory modes
  kOutOfOrder,         // producer sequence gap or reordering
  kDuplicate,          // idempotent producer: batch already in the log
  kInternal,           // a bug in mq
  kNeedsRecovery,      // a legal crash state a writer repairs on open (R28)
  kNoMemory,           // an allocation failed (ENOMEM, std::bad_alloc)
  kFenced,             // a leader epoch below the partition's latest: leadership moved
  kUnavailable,        // no leader, or the leader's log root cannot be used
  kNotEnoughReplicas,  // ISR below min.insync.replicas: refused, nothing appended
  kNotEnoughReplicasAfterAppend,  // appended, then the ISR fell below the floor: outcome unknown
  kTimedOut,                      // appended, not acknowledged in time: outcome unknown
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message)
      : code_(code), detail_(std::make_unique<Detail>(Detail{std::move(message), {}, {}, 0})) {}
  Status(const Status& other)
      : code_(other.code_),
        detail_(other.detail_ ? std::make_unique<Detail>(*other.detail_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) {
      code_ = other.code_;
      detail_ = other.detail_ ? std::make_unique<Detail>(*other.detail_) : nullptr;
    }
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return {}; }
  // Corruption found in `file` at byte `position`, breaking format-spec rule
  // `rule` (e.g. "R4"). The message reads "<file>: offset <pos>: <rule>: <what>".
  static Status Corruption(std::string file, uint64_t position, std::string rule, std::string what);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return detail_ ? detail_->message : Empty(); }
  // Rule id for kCorruption ("R4"), empty otherwise.
  const std::string& rule() const { return detail_ ? detail_->rule : Empty(); }
  const std::string& file() const { return detail_ ? detail_->file : Empty(); }
  uint64_t position() const { return detail_ ? detail_->position : 0; }

 private:
  // An OK status is a code byte and a null pointer (16 bytes in all, no
  // allocation): cheap to return on every hot path.
  struct Detail {
    std::string message;
    std::string rule;
    std::string file;
    uint64_t position = 0;
  };
  static const std::string& Empty();
  Code code_ = Code::kOk;
  std::unique_ptr<Detail> detail_;
};

// Builds a Status from errno: ENOENT/ENOTDIR -> kNotFound, EACCES/EPERM ->
// kPermission, EFBIG/EMSGSIZE -> kTooLarge, EWOULDBLOCK -> kBusy, ENOMEM ->
// kNoMemory, anything else -> kIoError. The message is "<context>:
// <strerror>".
Status ErrnoStatus(const std::string& context, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}       // NOLINT: implicit by design
  Result(Status error) : v_(std::move(error)) {}  // NOLINT: must not be OK

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& error() const { return std::get<1>(v_); }
  // OK when holding a value, the error otherwise.
  Status status() const { return has_value() ? Status() : error(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace mq

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define MQ_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::mq::Status mq_status_ = (expr);        \
    if (!mq_status_.ok()) return mq_status_; \
  } while (0)
