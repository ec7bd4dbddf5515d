#include "format/compression.h"

#include <lz4frame.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <new>

#include <fmt/format.h>

#include "format/coding.h"

namespace mq {

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kGzip:
      return "gzip";
    case Compression::kSnappy:
      return "snappy";
    case Compression::kLz4:
      return "lz4";
    case Compression::kZstd:
      return "zstd";
  }
  return "unknown";
}

}  // namespace mq

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

Status NoMemory(const std::string& file, uint64_t position, size_t bytes,
                const char* codec = "zstd") {
  return Status(Code::kNoMemory,
                fmt::format("{}: position {}: out of memory: {} records need a buffer of {} bytes",
                            file, position, codec, bytes));
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

Status Resize(std::vector<std::byte>* out, size_t bytes, const std::string& file, uint64_t position,
              const char* codec = "zstd") {
  try {
    out->resize(bytes);
  } catch (const std::bad_alloc&) {
    return NoMemory(file, position, bytes, codec);
  }
  return Status::Ok();
}

// Output of a stream decoder (gzip, lz4), which cannot know its size in
// advance. In buffer mode the buffer is sized once, `buffer_cap` bytes (a
// growing copy would double the peak); a stream that needs more is marked
// full() and abandoned. In count mode (`out`
// null) bytes go through a fixed buffer and are only counted. Either way
// one byte over the limit is R9. Bounded() drives them as zstd does.
class GrowingOutput {
 public:
  GrowingOutput(std::vector<std::byte>* out, size_t max_bytes, size_t buffer_cap, const char* codec,
                const std::string& file, uint64_t position)
      : out_(out),
        buffer_cap_(buffer_cap),
        max_(max_bytes),
        codec_(codec),
        file_(file),
        position_(position) {}

  Status Start() {
    if (out_ == nullptr) return Resize(&Discard(), kCountBufferBytes, file_, position_, codec_);
    try {
      out_->reserve(buffer_cap_);
    } catch (const std::bad_alloc&) {
      return NoMemory(file_, position_, buffer_cap_, codec_);
    }
    return Resize(out_, buffer_cap_, file_, position_, codec_);
  }
  std::byte* free_data() { return out_ ? out_->data() + used_ : Discard().data() + fill_; }
  size_t free_size() const { return out_ ? out_->size() - used_ : Discard().size() - fill_; }
  void Produced(size_t n) {
    used_ += n;
    fill_ += n;
  }
  size_t used() const { return used_; }
  bool full() const { return full_; }
  // Room for more output; R9 once the limit is passed.
  Status MakeRoom() {
    if (used_ > max_) return TooLarge();
    if (out_ == nullptr) {
      if (fill_ == Discard().size()) fill_ = 0;
      return Status::Ok();
    }
    if (used_ < out_->size()) return Status::Ok();
    full_ = true;
    return Status(Code::kTooLarge, "buffer full");
  }
  Status TooLarge() const {
    return R9(file_, position_,
              fmt::format("{} records decompress to more than {} bytes", codec_, max_));
  }
  Status Finish() {
    if (used_ > max_) return TooLarge();
    if (out_ != nullptr) out_->resize(used_);
    return Status::Ok();
  }

 private:
  static std::vector<std::byte>& Discard() {
    thread_local std::vector<std::byte> discard;
    return discard;
  }
  std::vector<std::byte>* out_;
  size_t used_ = 0;
  size_t fill_ = 0;
  bool full_ = false;
  const size_t buffer_cap_;
  const size_t max_;
  const char* codec_;
  const std::string& file_;
  uint64_t position_;
};

// Runs `decode(GrowingOutput&)` as ZstdDecompress works: into a
// buffer of up to max(1 MiB, 32 x the input); a stream that yields more is
// decoded again only to count its bytes (stopping past the limit), then a
// third time into a buffer of exactly that size (and a spare byte). Memory
// follows what the stream really holds and is never doubled by a copy.
template <class Decode>
Status Bounded(Decode decode, std::span<const std::byte> in, size_t max_bytes,
               std::vector<std::byte>* out, const char* codec, const std::string& file,
               uint64_t position) {
  const size_t first = std::min(max_bytes + 1, std::max(kTrustBytes, in.size() * kTrustRatio));
  {
    GrowingOutput o(out, max_bytes, first, codec, file, position);
    Status s = decode(o);
    if (!o.full()) return s.ok() ? o.Finish() : s;
  }
  GrowingOutput count(nullptr, max_bytes, 0, codec, file, position);
  MQ_RETURN_IF_ERROR(decode(count));
  MQ_RETURN_IF_ERROR(count.Finish());
  if (out->capacity() < count.used() + 1) {
    out->clear();
    out->shrink_to_fit();
  }
  GrowingOutput exact(out, max_bytes, count.used() + 1, codec, file, position);
  Status s = decode(exact);
  if (exact.full() || (s.ok() && exact.used() != count.used())) {
    return R9(file, position,
              fmt::format("{} records gave {} bytes, then others", codec, count.used()));
  }
  return s.ok() ? exact.Finish() : s;
}

// ---- gzip (codec 1): a gzip stream (RFC 1952), as java.util.zip writes it.

Status GzipStream(std::span<const std::byte> in, GrowingOutput& o, const std::string& file,
                  uint64_t position) {
  z_stream zs{};
  int rc = inflateInit2(&zs, 16 + MAX_WBITS);  // gzip header and trailer only
  if (rc == Z_MEM_ERROR) return NoMemory(file, position, sizeof(z_stream), "gzip");
  if (rc != Z_OK) return Status(Code::kInternal, fmt::format("zlib: inflateInit2 failed ({})", rc));
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  MQ_RETURN_IF_ERROR(o.Start());
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());  // a batch is < 2^31 bytes (R2)
  for (;;) {
    MQ_RETURN_IF_ERROR(o.MakeRoom());
    zs.next_out = reinterpret_cast<Bytef*>(o.free_data());
    zs.avail_out = static_cast<uInt>(std::min<size_t>(o.free_size(), UINT_MAX));
    const uInt room = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    o.Produced(room - zs.avail_out);
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Another gzip member (java.util.zip.GZIPInputStream reads them all).
      if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      return R9(file, position, fmt::format("{} bytes follow the gzip stream", zs.avail_in));
    }
    if (rc == Z_MEM_ERROR) return NoMemory(file, position, 256 << 10, "gzip");
    if (rc == Z_BUF_ERROR && zs.avail_out == 0) continue;  // needs more room
    if (rc == Z_BUF_ERROR || (rc == Z_OK && zs.avail_in == 0 && zs.avail_out > 0)) {
      return R9(file, position, "gzip stream is truncated");
    }
    if (rc != Z_OK) {
      return R9(file, position, fmt::format("gzip: {}", zs.msg != nullptr ? zs.msg : "bad stream"));
    }
  }
  return Status::Ok();
}

