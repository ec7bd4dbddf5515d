#include "escapes.h"

#include <fmt/format.h>

namespace mq::cli {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Status BadEscape(std::string_view flag, std::string_view text, size_t pos, std::string_view what) {
  return Status(Code::kInvalidArgument,
                fmt::format("{}: '{}': {} at byte {} (escapes: \\n \\t \\r \\0 \\\\ \\xNN)", flag,
                            text, what, pos));
}

}  // namespace

Result<std::string> DecodeEscapes(std::string_view text, std::string_view flag) {
  return DecodeEscapesIn(text, 0, text.size(), flag);
}

Result<std::string> DecodeEscapesIn(std::string_view whole, size_t start, size_t len,
                                    std::string_view flag) {
  std::string_view text = whole.substr(start, len);
  auto BadEscape = [&](std::string_view f, std::string_view, size_t pos, std::string_view what) {
    return cli::BadEscape(f, whole, start + pos, what);
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (i + 1 >= text.size()) return BadEscape(flag, text, i, "lone backslash");
    char e = text[++i];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '0':
        out.push_back('\0');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case 'x': {
        int hi = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
        int lo = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
        if (hi < 0 || lo < 0) return BadEscape(flag, text, i - 1, "\\x needs two hex digits");
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default:
        return BadEscape(flag, text, i - 1, fmt::format("unknown escape '\\{}'", e));
    }
  }
  return out;
}

Result<std::string> ParseEscapes(std::string_view text, std::string_view flag) {
  auto out = DecodeEscapes(text, flag);
  if (out && out->empty()) {
    return Status(Code::kInvalidArgument, fmt::format("{}: the delimiter is empty", flag));
  }
  return out;
}

std::string EscapeBytes(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\0':
        out += "\\0";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c >= 0x20 && c < 0x7f)
          out.push_back(c);
        else
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

}  // namespace mq::cli
