// Compression of a batch's records, every codec as Kafka frames it
// (format-spec/batch.md §5.1): gzip is a gzip stream, snappy the xerial
// framing of snappy-java (or one raw block, read only), lz4 one LZ4 frame,
// zstd one zstd frame. Decompression is bounded (R9).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "mq/compression.h"
#include "mq/status.h"

namespace mq::compression {

// Compresses `in` with `codec` (gzip, snappy, lz4 or zstd) into `out`,
// replacing its contents. `zstd_level` and `*zstd_ctx` serve zstd only (see
// ZstdCompress; a null `zstd_ctx` uses a context for this call only). Kafka's Java client reads
// every result: gzip with the default level, snappy in xerial framing with 32 KiB blocks, lz4 as
// independent 64 KiB blocks without content checksum.
Status Compress(Compression codec, std::span<const std::byte> in, int zstd_level, void** zstd_ctx,
                std::vector<std::byte>* out);

// Decompresses the records of a `codec` batch into `*out` (resized to the
// result). Fails with R9 corruption, labelled with file and position, when
// `in` is not exactly what the codec frames (trailing bytes included) or
// would yield more than `max_bytes`. Memory follows the bytes really
// produced: gzip and lz4 as zstd below (at most max(1 MiB, 32 x the input)
// at once, else counted through a fixed buffer, then decoded into exactly
// their size); snappy blocks' stated sizes are summed against the limit
// and every block validated before one buffer of the sum is allocated. A
// failed allocation is kNoMemory. kUnsupported for a codec it does not know.
Status Decompress(Compression codec, std::span<const std::byte> in, size_t max_bytes,
                  std::vector<std::byte>* out, const std::string& file, uint64_t position);

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
