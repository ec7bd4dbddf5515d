// mq-consume -G GROUP -t IN --to-topic OUT --exec CMD: an effectively-once
// consume -> transform -> produce pipeline (format-spec/pipeline.md). The
// handler's standard output is the message's outputs, one per line; each
// (source partition) appends them under a producer id of its own, with
// contiguous sequences, and every output names its source message in a
// header, so that a restart finds at the output's tail where the last owner
// stopped and appends only what is missing.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dispatcher.h"
#include "mq/partition.h"
#include "mq/topic.h"
#include "mq/producer_id.h"

namespace mq::consume {

// Headers every output record carries (format-spec/pipeline.md, E2).
constexpr std::string_view kSourceHeader = "mq.src";             // IN/PARTITION/OFFSET
constexpr std::string_view kSourceIndexHeader = "mq.src.index";  // 0, 1, ... per message

// The producer name of source partition `partition` (E1): registry name
// "pipeline.<len>.<group>.<len>.<in>.<len>.<out>.<partition>", each
// length in decimal bytes, so that no two pipelines share one.
std::string PipelineProducerName(std::string_view group, std::string_view in,
                                 std::string_view out, int32_t partition);

// Descriptors a pipeline member holds per source partition it owns,
// outside its readers' and writers' budget: its producer's lock (E1), a
// flock(2) on a file kept open for as long as the member owns the
// partition. (Ownership locks share one descriptor, group.md §14.5.)
constexpr size_t kLocksPerSourcePartition = 1;

// How many output writers a pipeline keeps open, given `shares` of what
// the open-file limit leaves (each share holds a reader of the source and a
// writer of the output: cli::OpenPartitionBudget(kDescriptorsPerReader +
// kDescriptorsPerWriter)) and the source's partition count: a share's
// reader is never opened past the source's partitions, so its descriptors
// hold writers instead. At least 1, at most cli::kMaxOpenPartitions.
size_t PipelineWriterBudget(size_t shares, int32_t source_partitions);

struct PipelineOptions {
  std::string group;
  std::string in;   // -t (the first topic read)
  // A member of several topics (-t repeated, a pattern): the source topic
  // of each lane (dispatcher.h), which every source partition the Pipeline
  // takes is. nullptr: every one is partition LanePartition of `in`. Not
  // owned.
  const TopicTable* topics = nullptr;
  std::string out;  // --to-topic
  std::optional<std::string> key_delimiter;  // -K: output lines are KEY SEP VALUE
  Durability durability = Durability::kNone;  // --fsync
  bool quiet = false;
  bool verbose = false;
  // Output partitions whose writer is kept open at once: opening one more
  // closes the least recently used one no transform is appending through,
  // and it is opened (and recovered) again at its next use.
  size_t max_open = 1024;
};

// One output message of a transform run.
struct PipelineOutput {
  std::optional<std::string> key;
  std::string value;
};

// Splits a transform's standard output into its messages (E3): each line
// (the last one may lack its newline) is one; with a key delimiter, a line
// holding it is KEY, the delimiter, VALUE, and one without has no key.
std::vector<PipelineOutput> SplitOutput(std::string_view output,
                                        const std::optional<std::string>& key_delimiter);

// With --parallel N the transforms of different source partitions run at
// once, on the dispatcher's workers: one at a time per source partition,
// in offset order, each source partition with its own producer and Source
// state, so E1-E9 hold per source partition as serially. What they share
// is guarded: the output partitions' writers (one lock each: a writer is
// one process's, its file lock does not exclude this process's threads),
// the set of open writers, and the table of acquired source partitions.
//
// At most options.max_open writers are open (more only while more threads
// than that append at once). Closing one and opening it again keeps E1-E9:
// a source partition's next sequences are its own (Source), and the writer
// opened again reads the producers' state back from the partition
// (producer.md §10.2, P7), so the next batch continues its producer's
// sequences (P3) and one appended twice is a duplicate (P2), as through the
// writer that appended it first.
class Pipeline final : public OutputSink {
 public:
  Pipeline(PipelineOptions options, const DataDir& dir, const TopicConfig& source);
  ~Pipeline() override;
  // Opens the output topic, creating it like the source if it does not
  // exist (as --dlq does), and says so on stderr.
  Status Open();
  // Closes the output partitions (fsync unless --fsync none).
  Status Close();
  // Output writers open now (for tests).
  size_t open_writers() const;
  // Lowers (or raises) the writer limit (options.max_open, at least 1):
  // writers past it are closed as others are opened (MakeRoom).
  void set_max_open(size_t n);

  // Each `partition` is a lane (dispatcher.h): a partition of a source topic.
  Status Acquire(int32_t partition, int64_t start) override;
  void Release(int32_t partition) override;
  Result<bool> Complete(int32_t partition, int64_t offset) override;
  bool Started(int32_t partition, int64_t offset) const override;
  Status Deliver(int32_t partition, int64_t offset, int64_t timestamp,
                 std::string_view output) override;

  uint64_t appended() const { return appended_.load(); }

 private:
  // An output already in the log: what a rerun must reproduce.
  struct Found {
    int64_t index = -1;
    std::optional<std::string> key;
    std::optional<std::string> value;
  };
  struct Source {
    std::optional<ProducerIdentity> identity;
    std::vector<int32_t> next_sequence;  // per output partition
    // E5: the highest source offset found at the output's tail, if at or
    // past the start: messages below it are complete, and its outputs in
    // each output partition whose last batch is its are `present`.
    int64_t resume = -1;
    std::map<int32_t, std::vector<Found>> present;
  };
  // The writer of output partition `q`, opened (and the partition
  // recovered) when it is not open, most recently used from now on;
  // writer_mu_[q] held.
  Result<PartitionWriter*> Writer(int32_t q);
  // Counts one writer more open (the caller's, about to be opened), first
  // closing the least recently used writers that no thread holds
  // (writer_mu_ free) while options_.max_open are open. When every open
  // writer is held by another thread the count goes past max_open.
  Status MakeRoom();
  // The state of acquired source partition `partition`, or nullptr. Stays
  // valid until its Release (which comes only once no transform of it runs).
  Source* Find(int32_t partition);
  const Source* Find(int32_t partition) const;
  int32_t Route(int32_t partition, const PipelineOutput& o) const;
  Status AppendBatch(Source& src, int32_t partition, int64_t offset, int64_t timestamp,
                     int32_t q, const std::vector<std::pair<size_t, const PipelineOutput*>>& outs);
  std::string SourceId(int32_t partition, int64_t offset) const;
  // The source topic of lane `partition`.
  std::string In(int32_t partition) const;

  PipelineOptions options_;
  DataDir dir_;
  TopicConfig source_;
  TopicConfig out_config_;
  LogConfig log_;
  std::vector<std::unique_ptr<PartitionWriter>> writers_;
  std::unique_ptr<std::mutex[]> writer_mu_;  // one per output partition
  // open_mu_ guards what follows: the open writers, most recently used
  // first, where each is in that list, and how many are open or being
  // opened. Taken with a writer_mu_ held, never the other way round (a
  // writer_mu_ is only tried under it).
  mutable std::mutex open_mu_;
  std::list<int32_t> lru_;
  std::vector<std::list<int32_t>::iterator> in_lru_;
  size_t open_count_ = 0;
  mutable std::mutex sources_mu_;            // the map, not its Sources
  std::map<int32_t, Source> sources_;
  std::atomic<uint64_t> appended_{0};
};

}  // namespace mq::consume
