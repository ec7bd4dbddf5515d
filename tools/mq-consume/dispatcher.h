// mq-consume --exec: hands each delivered message (or --batch of them) to
// a handler process, retries a failed handler with exponential backoff,
// and after the last attempt appends the message to the dead-letter topic
// (--dlq) or stops. Behaviour and the names of the headers and variables:
// man/man1/mq-consume.1, HANDLERS.
//
// Serially (parallel 1) a handler runs on the caller's thread, inside Add()
// or Flush(). With parallel N > 1 (mq-consume -G --parallel N) messages
// are queued per partition and N worker threads run them: one unit (a
// message, or a --batch) of a partition at a time, in offset order, at
// most N at once; the caller takes what ended with TakeDone(). Workers
// live until Close(), so a handler never outlives the thread that spawned
// it (PR_SET_PDEATHSIG follows the thread).
#pragma once

#include <atomic>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "handler.h"
#include "mq/batch.h"
#include "mq/group.h"
#include "mq/lock.h"
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
// With -G: the group whose member dead-lettered it. A dead letter is
// looked for again only by runs of its own group (without -G: by runs
// without one), so groups sharing a dead-letter topic each get theirs.
constexpr std::string_view kDlqGroupHeader = "mq.dlq.group";

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

// A group member of several topics (format-spec/group.md R64) hands the
// messages of each (topic, partition) to its own lane: lane = topic number
// * kLanesPerTopic + partition, where the topic number is the order in which
// the member started reading the topic (TopicTable). The first topic's lanes
// are its partitions, so a member of one topic is numbered as before. Every
// per-partition promise of a dispatcher (one unit at a time, in offset
// order; handler locks; dead letters; a pipeline's producer) holds per lane.
constexpr int32_t kLanesPerTopic = 1 << 14;  // more than a topic's 10000 partitions
// A lane's partition never reaches the next topic's lanes: every partition
// number a topic may have (0 to kMaxGroupPartition, 9999: layout.md §2's
// 10000 partitions, R16 and R30; group.cc asserts they agree) is below
// kLanesPerTopic.
static_assert(kLanesPerTopic > kMaxGroupPartition,
              "kLanesPerTopic must exceed the last partition number a topic may have");
// Topic numbers 0 to kMaxTopicNumber: lanes stay positive int32 values.
constexpr int32_t kMaxTopicNumber = INT32_MAX / kLanesPerTopic - 1;
constexpr int32_t LaneOf(int32_t topic_number, int32_t partition) {
  return topic_number * kLanesPerTopic + partition;
}
constexpr int32_t LanePartition(int32_t lane) { return lane % kLanesPerTopic; }
constexpr int32_t LaneTopic(int32_t lane) { return lane / kLanesPerTopic; }

// The topics of a member's lanes, by topic number; read by handler threads
// while the member's thread adds topics a pattern matches (hence the lock).
class TopicTable {
 public:
  TopicTable() = default;
  explicit TopicTable(std::string first) { names_.push_back(std::move(first)); }
  // The number of `topic`, added if new; kInvalidArgument past
  // kMaxTopicNumber.
  Result<int32_t> Add(const std::string& topic) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == topic) return static_cast<int32_t>(i);
    if (names_.size() > static_cast<size_t>(kMaxTopicNumber))
      return Status(Code::kInvalidArgument, "a group member reads at most " +
                                                std::to_string(kMaxTopicNumber + 1) +
                                                " topics over its life");
    names_.push_back(topic);
    return static_cast<int32_t>(names_.size() - 1);
  }
  // The topic of `lane` ("" if none).
  std::string TopicOf(int32_t lane) const {
    std::lock_guard<std::mutex> lk(mu_);
    const auto i = static_cast<size_t>(LaneTopic(lane));
    return i < names_.size() ? names_[i] : std::string();
  }
  // The number of `topic`, if it has one.
  std::optional<int32_t> Find(std::string_view topic) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == topic) return static_cast<int32_t>(i);
    return std::nullopt;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> names_;
};

