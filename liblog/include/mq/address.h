// Addresses of replica roots and cluster directories (format-spec/cluster.md
// R43). The cluster state records them (mq/cluster.h); a topic's
// configuration names its cluster by one (mq/topic.h, `cluster=`).
#pragma once

#include <string>
#include <string_view>

#include "mq/status.h"

namespace mq {

// Where a replica root or a cluster directory is (R43): `path` on this
// host, or `host:path` on another, reached through the wire protocol
// (format-spec/protocol.md).
struct Address {
  std::string host;  // empty: this host
  std::string path;  // absolute
  std::string ToString() const;
};
// kInvalidArgument saying why `text` is no address; `what` names it.
Result<Address> ParseAddress(std::string_view text, std::string_view what);
// A host as an address names it: [user@]name of letters, digits, '.', '_'
// and '-', not starting with '-', at most 255 bytes (R43).
Status CheckHost(std::string_view host, std::string_view what);

// An absolute path as the cluster state records it (R43): starts with '/',
// no empty, "." or ".." component, no trailing '/', no control byte, at most
// 4095 bytes. kInvalidArgument saying why; `what` names it.
Status CheckAbsoluteDir(std::string_view dir, std::string_view what);

}  // namespace mq
