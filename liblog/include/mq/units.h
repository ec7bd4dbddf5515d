// Durations and sizes as people write them (`7d`, `500ms`, `1GiB`, `64k`):
// the one parser of units in mq, used by every topic configuration key
// that is a duration (`*.ms`) or a size (`*.bytes`) and by the tools'
// flags that take one (format-spec/layout.md §2.3).
#pragma once

#include <cstdint>
#include <string_view>

#include "mq/status.h"

namespace mq {

// A duration in milliseconds: a decimal integer with an optional unit,
// `ms`, `s`, `m` (minutes), `h`, `d` or `w` (no unit: ms). kInvalidArgument
// naming `what` (when not empty) when it is not one, overflows int64, or lies outside
// [min, max] (the message names the range).
Result<int64_t> ParseDurationMs(std::string_view text, std::string_view what, int64_t min,
                                int64_t max);
// A size in bytes: a decimal integer with an optional unit, `B`, `k`/`K`/
// `KB`/`KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`, all powers of
// 1024 (no unit: bytes), in any case (`1kib`, `1KB`). Errors as
// ParseDurationMs.
Result<int64_t> ParseSizeBytes(std::string_view text, std::string_view what, int64_t min,
                               int64_t max);

}  // namespace mq
