// Rendering bytes for people and for scripts: escaped text for the line
// output, JSON Lines objects (UTF-8 strings when the bytes are valid UTF-8,
// base64 otherwise, as in mq-consume -J: tools/common/envelope.h) for --json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "mq/batch.h"

namespace mq::inspect {

// Appends `bytes` for a text line: printable UTF-8 as is; backslash as "\\";
// control characters, DEL and bytes that are not valid UTF-8 as "\xNN". The
// result never holds a newline, so one record stays on one line.
void AppendEscaped(fmt::memory_buffer* out, Bytes bytes);

// Builds one JSON object on one line: {"k":v,...}. Keys are ASCII literals.
// It writes into `buffer` (cleared first), which the caller may reuse across
// lines so printing a line allocates nothing; without one it owns its own.
class JsonLine {
 public:
  JsonLine() : s_(&own_) { s_->push_back('{'); }
  explicit JsonLine(fmt::memory_buffer* buffer) : s_(buffer) {
    s_->clear();
    s_->push_back('{');
  }
  JsonLine(const JsonLine&) = delete;
  JsonLine& operator=(const JsonLine&) = delete;

  JsonLine& Str(std::string_view key, std::string_view value);
  JsonLine& Int(std::string_view key, int64_t value);
  JsonLine& Uint(std::string_view key, uint64_t value);
  JsonLine& Bool(std::string_view key, bool value);
  JsonLine& Null(std::string_view key);
  // `key` as a string when `bytes` is UTF-8, else `key`_b64 as base64; null
  // when absent.
  JsonLine& Blob(std::string_view key, const std::optional<Bytes>& bytes);
  // Inserts already-encoded JSON (an array or object) as the value of `key`.
  JsonLine& Raw(std::string_view key, std::string_view json);
  // The finished object followed by '\n' (valid until the buffer changes).
  std::string_view Finish();

 private:
  void Key(std::string_view key);
  void Append(std::string_view text) { s_->append(text); }
  fmt::memory_buffer own_;
  fmt::memory_buffer* s_;
};

}  // namespace mq::inspect
