// Record batch header: decoding, validation (R1-R7) and the encoder's header
// writer. Byte table: format-spec/batch.md §3; offsets come from format.h.
#include "mq/batch.h"

#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/compression.h"
#include "format/format.h"
#include "mq/crc32c.h"

namespace mq {

using namespace format;  // NOLINT: the byte-table constants
using coding::GetFixed16;
using coding::GetFixed32;
using coding::GetFixed64;

int32_t BatchHeader::last_sequence() const {
  if (base_sequence < 0) return -1;
  // Sequences wrap from INT32_MAX to 0 (Kafka DefaultRecordBatch.incrementSequence).
  int64_t last = int64_t{base_sequence} + last_offset_delta;
  if (last > std::numeric_limits<int32_t>::max()) last -= int64_t{1} << 31;
  return static_cast<int32_t>(last);
}

namespace {
// The fields through magic (kMinHeaderPrefix bytes): all a reader may look at
// before it knows the batch is v2.
BatchHeader DecodeHeaderPrefix(const std::byte* p) {
  BatchHeader h;
  h.base_offset = static_cast<int64_t>(GetFixed64(p + kBaseOffsetOffset));
  h.batch_length = static_cast<int32_t>(GetFixed32(p + kBatchLengthOffset));
  h.partition_leader_epoch = static_cast<int32_t>(GetFixed32(p + kPartitionLeaderEpochOffset));
  h.magic = static_cast<int8_t>(p[kMagicOffset]);
  return h;
}
}  // namespace

BatchHeader DecodeBatchHeader(Bytes bytes) {
  const std::byte* p = bytes.data();
  BatchHeader h = DecodeHeaderPrefix(p);
  h.crc = GetFixed32(p + kCrcOffset);
  h.attributes = static_cast<int16_t>(GetFixed16(p + kAttributesOffset));
  h.last_offset_delta = static_cast<int32_t>(GetFixed32(p + kLastOffsetDeltaOffset));
  h.base_timestamp = static_cast<int64_t>(GetFixed64(p + kBaseTimestampOffset));
  h.max_timestamp = static_cast<int64_t>(GetFixed64(p + kMaxTimestampOffset));
  h.producer_id = static_cast<int64_t>(GetFixed64(p + kProducerIdOffset));
  h.producer_epoch = static_cast<int16_t>(GetFixed16(p + kProducerEpochOffset));
  h.base_sequence = static_cast<int32_t>(GetFixed32(p + kBaseSequenceOffset));
  h.records_count = static_cast<int32_t>(GetFixed32(p + kRecordsCountOffset));
  return h;
}

Result<Probe> ProbeBatch(Bytes bytes, BatchHeader* header, const DecodeLimits& limits,
                         const std::string& file, uint64_t position) {
  // R1: the bytes through magic come first; without them nothing is known.
  if (bytes.size() < kMinHeaderPrefix) return Probe::kTornTail;
  BatchHeader h = DecodeHeaderPrefix(bytes.data());
  *header = h;
  // R2 before R1's length test: a garbage length is corruption, not a tail.
  constexpr int32_t kMinLength = static_cast<int32_t>(kBatchHeaderSize - kLogOverhead);
  if (h.batch_length < kMinLength) {
    return Status::Corruption(file, position, "R2",
                              fmt::format("batchLength {} < {}", h.batch_length, kMinLength));
  }
  if (h.size_bytes() > limits.max_batch_bytes) {
    return Status::Corruption(file, position, "R2",
                              fmt::format("batch of {} bytes exceeds the maximum {}",
                                          h.size_bytes(), limits.max_batch_bytes));
  }
  if (h.magic != kMagicV2) {
    return Status::Corruption(file, position, "R3", fmt::format("magic {} is not 2", h.magic));
  }
  if (bytes.size() < kBatchHeaderSize) return Probe::kTornTail;
  *header = DecodeBatchHeader(bytes);
  // R19 before anything computes lastOffset = baseOffset + lastOffsetDelta.
  if (header->base_offset < 0 || header->base_offset > kMaxOffset ||
      (header->last_offset_delta > 0 &&
       header->base_offset > kMaxOffset - header->last_offset_delta)) {
    return Status::Corruption(
        file, position, "R19",
        fmt::format("baseOffset {} + lastOffsetDelta {} is outside 0..{}", header->base_offset,
                    header->last_offset_delta, kMaxOffset));
  }
  if (bytes.size() < header->size_bytes()) return Probe::kTornTail;
  return Probe::kBatch;
}

namespace {

Status CheckAttributes(const BatchHeader& h, const std::string& file, uint64_t position) {
  uint16_t attributes = static_cast<uint16_t>(h.attributes);
  // R5: a bit or codec a later Kafka may define is not damage: the batch
  // passed its CRC. It is unsupported (exit 65), never repaired or skipped.
  if (attributes & kUnusedAttributeBits) {
    return Status(Code::kUnsupported,
                  fmt::format("{}: position {}: R5: unsupported attributes 0x{:04x}: bits 7-15 "
                              "are not defined by RecordBatch v2",
                              file, position, attributes));
  }
  if ((attributes & kCodecMask) > static_cast<uint16_t>(Compression::kZstd)) {
    return Status(Code::kUnsupported, fmt::format("{}: position {}: R5: unsupported codec {}", file,
                                                  position, attributes & kCodecMask));
  }
  return Status::Ok();
}

Status CheckCounts(const BatchHeader& h, const std::string& file, uint64_t position) {
  if (h.last_offset_delta < 0) {
    return Status::Corruption(file, position, "R6",
                              fmt::format("lastOffsetDelta {} < 0", h.last_offset_delta));
  }
  if (h.records_count < 0) {
    return Status::Corruption(file, position, "R6",
                              fmt::format("recordsCount {} < 0", h.records_count));
  }
  if (int64_t{h.records_count} > int64_t{h.last_offset_delta} + 1) {
    return Status::Corruption(file, position, "R6",
                              fmt::format("recordsCount {} > lastOffsetDelta {} + 1",
                                          h.records_count, h.last_offset_delta));
  }
  if (h.is_control() && h.records_count != 1) {
    return Status::Corruption(
        file, position, "R6",
        fmt::format("control batch holds {} records, not 1", h.records_count));
  }
  return Status::Ok();
}

}  // namespace

Result<BatchView> BatchView::Parse(Bytes bytes, const DecodeLimits& limits, const std::string& file,
                                   uint64_t position, CrcCheck crc_check) {
  BatchHeader h;
  Result<Probe> probe = ProbeBatch(bytes, &h, limits, file, position);
  if (!probe) return probe.error();
  if (*probe == Probe::kTornTail) {
    uint64_t need = bytes.size() < kMinHeaderPrefix   ? kMinHeaderPrefix
                    : bytes.size() < kBatchHeaderSize ? kBatchHeaderSize
                                                      : h.size_bytes();
    return Status::Corruption(file, position, "R1",
                              fmt::format("batch needs {} bytes, {} remain", need, bytes.size()));
  }
  Bytes batch = bytes.first(h.size_bytes());
  uint32_t crc = crc_check == CrcCheck::kVerify ? Crc32c(batch.subspan(kAttributesOffset)) : h.crc;
  if (crc != h.crc) {
    return Status::Corruption(file, position, "R4",
                              fmt::format("crc 0x{:08x} stored, 0x{:08x} computed", h.crc, crc));
  }
  MQ_RETURN_IF_ERROR(CheckAttributes(h, file, position));
  MQ_RETURN_IF_ERROR(CheckCounts(h, file, position));
  BatchView view;
  view.header_ = h;
  view.bytes_ = batch;
  return view;
}

Status CheckProducerFields(const BatchHeader& h, const std::string& file, uint64_t position) {
  if (h.is_control() || h.producer_id < 0) return Status::Ok();
  if (h.producer_epoch < 0) {
    return Status::Corruption(
        file, position, "R7",
        fmt::format("producerId {} with producerEpoch {}", h.producer_id, h.producer_epoch));
  }
  if (h.base_sequence < 0) {
    return Status::Corruption(
        file, position, "R7",
        fmt::format("producerId {} with baseSequence {}", h.producer_id, h.base_sequence));
  }
  return Status::Ok();
}

void SetBaseOffset(std::span<std::byte> batch, int64_t base_offset) {
  coding::PutFixed64(batch.data() + kBaseOffsetOffset, static_cast<uint64_t>(base_offset));
}

void SetPartitionLeaderEpoch(std::span<std::byte> batch, int32_t epoch) {
  coding::PutFixed32(batch.data() + kPartitionLeaderEpochOffset, static_cast<uint32_t>(epoch));
}

// ---- the header writer ------------------------------------------------------

namespace {

// Appends a batch to `out`: `header` (every field set but batchLength and
// crc) followed by `payload` (its records, compressed as its attributes
// say), then sets batchLength and computes the CRC over what follows it
// (batch.md §3).
Status AppendEncoded(const std::byte (&header)[kBatchHeaderSize], Bytes payload,
                     std::vector<std::byte>* out, bool crc = true) {
  const uint64_t size = kBatchHeaderSize + payload.size();
  if (size - kLogOverhead > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return Status(Code::kTooLarge, fmt::format("batch of {} bytes", size));
  }
  // Inserted rather than resized into: resizing `out` first would zero-fill
  // every byte before it is written. Room for both parts is made at once.
  const size_t start = out->size();
  if (out->capacity() - start < size) out->reserve(std::max<size_t>(start + size, 2 * start));
  out->insert(out->end(), header, header + kBatchHeaderSize);
  out->insert(out->end(), payload.begin(), payload.end());
  std::byte* batch = out->data() + start;
  coding::PutFixed32(batch + kBatchLengthOffset, static_cast<uint32_t>(size - kLogOverhead));
  coding::PutFixed32(batch + kCrcOffset,
                     crc ? Crc32c(Bytes(batch + kAttributesOffset, size - kAttributesOffset)) : 0);
  return Status::Ok();
}

// The size of the batch at `at` of `batches`, checked to be whole; `what`
// names the caller in errors.
Result<uint64_t> WholeBatchAt(Bytes batches, size_t at, const char* what) {
  Bytes rest = batches.subspan(at);
  if (rest.size() < kBatchHeaderSize) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: {} bytes at {} is no batch", what, rest.size(), at));
  }
  const uint64_t size =
      uint64_t{coding::GetFixed32(rest.data() + kBatchLengthOffset)} + kLogOverhead;
  if (size < kBatchHeaderSize || size > rest.size()) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: the batch at {} is cut short", what, at));
  }
  return size;
}

}  // namespace

