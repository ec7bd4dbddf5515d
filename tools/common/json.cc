// The JSON writer's string encoding (json.h): escaped strings, the UTF-8
// check and base64. A string is written through a raw pointer into space
// reserved once from an upper bound of its size, so the per-byte loops
// carry no capacity checks: a plain string takes at most 6 bytes per input
// byte (\u00XX).
#include "json.h"

#include <array>
#include <cstring>

#include <simdjson.h>

namespace mq::json {
namespace {

// 1 for bytes that cannot appear raw inside a JSON string.
constexpr std::array<uint8_t, 256> MakeEscapeTable() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = 1;
  t['"'] = 1;
  t['\\'] = 1;
  return t;
}
constexpr std::array<uint8_t, 256> kNeedsEscape = MakeEscapeTable();

constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

// True if any of the 8 bytes of `x` is < 0x20, '"' or '\'. Exact as a yes/no
// answer (the bit tricks may flag the wrong byte, never the wrong word).
inline bool WordNeedsEscape(uint64_t x) {
  uint64_t q = x ^ (kOnes * '"');
  uint64_t b = x ^ (kOnes * '\\');
  uint64_t below_space = (x - kOnes * 0x20) & ~x;
  uint64_t quote = (q - kOnes) & ~q;
  uint64_t backslash = (b - kOnes) & ~b;
  return ((below_space | quote | backslash) & kHighs) != 0;
}

inline char* PutText(char* d, std::string_view s) {
  if (s.empty()) return d;  // s.data() may be null
  std::memcpy(d, s.data(), s.size());
  return d + s.size();
}

inline char* PutEscaped(char* d, unsigned char c) {
  if (!kNeedsEscape[c]) {
    *d++ = static_cast<char>(c);
    return d;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  *d++ = '\\';
  switch (c) {
    case '"':
      *d++ = '"';
      break;
    case '\\':
      *d++ = '\\';
      break;
    case '\n':
      *d++ = 'n';
      break;
    case '\r':
      *d++ = 'r';
      break;
    case '\t':
      *d++ = 't';
      break;
    case '\b':
      *d++ = 'b';
      break;
    case '\f':
      *d++ = 'f';
      break;
    default:
      d = PutText(d, "u00");
      *d++ = kHex[c >> 4];
      *d++ = kHex[c & 15];
  }
  return d;
}

}  // namespace

char* Writer::PutString(char* d, std::string_view utf8) {
  const auto* s = reinterpret_cast<const unsigned char*>(utf8.data());
  size_t n = utf8.size(), i = 0;
  *d++ = '"';
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    std::memcpy(&x, s + i, 8);
    if (!WordNeedsEscape(x)) {
      std::memcpy(d, s + i, 8);
      d += 8;
      continue;
    }
    for (size_t k = 0; k < 8; ++k) d = PutEscaped(d, s[i + k]);
  }
  for (; i < n; ++i) d = PutEscaped(d, s[i]);
  *d++ = '"';
  return d;
}

char* Writer::PutBase64(char* d, Bytes bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t{s[i]} << 16) | (uint32_t{s[i + 1]} << 8) | s[i + 2];
    *d++ = kBase64Alphabet[v >> 18];
    *d++ = kBase64Alphabet[(v >> 12) & 63];
    *d++ = kBase64Alphabet[(v >> 6) & 63];
    *d++ = kBase64Alphabet[v & 63];
  }
  if (i < n) {
    uint32_t v = uint32_t{s[i]} << 16;
    if (i + 1 < n) v |= uint32_t{s[i + 1]} << 8;
    *d++ = kBase64Alphabet[v >> 18];
    *d++ = kBase64Alphabet[(v >> 12) & 63];
    *d++ = i + 1 < n ? kBase64Alphabet[(v >> 6) & 63] : '=';
    *d++ = '=';
  }
  return d;
}

// ASCII is checked 8 bytes at a time; anything else goes to simdjson.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  uint64_t acc = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t x;
    std::memcpy(&x, s.data() + i, 8);
    acc |= x;
  }
  for (; i < s.size(); ++i) acc |= static_cast<unsigned char>(s[i]);
  return (acc & kHighs) == 0 || simdjson::validate_utf8(s.data(), s.size());
}

void AppendString(fmt::memory_buffer& out, std::string_view utf8) {
  size_t old = out.size();
  out.resize(old + Writer::kStringBound * utf8.size() + 2);
  char* end = Writer::PutString(out.data() + old, utf8);
  out.resize(static_cast<size_t>(end - out.data()));
}

void AppendBase64(fmt::memory_buffer& out, Bytes bytes) {
  size_t old = out.size();
  out.resize(old + Base64EncodedSize(bytes.size()));
  Writer::PutBase64(out.data() + old, bytes);
}

}  // namespace mq::json
