// The rules of an effectively-once consume -> transform -> produce pipeline
// (format-spec/pipeline.md, E1-E9; mq-consume -G GROUP -t IN --to-topic OUT
// --exec CMD runs one). A transform's standard output is the message's
// outputs, one per line; each source partition appends them under a
// producer id of its own, with contiguous sequences, and every output names
// its source message in a header, so that a restart finds at the output's
// tail where the last owner stopped and appends only what is missing.
//
// What is here decides: the producer name (E1), the output records (E2),
// the split of a transform's output (E3), routing and batches (E4), where a
// restart resumes (E6) and the completion of a message partly appended
// (E7). Running transforms, retries and dead letters (E5, E8, E9), flags
// and messages are mq-consume's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/partition.h"
#include "mq/producer_id.h"
#include "mq/topic.h"

namespace mq {

// Headers every output record carries (E2).
constexpr std::string_view kPipelineSourceHeader = "mq.src";             // IN/PARTITION/OFFSET
constexpr std::string_view kPipelineSourceIndexHeader = "mq.src.index";  // 0, 1, ... per message

// The producer name of source partition `partition` of `in` (E1): registry
// name "pipeline.<len>.<group>.<len>.<in>.<len>.<out>.<partition>", each
// length in decimal bytes, so that no two pipelines share one.
std::string PipelineProducerName(std::string_view group, std::string_view in, std::string_view out,
                                 int32_t partition);

// One output message of a transform run.
struct PipelineOutput {
  std::optional<std::string> key;
  std::string value;
};

// Splits a transform's standard output into its messages (E3): each line
// (the last one may lack its newline) is one; with a key delimiter, a line
// holding it is KEY, the delimiter, VALUE, and one without has no key.
std::vector<PipelineOutput> SplitPipelineOutput(std::string_view output,
                                                const std::optional<std::string>& key_delimiter);

// The output partition of `output` (E4): murmur2 of its key mod
// `out_partitions`, or, keyless, source partition `source_partition` mod
// `out_partitions`.
int32_t PipelineRoute(int32_t source_partition, const PipelineOutput& output,
                      int32_t out_partitions);

// How many output writers a pipeline keeps open, given `shares` of what
// the open-file limit leaves (each share holds a reader of the source, of
// `reader_descriptors`, and a writer of the output, of
// `writer_descriptors`) and the source's partition count: a share's reader
// is never opened past the source's partitions, so its descriptors hold
// writers instead. At least 1, at most `max_writers`.
size_t PipelineWriterBudget(size_t shares, int32_t source_partitions, size_t reader_descriptors,
                            size_t writer_descriptors, size_t max_writers);

struct PipelineConfig {
  std::string group;
  std::string out;                           // the output topic
  std::optional<std::string> key_delimiter;  // output lines are KEY SEP VALUE
  Durability durability = Durability::kNone;
  // Output partitions whose writer is kept open at once: opening one more
  // closes the least recently used one no transform is appending through,
  // and it is opened (and recovered) again at its next use.
  size_t max_open = 1024;
  // Called between two output batches of one message (a test seam: a
  // process killed there leaves a message partly appended, E7).
  std::function<void()> between_batches;
};

// A source partition: its topic and partition number.
struct PipelineSource {
  std::string topic;
  int32_t partition = 0;
};

// What Deliver did.
struct PipelineDelivery {
  // The message was the one partly appended (E6's H): it is complete now.
  bool completed = false;
  size_t batches = 0;  // output batches appended by this call
};

// The output side of a pipeline: the producers of the source partitions
// taken, and the output partitions' writers.
//
// Source partitions are keyed by a number of the caller's (a lane):
// Acquire names the source partition a key stands for. The transforms of
// different source partitions may run at once, on several threads: one at
// a time per source partition, in offset order, each source partition
// with its own producer and state, so E1-E9 hold per source partition as
// serially. What they share is guarded: the output partitions' writers
// (one lock each: a writer is one process's, its file lock does not
// exclude this process's threads), the set of open writers, and the table
// of acquired source partitions.
//
// At most config.max_open writers are open (more only while more threads
// than that append at once). Closing one and opening it again keeps E1-E9:
// a source partition's next sequences are its own, and the writer opened
// again reads the producers' state back from the partition (producer.md
// §10.2, P7), so the next batch continues its producer's sequences (P3)
// and one appended twice is a duplicate (P2), as through the writer that
// appended it first.
class PipelineWriter {
 public:
  PipelineWriter(PipelineConfig config, const DataDir& dir);
  ~PipelineWriter();
  PipelineWriter(const PipelineWriter&) = delete;
  PipelineWriter& operator=(const PipelineWriter&) = delete;
  // Starts writing to the output topic, whose configuration is `out`.
  Status Open(const TopicConfig& out);
  // Closes the output partitions (fsync unless durability is kNone).
  Status Close();
  // Output writers open now.
  size_t open_writers() const;
  // Lowers (or raises) the writer limit (at least 1): writers past it are
  // closed as others are opened.
  void set_max_open(size_t n);

  // Takes source partition `source` (as `key`), reading from `start`
  // (E1, E6): its producer id (kBusy while another process holds it), and
  // what an earlier owner appended. Returns H, the source offset whose
  // outputs are the last appended, when H >= start (messages below it are
  // complete, H may be partly appended); else -1.
  Result<int64_t> Acquire(int32_t key, const PipelineSource& source, int64_t start);
  // Lets it go, and its producer id.
  void Release(int32_t key);
  // Before the transform runs: true when every output of the message is
  // appended already (it is not run again, E6).
  Result<bool> Complete(int32_t key, int64_t offset) const;
  // Some of its outputs may be appended (E6's H): it is completed, never
  // dead-lettered (E9).
  bool Started(int32_t key, int64_t offset) const;
  // The transform gave `output` for the message at `offset`: appends its
  // outputs (E2-E4), or, for H, checks those appended (E7) and appends the
  // rest.
  Result<PipelineDelivery> Deliver(int32_t key, int64_t offset, int64_t timestamp,
                                   std::string_view output);

  // Output records appended.
  uint64_t appended() const { return appended_.load(); }

 private:
  // An output already in the log: what a rerun must reproduce.
  struct Found {
    int64_t index = -1;
    std::optional<std::string> key;
    std::optional<std::string> value;
  };
  struct Source {
    PipelineSource name;
    std::optional<ProducerIdentity> identity;
    std::vector<int32_t> next_sequence;  // per output partition
    // E6: the highest source offset found at the output's tail, if at or
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
  // (writer_mu_ free) while config_.max_open are open. When every open
  // writer is held by another thread the count goes past max_open.
  Status MakeRoom();
  // The state of acquired source partition `key`, or nullptr. Stays valid
  // until its Release (which comes only once no transform of it runs).
  Source* Find(int32_t key);
  const Source* Find(int32_t key) const;
  // E6: reads the producer's last batch in every output partition.
  Status FindTail(Source& src, int64_t start);
  // E7: the outputs appended by an earlier run are those of `outs`.
  Status CheckPresent(
      const Source& src, int64_t offset,
      const std::map<int32_t, std::vector<std::pair<size_t, const PipelineOutput*>>>& outs) const;
  Status AppendBatch(Source& src, int64_t offset, int64_t timestamp, int32_t q,
                     const std::vector<std::pair<size_t, const PipelineOutput*>>& outs);

  PipelineConfig config_;
  DataDir dir_;
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
  mutable std::mutex sources_mu_;  // the map, not its Sources
  std::map<int32_t, Source> sources_;
  std::atomic<uint64_t> appended_{0};
};

}  // namespace mq
