// Framing of mq-produce's input: a byte stream cut into messages at a
// delimiter ("\n" by default, NUL for -0, any byte string for -D), read
// with a buffer that grows with the longest message, up to the maximum
// message size, so memory stays bounded whatever the input.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/file.h"
#include "mq/status.h"

namespace mq::produce {

struct InputMessage {
  std::string_view bytes;  // without its delimiter; valid until the next Next()
  uint64_t position = 0;   // byte offset of its first byte in the input
  uint64_t number = 0;     // 1-based: the line number for line input
};

enum class ReadState : uint8_t {
  kMessage,     // *message holds the next message
  kEnd,         // the input is exhausted
  kWouldBlock,  // nothing complete is buffered and the input had no bytes ready in time
};

// Milliseconds of CLOCK_MONOTONIC.
int64_t MonotonicMs();

class InputSource {
 public:
  // Opens `path` ("-" = standard input). Messages longer than
  // `max_message_bytes` are refused (see Next) after reading at most that
  // many bytes of them.
  static Result<std::unique_ptr<InputSource>> Open(const std::string& path,
                                                   std::string delimiter,
                                                   size_t max_message_bytes);

  // The next message. A final message without a trailing delimiter is still
  // a message; an empty input has none. When no complete message is
  // buffered and the input has no bytes ready, waits for them until the
  // CLOCK_MONOTONIC time `wait_until_ms` (a time already past: only checks),
  // or forever if nullopt; a regular file is always ready. A message over
  // the limit is kTooLarge naming the input, its byte offset and number.
  Result<ReadState> Next(InputMessage* message, std::optional<int64_t> wait_until_ms);

  // The name used in errors ("<stdin>" or the path).
  const std::string& name() const { return name_; }
  // True for a regular file: always ready, so never a reason to flush.
  bool regular() const { return regular_; }
  // What a message is called in errors: "line" for newline framing.
  std::string_view unit() const { return delimiter_ == "\n" ? "line" : "message"; }

 private:
  InputSource(UniqueFd fd, std::string name, std::string delimiter, size_t max_message_bytes,
              bool regular);
  // Looks for the delimiter in the unscanned buffered bytes.
  const char* FindDelimiter();
  // Reads more bytes (after moving the current message to the buffer start).
  Status Fill();
  Status TooLarge() const;
  // The most the buffer grows to: the longest message, its delimiter and a read.
  size_t BufferLimit() const;

  UniqueFd fd_;
  std::string name_;
  std::string delimiter_;
  size_t max_message_bytes_;
  bool regular_;
  bool eof_ = false;
  std::vector<char> buffer_;
  size_t start_ = 0;  // first byte of the current message
  size_t scan_ = 0;   // delimiter search resumes here
  size_t end_ = 0;    // end of buffered bytes
  uint64_t consumed_ = 0;  // input offset of buffer_[0]
  uint64_t number_ = 0;
};

}  // namespace mq::produce
