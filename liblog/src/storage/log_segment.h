// One segment of a partition's log (format-spec/segment.md §6-§8): the
// .log, .index and .timeindex files.
// Write side, a LogSegment as its writer holds it: the index builder, and
// what is done to the files: create, open (restoring the index state, R25),
// append, seal at a roll, cut, sync. The partition writer
// (partition_writer.cc) composes segments; it owns the lock, the committed
// state and the producer table.
// Read side, for a segment named by its base in a partition directory with
// nothing held open: index look-ups (the indexes are hints, derived data:
// an entry is believed once the batch it names checks out), header walks,
// the cheap index check and the index rebuild of recovery.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "mq/file.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "storage/offset_index.h"

namespace mq {

class LogSegment {
 public:
  // Segment `base` created empty: files a writer that died before
  // publishing it may have left under its name are emptied.
  static Result<std::unique_ptr<LogSegment>> Create(FileSystem* fs, int dir_fd,
                                                    const LogConfig& config, int64_t base);

  // Segment `base` whose first `size` bytes are committed and whose
  // committed offsets end before `end_offset`. Index entries past the
  // committed end (an append that was never published) are dropped, then
  // the batches after the last indexed one are indexed. `log` may come open
  // already. With `check_log_size` (the log's size before it was cut to
  // `size`) the indexes first get the cheap checks of R25 (R27: entries
  // past the committed end are skipped); when those fail the result is null
  // and nothing was changed.
  static Result<std::unique_ptr<LogSegment>> Open(FileSystem* fs, int dir_fd,
                                                  const LogConfig& config, int64_t base,
                                                  uint64_t size, int64_t end_offset,
                                                  std::unique_ptr<File> log = nullptr,
                                                  std::optional<uint64_t> check_log_size = {});

  int64_t base() const { return ib_.base(); }
  File* log() { return log_.get(); }

  // Whether a batch `h` that would start at byte `pos` with base offset
  // `base_offset` belongs in a new segment (§6.3): the log would pass
  // segment.bytes, the segment is older than segment.ms, or an offset would
  // not fit the indexes' 32-bit relative offsets. Never for an empty one.
  bool ShouldRoll(const BatchHeader& h, uint64_t pos, int64_t base_offset) const;

  // Accounts for batch `h` written (or about to be) at byte `pos`: stages
  // its index entries (§7.1, §8.1). Flush() writes them.
  void Add(const BatchHeader& h, uint64_t pos);
  // Writes bytes of the log at `pos`.
  Status Write(uint64_t pos, Bytes bytes) { return log_->WriteAt(pos, bytes); }
  // Writes the staged index entries.
  Status Flush();
  // At a roll: writes the staged entries and the final time entry (§8.2),
  // and with `sync` fsyncs the log.
  Status Seal(bool sync);
  // fsync of the three files.
  Status Sync();
  // Cuts the log to `size` bytes (index entries past it are dropped at the
  // next Open; callers that keep using the segment reopen it).
  Status Truncate(uint64_t size) { return log_->Truncate(size); }

  // Whether the batches after offset `offset` take less than `window`
  // bytes of the first `size` bytes of the log, as the offset index shows
  // (an entry within the last `window` bytes for a batch that ends before
  // `offset`). False when the index cannot tell: no such entry. Reads only
  // the index's tail: the entries of the last `window` bytes.
  Result<bool> AfterIsShort(int64_t offset, uint64_t size, uint64_t window);

  // The three file names of segment `base` (.log first).
  static std::vector<std::string> FileNames(int64_t base);
  // Removes the files of segment `base`; a missing file is not an error.
  static Status Remove(FileSystem* fs, int dir_fd, int64_t base);
  // fsync of the files of segment `base` (not open here).
  static Status SyncFiles(FileSystem* fs, int dir_fd, int64_t base);

