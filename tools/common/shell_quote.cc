#include "shell_quote.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "escapes.h"

namespace mq::cli {
namespace {

bool IsAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Characters no POSIX shell treats specially anywhere in a word (`=` only
// matters before the command name, `%` and `@` only in some expansions
// that a bare word never triggers, `:` `,` `+` never).
bool IsBareSafe(char c) {
  if (IsAlnum(c)) return true;
  switch (c) {
    case '_':
    case '.':
    case '/':
    case '=':
    case ':':
    case ',':
    case '+':
    case '@':
    case '%':
    case '-':
      return true;
    default:
      return false;
  }
}

bool IsHostByte(char c) {
  return IsAlnum(c) || c == '.' || c == '_' || c == '@' || c == ':' || c == '-';
}

Status BadHost(std::string_view host, std::string_view why) {
  return Status(Code::kInvalidArgument, fmt::format("host '{}': {}", EscapeBytes(host), why));
}

}  // namespace

std::string ShellQuote(std::string_view word) {
  bool bare = !word.empty();
  for (char c : word) bare = bare && IsBareSafe(c);
  if (bare) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";  // close the quotes, an escaped quote, reopen
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& word : argv) {
    if (!out.empty()) out += ' ';
    out += ShellQuote(word);
  }
  return out;
}

Result<std::vector<std::string>> RshCommandWith(std::string_view rsh, std::string_view host,
                                                const std::vector<std::string>& remote_argv) {
  if (host.empty()) return BadHost(host, "empty");
  if (host.front() == '-') return BadHost(host, "starts with '-' (ssh would read an option)");
  for (size_t i = 0; i < host.size(); ++i) {
    if (!IsHostByte(host[i])) {
      return BadHost(host, fmt::format("byte {} is not one of [A-Za-z0-9._@:-]", i));
    }
    if (host[i] == '@' && i + 1 < host.size() && host[i + 1] == '-') {
      return BadHost(host, "'-' after '@' (ssh would read an option)");
    }
  }
  if (remote_argv.empty()) {
    return Status(Code::kInvalidArgument, "no remote command");
  }
  for (const std::string& word : remote_argv) {
    if (word.find('\0') != std::string::npos) {
      return Status(Code::kInvalidArgument,
                    fmt::format("remote argument '{}' holds a NUL byte", EscapeBytes(word)));
    }
  }
  std::vector<std::string> argv;
  size_t pos = 0;
  while (pos < rsh.size()) {
    const size_t start = rsh.find_first_not_of(" \t", pos);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(rsh.find_first_of(" \t", start), rsh.size());
    argv.emplace_back(rsh.substr(start, end - start));
    pos = end;
  }
  if (argv.empty()) return Status(Code::kInvalidArgument, "empty remote shell command (MQ_RSH)");
  argv.emplace_back(host);
  argv.push_back(ShellJoin(remote_argv));
  return argv;
}

Result<std::vector<std::string>> RshCommand(std::string_view host,
                                            const std::vector<std::string>& remote_argv) {
  const char* rsh = std::getenv("MQ_RSH");
  std::string_view chosen = rsh != nullptr ? std::string_view(rsh) : std::string_view();
  if (chosen.find_first_not_of(" \t") == std::string_view::npos) chosen = "ssh";
  return RshCommandWith(chosen, host, remote_argv);
}

}  // namespace mq::cli
