// Shared command-line plumbing for the mq-* tools: flag spellings, exit
// codes (sysexits(3)), error reporting and a stdout writer that turns a
// closed pipe into a quiet exit 0.
#pragma once

#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "mq/status.h"

// CLI11 is declared here, not included: it is parsed only by the sources
// that build a command line (they include <CLI/CLI.hpp>; UsageFormatter is
// in cli_usage.h).
namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace mq::cli {

// sysexits(3), as documented in every man page's EXIT STATUS.
constexpr int kExitOk = 0;
constexpr int kExitProblems = 1;  // a check found problems (verify, --check)
constexpr int kExitUsage = 64;
constexpr int kExitDataErr = 65;
constexpr int kExitNoInput = 66;
constexpr int kExitUnavailable = 69;
constexpr int kExitSoftware = 70;
constexpr int kExitOsErr = 71;  // out of memory
constexpr int kExitCantCreate = 73;
constexpr int kExitIoErr = 74;
constexpr int kExitTempFail = 75;
constexpr int kExitNoPerm = 77;
constexpr int kExitConfig = 78;

// The program name used as the prefix of every diagnostic.
void SetProgramName(std::string name);
const std::string& ProgramName();

// Writes `text` to stderr (fd 2) with write(2). A failed write (a closed
// pipe, a closed descriptor, a full disk) is ignored: a diagnostic that
// cannot be shown never changes the exit status and never aborts. Every
// diagnostic of the tools goes through here, never through stdio.
void WriteStderr(std::string_view text);
// fmt::print(stderr, ...) through WriteStderr.
template <typename... Args>
void Eprint(fmt::format_string<Args...> f, Args&&... args) {
  WriteStderr(fmt::format(f, std::forward<Args>(args)...));
}
// Prints "<prog>: <message>" to stderr.
void Warn(std::string_view message);
// Prints the status to stderr and returns its exit code.
int Fail(const Status& status);

// Adds -C/--dir (env MQ_DIR) to `app`.
CLI::Option* AddDirOption(CLI::App& app, std::string* dir, bool required = true);
// Adds -V/--version (prints "<prog> <version>") and standard -h/--help.
void AddVersionFlag(CLI::App& app);

// Installs a UsageFormatter (cli_usage.h) showing `usage` (which must
// outlive `app`).
void UseUsage(CLI::App& app, const char* usage);

// Reports a usage error found after parsing: "<prog>: <message>", the
// first line of `usage` and a pointer to --help on stderr. Returns 64.
int UsageError(const char* usage, std::string_view message);

// Parses argv. Returns -1 when the program should go on, otherwise the exit
// code: 0 for --help/--version, 64 (usage) for any parse error, which is
// printed naming the argument.
int Parse(CLI::App& app, int argc, char** argv);

// Buffered writer to a file descriptor (stdout by default). A closed pipe
// (EPIPE) sets broken() and makes every later write a no-op: the tool then
// exits 0 quietly. Other write errors set failed().
class Output {
 public:
  explicit Output(int fd = 1, size_t buffer_bytes = 1 << 16);
  ~Output();
  void Write(std::span<const std::byte> bytes);
  void Write(std::string_view text);
  template <typename... Args>
  void Print(fmt::format_string<Args...> f, Args&&... args) {
    fmt::format_to(std::back_inserter(buf_), f, std::forward<Args>(args)...);
    if (buf_.size() >= limit_) Flush();
  }
  // Writes out what is buffered. Returns false on EPIPE or error.
  bool Flush();
  bool broken() const { return broken_; }
  bool failed() const { return failed_; }
  // Successful writes of a non-empty buffer so far: when it changes,
  // everything given to Write/Print before has reached the descriptor.
  uint64_t flushes() const { return flushes_; }
  // Marks the end of one record (a message) in what was written so far.
  void EndRecord() { ++records_pending_; }
  // Records whose last byte reached the descriptor: one whose write failed
  // (a closed pipe, a full disk) is not counted.
  uint64_t records_written() const { return records_written_; }
  // 0, or 74 after a write error other than EPIPE (message printed).
  int FinishExitCode();
  // Called before each write of a non-empty buffer (every Flush, and the
  // writes Write and Print make when the buffer is full): when it returns
  // false, the buffer is dropped unwritten (Flush returns false; neither
  // broken() nor failed() is set). Empty: every buffer is written.
  void set_before_write(std::function<bool()> gate) { before_write_ = std::move(gate); }
  // A write timeout (ms > 0) for a pipe or a socket (whose reader may stop
  // reading; a file, a terminal or a kernel without RWF_NOWAIT for it is
  // written as before): a Flush that has not written everything `ms` ms
  // after it started stops, drops the rest, and the output is stalled():
  // nothing more is written.
  void set_write_timeout(int64_t ms) { timeout_ms_ = ms; }
  bool stalled() const { return stalled_; }
  // Stalled after the write that stalled had put some of its buffer on
  // the descriptor (its reader may still read those bytes).
  bool stalled_partway() const { return stalled_partway_; }
  // Closes the descriptor (and the copy the write timeout may have opened),
  // so that its reader sees the end; nothing more is written.
  void Close();

 private:
  int fd_;
  size_t limit_;
  fmt::memory_buffer buf_;
  bool broken_ = false;
  bool failed_ = false;
  bool stalled_ = false;
  bool stalled_partway_ = false;
  int64_t timeout_ms_ = 0;
  // With a timeout, how writes avoid blocking: not known yet, plain
  // (blocking) writes, through nowait_fd_ (the pipe opened again with
  // O_NONBLOCK, a description of its own: fd_'s flags, shared with other
  // processes, are left alone), RWF_NOWAIT, or send(MSG_DONTWAIT).
  enum class NoWait : uint8_t { kUnknown, kPlain, kReopened, kRwf, kSend };
  NoWait nowait_ = NoWait::kUnknown;
  int nowait_fd_ = -1;
  ssize_t WriteNoWait(const char* p, size_t n);
  int errno_ = 0;
  uint64_t flushes_ = 0;
  uint64_t records_pending_ = 0;  // ended in buf_
  uint64_t records_written_ = 0;
  std::function<bool()> before_write_;
};

// Ignores SIGPIPE so a closed pipe shows up as EPIPE on write.
void IgnoreSigpipe();

// True when `fd` is a pipe whose reader has gone (`| head` finished): a
// follower blocked waiting for appends would otherwise notice only at its
// next write, which may never come. poll(2) without waiting; false for
// anything but a pipe with no reader (a file, a terminal, /dev/null).
bool OutputClosed(int fd = 1);

// For each of stdin, stdout and stderr that was closed when the program
// started, holds its number with /dev/null opened in the opposite direction
// (stdin write-only, stdout and stderr read-only): reads and writes on it
// still fail with EBADF as on a closed descriptor, and no file the tool
// opens later (a segment, the state file) can take its number and receive
// output. Call first in main.
void HoldStandardDescriptors();

// How many partitions a tool may keep open at once when each holds
// `per_partition` descriptors: first raises the soft open-file limit to the
// hard one, then shares out what the limit leaves after the descriptors
// already open, kSpareDescriptors more (for opening files in passing) and
// `reserved` more (for what the tool will hold besides its partitions).
// At least 1, at most kMaxOpenPartitions (which also bounds the memory open
// partitions hold).
constexpr size_t kSpareDescriptors = 16;
constexpr size_t kMaxOpenPartitions = 4096;
size_t OpenPartitionBudget(size_t per_partition, size_t reserved = 0);
// Raises the soft open-file limit to the hard one (where it is lower), for
// a tool whose descriptors grow with the partitions it handles.
void RaiseOpenFileLimit();
// Grows the process's descriptor table to hold descriptors 0 to n-1 now
// (at most the open-file limit). Call it before starting threads: the
// kernel grows the table of a multi-threaded process only after an RCU
// grace period, milliseconds each time it doubles (64, 128, ... 8192).
void ReserveDescriptors(size_t n);

// Before any thread starts: grows the heap by `bytes` (at most
// kMaxPreparedHeap) at once and keeps it, for a tool about to allocate that
// much in buffers of many sizes: buffers up to that size come from the heap
// (not from mappings of their own, faulted anew after every free), and the
// heap is not given back below twice `bytes`. Memory not touched stays
// unallocated; it is allocated a 4 KiB page at a time. Transparent huge
// pages are not asked for: on a virtual machine a fresh 2 MiB page may be
// memory the host has not backed yet, and zeroing it can take ten times as
// long (runs of mq-produce into 1,000 partitions: 0.095-0.21 s with them,
// 0.098-0.13 s without).
constexpr size_t kMaxPreparedHeap = 31 << 20;
void PrepareHeap(size_t bytes);

// Runs a tool's body. An allocation failure that escapes it (std::bad_alloc)
// prints "<prog>: out of memory" and returns 71 (EX_OSERR) instead of
// aborting.
int RunGuarded(const std::function<int()>& body);

}  // namespace mq::cli
