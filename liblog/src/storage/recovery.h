// Recovery of a partition's log at writer open (format-spec/segment.md §12,
// rules R20-R25; the log loader, log_loader.h, runs it), and the truncation
// files and cuts (§6.4-§6.6: R40, R59) that the truncation unit
// (truncation.h) puts together.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/format.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "storage/log_segment.h"

namespace mq {

// What recovery found at the end of the log.
struct RecoveredLog {
  std::vector<int64_t> segments;  // base offsets, ascending; never empty
  int64_t log_end_offset = 0;
  uint64_t active_size = 0;  // valid bytes of the last segment
};

// Validates every batch from the segment holding `recovery_point` to the
// end (R1-R6, R10, R11), truncates a torn (R20) or garbage (R21) tail of the
// last segment, fails with kCorruption on a corrupt batch that valid data
// follows or that is not in the last segment (R22), and rewrites indexes
// that differ from the log (R23). Earlier segments get a cheap index check.
// `segments` (ascending, possibly empty) are the .log files present; with
// none, an empty segment at `empty_base` is created. With `after_reboot`
// (no state file published on this boot), R88: the tail rules apply to the
// last segment holding bytes, and when they cut it the empty segments
// rolled after it are removed (a power loss took a rolled segment's
// unsynced appends, segment.md §9.6).
Result<RecoveredLog> RecoverLog(int dir_fd, const LogConfig& config, std::vector<int64_t> segments,
                                int64_t recovery_point, int64_t empty_base, bool after_reboot,
                                RecoveryReport* report);

// The header walks (ForEachHeader, ForEachHeaderFrom), IndexLooksRight and
// RebuildIndexes are the segment's read side: log_segment.h.

// R40: a truncation is written down before the log changes (segment.md
// §6.5). `truncate-to` holds the log end offset the truncation leaves; the
// next writer to open the partition completes it before anything else.
// Writes the intent atomically (format-spec/layout.md §1.5; with `sync`
// fsynced, and the directory too).
Status WriteTruncateIntent(int dir_fd, FileSystem* fs, int64_t end, bool sync);
// The intent's offset, nullopt when there is none; kCorruption naming the
// file, byte position and R40 when it is not one.
Result<std::optional<int64_t>> ReadTruncateIntent(int dir_fd, FileSystem* fs,
                                                  const std::string& dir);
// Removes the intent (with `sync`, durably).
Status RemoveTruncateIntent(int dir_fd, FileSystem* fs, bool sync);

// R59: the truncation history (segment.md §6.6). `truncations` lists the
// truncations that cut records, each as the log end it left, when (ms
// since the epoch), and the state file's `rewrites` value that publishes
// it, so that a consumer group that committed past a cut before it was
// made finds where the log changed under it, even once the log has grown
// past the cut again, and a reader positioned at a `rewrites` value knows
// exactly the cuts made since (§9.4).
// At most format::kMaxTruncations entries are kept (the oldest go first).
struct TruncationRecord {
  int64_t end = 0;      // the log end offset the truncation left
  int64_t time_ms = 0;  // when it was made
  // The `rewrites` value whose publication makes the cut (§9.2); none in
  // an entry written before entries carried it.
  std::optional<uint32_t> rewrites;
  uint64_t position = 0;  // where its line starts in the file read (0: not read from one)
};
// Whether `rewrites` comes after `seen` in the counter's order (serial
// number arithmetic: the 32-bit counter wraps).
inline bool RewritesAfter(uint32_t rewrites, uint32_t seen) {
  return static_cast<int32_t>(rewrites - seen) > 0;
}
// The entries, oldest first (none when the file is missing); kCorruption
// naming the file, byte position and R59 when it breaks the rule.
Result<std::vector<TruncationRecord>> ReadTruncations(int dir_fd, FileSystem* fs,
                                                      const std::string& dir);
// Adds a truncation to `end` at `time_ms`, made by the publication of
// `rewrites`: the entries ending at or past `end` go (the new one covers
// them), the oldest go past format::kMaxTruncations, and the file is replaced
// atomically (with `sync`, durably).
Status RecordTruncation(int dir_fd, FileSystem* fs, const std::string& dir, int64_t end,
                        int64_t time_ms, uint32_t rewrites, bool sync);
// The lowest log end left by the entries published after `seen` (their
// `rewrites` after it): the cuts made since a reader read `seen`, and those
// under way (written, not published yet). Entries without a `rewrites`
// value were made before any reader of this format positioned.
std::optional<int64_t> LowestCutAfter(const std::vector<TruncationRecord>& history, uint32_t seen);
// The least log end a truncation recorded at or after `since_ms` left, if
// it is below `offset`: where the log changed under a position committed
// at `since_ms` (the entries' ends increase with their times, so that is
// the first entry at or after it).
std::optional<int64_t> CutBelowSince(const std::vector<TruncationRecord>& history, int64_t offset,
                                     int64_t since_ms);

// Where a truncation to `offset` cuts the log made of `segments`
// (ascending, not empty): every batch holding an offset >= `offset` goes,
// whole (§6.4). Damage in the kept segment's log past a batch that goes
// goes with it; damage right after the batches kept goes too when no
// valid batch follows it (a garbage tail, R21), else it is returned
// (kCorruption, R22).
struct LogCut {
  int64_t keep = 0;       // the last segment that keeps data (or the first)
  uint64_t position = 0;  // its new size: a batch boundary
  int64_t end = 0;        // the log end offset left
};
Result<LogCut> FindCut(int dir_fd, FileSystem* fs, const DecodeLimits& limits,
                       const std::vector<int64_t>& segments, int64_t offset);
// Applies `cut`: removes the segments after `cut.keep` (newest first), cuts
// its log, rebuilds its indexes, removes producer snapshots past the new
// end; with `sync` every change is durable when it returns. Idempotent: a
// crash inside it is completed by running it again.
Status ApplyCut(int dir_fd, FileSystem* fs, const LogConfig& config,
                const std::vector<int64_t>& segments, const LogCut& cut, bool sync);

}  // namespace mq
