// How mq-consume writes each message: value per line (default), key and
// value (-k/-K), a kcat format string (-f), or the JSON Lines envelope (-J).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "format_string.h"
#include "mq/batch.h"

namespace mq::consume {

struct PrintOptions {
  enum class Mode : uint8_t { kValue, kKeyValue, kFormat, kJson };
  Mode mode = Mode::kValue;
  std::string delimiter = "\n";      // after each message (-D, -0, --raw = "")
  std::string key_delimiter = "\t";  // between key and value (-K)
  std::string null_text;             // for a null key/value ("NULL" with -Z)
  std::optional<fmtstr::FormatString> format;
  std::string topic;
};

// --header-filter NAME[=VALUE]: every filter must match some header.
struct HeaderFilter {
  std::string name;
  std::optional<std::string> value;  // nullopt: the header only has to be present
};
bool MatchesAll(std::span<const Header> headers, std::span<const HeaderFilter> filters);

class Printer {
 public:
  Printer(PrintOptions options, cli::Output* out);
  // True if Print() needs the decoded headers.
  bool needs_headers() const { return needs_headers_; }
  void Print(int32_t partition, bool log_append_time, const RecordView& record,
             std::span<const Header> headers);
  // The same for a message of `topic` (%t, -J's topic), for a reader of
  // several topics.
  void Print(std::string_view topic, int32_t partition, bool log_append_time,
             const RecordView& record, std::span<const Header> headers);

 private:
  PrintOptions options_;
  cli::Output* out_;
  bool needs_headers_ = false;
  fmt::memory_buffer scratch_;
};

}  // namespace mq::consume
