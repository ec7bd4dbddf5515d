// The consume loop: reads a set of partitions of one topic from start
// positions, hands out their records one at a time, in offset order within
// each partition and round-robin by batch across partitions, waits for
// appends to any of them, and reports per partition how far it has handed
// out (what a consumer group commits).
//
// The set of partitions (the assignment) may change at any time: a
// partition added starts at its given position; once a partition is
// removed, no record of it is handed out again.
//
// A bounded number of partitions keep an open reader (max_open); the least
// recently read one is closed to open another, and opened again at its next
// offset when its turn comes. A partition nobody has written to yet reads
// as empty until a writer creates it.
//
// Not thread-safe: one thread calls every method.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq {

// Where a partition's reading starts (mq-consume's -o forms).
struct StartPosition {
  enum class Kind : uint8_t {
    kBeginning,  // the log start
    kEnd,        // the committed end when the partition is assigned: only later appends
    kOffset,     // offset `value` (below the log start: the log start; past the end: the end)
    kFromEnd,    // `value` records before the committed end when assigned (not below the start)
    kTimestamp,  // the first record with timestamp >= `value` (ms)
  };
  Kind kind = Kind::kEnd;
  int64_t value = 0;
};

// Something the consumer read past and the caller may want to report.
struct ConsumerNotice {
  enum class Kind : uint8_t {
    kIndexWarning,      // an index entry the log contradicted (`problem`); the log was scanned
    kSkippedBatch,      // skip_corrupt: a corrupt batch skipped (`error` names file, rule, place)
    kSkippedOffsets,    // skip_corrupt: offsets first_offset..last_offset hidden by skipped batches
    kTruncated,         // records first_offset..last_offset, handed out already, were cut from
                        // the log (a failover): what is at those offsets now is handed out
    kStoppedPartition,  // stop_corrupt: a corrupt batch stopped the partition at its next
                        // offset first_offset (`error` names file, rule, place)
    kOutOfRange,        // offsets first_offset..last_offset were deleted by retention before they
                        // were read (R73): the partition goes on at the log start, last_offset + 1
  };
  Kind kind = Kind::kIndexWarning;
  int32_t partition = 0;
  std::string dir;  // the partition directory
  Problem problem;
  Status error;
  int64_t first_offset = 0;
  int64_t last_offset = 0;
};

struct ConsumerOptions {
  // What readers accept at least; raised to the topic's max.message.bytes
  // (DataDir::DecodeLimitsFor).
  DecodeLimits limits;
  // Partitions whose reader is kept open at once (kDescriptorsPerReader
  // descriptors each).
  size_t max_open = 1024;
  // A partition is finished at the committed end it had when it was
  // assigned (mq-consume -e). A partition without a log then is finished at
  // once.
  bool stop_at_end = false;
  // A partition is finished at its first record with timestamp >= this
  // (mq-consume e@); that record is not handed out.
  std::optional<int64_t> stop_timestamp;
  // A corrupt batch is reported (kSkippedBatch) and skipped instead of
  // failing Next() with kCorruption.
  bool skip_corrupt = false;
  // Unless skip_corrupt: a corrupt batch stops its partition instead of
  // failing Next() (kStoppedPartition): none of its records at or past the
  // partition's next offset is handed out, the partition counts as finished,
  // and the other partitions go on (a consumer group member,
  // format-spec/group.md §14.7). Also when the partition's start cannot be
  // read at Assign(). Unassign() and Assign() read it again.
  bool stop_corrupt = false;
  // Called for each notice, from Next() and Assign(). May be empty.
  std::function<void(const ConsumerNotice&)> on_notice;
};

// A record handed out by Consumer::Next().
struct ConsumedRecord {
  int32_t partition = 0;
  bool log_append_time = false;   // the batch's timestamps are LogAppendTime
  int64_t batch_last_offset = 0;  // the last offset of the record's batch
  int32_t leader_epoch = -1;      // the batch's partitionLeaderEpoch
  RecordView record;
};

// Descriptors an open reader holds (directory, state file, segment), plus
// one while a segment is opened.
constexpr size_t kDescriptorsPerReader = 4;

class MultiWaiter;

class Consumer {
 public:
  // A consumer of `topic` in `dir` with no partition assigned. Reads the
  // topic's configuration: kNotFound if the topic does not exist.
  static Result<std::unique_ptr<Consumer>> Open(const DataDir& dir, std::string topic,
                                                ConsumerOptions options);
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  const TopicConfig& config() const { return config_; }
  const std::string& topic() const { return topic_; }

