// The producing half of mq-produce: partitions messages, builds batches
// per partition, appends them in groups, and (with a producer id) numbers
// them so a re-run of the same input appends only what is missing.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq::cli {
class Output;
}

namespace mq::produce {

struct ProducerOptions {
  std::string topic;
  int32_t partitions = 1;
  std::optional<int32_t> partition;  // -p: every message goes there
  size_t batch_bytes = 16 << 10;     // a batch is finished when it would pass this
  size_t append_bytes = 4 << 20;     // queued messages are appended once they reach this
  Compression compression = Compression::kNone;
  int zstd_level = 3;
  LogConfig log;
  int64_t producer_id = -1;          // >= 0: idempotent, epoch 0
  bool print_offsets = false;        // "partition offset" per message after its append
  bool quiet = false;                // no recovery notes on stderr
  // Partitions kept open at once (each holds kDescriptorsPerPartition
  // descriptors); the least recently used one is closed to open another.
  size_t max_open = 1024;
};

// Descriptors an open partition holds: its directory, writer lock, state
// file, and the active segment's log, offset index and time index; two more
// while it is opened (directory listing, snapshot).
constexpr size_t kDescriptorsPerPartition = 8;

struct Message {
  int64_t timestamp = 0;
  std::optional<Bytes> key;
  std::optional<Bytes> value;
  std::span<const Header> headers;
  std::optional<int32_t> partition;  // this partition, whatever the key (--keep-partition)
};

struct ProducerStats {
  uint64_t messages = 0;   // appended (or found already appended by the writer)
  uint64_t bytes = 0;      // key + value bytes of those
  uint64_t batches = 0;
  uint64_t appends = 0;
  uint64_t skipped = 0;    // already in the log from an earlier run (producer id)
  uint64_t duplicates = 0; // batches the writer found already appended
  std::vector<uint64_t> per_partition;  // messages per partition
};

class Producer {
 public:
  // Opens nothing yet: partitions are opened on first use. With a producer
  // id, asks every partition for the id's last sequence first.
  static Result<std::unique_ptr<Producer>> Open(const DataDir& dir, ProducerOptions options,
                                                cli::Output* out);
  ~Producer();

  // Queues one message; appends when enough is queued. A message that
  // earlier run already appended (same producer id, same position in the
  // input) is skipped.
  Status Send(const Message& message);
  // True when messages are queued but not yet appended.
  bool pending() const { return queued_messages_ > 0; }
  // Finishes every open batch and appends everything queued; with
  // print_offsets, prints their offsets in input order.
  Status Flush();
  // Flush, then close every open partition (fsync unless page-cache
  // durability).
  Status Close();

  const ProducerStats& stats() const { return stats_; }

 private:
  struct PartitionState;
  Producer(const DataDir& dir, ProducerOptions options, cli::Output* out);
  int32_t Choose(const Message& m);
  Status FinishBatch(int32_t p);
  Result<PartitionWriter*> Writer(int32_t p);
  Status CloseLeastRecent();

  DataDir dir_;
  ProducerOptions options_;
  cli::Output* out_;
  std::vector<PartitionState> parts_;
  std::list<int32_t> open_;    // partitions with an open writer, most recent first
  uint64_t index_ = 0;         // messages seen so far (including skipped)
  int32_t sticky_ = 0;         // partition of unkeyed messages (no producer id)
  size_t queued_bytes_ = 0;    // estimated size of the messages queued (all partitions)
  uint64_t queued_messages_ = 0;
  std::vector<int32_t> order_; // partition of each queued message (print_offsets)
  ProducerStats stats_;
};

}  // namespace mq::produce
