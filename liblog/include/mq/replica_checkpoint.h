// Replica checkpoints of a partition directory (format-spec/replication.md
// §16, rules R35-R39), in Kafka's text checkpoint layout:
//   leader-epoch-checkpoint        `epoch startOffset` per leader epoch
//   replication-offset-checkpoint  `topic partition offset`: the high watermark
//                                  as an older mq kept it (read, never written)
// and the high watermark in place, `high-watermark` (R61: two CRC'd copies,
// the one not current overwritten). All are optional until replication
// writes them, and written through the FileSystem seam.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/batch.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

// The file names (§16.2, §16.3). The high watermark lives in
// `high-watermark` (R61); `replication-offset-checkpoint` is what an older
// mq kept it in: read while `high-watermark` is missing, never written.
extern const char* const kLeaderEpochCheckpointFile;
extern const char* const kReplicationOffsetCheckpointFile;
extern const char* const kHighWatermarkFile;

// Kafka's EpochEntry: the first offset written in a leader epoch.
struct EpochEntry {
  int32_t epoch = 0;
  int64_t start_offset = 0;
  bool operator==(const EpochEntry&) const = default;
};

// The answer to OffsetForLeaderEpoch (KIP-101, KIP-279): the largest epoch
// at or below the one asked for and where it ends; both -1 (Kafka's
// UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when the cache cannot say.
struct EpochEndOffset {
  int32_t epoch = -1;
  int64_t end_offset = -1;
  bool operator==(const EpochEndOffset&) const = default;
};

// The leader epochs of one partition in memory, as Kafka's
// LeaderEpochFileCache: epochs and start offsets strictly increase (R36).
// Not thread-safe; its owner (the partition's writer) serializes calls and
// decides when to Store.
class LeaderEpochCache {
 public:
  LeaderEpochCache() = default;
  // A cache holding `entries`, which must obey R36 (kInvalidArgument
  // otherwise).
  static Result<LeaderEpochCache> FromEntries(std::vector<EpochEntry> entries);

  // Records that `epoch` starts at `start_offset`. Both must be ≥ 0. The
  // latest epoch again is a no-op; a lower epoch, or a higher one starting
  // before the latest epoch's start, is refused (kInvalidArgument) and
  // changes nothing. A higher epoch at the latest epoch's start offset
  // replaces it (that epoch wrote nothing: Kafka does the same).
  Status Assign(int32_t epoch, int64_t start_offset);

  // Kafka's LeaderEpochFileCache.endOffsetFor(epoch, logEndOffset):
  //  - epoch -1, an empty cache, or an epoch above the latest: {-1, -1};
  //  - the latest epoch: {epoch, log_end_offset};
  //  - below the first entry's epoch: {epoch, first entry's start offset}
  //    (the data before it is gone; a follower fetches from there);
  //  - otherwise {largest epoch ≤ epoch, start offset of the first entry
  //    whose epoch is above epoch}.
  EpochEndOffset EndOffsetFor(int32_t epoch, int64_t log_end_offset) const;

  // After the log is truncated to end before `end_offset`: removes every
  // entry starting at or after it (nothing when end_offset < 0).
  void TruncateFromEnd(int64_t end_offset);
  // After the log start moves up to `start_offset`: removes the entries
  // starting at or before it and, if any was removed, puts the last of them
  // back starting at `start_offset` (so an entry at exactly start_offset
  // keeps its epoch).
  void TruncateFromStart(int64_t start_offset);

  const std::vector<EpochEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  std::optional<EpochEntry> latest() const;

  // The checkpoint's bytes (§16.2).
  std::string Encode() const;

  // Reads `leader-epoch-checkpoint` of the partition directory `dir_fd`
  // (R35, R36). Missing: kNotFound.
  static Result<LeaderEpochCache> Load(int dir_fd, FileSystem* fs = nullptr);
  // Replaces it with this cache (R39).
  Status Store(int dir_fd, FileSystem* fs = nullptr) const;
  // After a cut of the log to end before `end_offset`: TruncateFromEnd, and
  // Store when that removed an entry.
  Status TruncateFromEndAndStore(int64_t end_offset, int dir_fd, FileSystem* fs = nullptr);
  // The cache the log implies (R37): every segment's complete batches in
  // order, an entry at each batch whose partitionLeaderEpoch is above the
  // latest so far; -1 batches add none; a lower epoch than one before it is
  // kCorruption (R37) naming the segment and byte position. Reads headers
  // only (the caller has recovered the log).
  static Result<LeaderEpochCache> Rebuild(int dir_fd, const DecodeLimits& limits,
                                          FileSystem* fs = nullptr);
  // What a partition's writer calls when it opens, after recovery: Load;
  // a missing checkpoint is rebuilt from the log (R37) and stored; entries
  // starting past `log_end_offset` (written before a crash cut the log)
  // are dropped and the file stored again; one starting at it (an epoch
  // begun, nothing appended in it yet) stays. Stores nothing when the
  // file is present and within the log. A checkpoint that breaks R35 or
  // R36 is returned as that corruption, never replaced behind the
  // caller's back. `*rebuilt` (optional) says whether the log was read.
  static Result<LeaderEpochCache> Open(int dir_fd, int64_t log_end_offset,
                                       const DecodeLimits& limits, FileSystem* fs = nullptr,
                                       bool* rebuilt = nullptr);

