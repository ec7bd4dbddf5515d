// mq-consume --exec: hands each delivered message (or --batch of them) to
// a handler process, retries a failed handler with exponential backoff,
// and after the last attempt appends the message to the dead-letter topic
// (--dlq) or stops. Behaviour and the names of the headers and variables:
// man/man1/mq-consume.1, HANDLERS.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "handler.h"
#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/topic.h"

namespace mq::consume {

// Headers of a dead letter, after the message's own (format: mq-consume(1)).
constexpr std::string_view kDlqTopicHeader = "mq.dlq.topic";
constexpr std::string_view kDlqPartitionHeader = "mq.dlq.partition";
constexpr std::string_view kDlqOffsetHeader = "mq.dlq.offset";
constexpr std::string_view kDlqAttemptsHeader = "mq.dlq.attempts";
constexpr std::string_view kDlqExitHeader = "mq.dlq.exit";
constexpr std::string_view kDlqStderrHeader = "mq.dlq.stderr";

// Exit status of a run stopped by a message its handler failed on every
// attempt without --dlq: GNU xargs' status for a command that failed.
constexpr int kExitHandlerFailed = 123;
// The command could not be run at all, as the shell reports it.
constexpr int kExitCannotRun = 126;
constexpr int kExitNotFound = 127;
// A group member whose handler run outlasted --max-poll-interval gave up
// its partitions (sysexits' EX_TEMPFAIL: the message is handed over again
// by whoever owns its partition next).
constexpr int kExitHandlerStuck = 75;

struct HandlerOptions {
  std::vector<std::string> command;     // --exec CMD [ARG]...
  std::optional<uint32_t> batch;        // --batch N: JSON Lines on stdin
  uint32_t max_attempts = 3;            // --max-attempts
  uint32_t retry_backoff_ms = 100;      // --retry-backoff: first wait, doubled each retry
  uint32_t max_backoff_ms = 10000;      // the doubling stops here
  std::optional<std::string> dlq;       // --dlq TOPIC
  bool quiet = false;
  int kill_grace_ms = handler::kKillGraceMs;
  // Pending --batch messages of all partitions are handed over once they
  // hold this many bytes, full or not.
  size_t max_pending_bytes = 16u << 20;
  // --max-poll-interval (group members): a handler run still going after
  // this many ms is stuck: its process group is killed and the run stops
  // with kExitHandlerStuck. 0: no limit.
  int64_t max_run_ms = 0;
  // A descriptor each handler of a partition inherits (a group member's
  // ownership lock of it), or -1. Unset: none.
  std::function<int(int32_t partition)> inherit_fd;
};

class Dispatcher {
 public:
  Dispatcher(HandlerOptions options, std::string topic,
             const volatile std::sig_atomic_t* interrupted);
  ~Dispatcher();

  // With --dlq: opens the dead-letter topic, creating it like `source`
  // (same configuration) if it does not exist, and says so on stderr.
  Status Open(const DataDir& dir, const TopicConfig& source);

  // Takes one delivered message. Without --batch its handler runs now;
  // with --batch it is kept (copied) until its partition has N pending.
  Status Add(int32_t partition, bool log_append_time, const RecordView& record,
             std::span<const Header> headers);
  // Runs the handlers of every pending batch (the consumer caught up, or
  // stops).
  Status Flush();
  // Closes the dead-letter partitions.
  Status Close();

  // Messages of `partition` kept for a --batch that has not run yet.
  bool has_pending(int32_t partition) const;
  // Forgets them (a group member releasing the partition: its next owner
  // hands them over again).
  void Drop(int32_t partition);
  // The partition moves to another owner: what this dispatcher remembers
  // of its dead letters may go stale, so it is read again when needed.
  void Forget(int32_t partition);
  // Dead letters of `partition` (appended, or found already appended by an
  // earlier run) since the last call.
  int64_t TakeDeadLetters(int32_t partition);
  // Every handler run so far ended as it should: no stop (exit_code()),
  // no interrupt. Then every message given to Add() is either pending or
  // handled (exit 0, or dead-lettered).
  bool healthy() const { return exit_code_ == 0 && !interrupted(); }

  // Non-zero when a run stopped on a handler: kExitHandlerFailed,
  // kExitCannotRun or kExitNotFound (the Status says why).
  int exit_code() const { return exit_code_; }
  uint64_t handled() const { return handled_; }        // exit 0, or dead-lettered
  uint64_t dead_lettered() const { return dead_lettered_; }
  uint64_t retries() const { return retries_; }

 private:
  struct Stored;   // an owned copy of a message
  struct Message;  // a view of one
  struct Attempted {
    handler::Outcome outcome;
    uint32_t attempts = 0;
  };
  Status HandleUnit(int32_t partition, std::span<const Message> messages);
  Result<Attempted> Attempt(int32_t partition, std::span<const Message> messages);
  Status DeadLetter(int32_t partition, const Message& m, const Attempted& a);
  Status ScanDeadLetters(int32_t dlq_partition);
  Status FlushPartition(int32_t partition);
  bool SleepMs(uint32_t ms);  // false when interrupted
  bool interrupted() const { return interrupted_ && *interrupted_; }

  HandlerOptions options_;
  std::string topic_;
  const volatile std::sig_atomic_t* interrupted_;
  std::vector<std::string> base_env_;
  int exit_code_ = 0;
  uint64_t handled_ = 0, dead_lettered_ = 0, retries_ = 0;
  // --batch
  std::unordered_map<int32_t, std::vector<Stored>> pending_;
  size_t pending_bytes_ = 0;
  // --dlq
  std::optional<DataDir> dir_;
  std::optional<TopicConfig> dlq_config_;
  std::vector<std::unique_ptr<PartitionWriter>> dlq_writers_;
  std::vector<bool> dlq_scanned_;
  // Source offsets of this topic already in the DLQ, by source partition.
  std::unordered_map<int32_t, std::unordered_set<int64_t>> dead_;
  std::unordered_map<int32_t, int64_t> dead_counts_;  // TakeDeadLetters
};

}  // namespace mq::consume
