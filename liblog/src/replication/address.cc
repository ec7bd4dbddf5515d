// Addresses of replica roots and cluster directories (mq/address.h, R43).
#include "mq/address.h"

#include <cctype>

#include <fmt/format.h>

#include "format/format.h"
#include "io/shown.h"

namespace mq {

Result<Address> ParseAddress(std::string_view text, std::string_view what) {
  Address a;
  const size_t colon = text.find(':');
  const size_t slash = text.find('/');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon < slash)) {
    a.host = std::string(text.substr(0, colon));
    MQ_RETURN_IF_ERROR(CheckHost(a.host, what));
    text.remove_prefix(colon + 1);
  }
  MQ_RETURN_IF_ERROR(CheckAbsoluteDir(text, what));
  a.path = std::string(text);
  return a;
}

std::string Address::ToString() const { return host.empty() ? path : host + ":" + path; }

Status CheckHost(std::string_view host, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: host \"{}\": {} (R43)", what, Shown(host), why));
  };
  if (host.empty()) return bad("empty");
  if (host.size() > format::kMaxHostBytes)
    return bad(fmt::format("longer than {} bytes", format::kMaxHostBytes));
  // [user@]name, each part of letters, digits, '.', '_' and '-', not
  // starting with '-' (ssh would take it for an option).
  const size_t at = host.find('@');
  for (std::string_view part :
       {host.substr(0, at == std::string_view::npos ? host.size() : at),
        at == std::string_view::npos ? std::string_view("x") : host.substr(at + 1)}) {
    if (part.empty()) return bad("an empty user or host name");
    if (part[0] == '-') return bad("starts with '-'");
    for (char c : part)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
        return bad("holds a byte other than letters, digits, '.', '_', '-' and one '@'");
  }
  return Status::Ok();
}

Status CheckAbsoluteDir(std::string_view dir, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{} \"{}\": {} (R43)", what, Shown(dir), why));
  };
  if (dir.empty() || dir[0] != '/') return bad("not an absolute path");
  if (dir.size() > format::kMaxClusterDirBytes)
    return bad(fmt::format("longer than {} bytes", format::kMaxClusterDirBytes));
  if (dir.size() == 1) return bad("the root directory cannot be a replica or a cluster");
  if (dir.back() == '/') return bad("ends in '/'");
  for (char c : dir)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("holds a control byte");
  size_t start = 1;
  while (start <= dir.size()) {
    size_t slash = dir.find('/', start);
    if (slash == std::string_view::npos) slash = dir.size();
    const std::string_view part = dir.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..")
      return bad("has an empty, \".\" or \"..\" component");
    start = slash + 1;
  }
  return Status::Ok();
}

}  // namespace mq
