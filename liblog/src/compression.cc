#include "compression.h"

#include <zstd.h>

#include <memory>

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

// Stream-decompresses when the frame does not state its size (or states
// more than we accept): output grows in steps, never past max_bytes.
Status Streaming(ZSTD_DCtx* dctx, std::span<const std::byte> in, size_t max_bytes,
                 std::vector<std::byte>* out, const std::string& file, uint64_t position) {
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  // One byte over the limit tells "too large" from "exactly the limit".
  const size_t cap = max_bytes + 1;
  const size_t step = std::min<size_t>(std::max<size_t>(in.size() * 4, 64 << 10), cap);
  if (out->size() > cap) out->resize(cap);
  size_t produced = 0;
  for (;;) {
    if (produced == out->size()) out->resize(std::min(cap, std::max(produced + step, produced * 2)));
    ZSTD_outBuffer dst{out->data(), out->size(), produced};
    size_t r = ZSTD_decompressStream(dctx, &dst, &src);
    produced = dst.pos;
    if (ZSTD_isError(r)) {
      return R9(file, position, fmt::format("zstd: {}", ZSTD_getErrorName(r)));
    }
    if (produced > max_bytes) {
      return R9(file, position,
                fmt::format("zstd records decompress to more than {} bytes", max_bytes));
    }
    if (r == 0) break;  // frame complete
    if (produced < out->size() && src.pos == src.size) {
      return R9(file, position, "zstd frame is truncated");
    }
  }
  if (src.pos != src.size) return R9(file, position, "bytes follow the zstd frame");
  out->resize(produced);
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
  if (dctx == nullptr) return Status(Code::kInternal, "zstd: cannot create context");
  size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame)) {
    return R9(file, position, fmt::format("not one zstd frame: {}", ZSTD_getErrorName(frame)));
  }
  if (frame != in.size()) {
    return R9(file, position, fmt::format("{} bytes follow the zstd frame", in.size() - frame));
  }
  unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return R9(file, position, "bad zstd frame header");
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) return Streaming(dctx, in, max_bytes, out, file, position);
  if (size > max_bytes) {
    return R9(file, position,
              fmt::format("zstd frame claims {} bytes, more than the limit {}", size, max_bytes));
  }
  out->resize(static_cast<size_t>(size));
  size_t r = ZSTD_decompressDCtx(dctx, out->data(), out->size(), in.data(), in.size());
  if (ZSTD_isError(r)) return R9(file, position, fmt::format("zstd: {}", ZSTD_getErrorName(r)));
  if (r != size) {
    return R9(file, position, fmt::format("zstd frame gave {} bytes, its header says {}", r, size));
  }
  return Status::Ok();
}

}  // namespace mq::compression
