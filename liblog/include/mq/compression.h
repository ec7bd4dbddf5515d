// The codecs of a batch's records: bits 0-2 of its attributes
// (format-spec/batch.md §3.2, §5.1). The codecs themselves are liblog's
// (src/compression.h); BatchBuilder and BatchView use them (mq/batch.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace mq {

enum class Compression : uint8_t { kNone = 0, kGzip = 1, kSnappy = 2, kLz4 = 3, kZstd = 4 };
// "none", "gzip", "snappy", "lz4", "zstd".
std::string_view CompressionName(Compression c);

}  // namespace mq
