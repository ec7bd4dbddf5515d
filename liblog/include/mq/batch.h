// Record batches: RecordBatch v2, byte-compatible with Kafka.
// Byte tables and rules: format-spec/batch.md (§3 batch, §4 record, §5
// compression and control batches) and format-spec/README.md §11 (rules).
//
// BatchView and RecordView are zero-copy views over bytes the caller keeps
// alive. BatchBuilder is the only writer of batch bytes.
//
// Errors: every decoding error is Status::Corruption(file, position, rule,
// what) where `position` is the byte position of the *batch* in its file (the
// `position` argument); the message names the field, and for record errors
// the record index and its byte offset inside the (decompressed) records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mq/compression.h"
#include "mq/status.h"

namespace mq {

using Bytes = std::span<const std::byte>;

// An allocator whose resize leaves new bytes uninitialized (value-
// initialization becomes default-initialization): for buffers that are
// written right after they grow, where zero-filling first is a wasted pass.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Converts between text and byte spans without copying.
inline Bytes AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
inline std::string_view AsText(Bytes b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// Limits applied while decoding untrusted bytes: nothing larger is allocated.
struct DecodeLimits {
  uint32_t max_batch_bytes = 64 << 20;         // whole batch on disk (R2)
  uint32_t max_decompressed_bytes = 64 << 20;  // records after decompression (R9)
};

// The 61-byte header, decoded. Field names follow format-spec §3.
struct BatchHeader {
  int64_t base_offset = 0;
  int32_t batch_length = 0;
  int32_t partition_leader_epoch = -1;
  int8_t magic = 2;
  uint32_t crc = 0;
  int16_t attributes = 0;
  int32_t last_offset_delta = 0;
  int64_t base_timestamp = -1;
  int64_t max_timestamp = -1;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int32_t base_sequence = -1;
  int32_t records_count = 0;

  int64_t last_offset() const { return base_offset + last_offset_delta; }
  // batch_length + 12: the whole batch on disk.
  uint64_t size_bytes() const { return static_cast<uint64_t>(batch_length) + 12; }
  Compression compression() const { return static_cast<Compression>(attributes & 0x07); }
  bool log_append_time() const { return attributes & 0x08; }
  bool is_transactional() const { return attributes & 0x10; }
  bool is_control() const { return attributes & 0x20; }
  bool has_delete_horizon() const { return attributes & 0x40; }
  bool has_producer_id() const { return producer_id >= 0; }
  // baseSequence + lastOffsetDelta, wrapping past INT32_MAX to 0; -1 if none.
  int32_t last_sequence() const;
};

// Outcome of looking at the bytes at a position in a segment.
enum class Probe : uint8_t {
  kBatch,     // a complete batch header whose size fits in the bytes given
  kTornTail,  // fewer bytes than the header or than the batch claims (R1)
};

// Reads the header at the start of `bytes` (R1, R2, R3 only: no CRC check).
// Returns kTornTail when `bytes` ends before the header or the batch does
// (fewer than 17 bytes: nothing is decoded; 17..60 bytes: base_offset,
// batch_length, partition_leader_epoch and magic are filled in). R2 and R3
// are checked as soon as the bytes holding them are there, so a garbage
// length is kCorruption, not a torn tail. `file` and `position` only label
// errors.
Result<Probe> ProbeBatch(Bytes bytes, BatchHeader* header, const DecodeLimits& limits,
                         const std::string& file = "", uint64_t position = 0);

// A header (without CRC check) from bytes that hold at least 61 bytes.
BatchHeader DecodeBatchHeader(Bytes bytes);

struct Header {
  std::string_view key;
  std::optional<Bytes> value;  // nullopt = null header value
};

struct RecordView {
  int64_t offset = 0;
  int64_t timestamp = 0;
  std::optional<Bytes> key;    // nullopt = null key
  std::optional<Bytes> value;  // nullopt = null value (tombstone)
  int32_t headers_count = 0;
  Bytes headers_bytes;  // the encoded headers; iterate with HeaderReader

  // Decodes the headers. Never fails: RecordReader validated them (R8).
  std::vector<Header> headers() const;
};

// Whether BatchView::Parse computes the CRC (R4). kAlreadyComputed is for
// bytes BatchBuilder::Finish produced in this process moments ago, or whose
// CRC was computed over these very bytes and compared in this process (a
// follower's receive pass, mq/wire.h FetchReplyFrameCrc): the CRC is not
// computed a second time.
enum class CrcCheck : uint8_t { kVerify, kAlreadyComputed };

// A validated batch: a view over exactly header.size_bytes() bytes.
class BatchView {
 public:
  // Validates R1-R6 (complete, length, magic, CRC, attributes, counts) over
  // the batch at the start of `bytes`; the view covers exactly
  // header.size_bytes() bytes (`bytes` may hold more). Records are checked
  // by RecordReader (R8, R9, R17); R7 by CheckProducerFields. An attribute
  // bit 7-15 or codec 5-7 is kUnsupported (R5), not corruption.
  static Result<BatchView> Parse(Bytes bytes, const DecodeLimits& limits,
                                 const std::string& file = "", uint64_t position = 0,
                                 CrcCheck crc_check = CrcCheck::kVerify);

  const BatchHeader& header() const { return header_; }
  Bytes bytes() const { return bytes_; }
  // Bytes after the 61-byte header (compressed if compression() != kNone).
  Bytes records_bytes() const { return bytes_.subspan(61); }

 private:
  BatchHeader header_;
  Bytes bytes_;
};

// Iterates the records of a batch (R8, R9). For a compressed batch the
// records are decompressed into `scratch`, which the caller reuses across
// batches so steady-state decoding allocates nothing.
class RecordReader {
 public:
  // Decompresses gzip, snappy, lz4 and zstd records into `scratch` (R9:
  // bounded by limits.max_decompressed_bytes; kNoMemory when an allocation
  // fails).
  static Result<RecordReader> Open(const BatchView& batch, std::vector<std::byte>* scratch,
                                   const DecodeLimits& limits, const std::string& file = "",
                                   uint64_t position = 0);
  // Next record, or nullopt after records_count records. A malformed record
  // is a kCorruption error (rule R8); so are bytes left after the last one
  // (reported by the call that decodes the last record). In a control
  // batch each record must also pass R17.
  Result<std::optional<RecordView>> Next();
  // The same without a Result per record, for tight loops: true with the
  // next record in *record; false at the end or on error, and then status()
  // tells which (OK at the end).
  bool Read(RecordView* record);
  const Status& status() const { return error_; }

 private:
  enum class Step : uint8_t { kRecord, kEnd, kError };
  Step Decode(RecordView* rec);
  Step Fail(const char* rule, const std::string& what);
  Status Error(const char* rule, const std::string& what) const;
  BatchHeader header_;
  Status error_;
  Bytes records_;  // all record bytes (decompressed if needed)
  Bytes rest_;
  int32_t remaining_ = 0;
  int32_t index_ = 0;
  int32_t last_delta_ = -1;
  std::string file_;
  uint64_t position_ = 0;
};

// R7: a non-control batch with producerId >= 0 has producerEpoch >= 0 and
// baseSequence >= 0. Checked when appending, not when reading.
Status CheckProducerFields(const BatchHeader& header, const std::string& file = "",
                           uint64_t position = 0);

// Transaction markers and other control records (format-spec/batch.md §5.2).
enum class ControlType : int16_t { kAbort = 0, kCommit = 1 };
struct ControlRecord {
  int16_t version = 0;
  int16_t type = 0;               // ControlType for COMMIT/ABORT; 2-6 are KRaft-only
  int16_t value_version = 0;      // COMMIT/ABORT only
  int32_t coordinator_epoch = 0;  // COMMIT/ABORT only
  bool is_end_txn_marker() const { return type == 0 || type == 1; }
};
// Decodes the key and value of a record of a control batch (R17).
Result<ControlRecord> DecodeControlRecord(const RecordView& record, const std::string& file = "",
                                          uint64_t position = 0);
// "ABORT", "COMMIT", "LEADER_CHANGE", ..., "UNKNOWN".
std::string_view ControlTypeName(int16_t type);

struct RecordInput {
  int64_t timestamp = 0;
  std::optional<Bytes> key;
  std::optional<Bytes> value;
  std::span<const Header> headers;
};

struct BatchOptions {
  Compression compression = Compression::kNone;
  int zstd_level = 3;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int32_t base_sequence = -1;
  int32_t partition_leader_epoch = -1;
  bool log_append_time = false;
  bool is_transactional = false;  // attribute bit 4
  bool is_control = false;        // attribute bit 5: add records with AddControl
  // Overrides; by default baseTimestamp is the first record's timestamp and
  // maxTimestamp the largest record timestamp (or the append time given
  // here with log_append_time).
  std::optional<int64_t> base_timestamp;
  std::optional<int64_t> max_timestamp;
  // Finish leaves the crc field zero: SealBatches (or BatchCompressor)
  // computes it later, on another thread say, before the batch goes
  // anywhere. A batch left unsealed fails its CRC check (R3).
  bool defer_crc = false;
};

// Builds one batch. Records are encoded as they are added; Finish() writes
// the header (and compresses) into the output buffer.
class BatchBuilder {
 public:
  explicit BatchBuilder(BatchOptions options = {});
  ~BatchBuilder();
  BatchBuilder(BatchBuilder&& other) noexcept;
  BatchBuilder& operator=(BatchBuilder&& other) noexcept;
  BatchBuilder(const BatchBuilder&) = delete;
  BatchBuilder& operator=(const BatchBuilder&) = delete;

  // Drops any records added and sets new options.
  void Reset(BatchOptions options);
  // Record i gets offset delta i. A record's encoded size must stay below
  // 2^31 bytes (keys, values and headers are the caller's to bound).
  void Add(const RecordInput& record);
  // A control record: key (version 0, type), value (version 0,
  // coordinatorEpoch). Use with options.is_control.
  void AddControl(int64_t timestamp, ControlType type, int32_t coordinator_epoch);
  int32_t count() const { return count_; }
  // Encoded size so far (uncompressed records + 61-byte header).
  size_t size_bytes() const { return 61 + used_; }
  // Appends the finished batch (base offset `base_offset`) to `out` and
  // resets the builder for the next batch with the same options. Fails
  // (kInternal) only if zstd fails, or kTooLarge past 2^31 bytes.
  Status Finish(int64_t base_offset, std::vector<std::byte>* out);

 private:
  std::byte* Reserve(size_t n);
  [[gnu::noinline]] void Grow(size_t n);
  BatchOptions options_;
  // Storage, grown without zero-filling; the first used_ bytes are records.
  std::vector<std::byte, UninitializedAllocator<std::byte>> records_;
  size_t used_ = 0;
  std::vector<std::byte> compressed_;
  int32_t count_ = 0;
  int64_t base_timestamp_ = -1;
  int64_t max_timestamp_ = -1;
  void* zstd_ctx_ = nullptr;  // ZSTD_CCtx, reused across batches
};

// Compresses finished batches: one that BatchBuilder::Finish wrote without
// compression becomes the batch Finish would have written with it (the same
// bytes), so compressing can happen on another thread than building. Keeps
// a zstd context across calls; one compressor per thread.
class BatchCompressor {
 public:
  BatchCompressor(Compression compression, int zstd_level);
  ~BatchCompressor();
  BatchCompressor(const BatchCompressor&) = delete;
  BatchCompressor& operator=(const BatchCompressor&) = delete;

  // Appends each batch of `batches` (uncompressed batches back to back, as
  // Finish wrote them; trusted: the caller built them) compressed to `out`.
  // kInvalidArgument for bytes that are no batch, a batch cut short or one
  // compressed already; else fails as Finish does.
  Status Compress(Bytes batches, std::vector<std::byte>* out);

 private:
  Compression compression_;
  int zstd_level_;
  void* zstd_ctx_ = nullptr;  // ZSTD_CCtx
  std::vector<std::byte> compressed_;
};

// Computes and stores the CRC (batch.md §3) of each batch of `batches`,
// back to back as BatchBuilder::Finish wrote them (with defer_crc; trusted:
// the caller built them). kInvalidArgument for bytes that are no batch or a
// batch cut short.
Status SealBatches(std::span<std::byte> batches);

// Rewrites the baseOffset field (not covered by the CRC) of an encoded batch.
void SetBaseOffset(std::span<std::byte> batch, int64_t base_offset);
// Rewrites partitionLeaderEpoch (not covered by the CRC).
void SetPartitionLeaderEpoch(std::span<std::byte> batch, int32_t epoch);

}  // namespace mq
