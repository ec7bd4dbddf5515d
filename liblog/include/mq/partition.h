// A partition's log: a directory of segments (format-spec §2, §6-§10).
//
// Writers and readers are separate objects:
//  - PartitionWriter appends. Any number of processes may hold one for the
//    same partition: each Append() takes the partition's writer lock
//    (flock on `writer.lock`, released by the kernel if the holder dies),
//    catches up with what other writers appended, writes, and publishes the
//    new committed end in the `state` file before releasing the lock.
//  - PartitionReader takes no lock. It reads only up to the committed end
//    published in `state`, so it never sees a partially written batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mq/batch.h"
#include "mq/status.h"

namespace mq {

class FileSystem;       // mq/file.h: the seam tests use for fault injection
struct EpochEndOffset;  // mq/replica_checkpoint.h

enum class Durability : uint8_t {
  kNone,        // page cache only; fsync on Close()
  kEveryBatch,  // fsync before Append() returns (one fsync covers the whole call)
  kInterval,    // fsync when flush_interval_ms has passed since the last one
};

// How readers and recovery check offsets across batches and segments (R10, R11, R26).
enum class OffsetPolicy : uint8_t {
  kContiguous,   // cleanup.policy=delete: each batch starts one past the last (R26)
  kGapsAllowed,  // cleanup.policy=compact, or unknown: offsets only increase (R10, R11)
};

struct LogConfig {
  uint64_t segment_bytes = 1ull << 30;          // roll when a batch would pass this
  int64_t segment_ms = 7LL * 24 * 3600 * 1000;  // roll when the segment is older
  uint32_t index_interval_bytes = 4096;         // bytes between index entries
  Durability durability = Durability::kNone;
  int64_t flush_interval_ms = 1000;  // for kInterval
  // With false, Close() neither fsyncs nor advances the recovery point (for
  // page-cache durability: the next writer to open re-validates the
  // unsynced tail, R25). The producer snapshot is still written, unsynced
  // too (producer.md §10.2).
  bool sync_on_close = true;
  // Page-cache durability: no fsync at all, not even of the files that
  // create a partition (segment.md R34).
  bool page_cache_only() const { return durability == Durability::kNone && !sync_on_close; }
  DecodeLimits limits;
  // Recovery holds the batches it validates to R26 as well with
  // kContiguous (DataDir::LogConfigFor: topics with cleanup.policy=delete).
  OffsetPolicy offsets = OffsetPolicy::kGapsAllowed;
  FileSystem* fs = nullptr;  // nullptr = the real file system
  // The leader epoch a replicated partition's leader stamps into every batch
  // it appends (partitionLeaderEpoch), recorded in the partition's
  // leader-epoch-checkpoint (format-spec/replication.md). An append with an
  // epoch below the partition's latest is refused (kFenced): that writer's
  // leadership was replaced. -1: unreplicated, batches keep -1 and no
  // checkpoint is written.
  int32_t leader_epoch = -1;
};

// One problem found (and, for tails, repaired) while opening or verifying.
struct Problem {
  // What a problem means (format-spec/segment.md §12). kCorruption: the data
  // breaks a rule. kNeedsRecovery (R28): a state a crash legally leaves,
  // which the next writer to open the partition repairs (recovery, §12).
  // kNote: legal as it is (R27: unpublished bytes past the committed end).
  enum class Kind : uint8_t { kCorruption, kNeedsRecovery, kNote };
  std::string file;
  uint64_t position = 0;
  std::string rule;  // "R4", or "torn-tail", "garbage-tail", "index-rebuilt"
  std::string detail;
  Kind kind = Kind::kCorruption;
};

struct RecoveryReport {
  uint64_t segments_checked = 0;
  uint64_t batches_checked = 0;
  uint64_t bytes_truncated = 0;
  uint64_t indexes_rebuilt = 0;
  std::vector<Problem> repaired;  // torn/garbage tails truncated, indexes rebuilt
};

struct AppendResult {
  int64_t base_offset = -1;  // offset of the first record appended
  int64_t last_offset = -1;  // offset of the last record appended
  int32_t batches = 0;
  bool duplicate = false;  // idempotent producer: already in the log, not appended
};

// How PartitionWriter::DeleteSegmentsBefore moves the log start
// (format-spec/retention.md).
struct SegmentDeletion {
  // The log start becomes `offset` itself (not past the log end), not the
  // first remaining segment's base: kafka-delete-records.
  bool exact_start = false;
  // R76: with `offset` at or past the log end, the active segment (when it
  // holds records) is rolled first, then deleted with the others.
  bool roll_active = false;
  // R92: with `offset` past the log end (a follower behind its leader's
  // log start), the log is emptied and starts over at `offset`: a new
  // empty active segment there, the log start and end `offset`.
  bool start_over = false;
};

class PartitionWriter {
 public:
  // Opens (creating if `create`) the partition directory `dir` and recovers
  // it: validates every batch after the recovery point, truncates a torn or
  // garbage tail of the last segment (reported in `report`), rebuilds missing
  // or inconsistent indexes. A corrupt batch followed by valid data is not
  // repaired: Open fails with kCorruption naming file, position and rule.
  static Result<std::unique_ptr<PartitionWriter>> Open(const std::string& dir,
                                                       const LogConfig& config, bool create,
                                                       RecoveryReport* report);
  virtual ~PartitionWriter();

