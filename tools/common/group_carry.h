// Group offsets follow a partition's leader (format-spec/group.md §14.3,
// replication.md §17.6): what a root holds for a partition, and making
// another root hold it too. On one host mq-replicate does both; across
// hosts the leader's `mq-replicate --serve` reads (the CarryState message,
// format-spec/protocol.md) and the follower applies.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mq/file.h"
#include "mq/status.h"
#include "mq/wire.h"

namespace mq {

// Every group of `root` with a committed offset for topic-partition.
Result<std::vector<wire::CarriedOffset>> ReadGroupOffsets(const std::string& root,
                                                          const std::string& topic,
                                                          int32_t partition);
// Moves each group's offset in `root` forward to the one given (never back,
// whatever a member of `root` commits meanwhile: group.md §14.3); a group
// it does not hold yet is created. `fs`: the file system of the groups
// (null: the real one).
Status ApplyGroupOffsets(const std::string& root, std::span<const wire::CarriedOffset> offsets,
                         FileSystem* fs = nullptr);

}  // namespace mq
