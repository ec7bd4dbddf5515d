// mq-isr's commands over the cluster state (mq/cluster.h,
// format-spec/cluster.md): create, describe, --check, elect.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "mq/topic.h"

namespace mq::isr {

struct CreateOptions {
  std::string topic;
  int32_t partitions = 1;
  std::vector<std::string> replica_dirs;  // absolute
  int32_t min_insync_replicas = 1;
  int64_t replica_lag_time_max_ms = 30000;
  TopicConfig config;  // -X keys for each root's .conf (cluster= and replica.id= added)
};

struct DescribeOptions {
  std::optional<std::string> topic;
  bool under_replicated = false;
  bool under_min_isr = false;
  bool at_min_isr = false;
  bool unavailable = false;
  bool json = false;
  bool any_filter() const { return under_replicated || under_min_isr || at_min_isr || unavailable; }
};

enum class ElectMode : uint8_t { kUnavailableOnly, kUnclean, kPreferred };

struct ElectOptions {
  std::optional<std::string> topic;
  std::optional<int32_t> partition;
  ElectMode mode = ElectMode::kUnavailableOnly;
};

// Exit status of --check when a partition is under-replicated, under its
// min.insync.replicas or unavailable (cli-conventions: a check found problems).
constexpr int kExitCheckProblems = cli::kExitProblems;

// Each returns the exit status (messages printed).
int Create(const std::string& cluster, const CreateOptions& options, cli::Output& out);
int Describe(const std::string& cluster, const DescribeOptions& options, cli::Output& out);
int Check(const std::string& cluster, const std::optional<std::string>& topic, cli::Output& out);
int Elect(const std::string& cluster, const ElectOptions& options, cli::Output& out);

// `path` made absolute against the working directory and normalized
// lexically (no ".", "..", "//", trailing "/"), as the cluster state records it.
std::string AbsolutePath(const std::string& path);

}  // namespace mq::isr
