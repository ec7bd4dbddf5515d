// R102 (format-spec/protocol.md): what a replica serves a follower before
// its server has the cluster state to answer as the leader.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "mq/replication.h"
#include "mq/status.h"

namespace mq {

// R102: a fetch answered from what `log` holds below its high watermark
// (committed: on every ISR member, never cut by a clean election; what a
// consumer of the replica reads), without the cluster state: no
// leadership or epoch check, no follower position recorded, no HW raised,
// no ISR change, no claim stored. The whole batches HandleFetch would read from
// the fetch offset (from the log start when that is above it, R92), up to
// request.max_bytes, cut before the first one holding an offset at or
// above min(HW, LEO); the response carries the log's bounds, that HW and
// the request's epoch. Only from a log holding the claim (R53) on the
// request's epoch of the running boot: the log the cluster state named
// leader in that epoch (R54), whose host did not restart since (R55).
// nullopt otherwise, or when no batch is left (the fetch offset at or past
// the HW, or the first batch reaches it): only the leader's answer
// (HandleFetch) will do. `buffer` as HandleFetch's (never in place).
Result<std::optional<FetchResponse>> HandleCommittedFetch(ReplicaLog& log,
                                                          const FetchRequest& request,
                                                          std::vector<std::byte>* buffer = nullptr);

}  // namespace mq
