// zstd compression of a batch's records (format-spec/batch.md §5.1). The
// records of a zstd batch are exactly one zstd frame.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "mq/status.h"

namespace mq::compression {

// Compresses `in` into `out` (replacing its contents) as one frame, with a
// caller-owned context that is created on first use and reused after.
// `*ctx` is a ZSTD_CCtx*; free it with FreeCompressor.
Status ZstdCompress(std::span<const std::byte> in, int level, void** ctx,
                    std::vector<std::byte>* out);
void FreeCompressor(void* ctx);

// Decompresses one zstd frame `in` into `*out` (resized to the result).
// Fails with R9 corruption (labelled with file and position) if `in` is not
// exactly one valid frame or the result would exceed `max_bytes`; nothing
// larger than max_bytes is ever allocated, whatever the frame header claims.
// Uses a per-thread decompression context.
Status ZstdDecompress(std::span<const std::byte> in, size_t max_bytes, std::vector<std::byte>* out,
                      const std::string& file, uint64_t position);

}  // namespace mq::compression
