// A producer-id registry's files (format-spec/producer.md §10.3, P8): the
// `<name>.id` files and the `next-producer-id` counter of a `producers/`
// directory, as a root keeps one (ProducerIdentity, mq/producer_id.h) and a
// cluster does for its replicated topics (FileClusterStore::ProducerId,
// cluster.md §18.6, P10).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// The id of `name` in the registry directory `dir_fd` (`registry` is its
// path, for messages): the one `<name>.id` holds, else the next one,
// allocated from `next-producer-id` (absent: `first`; never below `first`):
// the counter is written first, then `<name>.id`, each atomically, so a
// crash between the two writes wastes an id and never gives one to two
// names. The caller holds the registry's lock (one allocation at a time).
// A registry file that is not one decimal number >= 0 and a newline, at
// most 32 bytes, is kCorruption naming it (P8); all file access is through
// `fs`.
Result<int64_t> LookUpProducerId(FileSystem* fs, int dir_fd, const std::string& registry,
                                 std::string_view name, int64_t first);

}  // namespace mq