  // ---- Read side: segment `base` in `dir_fd` (its index files are read
  // whole; one that cannot be read or is larger than any index of a valid
  // segment has no entries).
  // The offset index's entry with the largest offset <= `offset`.
  static std::optional<OffsetIndexEntry> FindOffsetEntry(FileSystem* fs, int dir_fd, int64_t base,
                                                         int64_t offset);
  // The time index's last entry (§8.2: a rolled segment's largest
  // timestamp); with `at`, also its byte position in the file.
  static std::optional<TimeIndexEntry> LastTimeEntry(FileSystem* fs, int dir_fd, int64_t base,
                                                     uint64_t* at = nullptr);
  // The time index's entry before the first whose timestamp is >= `timestamp`.
  static std::optional<TimeIndexEntry> TimeEntryBelow(FileSystem* fs, int dir_fd, int64_t base,
                                                      int64_t timestamp);
  // Replaces both index files of segment `base` (write, fsync, rename).
  static Status WriteIndexFiles(FileSystem* fs, int dir_fd, int64_t base,
                                const std::vector<std::byte>& offset_index,
                                const std::vector<std::byte>& time_index);

 private:
  LogSegment(const LogConfig& config, int64_t base)
      : ib_(base, config.index_interval_bytes),
        segment_ms_(config.segment_ms),
        segment_limit_(SegmentLimit(config)) {}
  static uint64_t SegmentLimit(const LogConfig& config);
  // Restores the index state from the files (Open's work); false when a
  // `check_log_size` check fails.
  Result<bool> Restore(FileSystem* fs, int dir_fd, const LogConfig& config, uint64_t size,
                       int64_t end_offset, std::optional<uint64_t> check_log_size);

  std::unique_ptr<File> log_, index_, timeindex_;
  IndexBuilder ib_;
  int64_t segment_ms_;
  uint64_t segment_limit_;
  int64_t first_max_ts_ = -1;                     // first batch's max timestamp: the segment's age
  std::vector<std::byte> offset_buf_, time_buf_;  // staged index entries
};

// Calls `fn` for the header of every batch in segment `base` from byte
// `from` to byte `to` (headers only: the batches were validated when
// written). Stops at the first batch that is not complete.
Status ForEachHeader(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                     uint64_t from, uint64_t to,
                     const std::function<void(const BatchHeader&, uint64_t)>& fn);

// ForEachHeader for the batches of segment `base` that hold offset
// `offset` or later (some before it may be passed too): starts at the
// offset index's largest entry below `offset` when the batch it names
// checks out (the index is derived data, a hint here), else at byte 0.
Status ForEachHeaderFrom(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                         int64_t offset, uint64_t to,
                         const std::function<void(const BatchHeader&, uint64_t)>& fn);
// Both, reading segment `base`'s log through `log` (open on it already;
// null: opened here).
Status ForEachHeader(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                     File* log, uint64_t from, uint64_t to,
                     const std::function<void(const BatchHeader&, uint64_t)>& fn);
Status ForEachHeaderFrom(int dir_fd, FileSystem* fs, const DecodeLimits& limits, int64_t base,
                         File* log, int64_t offset, uint64_t to,
                         const std::function<void(const BatchHeader&, uint64_t)>& fn);

// R25's cheap check of a rolled segment's indexes: sizes are multiples of
// the entry size, the last time entry's offset lies in [base, next_base),
// and the last offset entry points at a batch with that last offset. (The
// active segment's get the same checks in PartitionView::OpenActive.)
// Index files that cannot be mapped are not right (false); a failure to
// read the log is returned.
Result<bool> IndexLooksRight(int dir_fd, const LogConfig& config, int64_t base, int64_t next_base);

// Rebuilds both indexes of segment `base` from its first `size` bytes and
// replaces the files (write, fsync, rename).
Status RebuildIndexes(int dir_fd, FileSystem* fs, const LogConfig& config, int64_t base,
                      uint64_t size, bool rolled);

}  // namespace mq
