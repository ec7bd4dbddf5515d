// mq-consume -G GROUP -t IN --to-topic OUT --exec CMD: an effectively-once
// consume -> transform -> produce pipeline (format-spec/pipeline.md). The
// rules of what is appended and where a restart resumes are liblog's
// (mq/pipeline.h, PipelineWriter); here are the member's side: the lanes a
// member reads, the output topic created like the source, the open-file
// budget of its writers, and what it says on stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dispatcher.h"
#include "mq/partition.h"
#include "mq/pipeline.h"
#include "mq/topic.h"

namespace mq::consume {

// Descriptors a pipeline member holds per source partition it owns,
// outside its readers' and writers' budget: its producer's lock (E1), a
// flock(2) on a file kept open for as long as the member owns the
// partition. (Ownership locks share one descriptor, group.md §14.5.)
constexpr size_t kLocksPerSourcePartition = 1;

// How many output writers a pipeline keeps open (mq::PipelineWriterBudget),
// given `shares` of what the open-file limit leaves (each share holds a
// reader of the source and a writer of the output:
// cli::OpenPartitionBudget(kDescriptorsPerReader + kDescriptorsPerWriter))
// and the source's partition count. At least 1, at most
// cli::kMaxOpenPartitions.
size_t PipelineWriterBudget(size_t shares, int32_t source_partitions);

struct PipelineOptions {
  std::string group;
  std::string in;  // -t (the first topic read)
  // A member of several topics (-t repeated, a pattern): the source topic
  // of each lane (dispatcher.h), which every source partition the Pipeline
  // takes is. nullptr: every one is partition LanePartition of `in`. Not
  // owned.
  const TopicTable* topics = nullptr;
  std::string out;                            // --to-topic
  std::optional<std::string> key_delimiter;   // -K: output lines are KEY SEP VALUE
  Durability durability = Durability::kNone;  // --fsync
  bool quiet = false;
  bool verbose = false;
  // Output partitions whose writer is kept open at once (PipelineConfig).
  size_t max_open = 1024;
};

// The member's OutputSink: each lane (dispatcher.h) is a partition of a
// source topic, taken, delivered and let go through a PipelineWriter.
// With --parallel N the transforms of different source partitions run at
// once, on the dispatcher's workers (PipelineWriter says what they share).
class Pipeline final : public OutputSink {
 public:
  Pipeline(PipelineOptions options, const DataDir& dir, const TopicConfig& source);
  ~Pipeline() override;
  // Opens the output topic, creating it like the source if it does not
  // exist (as --dlq does), and says so on stderr.
  Status Open();
  // Closes the output partitions (fsync unless --fsync none).
  Status Close() { return writer_.Close(); }
  // Output writers open now (for tests).
  size_t open_writers() const { return writer_.open_writers(); }
  // Lowers (or raises) the writer limit (options.max_open, at least 1):
  // writers past it are closed as others are opened.
  void set_max_open(size_t n) { writer_.set_max_open(n); }

  Status Acquire(int32_t partition, int64_t start) override;
  void Release(int32_t partition) override { writer_.Release(partition); }
  Result<bool> Complete(int32_t partition, int64_t offset) override {
    return writer_.Complete(partition, offset);
  }
  bool Started(int32_t partition, int64_t offset) const override {
    return writer_.Started(partition, offset);
  }
  Status Deliver(int32_t partition, int64_t offset, int64_t timestamp,
                 std::string_view output) override;

  uint64_t appended() const { return writer_.appended(); }

 private:
  // The source topic of lane `partition`.
  std::string In(int32_t partition) const;

  PipelineOptions options_;
  DataDir dir_;
  TopicConfig source_;
  PipelineWriter writer_;
};

}  // namespace mq::consume
