// Helpers shared by the batch-layer tests: build batches, edit their bytes
// and re-sign the CRC so a test reaches the rule behind it.
#pragma once

#include <string>
#include <vector>

#include "coding.h"
#include "format.h"
#include "mq/batch.h"
#include "mq/crc32c.h"

namespace mq::test {

inline std::vector<std::byte> HexBytes(std::string_view hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(std::byte(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// Recomputes the CRC of the batch at the start of `b` after an edit.
inline void FixCrc(std::vector<std::byte>& b) {
  uint32_t crc = Crc32c(std::span<const std::byte>(b).subspan(format::kAttributesOffset));
  coding::PutFixed32(b.data() + format::kCrcOffset, crc);
}

// A batch of `n` small records ("v0", "v1", ...) with the given options.
inline std::vector<std::byte> SimpleBatch(int n, BatchOptions options = {}, int64_t base = 0) {
  BatchBuilder builder(options);
  std::vector<std::string> values;
  for (int i = 0; i < n; ++i) values.push_back("v" + std::to_string(i));
  for (int i = 0; i < n; ++i) {
    RecordInput r;
    r.timestamp = 1700000000000 + i;
    r.value = AsBytes(values[i]);
    builder.Add(r);
  }
  std::vector<std::byte> out;
  (void)builder.Finish(base, &out);
  return out;
}

// A batch whose records section is exactly `records` (raw bytes), with the
// header fields given, a correct length and CRC.
inline std::vector<std::byte> WrapRecords(std::span<const std::byte> records, int32_t count,
                                          int32_t last_offset_delta, uint16_t attributes = 0) {
  std::vector<std::byte> b = SimpleBatch(0);
  b.insert(b.end(), records.begin(), records.end());
  coding::PutFixed32(b.data() + format::kBatchLengthOffset,
                     static_cast<uint32_t>(b.size() - format::kLogOverhead));
  coding::PutFixed16(b.data() + format::kAttributesOffset, attributes);
  coding::PutFixed32(b.data() + format::kLastOffsetDeltaOffset,
                     static_cast<uint32_t>(last_offset_delta));
  coding::PutFixed32(b.data() + format::kRecordsCountOffset, static_cast<uint32_t>(count));
  FixCrc(b);
  return b;
}

// Reads every record; returns the first error, or OK.
inline Status ReadAll(const std::vector<std::byte>& b, const DecodeLimits& limits = {},
                      int* records = nullptr) {
  auto view = BatchView::Parse(b, limits, "t.log", 0);
  if (!view) return view.error();
  std::vector<std::byte> scratch;
  auto reader = RecordReader::Open(*view, &scratch, limits, "t.log", 0);
  if (!reader) return reader.error();
  int n = 0;
  for (;;) {
    auto r = reader->Next();
    if (!r) return r.error();
    if (!*r) break;
    ++n;
  }
  if (records) *records = n;
  return Status::Ok();
}

}  // namespace mq::test