 private:
  std::vector<EpochEntry> entries_;
};

// Where a reader that was at offset `from` goes on once the log was
// rewritten (segment.md §9.4; KIP-320, and KIP-279's walk back over epochs):
// `from`, or below it the log end `log_end`, or where what it handed out
// stops agreeing with the log. `read` lists the leader epochs of the batches
// it handed out, each with the offset where it began handing that epoch out
// (ascending). One leader writes an epoch: where the log still has the
// epoch, it agrees with what the reader read of it, and with what came
// before, up to where the epoch ends in `epochs`; an epoch the log no
// longer has was cut from where the reader began it (and from where the
// next epoch above it starts in the log), and the epoch before it decides.
// An empty or unreadable (nullptr) checkpoint tells nothing more than the
// log end. PartitionReader's rule; the simulator's readers apply it too.
int64_t ReaderResumeOffset(int64_t from, int64_t log_end, std::span<const EpochEntry> read,
                           const LeaderEpochCache* epochs);

// R37: entry `entry` of the checkpoint `cache`, read from `path`, is not
// what the log implies (`what` says how; `entry` == the entry count: an
// entry the log implies is missing at the end). The corruption naming the
// file and the byte position of that entry's line.
Status EpochEntryMismatch(const LeaderEpochCache& cache, size_t entry, const std::string& path,
                          const std::string& what);

// Parses a leader-epoch checkpoint's bytes (R35, R36); `file` names it in
// errors.
Result<LeaderEpochCache> DecodeLeaderEpochCheckpoint(std::string_view bytes,
                                                     const std::string& file);

// The one entry of a partition's replication-offset-checkpoint (§16.3).
struct HighWatermarkEntry {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  bool operator==(const HighWatermarkEntry&) const = default;
};

// Parses a replication-offset checkpoint's bytes (R35, R38). With
// `expected`, an entry naming another topic or partition breaks R38. A
// zero-byte file (no entry) gives nullopt.
Result<std::optional<HighWatermarkEntry>> DecodeReplicationOffsetCheckpoint(
    std::string_view bytes, const std::string& file,
    const std::optional<std::pair<std::string, int32_t>>& expected);
std::string EncodeReplicationOffsetCheckpoint(const HighWatermarkEntry& entry);

// R61: the high-watermark file as read: the entry of its current copy
// (nullopt: an empty file), that copy's sequence and index (0 or 1; -1 and
// 0: no copy).
struct HighWatermarkFile {
  std::optional<HighWatermarkEntry> entry;
  uint64_t sequence = 0;
  int copy = -1;
};
// Decodes the whole `high-watermark` file (`file` names it in errors): 0
// bytes is no high watermark; a copy whose CRC does not match is one not
// finished (the other is current); anything else that breaks R61 is
// corruption naming the byte position and R61. With `expected`, a current
// copy naming another topic or partition breaks R38.
Result<HighWatermarkFile> DecodeHighWatermarkFile(
    std::span<const std::byte> bytes, const std::string& file,
    const std::optional<std::pair<std::string, int32_t>>& expected);
// One copy of R61 holding `entry` with `sequence` (≥ 1): kInvalidArgument
// for a topic that breaks R12 or a negative partition or offset.
Result<std::vector<std::byte>> EncodeHighWatermarkCopy(const HighWatermarkEntry& entry,
                                                       uint64_t sequence);
// The stored high watermark read as LoadHighWatermark reads it (a breach
// of R61 read again before it counts), `partition` naming the partition its
// entry must name when known: OK, or why it cannot be read (kCorruption
// naming the file, byte position and rule).
Status CheckStoredHighWatermark(int dir_fd,
                                const std::optional<std::pair<std::string, int32_t>>& partition);