  // Appends one or more complete encoded batches, back to back, as built by
  // BatchBuilder. Assigns offsets (rewrites each baseOffset) and leader epoch,
  // then makes them visible to readers. With kEveryBatch the data is fsynced
  // before this returns; a failed fsync is returned and never retried.
  // Every batch is validated first (R1-R7); `crc_check` kAlreadyComputed
  // skips only the CRC, for batches BatchBuilder::Finish just built in this
  // process (bytes from a file, a pipe or a peer are always kVerify).
  Result<AppendResult> Append(std::span<std::byte> batches, CrcCheck crc_check = CrcCheck::kVerify);

  // A follower's append: batches exactly as the leader wrote them (base
  // offsets, leader epochs, CRCs and producer fields kept; nothing is
  // re-encoded or decompressed). Each batch passes R1-R7 with its CRC; the
  // first starts at the log end, each later one after the one before (R10;
  // R26 for a delete-policy topic); their leader epochs never go back
  // (R37): a batch whose epoch is above the latest in the checkpoint starts
  // that epoch there. Producer state is replayed, not checked (the leader
  // checked it). Any violation is refused before anything is written:
  // kOutOfOrder for offsets that do not continue the log, kCorruption for
  // an epoch that goes back.
  Result<AppendResult> AppendReplicated(std::span<const std::byte> batches,
                                        CrcCheck crc_check = CrcCheck::kVerify);

  // Records the high watermark (replication.md §16.3): the offset below
  // which every record is on every in-sync replica. It lives in its own
  // checkpoint, replaced atomically and fsynced (R39; not fsynced with
  // page-cache durability, LogConfig::page_cache_only), never in the state
  // file a recovery rebuilds from the log, and is published so that
  // readers bounded by it (ReadOptions::bound_by_high_watermark) wake.
  // Never above the log end (kInvalidArgument); a value below the stored
  // one changes nothing (it only moves forward). The partition's directory
  // must be named `<topic>-<n>`.
  Status SetHighWatermark(int64_t offset);

