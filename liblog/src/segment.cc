// Segment naming (R12), listing, and BatchCursor.
#include "segment.h"

#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "format.h"
#include "mq/segment.h"

namespace mq {

Result<int64_t> SegmentBaseOffset(const std::string& file_name) {
  // Only the last path component counts: mq-inspect passes paths.
  size_t slash = file_name.rfind('/');
  std::string name = slash == std::string::npos ? file_name : file_name.substr(slash + 1);
  auto bad = [&] {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: R12: not a segment file name (20 digits + .log, .index "
                              "or .timeindex)", file_name));
  };
  if (name.size() < format::kSegmentNameDigits + 1) return bad();
  std::string suffix = name.substr(format::kSegmentNameDigits);
  if (suffix != format::kLogSuffix && suffix != format::kIndexSuffix &&
      suffix != format::kTimeIndexSuffix)
    return bad();
  uint64_t v = 0;
  for (int i = 0; i < format::kSegmentNameDigits; ++i) {
    char c = name[static_cast<size_t>(i)];
    if (c < '0' || c > '9') return bad();
    uint64_t next = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - 9) / 10 || next > static_cast<uint64_t>(INT64_MAX)) return bad();
    v = next;
  }
  return static_cast<int64_t>(v);
}

std::string SegmentFileName(int64_t base_offset, const char* suffix) {
  return fmt::format("{:020d}{}", base_offset, suffix);
}

bool IsTempName(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
}

Result<std::vector<int64_t>> ListSegments(int dir_fd) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("list partition directory", errno);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("list partition directory", err);
  }
  std::vector<int64_t> bases;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != format::kSegmentNameDigits + std::strlen(format::kLogSuffix)) continue;
    if (name.compare(format::kSegmentNameDigits, std::string::npos, format::kLogSuffix) != 0)
      continue;
    auto base = SegmentBaseOffset(name);
    if (base) bases.push_back(*base);
  }
  ::closedir(d);
  std::sort(bases.begin(), bases.end());
  return bases;
}

BatchCursor::BatchCursor(const DecodeLimits& limits, size_t chunk_bytes)
    : limits_(limits), chunk_(chunk_bytes) {}

void BatchCursor::Reset(File* file, std::string name, uint64_t end) {
  file_ = file;
  name_ = std::move(name);
  end_ = end;
  buf_len_ = 0;
  buf_pos_ = 0;
}

// Makes bytes [pos, pos + n) (clipped to end_) present in buf_.
Status BatchCursor::Fill(uint64_t pos, size_t n) {
  if (pos >= end_) {
    buf_pos_ = pos;
    buf_len_ = 0;
    return Status::Ok();
  }
  uint64_t want_end = std::min<uint64_t>(end_, pos + n);
  if (pos >= buf_pos_ && want_end <= buf_pos_ + buf_len_) return Status::Ok();
  // Sequential reading doubles the read size up to chunk_; a jump (a seek)
  // starts small, so positioning reads little.
  bool sequential = buf_len_ > 0 && pos >= buf_pos_ && pos <= buf_pos_ + buf_len_;
  next_chunk_ = sequential ? std::min(chunk_, next_chunk_ * 2) : std::min<size_t>(chunk_, 64 << 10);
  size_t len = static_cast<size_t>(std::min<uint64_t>(end_ - pos, std::max(n, next_chunk_)));
  // Never more than the largest batch plus one chunk (Peek checks sizes
  // against the limits before asking).
  len = std::min<size_t>(len, size_t{limits_.max_batch_bytes} + chunk_);
  if (buf_.size() < len) buf_.resize(len);
  auto got = file_->ReadAt(pos, std::span<std::byte>(buf_.data(), len));
  if (!got) return got.error();
  buf_pos_ = pos;
  buf_len_ = *got;
  return Status::Ok();
}

Result<BatchCursor::Step> BatchCursor::Peek(uint64_t pos, BatchHeader* header, Bytes* bytes) {
  if (pos >= end_) return Step::kEnd;
  MQ_RETURN_IF_ERROR(Fill(pos, format::kBatchHeaderSize));
  auto available = [&] {
    size_t off = static_cast<size_t>(pos - buf_pos_);
    return Bytes(buf_.data() + off, buf_len_ - off);
  };
  auto probe = ProbeBatch(available(), header, limits_, name_, pos);
  if (!probe) return probe.error();
  if (*probe == Probe::kTornTail) {
    if (available().size() < format::kBatchHeaderSize) return Step::kTorn;
    uint64_t size = header->size_bytes();
    if (size > end_ - pos) return Step::kTorn;
    MQ_RETURN_IF_ERROR(Fill(pos, static_cast<size_t>(size)));
    probe = ProbeBatch(available(), header, limits_, name_, pos);
    if (!probe) return probe.error();
    if (*probe == Probe::kTornTail) return Step::kTorn;  // short read: file shrank
  }
  *bytes = available().first(static_cast<size_t>(header->size_bytes()));
  return Step::kBatch;
}

Result<BatchCursor::Step> BatchCursor::Read(uint64_t pos, BatchView* view) {
  BatchHeader h;
  Bytes bytes;
  auto step = Peek(pos, &h, &bytes);
  if (!step || *step != Step::kBatch) return step;
  auto parsed = BatchView::Parse(bytes, limits_, name_, pos);
  if (!parsed) return parsed.error();
  *view = *parsed;
  return Step::kBatch;
}

Result<std::optional<uint64_t>> BatchCursor::FindNextValid(uint64_t from) {
  // Hostile bytes can put a plausible header at every position; bound the
  // CRC work so the scan stays linear. Giving up is reported as corruption,
  // the safe answer: nothing gets truncated on a guess.
  uint64_t budget = std::max<uint64_t>(64ull << 20, 8 * (end_ - from));
  for (uint64_t p = from + 1; p + format::kBatchHeaderSize <= end_; ++p) {
    MQ_RETURN_IF_ERROR(Fill(p, format::kBatchHeaderSize));
    if (buf_len_ - (p - buf_pos_) < format::kBatchHeaderSize) break;
    const std::byte* b = buf_.data() + (p - buf_pos_);
    // Cheap filters before the CRC: magic, then a length that fits.
    if (std::to_integer<int8_t>(b[format::kMagicOffset]) != format::kMagicV2) continue;
    uint64_t len = LoadBig32(b + format::kBatchLengthOffset);
    if (len < format::kBatchHeaderSize - format::kLogOverhead || len > limits_.max_batch_bytes ||
        p + format::kLogOverhead + len > end_)
      continue;
    if (len > budget)
      return Status::Corruption(name_, from, "R22",
                                fmt::format("resync scan gave up at byte {}: too many candidate "
                                            "batches", p));
    budget -= len;
    BatchView view;
    auto step = Read(p, &view);
    if (step && *step == Step::kBatch) return std::optional<uint64_t>(p);
  }
  return std::optional<uint64_t>();
}

}  // namespace mq
