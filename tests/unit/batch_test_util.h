// Helpers shared by the batch-layer tests: build batches, edit their bytes
// and re-sign the CRC so a test reaches the rule behind it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "format/coding.h"
#include "format/format.h"
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

// Lower-case hex of `b`, for comparing bytes with the spec's hex.
inline std::string ToHex(std::span<const std::byte> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s.push_back(d[std::to_integer<int>(x) >> 4]);
    s.push_back(d[std::to_integer<int>(x) & 15]);
  }
  return s;
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

// A zstd frame built by hand from RLE blocks (format: RFC 8878): `actual`
// bytes of `value`, with a header that states a content size of `claimed`
// (which may lie), a 128 KiB window and no checksum. A few bytes per
// 128 KiB: a zip bomb when `actual` is large.
inline std::vector<std::byte> ZstdRleFrame(uint64_t claimed, uint64_t actual,
                                           std::byte value = std::byte{0}) {
  constexpr uint64_t kBlock = 128 << 10;
  std::vector<std::byte> f;
  auto put = [&f](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) f.push_back(std::byte((v >> (8 * i)) & 0xff));
  };
  put(0xFD2FB528, 4);      // magic
  put(0xC0, 1);            // Frame_Header_Descriptor: 8-byte content size, a window descriptor
  put((17 - 10) << 3, 1);  // Window_Descriptor: 2^17 bytes
  put(claimed, 8);         // Frame_Content_Size
  uint64_t left = actual;
  do {
    const uint64_t n = std::min(left, kBlock);
    left -= n;
    // Block_Header: Last_Block, Block_Type 1 (RLE), Block_Size n.
    put((left == 0 ? 1 : 0) | (1 << 1) | (n << 3), 3);
    f.push_back(value);
  } while (left > 0);
  return f;
}

// A batch of `count` records (as the header says) whose records section is
// the zstd frame `frame`.
inline std::vector<std::byte> ZstdFrameBatch(std::span<const std::byte> frame, int32_t count = 1) {
  return WrapRecords(frame, count, count > 0 ? count - 1 : 0,
                     static_cast<uint16_t>(Compression::kZstd));
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
