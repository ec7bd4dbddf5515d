#include "format_string.h"

#include "escapes.h"

#include <cstring>
#include <string_view>

namespace mq::fmtstr {
namespace {

void Append(fmt::memory_buffer& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

void AppendInt(fmt::memory_buffer& out, int64_t v) {
  fmt::format_int f(v);
  out.append(f.data(), f.data() + f.size());
}

void AppendPadded(fmt::memory_buffer& out, int64_t v, int width) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && n < 20);
  for (int i = n; i < width; ++i) out.push_back('0');
  while (n > 0) out.push_back(digits[--n]);
}

// Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// Days in month `m` (1-12) of year `y`, proleptic Gregorian: February has
// 29 in years divisible by 4, except centuries not divisible by 400.
int64_t DaysInMonth(int64_t y, int64_t m) {
  static constexpr int64_t kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

void CivilFromDays(int64_t z, int64_t* y, int64_t* m, int64_t* d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = yoe + era * 400 + (*m <= 2);
}

// Reads exactly `n` decimal digits at `*p`.
bool Digits(std::string_view s, size_t* p, int n, int64_t* v) {
  if (*p + n > s.size()) return false;
  int64_t r = 0;
  for (int i = 0; i < n; ++i) {
    char c = s[*p + i];
    if (c < '0' || c > '9') return false;
    r = r * 10 + (c - '0');
  }
  *p += n;
  *v = r;
  return true;
}

bool Expect(std::string_view s, size_t* p, char c) {
  if (*p < s.size() && s[*p] == c) {
    ++*p;
    return true;
  }
  return false;
}

// Parses the zone suffix at `p`: "", "Z", "+HH:MM", "-HH:MM", "+HHMM", "+HH".
bool ParseZone(std::string_view s, size_t p, int64_t* offset_minutes) {
  *offset_minutes = 0;
  if (p == s.size()) return true;
  if (s[p] == 'Z' || s[p] == 'z') return p + 1 == s.size();
  if (s[p] != '+' && s[p] != '-') return false;
  int sign = s[p] == '-' ? -1 : 1;
  ++p;
  int64_t hh = 0, mm = 0;
  if (!Digits(s, &p, 2, &hh)) return false;
  if (p < s.size()) {
    Expect(s, &p, ':');
    if (!Digits(s, &p, 2, &mm)) return false;
  }
  if (p != s.size() || hh > 23 || mm > 59) return false;
  *offset_minutes = sign * (hh * 60 + mm);
  return true;
}

}  // namespace

void AppendIsoTime(fmt::memory_buffer& out, int64_t ms) {
  int64_t days = ms >= 0 ? ms / 86400000 : -((-ms + 86399999) / 86400000);
  int64_t rem = ms - days * 86400000;  // 0 .. 86399999
  int64_t y, m, d;
  CivilFromDays(days, &y, &m, &d);
  if (y < 0 || y > 9999) {  // outside ISO 8601's four-digit years: print ms
    AppendInt(out, ms);
    return;
  }
  AppendPadded(out, y, 4);
  out.push_back('-');
  AppendPadded(out, m, 2);
  out.push_back('-');
  AppendPadded(out, d, 2);
  out.push_back('T');
  AppendPadded(out, rem / 3600000, 2);
  out.push_back(':');
  AppendPadded(out, rem / 60000 % 60, 2);
  out.push_back(':');
  AppendPadded(out, rem / 1000 % 60, 2);
  out.push_back('.');
  AppendPadded(out, rem % 1000, 3);
  out.push_back('Z');
}

std::optional<int64_t> ParseIsoTime(std::string_view s) {
  size_t p = 0;
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, ms = 0;
  if (!Digits(s, &p, 4, &y) || !Expect(s, &p, '-') || !Digits(s, &p, 2, &mo) ||
      !Expect(s, &p, '-') || !Digits(s, &p, 2, &d))
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo)) return std::nullopt;
  if (p < s.size() && (s[p] == 'T' || s[p] == 't' || s[p] == ' ')) {
    ++p;
    if (!Digits(s, &p, 2, &h) || !Expect(s, &p, ':') || !Digits(s, &p, 2, &mi)) return std::nullopt;
    if (Expect(s, &p, ':')) {
      if (!Digits(s, &p, 2, &sec)) return std::nullopt;
      if (Expect(s, &p, '.') || Expect(s, &p, ',')) {
        int n = 0;
        int64_t frac = 0;
        while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
          if (n < 3) frac = frac * 10 + (s[p] - '0');
          ++n;
          ++p;
        }
        if (n == 0) return std::nullopt;
        for (int i = n; i < 3; ++i) frac *= 10;
        ms = frac;
      }
    }
    if (h > 23 || mi > 59 || sec > 60) return std::nullopt;
  }
  int64_t zone = 0;
  if (!ParseZone(s, p, &zone)) return std::nullopt;
  int64_t days = DaysFromCivil(y, mo, d);
  return ((days * 24 + h) * 60 + mi - zone) * 60000 + sec * 1000 + ms;
}

void AppendHex(fmt::memory_buffer& out, Bytes bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t old = out.size();
  out.resize(old + bytes.size() * 2);
  char* d = out.data() + old;
  for (std::byte b : bytes) {
    auto v = static_cast<unsigned char>(b);
    *d++ = kHex[v >> 4];
    *d++ = kHex[v & 15];
  }
}

