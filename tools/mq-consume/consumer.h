// The consume loop: reads the chosen partitions of a topic from their start
// positions up to their committed ends, in offset order within each
// partition and round-robin by batch across partitions, then stops (-e, -c,
// e@) or follows new appends like tail -f.
#pragma once

#include <csignal>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "dispatcher.h"
#include "mq/partition.h"
#include "mq/topic.h"
#include "position.h"
#include "printer.h"
#include "waiter.h"

namespace mq::consume {

struct ConsumeOptions {
  std::string topic;
  std::vector<int32_t> partitions;
  Positions positions;
  std::optional<uint64_t> count;      // -c: stop after this many messages
  bool exit_at_end = false;           // -e: stop at the ends captured at start
  bool skip_corrupt = false;          // report corrupt batches and go on
  bool quiet = false;
  bool verbose = false;
  std::vector<HeaderFilter> header_filters;
  DecodeLimits limits;
  OffsetPolicy offsets = OffsetPolicy::kContiguous;  // from the topic's cleanup.policy
  // Partitions whose reader is kept open at once (kDescriptorsPerReader
  // descriptors each); the least recently read one is closed to open
  // another, and opened again at its next offset when its turn comes.
  size_t max_open = 1024;
};

// Descriptors an open reader holds (directory, state file, segment), plus
// one while a segment is opened.
constexpr size_t kDescriptorsPerReader = 4;
// With more partitions than this, or than half of max_open, following polls
// the partitions every kPollMs instead of waiting on each in a thread.
constexpr size_t kMaxWaiterThreads = 256;
constexpr int kPollMs = 1000;

class Consumer {
 public:
  Consumer(ConsumeOptions options, Printer* printer, cli::Output* out);
  ~Consumer();
  // Opens a reader per partition of `dir` and seeks to the start positions.
  Status Open(const DataDir& dir);
  // Consumes until a stop condition, a closed output, an error, or
  // `*interrupted` becoming non-zero (set by a signal handler; checked at
  // least every 250 ms while following).
  Status Run(const volatile std::sig_atomic_t* interrupted);
  // --exec: messages go to `dispatcher` instead of the printer.
  void set_dispatcher(Dispatcher* dispatcher) { dispatcher_ = dispatcher; }
  uint64_t delivered() const { return delivered_; }
  // --skip-corrupt: corrupt batches skipped, and offsets they hid.
  uint64_t skipped_batches() const { return skipped_batches_; }
  uint64_t skipped_offsets() const { return skipped_offsets_; }

 private:
  struct Cursor;
  enum class Step : uint8_t { kProgress, kIdle };
  Status OpenCursor(Cursor& c, bool at_start);
  Status Reopen(Cursor& c);
  void Touch(Cursor& c);
  void Release(Cursor& c);
  void MakeRoom();
  Result<Step> ReadBatch(Cursor& c);
  Status Deliver(Cursor& c, const BatchView& batch);
  Status OnBadBatch(Cursor& c, Status s, bool from_reader);
  Status WaitForData();
  void ReportWarnings(Cursor& c);

  ConsumeOptions options_;
  Printer* printer_;
  Dispatcher* dispatcher_ = nullptr;
  cli::Output* out_;
  std::vector<std::unique_ptr<Cursor>> cursors_;
  std::list<Cursor*> open_;  // cursors with an open reader, most recently read first
  std::vector<std::string> dirs_;
  std::vector<std::byte> scratch_;  // decompressed records, reused
  std::vector<Header> headers_;
  uint64_t delivered_ = 0;
  uint64_t skipped_batches_ = 0;
  uint64_t skipped_offsets_ = 0;
  bool stop_ = false;
  std::unique_ptr<MultiWaiter> waiter_;  // follow mode, several partitions
};

}  // namespace mq::consume
