// What mq-inspect reports, and the two ways it is printed: kafka-dump-log
// lines (problems on stderr) or JSON Lines (everything on stdout). The
// fields of both forms are listed in man/man1/mq-inspect.1, OUTPUT.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cli.h"
#include "mq/batch.h"
#include "mq/group.h"
#include "mq/member_heartbeat.h"
#include "mq/member_lease.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"

namespace mq::inspect {

struct PrintOptions {
  bool records = false;        // one line per record (--records)
  bool data = false;           // key and payload too (--print-data-log)
  bool headers = false;        // header keys and values (--headers)
  bool skip_metadata = false;  // records without metadata (--skip-record-metadata)
};

enum class FileKind : uint8_t {
  kLog,
  kIndex,
  kTimeIndex,
  kGroupOffsets,
  kLeaderEpochCheckpoint,
  kReplicationOffsetCheckpoint,
  kMemberLease,
  kMemberHeartbeat,
};

// What --verify read of a path: the evidence behind "ok".
struct VerifySummary {
  VerifyStats stats;
  uint64_t topics = 0;
  uint64_t groups = 0;            // group offsets files read (format-spec/group.md)
  uint64_t partitions = 0;        // partition directories looked at (or never written)
  uint64_t empty_partitions = 0;  // of those, never written
  bool directory = false;         // a data or partition directory (or topic), not a file
  bool empty() const {
    return directory && stats.segments == 0 && partitions == empty_partitions && groups == 0;
  }
};

class Printer {
 public:
  virtual ~Printer() = default;
  // Before a file's contents; `base_offset` is nullopt if the name breaks R12.
  virtual void FileStart(const std::string& file, FileKind kind,
                         std::optional<int64_t> base_offset) = 0;
  // `valid` is false for a batch whose header decodes but breaks a rule.
  virtual void Batch(const std::string& file, uint64_t position, const BatchHeader& header,
                     bool valid) = 0;
  // `control` is set for the record of a control batch.
  virtual void Record(const std::string& file, uint64_t batch_position, const BatchHeader& header,
                      const RecordView& record, const ControlRecord* control) = 0;
  virtual void IndexEmpty(const std::string& file) = 0;
  virtual void IndexEntry(const std::string& file, const OffsetIndexEntry& entry) = 0;
  virtual void TimeIndexEntry(const std::string& file, const TimeIndexEntry& entry) = 0;
  // A group offsets file (format-spec/group.md §14.2): its header, then
  // each entry.
  virtual void GroupOffsetsHeader(const std::string& file, const GroupOffsets& state) = 0;
  virtual void GroupOffset(const std::string& file, const CommittedOffset& entry) = 0;
  // A replica checkpoint (format-spec/replication.md §16): its header
  // (version 0 and the entry count), then each entry.
  virtual void CheckpointHeader(const std::string& file, FileKind kind, size_t entries) = 0;
  virtual void LeaderEpochEntry(const std::string& file, const EpochEntry& entry) = 0;
  virtual void ReplicationOffset(const std::string& file, const HighWatermarkEntry& entry) = 0;
  // A static member's lease (format-spec/group.md §14.5, R65) and a
  // running member's heartbeat (R69): their fields.
  virtual void MemberLease(const std::string& file, const mq::MemberLease& lease) = 0;
  virtual void MemberHeartbeat(const std::string& file, const mq::MemberHeartbeat& hb) = 0;
  virtual void TrailingBytes(const std::string& file, uint64_t position, uint64_t bytes) = 0;
  // A broken rule; the file is still read past it where possible.
  virtual void Problem(const mq::Problem& problem) = 0;
  // A path that verified clean (--verify).
  virtual void Clean(const std::string& path, const VerifySummary& summary) = 0;
  // True once stdout is closed (EPIPE): stop reading, exit 0.
  bool broken() const { return out_.broken(); }
  cli::Output& out() { return out_; }

 protected:
  cli::Output out_;
};

std::unique_ptr<Printer> MakeTextPrinter(const PrintOptions& options);
std::unique_ptr<Printer> MakeJsonPrinter(const PrintOptions& options);

// "<file>: offset <pos>: <rule>: <detail>", the form of every problem line;
// "needs recovery: " or "note: " precedes the detail of those kinds.
std::string FormatProblem(const mq::Problem& problem);
// Drops "<file>: offset <pos>: <rule>: " from the start of the detail, where
// a status message repeats what the problem line already says.
void TrimDetail(mq::Problem* problem);
// A Problem from a kCorruption (or kUnsupported) status met in `file`.
mq::Problem ProblemFromStatus(const Status& status, const std::string& file, uint64_t position);

// The sequence number of `record` (Kafka's DefaultRecord.sequence()): -1
// when the batch has none, else baseSequence + offsetDelta wrapping past
// INT32_MAX to 0.
int32_t RecordSequence(const BatchHeader& header, const RecordView& record);
// The record's timestamp as Kafka reports it: the batch's maxTimestamp for
// LogAppendTime batches.
int64_t RecordTimestamp(const BatchHeader& header, const RecordView& record);
const char* TimestampType(const BatchHeader& header);

}  // namespace mq::inspect