Status GzipDecompress(std::span<const std::byte> in, size_t max_bytes, std::vector<std::byte>* out,
                      const std::string& file, uint64_t position) {
  return Bounded([&](GrowingOutput& o) { return GzipStream(in, o, file, position); }, in, max_bytes,
                 out, "gzip", file, position);
}

// ---- snappy (codec 2): the xerial framing snappy-java writes, or one raw
// block. A raw block states its size: it is checked against what is left
// of the limit, then the block is validated (which decodes it without
// writing), and only then is a buffer of that size allocated: memory
// follows what the block really yields.

constexpr unsigned char kXerialMagic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
constexpr size_t kXerialHeaderBytes = 16;       // magic, version int32, compatible int32
constexpr size_t kXerialBlockBytes = 32 << 10;  // snappy-java's default block

bool IsXerial(std::span<const std::byte> in) {
  return in.size() >= sizeof kXerialMagic &&
         std::memcmp(in.data(), kXerialMagic, sizeof kXerialMagic) == 0;
}

// The blocks of snappy records: one raw block, or the xerial framing's.
Status SnappyBlocks(std::span<const std::byte> in, std::vector<std::span<const std::byte>>* blocks,
                    const std::string& file, uint64_t position) {
  if (!IsXerial(in)) {
    blocks->push_back(in);
    return Status::Ok();
  }
  if (in.size() < kXerialHeaderBytes)
    return R9(file, position, "xerial snappy header is truncated");
  size_t p = kXerialHeaderBytes;
  while (p < in.size()) {
    if (in.size() - p < 4) {
      return R9(
          file, position,
          fmt::format("xerial snappy: {} bytes at {} are not a block length", in.size() - p, p));
    }
    const uint32_t n = coding::GetFixed32(in.data() + p);
    p += 4;
    if (n > in.size() - p) {
      return R9(file, position,
                fmt::format("xerial snappy: a block of {} bytes at {} runs past "
                            "the records",
                            n, p - 4));
    }
    blocks->push_back(in.subspan(p, n));
    p += n;
  }
  return Status::Ok();
}