// mq-consume --to-topic (pipeline.h): a handler is a transform whose
// standard output is captured and handed here. Acquire and Release are
// called on the caller's thread, the others on the thread that handles the
// message (with --parallel, a worker): never two at once for one
// partition, and none of a partition between its Release and next Acquire
// (Cancel comes first).
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // A group member took `partition`, reading from `start`: finds what an
  // earlier owner appended (format-spec/pipeline.md, E5). kBusy: another
  // process holds the partition's producer id (E1): the member lets the
  // partition go and takes it again at a later poll.
  virtual Status Acquire(int32_t partition, int64_t start) = 0;
  // It let `partition` go.
  virtual void Release(int32_t partition) = 0;
  // Before the transform runs: true when every output of the message is
  // appended already (it is not run again, E6).
  virtual Result<bool> Complete(int32_t partition, int64_t offset) = 0;
  // Some of its outputs may be appended: it is completed, never
  // dead-lettered (E9).
  virtual bool Started(int32_t partition, int64_t offset) const = 0;
  // The transform exited 0 with `output`: appends the message's outputs.
  virtual Status Deliver(int32_t partition, int64_t offset, int64_t timestamp,
                         std::string_view output) = 0;
};

struct HandlerOptions {
  std::vector<std::string> command;  // --exec CMD [ARG]...
  std::optional<uint32_t> batch;     // --batch N: JSON Lines on stdin
  uint32_t max_attempts = 3;         // --max-attempts
  uint32_t retry_backoff_ms = 100;   // --retry-backoff: first wait, doubled each retry
  uint32_t max_backoff_ms = 10000;   // the doubling stops here
  std::optional<std::string> dlq;    // --dlq TOPIC
  std::optional<std::string> group;  // -G: named by each dead letter (mq.dlq.group)
  bool quiet = false;
  int kill_grace_ms = handler::kKillGraceMs;
  // Pending --batch messages of all partitions are handed over once they
  // hold this many bytes, full or not.
  size_t max_pending_bytes = 16u << 20;
  // --max-poll-interval (group members): a handler run still going after
  // this many ms is stuck: its process group is killed and the run stops
  // with kExitHandlerStuck. 0: no limit.
  int64_t max_run_ms = 0;
  // --at-most-once (a group member that commits a batch before its
  // handlers run): SIGINT and SIGTERM are not passed on to a running
  // handler, which finishes (bounded by max_run_ms), so that its message,
  // committed ahead, is handled; a unit not started, or cut short while
  // waiting to retry, is handed back (first_unstarted). A handler that
  // died of a signal is not run again (it may have done its work): its
  // messages fail for good (dead-lettered with --dlq).
  bool at_most_once = false;
  // A lock each handler run of a partition holds, inheriting its
  // descriptor (a group member's handler lock of it: the partition is not
  // taken over before the handler is gone), taken before the run and
  // dropped after it. Unset: none. Called on the thread that runs the unit
  // (a worker's with --parallel).
  std::function<Result<FileLock>(int32_t partition)> handler_lock;
  // --parallel N: handler runs of different partitions at once (1: one at
  // a time, on the caller's thread).
  uint32_t parallel = 1;
  // --to-topic: the handler's standard output goes here (no --batch: a
  // unit is one message). Not owned.
  OutputSink* sink = nullptr;
};

// Descriptors an open partition writer holds: its directory, writer lock,
// state file, and the active segment's log, offset index and time index;
// two more while it is opened (as mq-produce's kDescriptorsPerPartition).
constexpr size_t kDescriptorsPerWriter = 8;
// --dlq: dead-letter partitions whose writer is kept open at once;
// appending to one more closes the least recently used (dead letters are
// rare, and each is fsynced anyway).
constexpr size_t kMaxDeadLetterWriters = 4;

// Descriptors the handler runs that may go at once and the dead-letter
// writers of `options` hold at most, which a run counts out of its
// open-file budget before sharing the rest among partitions.
size_t ReservedDescriptors(const HandlerOptions& options);

