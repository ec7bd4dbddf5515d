// Verification without modification: VerifyFile and VerifyPartition.
// Every problem names file, byte position and rule.
#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "format.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/segment.h"
#include "offset_index.h"
#include "segment.h"
#include "state_file.h"

namespace mq {

Result<std::unique_ptr<File>> OpenFileByPath(const std::string& path);  // segment_scanner.cc

namespace {

struct BatchInfo {
  uint64_t position;
  int64_t last_offset;
  int64_t max_timestamp;
};

bool EndsWith(const std::string& s, const char* suffix) {
  std::string suf = suffix;
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void Add(std::vector<Problem>* problems, const Status& s, const std::string& file, uint64_t pos) {
  if (s.code() == Code::kCorruption)
    problems->push_back({s.file().empty() ? file : s.file(), s.position(), s.rule(), s.message()});
  else
    problems->push_back({file, pos, "R8", s.message()});
}

// Checks every batch and record of a .log; fills `batches` for index checks.
// With `contiguous` (a delete-policy partition) the batches must also
// continue each other's offsets from the segment's base (R26).
Status VerifyLog(const std::string& path, const DecodeLimits& limits,
                 std::vector<Problem>* problems, std::vector<BatchInfo>* batches,
                 bool contiguous = false) {
  auto scanner = SegmentScanner::Open(path, limits);
  if (!scanner) return scanner.error();
  auto base = SegmentBaseOffset(path);
  if ((*scanner)->file_size() > format::kMaxSegmentBytes)
    problems->push_back({path, format::kMaxSegmentBytes, "R10", "file is over 2^31-1 bytes"});
  int64_t prev = -1;
  std::vector<std::byte> scratch;
  std::optional<uint64_t> last_error;
  for (;;) {
    auto next = (*scanner)->Next();
    if (!next) {
      if (next.error().code() != Code::kCorruption) return next.error();
      Add(problems, next.error(), path, (*scanner)->position());
      last_error = (*scanner)->position();
      continue;
    }
    if (!*next) break;
    const BatchView& b = **next;
    const BatchHeader& h = b.header();
    uint64_t pos = (*scanner)->position();
    if (base && h.base_offset < *base)
      problems->push_back({path, pos, "R10", fmt::format("baseOffset {} below the segment base {}",
                                                         h.base_offset, *base)});
    if (h.base_offset <= prev)
      problems->push_back({path, pos, "R10", fmt::format("baseOffset {} not after the previous "
                                                         "last offset {}", h.base_offset, prev)});
    else if (contiguous && base && h.base_offset != (prev < 0 ? *base : prev + 1))
      problems->push_back({path, pos, "R26", fmt::format("baseOffset {} skips offsets {}..{}",
                                                         h.base_offset, prev < 0 ? *base : prev + 1,
                                                         h.base_offset - 1)});
    if (base && h.last_offset() - *base > INT32_MAX)
      problems->push_back({path, pos, "R10", "lastOffset too far from the segment base"});
    prev = std::max(prev, h.last_offset());
    batches->push_back({pos, h.last_offset(), h.max_timestamp});
    auto records = RecordReader::Open(b, &scratch, limits, path, pos);
    if (!records) {
      if (records.error().code() == Code::kNoMemory) return records.error();
      // A gzip/snappy/lz4 batch is valid (R5), but its records cannot be
      // checked: say so rather than call the file clean.
      if (records.error().code() == Code::kUnsupported)
        problems->push_back({path, pos, "R5", fmt::format("unsupported codec {}: records not "
                                                          "verified", CompressionName(h.compression()))});
      else
        Add(problems, records.error(), path, pos);
      continue;
    }
    for (;;) {
      auto r = records->Next();
      if (!r) {
        Add(problems, r.error(), path, pos);
        break;
      }
      if (!*r) break;
    }
  }
  uint64_t trailing = (*scanner)->trailing_bytes();
  uint64_t at = (*scanner)->file_size() - trailing;
  if (trailing > 0 && last_error != at)
    problems->push_back({path, at, "R1", fmt::format("{} bytes at the end hold no complete batch "
                                                     "(torn tail)", trailing)});
  return Status::Ok();
}

Result<std::vector<BatchInfo>> SiblingBatches(const std::string& index_path, const char* suffix,
                                              const DecodeLimits& limits) {
  std::string log = index_path.substr(0, index_path.size() - std::string(suffix).size()) +
                    format::kLogSuffix;
  std::vector<BatchInfo> batches;
  std::vector<Problem> ignored;  // the .log's own problems are its own report
  MQ_RETURN_IF_ERROR(VerifyLog(log, limits, &ignored, &batches));
  return batches;
}

Status VerifyOffsetIndex(const std::string& path, const std::vector<BatchInfo>& known,
                         std::vector<Problem>* problems) {
  auto entries = ReadOffsetIndexFile(path);
  if (!entries) {
    if (entries.error().code() != Code::kCorruption) return entries.error();
    Add(problems, entries.error(), path, 0);
    return Status::Ok();
  }
  for (size_t i = 0; i < entries->size(); ++i) {
    const auto& e = (*entries)[i];
    uint64_t at = i * format::kOffsetIndexEntrySize;
    if (i > 0 && (e.offset <= (*entries)[i - 1].offset || e.position <= (*entries)[i - 1].position)) {
      problems->push_back({path, at, "R13", fmt::format("entry {} (offset {}, position {}) does not "
                                                        "increase", i, e.offset, e.position)});
      continue;
    }
    auto it = std::lower_bound(known.begin(), known.end(), uint64_t{e.position},
                               [](const BatchInfo& b, uint64_t p) { return b.position < p; });
    if (it == known.end() || it->position != e.position)
      problems->push_back({path, at, "R13", fmt::format("entry {}: no batch starts at position {}",
                                                        i, e.position)});
    else if (it->last_offset != e.offset)
      problems->push_back({path, at, "R13", fmt::format("entry {}: batch at {} has last offset {}, "
                                                        "not {}", i, e.position, it->last_offset,
                                                        e.offset)});
  }
  return Status::Ok();
}

Status VerifyTimeIndex(const std::string& path, const std::vector<BatchInfo>& known,
                       std::vector<Problem>* problems) {
  auto entries = ReadTimeIndexFile(path);
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
    if (i > 0 && e.timestamp <= (*entries)[i - 1].timestamp)
      problems->push_back({path, at, "R14", fmt::format("entry {}: timestamp {} does not increase",
                                                        i, e.timestamp)});
    else if (i > 0 && e.offset < (*entries)[i - 1].offset)
      problems->push_back({path, at, "R14", fmt::format("entry {}: offset {} decreases", i,
                                                        e.offset)});
    else if (!std::binary_search(lasts.begin(), lasts.end(), e.offset))
      problems->push_back({path, at, "R14", fmt::format("entry {}: offset {} is not the last offset "
                                                        "of a batch", i, e.offset)});
  }
  return Status::Ok();
}

}  // namespace

Status VerifyFile(const std::string& path, const DecodeLimits& limits,
                  std::vector<Problem>* problems) {
  if (EndsWith(path, format::kLogSuffix)) {
    std::vector<BatchInfo> batches;
    return VerifyLog(path, limits, problems, &batches);
  }
  // An index is checked against the batches of its sibling .log.
  const bool time_index = EndsWith(path, format::kTimeIndexSuffix);
  if (time_index || EndsWith(path, format::kIndexSuffix)) {
    auto batches =
        SiblingBatches(path, time_index ? format::kTimeIndexSuffix : format::kIndexSuffix, limits);
    if (!batches) return batches.error();
    return time_index ? VerifyTimeIndex(path, *batches, problems)
                      : VerifyOffsetIndex(path, *batches, problems);
  }
  return Status(Code::kInvalidArgument,
                path + ": not a .log, .index or .timeindex file");
}

Status VerifyPartition(const std::string& dir, const DecodeLimits& limits,
                       std::vector<Problem>* problems, OffsetPolicy offsets) {
  const bool contiguous = offsets == OffsetPolicy::kContiguous;
  auto dfd = OpenDirectory(dir, false);
  if (!dfd) return dfd.error();
  auto segments = ListSegments(dfd->get());
  if (!segments) return segments.error();
  int64_t prev_last = -1;
  uint64_t end_size = 0;
  std::string prev_log;
  for (int64_t base : *segments) {
    std::string log = dir + "/" + SegmentFileName(base, format::kLogSuffix);
    std::vector<BatchInfo> batches;
    MQ_RETURN_IF_ERROR(VerifyLog(log, limits, problems, &batches, contiguous));
    if (!batches.empty() && prev_last >= 0 && base <= prev_last)
      problems->push_back({log, 0, "R11", fmt::format("segment base {} is not after the last offset "
                                                      "{} of the segment before", base, prev_last)});
    else if (contiguous && prev_last >= 0 && base != prev_last + 1)
      // Reported where the reader stops: at the end of the segment before.
      problems->push_back({prev_log, end_size, "R26",
                           fmt::format("the segment ends at offset {} but the next one, {}, "
                                       "starts at {}", prev_last, SegmentFileName(base,
                                       format::kLogSuffix), base)});
    prev_log = log;
    for (const auto& b : batches) prev_last = std::max(prev_last, b.last_offset);
    auto f = OpenFileByPath(log);
    if (f) {
      auto s = (*f)->Size();
      if (s) end_size = *s;
    }
    for (const char* suffix : {format::kIndexSuffix, format::kTimeIndexSuffix}) {
      std::string idx = dir + "/" + SegmentFileName(base, suffix);
      Status s = EndsWith(idx, format::kTimeIndexSuffix)
                     ? VerifyTimeIndex(idx, batches, problems)
                     : VerifyOffsetIndex(idx, batches, problems);
      if (s.code() == Code::kNotFound)
        problems->push_back({idx, 0, "R23", "index file missing (rebuilt when a writer opens)"});
      else if (!s.ok())
        return s;
    }
  }
  auto state = StateFile::OpenForRead(dfd->get());
  std::string state_path = dir + "/" + kStateFileName;
  if (state) {
    auto f = state->Read();
    if (!f) {
      problems->push_back({state_path, f.error().position(), "R15", f.error().message()});
    } else if (segments->empty() || f->end_segment_base != segments->back() ||
               f->end_position > end_size) {
      problems->push_back({state_path, 0, "R15",
                           fmt::format("committed end (segment {}, position {}) is past the log",
                                       f->end_segment_base, f->end_position)});
    }
  } else if (state.error().code() == Code::kCorruption) {
    problems->push_back({state_path, state.error().position(), "R15", state.error().message()});
  }
  return Status::Ok();
}

}  // namespace mq
