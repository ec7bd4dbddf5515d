// BatchCursor (format-spec/segment.md §6, R1-R6, R10, R22).
#include "format/batch_cursor.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "format/coding.h"
#include "format/format.h"
#include "mq/crc32c.h"

namespace mq {

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
  if (buf_cap_ < len) {
    buf_.reset();  // the old buffer first: never two large ones at once
    buf_cap_ = 0;
    buf_.reset(new std::byte[len]);
    buf_cap_ = len;
  }
  auto got = file_->ReadAt(pos, std::span<std::byte>(buf_.get(), len));
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
    return Bytes(buf_.get() + off, buf_len_ - off);
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

namespace {

// Prefix CRCs of a file range [origin, end), computed lazily in one forward
// pass and kept every kStride bytes: C(x) = CRC-32C of [origin, x). The CRC
// of any [a, b) is then C(b) ^ shift(C(a), b - a) (Crc32cCombine solved for
// the second part, which is the same sum), at most 2·kStride bytes of work,
// so no byte of the range is hashed more than a constant number of times
// whatever the candidates.
class PrefixCrc {
 public:
  static constexpr uint64_t kStride = 4096;
  PrefixCrc(File* file, uint64_t origin, uint64_t end) : file_(file), origin_(origin), end_(end) {
    marks_.push_back(0);  // CRC-32C of nothing
  }

  Result<uint32_t> Crc(uint64_t a, uint64_t b) {
    auto ca = At(a);
    if (!ca) return ca.error();
    auto cb = At(b);
    if (!cb) return cb.error();
    return Crc32cCombine(*ca, *cb, b - a);
  }

 private:
  Result<uint32_t> At(uint64_t x) {
    uint64_t i = (x - origin_) / kStride;
    while (marks_.size() <= i) {  // extend the forward pass, 1 MiB at a time
      if (block_.empty()) block_.resize(1 << 20);
      uint64_t from = origin_ + (marks_.size() - 1) * kStride;
      uint64_t n = std::min<uint64_t>(block_.size(), end_ - from) / kStride * kStride;
      auto got = file_->ReadAt(from, std::span(block_.data(), n));
      if (!got) return got.error();
      if (*got < n) return Status(Code::kIoError, "resync scan: short read (file shrank)");
      for (uint64_t at = 0; at < n; at += kStride)
        marks_.push_back(Crc32cExtend(marks_.back(), std::span(block_.data() + at, kStride)));
    }
    uint64_t base = origin_ + i * kStride;
    size_t rest = static_cast<size_t>(x - base);
    if (rest == 0) return marks_[i];
    std::byte tail[kStride];
    auto got = file_->ReadAt(base, std::span(tail, rest));
    if (!got) return got.error();
    if (*got < rest) return Status(Code::kIoError, "resync scan: short read (file shrank)");
    return Crc32cExtend(marks_[i], std::span<const std::byte>(tail, rest));
  }

  File* file_;
  uint64_t origin_, end_;
  std::vector<uint32_t> marks_;
  std::vector<std::byte> block_;
};

}  // namespace

Result<std::optional<uint64_t>> BatchCursor::FindNextValid(uint64_t from, ResyncHint hint) {
  // Hostile bytes can put a plausible header at every position. The cheap
  // facts of a header (magic, a length that fits, attributes, counts, and
  // offsets that continue those before, R10) come first; a candidate that
  // passes them gets its CRC from prefix CRCs, so the scan is linear in the
  // bytes after `from` and always ends in an answer.
  PrefixCrc prefix(file_, from + 1, end_);
  for (uint64_t p = from + 1; p + format::kBatchHeaderSize <= end_; ++p) {
    MQ_RETURN_IF_ERROR(Fill(p, format::kBatchHeaderSize));
    size_t avail = buf_len_ - static_cast<size_t>(p - buf_pos_);
    if (avail < format::kBatchHeaderSize) break;
    // Magic first, over the whole buffer at once: the next position whose
    // magic byte is 2 and whose header is in the buffer.
    const std::byte* at = buf_.get() + (p - buf_pos_);
    size_t positions = avail - format::kBatchHeaderSize + 1;
    const void* hit = std::memchr(at + format::kMagicOffset, format::kMagicV2, positions);
    if (hit == nullptr) {
      p += positions - 1;
      continue;
    }
    p += static_cast<uint64_t>(static_cast<const std::byte*>(hit) - (at + format::kMagicOffset));
    const std::byte* b = buf_.get() + (p - buf_pos_);
    uint64_t len = coding::GetFixed32(b + format::kBatchLengthOffset);
    if (len < format::kBatchHeaderSize - format::kLogOverhead ||
        len + format::kLogOverhead > limits_.max_batch_bytes ||
        p + format::kLogOverhead + len > end_)
      continue;
    BatchHeader h = DecodeBatchHeader(Bytes(b, format::kBatchHeaderSize));
    uint16_t attributes = static_cast<uint16_t>(h.attributes);
    if ((attributes & format::kUnusedAttributeBits) != 0 ||
        (attributes & format::kCodecMask) > static_cast<uint16_t>(Compression::kZstd))
      continue;
    if (h.last_offset_delta < 0 || h.records_count < 0 ||
        int64_t{h.records_count} > int64_t{h.last_offset_delta} + 1 ||
        (h.is_control() && h.records_count != 1))
      continue;
    if (h.base_offset < 0 || h.base_offset > INT64_MAX - 1 - h.last_offset_delta) continue;
    if (h.base_offset <= hint.after_offset) continue;
    if (hint.segment_base >= 0 && (h.base_offset < hint.segment_base ||
                                   h.last_offset() - hint.segment_base > int64_t{INT32_MAX}))
      continue;
    auto crc = prefix.Crc(p + format::kAttributesOffset, p + format::kLogOverhead + len);
    if (!crc) return crc.error();
    if (*crc != h.crc) continue;
    BatchView view;
    auto step = Read(p, &view);
    if (step && *step == Step::kBatch) return std::optional<uint64_t>(p);
  }
  return std::optional<uint64_t>();
}

}  // namespace mq
