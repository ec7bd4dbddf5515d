// One key-compaction pass over a partition directory
// (format-spec/compaction.md, R115-R124): the offset map over the dirty
// section, each cleanable segment rewritten aside (R117-R122) and swapped
// in crash-safely (R123), and the completion of an interrupted swap (R124).
#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "format/batch_cursor.h"
#include "format/coding.h"
#include "format/compression.h"
#include "format/format.h"
#include "io/properties.h"
#include "mq/compaction.h"
#include "mq/segment.h"
#include "storage/log_segment.h"
#include "storage/offset_index.h"
#include "storage/segment.h"
#include "storage/writer_lock.h"

namespace mq {

namespace {

// compaction.md's names: the first dirty offset's file (R115) and the
// suffixes of the swap (R123).
constexpr const char* kCompactionOffsetFile = "compaction-offset";
constexpr const char* kCleanedSuffix = ".cleaned";
constexpr const char* kSwapSuffix = ".swap";
constexpr size_t kFlushBytes = 1 << 20;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::optional<CompactionCheckpoint>> ReadCompactionCheckpoint(int dir_fd, FileSystem* fs) {
  auto bytes = ReadFileAt(dir_fd, kCompactionOffsetFile, 4096, fs);
  if (!bytes) {
    if (bytes.error().code() == Code::kNotFound) return std::optional<CompactionCheckpoint>{};
    return bytes.error();
  }
  CompactionCheckpoint c;
  bool has_offset = false;
  const std::string file = PathAt(dir_fd, kCompactionOffsetFile);
  Status s = ForEachProperty(AsText(*bytes), file, "R115", [&](const PropertyLine& line) {
    const bool offset = line.key == "offset";
    if ((offset || line.key == "delete.horizon") &&
        ParseInt64(line.value, 0, format::kMaxOffset, offset ? &c.offset : &c.delete_horizon)) {
      has_offset = has_offset || offset;
      return Status::Ok();
    }
    return Status::Corruption(file, line.position, "R115",
                              "expected offset=<n> and at most delete.horizon=<ms>");
  });
  if (!s.ok()) return s;
  if (!has_offset) return Status::Corruption(file, 0, "R115", "no offset= line");
  return std::optional<CompactionCheckpoint>(c);
}

namespace {

Status WriteCompactionCheckpoint(int dir_fd, FileSystem* fs, const CompactionCheckpoint& c) {
  std::string text =
      fmt::format("# mq compaction offset (format-spec/compaction.md R115)\noffset={}\n", c.offset);
  if (c.delete_horizon >= 0) text += fmt::format("delete.horizon={}\n", c.delete_horizon);
  return WriteFileAtomic(dir_fd, kCompactionOffsetFile, AsBytes(text), fs);
}

// The state of one pass.
struct Pass {
  FileSystem* fs = nullptr;
  int dfd = -1;
  DecodeLimits limits;
  CompactionPolicy policy;
  OffsetMap map;
  int64_t map_end = 0;
  std::unordered_map<int64_t, int64_t> last_of_producer;  // R119: id -> base offset
  CompactionReport* report = nullptr;
  WriterLock* writer_lock = nullptr;  // R125: held around each swap
  std::vector<std::byte> scratch, records, compressed;
  void* zstd_ctx = nullptr;
  Pass(size_t memory) : map(memory) {}
  ~Pass() { compression::FreeCompressor(zstd_ctx); }
};

using BatchFn = std::function<Status(const BatchView&, uint64_t pos, const std::string& name)>;

// Every batch of segment `seg`'s log (sealed: committed in full), in order.
Status ForEachBatch(Pass& p, const RetentionSegment& seg, const BatchFn& fn) {
  const std::string name = SegmentFileName(seg.base, format::kLogSuffix);
  auto file = p.fs->Open(p.dfd, name, FileSystem::kRead);
  if (!file) return file.error();
  auto size = (*file)->Size();
  if (!size) return size.error();
  BatchCursor cursor(p.limits);
  cursor.Reset(file->get(), PathAt(p.dfd, name), *size);
  for (uint64_t pos = 0;;) {
    BatchView view;
    auto step = cursor.Read(pos, &view);
    if (!step) return step.error();
    if (*step == BatchCursor::Step::kEnd) return Status::Ok();
    if (*step == BatchCursor::Step::kTorn) {
      return Status::Corruption(PathAt(p.dfd, name), pos, "R1",
                                "a sealed segment ends inside a batch");
    }
    MQ_RETURN_IF_ERROR(fn(view, pos, name));
    pos += view.header().size_bytes();
  }
}

// R116: the keys of the dirty section's batches, a whole batch at a time,
// until the map cannot take the next; p.map_end is where it stopped.
Status BuildOffsetMap(Pass& p, const CompactionPlan& plan) {
  p.map_end = plan.cleanable_end;
  uint64_t mapped = 0;  // batches
  for (const RetentionSegment& seg : plan.segments) {
    if (seg.end <= plan.first_dirty) continue;
    Status s =
        ForEachBatch(p, seg, [&](const BatchView& view, uint64_t pos, const std::string& name) {
          const BatchHeader& h = view.header();
          if (h.last_offset() < plan.first_dirty || h.is_control()) return Status::Ok();
          if (p.map.free() < static_cast<size_t>(h.records_count)) {
            p.map_end = h.base_offset;
            p.report->map_full = true;
            return Status(Code::kBusy, "the offset map is full");  // stops the walk
          }
          auto reader = RecordReader::Open(view, &p.scratch, p.limits, name, pos);
          if (!reader) return reader.error();
          RecordView r;
          while (reader->Read(&r))
            if (r.key) p.map.Put(*r.key, r.offset);
          ++mapped;
          return reader->status();
        });
    if (p.report->map_full) break;
    MQ_RETURN_IF_ERROR(s);
  }
  if (p.report->map_full && mapped == 0) {
    return Status(Code::kInvalidArgument,
                  fmt::format("compaction: an offset map of {} bytes ({} keys) cannot hold the "
                              "batch at offset {}: raise the memory budget",
                              p.map.memory_bytes(), p.map.capacity(), p.map_end));
  }
  return Status::Ok();
}

// R119: the base offset of each producer id's last batch below the map end.
Status FindLastProducerBatches(Pass& p, const CompactionPlan& plan) {
  for (const RetentionSegment& seg : plan.segments) {
    if (seg.base >= p.map_end) break;
    MQ_RETURN_IF_ERROR(
        ForEachBatch(p, seg, [&](const BatchView& view, uint64_t, const std::string&) {
          const BatchHeader& h = view.header();
          if (h.has_producer_id() && !h.is_control() && h.base_offset < p.map_end)
            p.last_of_producer[h.producer_id] = h.base_offset;
          return Status::Ok();
        }));
  }
  return Status::Ok();
}

size_t BytesLength(const std::optional<Bytes>& b) {
  return coding::VarintLength(b ? static_cast<int32_t>(b->size()) : -1) + (b ? b->size() : 0);
}

std::byte* PutBytes(std::byte* q, const std::optional<Bytes>& b) {
  q = coding::PutVarint(q, b ? static_cast<int32_t>(b->size()) : -1);
  if (b && !b->empty()) q = std::copy(b->begin(), b->end(), q);
  return q;
}

// batch.md §4: one record, its offset and timestamp kept as deltas from the
// batch's base offset and `base_ts` (R118).
void EncodeRecord(const RecordView& r, int64_t base_offset, int64_t base_ts,
                  std::vector<std::byte>* out) {
  const int64_t ts_delta =
      static_cast<int64_t>(static_cast<uint64_t>(r.timestamp) - static_cast<uint64_t>(base_ts));
  const int32_t offset_delta = static_cast<int32_t>(r.offset - base_offset);
  const size_t body = 1 + coding::VarlongLength(ts_delta) + coding::VarintLength(offset_delta) +
                      BytesLength(r.key) + BytesLength(r.value) +
                      coding::VarintLength(r.headers_count) + r.headers_bytes.size();
  const int32_t length = static_cast<int32_t>(body);
  const size_t at = out->size();
  out->resize(at + coding::VarintLength(length) + body);
  std::byte* q = out->data() + at;
  q = coding::PutVarint(q, length);
  *q++ = std::byte{0};
  q = coding::PutVarlong(q, ts_delta);
  q = coding::PutVarint(q, offset_delta);
  q = PutBytes(q, r.key);
  q = PutBytes(q, r.value);
  q = coding::PutVarint(q, r.headers_count);
  std::copy(r.headers_bytes.begin(), r.headers_bytes.end(), q);
}

// What stays of a batch's records (R117, R121).
struct Kept {
  std::vector<RecordView> records;
  bool all = true;
  bool tombstone = false;  // a kept record is a tombstone (a key, no value)
};

Result<Kept> KeptRecords(Pass& p, const BatchView& view, uint64_t pos, const std::string& name) {
  const BatchHeader& h = view.header();
  const bool horizon_passed = h.has_delete_horizon() && p.policy.now_ms >= h.base_timestamp;
  auto reader = RecordReader::Open(view, &p.scratch, p.limits, name, pos);
  if (!reader) return reader.error();
  Kept kept;
  RecordView r;
  while (reader->Read(&r)) {
    bool keep = true;
    if (r.key) {
      auto latest = p.map.Get(*r.key);
      keep = !latest || *latest <= r.offset;
    }
    if (keep && !r.value && r.key && horizon_passed) {
      keep = false;
      ++p.report->tombstones_removed;
    }
    if (keep) {
      kept.tombstone = kept.tombstone || (r.key && !r.value);
      kept.records.push_back(r);
    } else {
      kept.all = false;
      ++p.report->records_removed;
    }
  }
  MQ_RETURN_IF_ERROR(reader->status());
  return kept;
}

// R118, R121: the batch re-encoded with the records kept.
Status EncodeKept(Pass& p, const BatchView& view, const Kept& kept, std::vector<std::byte>* out) {
  const BatchHeader& h = view.header();
  uint16_t attributes = static_cast<uint16_t>(h.attributes);
  int64_t base_ts = h.base_timestamp;
  if (kept.tombstone && !h.has_delete_horizon()) {
    attributes |= format::kDeleteHorizonBit;
    base_ts = p.policy.now_ms + p.policy.delete_retention_ms;
    ++p.report->horizons_set;
  }
  if (kept.records.empty()) attributes &= static_cast<uint16_t>(~format::kCodecMask);
  p.records.clear();
  for (const RecordView& r : kept.records) EncodeRecord(r, h.base_offset, base_ts, &p.records);
  Bytes payload = p.records;
  const auto codec = static_cast<Compression>(attributes & format::kCodecMask);
  if (codec != Compression::kNone) {
    MQ_RETURN_IF_ERROR(compression::Compress(codec, p.records, 3, &p.zstd_ctx, &p.compressed));
    payload = p.compressed;
  }
  const size_t at = out->size();
  const size_t size = format::kBatchHeaderSize + payload.size();
  out->insert(out->end(), view.bytes().begin(), view.bytes().begin() + format::kBatchHeaderSize);
  out->insert(out->end(), payload.begin(), payload.end());
  std::byte* b = out->data() + at;
  coding::PutFixed32(b + format::kBatchLengthOffset,
                     static_cast<uint32_t>(size - format::kLogOverhead));
  coding::PutFixed16(b + format::kAttributesOffset, attributes);
  coding::PutFixed64(b + format::kBaseTimestampOffset, static_cast<uint64_t>(base_ts));
  coding::PutFixed32(b + format::kRecordsCountOffset, static_cast<uint32_t>(kept.records.size()));
  return SealBatches(std::span<std::byte>(b, size));
}

// R117-R121: what batch `view` becomes, appended to `out` (nothing when
// it goes).
Status CleanBatch(Pass& p, const BatchView& view, uint64_t pos, const std::string& name,
                  std::vector<std::byte>* out) {
  const BatchHeader& h = view.header();
  auto verbatim = [&] {
    out->insert(out->end(), view.bytes().begin(), view.bytes().end());
    return Status::Ok();
  };
  if (h.is_control() || h.base_offset >= p.map_end) return verbatim();
  auto kept = KeptRecords(p, view, pos, name);
  if (!kept) return kept.error();
  const bool sets_horizon = kept->tombstone && !h.has_delete_horizon();
  if (kept->tombstone) {  // R121: due again when its horizon passes
    const int64_t horizon =
        sets_horizon ? p.policy.now_ms + p.policy.delete_retention_ms : h.base_timestamp;
    int64_t& next = p.report->next_delete_horizon;
    next = next < 0 ? horizon : std::min(next, horizon);
  }
  if (kept->all && !sets_horizon) return verbatim();
  if (kept->records.empty()) {
    auto last = p.last_of_producer.find(h.producer_id);
    const bool producer_last =
        h.has_producer_id() && last != p.last_of_producer.end() && last->second == h.base_offset;
    if (!producer_last) {
      ++p.report->batches_removed;
      return Status::Ok();
    }
  }
  ++p.report->batches_rewritten;
  return EncodeKept(p, view, *kept, out);
}

// Writes `bytes` as the whole of `name` (created or emptied), fsynced.
Status WriteWhole(Pass& p, const std::string& name, Bytes bytes) {
  auto f = p.fs->Open(p.dfd, name, FileSystem::kCreate);
  if (!f) return f.error();
  MQ_RETURN_IF_ERROR((*f)->Truncate(0));
  if (!bytes.empty()) MQ_RETURN_IF_ERROR((*f)->WriteAt(0, bytes));
  return (*f)->Sync();
}

// R122, R123 step 1: segment `seg` cleaned into its `.cleaned` files.
Status WriteCleaned(Pass& p, const RetentionSegment& seg) {
  const std::string log_name = SegmentFileName(seg.base, format::kLogSuffix) + kCleanedSuffix;
  auto log = p.fs->Open(p.dfd, log_name, FileSystem::kCreate);
  if (!log) return log.error();
  MQ_RETURN_IF_ERROR((*log)->Truncate(0));
  IndexBuilder ib(seg.base, format::kDefaultIndexIntervalBytes);
  std::vector<std::byte> out, offset_index, time_index;
  uint64_t written = 0;
  Status s =
      ForEachBatch(p, seg, [&](const BatchView& view, uint64_t pos, const std::string& name) {
        const size_t before = out.size();
        MQ_RETURN_IF_ERROR(CleanBatch(p, view, pos, name, &out));
        if (out.size() > before) {
          ib.Add(DecodeBatchHeader(Bytes(out).subspan(before)), written + before, &offset_index,
                 &time_index);
        }
        if (out.size() < kFlushBytes) return Status::Ok();
        MQ_RETURN_IF_ERROR((*log)->WriteAt(written, out));
        written += out.size();
        out.clear();
        return Status::Ok();
      });
  MQ_RETURN_IF_ERROR(s);
  if (!out.empty()) MQ_RETURN_IF_ERROR((*log)->WriteAt(written, out));
  written += out.size();
  MQ_RETURN_IF_ERROR((*log)->Sync());
  ib.Finish(&time_index);
  p.report->bytes_before += seg.bytes;
  p.report->bytes_after += written;
  MQ_RETURN_IF_ERROR(WriteWhole(p, SegmentFileName(seg.base, format::kIndexSuffix) + kCleanedSuffix,
                                offset_index));
  return WriteWhole(p, SegmentFileName(seg.base, format::kTimeIndexSuffix) + kCleanedSuffix,
                    time_index);
}

// The three file names of segment `base`, the .log last.
std::vector<std::string> IndexesThenLog(int64_t base) {
  return {SegmentFileName(base, format::kIndexSuffix),
          SegmentFileName(base, format::kTimeIndexSuffix),
          SegmentFileName(base, format::kLogSuffix)};
}

// R123 step 3 (and R124's completion): each `.swap` file renamed over its
// name, the .log last; one already renamed is passed over.
Status CompleteSwap(FileSystem* fs, int dfd, int64_t base) {
  for (const std::string& name : IndexesThenLog(base)) {
    Status s = fs->Rename(dfd, name + kSwapSuffix, name);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  return Status::Ok();
}

// R123: segment `seg` cleaned aside, committed, swapped in. Steps 2 and 3
// run under the partition's writer lock (R125): a writer opening the
// partition meanwhile would find the new indexes beside the old log and
// rebuild them from it (R23); it waits for the swap instead. Step 1, the
// long one, runs without it: producers append on.
Status CleanAndSwap(Pass& p, const RetentionSegment& seg) {
  MQ_RETURN_IF_ERROR(WriteCleaned(p, seg));
  MQ_RETURN_IF_ERROR(p.fs->SyncDir(p.dfd));
  MQ_RETURN_IF_ERROR(p.writer_lock->Lock());
  LockGuard guard(p.writer_lock);
  for (const std::string& name : IndexesThenLog(seg.base))
    MQ_RETURN_IF_ERROR(p.fs->Rename(p.dfd, name + kCleanedSuffix, name + kSwapSuffix));
  MQ_RETURN_IF_ERROR(p.fs->SyncDir(p.dfd));
  MQ_RETURN_IF_ERROR(CompleteSwap(p.fs, p.dfd, seg.base));
  MQ_RETURN_IF_ERROR(p.fs->SyncDir(p.dfd));
  ++p.report->segments_cleaned;
  return Status::Ok();
}

// R116: the map's memory: the budget, or less when the dirty section's
// batches hold fewer records than the budget has room for (their headers'
// recordsCount summed), so a small partition does not allocate the budget.
Result<size_t> MapMemory(FileSystem* fs, int dfd, const DecodeLimits& limits,
                         const CompactionPlan& plan, size_t budget) {
  uint64_t records = 0;
  for (const RetentionSegment& seg : plan.segments) {
    if (seg.end <= plan.first_dirty) continue;
    MQ_RETURN_IF_ERROR(
        ForEachHeader(dfd, fs, limits, seg.base, 0, seg.bytes, [&](const BatchHeader& h, uint64_t) {
          if (!h.is_control()) records += h.records_count;
        }));
  }
  const double slots = static_cast<double>(records) / OffsetMap::kLoadFactor + 2;
  return std::min<size_t>(budget, static_cast<size_t>(slots) * OffsetMap::kBytesPerSlot);
}

}  // namespace

bool KeyedMessagesOnly(const TopicConfig& config) {
  return config.cleanup_policy == CleanupPolicy::kCompact;
}

Status CheckMessageKey(const TopicConfig& config, std::string_view topic, bool has_key,
                       const std::string& source, uint64_t position) {
  if (has_key || !KeyedMessagesOnly(config)) return Status::Ok();
  return Status::Corruption(
      source, position, "R126",
      fmt::format("a message without a key: topic \"{}\" has cleanup.policy=compact, which "
                  "keeps the latest message of each key and takes keyed messages only",
                  topic));
}

Result<int> FinishCompactionSwaps(int dir_fd, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto lock = WriterLock::Open(dir_fd, fs);  // R125, as CleanAndSwap
  if (!lock) return lock.error();
  MQ_RETURN_IF_ERROR(lock->Lock());
  LockGuard guard(&*lock);
  auto names = ListNames(dir_fd, PathAt(dir_fd, "."), fs);
  if (!names) return names.error();
  const std::string log_swap = std::string(format::kLogSuffix) + kSwapSuffix;
  std::vector<int64_t> committed;
  for (const std::string& n : *names)
    if (int64_t base = NumberedFileOffset(n, log_swap.c_str()); base >= 0)
      committed.push_back(base);
  bool changed = false;
  for (const std::string& n : *names) {
    if (EndsWith(n, kCleanedSuffix)) {
      MQ_RETURN_IF_ERROR(fs->Unlink(dir_fd, n));
      changed = true;
      continue;
    }
    for (const char* suffix : {format::kIndexSuffix, format::kTimeIndexSuffix}) {
      const int64_t base = NumberedFileOffset(n, (std::string(suffix) + kSwapSuffix).c_str());
      if (base < 0 || std::find(committed.begin(), committed.end(), base) != committed.end())
        continue;
      MQ_RETURN_IF_ERROR(fs->Unlink(dir_fd, n));  // R124: before the commit
      changed = true;
    }
  }
  for (int64_t base : committed) MQ_RETURN_IF_ERROR(CompleteSwap(fs, dir_fd, base));
  if (changed || !committed.empty()) MQ_RETURN_IF_ERROR(fs->SyncDir(dir_fd));
  return static_cast<int>(committed.size());
}

Result<CompactionReport> CompactPartition(const std::string& dir, const CompactionPolicy& policy,
                                          FileSystem* fs, const DecodeLimits& limits) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  CompactionReport report;
  auto finished = FinishCompactionSwaps(dfd->get(), fs);
  if (!finished) return finished.error();
  report.swaps_finished = *finished;
  auto log = ListRetentionSegments(dir, fs);
  if (!log) return log.error();
  auto checkpoint = ReadCompactionCheckpoint(dfd->get(), fs);
  if (!checkpoint) return checkpoint.error();
  report.plan = PlanCompaction(
      *log, checkpoint->value_or(CompactionCheckpoint{log->log_start_offset, -1}), policy);
  if (!report.plan.due) return report;
  auto memory = MapMemory(fs, dfd->get(), limits, report.plan, policy.max_memory_bytes);
  if (!memory) return memory.error();
  Pass p(*memory);
  p.fs = fs;
  p.dfd = dfd->get();
  p.limits = limits;
  p.policy = policy;
  p.report = &report;
  auto writer_lock = WriterLock::Open(p.dfd, dir, fs);
  if (!writer_lock) return writer_lock.error();
  p.writer_lock = &*writer_lock;
  MQ_RETURN_IF_ERROR(BuildOffsetMap(p, report.plan));
  report.keys = p.map.size();
  report.map_memory_bytes = p.map.memory_bytes();
  report.map_end = p.map_end;
  MQ_RETURN_IF_ERROR(FindLastProducerBatches(p, report.plan));
  for (const RetentionSegment& seg : report.plan.segments) {
    if (seg.base >= p.map_end) break;
    MQ_RETURN_IF_ERROR(CleanAndSwap(p, seg));
  }
  MQ_RETURN_IF_ERROR(WriteCompactionCheckpoint(
      p.dfd, fs, CompactionCheckpoint{p.map_end, report.next_delete_horizon}));
  report.compacted = true;
  return report;
}

}  // namespace mq
