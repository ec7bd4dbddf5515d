// Durations and sizes with units (mq/units.h).

#include "mq/units.h"

#include <charconv>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include <fmt/format.h>

namespace mq {
namespace {

struct Unit {
  std::string_view suffix;
  int64_t factor;
};

constexpr int64_t kSecond = 1000;
constexpr Unit kDurationUnits[] = {
    {"ms", 1},
    {"s", kSecond},
    {"m", 60 * kSecond},
    {"h", 3600 * kSecond},
    {"d", 86400 * kSecond},
    {"w", 7 * 86400 * kSecond},
};
constexpr int64_t kKiB = 1024;
constexpr Unit kSizeUnits[] = {
    {"B", 1},           {"k", kKiB},         {"K", kKiB},         {"KB", kKiB},
    {"KiB", kKiB},      {"M", kKiB << 10},   {"MB", kKiB << 10},  {"MiB", kKiB << 10},
    {"G", kKiB << 20},  {"GB", kKiB << 20},  {"GiB", kKiB << 20}, {"T", kKiB << 30},
    {"TB", kKiB << 30}, {"TiB", kKiB << 30},
};

std::string Shown(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 40)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

bool EqualNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

Result<int64_t> Parse(std::string_view text, std::string_view what, int64_t min, int64_t max,
                      std::span<const Unit> units, bool case_free, std::string_view kind,
                      std::string_view examples) {
  auto bad = [&](std::string_view why) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}{}bad {} \"{}\": {}", what, what.empty() ? "" : ": ", kind,
                              Shown(text), why));
  };
  size_t digits = 0;
  if (!text.empty() && text.front() == '-') digits = 1;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || (digits == 1 && text.front() == '-')) {
    return bad(fmt::format("expected an integer with an optional unit ({})", examples));
  }
  int64_t number = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, number, 10);
  if (ec != std::errc() || ptr != text.data() + digits) return bad("out of range");
  const std::string_view suffix = text.substr(digits);
  int64_t factor = 1;
  if (!suffix.empty()) {
    bool found = false;
    for (const Unit& u : units) {
      if (u.suffix == suffix || (case_free && EqualNoCase(u.suffix, suffix))) {
        factor = u.factor;
        found = true;
      }
    }
    if (!found) return bad(fmt::format("unknown unit \"{}\" ({})", Shown(suffix), examples));
    if (number < 0) return bad("a negative value takes no unit");
  }
  int64_t value = 0;
  if (__builtin_mul_overflow(number, factor, &value)) return bad("out of range");
  if (value < min || value > max) {
    return bad(fmt::format("{} is outside {}..{}", value, min, max));
  }
  return value;
}

}  // namespace

Result<int64_t> ParseDurationMs(std::string_view text, std::string_view what, int64_t min,
                                int64_t max) {
  return Parse(text, what, min, max, kDurationUnits, false, "duration",
               "ms, s, m, h, d, w; e.g. 500ms, 7d");
}

Result<int64_t> ParseSizeBytes(std::string_view text, std::string_view what, int64_t min,
                               int64_t max) {
  return Parse(text, what, min, max, kSizeUnits, true, "size",
               "B, k/KiB, M/MiB, G/GiB, T/TiB, powers of 1024; e.g. 64k, 1GiB");
}

}  // namespace mq