// Every `partition` a Dispatcher takes or reports is a lane (LaneOf): with
// one topic, the partition itself.
class Dispatcher {
 public:
  // `topic`: topic number 0 ("": none yet; AddTopic adds them).
  Dispatcher(HandlerOptions options, std::string topic,
             const volatile std::sig_atomic_t* interrupted);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // With --dlq: opens the dead-letter topic, creating it like `source`
  // (same configuration) if it does not exist, and says so on stderr.
  // With parallel > 1, starts the workers.
  Status Open(const DataDir& dir, const TopicConfig& source);
  // A group member of several topics reads one more: its number (lanes
  // LaneOf(number, p)). Dead letters of it already in the dead-letter topic
  // are looked for again.
  Result<int32_t> AddTopic(const std::string& topic);
  const TopicTable& topics() const { return topics_; }
  // Before Open, in place of HandlerOptions' (a group member's, once the
  // topic table they need exists).
  void set_sink(OutputSink* sink) { options_.sink = sink; }
  void set_handler_lock(std::function<Result<FileLock>(int32_t)> lock) {
    options_.handler_lock = std::move(lock);
  }

  // Takes one delivered message. Serially, without --batch, its handler
  // runs now; with --batch it is kept (copied) until its partition has N
  // pending. In parallel, it is queued (a copy) for its partition's
  // worker; while 16 MB of messages wait this blocks until some handler
  // run ends. `leader_epoch` is its batch's, reported back in Done.
  // `generation`: the caller's count of cuts of the partition's log so far
  // (a group member's), reported back with the unit that ends with this
  // message (Done, Handled).
  Status Add(int32_t partition, bool log_append_time, const RecordView& record,
             std::span<const Header> headers, int32_t leader_epoch = -1, uint32_t generation = 0);
  // Runs (serially) or queues (in parallel) the handlers of every pending
  // batch (the consumer caught up, or stops).
  Status Flush();
  // Stops the workers (see Stop) and closes the dead-letter partitions.
  Status Close();

  // Serially: messages of `partition` kept for a --batch that has not run
  // yet. In parallel also: queued, running, or ended and not taken yet.
  bool has_pending(int32_t partition) const;
  // Forgets them (a group member releasing the partition: its next owner
  // hands them over again). Serially only (in parallel: Yield).
  void Drop(int32_t partition);
  // The first message of `partition` given to Add() whose handler never
  // started (pending for a --batch, queued, dropped, or passed over once
  // the run stopped), or that of a unit a stop or a revoke cut short
  // (while it waited to retry, or a split before it): it and every later
  // one given were not handed out, nor handled.
  // nullopt when every message given was (or none was). Handed back by an
  // at-most-once member that lets the partition go (HandBackCommit).
  std::optional<int64_t> first_unstarted(int32_t partition) const;
  // Serially: one past the last message of `partition` whose handler run
  // ended handled (exit 0, or dead-lettered), with its batch's leader
  // epoch; units run in offset order, so every message given before it
  // was handled. What a member hands over once a run stopped (an
  // interrupt, a poison message): nothing past it. nullopt: none yet.
  struct Handled {
    int64_t end = 0;
    int32_t leader_epoch = -1;
    uint32_t generation = 0;  // Add()'s, of the unit's last message
  };
  std::optional<Handled> handled_through(int32_t partition) const;

