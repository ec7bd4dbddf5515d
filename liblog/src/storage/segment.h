// The files of a partition directory (format-spec/segment.md §6, §9,
// producer.md §10.2): their names and the one listing of the directory.
// (Segment names themselves: SegmentBaseOffset, SegmentFileName in
// mq/segment.h; the reader of a segment's batches: batch_cursor.h.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// Base offsets of the `<20 digits>.log` files in `dir_fd`, ascending, listed
// through `fs` (null: the real file system). Other names are ignored (they
// are not segments). With `snapshots`, also fills it with the offsets of
// the producer snapshots (`<20 digits>.snapshot`, producer.md §10.2) found
// in the same listing, ascending.
// With `listing`, also tells which of the other files a writer's open reads
// are there (a writer holding the lock may take their absence from it
// instead of looking each one up: they are written under that lock).
struct PartitionListing {
  bool truncate_intent = false;   // truncate-to (segment.md R40)
  bool epoch_checkpoint = false;  // leader-epoch-checkpoint (replication.md §16.2)
};
Result<std::vector<int64_t>> ListSegments(int dir_fd, FileSystem* fs = nullptr,
                                          std::vector<int64_t>* snapshots = nullptr,
                                          PartitionListing* listing = nullptr);

// The number N of a file named `<20 decimal digits N><suffix>` (segment
// files, producer snapshots), or -1 for any other name.
int64_t NumberedFileOffset(const std::string& name, const char* suffix);

// Names of the temporary files a crashed writer may leave (`*.tmp`).
bool IsTempName(const std::string& name);

}  // namespace mq