Status SealBatches(std::span<std::byte> batches) {
  for (size_t at = 0; at < batches.size();) {
    auto size = WholeBatchAt(batches, at, "seal");
    if (!size) return size.error();
    std::byte* batch = batches.data() + at;
    coding::PutFixed32(batch + kCrcOffset,
                       Crc32c(Bytes(batch + kAttributesOffset, *size - kAttributesOffset)));
    at += *size;
  }
  return Status::Ok();
}

// ---- BatchCompressor ----------------------------------------------------------

BatchCompressor::BatchCompressor(Compression compression, int zstd_level)
    : compression_(compression), zstd_level_(zstd_level) {}

BatchCompressor::~BatchCompressor() {
  if (zstd_ctx_ != nullptr) compression::FreeCompressor(zstd_ctx_);
}

Status BatchCompressor::Compress(Bytes batches, std::vector<std::byte>* out) {
  for (size_t at = 0; at < batches.size();) {
    auto whole = WholeBatchAt(batches, at, "compress");
    if (!whole) return whole.error();
    const uint64_t size = *whole;
    Bytes rest = batches.subspan(at);
    std::byte header[kBatchHeaderSize];
    std::memcpy(header, rest.data(), kBatchHeaderSize);
    const uint16_t attributes = coding::GetFixed16(header + kAttributesOffset);
    if ((attributes & kCodecMask) != 0) {
      return Status(Code::kInvalidArgument,
                    fmt::format("compress: the batch at {} is compressed already", at));
    }
    Bytes payload = rest.subspan(kBatchHeaderSize, size - kBatchHeaderSize);
    if (compression_ != Compression::kNone) {
      MQ_RETURN_IF_ERROR(
          compression::Compress(compression_, payload, zstd_level_, &zstd_ctx_, &compressed_));
      payload = compressed_;
    }
    coding::PutFixed16(header + kAttributesOffset,
                       static_cast<uint16_t>(attributes | static_cast<uint16_t>(compression_)));
    MQ_RETURN_IF_ERROR(AppendEncoded(header, payload, out));
    at += size;
  }
  return Status::Ok();
}