  // Makes everything appended so far durable (fsync data, and the directory
  // after a segment was created), then advances the recovery point.
  Status Flush();
  // Removes every record at or above `offset` (replication needs it).
  // Batches are removed whole: one that straddles `offset` goes entirely, so
  // the log end offset becomes its base offset. Readers positioned past the
  // cut find their offset again. The leader epochs that start at or past
  // the new end leave the checkpoint, also when nothing is cut (`offset`
  // is the log end: an epoch begun there and never written in).
  // `leader_epoch` ≥ 0: a follower's truncation, decided against the
  // leader of that epoch (replication.md §17.3 step 2): refused (kFenced,
  // nothing cut) when the log's latest epoch or its epoch fence (R56) is
  // above it, i.e. a newer leader wrote here or a newer follower fenced
  // the log since the decision.
  Status TruncateTo(int64_t offset, int32_t leader_epoch = -1);
  // Deletes whole segments whose records are all below `offset`; never the
  // active segment. The log start offset becomes the base offset of the
  // first remaining segment, published and made durable before any file is
  // renamed `.deleted` (format-spec/retention.md, R73, R77).
  Status DeleteSegmentsBefore(int64_t offset);
  // The same, as SegmentDeletion says: the log start set to `offset`
  // exactly (delete-records), the active segment rolled first.
  Status DeleteSegmentsBefore(int64_t offset, const SegmentDeletion& how);
  // Flushes and releases. Called by the destructor if not called.
  Status Close();

  int64_t log_start_offset() const;
  int64_t log_end_offset() const;

  // Replication (format-spec/replication.md §17).
  // Catches up with what other writers of the partition published
  // (log_start_offset() and log_end_offset() are then current).
  Status Refresh();
  // The latest leader epoch the log holds (-1: none).
  Result<int32_t> LatestEpoch();
  // OffsetForLeaderEpoch (LeaderEpochCache::EndOffsetFor) against this log.
  Result<EpochEndOffset> EndOffsetFor(int32_t epoch);
  // This writer leads in `epoch` from now on: the epoch starts at the log
  // end (stored in the checkpoint) and every later Append stamps it. The
  // latest epoch again is a no-op; a lower one is kFenced.
  Status BeginLeaderEpoch(int32_t epoch);
  // This log follows the leader of `epoch` from now on (replication.md
  // §17.3 step 2, R56): stores the epoch fence, durable and published
  // before it returns, so that no writer of an older leader epoch appends
  // after it (Append and BeginLeaderEpoch refuse them, kFenced, in the
  // critical section of the write). A fence at or below the stored one
  // changes nothing. Appends of replicated batches are not fenced.
  Status FenceEpochsBelow(int32_t epoch);

  struct Impl;

 private:
  explicit PartitionWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A position in the log: which segment file and where in it.
struct LogPosition {
  std::string file;
  uint64_t position = 0;
};

struct ReadOptions {
  DecodeLimits limits;
  OffsetPolicy offsets = OffsetPolicy::kContiguous;
  FileSystem* fs = nullptr;  // nullptr = the real file system
  // Hand out only records below the partition's high watermark (its
  // replication-offset-checkpoint; none: nothing is readable), as the
  // readers that serve consumers of a replicated topic must: a record above
  // it may still be truncated by a failover. end_offset() is then the high
  // watermark when it is below the committed end, and WaitForAppend wakes
  // when it moves.
  bool bound_by_high_watermark = false;
};

// Reads a partition up to its committed end. It hands out each committed
// batch once, in offset order: a batch whose offsets do not continue the
// ones before it (R10, R11, R26), or bytes that end inside a batch below the
// committed end, stop it with kCorruption naming file, byte position and
// rule (as VerifyPartition reports the same bytes). Indexes are hints: an
// entry the log contradicts is ignored, the log scanned, and a warning kept
// for TakeWarnings().
// What a reader knew of the log where it stopped, for a reader opened later
// to go on from there (PartitionReader::SeekAfter): the leader epochs of the
// batches it handed out, each with the offset where it began handing that
// epoch out (ascending; ReaderResumeOffset), and the state file's
// `rewrites` counter it was positioned at (nullopt: no state file): the
// truncation history (segment.md §6.6, R59) names the cuts published after
// it.
struct ReaderTrail {
  std::vector<std::pair<int32_t, int64_t>> epochs;
  std::optional<uint32_t> rewrites;
};

// An offset a reader was asked for (by a seek, or as the next to read)
// that retention had deleted (format-spec/retention.md), and the log start
// it went on at instead.
struct OffsetOutOfRange {
  int64_t offset = 0;
  int64_t log_start_offset = 0;
  // kNotFound: "<dir>: offset N is out of range: retention deleted the
  // offsets below the log start S".
  Status status(const std::string& dir) const;
};

class PartitionReader {
 public:
  static Result<std::unique_ptr<PartitionReader>> Open(const std::string& dir,
                                                       const DecodeLimits& limits = {});
  static Result<std::unique_ptr<PartitionReader>> Open(const std::string& dir,
                                                       const ReadOptions& options);
  virtual ~PartitionReader();