// Every block's stated size is summed and checked against the limit, and
// every block validated (decoded without writing), before one buffer of
// exactly the total is allocated.
Status SnappyDecompress(std::span<const std::byte> in, size_t max_bytes,
                        std::vector<std::byte>* out, const std::string& file, uint64_t position) {
  std::vector<std::span<const std::byte>> blocks;
  MQ_RETURN_IF_ERROR(SnappyBlocks(in, &blocks, file, position));
  size_t total = 0;
  for (auto block : blocks) {
    const char* p = reinterpret_cast<const char*>(block.data());
    size_t size = 0;
    if (!snappy::GetUncompressedLength(p, block.size(), &size)) {
      return R9(file, position, "snappy: bad block length");
    }
    if (size > max_bytes - total) {
      return R9(file, position,
                fmt::format("snappy records decompress to more than {} bytes", max_bytes));
    }
    if (!snappy::IsValidCompressedBuffer(p, block.size())) {
      return R9(file, position, "snappy: corrupt block");
    }
    total += size;
  }
  if (out->capacity() < total) {
    out->clear();
    out->shrink_to_fit();
    try {
      out->reserve(total);
    } catch (const std::bad_alloc&) {
      return NoMemory(file, position, total, "snappy");
    }
  }
  MQ_RETURN_IF_ERROR(Resize(out, total, file, position, "snappy"));
  size_t used = 0;
  for (auto block : blocks) {
    const char* p = reinterpret_cast<const char*>(block.data());
    size_t size = 0;
    snappy::GetUncompressedLength(p, block.size(), &size);
    if (!snappy::RawUncompress(p, block.size(), reinterpret_cast<char*>(out->data() + used))) {
      return R9(file, position, "snappy: corrupt block");
    }
    used += size;
  }
  return Status::Ok();
}

// ---- lz4 (codec 3): one LZ4 frame (lz4_Frame_format.md) with its correct
// header checksum; the broken checksum of Kafka's magic 0 messages is an
// error here.

struct Lz4DCtxDeleter {
  void operator()(LZ4F_dctx* c) const { LZ4F_freeDecompressionContext(c); }
};

// A per-thread context, dropped after any frame that did not end cleanly
// (resetting one does not clear all its state), so each frame starts fresh.
std::unique_ptr<LZ4F_dctx, Lz4DCtxDeleter>& ThreadLz4DCtx() {
  thread_local std::unique_ptr<LZ4F_dctx, Lz4DCtxDeleter> ctx;
  if (ctx == nullptr) {
    LZ4F_dctx* c = nullptr;
    if (!LZ4F_isError(LZ4F_createDecompressionContext(&c, LZ4F_VERSION))) ctx.reset(c);
  }
  return ctx;
}

