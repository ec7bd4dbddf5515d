// mq-produce's command line: the flags as given, and the settings they
// resolve to once checked (bad values and combinations are usage errors,
// exit 64, naming the flag).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq::produce {

struct Flags {
  std::string dir;
  std::string topic;
  std::optional<int32_t> partition;
  std::optional<std::string> key;
  std::optional<std::string> key_delimiter;
  std::optional<std::string> delimiter;
  bool nul = false;
  bool json = false;
  bool keep_partition = false;  // -J: the envelope's "partition" decides
  std::vector<std::string> headers;
  bool empty_is_null = false;
  std::string compression = "none";
  int zstd_level = 3;
  uint64_t batch_bytes = 16 << 10;
  std::optional<uint64_t> append_bytes;  // default: kOneAppendBytes or kSeveralAppendBytes (run.cc)
  int linger_ms = 0;
  std::string fsync = "none";
  std::string acks = "1";
  int64_t ack_timeout_ms = 30000;
  std::optional<std::string> producer_id;
  bool print_offsets = false;
  std::optional<uint64_t> max_message_bytes;
  bool create = false;
  std::optional<int32_t> partitions;
  std::optional<std::string> like;  // --create --like SRC: SRC's configuration
  std::vector<std::string> config;
  bool describe = false;
  bool quiet = false;
  bool verbose = false;
  std::vector<std::string> files;
};

// The flags, decoded.
struct Settings {
  std::string delimiter = "\n";
  std::optional<std::string> key_delimiter;
  std::vector<std::pair<std::string, std::string>> headers;
  Compression compression = Compression::kNone;
  Durability durability = Durability::kNone;
  int64_t flush_interval_ms = 1000;
  bool acks0 = false;
  bool acks_all = false;  // --acks all (or -1)
  std::vector<std::pair<std::string, std::string>> config;
  bool progress = false;  // -v, or stderr is a terminal (and not -q)
};

void AddFlags(CLI::App& app, Flags* flags);
// Checks values and combinations; errors name the flag (kInvalidArgument).
Result<Settings> Resolve(const Flags& flags);

}  // namespace mq::produce
