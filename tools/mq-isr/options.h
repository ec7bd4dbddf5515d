// mq-isr's command line: flags, the usage text (the man page's SYNOPSIS)
// and the checks CLI11 cannot express.
#pragma once

#include <optional>
#include <string>

#include "isr.h"

namespace mq::isr {

enum class Command : uint8_t {
  kCreate,
  kDescribe,
  kCheck,
  kElect,
  kAttach,
  kServe,
  kVerifyReplicas
};

struct Options {
  std::string cluster;  // --cluster or $MQ_CLUSTER
  Command command = Command::kCheck;
  std::optional<std::string> check_topic;  // also of --verify-replicas
  bool verify_json = false;                // --verify-replicas --json
  bool check_verify = true;                // --check without --no-verify
  CreateOptions create;                    // replica dirs made absolute
  DescribeOptions describe;
  ElectOptions elect;
  AttachOptions attach;
};

// Parses argv into `o`. Returns -1 when the program should go on, otherwise
// its exit status (0 after --help or --version, 64 for a usage error, which
// is printed).
int ParseOptions(int argc, char** argv, Options* o);

}  // namespace mq::isr