Status Lz4Frame(LZ4F_dctx* dctx, std::span<const std::byte> in, GrowingOutput& o,
                const std::string& file, uint64_t position) {
  MQ_RETURN_IF_ERROR(o.Start());
  const std::byte* src = in.data();
  size_t left = in.size();
  for (;;) {
    MQ_RETURN_IF_ERROR(o.MakeRoom());
    size_t dst_size = o.free_size();
    size_t src_size = left;
    size_t hint = LZ4F_decompress(dctx, o.free_data(), &dst_size, src, &src_size, nullptr);
    if (LZ4F_isError(hint)) {
      const char* name = LZ4F_getErrorName(hint);
      if (std::strstr(name, "allocation") != nullptr)
        return NoMemory(file, position, 4 << 20, "lz4");
      return R9(file, position, fmt::format("lz4: {}", name));
    }
    o.Produced(dst_size);
    src += src_size;
    left -= src_size;
    if (hint == 0) break;  // the frame is complete
    if ((left == 0 || (src_size == 0 && dst_size == 0)) && o.free_size() > 0) {
      return R9(file, position, "lz4 frame is truncated");
    }
  }
  if (left != 0) return R9(file, position, fmt::format("{} bytes follow the lz4 frame", left));
  return Status::Ok();
}

Status Lz4Decompress(std::span<const std::byte> in, size_t max_bytes, std::vector<std::byte>* out,
                     const std::string& file, uint64_t position) {
  auto pass = [&](GrowingOutput& o) {
    auto& dctx = ThreadLz4DCtx();
    if (dctx == nullptr) return NoMemory(file, position, 0, "lz4");
    Status s = Lz4Frame(dctx.get(), in, o, file, position);
    if (!s.ok()) dctx.reset();
    return s;
  };
  return Bounded(pass, in, max_bytes, out, "lz4", file, position);
}

}  // namespace

Status ZstdCompress(std::span<const std::byte> in, int level, void** ctx,
                    std::vector<std::byte>* out) {
  if (*ctx == nullptr) *ctx = ZSTD_createCCtx();
  auto* cctx = static_cast<ZSTD_CCtx*>(*ctx);
  if (cctx == nullptr) return Status(Code::kInternal, "zstd: cannot create context");
  out->resize(ZSTD_compressBound(in.size()));
  size_t r = ZSTD_compressCCtx(cctx, out->data(), out->size(), in.data(), in.size(), level);
  if (ZSTD_isError(r))
    return Status(Code::kInternal, fmt::format("zstd: {}", ZSTD_getErrorName(r)));
  out->resize(r);
  return Status::Ok();
}

void FreeCompressor(void* ctx) { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(ctx)); }

namespace {

// The size the zstd frame `in` says it holds (ZSTD_CONTENTSIZE_UNKNOWN when
// it does not say), once `in` is found to be exactly one frame claiming no
// more than `max_bytes` (R9).
Result<unsigned long long> ZstdFrameSize(std::span<const std::byte> in, size_t max_bytes,
                                         const std::string& file, uint64_t position) {
  size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame)) {
    return R9(file, position, fmt::format("not one zstd frame: {}", ZSTD_getErrorName(frame)));
  }
  if (frame != in.size()) {
    return R9(file, position, fmt::format("{} bytes follow the zstd frame", in.size() - frame));
  }
  unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return R9(file, position, "bad zstd frame header");
  if (size != ZSTD_CONTENTSIZE_UNKNOWN && size > max_bytes) {
    return R9(file, position,
              fmt::format("zstd frame claims {} bytes, more than the limit {}", size, max_bytes));
  }
  return size;
}

// The rest of a frame that filled the first buffer, decompressed through a
// fixed buffer only to be counted into `produced`, until the frame ends or
// more than `limit` bytes came; `r`: the last ZSTD_decompressStream result.
Status CountZstdRest(ZSTD_DCtx* dctx, ZSTD_inBuffer& src, size_t& r, size_t& produced, size_t limit,
                     const std::string& file, uint64_t position) {
  thread_local std::vector<std::byte> discard;
  MQ_RETURN_IF_ERROR(Resize(&discard, kCountBufferBytes, file, position));
  while (!ZSTD_isError(r) && r != 0 && produced <= limit) {
    ZSTD_outBuffer sink{discard.data(), discard.size(), 0};
    r = ZSTD_decompressStream(dctx, &sink, &src);
    produced += sink.pos;
    if (sink.pos < sink.size && src.pos == src.size && r != 0 && !ZSTD_isError(r)) break;
  }
  return Status::Ok();
}

