// ExitCode (tools/common/exit_code.h): the exit status every tool ends with
// for a status, as the man pages' EXIT STATUS sections list them.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "exit_code.h"

using mq::Code;
using mq::Status;
using mq::cli::ExitCode;

TEST_CASE("exit code: each status code has its sysexits(3) or mq-produce(1) exit status") {
  const std::vector<std::pair<Code, int>> table = {
      {Code::kInvalidArgument, 64},
      {Code::kCorruption, 65},
      {Code::kOutOfOrder, 65},
      {Code::kDuplicate, 65},
      {Code::kTooLarge, 65},
      {Code::kUnsupported, 65},
      {Code::kNotFound, 66},
      {Code::kUnavailable, 69},
      {Code::kInternal, 70},
      {Code::kNoMemory, 71},
      {Code::kIoError, 74},
      {Code::kBusy, 75},
      {Code::kNeedsRecovery, 75},
      {Code::kFenced, 75},
      {Code::kPermission, 77},
      {Code::kNotEnoughReplicas, 79},
      {Code::kNotEnoughReplicasAfterAppend, 80},
      {Code::kTimedOut, 81},
  };
  // Every code but kOk is in the table once.
  REQUIRE(table.size() == static_cast<size_t>(Code::kTimedOut));
  for (const auto& [code, exit] : table) {
    INFO("code " << static_cast<int>(code));
    CHECK(ExitCode(Status(code, "x")) == exit);
  }
  CHECK(ExitCode(Status::Ok()) == 0);
  CHECK(ExitCode(Status::Corruption("f", 7, "R4", "bad")) == 65);
}