// ---- BatchBuilder: options, lifetime --------------------------------------------

BatchBuilder::BatchBuilder(BatchOptions options) : options_(std::move(options)) {}

BatchBuilder::~BatchBuilder() {
  if (zstd_ctx_ != nullptr) compression::FreeCompressor(zstd_ctx_);
}

BatchBuilder::BatchBuilder(BatchBuilder&& other) noexcept
    : options_(std::move(other.options_)),
      records_(std::move(other.records_)),
      used_(other.used_),
      compressed_(std::move(other.compressed_)),
      count_(other.count_),
      base_timestamp_(other.base_timestamp_),
      max_timestamp_(other.max_timestamp_),
      zstd_ctx_(other.zstd_ctx_) {
  other.zstd_ctx_ = nullptr;
  other.used_ = 0;
  other.count_ = 0;
}

BatchBuilder& BatchBuilder::operator=(BatchBuilder&& other) noexcept {
  if (this != &other) {
    if (zstd_ctx_ != nullptr) compression::FreeCompressor(zstd_ctx_);
    options_ = std::move(other.options_);
    records_ = std::move(other.records_);
    used_ = other.used_;
    compressed_ = std::move(other.compressed_);
    count_ = other.count_;
    base_timestamp_ = other.base_timestamp_;
    max_timestamp_ = other.max_timestamp_;
    zstd_ctx_ = other.zstd_ctx_;
    other.zstd_ctx_ = nullptr;
    other.used_ = 0;
    other.count_ = 0;
  }
  return *this;
}

