// Text read from a file or given on a command line as an error message
// shows it (the cluster state, R41-R46, and addresses, R43): printable ASCII
// as it is, any other byte as \xNN, cut after 40 bytes ("..." then).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace mq {

inline std::string Shown(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                   : fmt::format("\\x{:02x}", c);
  }
  if (s.size() > 40) out += "...";
  return out;
}

}  // namespace mq
