// mq-consume's flags, and what they turn into: print options, header
// filters, the partitions to read and their start positions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "dispatcher.h"
#include "group_admin.h"
#include "mq/status.h"
#include "mq/topic.h"
#include "pipeline.h"
#include "position.h"
#include "printer.h"

namespace mq::consume {

struct Flags {
  std::string dir;
  std::string topic;                // the first -t
  std::vector<std::string> topics;  // every -t: names, and patterns with -G (R64)
  std::vector<int32_t> partitions;
  std::vector<std::string> offsets;
  std::optional<uint64_t> count;
  bool exit_at_end = false;
  bool print_key = false;
  std::optional<std::string> key_delim, delim, format;
  bool null_delim = false, raw = false, json = false, null_text = false;
  std::vector<std::string> header_filters;
  bool skip_corrupt = false, quiet = false, verbose = false;
  uint32_t max_batch_bytes = 64u << 20;
  // Consumer groups: -G (group_run.h), and the group modes (group_admin.h).
  std::optional<std::string> group, member_id;
  std::optional<int64_t> session_timeout_ms;  // --session-timeout (needs --member-id)
  std::string reset = "earliest";
  bool at_most_once = false;
  int64_t commit_interval_ms = 1000;
  uint64_t commit_every = 100000;
  std::optional<int> ack_fd;
  // --exec CMD [ARG]... (taken off the command line before parsing: see
  // TakeExec) and the handler flags.
  std::vector<std::string> exec;
  bool exec_given = false;
  std::vector<std::string> exec_inline;  // --exec=X: refused
  std::optional<uint32_t> batch;
  std::optional<uint32_t> max_attempts;
  std::optional<uint32_t> retry_backoff_ms;
  std::optional<std::string> dlq;
  std::optional<int64_t> max_poll_interval_ms;
  std::optional<uint32_t> parallel;
  // --to-topic OUT (pipeline.h) and its --fsync.
  std::optional<std::string> to_topic;
  std::optional<std::string> fsync;
  AdminFlags admin;  // --list, --describe, --reset-offsets, --delete
};

void AddFlags(CLI::App& app, Flags* f);

// --exec takes the rest of the command line, as find -exec does (without a
// terminator): those arguments are CMD's, never mq-consume's. Moves them to
// `f` and shortens argc.
void TakeExec(int* argc, char** argv, Flags* f);

// --max-poll-interval's default (Kafka's max.poll.interval.ms).
constexpr int64_t kDefaultMaxPollIntervalMs = 300000;
// --parallel's largest N: a thread and a handler process each.
constexpr uint32_t kMaxParallel = 256;

// What the flags ask for, checked before the data directory is opened.
// Errors are usage errors (kInvalidArgument).
struct Settings {
  PrintOptions print;
  Positions positions;
  std::vector<HeaderFilter> header_filters;
  std::optional<HandlerOptions> handler;    // --exec
  std::optional<PipelineOptions> pipeline;  // --to-topic
};
Result<Settings> Resolve(const Flags& f);

// A group member of several topics, or of a topic pattern (-t repeated,
// -t ^REGEX: format-spec/group.md R64), rather than of one topic.
bool ReadsSeveralTopics(const Flags& f);

// Every partition of the topic, or the ones asked for (each must exist: a
// partition the topic does not have is a usage error, as in every tool).
Result<std::vector<int32_t>> ChoosePartitions(const Flags& f, const TopicConfig& config,
                                              const Positions& positions);

}  // namespace mq::consume