  // ---- parallel (options.parallel > 1) ----------------------------------
  // A unit (a message, or a --batch) whose handling ended.
  struct Done {
    int32_t partition = 0;
    int64_t next_offset = 0;    // one past the unit's last message
    uint64_t messages = 0;      // in the unit
    int32_t leader_epoch = -1;  // of the batch holding its last message
    int64_t dead_letters = 0;   // its messages appended to (or found in) the DLQ
    bool handled = false;       // every message handled (exit 0 or dead letter)
    // One past the last message handled: next_offset when handled; for a
    // split batch cut short, the part handled alone (UnitHandledEnd, R72);
    // -1: none.
    int64_t handled_end = -1;
    uint32_t generation = 0;  // Add()'s, of the unit's last message
    Status status;            // why the run stopped (exit_code() says how)
  };
  bool parallel() const { return options_.parallel > 1; }
  // The units that ended since the last call, in the order they ended (per
  // partition: offset order); waits up to `timeout_ms` for one when none
  // has (0: no wait).
  std::vector<Done> TakeDone(int timeout_ms);
  // A unit is queued or running, or a --batch is being collected.
  bool busy() const;
  // `partition` moves to another owner: its queued and pending messages
  // are dropped, a unit waiting to retry gives up (unhandled; a split
  // batch with the messages it handled alone, R72), and its
  // running handler is waited for, as serially (bounded by
  // --max-poll-interval), so that a handler that finished is committed
  // before the partition moves, never run again by its next owner; returns
  // once none of its handlers runs. What ended meanwhile is in the next
  // TakeDone().
  void Yield(int32_t partition);
  // Hands every pending batch over and waits until every queued unit
  // ended, or the run stopped or was interrupted.
  Status Drain();
  // No unit starts any more; queued ones are dropped; returns once the
  // running ones ended (an interrupt kills them, but at most once; others
  // finish).
  void Stop();
  // The partition moves to another owner: what this dispatcher remembers
  // of its dead letters may go stale, so it is read again when needed; and
  // what it was given starts afresh (first_unstarted).
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
  uint64_t handled() const { return handled_; }  // exit 0, or dead-lettered
  uint64_t dead_lettered() const { return dead_lettered_; }
  uint64_t retries() const { return retries_; }
  OutputSink* sink() const { return options_.sink; }

 private:
  struct Stored;   // an owned copy of a message
  struct Message;  // a view of one
  struct Attempted {
    handler::Outcome outcome;
    uint32_t attempts = 0;
  };
  // One unit's handling.
  struct Ctl {
    int inherit_fd = -1;
    const std::atomic<bool>* cancel = nullptr;  // its partition is being given up
    int64_t dead_letters = 0;
    bool cut = false;  // interrupted or cancelled before it was all handled
    // A split batch: one past the last message handled alone (-1: none).
    int64_t handled_alone_end = -1;
  };
  // Parallel: messages waiting for a worker, and what runs, per partition.
  struct Unit {
    int32_t leader_epoch = -1;
    uint32_t generation = 0;
    size_t bytes = 0;
    std::vector<Stored> messages;
  };
  struct Lane {
    std::deque<Unit> queued;
    bool running = false;
    size_t outstanding = 0;           // units queued, running, or ended and not taken
    std::atomic<bool> cancel{false};  // Yield: no further attempt starts
  };
  // Offsets of one partition's messages given to Add() and started.
  struct Progress {
    int64_t first_given = -1;
    int64_t given_end = -1;    // one past the last given
    int64_t started_end = -1;  // one past the last unit started
    int64_t handled_end = -1;  // serially: one past the last unit handled
    int32_t handled_epoch = -1;
    uint32_t handled_generation = 0;
  };
  void MarkStarted(int32_t partition, int64_t end);
  // A unit cut short (a stop or a revoke, before its handler ran or while
  // it waited to retry): its messages from `from` on are not handled and
  // none runs; they count as not started (first_unstarted).
  void MarkUnstarted(int32_t partition, int64_t from);
  // A unit ended with status `s` after `ctl`: one past the last of its
  // messages handled (UnitHandledEnd), and the unhandled rest of a unit
  // cut short marked not started.
  std::optional<int64_t> Ended(int32_t partition, std::span<const Message> messages,
                               const Status& s, const Ctl& ctl);
  // Takes options_.handler_lock's lock for one unit into `*lock`, and
  // has its handlers inherit it.
  Status LockForUnit(int32_t partition, FileLock* lock, Ctl* ctl);
  Status HandleUnit(int32_t partition, std::span<const Message> messages, Ctl& ctl);
  Result<Attempted> Attempt(int32_t partition, std::span<const Message> messages, Ctl& ctl);
  Status DeadLetter(int32_t partition, const Message& m, const Attempted& a, Ctl& ctl);
  // --to-topic: message `m` was handled already (dead-lettered, E8, or
  // its outputs complete): counted as handled.
  Result<bool> HandledAlready(int32_t partition, const Message& m, Ctl& ctl);
  // The handler's command and environment (`spec`) and input for a unit
  // of lane `lane` (a --batch's envelopes in `input`): the bytes its
  // standard input gets.
  std::string_view PrepareRun(int32_t lane, std::span<const Message> messages, const Ctl& ctl,
                              handler::Spec* spec, fmt::memory_buffer* input) const;
  // A handler that made no progress for --max-poll-interval (`where`,
  // a unit of `messages` messages): the member gives its partitions up.
  Status HandlerStuck(const std::string& where, size_t messages) const;
  // Message `m` as a dead letter: its record with the mq.dlq.* headers, in
  // a batch.
  Result<std::vector<std::byte>> DeadLetterBatch(int32_t partition, const Message& m,
                                                 const Attempted& a) const;
  // The writer of dead-letter partition `dp`, opened (the least recently
  // used one closed past kMaxDeadLetterWriters); dlq_mu_ held.
  Result<PartitionWriter*> DeadLetterWriter(int32_t dp);
  Status ScanDeadLetters(int32_t dlq_partition);
  // --to-topic with --dlq: the message is in the dead-letter topic already.
  Result<bool> DeadAlready(int32_t partition, int64_t offset);
  Status FlushPartition(int32_t partition);
  // Serially: handles a unit now.
  Status HandleNow(int32_t partition, std::span<const Message> messages, int32_t leader_epoch,
                   uint32_t generation);
  // Parallel: queues a unit, waiting for room first.
  void Enqueue(int32_t partition, std::vector<Stored> messages, int32_t leader_epoch,
               uint32_t generation);
  void Work();                         // a worker thread
  Lane* NextLane(int32_t* partition);  // mu_ held: a lane to run, round-robin
  void SetExit(int code);              // the first stop's exit code wins
  bool SleepMs(uint32_t ms, const Ctl& ctl);
  // At most once, a handler that died of a signal (a SIGTERM or SIGKILL
  // sent to it, a crash of its own) may have done its work: it is not run
  // again, neither retried nor split; its messages fail for good.
  bool NotRunAgain(const handler::Outcome& o) const;  // false when interrupted or cancelled
  bool interrupted() const { return interrupted_ && *interrupted_; }
  bool stopped(const Ctl& ctl) const {
    return interrupted() || (ctl.cancel != nullptr && ctl.cancel->load());
  }

