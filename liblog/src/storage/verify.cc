// Verification without modification: VerifyFile and VerifyPartition.
// Every problem names file, byte position and rule.
#include <algorithm>
#include <climits>
#include <optional>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"
#include "replication/verify_replica_files.h"
#include "storage/offset_index.h"
#include "storage/offset_order.h"
#include "storage/recovery.h"
#include "storage/segment.h"
#include "storage/state_file.h"
#include "storage/verify.h"
#include "storage/writer_lock.h"

namespace mq {

// segment_scanner.cc: a file named by path, opened and stat'ed through `fs`.
Result<std::unique_ptr<File>> OpenFileByPath(const std::string& path, FileSystem* fs);
Result<FileInfo> StatByPath(const std::string& path, FileSystem* fs);

namespace {

struct BatchInfo {
  uint64_t position;
  uint64_t end;
  int64_t base_offset;
  int64_t last_offset;
  int64_t max_timestamp;
  int32_t leader_epoch;  // partitionLeaderEpoch (R37)
};

bool EndsWith(const std::string& s, const char* suffix) {
  std::string suf = suffix;
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void Add(std::vector<Problem>* problems, const Status& s, const std::string& file, uint64_t pos) {
  if (s.code() == Code::kCorruption)
    problems->push_back({s.file().empty() ? file : s.file(), s.position(), s.rule(), s.message()});
  else
    problems->push_back({file, pos, s.code() == Code::kUnsupported ? "R5" : "R8", s.message()});
}

// Checks the records of batch `b` at `pos`; a problem is added, never
// returned, except running out of memory.
Status CheckRecords(const BatchView& b, uint64_t pos, const std::string& path,
                    const DecodeLimits& limits, std::vector<std::byte>* scratch,
                    std::vector<Problem>* problems) {
  auto records = RecordReader::Open(b, scratch, limits, path, pos);
  if (!records) {
    if (records.error().code() == Code::kNoMemory) return records.error();
    Add(problems, records.error(), path, pos);
    return Status::Ok();
  }
  for (;;) {
    auto r = records->Next();
    if (!r) {
      Add(problems, r.error(), path, pos);
      break;
    }
    if (!*r) break;
  }
  return Status::Ok();
}

// Counts one .log of `size` bytes in the evidence.
void CountSegment(VerifyStats* stats, uint64_t size) {
  if (!stats) return;
  ++stats->files;
  ++stats->segments;
  stats->bytes += size;
}

// Judges the header of the batch at `pos` (offset order, R26 with
// `contiguous`, the committed end R27) and records it in `batches`.
void CheckBatchHeader(const BatchHeader& h, uint64_t pos, const std::string& path, int64_t base,
                      int64_t* prev, uint64_t committed, bool contiguous,
                      std::vector<Problem>* problems, std::vector<BatchInfo>* batches,
                      VerifyStats* stats) {
  for (OffsetBreach& breach :
       BatchOffsetBreaches(h, {base, *prev, false},
                           contiguous ? OffsetPolicy::kContiguous : OffsetPolicy::kGapsAllowed))
    problems->push_back({path, pos, breach.rule, std::move(breach.detail)});
  if (pos + h.size_bytes() > committed)
    problems->push_back({path, committed, "R27",
                         fmt::format("the committed end is inside the "
                                     "batch at {}",
                                     pos)});
  *prev = std::max(*prev, h.last_offset());
  batches->push_back({pos, pos + h.size_bytes(), h.base_offset, h.last_offset(), h.max_timestamp,
                      h.partition_leader_epoch});
  if (stats) {
    ++stats->batches;
    stats->records += static_cast<uint64_t>(std::max(h.records_count, 0));
  }
}

// R1: bytes after the last batch that hold no complete batch, unless the
// error there was reported or they were never published.
void CheckTornTail(const SegmentScanner& scanner, const std::string& path,
                   std::optional<uint64_t> last_error, uint64_t committed,
                   std::vector<Problem>* problems) {
  uint64_t trailing = scanner.trailing_bytes();
  uint64_t at = scanner.file_size() - trailing;
  if (trailing > 0 && last_error != at && at < committed)
    problems->push_back({path, at, "R1",
                         fmt::format("{} bytes at the end hold no complete batch "
                                     "(torn tail)",
                                     trailing)});
}

// Checks every batch and record of a .log; fills `batches` for index checks.
// With `committed` (R27: a committed end published on this boot), the bytes
// from `committed` on were never published: they are not judged, and
// *unpublished receives their count.
// With `contiguous` (a delete-policy partition) the batches must also
// continue each other's offsets from the segment's base (R26).
Status VerifyLog(const std::string& path, const DecodeLimits& limits,
                 std::vector<Problem>* problems, std::vector<BatchInfo>* batches,
                 uint64_t committed = UINT64_MAX, uint64_t* unpublished = nullptr,
                 bool contiguous = false, VerifyStats* stats = nullptr, FileSystem* fs = nullptr) {
  auto scanner = SegmentScanner::Open(path, limits, fs);
  if (!scanner) return scanner.error();
  const uint64_t size = (*scanner)->file_size();
  CountSegment(stats, size);
  auto base = SegmentBaseOffset(path);
  if (size > format::kMaxSegmentBytes)
    problems->push_back({path, format::kMaxSegmentBytes, "R10", "file is over 2^31-1 bytes"});
  int64_t prev = -1;
  std::vector<std::byte> scratch;
  std::optional<uint64_t> last_error;
  if (unpublished) *unpublished = size > committed ? size - committed : 0;
  for (;;) {
    auto next = (*scanner)->Next();
    const bool at_end = next && !*next;
    if (!at_end && (*scanner)->position() >= committed)
      return Status::Ok();  // past the committed end: never published
    if (!next) {
      if (next.error().code() != Code::kCorruption) return next.error();
      Add(problems, next.error(), path, (*scanner)->position());
      last_error = (*scanner)->position();
      continue;
    }
    if (!*next) break;
    const BatchView& b = **next;
    uint64_t pos = (*scanner)->position();
    CheckBatchHeader(b.header(), pos, path, base ? *base : -1, &prev, committed, contiguous,
                     problems, batches, stats);
    MQ_RETURN_IF_ERROR(CheckRecords(b, pos, path, limits, &scratch, problems));
  }
  CheckTornTail(**scanner, path, last_error, committed, problems);
  return Status::Ok();
}

Result<std::vector<BatchInfo>> SiblingBatches(const std::string& index_path, const char* suffix,
                                              const DecodeLimits& limits, FileSystem* fs) {
  std::string log =
      index_path.substr(0, index_path.size() - std::string(suffix).size()) + format::kLogSuffix;
  std::vector<BatchInfo> batches;
  std::vector<Problem> ignored;  // the .log's own problems are its own report
  MQ_RETURN_IF_ERROR(
      VerifyLog(log, limits, &ignored, &batches, UINT64_MAX, nullptr, false, nullptr, fs));
  return batches;
}

// Where an index stops being judged: entries whose offset is `offset` or
// more belong to log bytes that are not judged either. With kNote they were
// written by an append that was never published (R27) and are skipped; with
// kNeedsRecovery they point past the valid end of a log recovery will cut,
// and rebuild the index of (R23), which one problem of that kind says.
struct IndexTail {
  int64_t offset = INT64_MAX;
  Problem::Kind kind = Problem::Kind::kNote;
};

// True (stop) when entry `i` at byte `at` is in the tail.
bool InTail(const IndexTail& tail, int64_t offset, size_t i, uint64_t at, const std::string& path,
            std::vector<Problem>* problems) {
  if (offset < tail.offset) return false;
  if (tail.kind == Problem::Kind::kNeedsRecovery)
    problems->push_back({path, at, "R23",
                         fmt::format("entry {} on point past the valid end of the log; the next "
                                     "writer rebuilds the index",
                                     i),
                         Problem::Kind::kNeedsRecovery});
  return true;
}

Status VerifyOffsetIndex(const std::string& path, const std::vector<BatchInfo>& known,
                         std::vector<Problem>* problems, FileSystem* fs,
                         const IndexTail& tail = {}) {
  auto entries = ReadOffsetIndexFile(path, fs);
  if (!entries) {
    if (entries.error().code() != Code::kCorruption) return entries.error();
    Add(problems, entries.error(), path, 0);
    return Status::Ok();
  }
  for (size_t i = 0; i < entries->size(); ++i) {
    const auto& e = (*entries)[i];
    uint64_t at = i * format::kOffsetIndexEntrySize;
    if (InTail(tail, e.offset, i, at, path, problems)) break;
    if (i > 0 &&
        (e.offset <= (*entries)[i - 1].offset || e.position <= (*entries)[i - 1].position)) {
      problems->push_back({path, at, "R13",
                           fmt::format("entry {} (offset {}, position {}) does not "
                                       "increase",
                                       i, e.offset, e.position)});
      continue;
    }
    auto it = std::lower_bound(known.begin(), known.end(), uint64_t{e.position},
                               [](const BatchInfo& b, uint64_t p) { return b.position < p; });
    if (it == known.end() || it->position != e.position)
      problems->push_back({path, at, "R13",
                           fmt::format("entry {}: no batch starts at position {}", i, e.position)});
    else if (it->last_offset != e.offset)
      problems->push_back({path, at, "R13",
                           fmt::format("entry {}: batch at {} has last offset {}, "
                                       "not {}",
                                       i, e.position, it->last_offset, e.offset)});
  }
  return Status::Ok();
}

Status VerifyTimeIndex(const std::string& path, const std::vector<BatchInfo>& known,
                       std::vector<Problem>* problems, FileSystem* fs, const IndexTail& tail = {}) {
  auto entries = ReadTimeIndexFile(path, fs);
  if (!entries) {
    if (entries.error().code() != Code::kCorruption) return entries.error();
    Add(problems, entries.error(), path, 0);
    return Status::Ok();
  }
  std::vector<int64_t> lasts;
  for (const auto& b : known) lasts.push_back(b.last_offset);
  std::sort(lasts.begin(), lasts.end());
  for (size_t i = 0; i < entries->size(); ++i) {
    const auto& e = (*entries)[i];
    uint64_t at = i * format::kTimeIndexEntrySize;
    if (InTail(tail, e.offset, i, at, path, problems)) break;
    if (i > 0 && e.timestamp <= (*entries)[i - 1].timestamp)
      problems->push_back(
          {path, at, "R14",
           fmt::format("entry {}: timestamp {} does not increase", i, e.timestamp)});
    else if (i > 0 && e.offset < (*entries)[i - 1].offset)
      problems->push_back(
          {path, at, "R14", fmt::format("entry {}: offset {} decreases", i, e.offset)});
    else if (!std::binary_search(lasts.begin(), lasts.end(), e.offset))
      problems->push_back({path, at, "R14",
                           fmt::format("entry {}: offset {} is not the last offset "
                                       "of a batch",
                                       i, e.offset)});
  }
  return Status::Ok();
}

// Refuses a symlink, FIFO or device in place of a file that a writer opens
// but verify does not read (writer.lock, producer snapshots), as the writer
// does (exit 77): verify never calls a partition ok that a writer refuses.
Status CheckWriterFiles(int dir_fd, FileSystem* fs) {
  auto names = ListNames(dir_fd, {}, fs);
  if (!names) return names.error();
  for (const std::string& name : *names) {
    if (name != kWriterLockName && !EndsWith(name, ".snapshot")) continue;
    // Names the kind and refuses anything but a regular file.
    auto f = fs->Open(dir_fd, name, FileSystem::kRead);
    if (!f && f.error().code() != Code::kNotFound) return f.error();
  }
  return Status::Ok();
}

}  // namespace

// An index or state file read whole: counted in the evidence.
static void CountFile(VerifyStats* stats, const std::string& path, FileSystem* fs) {
  if (stats == nullptr) return;
  auto info = StatByPath(path, fs);
  if (!info) return;
  ++stats->files;
  stats->bytes += info->size;
}

// R59 (segment.md §6.6): the truncation history is well formed, and its
// last cut is not past the log end: the log ended there after that cut and
// only grows until the next cut, which adds an entry. Against a log end
// that is not trusted (a reboot since it was published) a cut past it is
// what the next writer's recovery records a lower cut for. Its last
// rewrites value is one the state file's counter reached, or the next one
// (a truncation under way, or whose writer died before publishing it: the
// next writer publishes it), never one further.
static Status VerifyTruncations(int dir_fd, const std::string& dir, int64_t log_end, bool trusted,
                                std::optional<uint32_t> rewrites, std::vector<Problem>* problems,
                                VerifyStats* stats, FileSystem* fs) {
  const std::string path = dir + "/" + format::kTruncationsName;
  auto history = ReadTruncations(dir_fd, fs, dir);
  if (!history && history.error().code() == Code::kCorruption) {
    problems->push_back({path, history.error().position(), "R59", history.error().message()});
    return Status::Ok();
  }
  if (!history) return history.error();  // a symlink, FIFO or device is refused (exit 77)
  if (history->empty()) return Status::Ok();
  CountFile(stats, path, fs);
  const TruncationRecord& last = history->back();
  if (last.end > log_end)
    problems->push_back(
        {path, last.position, "R59",
         fmt::format("the last cut left the log ending at offset {}, past the log end {}: the "
                     "log only grows after a cut{}",
                     last.end, log_end,
                     trusted ? "" : "; the next writer's recovery records the lower end"),
         trusted ? Problem::Kind::kCorruption : Problem::Kind::kNeedsRecovery});
  if (rewrites && last.rewrites && RewritesAfter(*last.rewrites, *rewrites)) {
    const bool next = *last.rewrites == *rewrites + 1;
    problems->push_back(
        {path, last.position, "R59",
         next ? fmt::format("the last cut is published by rewrites {}, one past the state file's "
                            "{}: a truncation under way, or interrupted before it published; the "
                            "next writer publishes it",
                            *last.rewrites, *rewrites)
              : fmt::format("the last cut is published by rewrites {}, past the state file's {} "
                            "and the one a truncation under way publishes: no writer publishes it",
                            *last.rewrites, *rewrites),
         next ? Problem::Kind::kNeedsRecovery : Problem::Kind::kCorruption});
  }
  return Status::Ok();
}

Status VerifyFile(const std::string& path, const DecodeLimits& limits,
                  std::vector<Problem>* problems, VerifyStats* stats, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  if (EndsWith(path, format::kLogSuffix)) {
    std::vector<BatchInfo> batches;
    return VerifyLog(path, limits, problems, &batches, UINT64_MAX, nullptr, false, stats, fs);
  }
  // An index is checked against the batches of its sibling .log.
  const bool time_index = EndsWith(path, format::kTimeIndexSuffix);
  if (time_index || EndsWith(path, format::kIndexSuffix)) {
    auto batches = SiblingBatches(
        path, time_index ? format::kTimeIndexSuffix : format::kIndexSuffix, limits, fs);
    if (!batches) return batches.error();
    CountFile(stats, path, fs);
    return time_index ? VerifyTimeIndex(path, *batches, problems, fs)
                      : VerifyOffsetIndex(path, *batches, problems, fs);
  }
  return Status(Code::kInvalidArgument, path + ": not a .log, .index or .timeindex file");
}

namespace {

// The state file, read first: it says which bytes were published. A state
// file that does not decode needs recovery (R15, rebuilt by R24).
Status ReadPublishedState(int dir_fd, const std::string& dir, std::vector<Problem>* problems,
                          VerifyStats* stats, std::optional<StateFields>* state, FileSystem* fs) {
  std::string state_path = dir + "/" + kStateFileName;
  auto state_file = StateFile::OpenForRead(dir_fd, fs);
  Status state_error = state_file ? Status::Ok() : state_file.error();
  if (state_file) {
    CountFile(stats, state_path, fs);
    auto f = state_file->Read();
    if (f)
      *state = *f;
    else
      state_error = f.error();
  }
  if (state_error.code() == Code::kCorruption)  // a writer died inside Publish, or damage
    problems->push_back({state_path, state_error.position(), "R15",
                         state_error.message() + "; a writer rebuilds it from the log (R24)",
                         Problem::Kind::kNeedsRecovery});
  else if (!state_error.ok() && state_error.code() != Code::kNotFound)
    return state_error;  // a symlink, FIFO or device is refused (exit 77), named with its path
  return Status::Ok();
}

// R40: an interrupted truncation, which the next writer completes.
Status CheckTruncateIntent(int dir_fd, const std::string& dir, std::vector<Problem>* problems,
                           FileSystem* fs) {
  auto intent = ReadTruncateIntent(dir_fd, fs, dir);
  const std::string intent_path = dir + "/" + format::kTruncateIntentName;
  if (!intent && intent.error().code() == Code::kCorruption)
    problems->push_back({intent_path, intent.error().position(), "R40", intent.error().message()});
  else if (!intent)
    return intent.error();
  else if (*intent)
    problems->push_back({intent_path, 0, "R40",
                         fmt::format("a truncation to offset {} was interrupted; the next writer "
                                     "completes it",
                                     **intent),
                         Problem::Kind::kNeedsRecovery});
  return Status::Ok();
}

// What VerifyPartition carries from one segment to the next.
struct PartitionWalk {
  std::string dir;
  const DecodeLimits& limits;
  OffsetPolicy offsets;
  VerifyStats* stats;
  std::vector<Problem>* problems;
  const std::optional<StateFields>& state;
  bool trusted;  // R27: published on this boot, the committed end is authoritative
  int64_t prev_last = -1;
  int32_t max_epoch = format::kNoPartitionLeaderEpoch;  // R37: epochs never go back
  std::vector<EpochEntry> implied{};                    // the leader epochs the log implies (R37)
  std::string prev_log{};
  uint64_t prev_end = 0;   // where the valid batches of the segment before end
  uint64_t end_valid = 0;  // where the valid batches of the committed end's segment end
  // The segment whose tail a reboot may have torn: the last one, or after
  // a reboot the last one holding bytes (R88: empty segments after it).
  int64_t tail_base = -1;
  bool tail_torn = false;      // its tail needs recovery (R20, R21)
  PartitionListing listing{};  // R96: tiered segments are verified where they are
  FileSystem* fs = nullptr;    // every read goes through it

