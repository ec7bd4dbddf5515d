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
// The returned base offsets include the partition's tiered segments
// (retention.md §21, R96): those whose `.log` is in the directory its tier
// pointer names (R93) and not in `dir_fd`; `listing` tells which they are
// and holds that directory open, so that readers open each segment's files
// where they are (DirOf). A pointer whose directory cannot be opened is an
// error (kUnavailable), never a partition without those segments.
struct PartitionListing {
  bool truncate_intent = false;   // truncate-to (segment.md R40)
  bool epoch_checkpoint = false;  // leader-epoch-checkpoint (replication.md §16.2)
  std::vector<int64_t> tiered;    // R96: bases read from the tier directory, ascending
  std::string tier_dir;           // R93: the pointer's directory ("" without a pointer)
  UniqueFd tier_fd;               // that directory, open
  bool is_tiered(int64_t base) const;
  // The directory holding segment `base`'s files: the tier's or `local_fd`.
  int DirOf(int64_t base, int local_fd) const;
};
Result<std::vector<int64_t>> ListSegments(int dir_fd, FileSystem* fs = nullptr,
                                          std::vector<int64_t>* snapshots = nullptr,
                                          PartitionListing* listing = nullptr);

// R93: the tier directory the partition's pointer names (nullopt without a
// pointer); kCorruption naming the file when it breaks R93.
Result<std::optional<std::string>> ReadTierPointer(int dir_fd, FileSystem* fs = nullptr);

// The number N of a file named `<20 decimal digits N><suffix>` (segment
// files, producer snapshots), or -1 for any other name.
int64_t NumberedFileOffset(const std::string& name, const char* suffix);

// Names of the temporary files a crashed writer may leave (`*.tmp`).
bool IsTempName(const std::string& name);

}  // namespace mq
