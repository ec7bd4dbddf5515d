// The producing half of mq-produce: partitions messages, builds batches
// per partition, appends them in groups, and (with a producer id) numbers
// them so a re-run of the same input appends only what is missing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "mq/topic.h"

#include "input.h"

namespace mq::cli {
class Output;
}

namespace mq::produce {

class AckGate;

struct ProducerOptions {
  std::string topic;
  int32_t partitions = 1;
  std::optional<int32_t> partition;  // -p: every message goes there
  size_t batch_bytes = 16 << 10;     // a batch is finished when it would pass this
  // Compressed into one partition, batch_bytes bounds the batch as
  // written, as in Kafka's producer: its records may take batch_bytes times
  // the compression ratio seen so far, up to this (and never less than
  // batch_bytes). zstd compresses 16 KiB frames at about half its speed on
  // 128 KiB ones. (Into many partitions, where each builder keeps the room
  // of its largest batch, the records take batch_bytes.)
  size_t compressed_records_max = 128 << 10;
  size_t append_bytes = 4 << 20;  // queued messages are appended once they reach this
  // One partition's finished batches are appended on their own once they
  // reach this (0: never; only at append_bytes). Small enough that the
  // batches are still in the CPU's cache when they are copied into the
  // page cache; used when an append is not an fsync and offsets are not
  // printed.
  size_t partition_append_bytes = 0;
  Compression compression = Compression::kNone;
  int zstd_level = 3;
  LogConfig log;
  int64_t producer_id = -1;    // >= 0: idempotent, epoch 0
  bool print_offsets = false;  // "partition offset" per message after its append
  bool quiet = false;          // no recovery notes on stderr
  // A replicated topic: consulted before and after each append (leader,
  // epoch, acks). Null for a topic of one root.
  AckGate* gate = nullptr;
  // Appends run on threads of their own while the caller reads and
  // encodes on (for a machine with a CPU to spare): partition p's on
  // thread p mod writer_threads (0: appends run on the caller's thread).
  // Either way a message is appended only after every message read before
  // it that went to the same partition, and no append starts after a
  // failed one.
  int writer_threads = 0;
  // Partitions kept open at once (each holds kDescriptorsPerPartition
  // descriptors); the least recently used one is closed to open another.
  size_t max_open = 1024;
};

// Descriptors an open partition holds: its directory, writer lock, state
// file, and the active segment's log, offset index and time index; two more
// while it is opened (directory listing, snapshot).
constexpr size_t kDescriptorsPerPartition = 8;

// A record (timestamp, key, value, headers) and where it goes. The record
// is handed to the batch builder as it is: copying it per message cost more
// than encoding it (its fields, just stored, were loaded back wider).
struct Message : RecordInput {
  std::optional<int32_t> partition;  // this partition, whatever the key (--keep-partition)
};

struct ProducerStats {
  uint64_t messages = 0;  // appended (or found already appended by the writer)
  uint64_t bytes = 0;     // key + value bytes of those
  uint64_t batches = 0;
  uint64_t appends = 0;
  uint64_t skipped = 0;                 // already in the log from an earlier run (producer id)
  uint64_t duplicates = 0;              // batches the writer found already appended
  std::vector<uint64_t> per_partition;  // messages per partition
};

// As a ReadHost, the producer reads an input ahead on the thread that
// appends partition 0, between its appends (reads first: the caller waits
// for them).
class Producer : public ReadHost {
 public:
  // Opens nothing yet: partitions are opened on first use. With a producer
  // id, asks every partition for the id's last sequence first.
  static Result<std::unique_ptr<Producer>> Open(const DataDir& dir, ProducerOptions options,
                                                cli::Output* out);
  ~Producer() override;

  bool AttachReader(std::function<void()> read) override;
  void ReaderDue() override;
  void DetachReader() override;

  // Queues one message; appends when enough is queued. A message that
  // earlier run already appended (same producer id, same position in the
  // input) is skipped.
  Status Send(const Message& message);
  // True when messages are queued but not yet handed to the appender.
  bool pending() const { return queued_messages_ > 0; }
  // Finishes every open batch and appends everything queued; with
  // print_offsets, prints their offsets in input order.
  Status Flush();
  // Flush, waits for every append, then closes every open partition (fsync
  // unless page-cache durability). The closed writers are destroyed with
  // the Producer: a process that exits next may leave them to the kernel
  // (destroying one unmaps its state file, and each unmapping interrupts
  // the process's other CPUs to flush their TLBs; exit unmaps all at once).
  Status Close();

  // Complete after Close(); before it, messages counts what was appended so
  // far and the other appender counts may lag.
  const ProducerStats& stats() const;