  // "topic T partition P" of a lane, in messages.
  std::string Where(int32_t lane) const;

  HandlerOptions options_;
  TopicTable topics_;
  const volatile std::sig_atomic_t* interrupted_;
  std::vector<std::string> base_env_;
  std::atomic<int> exit_code_{0};
  std::atomic<uint64_t> handled_{0}, dead_lettered_{0}, retries_{0};
  // --batch
  std::unordered_map<int32_t, std::vector<Stored>> pending_;
  std::unordered_map<int32_t, int32_t> pending_epoch_;        // of each batch's last message
  std::unordered_map<int32_t, uint32_t> pending_generation_;  // likewise
  size_t pending_bytes_ = 0;
  // parallel: mu_ guards what follows it, up to workers_.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers: a unit to run, or shutdown
  std::condition_variable done_cv_;  // a unit ended or started (room freed)
  std::map<int32_t, Lane> lanes_;
  std::vector<Done> done_;
  size_t queued_bytes_ = 0;
  size_t running_ = 0;
  int32_t next_lane_ = 0;
  bool stopping_ = false;
  bool shutdown_ = false;
  std::vector<std::thread> workers_;
  // --dlq: dlq_mu_ guards what follows (workers dead-letter concurrently).
  std::mutex dlq_mu_;
  std::optional<DataDir> dir_;
  std::optional<TopicConfig> dlq_config_;
  std::vector<std::unique_ptr<PartitionWriter>> dlq_writers_;
  std::list<int32_t> dlq_open_;  // partitions with a writer, most recent first
  std::vector<bool> dlq_scanned_;
  // Source offsets of the topics read already in the DLQ, by lane.
  std::unordered_map<int32_t, std::unordered_set<int64_t>> dead_;
  std::unordered_map<int32_t, int64_t> dead_counts_;  // TakeDeadLetters
  // first_unstarted: given_mu_ guards progress_ (workers start units).
  mutable std::mutex given_mu_;
  std::unordered_map<int32_t, Progress> progress_;
};

}  // namespace mq::consume
