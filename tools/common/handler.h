// Handler processes: runs a command (argv, no shell) with bytes on its
// standard input, passes its standard error through while keeping the last
// lines, and waits for it without ever blocking forever on a pipe.
//
// Every handler runs in a process group of its own, dies with mq (it gets
// PR_SET_PDEATHSIG SIGKILL), and inherits only standard input (a pipe from
// mq), standard output (mq's, unchanged), standard error (a pipe mq copies
// to its own) and, optionally, one descriptor the caller names (a
// partition's lock descriptor). When the handler exits, whatever it left
// running in its process group is killed: a handler never outlives its
// invocation.
//
// PR_SET_PDEATHSIG fires when the *thread* that spawned the handler ends:
// spawn from a thread that lives as long as the handler's owner (mq-consume
// spawns from its main thread, or with --parallel from worker threads that
// end only after their last handler was reaped). Grandchildren get no PDEATHSIG: when mq is
// SIGKILLed they live on in the handler's group until they exit, holding
// whatever they inherited (with groups, the partition's lock descriptor, so
// the partition stays taken until every holder is gone).
//
// The message environment (MQ_TOPIC, MQ_PARTITION, ...) is documented in
// mq-consume(1), HANDLERS.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/batch.h"
#include "mq/status.h"

namespace mq::handler {

// What a handler keeps of its standard error for a report: at most the last
// kTailLines lines and kTailBytes bytes.
constexpr size_t kTailLines = 20;
constexpr size_t kTailBytes = 4096;
// After SIGTERM to a handler's process group, how long before SIGKILL.
constexpr int kKillGraceMs = 5000;
// Descriptors a running handler takes from its parent: both ends of its
// standard input, output and error pipes while it starts, then one end of
// each and its pidfd.
constexpr size_t kDescriptorsPerRun = 6;

struct Spec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH if it has no '/'
  std::vector<std::string> env;   // the whole environment, "NAME=value" each
  int inherit_fd = -1;            // >= 3: kept open (without FD_CLOEXEC) in the handler
  // Standard output on a pipe mq reads into Outcome::output (a transform,
  // mq-consume --to-topic) instead of mq's own. More than
  // max_output_bytes is the handler's failure (kOutputTooLarge).
  bool capture_stdout = false;
  size_t max_output_bytes = 64u << 20;
};

// How a handler ended.
struct Outcome {
  enum class Kind : uint8_t {
    kExited,          // `code` is the exit status
    kSignaled,        // `code` is the signal that killed it
    kExecFailed,      // the command could not be run: `code` is execve's errno
    kInterrupted,     // mq was told to stop: the group was killed (TERM, then KILL)
    kTimedOut,        // still running at the deadline: the group was killed (TERM, then KILL)
    kOutputTooLarge,  // exited, but wrote more than Spec::max_output_bytes to its output
  };
  Kind kind = Kind::kExited;
  int code = 0;
  std::string stderr_tail;  // the last lines of its standard error
  std::string output;       // Spec::capture_stdout: all of its standard output

  bool ok() const { return kind == Kind::kExited && code == 0; }
  // "exit status 3", "killed by SIGKILL", "cannot run: No such file or directory"
  std::string Describe() const;
  // For the mq.dlq.exit header: "3", "SIGKILL", "126" (exec failed).
  std::string StatusText() const;
};

// "SIGKILL" for 9; "SIG<n>" for a number without a name.
std::string SignalName(int sig);

// One running handler. Spawn() starts it; Communicate() feeds its input
// and waits for it; the destructor kills its group if it still runs.
class Process {
 public:
  // Starts `spec.argv` with standard input and standard error on pipes.
  // kNotFound/kPermission never come from here: a command that cannot be
  // executed is reported by Communicate() as kExecFailed. Errors are OS
  // failures (pipe, clone): kIoError or kNoMemory.
  static Result<Process> Spawn(const Spec& spec);
  Process(Process&&) noexcept;
  Process& operator=(Process&&) noexcept;
  ~Process();

  pid_t pid() const { return pid_; }
  // The handler's process group (its pid).
  pid_t pgid() const { return pid_; }