 private:
  struct PartitionState;
  struct Appender;
  Producer(const DataDir& dir, ProducerOptions options, cli::Output* out);
  int32_t Choose(const Message& m);
  Status FinishBatch(int32_t p);
  // Hands partition p's finished batches to the appender (its open batch
  // is empty): appends them now, or queues them for the writer thread.
  // With `stage` (Flush), the job waits in its appender's staged jobs,
  // handed over kHandOffBytes at a time (PushStaged).
  Status AppendPartition(int32_t p, bool stage = false);
  // Queues an appender's staged jobs (waiting for room).
  Status PushStaged(Appender* a);
  // Under mu_ (`lock`): waits until `bytes` more may be in flight (one job
  // always may); the first failed append, if any.
  Status WaitForRoom(std::unique_lock<std::mutex>& lock, size_t bytes);
  // Appends `bytes` (finished batches holding `messages` messages) to p.
  Status AppendNow(int32_t p, std::span<std::byte> bytes, uint64_t messages);
  // Waits until the writer threads appended everything queued; the first
  // failure, if any.
  Status Drain();
  // Records a batch's (or job's) size before and after compression: the
  // ratio sets records_limit_ (any thread).
  void NoteCompressed(size_t in, size_t out);
  // The codec batches are built with: none when they are compressed on
  // the way to the appender (compress_on_append_).
  Compression BuilderCompression() const;
  // AppendNow, compressing `bytes` first when they were built uncompressed.
  Status AppendFinished(int32_t p, std::span<std::byte> bytes, uint64_t messages);
  // Starts the writer threads; false when none could be started.
  bool StartWriters();
  // True when appends run on the writer threads, started on first use;
  // false when there are none (options_.writer_threads is 0, or they could
  // not be started: then never again).
  bool Threaded();
  // Bytes a lone partition's buffer of finished batches may reach.
  size_t GroupBytes() const;
  // Bytes queued for or being appended by the writer threads before the
  // reader waits for them (one job is let through whatever its size).
  size_t MaxInFlight() const;
  void StopWriter();
  // Its finished batches reach partition_append_bytes.
  bool AppendEarly(const PartitionState& ps) const;
  Result<PartitionWriter*> Writer(int32_t p);
  // With `keep`, the closed writer is kept (in a->closed_writers) rather
  // than destroyed: Close() keeps every writer it closes.
  Status CloseLeastRecent(Appender* a, bool keep = false);

  struct Job {
    int32_t partition = 0;
    std::vector<std::byte> bytes;
    uint64_t messages = 0;
    // Sealed (and compressed, with -z) by the reader already, the writer
    // being behind: appended as it is.
    bool sealed = false;
  };
  // What appends partitions p with p mod appenders_.size() == i: a
  // thread of its own (options_.writer_threads), or the caller's thread.
  struct Appender {
    std::thread thread;
    std::condition_variable jobs_cv;  // a job queued (the thread is idle), or stop
    std::deque<Job> jobs;             // queued, oldest first
    bool idle = false;                // the thread waits for a job
    bool appending = false;           // the thread is appending a job
    std::list<int32_t> open;          // partitions with an open writer, most recent first
    size_t max_open = 1;
    // Batches are built uncompressed and compressed by the thread that
    // appends them (when there is a writer thread).
    std::unique_ptr<BatchCompressor> compressor;
    std::vector<std::byte> compressed;  // a job, compressed
    uint64_t appends = 0;
    uint64_t duplicates = 0;
    Status closed;  // the first failure closing its partitions when stopped
    std::vector<std::unique_ptr<PartitionWriter>> closed_writers;  // by Close()
    std::vector<Job> staged;  // the reading thread's, not yet queued
    size_t staged_bytes = 0;
    // An input read ahead on this thread (ReadHost), under mu_: `read` is
    // to run again (read_due), is running (reading).
    std::function<void()> read;
    bool read_due = false;
    bool reading = false;
  };
  Appender& AppenderOf(int32_t p) {
    return *appenders_[static_cast<size_t>(p) % appenders_.size()];
  }
  void WriterLoop(Appender* a);
  // WriterLoop's turn: up to kHandOffBytes of `a`'s jobs (at least one),
  // their size added to `*bytes`; mu_ held.
  std::vector<Job> TakeJobs(Appender* a, size_t* bytes);
  // Appends `batch`'s jobs in order, none after a failure on any thread
  // (any_failed_ set by the first); mu_ not held.
  Status AppendJobs(std::vector<Job>& batch);
  // The jobs' buffers kept for reuse (up to kMaxSpare); mu_ held.
  void KeepSpares(std::vector<Job>& batch);
  // A job of partition `out`'s batches for the writer threads: sealed
  // (and compressed into a buffer of its own) when the writers fall
  // behind; `*moved` when `out`'s buffer became the job's.
  Status MakeJob(std::vector<std::byte>& out, Job* job, bool* moved);

  DataDir dir_;
  ProducerOptions options_;
  cli::Output* out_;
  std::vector<PartitionState> parts_;
  uint64_t index_ = 0;       // messages seen so far (including skipped)
  int32_t sticky_ = 0;       // partition of unkeyed messages (no producer id)
  size_t queued_bytes_ = 0;  // encoded size of the messages queued (all partitions)
  uint64_t queued_messages_ = 0;
  std::vector<int32_t> order_;  // partition of each queued message (print_offsets)
  mutable ProducerStats stats_;
  std::atomic<uint64_t> appended_{0};  // messages appended so far
  // Encoded records (and header) a batch is finished at: batch_bytes, or
  // more when compressed (NoteCompressed).
  std::atomic<size_t> records_limit_{0};

  std::vector<std::unique_ptr<Appender>> appenders_;
  bool threads_ = false;             // appenders_ run threads (started on first use)
  std::mutex mu_;                    // guards what follows and each Appender's queue
  std::condition_variable done_cv_;  // room, the queues drained, or a failure
  // Bytes queued or being appended (all threads); changed under mu_, read
  // without it to tell whether the writers are behind.
  std::atomic<size_t> in_flight_{0};
  bool reader_waiting_ = false;  // the reader waits for room
  bool detaching_ = false;       // DetachReader waits for `read` to return
  bool stop_ = false;
  Status failed_;                              // the first failed append: no more after it
  std::atomic<bool> any_failed_{false};        // failed_ is set (read without the lock)
  std::vector<std::vector<std::byte>> spare_;  // emptied job buffers, for reuse
  bool compress_on_append_ = false;
  // Batches are built without their CRC (defer_crc), which AppendFinished
  // or the compressor computes: fixed at construction, whatever happens
  // to the threads.
  bool seal_on_append_ = false;
  // The reader's own, for jobs it compresses when the writers are behind.
  std::unique_ptr<BatchCompressor> reader_compressor_;
};

}  // namespace mq::produce
