// The two things mq-inspect does with a path: dump it (by file suffix, as
// kafka-dump-log does) or verify it (a file or a partition directory).
// Both return the file's exit status: 0, 65 when the data breaks a rule, or
// the status code of an error that stopped the read (66 missing, 74 I/O).
#pragma once

#include <string>

#include "mq/batch.h"
#include "printer.h"

namespace mq::inspect {

int DumpFile(const std::string& path, const PrintOptions& options, const DecodeLimits& limits,
             Printer* printer);

int VerifyPath(const std::string& path, const DecodeLimits& limits, Printer* printer);

}  // namespace mq::inspect
