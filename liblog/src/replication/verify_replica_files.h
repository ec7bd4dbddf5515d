// --verify of a partition directory's checkpoint and replication files
// (format-spec/replication.md §16, §17), for VerifyPartition (verify.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "mq/status.h"

namespace mq {

// --verify of the partition directory `dir` (open as `dir_fd`): each
// checkpoint present is read and checked (R35, R36, R38, R56, R61; the
// partition a replication-offset checkpoint must name comes from the
// directory's name), and each replication file (R47, R53, R58, R60); a
// breach is a problem, a missing file none. Counts the files read. Both
// functions here read through `fs`.
Status VerifyReplicaCheckpoints(int dir_fd, const std::string& dir, std::vector<Problem>* problems,
                                VerifyStats* stats, FileSystem* fs);

// What --verify read of a partition's log, for the checks below.
struct LogFacts {
  int64_t log_end_offset = 0;
  std::vector<EpochEntry> implied_epochs;  // R37: one per batch whose epoch is above those before
  bool trusted = true;  // false: published before a reboot; the next writer repairs the tail
};
// --verify of the checkpoints against the log (each file already checked
// on its own by VerifyReplicaCheckpoints; one that does not decode is
// skipped here): a high watermark above the log end breaks R38; a
// leader-epoch checkpoint whose entries starting below the log end are
// not the ones the log implies breaks R37 (the first may start later than
// the first batch of its epoch: the log start moved into it). After a
// reboot (`trusted` false) both are needs-recovery problems: the next
// writer cuts the tail and lowers the high watermark.
Status VerifyReplicaCheckpointsAgainstLog(int dir_fd, const std::string& dir, const LogFacts& log,
                                          std::vector<Problem>* problems, FileSystem* fs);

}  // namespace mq
