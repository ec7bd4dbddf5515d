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
                fmt::format("{}: offset {}: out of memory: zstd records need a buffer of {} bytes",
                            file, position, bytes));
}

Status ZstdError(size_t r, const std::string& file, uint64_t position, size_t buffer) {
  if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation) {
    return NoMemory(file, position, buffer);
  }
  return R9(file, position, fmt::format("zstd: {}", ZSTD_getErrorName(r)));
}

// The first output buffer: the whole result when the frame is not much
// larger decompressed than compressed, else a start that doubles with the
// bytes the frame really yields.
constexpr size_t kFirstBufferBytes = 256 << 10;
constexpr size_t kFirstBufferRatio = 8;

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
  // The frame's claimed size only caps the buffer: it grows with the bytes
  // the frame really yields, so a small frame claiming much allocates
  // little. One byte over the cap tells "too large" from "exactly the cap".
  const size_t limit = known ? static_cast<size_t>(size) : max_bytes;
  const size_t cap = limit + 1;
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  size_t produced = 0;
  const size_t first = std::max(kFirstBufferBytes, in.size() * kFirstBufferRatio);
  MQ_RETURN_IF_ERROR(Resize(out, std::min(cap, first), file, position));
  for (;;) {
    ZSTD_outBuffer dst{out->data(), out->size(), produced};
    size_t r = ZSTD_decompressStream(dctx, &dst, &src);
    produced = dst.pos;
    if (ZSTD_isError(r)) return ZstdError(r, file, position, out->size());
    if (produced > limit) {
      if (known) {
        return R9(file, position,
                  fmt::format("zstd frame gives more than the {} bytes its header says", size));
      }
      return R9(file, position,
                fmt::format("zstd records decompress to more than {} bytes", max_bytes));
    }
    if (r == 0) break;  // frame complete
    if (produced < out->size() && src.pos == src.size) {
      return R9(file, position, "zstd frame is truncated");
    }
    if (produced == out->size()) {
      const size_t grown = std::max(produced * 2, produced + kFirstBufferBytes);
      MQ_RETURN_IF_ERROR(Resize(out, std::min(cap, grown), file, position));
    }
  }
  if (src.pos != src.size) return R9(file, position, "bytes follow the zstd frame");
  if (known && produced != size) {
    return R9(file, position,
              fmt::format("zstd frame gave {} bytes, its header says {}", produced, size));
  }
  out->resize(produced);
  return Status::Ok();
}

}  // namespace mq::compression
