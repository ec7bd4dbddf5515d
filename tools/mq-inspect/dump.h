// The two things mq-inspect does with a path: dump it (by file suffix, as
// kafka-dump-log does) or verify it (a file or a partition directory).
// Both return the file's exit status: 0, 65 when the data breaks a rule, or
// the status code of an error that stopped the read (66 missing, 74 I/O).
#pragma once

#include <string>

#include "mq/batch.h"
#include "mq/topic.h"
#include "printer.h"

namespace mq::inspect {

int DumpFile(const std::string& path, const PrintOptions& options, const DecodeLimits& limits,
             Printer* printer);

// --verify of one path: a data directory, a partition directory, a segment
// file, or (with a data directory) a topic or TOPIC-N. A path that is none
// of these is a usage error (64).
int VerifyPath(const std::string& path, const DecodeLimits& limits, Printer* printer,
               const std::optional<std::string>& data_dir);

// The limits for reading `path`: a partition directory `<DIR>/<TOPIC>-<N>`
// (or a file in one) whose topic has a readable .conf raises `limits` to
// what the topic accepts (max.message.bytes); any other path keeps them.
DecodeLimits LimitsForPath(const std::string& path, const DecodeLimits& limits);

}  // namespace mq::inspect
