// Verification (mq/partition.h: VerifyPartition, VerifyForLeadership,
// FindLogDamage) reading through the FileSystem seam `fs` its caller
// passes (nullptr: the real file system), as the writer and the reader
// read through theirs: every file verify opens, maps, lists or stats. The
// repair of a follower's log (RepairFollowerLog) passes its LogConfig's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mq/file.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

Status VerifyPartition(const std::string& dir, const DecodeLimits& limits,
                       std::vector<Problem>* problems, OffsetPolicy offsets, VerifyStats* stats,
                       FileSystem* fs);
Status VerifyForLeadership(const std::string& dir, const DecodeLimits& limits, FileSystem* fs);
Result<std::optional<LogDamage>> FindLogDamage(const std::string& dir, const DecodeLimits& limits,
                                               FileSystem* fs);

}  // namespace mq
