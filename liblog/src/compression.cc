#include "compression.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <memory>
#include <new>

#include <fmt/format.h>

namespace mq::compression {
namespace {

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}

Status R9(const std::string& file, uint64_t position, const std::string& what) {
  return Status::Corruption(file, position, "R9", what);
}

Status NoMemory(const std::string& file, uint64_t position, size_t bytes) {
  return Status(Code::kNoMemory,
                fmt::format("{}: position {}: out of memory: zstd records need a buffer of {} bytes",
                            file, position, bytes));
}

Status ZstdError(size_t r, const std::string& file, uint64_t position, size_t buffer) {
  if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation) {
    return NoMemory(file, position, buffer);
  }
  return R9(file, position, fmt::format("zstd: {}", ZSTD_getErrorName(r)));
}

// A frame may yield up to max(kTrustBytes, kTrustRatio x its size) in one
// buffer sized at once: a small multiple of the batch. A frame that yields
// more (a zip bomb, or highly repetitive records) is first decompressed
// into a fixed buffer only to count its bytes, then into a buffer of
// exactly that size: memory follows what the frame really holds, never what
// its header claims, and is never doubled by a growing copy.
constexpr size_t kTrustBytes = 1 << 20;
constexpr size_t kTrustRatio = 32;
constexpr size_t kCountBufferBytes = 128 << 10;

Status Resize(std::vector<std::byte>* out, size_t bytes, const std::string& file,
              uint64_t position) {
  try {
    out->resize(bytes);
  } catch (const std::bad_alloc&) {
    return NoMemory(file, position, bytes);
  }
  return Status::Ok();
}

}  // namespace

Status ZstdCompress(std::span<const std::byte> in, int level, void** ctx,
                    std::vector<std::byte>* out) {
  if (*ctx == nullptr) *ctx = ZSTD_createCCtx();
  auto* cctx = static_cast<ZSTD_CCtx*>(*ctx);
  if (cctx == nullptr) return Status(Code::kInternal, "zstd: cannot create context");
  out->resize(ZSTD_compressBound(in.size()));
  size_t r = ZSTD_compressCCtx(cctx, out->data(), out->size(), in.data(), in.size(), level);
  if (ZSTD_isError(r)) return Status(Code::kInternal, fmt::format("zstd: {}", ZSTD_getErrorName(r)));
  out->resize(r);
  return Status::Ok();
}

void FreeCompressor(void* ctx) { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(ctx)); }

Status ZstdDecompress(std::span<const std::byte> in, size_t max_bytes, std::vector<std::byte>* out,
                      const std::string& file, uint64_t position) {
  ZSTD_DCtx* dctx = ThreadDCtx();
  if (dctx == nullptr) return NoMemory(file, position, 0);
  size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame)) {
    return R9(file, position, fmt::format("not one zstd frame: {}", ZSTD_getErrorName(frame)));
  }
  if (frame != in.size()) {
    return R9(file, position, fmt::format("{} bytes follow the zstd frame", in.size() - frame));
  }
  unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return R9(file, position, "bad zstd frame header");
  const bool known = size != ZSTD_CONTENTSIZE_UNKNOWN;
  if (known && size > max_bytes) {
    return R9(file, position,
              fmt::format("zstd frame claims {} bytes, more than the limit {}", size, max_bytes));
  }
  // The frame's claimed size only caps what is accepted. One byte over the
  // cap tells "too large" from "exactly the cap".
  const size_t limit = known ? static_cast<size_t>(size) : max_bytes;
  const size_t trusted = std::max(kTrustBytes, in.size() * kTrustRatio);
  const size_t first = std::min(limit + 1, trusted);
  auto too_large = [&] {
    if (known) {
      return R9(file, position,
                fmt::format("zstd frame gives more than the {} bytes its header says", size));
    }
    return R9(file, position, fmt::format("zstd records decompress to more than {} bytes", max_bytes));
  };
  MQ_RETURN_IF_ERROR(Resize(out, first, file, position));
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  ZSTD_outBuffer dst{out->data(), out->size(), 0};
  size_t r = ZSTD_decompressStream(dctx, &dst, &src);
  size_t produced = dst.pos;
  if (!ZSTD_isError(r) && r != 0 && dst.pos == dst.size) {
    // More than the first buffer: count the rest through a fixed buffer.
    thread_local std::vector<std::byte> discard;
    MQ_RETURN_IF_ERROR(Resize(&discard, kCountBufferBytes, file, position));
    while (!ZSTD_isError(r) && r != 0 && produced <= limit) {
      ZSTD_outBuffer sink{discard.data(), discard.size(), 0};
      r = ZSTD_decompressStream(dctx, &sink, &src);
      produced += sink.pos;
      if (sink.pos < sink.size && src.pos == src.size && r != 0 && !ZSTD_isError(r)) break;
    }
  }
  if (ZSTD_isError(r)) return ZstdError(r, file, position, out->size());
  if (produced > limit) return too_large();
  if (r != 0) return R9(file, position, "zstd frame is truncated");
  if (src.pos != src.size) return R9(file, position, "bytes follow the zstd frame");
  if (known && produced != size) {
    return R9(file, position,
              fmt::format("zstd frame gave {} bytes, its header says {}", produced, size));
  }
  if (produced > first) {
    // Counted: decompress again into a buffer of exactly that size.
    if (out->capacity() < produced) {
      out->clear();
      out->shrink_to_fit();
    }
    MQ_RETURN_IF_ERROR(Resize(out, produced, file, position));
    r = ZSTD_decompressDCtx(dctx, out->data(), out->size(), in.data(), in.size());
    if (ZSTD_isError(r)) return ZstdError(r, file, position, out->size());
    if (r != produced) {
      return R9(file, position, fmt::format("zstd frame gave {} bytes, then {}", produced, r));
    }
  }
  out->resize(produced);
  return Status::Ok();
}

}  // namespace mq::compression
