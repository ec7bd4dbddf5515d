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
// exactly one valid frame, the result would exceed `max_bytes`, or the frame
// yields other than the size its header states. Memory follows the bytes
// the frame really yields, never the size it claims: up to max(1 MiB, 32 x
// the frame) is decompressed at once; a frame that yields more is counted
// through a fixed 128 KiB buffer first, then decompressed into a buffer of
// exactly its size. A failed allocation is kNoMemory, not an exception.
// Uses a per-thread decompression context.
Status ZstdDecompress(std::span<const std::byte> in, size_t max_bytes, std::vector<std::byte>* out,
                      const std::string& file, uint64_t position);

}  // namespace mq::compression