void BatchBuilder::Reset(BatchOptions options) {
  options_ = std::move(options);
  used_ = 0;
  count_ = 0;
  base_timestamp_ = -1;
  max_timestamp_ = -1;
}

// The batch header, RecordBatch v2 (format-spec/batch.md §3), big-endian:
//
//   off size field                 written here
//    0   8   baseOffset            base_offset argument (not under the CRC)
//    8   4   batchLength           size - 12
//   12   4   partitionLeaderEpoch  options (not under the CRC)
//   16   1   magic                 2
//   17   4   crc                   CRC-32C of bytes [21, size)
//   21   2   attributes            codec | 0x08 LogAppendTime | 0x10 txn | 0x20 control
//   23   4   lastOffsetDelta       count - 1 (0 when empty)
//   27   8   baseTimestamp         first record's timestamp (-1 when empty)
//   35   8   maxTimestamp          largest record timestamp (-1 when empty)
//   43   8   producerId            options (-1: none)
//   51   2   producerEpoch         options (-1: none)
//   53   4   baseSequence          options (-1: none)
//   57   4   recordsCount          count
//   61   .   records               as added, or compressed (§5.1)
Status BatchBuilder::Finish(int64_t base_offset, std::vector<std::byte>* out) {
  Bytes payload(records_.data(), used_);
  if (options_.compression != Compression::kNone) {
    MQ_RETURN_IF_ERROR(compression::Compress(options_.compression, payload, options_.zstd_level,
                                             &zstd_ctx_, &compressed_));
    payload = compressed_;
  }
  uint16_t attributes = static_cast<uint16_t>(options_.compression);
  if (options_.log_append_time) attributes |= kTimestampTypeBit;
  if (options_.is_transactional) attributes |= kTransactionalBit;
  if (options_.is_control) attributes |= kControlBit;
  const int64_t base_ts = options_.base_timestamp.value_or(base_timestamp_);
  const int64_t max_ts = options_.max_timestamp.value_or(max_timestamp_);

  std::byte p[kBatchHeaderSize] = {};
  using coding::PutFixed16;
  using coding::PutFixed32;
  using coding::PutFixed64;
  PutFixed64(p + kBaseOffsetOffset, static_cast<uint64_t>(base_offset));
  PutFixed32(p + kPartitionLeaderEpochOffset,
             static_cast<uint32_t>(options_.partition_leader_epoch));
  p[kMagicOffset] = std::byte(kMagicV2);
  PutFixed16(p + kAttributesOffset, attributes);
  PutFixed32(p + kLastOffsetDeltaOffset, static_cast<uint32_t>(count_ > 0 ? count_ - 1 : 0));
  PutFixed64(p + kBaseTimestampOffset, static_cast<uint64_t>(base_ts));
  PutFixed64(p + kMaxTimestampOffset, static_cast<uint64_t>(max_ts));
  PutFixed64(p + kProducerIdOffset, static_cast<uint64_t>(options_.producer_id));
  PutFixed16(p + kProducerEpochOffset, static_cast<uint16_t>(options_.producer_epoch));
  PutFixed32(p + kBaseSequenceOffset, static_cast<uint32_t>(options_.base_sequence));
  PutFixed32(p + kRecordsCountOffset, static_cast<uint32_t>(count_));
  MQ_RETURN_IF_ERROR(AppendEncoded(p, payload, out, !options_.defer_crc));

  used_ = 0;
  count_ = 0;
  base_timestamp_ = -1;
  max_timestamp_ = -1;
  return Status::Ok();
}

}  // namespace mq
