// Waits until any of several partitions has new committed messages, or was
// rewritten (truncated) since the consumer's reader positioned
// (Consumer::WaitForAppend).
//
// A futex can only be waited on one at a time, so each partition gets one
// thread, with its own PartitionReader, blocked in WaitForAppend(); the
// first to see its committed end move wakes the consumer's thread through a
// condition variable. Reading stays on the consumer's thread, so the order
// records are handed out in is decided in one place (round-robin by batch).
// With a single partition the consumer waits on the futex itself and no
// thread is started.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "mq/partition.h"

namespace mq {

// A partition without a log yet (nobody has written to it) has no state
// file to wait on: it is looked for again every kUnbornPollMs.
constexpr int kUnbornPollMs = 50;

class MultiWaiter {
 public:
  // Starts one thread per partition directory.
  // The threads' readers read as the consumer's do (`options`: the
  // high watermark bounds a replicated topic's).
  static Result<std::unique_ptr<MultiWaiter>> Start(const std::vector<std::string>& dirs,
                                                    const ReadOptions& options);
  ~MultiWaiter();  // stops and joins the threads (each within ~100 ms)
  MultiWaiter(const MultiWaiter&) = delete;
  MultiWaiter& operator=(const MultiWaiter&) = delete;

  // Blocks until some partition i with known[i] >= 0 has a committed end
  // past known[i], or a rewrites counter (PartitionReader::rewrites()) other
  // than rewrites[i] when that is given (true, once for each rewrite), or
  // `timeout_ms` passes (false). known.size() == rewrites.size() ==
  // dirs.size().
  bool Wait(std::span<const int64_t> known, std::span<const std::optional<uint32_t>> rewrites,
            int timeout_ms);

 private:
  explicit MultiWaiter(const ReadOptions& options) : options_(options) {}
  bool WaitSlice(size_t i, int64_t known, std::optional<uint32_t> rewrites, uint64_t round);
  void Run(size_t i);

  struct Slot {
    std::string dir;
    std::unique_ptr<PartitionReader> reader;  // null until the partition has a log
    int64_t known = -1;
    std::optional<uint32_t> rewrites;  // the consumer's reader's; none: not watched
  };
  ReadOptions options_;
  std::mutex mu_;
  std::condition_variable wake_consumer_;
  std::condition_variable wake_threads_;
  uint64_t round_ = 0;  // bumped by each Wait(): threads pick up new ends
  bool fired_ = false;  // some partition moved during this round
  bool stop_ = false;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;
};

}  // namespace mq