  // The directory holding segment `base`'s files: the partition's or its tier.
  const std::string& SegmentDir(int64_t base) const {
    return listing.is_tiered(base) ? listing.tier_dir : dir;
  }
};

// R88: the base of the last segment of `segments` whose .log holds bytes
// (the first one when none does).
int64_t LastSegmentWithBytes(const PartitionWalk& w, const std::vector<int64_t>& segments) {
  for (size_t i = segments.size(); i-- > 1;) {
    const std::string log =
        w.SegmentDir(segments[i]) + "/" + SegmentFileName(segments[i], format::kLogSuffix);
    auto info = StatByPath(log, w.fs);
    if (!info || info->size > 0) return segments[i];
  }
  return segments.empty() ? -1 : segments.front();
}

// R88: an empty segment rolled after a tail a power loss took (its order
// against the segments before, its indexes) is wrong only until the next
// writer removes it.
void MarkAfterRebootTail(PartitionWalk* w, size_t first_problem) {
  for (size_t i = first_problem; i < w->problems->size(); ++i) {
    Problem& p = (*w->problems)[i];
    if (p.kind != Problem::Kind::kCorruption) continue;
    p.kind = Problem::Kind::kNeedsRecovery;
    p.detail +=
        "; an empty segment rolled after a tail a power loss took: the next writer removes "
        "it (R88)";
  }
}

// After a reboot (or with no valid state) the last segment may end in a
// torn or garbage tail that recovery cuts (R20, R21): problems from
// `first_problem` on, after its last valid batch, need recovery; they are
// not corruption. Returns where its index entries stop being judged.
IndexTail MarkRebootTail(PartitionWalk* w, int64_t base, const std::vector<BatchInfo>& batches,
                         size_t first_problem) {
  uint64_t valid_end = batches.empty() ? 0 : batches.back().end;
  for (size_t i = first_problem; i < w->problems->size(); ++i) {
    Problem& p = (*w->problems)[i];
    if (p.kind != Problem::Kind::kCorruption || p.position < valid_end) continue;
    p.kind = Problem::Kind::kNeedsRecovery;
    p.detail += "; torn or garbage tail after a reboot: the next writer cuts it (R20, R21)";
    w->tail_torn = true;
  }
  return {batches.empty() ? base : batches.back().last_offset + 1, Problem::Kind::kNeedsRecovery};
}

// R10/R11/R26 across segments: segment `base` starts after the one before
// and (with kContiguous) continues it.
void CheckSegmentOrder(PartitionWalk* w, int64_t base, const std::string& log,
                       const std::vector<BatchInfo>& batches) {
  const std::string name = SegmentFileName(base, format::kLogSuffix);
  auto not_after = batches.empty() ? std::nullopt : SegmentNotAfter(w->prev_last, base);
  if (not_after)
    w->problems->push_back({log, 0, not_after->rule, std::move(not_after->detail)});
  else if (auto gap = SegmentDoesNotContinue(w->prev_last, base, name, w->offsets))
    // Reported where a reader stops: at the end of the segment before.
    w->problems->push_back({w->prev_log, w->prev_end, gap->rule, std::move(gap->detail)});
}

// R37: leader epochs never go back; collects the epochs the log implies.
void CheckBatchEpochs(PartitionWalk* w, const std::string& log,
                      const std::vector<BatchInfo>& batches) {
  for (const auto& b : batches) {
    if (b.leader_epoch == format::kNoPartitionLeaderEpoch) continue;  // stamped by no leader
    if (b.leader_epoch < 0 || b.leader_epoch < w->max_epoch)
      w->problems->push_back(
          {log, b.position, "R37",
           fmt::format("partitionLeaderEpoch {} is {}", b.leader_epoch,
                       b.leader_epoch < 0 ? std::string("negative and not -1")
                                          : fmt::format("below the epoch {} of a batch before "
                                                        "it",
                                                        w->max_epoch))});
    else if (b.leader_epoch > w->max_epoch)
      w->implied.push_back({b.leader_epoch, b.base_offset});  // R37: the checkpoint's entries
    w->max_epoch = std::max(w->max_epoch, b.leader_epoch);
  }
}

// R13/R14 (R23 when missing): segment `base`'s two indexes against its batches.
Status VerifySegmentIndexes(PartitionWalk* w, int64_t base, const std::vector<BatchInfo>& batches,
                            const IndexTail& tail) {
  for (const char* suffix : {format::kIndexSuffix, format::kTimeIndexSuffix}) {
    std::string idx = w->SegmentDir(base) + "/" + SegmentFileName(base, suffix);
    Status s = EndsWith(idx, format::kTimeIndexSuffix)
                   ? VerifyTimeIndex(idx, batches, w->problems, w->fs, tail)
                   : VerifyOffsetIndex(idx, batches, w->problems, w->fs, tail);
    if (s.code() == Code::kNotFound)
      w->problems->push_back({idx, 0, "R23", "index file missing (rebuilt when a writer opens)"});
    else if (!s.ok())
      return s;
    else
      CountFile(w->stats, idx, w->fs);
  }
  return Status::Ok();
}

// One segment: its log (up to the committed end, R27), its order against
// the segments before, its epochs and its indexes.
Status VerifySegment(PartitionWalk* w, int64_t base) {
  const auto& state = w->state;
  std::string log = w->SegmentDir(base) + "/" + SegmentFileName(base, format::kLogSuffix);
  if (w->trusted && base > state->end_segment_base) {
    w->problems->push_back({log, 0, "R27",
                            "segment past the committed end was never published; the next "
                            "writer removes it",
                            Problem::Kind::kNote});
    return Status::Ok();
  }
  const bool end_segment = state && base == state->end_segment_base;
  const uint64_t committed = w->trusted && end_segment ? state->end_position : UINT64_MAX;
  IndexTail tail;
  if (w->trusted && end_segment) tail.offset = state->log_end_offset;
  const size_t first_problem = w->problems->size();
  std::vector<BatchInfo> batches;
  uint64_t unpublished = 0;
  MQ_RETURN_IF_ERROR(VerifyLog(log, w->limits, w->problems, &batches, committed, &unpublished,
                               w->offsets == OffsetPolicy::kContiguous, w->stats, w->fs));
  if (unpublished > 0)
    w->problems->push_back({log, committed, "R27",
                            fmt::format("{} bytes past the committed end were never published; "
                                        "the next writer cuts them",
                                        unpublished),
                            Problem::Kind::kNote});
  if (!w->trusted && state && base == w->tail_base)
    tail = MarkRebootTail(w, base, batches, first_problem);
  // R88: a tail that ends below the base of the empty segment rolled after
  // it lost its last appends whole: the same lost tail as a torn one.
  if (!w->trusted && state && w->tail_base >= 0 && base > w->tail_base &&
      SegmentDoesNotContinue(w->prev_last, base, {}, w->offsets))
    w->tail_torn = true;
  CheckSegmentOrder(w, base, log, batches);
  CheckBatchEpochs(w, log, batches);
  w->prev_log = log;
  w->prev_end = batches.empty() ? 0 : batches.back().end;
  if (end_segment) w->end_valid = w->prev_end;
  for (const auto& b : batches) w->prev_last = std::max(w->prev_last, b.last_offset);
  Status s = VerifySegmentIndexes(w, base, batches, tail);
  if (w->tail_torn && base > w->tail_base) MarkAfterRebootTail(w, first_problem);
  return s;
}

// The replica checkpoints hold what this log implies (R37, R38), and the
// truncation history agrees with its end (R59).
Status VerifyAgainstLog(int dir_fd, const PartitionWalk& w, const std::vector<int64_t>& segments) {
  const auto& state = w.state;
  LogFacts facts;
  facts.log_end_offset = w.trusted          ? state->log_end_offset
                         : w.prev_last >= 0 ? w.prev_last + 1
                         : segments.empty() ? 0
                                            : segments.back();
  facts.implied_epochs = w.implied;
  facts.trusted = w.trusted || !state;
  MQ_RETURN_IF_ERROR(VerifyReplicaCheckpointsAgainstLog(dir_fd, w.dir, facts, w.problems, w.fs));
  return VerifyTruncations(dir_fd, w.dir, facts.log_end_offset, w.trusted || !state,
                           state ? std::optional(state->rewrites) : std::nullopt, w.problems,
                           w.stats, w.fs);
}

// The segment holding the committed end must hold all of it: R1 where its
// valid batches end (published on this boot), R27 when it is gone, R28
// (needs recovery) when the end was published before a reboot.
Status CheckCommittedEnd(const PartitionWalk& w, const std::vector<int64_t>& segments) {
  const StateFields& state = *w.state;
  const std::string state_path = w.dir + "/" + kStateFileName;
  uint64_t end_size = 0;
  bool present = std::binary_search(segments.begin(), segments.end(), state.end_segment_base);
  std::string log = w.SegmentDir(state.end_segment_base) + "/" +
                    SegmentFileName(state.end_segment_base, format::kLogSuffix);
  if (present) {
    auto f = OpenFileByPath(log, w.fs);
    if (!f) return f.error();
    auto size = (*f)->Size();
    if (!size) return size.error();
    end_size = *size;
  }
  if (present && end_size >= state.end_position) return Status::Ok();
  std::string what = fmt::format("committed end (segment {}, position {}) is past the log",
                                 state.end_segment_base, state.end_position);
  if (w.trusted && present) {
    // Committed bytes are gone: R1 where the segment's valid batches end,
    // as a reader reports it (unless the torn batch there was reported).
    uint64_t at = w.end_valid;
    bool reported = std::any_of(w.problems->begin(), w.problems->end(), [&](const Problem& p) {
      return p.file == log && p.position == at && p.rule == "R1";
    });
    if (!reported)
      w.problems->push_back({log, at, "R1",
                             fmt::format("the segment ends at byte {} but {} bytes of it were "
                                         "committed (R27: published on this boot)",
                                         end_size, state.end_position)});
  } else if (w.trusted) {
    w.problems->push_back({state_path, 0, "R27",
                           what + ", published on this boot: committed "
                                  "bytes are missing"});
  } else {
    w.problems->push_back({state_path, 0, "R28",
                           what + ", published before a reboot (not fsynced, not trusted): the "
                                  "next writer keeps the valid prefix",
                           Problem::Kind::kNeedsRecovery});
  }
  return Status::Ok();
}

}  // namespace

// Judges a partition by the rules recovery applies (§12, R27, R28): what a
// crash legally leaves is "needs recovery" or a note, never corruption.
Status VerifyPartition(const std::string& dir, const DecodeLimits& limits,
                       std::vector<Problem>* problems, OffsetPolicy offsets, VerifyStats* stats,
                       FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  PartitionListing listing;
  auto segments = ListSegments(dfd->get(), fs, nullptr, &listing);
  if (!segments) return segments.error();
  // Replica checkpoints (replication.md §16) stand apart from the log.
  MQ_RETURN_IF_ERROR(VerifyReplicaCheckpoints(dfd->get(), dir, problems, stats, fs));
  std::optional<StateFields> state;
  MQ_RETURN_IF_ERROR(ReadPublishedState(dfd->get(), dir, problems, stats, &state, fs));
  MQ_RETURN_IF_ERROR(CheckTruncateIntent(dfd->get(), dir, problems, fs));
  PartitionWalk walk{.dir = dir,
                     .limits = limits,
                     .offsets = offsets,
                     .stats = stats,
                     .problems = problems,
                     .state = state,
                     .trusted = state && state->same_boot(),
                     .listing = std::move(listing),
                     .fs = fs};
  walk.tail_base = !walk.trusted && state ? LastSegmentWithBytes(walk, *segments)
                   : segments->empty()    ? -1
                                          : segments->back();
  for (int64_t base : *segments) MQ_RETURN_IF_ERROR(VerifySegment(&walk, base));
  MQ_RETURN_IF_ERROR(VerifyAgainstLog(dfd->get(), walk, *segments));
  if (state) MQ_RETURN_IF_ERROR(CheckCommittedEnd(walk, *segments));
  return CheckWriterFiles(dfd->get(), fs);
}

namespace {

// A corruption problem as the status a reader returns (a problem's detail
// may already be a whole corruption message).
Status AsCorruption(const Problem& p) {
  const std::string prefix = fmt::format("{}: position {}: {}: ", p.file, p.position, p.rule);
  std::string detail = p.detail;
  if (detail.rfind(prefix, 0) == 0) detail.erase(0, prefix.size());
  return Status::Corruption(p.file, p.position, p.rule, detail);
}

}  // namespace

Status VerifyForLeadership(const std::string& dir, const DecodeLimits& limits, FileSystem* fs) {
  std::vector<Problem> problems;
  MQ_RETURN_IF_ERROR(
      VerifyPartition(dir, limits, &problems, OffsetPolicy::kGapsAllowed, nullptr, fs));
  for (const Problem& p : problems)
    if (p.kind == Problem::Kind::kCorruption) return AsCorruption(p);
  return Status::Ok();
}

Result<std::optional<LogDamage>> FindLogDamage(const std::string& dir, const DecodeLimits& limits,
                                               FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  std::vector<Problem> problems;
  MQ_RETURN_IF_ERROR(
      VerifyPartition(dir, limits, &problems, OffsetPolicy::kGapsAllowed, nullptr, fs));
  for (const Problem& p : problems) {
    if (p.kind != Problem::Kind::kCorruption || !EndsWith(p.file, format::kLogSuffix)) continue;
    const std::string name = p.file.substr(p.file.find_last_of('/') + 1);
    auto base = SegmentBaseOffset(name);
    if (!base) continue;
    auto dfd = OpenDirectory(dir, false, fs);
    if (!dfd) return dfd.error();
    LogDamage d;
    d.valid_end = *base;
    MQ_RETURN_IF_ERROR(ForEachHeader(dfd->get(), fs, limits, *base, 0, p.position,
                                     [&](const BatchHeader& h, uint64_t pos) {
                                       if (pos + h.size_bytes() <= p.position)
                                         d.valid_end = std::max(d.valid_end, h.last_offset() + 1);
                                     }));
    d.corruption = AsCorruption(p);
    return std::optional<LogDamage>(std::move(d));
  }
  return std::optional<LogDamage>();
}

Status VerifyPartition(const std::string& dir, const DecodeLimits& limits,
                       std::vector<Problem>* problems, OffsetPolicy offsets, VerifyStats* stats) {
  return VerifyPartition(dir, limits, problems, offsets, stats, nullptr);
}

Status VerifyForLeadership(const std::string& dir, const DecodeLimits& limits) {
  return VerifyForLeadership(dir, limits, nullptr);
}

Result<std::optional<LogDamage>> FindLogDamage(const std::string& dir, const DecodeLimits& limits) {
  return FindLogDamage(dir, limits, nullptr);
}

}  // namespace mq