  // Writes `input` to the handler's standard input and closes it, copies
  // its standard error to fd 2 while keeping the tail, and waits for it to
  // exit. A handler that exits (or closes its input) before reading all of
  // `input` is not an error (EPIPE is ignored). When `*interrupted` becomes
  // non-zero (checked at least every 100 ms) the group is killed (SIGTERM,
  // SIGKILL after `grace_ms`) and the outcome is kInterrupted; likewise,
  // when it still runs `timeout_ms` after this call began (0: no limit),
  // with the outcome kTimedOut. `*cancel` becoming true (checked as often)
  // kills the group the same way, with the outcome kInterrupted: another
  // thread giving the handler's work up. A handler found exited when one of
  // these is seen has the outcome of its exit: it ran to its end; so has
  // one that exits 0 by itself after the SIGTERM of an interrupt or a
  // cancel, within the grace (it finished its work when asked to stop; a
  // handler past its deadline stays kTimedOut). Whatever
  // way the handler ended,
  // its process group is SIGKILLed before this returns (while the handler
  // is still unreaped, so the group id cannot have been reused).
  Result<Outcome> Communicate(std::string_view input, const volatile std::sig_atomic_t* interrupted,
                              int grace_ms = kKillGraceMs, int64_t timeout_ms = 0,
                              const std::atomic<bool>* cancel = nullptr);

  // Kills the handler's process group: SIGTERM, then SIGKILL once the
  // handler has exited or `grace_ms` passed; waits for the handler. Safe
  // to call on a finished process (does nothing).
  void KillGroup(int grace_ms = kKillGraceMs);

 private:
  Process() = default;
  void Close();
  bool WaitExit(int timeout_ms);  // true once the handler has exited (not reaped)
  void Reap();

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stderr_fd_ = -1;
  int stdout_fd_ = -1;  // Spec::capture_stdout
  size_t max_output_ = 0;
  int pidfd_ = -1;
  int exec_errno_ = 0;
  bool exited_ = false;  // exited, not reaped yet
  int wait_status_ = 0;
};

// Runs one handler to completion: Spawn, then Communicate.
Result<Outcome> Run(const Spec& spec, std::string_view input,
                    const volatile std::sig_atomic_t* interrupted, int grace_ms = kKillGraceMs,
                    int64_t timeout_ms = 0, const std::atomic<bool>* cancel = nullptr);

// Keeps the last kTailLines lines / kTailBytes bytes of a byte stream.
class Tail {
 public:
  void Add(std::string_view chunk);
  std::string Take();

 private:
  std::string buf_;
};

// ---- the message environment --------------------------------------------

// Every variable the message environment may set; removed from the base
// environment so that a value inherited from mq's own environment never
// reaches a handler that should not have it.
extern const std::vector<std::string_view> kMessageVariables;

// The environment of mq without kMessageVariables.
std::vector<std::string> BaseEnvironment();

struct MessageInfo {
  std::string_view topic;
  int32_t partition = 0;
  int64_t offset = 0;
  int64_t timestamp = 0;
  std::optional<Bytes> key;
  bool null_value = false;
  std::span<const Header> headers;
};

// Appends one message's variables to `env`: MQ_TOPIC, MQ_PARTITION,
// MQ_OFFSET, MQ_MESSAGE_ID (topic/partition/offset), MQ_TIMESTAMP, MQ_KEY
// (text: valid UTF-8 without NUL) or MQ_KEY_B64 (anything else; neither
// for a null key), MQ_HEADERS (the -J envelope's header array) and
// MQ_VALUE_NULL=1 for a null value.
void AppendMessageEnv(std::vector<std::string>* env, const MessageInfo& m);

// Appends a batch's variables: MQ_TOPIC, MQ_PARTITION, MQ_OFFSET and
// MQ_MESSAGE_ID of the first message, MQ_LAST_OFFSET, MQ_COUNT.
void AppendBatchEnv(std::vector<std::string>* env, std::string_view topic, int32_t partition,
                    int64_t first_offset, int64_t last_offset, size_t count);

// "topic/partition/offset".
std::string MessageId(std::string_view topic, int32_t partition, int64_t offset);

}  // namespace mq::handler
