// The tools' byte-count flags (--batch-bytes, --max-batch-bytes, ...) read
// through liblog's one parser of sizes (mq/units.h): 1k, 64KiB, 1GiB.
#pragma once

#include <CLI/CLI.hpp>

namespace mq::cli {

// A CLI11 transform: a size with an optional unit becomes its number of
// bytes; anything else is a parse error naming the option (exit 64).
CLI::Validator SizeUnits();

}  // namespace mq::cli
