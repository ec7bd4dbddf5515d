// Records inside a batch: the decoder (R8, R9, R17), header and control
// record decoding, and the record encoder. Byte table: format-spec/batch.md
// §4; all varints go through coding.h.
#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/compression.h"
#include "format/format.h"
#include "mq/batch.h"

namespace mq {

using coding::GetVarint;
using coding::GetVarlong;

// ---- decoding ---------------------------------------------------------------

Result<RecordReader> RecordReader::Open(const BatchView& batch, std::vector<std::byte>* scratch,
                                        const DecodeLimits& limits, const std::string& file,
                                        uint64_t position) {
  RecordReader r;
  r.header_ = batch.header();
  r.file_ = file;
  r.position_ = position;
  switch (r.header_.compression()) {
    case Compression::kNone:
      r.records_ = batch.records_bytes();
      break;
    default: {
      MQ_RETURN_IF_ERROR(compression::Decompress(r.header_.compression(), batch.records_bytes(),
                                                 limits.max_decompressed_bytes, scratch, file,
                                                 position));
      r.records_ = Bytes(scratch->data(), scratch->size());
      break;
    }
  }
  r.rest_ = r.records_;
  r.remaining_ = r.header_.records_count;
  return r;
}

Status RecordReader::Error(const char* rule, const std::string& what) const {
  return Status::Corruption(file_, position_, rule,
                            fmt::format("record {} at byte {} of the records: {}", index_,
                                        rest_.data() - records_.data(), what));
}

namespace {

// A length-prefixed byte string inside [*p, end): -1 is null when
// `nullable`. Returns false when the length is out of range.
inline bool GetBytes(const std::byte** p, const std::byte* end, bool nullable,
                     std::optional<Bytes>* out) {
  int32_t n;
  if (!GetVarint(p, end, &n)) return false;
  if (n < 0) {
    if (n != -1 || !nullable) return false;
    out->reset();
    return true;
  }
  if (n > end - *p) return false;
  *out = Bytes(*p, static_cast<size_t>(n));
  *p += n;
  return true;
}

// Walks `count` headers in [*p, end); false on any malformed one.
bool SkipHeaders(const std::byte** p, const std::byte* end, int32_t count) {
  std::optional<Bytes> field;
  for (int32_t i = 0; i < count; ++i) {
    if (!GetBytes(p, end, /*nullable=*/false, &field)) return false;
    if (!GetBytes(p, end, /*nullable=*/true, &field)) return false;
  }
  return true;
}

inline int64_t WrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

}  // namespace

// The decoder proper. It fills *rec in place (the caller's result object)
// and keeps errors out of line, so the common path copies nothing.
RecordReader::Step RecordReader::Decode(RecordView* rec) {
  if (remaining_ == 0) {
    if (!rest_.empty())
      return Fail("R8", fmt::format("{} bytes after the last record", rest_.size()));
    return Step::kEnd;
  }
  const std::byte* p = rest_.data();
  const std::byte* const end = p + rest_.size();
  int32_t length;
  if (!GetVarint(&p, end, &length)) return Fail("R8", "bad length varint");
  if (length < 1 || length > end - p) {
    return Fail("R8", fmt::format("length {} with {} bytes left", length, end - p));
  }
  const std::byte* const rend = p + length;
  ++p;  // attributes: no bits in use
  int64_t ts_delta;
  int32_t offset_delta;
  if (!GetVarlong(&p, rend, &ts_delta)) return Fail("R8", "bad timestampDelta varlong");
  if (!GetVarint(&p, rend, &offset_delta)) return Fail("R8", "bad offsetDelta varint");
  if (offset_delta <= last_delta_ || offset_delta > header_.last_offset_delta) {
    return Fail("R8", fmt::format("offsetDelta {} after {} (lastOffsetDelta {})", offset_delta,
                                  last_delta_, header_.last_offset_delta));
  }
  if (!GetBytes(&p, rend, true, &rec->key)) return Fail("R8", "bad key length");
  if (!GetBytes(&p, rend, true, &rec->value)) return Fail("R8", "bad value length");
  if (!GetVarint(&p, rend, &rec->headers_count) || rec->headers_count < 0) {
    return Fail("R8", "bad headersCount");
  }
  const std::byte* headers = p;
  if (rec->headers_count > 0 && !SkipHeaders(&p, rend, rec->headers_count)) {
    return Fail("R8", "bad header");
  }
  if (p != rend) {
    return Fail("R8", fmt::format("length {} but the fields take {}", length, length - (rend - p)));
  }
  rec->headers_bytes = Bytes(headers, static_cast<size_t>(rend - headers));
  rec->offset = WrappingAdd(header_.base_offset, offset_delta);
  // With LogAppendTime every record's timestamp reads as maxTimestamp.
  rec->timestamp = header_.log_append_time() ? header_.max_timestamp
                                             : WrappingAdd(header_.base_timestamp, ts_delta);
  if (header_.is_control()) {
    Result<ControlRecord> control = DecodeControlRecord(*rec, file_, position_);
    if (!control) {
      error_ = control.error();
      return Step::kError;
    }
  }
  last_delta_ = offset_delta;
  rest_ = rest_.subspan(static_cast<size_t>(rend - rest_.data()));
  --remaining_;
  ++index_;
  if (remaining_ == 0 && !rest_.empty()) {
    return Fail("R8", fmt::format("{} bytes after the last record", rest_.size()));
  }
  return Step::kRecord;
}

RecordReader::Step RecordReader::Fail(const char* rule, const std::string& what) {
  error_ = Error(rule, what);
  return Step::kError;
}

bool RecordReader::Read(RecordView* record) { return Decode(record) == Step::kRecord; }

Result<std::optional<RecordView>> RecordReader::Next() {
  // One named result on every path, so it is built in the caller's slot.
  Result<std::optional<RecordView>> out{std::optional<RecordView>()};
  Step step = Decode(&(*out).emplace());
  if (step == Step::kEnd) (*out).reset();
  if (step == Step::kError) out = error_;
  return out;
}

std::vector<Header> RecordView::headers() const {
  std::vector<Header> out;
  out.reserve(static_cast<size_t>(headers_count));
  const std::byte* p = headers_bytes.data();
  const std::byte* end = p + headers_bytes.size();
  std::optional<Bytes> hkey, hvalue;
  for (int32_t i = 0; i < headers_count; ++i) {
    if (!GetBytes(&p, end, false, &hkey) || !GetBytes(&p, end, true, &hvalue)) break;
    out.push_back(Header{AsText(*hkey), hvalue});
  }
  return out;
}

std::string_view ControlTypeName(int16_t type) {
  switch (type) {
    case 0:
      return "ABORT";
    case 1:
      return "COMMIT";
    case 2:
      return "LEADER_CHANGE";
    case 3:
      return "SNAPSHOT_HEADER";
    case 4:
      return "SNAPSHOT_FOOTER";
    case 5:
      return "KRAFT_VERSION";
    case 6:
      return "KRAFT_VOTERS";
  }
  return "UNKNOWN";
}

Result<ControlRecord> DecodeControlRecord(const RecordView& record, const std::string& file,
                                          uint64_t position) {
  using format::kControlKeySize;
  using format::kEndTxnMarkerValueSize;
  ControlRecord c;
  if (!record.key || record.key->size() < kControlKeySize) {
    return Status::Corruption(file, position, "R17",
                              fmt::format("control record at offset {}: key shorter than {} bytes",
                                          record.offset, kControlKeySize));
  }
  c.version = static_cast<int16_t>(coding::GetFixed16(record.key->data()));
  c.type = static_cast<int16_t>(coding::GetFixed16(record.key->data() + 2));
  if (c.version < 0) {
    return Status::Corruption(
        file, position, "R17",
        fmt::format("control record at offset {}: key version {} < 0", record.offset, c.version));
  }
  if (!c.is_end_txn_marker()) return c;
  if (!record.value || record.value->size() < kEndTxnMarkerValueSize) {
    return Status::Corruption(
        file, position, "R17",
        fmt::format("{} marker at offset {}: value shorter than {} bytes", ControlTypeName(c.type),
                    record.offset, kEndTxnMarkerValueSize));
  }
  c.value_version = static_cast<int16_t>(coding::GetFixed16(record.value->data()));
  c.coordinator_epoch = static_cast<int32_t>(coding::GetFixed32(record.value->data() + 2));
  return c;
}

// ---- encoding ---------------------------------------------------------------

// Starts small: a producer may hold a builder per partition, thousands of
// them, each with a few records between appends; doubling makes up for it.
std::byte* BatchBuilder::Reserve(size_t n) {
  if (used_ + n > records_.size()) [[unlikely]]
    Grow(n);
  std::byte* p = records_.data() + used_;
  used_ += n;
  return p;
}

void BatchBuilder::Grow(size_t n) {
  records_.resize(std::max({used_ + n, records_.size() * 2, size_t{256}}));
}

namespace {

inline int32_t Len(const std::optional<Bytes>& b) {
  return b ? static_cast<int32_t>(b->size()) : -1;
}

inline std::byte* PutBytes(std::byte* p, const std::optional<Bytes>& b) {
  p = coding::PutVarint(p, Len(b));
  if (b && !b->empty()) {
    std::memcpy(p, b->data(), b->size());
    p += b->size();
  }
  return p;
}

inline size_t BytesLength(const std::optional<Bytes>& b) {
  return coding::VarintLength(Len(b)) + (b ? b->size() : 0);
}

// A record's fields up to its headers: what each record starts with.
inline size_t HeadLength(int64_t ts_delta, int32_t offset_delta, const RecordInput& r) {
  return 1 + coding::VarlongLength(ts_delta) + coding::VarintLength(offset_delta) +
         BytesLength(r.key) + BytesLength(r.value);
}
inline std::byte* PutHead(std::byte* p, int32_t length, int64_t ts_delta, int32_t offset_delta,
                          const RecordInput& r) {
  p = coding::PutVarint(p, length);
  *p++ = std::byte{0};  // attributes
  p = coding::PutVarlong(p, ts_delta);
  p = coding::PutVarint(p, offset_delta);
  p = PutBytes(p, r.key);
  return PutBytes(p, r.value);
}

}  // namespace

// One record (format-spec/batch.md §4):
//   length varint | attributes int8 = 0 | timestampDelta varlong |
//   offsetDelta varint | keyLength varint | key | valueLength varint | value |
//   headersCount varint | (headerKeyLength varint | headerKey |
//   headerValueLength varint | headerValue)*
void BatchBuilder::Add(const RecordInput& record) {
  if (count_ == 0) {
    base_timestamp_ = options_.base_timestamp.value_or(record.timestamp);
    max_timestamp_ = record.timestamp;
  }
  max_timestamp_ = std::max(max_timestamp_, record.timestamp);
  const int64_t ts_delta = static_cast<int64_t>(static_cast<uint64_t>(record.timestamp) -
                                                static_cast<uint64_t>(base_timestamp_));
  if (record.headers.empty()) [[likely]] {
    // The common record: no headers, so headersCount is the single byte 0.
    const size_t body = HeadLength(ts_delta, count_, record) + 1;
    const int32_t length = static_cast<int32_t>(body);
    std::byte* p = Reserve(coding::VarintLength(length) + body);
    p = PutHead(p, length, ts_delta, count_, record);
    *p = std::byte{0};
    ++count_;
    return;
  }
  const int32_t headers_count = static_cast<int32_t>(record.headers.size());
  size_t body = HeadLength(ts_delta, count_, record) + coding::VarintLength(headers_count);
  for (const Header& h : record.headers) {
    body += coding::VarintLength(static_cast<int32_t>(h.key.size())) + h.key.size() +
            BytesLength(h.value);
  }
  const int32_t length = static_cast<int32_t>(body);
  std::byte* p = Reserve(coding::VarintLength(length) + body);
  p = PutHead(p, length, ts_delta, count_, record);
  p = coding::PutVarint(p, headers_count);
  for (const Header& h : record.headers) {
    p = PutBytes(p, AsBytes(h.key));
    p = PutBytes(p, h.value);
  }
  ++count_;
}

void BatchBuilder::AddControl(int64_t timestamp, ControlType type, int32_t coordinator_epoch) {
  std::byte key[format::kControlKeySize];
  std::byte value[format::kEndTxnMarkerValueSize];
  coding::PutFixed16(key, 0);
  coding::PutFixed16(key + 2, static_cast<uint16_t>(type));
  coding::PutFixed16(value, 0);
  coding::PutFixed32(value + 2, static_cast<uint32_t>(coordinator_epoch));
  RecordInput r;
  r.timestamp = timestamp;
  r.key = Bytes(key, sizeof key);
  r.value = Bytes(value, sizeof value);
  Add(r);
}

}  // namespace mq