Result<FormatString> FormatString::Parse(std::string_view spec) {
  FormatString f;
  std::string lit;
  auto flush_literal = [&] {
    if (lit.empty()) return;
    Op op{0, static_cast<uint32_t>(f.text_.size()), 0};
    f.text_ += lit;
    op.end = static_cast<uint32_t>(f.text_.size());
    f.ops_.push_back(op);
    lit.clear();
  };
  for (size_t i = 0; i < spec.size(); ++i) {
    char c = spec[i];
    if (c == '\\') {
      // Decode one escape with the shared rules.
      size_t len = i + 1 < spec.size() && spec[i + 1] == 'x' ? 4 : 2;
      auto r = cli::DecodeEscapesIn(spec, i, len, "-f");
      if (!r) return r.error();
      lit += *r;
      i += len - 1;
      continue;
    }
    if (c != '%') {
      lit.push_back(c);
      continue;
    }
    if (i + 1 >= spec.size())
      return Status(Code::kInvalidArgument, fmt::format("-f: trailing '%' at position {}", i));
    char t = spec[++i];
    if (t == '%') {
      lit.push_back('%');
      continue;
    }
    if (std::string_view("tpoTkKsShFxX").find(t) == std::string_view::npos)
      return Status(Code::kInvalidArgument,
                    fmt::format("-f: unknown token '%{}' at position {}", t, i - 1));
    flush_literal();
    f.ops_.push_back(Op{t});
    if (t == 'h') f.needs_headers_ = true;
  }
  flush_literal();
  return f;
}

namespace {

size_t OptionalSize(const std::optional<Bytes>& b, std::string_view null_text) {
  return b ? b->size() : null_text.size();
}

char* Put(char* d, std::string_view s) {
  if (s.empty()) return d;  // s.data() may be null
  std::memcpy(d, s.data(), s.size());
  return d + s.size();
}

char* PutInt(char* d, int64_t v) {
  fmt::format_int f(v);
  std::memcpy(d, f.data(), f.size());
  return d + f.size();
}

char* PutOptional(char* d, const std::optional<Bytes>& b, std::string_view null_text) {
  return b ? Put(d, AsText(*b)) : Put(d, null_text);
}

}  // namespace

// The most bytes one op can print for `m`.
size_t FormatString::Bound(const Op& op, const Message& m, std::string_view null_text) const {
  constexpr size_t kInt = 20, kIsoTime = 32;
  switch (op.token) {
    case 0:
      return op.end - op.begin;
    case 't':
      return m.topic.size();
    case 'k':
      return OptionalSize(m.key, null_text);
    case 's':
      return OptionalSize(m.value, null_text);
    case 'x':
      return m.value ? 2 * m.value->size() : null_text.size();
    case 'X':
      return m.key ? 2 * m.key->size() : null_text.size();
    case 'F':
      return kIsoTime;
    case 'h': {
      size_t n = 0;
      for (const Header& h : m.headers) n += h.key.size() + 2 + OptionalSize(h.value, null_text);
      return n;
    }
    default:
      return kInt;  // %p %o %T %K %S
  }
}

// Sizes every op first, then writes through a raw pointer into space
// reserved once: no capacity check per byte or per token.
void FormatString::Render(fmt::memory_buffer& out, const Message& m,
                          std::string_view null_text) const {
  size_t bound = 0;
  for (const Op& op : ops_) bound += Bound(op, m, null_text);
  size_t old = out.size();
  out.resize(old + bound);
  char* d = out.data() + old;
  for (const Op& op : ops_) {
    switch (op.token) {
      case 0:
        d = Put(d, std::string_view(text_.data() + op.begin, op.end - op.begin));
        break;
      case 't':
        d = Put(d, m.topic);
        break;
      case 'p':
        d = PutInt(d, m.partition);
        break;
      case 'o':
        d = PutInt(d, m.offset);
        break;
      case 'T':
        d = PutInt(d, m.timestamp);
        break;
      case 'k':
        d = PutOptional(d, m.key, null_text);
        break;
      case 's':
        d = PutOptional(d, m.value, null_text);
        break;
      case 'K':
        d = PutInt(d, m.key ? static_cast<int64_t>(m.key->size()) : -1);
        break;
      case 'S':
        d = PutInt(d, m.value ? static_cast<int64_t>(m.value->size()) : -1);
        break;
      case 'h': {
        bool first = true;
        for (const Header& h : m.headers) {
          if (!first) *d++ = ',';
          first = false;
          d = Put(d, h.key);
          *d++ = '=';
          d = PutOptional(d, h.value, null_text);
        }
        break;
      }
      default: {  // %F %x %X: through a small buffer, then copied
        fmt::memory_buffer tmp;
        if (op.token == 'F')
          AppendIsoTime(tmp, m.timestamp);
        else if (const auto& b = op.token == 'x' ? m.value : m.key)
          AppendHex(tmp, *b);
        else
          Append(tmp, null_text);
        d = Put(d, std::string_view(tmp.data(), tmp.size()));
      }
    }
  }
  out.resize(static_cast<size_t>(d - out.data()));
}

}  // namespace mq::fmtstr
