// Start and stop positions given with -o/--offset (kcat's words):
//   beginning | earliest      the log start
//   end | latest              the committed end at start-up (only new messages)
//   N                         absolute offset N
//   -N                        N messages before the end
//   s@MS | s@ISO | ISO        the first message with timestamp >= the time
//   e@MS | e@ISO              stop at the first message with timestamp >= the time
// A start prefixed with "P:" (e.g. "2:100") applies to partition P only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/consumer.h"
#include "mq/status.h"

namespace mq::consume {

struct Positions {
  std::optional<StartPosition> all;  // for every partition
  std::map<int32_t, StartPosition> per_partition;
  std::optional<int64_t> end_timestamp;  // e@

  // The start for `partition`: its own, else the common one, else `fallback`.
  StartPosition StartFor(int32_t partition, StartPosition fallback) const;
};

// A time as -o s@ takes it: milliseconds since the epoch, or an ISO 8601
// date-time (fmtstr::ParseIsoTime). nullopt if it is neither.
std::optional<int64_t> ParseTime(std::string_view s);

// Parses every -o value. Errors are kInvalidArgument naming the value.
Result<Positions> ParsePositions(const std::vector<std::string>& specs);

}  // namespace mq::consume
