// The `key=value` text files of format-spec/layout.md (meta.properties,
// topics/<topic>.conf): one property per line, `#` comments, blank lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "mq/status.h"

namespace mq {

struct PropertyLine {
  size_t line = 0;        // 1-based
  uint64_t position = 0;  // byte position of the line's first byte
  std::string_view key;   // spaces and tabs around key and value removed
  std::string_view value;
};

// Calls `fn` for every property line of `text`, in order; stops at the first
// non-OK status and returns it. A non-blank, non-comment line without `=`,
// or with an empty key, is kCorruption citing `rule` in `file`.
Status ForEachProperty(std::string_view text, const std::string& file, const char* rule,
                       const std::function<Status(const PropertyLine&)>& fn);

// Parses a decimal integer `-?[0-9]+` (no sign for values >= 0 other than
// '-', no spaces) within [min, max]. Returns false if it is not one.
bool ParseInt64(std::string_view text, int64_t min, int64_t max, int64_t* out);

}  // namespace mq
