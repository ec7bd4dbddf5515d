// The deletion half of retention (format-spec/retention.md, R73, R76, R77),
// on a partition writer's view, under its writer lock.
#pragma once

#include <cstdint>

#include "mq/partition.h"
#include "storage/partition_view.h"

namespace mq {

// PartitionWriter::DeleteSegmentsBefore's work: the segments whose records
// are all below `offset` (never the active one, unless `how.roll_active`
// and `offset` is at or past the log end: then it is rolled first) leave
// the log. The new log start is published and, unless the partition keeps
// to the page cache, made durable (the state file fsynced) before any file
// is touched (R73); then each segment's files are renamed `.deleted` (R77)
// and the directory fsynced. A reader with a segment open reads it to its
// end; PurgeDeletedFiles unlinks the files later.
Status RetireSegmentsBefore(PartitionView* w, int64_t offset, const SegmentDeletion& how);

}  // namespace mq