  int64_t log_start_offset();
  // The committed end (one past the last readable offset), as published now.
  int64_t end_offset();
  // The state file's `rewrites` counter as published now (segment.md §9.2:
  // bumped by each truncation and recovery, so bytes read below the
  // committed end stay the log's while it holds); nullopt when there is no
  // state file to read it from.
  std::optional<uint32_t> rewrites();

  // Positions the reader at the batch holding `offset` (binary search over
  // segments, then the offset index, then a short scan). Below the log start
  // it positions at the log start; at or past the end, at the end.
  Status Seek(int64_t offset);
  // Seek(offset) for a reader that goes on where it (or a reader before it,
  // since closed) stopped: after a batch of leader epoch `epoch` (-1: none
  // known) ending at or after `offset`. Validated against the log as it is
  // now: when the log ends below `offset`, or `epoch` ends below it in the
  // leader-epoch checkpoint (KIP-320: another leader's batches took those
  // offsets since), it positions there instead and TakeCut() returns it.
  Status SeekAfter(int64_t offset, int32_t epoch);
  // SeekAfter for a reader that goes on where `trail` (trail() of a reader
  // since closed, its epochs up to `offset`) left off: it goes back over
  // the epochs it handed out as a rewrite does, and when `rewrites` moved
  // since, to the lowest truncation recorded since (the entries of the
  // history that `trail.cuts` does not hold) below `offset`.
  Status SeekAfter(int64_t offset, const ReaderTrail& trail);
  // What the reader knows of the log where it is (SeekAfter).
  ReaderTrail trail() const;
  // Positions at the first batch whose max timestamp is >= `timestamp_ms`.
  Status SeekTimestamp(int64_t timestamp_ms);
  // The next committed batch, or nullopt at the committed end. The view
  // stays valid until the next call. A batch that fails validation is a
  // kCorruption error naming file, position and rule; SkipCorrupt() moves on.
  // Never bytes a truncation cut: when rewrites() moved since the reader
  // positioned, the batch read (or read ahead, or held above the high
  // watermark) is dropped and the reader finds the offset after the last
  // batch it returned (or the offset sought) again in the log as it is now,
  // no further than the lowest cut the truncation history recorded since it
  // positioned (segment.md §9.4, §6.6). Nullopt too, before a batch at or
  // past the cut of a truncation under way when it positioned (its history
  // entry written, its rewrites value not published yet), until rewrites()
  // moves.
  Result<std::optional<BatchView>> Next();
  // R91 (format-spec/retention.md): the least offset of the batch last
  // returned by Next() that the reader was asked for: the offset sought,
  // or the log start it went on at (a seek below it, or segments retention
  // deleted while it read), when that lies inside the batch; else the
  // batch's base offset. A batch is handed out whole (one CRC covers its
  // records): whoever hands records out skips those below this offset.
  int64_t first_offset() const;
  // After a kCorruption error from Next(): skips to the next valid batch.
  Status SkipCorrupt();
  // Where the batch last returned by Next() lives.
  LogPosition position() const;

  // Index entries the log contradicted since the last call (rule "R23":
  // the reader scanned the log instead).
  std::vector<Problem> TakeWarnings();
  // The least offset since the last call at which a truncation cut
  // batches the reader had returned (or the offset it sought), and where it
  // went on reading: the log's end after the cut, where the leader epochs
  // of the batches returned end in the leader-epoch checkpoint (KIP-320:
  // another leader's batches may hold those offsets now), or the lowest
  // cut the truncation history recorded since it positioned. nullopt
  // when nothing was cut below the reader's position.
  std::optional<int64_t> TakeCut();
  // Since the last call: the first offset asked for that lay below the log
  // start (a Seek below it, or a segment retention deleted before the
  // reader reached it), and the log start it went on at. nullopt when none.
  std::optional<OffsetOutOfRange> TakeOutOfRange();

