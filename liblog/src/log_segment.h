// One segment of a partition's log as its writer holds it (format-spec/
// segment.md §6-§8): the .log, .index and .timeindex files, the index
// builder, and what is done to them: create, open (restoring the index
// state, R25), append, seal at a roll, cut, sync. The partition writer
// (partition_writer.cc) composes segments; it owns the lock, the committed
// state and the producer table.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mq/file.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "offset_index.h"

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

 private:
  LogSegment(const LogConfig& config, int64_t base)
      : ib_(base, config.index_interval_bytes), segment_ms_(config.segment_ms),
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
  int64_t first_max_ts_ = -1;  // first batch's max timestamp: the segment's age
  std::vector<std::byte> offset_buf_, time_buf_;  // staged index entries
};

}  // namespace mq
