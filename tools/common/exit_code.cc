#include "exit_code.h"

#include "cli.h"

namespace mq::cli {

int ExitCode(const Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return kExitOk;
    case Code::kInvalidArgument:
      return kExitUsage;
    case Code::kCorruption:
      return kExitDataErr;
    case Code::kOutOfOrder:
      return kExitDataErr;
    case Code::kDuplicate:
      return kExitDataErr;
    case Code::kTooLarge:
      return kExitDataErr;
    case Code::kUnsupported:
      return kExitDataErr;
    case Code::kNotFound:
      return kExitNoInput;
    case Code::kInternal:
      return kExitSoftware;
    case Code::kNoMemory:
      return kExitOsErr;
    case Code::kIoError:
      return kExitIoErr;
    case Code::kBusy:
      return kExitTempFail;
    case Code::kPermission:
      return kExitNoPerm;
    case Code::kNeedsRecovery:
      return kExitTempFail;  // run a writer, then retry
    case Code::kFenced:
      return kExitTempFail;  // retry with the new leader
    case Code::kUnavailable:
      return kExitUnavailable;  // nothing appended
    // Replication outcomes sysexits(3) has no word for (mq-produce(1)):
    case Code::kNotEnoughReplicas:
      return 79;  // refused, nothing appended
    case Code::kNotEnoughReplicasAfterAppend:
      return 80;  // appended, outcome unknown
    case Code::kTimedOut:
      return 81;  // appended, outcome unknown
  }
  return kExitSoftware;
}

}  // namespace mq::cli