  // Blocks until the committed end moves past `known_end` or `timeout_ms`
  // passes (futex on the state file; no sleep-polling). True if it moved,
  // and once for each rewrite (rewrites()) since the reader positioned:
  // Next() then finds its offset again, possibly below (TakeCut).
  // `known_rewrites`: the rewrites counter another reader of the partition
  // is positioned at (positioned_rewrites()); true, once for each rewrite,
  // when the counter is no longer that one (a reader that waits for the
  // reader that reads, as Consumer's waiter threads do).
  bool WaitForAppend(int64_t known_end, int timeout_ms,
                     std::optional<uint32_t> known_rewrites = std::nullopt);
  // The rewrites counter the reader is positioned at: as it was when the
  // reader last sought, or last found its offset again after a rewrite.
  uint32_t positioned_rewrites() const;

  struct Impl;

 private:
  explicit PartitionReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Verifies a whole partition directory without modifying it: every batch
// (CRC, offsets, records), every index against its log. Problems are
// appended to `problems`; returns non-OK only if the directory cannot be read.
// `offsets` is the partition's rule for offset gaps (R26 for delete-policy
// topics); without its topic configuration, kGapsAllowed checks R10/R11 only.
// What a verification read: the evidence behind "ok".
struct VerifyStats {
  uint64_t files = 0;  // segments, indexes and state files read
  uint64_t batches = 0;
  uint64_t records = 0;  // recordsCount of the batches read
  uint64_t bytes = 0;    // bytes of the files read
  uint64_t segments = 0;
};

Status VerifyPartition(const std::string& dir, const DecodeLimits& limits,
                       std::vector<Problem>* problems,
                       OffsetPolicy offsets = OffsetPolicy::kGapsAllowed,
                       VerifyStats* stats = nullptr);

// Whether the replica's partition at `dir` may lead (mq-isr elect): it
// verifies (VerifyPartition) without corruption; what a writer's recovery
// repairs (needs recovery, notes) does not count. The first corruption
// found otherwise, as a kCorruption status naming file, byte position and
// rule. Reads the whole log.
Status VerifyForLeadership(const std::string& dir, const DecodeLimits& limits = {});

// Damage in a replica's log and what a repair cuts (mq-replicate --repair):
// the first corruption VerifyForLeadership finds in a segment's log file,
// and the offset where the valid batches before it end (the end of the
// last batch wholly before the damaged position in that segment, or the
// segment's base). A truncation to `valid_end` removes the damage; the
// follower then fetches the rest from its leader.
struct LogDamage {
  Status corruption;
  int64_t valid_end = 0;
};
// nullopt when the log files verify (damage in other files is not this).
Result<std::optional<LogDamage>> FindLogDamage(const std::string& dir,
                                               const DecodeLimits& limits = {});

}  // namespace mq

namespace mq {
// The last sequence number `producer_id` has in the partition at `dir`, from
// its producer state (nullopt if the producer has appended nothing there).
// mq-produce uses it to resume an interrupted idempotent run.
Result<std::optional<int32_t>> LastProducerSequence(const std::string& dir, int64_t producer_id);

// The last batch `producer_id` appended to the partition at `dir`, found
// through the producer state (snapshot plus replay, as LastProducerSequence)
// and then read alone: nullopt if the producer has appended nothing there.
// `bytes` is the whole encoded batch as the log holds it (parse it with
// BatchView::Parse), empty when retention removed it. mq-consume pipelines
// resume from it (format-spec/pipeline.md).
struct ProducerBatch {
  int64_t base_offset = -1;
  int64_t last_offset = -1;
  int32_t first_sequence = 0;
  int32_t last_sequence = 0;
  std::vector<std::byte> bytes;
};
Result<std::optional<ProducerBatch>> LastProducerBatch(const std::string& dir, int64_t producer_id,
                                                       const ReadOptions& options = {});
}  // namespace mq
