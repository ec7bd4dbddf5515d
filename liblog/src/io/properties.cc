#include "io/properties.h"

#include <charconv>

#include <fmt/format.h>

namespace mq {
namespace {

std::string_view Trim(std::string_view s) {
  // '\r' too: a file edited on another system keeps its meaning.
  constexpr std::string_view kSpace = " \t\r";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

}  // namespace

Status ForEachProperty(std::string_view text, const std::string& file, const char* rule,
                       const std::function<Status(const PropertyLine&)>& fn) {
  size_t start = 0;
  for (size_t line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(start, end - start);
    const std::string_view body = Trim(raw);
    if (!body.empty() && body.front() != '#') {
      const size_t eq = body.find('=');
      PropertyLine p;
      p.line = line;
      p.position = start;
      if (eq == std::string_view::npos || Trim(body.substr(0, eq)).empty()) {
        return Status::Corruption(file, start, rule,
                                  fmt::format("line {}: expected key=value", line));
      }
      p.key = Trim(body.substr(0, eq));
      p.value = Trim(body.substr(eq + 1));
      MQ_RETURN_IF_ERROR(fn(p));
    }
    start = end + 1;
  }
  return Status::Ok();
}

bool ParseInt64(std::string_view text, int64_t min, int64_t max, int64_t* out) {
  if (text.empty() || text.front() == '+') return false;
  int64_t v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, v, 10);
  if (ec != std::errc() || ptr != last || v < min || v > max) return false;
  *out = v;
  return true;
}

}  // namespace mq
