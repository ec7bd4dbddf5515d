// Recovery (§12). The policy, rule by rule:
//  R20/R21: only the *last* segment may lose bytes, and only bytes after
//           which no valid batch starts: a crash tears or garbles the end of
//           what was being appended, never the middle.
//  R22:     anything else is damage mq must not paper over: the open fails,
//           naming file, byte position and rule, and nothing is changed.
//  R23:     indexes are derived data; one that disagrees with the log is
//           rebuilt.
#include "storage/recovery.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "format/batch_cursor.h"
#include "format/format.h"
#include "io/mapped_file.h"
#include "io/properties.h"
#include "mq/segment.h"
#include "storage/log_segment.h"
#include "storage/offset_index.h"
#include "storage/offset_order.h"
#include "storage/producer_state.h"
#include "storage/segment.h"

namespace mq {

namespace {

FileSystem* FsOf(const LogConfig& c) { return c.fs ? c.fs : FileSystem::Default(); }

struct SegmentResult {
  uint64_t valid_bytes = 0;
  int64_t last_offset = -1;  // -1: empty segment
  bool cut = false;          // a torn or garbage tail was cut (R20, R21)
  std::vector<std::byte> offset_index, time_index;
};

Status WriteIndexFiles(int dir_fd, FileSystem* fs, int64_t base, const SegmentResult& r) {
  return LogSegment::WriteIndexFiles(fs, dir_fd, base, r.offset_index, r.time_index);
}

// False when the file cannot be mapped either: it is rewritten.
bool SameAsFile(int dir_fd, FileSystem* fs, const std::string& name,
                const std::vector<std::byte>& want) {
  auto m = MappedFile::Open(dir_fd, name, format::kMaxIndexFileBytes, fs);
  if (!m) return false;
  Bytes have = m->bytes();
  return have.size() == want.size() &&
         (want.empty() || std::memcmp(have.data(), want.data(), want.size()) == 0);
}

// R20/R21: the last segment's bytes from `pos` on (torn when `torn`,
// otherwise garbage) are cut, unless a valid batch follows (R22: the
// damage `why` is not repaired).
Status CutTail(File* file, BatchCursor& cursor, const std::string& name, uint64_t pos,
               uint64_t size, BatchCursor::ResyncHint after, const Status& why, bool torn,
               RecoveryReport* report) {
  auto next = cursor.FindNextValid(pos, after);
  if (!next) return next.error();
  if (*next)
    return Status::Corruption(name, pos, why.rule(),
                              fmt::format("{}; a valid batch follows at {} (R22: not "
                                          "repaired)",
                                          why.message(), **next));
  uint64_t dropped = size - pos;
  MQ_RETURN_IF_ERROR(file->Truncate(pos));
  MQ_RETURN_IF_ERROR(file->Sync());
  if (report) {
    report->bytes_truncated += dropped;
    report->repaired.push_back(
        {name, pos, torn ? "torn-tail" : "garbage-tail",
         fmt::format("{} {} truncated ({} bytes dropped): {}", torn ? "R20" : "R21",
                     torn ? "torn tail" : "garbage tail", dropped, why.message())});
  }
  return Status::Ok();
}

// Walks segment `base`. With `validate`, every batch gets the full check
// (CRC) and the tail rules apply; otherwise headers only.
Result<SegmentResult> WalkSegment(int dir_fd, const LogConfig& config, int64_t base, bool last,
                                  int64_t prev_last, bool rolled, RecoveryReport* report) {
  FileSystem* fs = FsOf(config);
  std::string name = SegmentFileName(base, format::kLogSuffix);
  auto file = fs->Open(dir_fd, name, last ? FileSystem::kReadWrite : FileSystem::kRead);
  if (!file) return file.error();
  auto size = (*file)->Size();
  if (!size) return size.error();
  if (*size > format::kMaxSegmentBytes)
    return Status::Corruption(name, format::kMaxSegmentBytes, "R10",
                              fmt::format("file is {} bytes, over 2^31-1", *size));
  BatchCursor cursor(config.limits);
  cursor.Reset(file->get(), name, *size);
  SegmentResult r;
  IndexBuilder ib(base, config.index_interval_bytes);
  uint64_t pos = 0;
  int64_t prev = prev_last;
  for (;;) {
    BatchView view;
    auto step = cursor.Read(pos, &view);
    if (step && *step == BatchCursor::Step::kEnd) break;
    if (step && *step == BatchCursor::Step::kBatch) {
      const BatchHeader& h = view.header();
      auto breaches = BatchOffsetBreaches(h, {base, prev, pos == 0}, config.offsets);
      if (!breaches.empty())
        return Status::Corruption(name, pos, breaches.front().rule, breaches.front().detail);
      ib.Add(h, pos, &r.offset_index, &r.time_index);
      prev = h.last_offset();
      r.last_offset = prev;
      pos += h.size_bytes();
      if (report) ++report->batches_checked;
      continue;
    }
    // Torn (R1) or corrupt (R2-R6) at `pos`.
    Status why = step ? Status::Corruption(name, pos, "R1", "batch runs past the end of the file")
                      : step.error();
    if (why.code() != Code::kCorruption) return why;
    if (!last) return why;  // R22: never repair a segment that was rolled
    MQ_RETURN_IF_ERROR(CutTail(file->get(), cursor, name, pos, *size, {prev, base}, why,
                               step.has_value(), report));
    r.cut = true;
    break;
  }
  if (rolled && !r.cut) ib.Finish(&r.time_index);  // cut, it is the active segment again (R88)
  r.valid_bytes = pos;
  return r;
}

}  // namespace

namespace {

// A log with no segment gets an empty one at `empty_base` (R34).
Status CreateEmptySegment(int dir_fd, const LogConfig& config, int64_t empty_base) {
  FileSystem* fs = FsOf(config);
  for (const char* suffix : {format::kLogSuffix, format::kIndexSuffix, format::kTimeIndexSuffix}) {
    auto f = fs->Open(dir_fd, SegmentFileName(empty_base, suffix), FileSystem::kCreate);
    if (!f) return f.error();
  }
  // R34: with page-cache durability a crash may lose these names; the
  // next open finds no segment and comes here again.
  if (!config.page_cache_only()) MQ_RETURN_IF_ERROR(fs->SyncDir(dir_fd));
  return Status::Ok();
}

// The segments below the one recovery starts at (`segments[0, start)`)
// are not walked: an index that does not look right is rebuilt (R23).
Status RebuildIndexesBelow(int dir_fd, const LogConfig& config,
                           const std::vector<int64_t>& segments, size_t start,
                           RecoveryReport* report) {
  FileSystem* fs = FsOf(config);
  for (size_t i = 0; i < start; ++i) {
    auto looks = IndexLooksRight(dir_fd, config, segments[i], segments[i + 1]);
    if (!looks) return looks.error();
    if (*looks) continue;
    auto size = [&]() -> Result<uint64_t> {
      auto f =
          fs->Open(dir_fd, SegmentFileName(segments[i], format::kLogSuffix), FileSystem::kRead);
      if (!f) return f.error();
      return (*f)->Size();
    }();
    if (!size) return size.error();
    MQ_RETURN_IF_ERROR(RebuildIndexes(dir_fd, fs, config, segments[i], *size, true));
    if (report) {
      ++report->indexes_rebuilt;
      report->repaired.push_back({SegmentFileName(segments[i], format::kIndexSuffix), 0,
                                  "index-rebuilt",
                                  "R23: index inconsistent with its log; rebuilt"});
    }
  }
  return Status::Ok();
}

// Segment `base`, walked (`r`), against the next one (`next_base`): its
// offsets end before the next begins, and the next continues it.
Status CheckContinues(const LogConfig& config, int64_t base, const SegmentResult& r,
                      int64_t next_base) {
  const std::string next = SegmentFileName(next_base, format::kLogSuffix);
  if (auto b = SegmentNotAfter(r.last_offset, next_base))
    return Status::Corruption(next, 0, b->rule, b->detail);
  // Where a reader stops: the end of the segment that lost its tail.
  if (auto b = SegmentDoesNotContinue(r.last_offset, next_base, next, config.offsets))
    return Status::Corruption(SegmentFileName(base, format::kLogSuffix), r.valid_bytes, b->rule,
                              b->detail);
  return Status::Ok();
}

// Segment `base`'s index files are written again when they differ from
// what its walk (`r`) built (R23).
Status RewriteIndexesIfChanged(int dir_fd, FileSystem* fs, int64_t base, const SegmentResult& r,
                               RecoveryReport* report) {
  std::string index = SegmentFileName(base, format::kIndexSuffix);
  std::string tindex = SegmentFileName(base, format::kTimeIndexSuffix);
  if (SameAsFile(dir_fd, fs, index, r.offset_index) && SameAsFile(dir_fd, fs, tindex, r.time_index))
    return Status::Ok();
  MQ_RETURN_IF_ERROR(WriteIndexFiles(dir_fd, fs, base, r));
  if (report) {
    ++report->indexes_rebuilt;
    report->repaired.push_back(
        {index, 0, "index-rebuilt", "R23: index missing or inconsistent with its log; rebuilt"});
  }
  return Status::Ok();
}

// R88: the index of the last segment of `segments[start, end)` whose .log
// holds bytes (`start` when none after it does): the segments after it are
// empty.
Result<size_t> LastSegmentWithBytes(int dir_fd, FileSystem* fs,
                                    const std::vector<int64_t>& segments, size_t start) {
  size_t i = segments.size() - 1;
  for (; i > start; --i) {
    auto info = fs->StatAt(dir_fd, SegmentFileName(segments[i], format::kLogSuffix));
    if (!info) return info.error();
    if (info->size > 0) break;
  }
  return i;
}

// R88: segment `segments[end]` lost its tail (a power loss took a rolled
// segment's unsynced appends): the empty segments rolled after it go, and
// it is the active segment again.
Status DropEmptySegmentsAfter(int dir_fd, const LogConfig& config, std::vector<int64_t>* segments,
                              size_t end, RecoveryReport* report) {
  FileSystem* fs = FsOf(config);
  for (size_t i = segments->size() - 1; i > end; --i) {
    MQ_RETURN_IF_ERROR(LogSegment::Remove(fs, dir_fd, (*segments)[i]));
    if (report)
      report->repaired.push_back(
          {SegmentFileName((*segments)[i], format::kLogSuffix), 0, "R88",
           fmt::format("R88 empty segment rolled after the tail segment {} lost its tail "
                       "(unsynced appends a power loss took); removed",
                       SegmentFileName((*segments)[end], format::kLogSuffix))});
  }
  segments->resize(end + 1);
  if (!config.page_cache_only()) MQ_RETURN_IF_ERROR(fs->SyncDir(dir_fd));
  return Status::Ok();
}

}  // namespace

Result<RecoveredLog> RecoverLog(int dir_fd, const LogConfig& config, std::vector<int64_t> segments,
                                int64_t recovery_point, int64_t empty_base, bool after_reboot,
                                RecoveryReport* report) {
  FileSystem* fs = FsOf(config);
  RecoveredLog out;
  if (segments.empty()) {
    MQ_RETURN_IF_ERROR(CreateEmptySegment(dir_fd, config, empty_base));
    out.segments = {empty_base};
    out.log_end_offset = empty_base;
    return out;
  }
  // R25: start at the segment holding the recovery point.
  size_t start = 0;
  while (start + 1 < segments.size() && segments[start + 1] <= recovery_point) ++start;
  MQ_RETURN_IF_ERROR(RebuildIndexesBelow(dir_fd, config, segments, start, report));
  // R88: after a reboot the tail of the log is the last segment holding
  // bytes, whatever empty segments were rolled after it.
  size_t tail = segments.size() - 1;
  if (after_reboot) {
    auto found = LastSegmentWithBytes(dir_fd, fs, segments, start);
    if (!found) return found.error();
    tail = *found;
  }
  int64_t prev_last = -1;
  for (size_t i = start; i < segments.size(); ++i) {
    bool last = i + 1 == segments.size();
    if (i > 0 && prev_last < 0) prev_last = segments[i] - 1;  // R11 via the base order
    auto r = WalkSegment(dir_fd, config, segments[i], i >= tail, prev_last, !last, report);
    if (!r) return r.error();
    if (report) ++report->segments_checked;
    // R88: the tail segment (after a reboot, the last holding bytes) lost
    // its tail, torn (cut) or in whole batches: it ends before the base of
    // the empty segments rolled after it.
    const bool lost_tail =
        !last && (r->cut || (i == tail && SegmentDoesNotContinue(r->last_offset, segments[i + 1],
                                                                 {}, config.offsets)));
    if (lost_tail) {
      MQ_RETURN_IF_ERROR(DropEmptySegmentsAfter(dir_fd, config, &segments, i, report));
      last = true;
    }
    if (!last) MQ_RETURN_IF_ERROR(CheckContinues(config, segments[i], *r, segments[i + 1]));
    if (r->last_offset >= 0) prev_last = r->last_offset;
    MQ_RETURN_IF_ERROR(RewriteIndexesIfChanged(dir_fd, fs, segments[i], *r, report));
    if (last) {
      out.active_size = r->valid_bytes;
      out.log_end_offset = r->last_offset >= 0 ? r->last_offset + 1 : segments[i];
    }
  }
  out.segments = std::move(segments);
  return out;
}

// R40 (segment.md §6.5).
Status WriteTruncateIntent(int dir_fd, FileSystem* fs, int64_t end, bool sync) {
  std::string text = fmt::format(
      "# mq truncation in progress (format-spec/segment.md 6.5)\n"
      "truncate.to={}\n",
      end);
  return WriteFileAtomic(dir_fd, format::kTruncateIntentName, AsBytes(text), fs, {}, sync);
}

Result<std::optional<int64_t>> ReadTruncateIntent(int dir_fd, FileSystem* fs,
                                                  const std::string& dir) {
  const std::string path = dir + "/" + format::kTruncateIntentName;
  auto bytes = ReadFileAt(dir_fd, format::kTruncateIntentName, format::kMaxTruncateIntentBytes, fs);
  if (!bytes && bytes.error().code() == Code::kNotFound) return std::optional<int64_t>();
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(path, format::kMaxTruncateIntentBytes, "R40",
                              "more bytes than a truncation intent holds");
  if (!bytes) return bytes.error();
  std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  std::optional<int64_t> end;
  MQ_RETURN_IF_ERROR(ForEachProperty(text, path, "R40", [&](const PropertyLine& p) -> Status {
    int64_t v = 0;
    if (p.key != "truncate.to")
      return Status::Corruption(path, p.position, "R40", fmt::format("unknown key '{}'", p.key));
    if (end || !ParseInt64(p.value, 0, INT64_MAX - 1, &v))
      return Status::Corruption(path, p.position, "R40",
                                end ? "truncate.to given twice" : "truncate.to is not an offset");
    end = v;
    return Status::Ok();
  }));
  if (!end) return Status::Corruption(path, 0, "R40", "no truncate.to line");
  return end;
}

// R59 (segment.md §6.6).
Result<std::vector<TruncationRecord>> ReadTruncations(int dir_fd, FileSystem* fs,
                                                      const std::string& dir) {
  const std::string path = dir + "/" + format::kTruncationsName;
  std::vector<TruncationRecord> out;
  auto bytes = ReadFileAt(dir_fd, format::kTruncationsName, format::kMaxTruncationsBytes, fs);
  if (!bytes && bytes.error().code() == Code::kNotFound) return out;
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(path, format::kMaxTruncationsBytes, "R59",
                              "more bytes than a truncation history holds");
  if (!bytes) return bytes.error();
  std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  MQ_RETURN_IF_ERROR(ForEachProperty(text, path, "R59", [&](const PropertyLine& p) -> Status {
    if (p.key != "cut") return Status::Ok();  // room for later keys
    // OFFSET TIME [REWRITES], one space apart.
    std::string_view field[3];
    size_t n = 0;
    bool well_formed = true;
    for (std::string_view rest = p.value; well_formed;) {
      const size_t sp = rest.find(' ');
      if (n == 3)
        well_formed = false;
      else
        field[n++] = rest.substr(0, sp);
      if (sp == std::string_view::npos) break;
      rest = rest.substr(sp + 1);
    }
    TruncationRecord r;
    r.position = p.position;
    int64_t rewrites = 0;
    if (!well_formed || n < 2 || !ParseInt64(field[0], 0, INT64_MAX - 1, &r.end) ||
        !ParseInt64(field[1], 0, INT64_MAX, &r.time_ms) ||
        (n == 3 && !ParseInt64(field[2], 0, UINT32_MAX, &rewrites)))
      return Status::Corruption(path, p.position, "R59",
                                "a cut is not 'OFFSET TIME' or 'OFFSET TIME REWRITES' (decimal "
                                "numbers >= 0, the last below 2^32)");
    if (n == 3) r.rewrites = static_cast<uint32_t>(rewrites);
    if (!out.empty() && (r.end <= out.back().end || r.time_ms < out.back().time_ms))
      return Status::Corruption(path, p.position, "R59",
                                "cuts out of order (offsets must increase, times not decrease)");
    if (!out.empty() && out.back().rewrites &&
        (!r.rewrites || RewritesAfter(*out.back().rewrites, *r.rewrites)))
      return Status::Corruption(path, p.position, "R59",
                                r.rewrites ? "cuts out of order (rewrites values must not decrease)"
                                           : "a cut without a rewrites value after one with it");
    out.push_back(r);
    return Status::Ok();
  }));
  return out;
}

Status RecordTruncation(int dir_fd, FileSystem* fs, const std::string& dir, int64_t end,
                        int64_t time_ms, uint32_t rewrites, bool sync) {
  auto history = ReadTruncations(dir_fd, fs, dir);
  if (!history) return history.error();
  std::vector<TruncationRecord>& h = *history;
  while (!h.empty() && h.back().end >= end) h.pop_back();
  // A clock that went back is taken as the latest time seen (order kept).
  // Likewise a rewrites value below the last entry's (a counter restarted
  // by a state file rebuilt without the history's: never by a writer of
  // this version) is written as the last entry's.
  if (!h.empty() && h.back().rewrites && RewritesAfter(*h.back().rewrites, rewrites))
    rewrites = *h.back().rewrites;
  h.push_back({end, h.empty() ? time_ms : std::max(time_ms, h.back().time_ms), rewrites, 0});
  if (h.size() > format::kMaxTruncations) h.erase(h.begin(), h.end() - format::kMaxTruncations);
  std::string text = "# mq truncations: log end left, ms, rewrites (format-spec/segment.md 6.6)\n";
  for (const TruncationRecord& r : h) {
    text += fmt::format("cut={} {}", r.end, r.time_ms);
    text += r.rewrites ? fmt::format(" {}\n", *r.rewrites) : std::string("\n");
  }
  return WriteFileAtomic(dir_fd, format::kTruncationsName, AsBytes(text), fs, {}, sync);
}

std::optional<int64_t> LowestCutAfter(const std::vector<TruncationRecord>& history, uint32_t seen) {
  // Both the ends and the rewrites values increase down the file: the
  // first entry after `seen` is the lowest cut.
  for (const TruncationRecord& r : history)
    if (r.rewrites && RewritesAfter(*r.rewrites, seen)) return r.end;
  return std::nullopt;
}

std::optional<int64_t> CutBelowSince(const std::vector<TruncationRecord>& history, int64_t offset,
                                     int64_t since_ms) {
  for (const TruncationRecord& r : history)
    if (r.time_ms >= since_ms) return r.end < offset ? std::optional<int64_t>(r.end) : std::nullopt;
  return std::nullopt;
}

Status RemoveTruncateIntent(int dir_fd, FileSystem* fs, bool sync) {
  Status s = fs->Unlink(dir_fd, format::kTruncateIntentName);
  if (!s.ok() && s.code() != Code::kNotFound) return s;
  return sync ? fs->SyncDir(dir_fd) : Status::Ok();
}

Result<LogCut> FindCut(int dir_fd, FileSystem* fs, const DecodeLimits& limits,
                       const std::vector<int64_t>& segments, int64_t offset) {
  auto after = std::lower_bound(segments.begin(), segments.end(), offset);
  LogCut cut;
  cut.keep = after == segments.begin() ? segments.front() : *(after - 1);
  cut.end = cut.keep;
  uint64_t walked = 0;     // where the walk stopped: the end of the last batch seen
  int64_t last_seen = -1;  // that batch's last offset
  Status s = ForEachHeader(dir_fd, fs, limits, cut.keep, 0, UINT64_MAX,
                           [&](const BatchHeader& h, uint64_t pos) {
                             walked = pos + h.size_bytes();
                             last_seen = h.last_offset();
                             if (h.last_offset() < offset) {
                               cut.position = walked;
                               cut.end = h.last_offset() + 1;
                             }
                           });
  if (s.ok() || s.code() != Code::kCorruption) MQ_RETURN_IF_ERROR(s);
  if (s.ok() || cut.position < walked) return cut;  // the damage goes with the cut
  // Damage right after the batches the cut keeps. Bytes after which no
  // valid batch starts are a garbage tail (R21: zeros where a power loss
  // kept a file's size, set by a truncation or an append, without its
  // data), which recovery would cut there too; a valid batch after them
  // is R22 damage, left for the operator as recovery leaves it.
  const std::string name = SegmentFileName(cut.keep, format::kLogSuffix);
  auto file = fs->Open(dir_fd, name, FileSystem::kRead);
  if (!file) return file.error();
  auto size = (*file)->Size();
  if (!size) return size.error();
  BatchCursor cursor(limits);
  cursor.Reset(file->get(), name, *size);
  auto next = cursor.FindNextValid(walked, {last_seen, cut.keep});
  if (!next) return next.error();
  if (*next) return s;
  return cut;
}

Status ApplyCut(int dir_fd, FileSystem* fs, const LogConfig& config,
                const std::vector<int64_t>& segments, const LogCut& cut, bool sync) {
  for (auto it = segments.rbegin(); it != segments.rend() && *it > cut.keep; ++it)
    MQ_RETURN_IF_ERROR(LogSegment::Remove(fs, dir_fd, *it));
  auto log =
      fs->Open(dir_fd, SegmentFileName(cut.keep, format::kLogSuffix), FileSystem::kReadWrite);
  if (!log) return log.error();
  auto size = (*log)->Size();
  if (!size) return size.error();
  if (*size > cut.position) MQ_RETURN_IF_ERROR((*log)->Truncate(cut.position));
  if (sync) MQ_RETURN_IF_ERROR((*log)->Sync());
  MQ_RETURN_IF_ERROR(RebuildIndexes(dir_fd, fs, config, cut.keep, cut.position, false));
  std::vector<int64_t> snapshots;
  auto listed = ListSegments(dir_fd, fs, &snapshots);
  if (!listed) return listed.error();
  ProducerStateTable::DropSnapshotsPast(dir_fd, cut.end, snapshots, fs);
  return sync ? fs->SyncDir(dir_fd) : Status::Ok();
}

}  // namespace mq
