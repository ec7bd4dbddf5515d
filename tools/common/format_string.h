// kcat-style output format strings (`mq-consume -f`) and the escapes shared
// by every delimiter flag (-D, -K, -f).
//
// Tokens (kcat's, plus %F %x %X):
//   %t topic        %p partition     %o offset       %T timestamp (ms)
//   %k key          %K key length    %s value        %S value length
//   %h headers as name=value,name=value              %F timestamp, ISO 8601 UTC
//   %x value as hex %X key as hex    %% a literal %
// Lengths are -1 for a null key/value. A null key, value or header value
// prints as the null text (empty by default; "NULL" with mq-consume -Z).
// Escapes: \n \t \r \\ \0 \xNN (two hex digits).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "mq/batch.h"
#include "mq/status.h"

namespace mq::fmtstr {

// Appends `ms` since the epoch as ISO 8601 UTC with milliseconds,
// e.g. "2026-11-30T08:00:00.000Z".
void AppendIsoTime(fmt::memory_buffer& out, int64_t ms);
// Parses ISO 8601 date-times: "YYYY-MM-DDTHH:MM[:SS[.fff...]]" followed by
// "Z", "+HH:MM", "-HH:MM", "+HHMM" or nothing (UTC); also a bare date
// "YYYY-MM-DD" (midnight UTC). A space may replace the 'T'. Returns ms since
// the epoch, or nullopt if `text` is not such a time.
std::optional<int64_t> ParseIsoTime(std::string_view text);

// Appends lowercase hex of `bytes`.
void AppendHex(fmt::memory_buffer& out, Bytes bytes);

// What a format string can print about one message.
struct Message {
  std::string_view topic;
  int32_t partition = 0;
  int64_t offset = 0;
  int64_t timestamp = 0;
  std::optional<Bytes> key;
  std::optional<Bytes> value;
  std::span<const Header> headers;  // filled only if needs_headers()
};

class FormatString {
 public:
  // Compiles `spec` (escapes decoded here). Unknown tokens, a trailing '%'
  // and bad escapes are kInvalidArgument naming the token and its position.
  static Result<FormatString> Parse(std::string_view spec);

  // Appends the rendering of `m` to `out`.
  void Render(fmt::memory_buffer& out, const Message& m, std::string_view null_text) const;
  // True if the format prints headers (%h): the caller decodes them only then.
  bool needs_headers() const { return needs_headers_; }

 private:
  struct Op {
    char token;                   // 0 for a literal
    uint32_t begin = 0, end = 0;  // literal bytes in text_
  };
  size_t Bound(const Op& op, const Message& m, std::string_view null_text) const;
  std::string text_;
  std::vector<Op> ops_;
  bool needs_headers_ = false;
};

}  // namespace mq::fmtstr
