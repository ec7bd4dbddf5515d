// Recovery of a partition when its writer opens it (format-spec/segment.md
// §12), and whenever a writer finds the state file invalid (a writer died
// inside a publication): an interrupted truncation completed first (R40),
// the fast open of a log whose committed end was published on this boot
// (R27), else the log validated from the recovery point, the state file
// rebuilt (R24), the high watermark lowered (R38), a lost tail recorded
// (R59) and the producer table rebuilt. Kafka's LogLoader.
//
// Called under the partition's writer lock, with `view->state` open.
#pragma once

#include "mq/partition.h"
#include "mq/status.h"
#include "storage/partition_view.h"

namespace mq {

struct LoadedLog {
  // Whether the listing made under the lock found the leader epochs'
  // checkpoint (or a truncation changed it): a writer that stamps no
  // epoch loads none when it did not.
  bool checkpoint_listed = true;
};

// Recovers the log in `view->dir` and fills `view` (fields, segments,
// active segment, producer table) and publishes it. `recreated`: the state
// file was missing and has just been created. Repairs go to `report`.
Result<LoadedLog> LoadLog(PartitionView* view, RecoveryReport* report, bool recreated);

// What a writer's open does under the lock: the state file opened (created
// when missing), LoadLog, and the leader epochs loaded when the writer
// stamps an epoch or the listing found a checkpoint.
Status OpenLog(PartitionView* view, RecoveryReport* report);

// Under the lock, before every operation of a writer: brings `view` up to
// the committed state. A state file published since the view's last look
// is followed (PartitionView::Follow: the tail another writer appended, or
// the log it rewrote); one found invalid (a writer died inside a
// publication) has the log loaded again (LoadLog); bytes past the
// committed end, an append that never returned, are cut.
Status CatchUp(PartitionView* view);

}  // namespace mq
