#include "text.h"

#include <fmt/format.h>

namespace mq::inspect {

namespace {

// Length of the valid UTF-8 sequence starting at bytes[i], or 0.
size_t Utf8SequenceLength(Bytes bytes, size_t i) {
  auto b = [&](size_t k) { return std::to_integer<uint8_t>(bytes[k]); };
  uint8_t c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > bytes.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if (n == 2 && c < 0xC2) return 0;
  if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;
  if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;
  if (n == 4 && c == 0xF0 && b(i + 1) < 0x90) return 0;
  if (n == 4 && (c > 0xF4 || (c == 0xF4 && b(i + 1) >= 0x90))) return 0;
  return n;
}

}  // namespace

void AppendEscaped(fmt::memory_buffer* out, Bytes bytes) {
  const char* p = reinterpret_cast<const char*>(bytes.data());
  size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    // Printable ASCII, the common case, is copied a run at a time.
    size_t run = i;
    while (run < n && p[run] >= 0x20 && p[run] < 0x7F && p[run] != '\\') ++run;
    out->append(p + i, p + run);
    i = run;
    if (i == n) break;
    uint8_t c = static_cast<uint8_t>(p[i]);
    size_t len = Utf8SequenceLength(bytes, i);
    if (c == '\\') {
      out->append(std::string_view("\\\\"));
      ++i;
    } else if (len <= 1) {  // invalid UTF-8, control character or DEL
      fmt::format_to(std::back_inserter(*out), "\\x{:02x}", c);
      ++i;
    } else {
      out->append(p + i, p + i + len);
      i += len;
    }
  }
}

}  // namespace mq::inspect