// The file that holds the high watermark in `dir_fd` for messages:
// `high-watermark` unless only an older mq's replication-offset-checkpoint
// is there.
const char* HighWatermarkFileAt(int dir_fd, FileSystem* fs = nullptr);

// The high watermark of partition `partition` of `topic`, whose directory
// is `dir_fd`: its `high-watermark` (R61), or while that is missing the
// replication-offset-checkpoint an older mq left (R38); kNotFound when
// neither is there or the one read holds no entry. Every reader of the
// high watermark goes through it.
Result<int64_t> LoadHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                  FileSystem* fs = nullptr);
// The same, checked against the log end the caller has just read
// (R38: a high watermark is never above the log end): one above it is
// kCorruption naming the file, the offset's byte position and R38.
Result<int64_t> LoadHighWatermarkWithin(int dir_fd, std::string_view topic, int32_t partition,
                                        int64_t log_end_offset, FileSystem* fs = nullptr);
// The check itself, on a high watermark `hw` already read from that
// partition's checkpoint in `dir_fd`: OK, or the R38 corruption above.
Status CheckHighWatermarkWithin(int dir_fd, std::string_view topic, int32_t partition, int64_t hw,
                                int64_t log_end_offset);
// After the log was cut to end before `end_offset` (a truncation, or a
// recovery that found less log than the high watermark counted): lowers a
// stored high watermark above it to it, fsynced (a crash must never bring
// the higher one back over records that replace the cut ones). Returns the
// high watermark it lowered, or nullopt when none was above (or none is
// stored).
Result<std::optional<int64_t>> LowerHighWatermark(int dir_fd, std::string_view topic,
                                                  int32_t partition, int64_t end_offset,
                                                  FileSystem* fs = nullptr);
// Stores `offset` (≥ 0) for that partition (R61): over the copy of
// `high-watermark` that is not current, in place, with the next sequence,
// then fdatasync unless `sync` is false (page-cache durability, §16.4). A
// missing file is created whole (R39, copy 0, sequence 1), and an older
// mq's replication-offset-checkpoint then removed. The caller holds the
// partition's writer lock (one writer at a time).
Status StoreHighWatermark(int dir_fd, std::string_view topic, int32_t partition, int64_t offset,
                          FileSystem* fs = nullptr, bool sync = true);
// SetHighWatermark's step: stores `offset` as above only when it is above
// the stored high watermark (or none is stored), from one read of the
// file. Returns whether it stored.
Result<bool> RaiseHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                int64_t offset, FileSystem* fs = nullptr, bool sync = true);

// The epoch fence of a replica's log (§17.3 step 2, R56): the leader epoch
// below which no writer of the partition appends nor begins an epoch. A
// follower stores the epoch of the leader it follows, under the writer
// lock, before it compares its log with the leader's; a writer checks it
// in the critical section of each leader append, so a deposed leader that
// passed its leadership check before an election appends nothing after
// the follower looked at its log.
extern const char* const kLeaderEpochFenceFile;
// Parses its bytes (R35, R56); `file` names it in errors.
Result<int32_t> DecodeLeaderEpochFence(std::string_view bytes, const std::string& file);
std::string EncodeLeaderEpochFence(int32_t epoch);
// The fence of the partition directory `dir_fd`: -1 when the file is missing.
Result<int32_t> LoadLeaderEpochFence(int dir_fd, FileSystem* fs = nullptr);
// Replaces it with `epoch` (R39); with `sync` false, without fsync.
Status StoreLeaderEpochFence(int dir_fd, int32_t epoch, FileSystem* fs = nullptr, bool sync = true);

// The topic and partition a partition directory's name `<topic>-<n>`
// (R12) stands for; nullopt for any other name.
std::optional<std::pair<std::string, int32_t>> PartitionOfDirName(std::string_view name);
// The same for a partition directory's path (its last component; "." is the
// working directory).
std::optional<std::pair<std::string, int32_t>> PartitionOfDirectory(const std::string& path);

// Reads a checkpoint by path (mq-inspect): by its file name, the
// leader-epoch or replication-offset layout; the partition a
// replication-offset checkpoint must name comes from its directory's name.
Result<LeaderEpochCache> ReadLeaderEpochCheckpointFile(const std::string& path);
Result<std::optional<HighWatermarkEntry>> ReadReplicationOffsetCheckpointFile(
    const std::string& path);
// The same for a `high-watermark` file (R61): the current copy's entry,
// its sequence and index.
Result<HighWatermarkFile> ReadHighWatermarkFileByPath(const std::string& path);

}  // namespace mq