  // Adds `partition` to the assignment (last in the round-robin order),
  // opening its reader and resolving `start` against its log now. Fails
  // with kInvalidArgument if the topic has no such partition or it is
  // assigned already; on any error nothing is added.
  Status Assign(int32_t partition, StartPosition start);
  // Removes `partition` from the assignment: none of its records is handed
  // out after this returns (a batch being handed out is dropped). False if
  // it was not assigned.
  bool Unassign(int32_t partition);
  // Makes assigned `partition` the next one read: a batch of another
  // partition being handed out is put aside (its records from that
  // partition's position on are read again at its next turn, which comes
  // right after). A group member taking over a partition calls it, so that
  // the partition's first record does not wait for the rest of the batch
  // being handed out and for one batch of every other partition. False if
  // it is not assigned.
  bool ReadNext(int32_t partition);
  // The assigned partitions, in round-robin order.
  std::vector<int32_t> assignment() const;

  // The next record, or nullptr when every assigned partition is at its
  // committed end (or finished). The record and what it points to stay
  // valid until the next call of a non-const method. A corrupt batch is a
  // kCorruption error naming the file, the topic, the partition and the
  // next offset (unless skip_corrupt); other errors are the reader's.
  Result<const ConsumedRecord*> Next();

  // Blocks until some assigned, unfinished partition has committed records
  // past what Next() has seen, or `timeout_ms` passes (without SA_RESTART a
  // signal may end it early). True when Next() should be called again: an
  // append was seen, or, with too many partitions to watch each one (more
  // than kMaxWaiterThreads, or than half of max_open), the periodic look at
  // every partition is due. False when it timed out.
  bool WaitForAppend(int timeout_ms);

  // Every assigned partition is finished (stop_at_end, stop_timestamp).
  // True for an empty assignment.
  bool finished() const;

  // Changes max_open (ConsumerOptions): a lower one closes the least
  // recently read readers above it now (they are opened again, where
  // reading stopped, when read next), as a member of several topics
  // shares one budget among more topics (format-spec/group.md R64).
  void set_max_open(size_t max_open);
  // Readers open now (at most max_open, or 1).
  size_t open_readers() const { return open_.size(); }

  // The next offset of `partition` to hand out: every record below it has
  // been handed out or passed over (control records, records before the
  // start). What a consumer group commits once the handed-out records are
  // processed. nullopt if the partition is not assigned or its position is
  // not known yet (its directory does not exist yet; a timestamp start
  // before the first read).
  std::optional<int64_t> position(int32_t partition) const;
  // The offset of the last record of `partition` handed out since it was
  // assigned; nullopt if none (or not assigned).
  std::optional<int64_t> last_handed_out(int32_t partition) const;

  // skip_corrupt: corrupt batches skipped, and the offsets they hid.
  uint64_t skipped_batches() const { return skipped_batches_; }
  uint64_t skipped_offsets() const { return skipped_offsets_; }
  // stop_corrupt: assigned `partition` was stopped by a corrupt batch.
  bool stopped(int32_t partition) const;

  // With more partitions than this, or than half of max_open, waiting
  // polls every partition each kPollMs instead of waiting on each in a
  // thread.
  static constexpr size_t kMaxWaiterThreads = 256;
  static constexpr int kPollMs = 1000;

 private:
  struct Cursor;
  struct Batch;
  enum class Step : uint8_t { kProgress, kIdle };
  Consumer(const DataDir& dir, std::string topic, ConsumerOptions options, TopicConfig config);
  Cursor* Find(int32_t partition) const;
  Status OpenCursor(Cursor& c, bool at_start);
  Status Reopen(Cursor& c);
  Status OpenReader(Cursor& c);
  void Touch(Cursor& c);
  void Release(Cursor& c);
  void MakeRoom();
  // Closes least recently read readers while more than `keep` are open.
  void CloseReadersAbove(size_t keep);
  Result<Step> ReadBatch(Cursor& c);
  Status BeginBatch(Cursor& c, const BatchView& batch);
  bool NextRecord();
  void EndTurn(Cursor& c);
  Status OnBadBatch(Cursor& c, Status s, bool from_reader);
  void Stop(Cursor& c, Status s);
  void Notify(const ConsumerNotice& n);
  void ReportWarnings(Cursor& c);

  DataDir dir_;
  std::string topic_;
  ConsumerOptions options_;
  TopicConfig config_;
  ReadOptions read_;
  std::vector<std::unique_ptr<Cursor>> cursors_;  // the assignment, in round-robin order
  std::list<Cursor*> open_;         // cursors with an open reader, most recently read first
  std::unique_ptr<Batch> batch_;    // the batch whose records Next() is handing out
  size_t turn_ = 0;                 // the cursor whose batch is read next
  bool round_progress_ = false;     // something moved in this round over the cursors
  std::vector<std::byte> scratch_;  // decompressed records, reused
  ConsumedRecord out_;
  Status batch_error_;  // why the last batch ended early, until Next() returns it
  uint64_t skipped_batches_ = 0;
  uint64_t skipped_offsets_ = 0;
  std::unique_ptr<MultiWaiter> waiter_;  // several partitions: started by the first wait
  int64_t next_poll_ms_ = 0;             // polling: when every partition is looked at again
};

}  // namespace mq
