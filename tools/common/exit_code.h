// The exit status a tool ends with for a Status (sysexits(3), as every man
// page's EXIT STATUS lists them). liblog returns statuses; mapping them to a
// process's exit status is the tools' decision, made here once.
#pragma once

#include "mq/status.h"

namespace mq::cli {

// 0 for OK, 64 usage (kInvalidArgument), 65 data (kCorruption, kOutOfOrder,
// kDuplicate, kTooLarge, kUnsupported), 66 noinput (kNotFound), 69
// unavailable (kUnavailable), 70 software (kInternal), 71 oserr (kNoMemory),
// 74 ioerr (kIoError), 75 tempfail (kBusy, kNeedsRecovery, kFenced), 77
// noperm (kPermission); the replication outcomes sysexits(3) has no word for
// (mq-produce(1)): 79 kNotEnoughReplicas, 80 kNotEnoughReplicasAfterAppend,
// 81 kTimedOut.
int ExitCode(const Status& status);

}  // namespace mq::cli