// The frame `in`, counted to `produced` bytes, decompressed again into
// `out` of exactly that size.
Status ZstdDecompressCounted(ZSTD_DCtx* dctx, std::span<const std::byte> in, size_t produced,
                             std::vector<std::byte>* out, const std::string& file,
                             uint64_t position) {
  if (out->capacity() < produced) {
    out->clear();
    out->shrink_to_fit();
  }
  MQ_RETURN_IF_ERROR(Resize(out, produced, file, position));
  size_t r = ZSTD_decompressDCtx(dctx, out->data(), out->size(), in.data(), in.size());
  if (ZSTD_isError(r)) return ZstdError(r, file, position, out->size());
  if (r != produced) {
    return R9(file, position, fmt::format("zstd frame gave {} bytes, then {}", produced, r));
  }
  return Status::Ok();
}

}  // namespace

Status ZstdDecompress(std::span<const std::byte> in, size_t max_bytes, std::vector<std::byte>* out,
                      const std::string& file, uint64_t position) {
  ZSTD_DCtx* dctx = ThreadDCtx();
  if (dctx == nullptr) return NoMemory(file, position, 0);
  auto claimed = ZstdFrameSize(in, max_bytes, file, position);
  if (!claimed) return claimed.error();
  const unsigned long long size = *claimed;
  const bool known = size != ZSTD_CONTENTSIZE_UNKNOWN;
  // The frame's claimed size only caps what is accepted. One byte over the
  // cap tells "too large" from "exactly the cap".
  const size_t limit = known ? static_cast<size_t>(size) : max_bytes;
  const size_t trusted = std::max(kTrustBytes, in.size() * kTrustRatio);
  const size_t first = std::min(limit + 1, trusted);
  MQ_RETURN_IF_ERROR(Resize(out, first, file, position));
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  ZSTD_outBuffer dst{out->data(), out->size(), 0};
  size_t r = ZSTD_decompressStream(dctx, &dst, &src);
  size_t produced = dst.pos;
  // More than the first buffer: count the rest through a fixed buffer.
  if (!ZSTD_isError(r) && r != 0 && dst.pos == dst.size)
    MQ_RETURN_IF_ERROR(CountZstdRest(dctx, src, r, produced, limit, file, position));
  if (ZSTD_isError(r)) return ZstdError(r, file, position, out->size());
  if (produced > limit) {
    if (known) {
      return R9(file, position,
                fmt::format("zstd frame gives more than the {} bytes its header says", size));
    }
    return R9(file, position,
              fmt::format("zstd records decompress to more than {} bytes", max_bytes));
  }
  if (r != 0) return R9(file, position, "zstd frame is truncated");
  if (src.pos != src.size) return R9(file, position, "bytes follow the zstd frame");
  if (known && produced != size) {
    return R9(file, position,
              fmt::format("zstd frame gave {} bytes, its header says {}", produced, size));
  }
  // Counted: decompress again into a buffer of exactly that size.
  if (produced > first)
    MQ_RETURN_IF_ERROR(ZstdDecompressCounted(dctx, in, produced, out, file, position));
  out->resize(produced);
  return Status::Ok();
}

namespace {

Status GzipCompress(std::span<const std::byte> in, std::vector<std::byte>* out) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return Status(Code::kNoMemory, "gzip: cannot create a compression stream");
  }
  struct End {
    z_stream* zs;
    ~End() { deflateEnd(zs); }
  } end{&zs};
  out->resize(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out->data());
  zs.avail_out = static_cast<uInt>(out->size());
  int rc = deflate(&zs, Z_FINISH);
  if (rc != Z_STREAM_END)
    return Status(Code::kInternal, fmt::format("gzip: deflate failed ({})", rc));
  out->resize(zs.total_out);
  return Status::Ok();
}

