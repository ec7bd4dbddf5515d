// The tools' byte-count flags (--batch-bytes, --max-batch-bytes, ...) and
// millisecond flags (--linger-ms, --commit-interval, ...) read through
// liblog's one parser of units (mq/units.h): 1k, 64KiB, 1GiB; 500ms, 2s, 7d.
#pragma once

#include <CLI/CLI.hpp>

namespace mq::cli {

// A CLI11 transform: a size with an optional unit becomes its number of
// bytes; anything else is a parse error naming the option (exit 64).
CLI::Validator SizeUnits();

// A CLI11 transform: a duration with an optional unit (ms, s, m, h, d, w;
// none: milliseconds) becomes its number of milliseconds; anything else is a
// parse error naming the option (exit 64).
CLI::Validator DurationUnits();

}  // namespace mq::cli