// snappy-java's SnappyOutputStream: the header, then each 32 KiB of input
// as a big-endian int32 length and one raw snappy block.
Status SnappyCompress(std::span<const std::byte> in, std::vector<std::byte>* out) {
  out->resize(kXerialHeaderBytes);
  std::memcpy(out->data(), kXerialMagic, sizeof kXerialMagic);
  coding::PutFixed32(out->data() + 8, 1);   // version
  coding::PutFixed32(out->data() + 12, 1);  // minimum compatible version
  for (size_t p = 0; p < in.size(); p += kXerialBlockBytes) {
    const size_t n = std::min(kXerialBlockBytes, in.size() - p);
    const size_t at = out->size();
    out->resize(at + 4 + snappy::MaxCompressedLength(n));
    size_t written = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(in.data() + p), n,
                        reinterpret_cast<char*>(out->data() + at + 4), &written);
    coding::PutFixed32(out->data() + at, static_cast<uint32_t>(written));
    out->resize(at + 4 + written);
  }
  return Status::Ok();
}

// Kafka's KafkaLZ4BlockOutputStream: one frame of independent 64 KiB
// blocks, no checksums besides the (correct) header checksum.
Status Lz4Compress(std::span<const std::byte> in, std::vector<std::byte>* out) {
  LZ4F_preferences_t prefs;
  std::memset(&prefs, 0, sizeof prefs);
  prefs.frameInfo.blockSizeID = LZ4F_max64KB;
  prefs.frameInfo.blockMode = LZ4F_blockIndependent;
  prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
  prefs.frameInfo.blockChecksumFlag = LZ4F_noBlockChecksum;
  out->resize(LZ4F_compressFrameBound(in.size(), &prefs));
  size_t r = LZ4F_compressFrame(out->data(), out->size(), in.data(), in.size(), &prefs);
  if (LZ4F_isError(r)) return Status(Code::kInternal, fmt::format("lz4: {}", LZ4F_getErrorName(r)));
  out->resize(r);
  return Status::Ok();
}

}  // namespace

Status Compress(Compression codec, std::span<const std::byte> in, int zstd_level, void** zstd_ctx,
                std::vector<std::byte>* out) {
  try {
    switch (codec) {
      case Compression::kGzip:
        return GzipCompress(in, out);
      case Compression::kSnappy:
        return SnappyCompress(in, out);
      case Compression::kLz4:
        return Lz4Compress(in, out);
      case Compression::kZstd: {
        if (zstd_ctx != nullptr) return ZstdCompress(in, zstd_level, zstd_ctx, out);
        void* ctx = nullptr;
        Status s = ZstdCompress(in, zstd_level, &ctx, out);
        FreeCompressor(ctx);
        return s;
      }
      case Compression::kNone:
        break;
    }
  } catch (const std::bad_alloc&) {
    return Status(Code::kNoMemory, fmt::format("out of memory compressing {} bytes with {}",
                                               in.size(), CompressionName(codec)));
  }
  return Status(Code::kUnsupported, fmt::format("cannot write codec {}", static_cast<int>(codec)));
}

Status Decompress(Compression codec, std::span<const std::byte> in, size_t max_bytes,
                  std::vector<std::byte>* out, const std::string& file, uint64_t position) {
  switch (codec) {
    case Compression::kGzip:
      return GzipDecompress(in, max_bytes, out, file, position);
    case Compression::kSnappy:
      return SnappyDecompress(in, max_bytes, out, file, position);
    case Compression::kLz4:
      return Lz4Decompress(in, max_bytes, out, file, position);
    case Compression::kZstd:
      return ZstdDecompress(in, max_bytes, out, file, position);
    case Compression::kNone:
      break;
  }
  return Status(Code::kUnsupported, fmt::format("{}: position {}: R5: unsupported codec {}", file,
                                                position, static_cast<int>(codec)));
}

}  // namespace mq::compression
