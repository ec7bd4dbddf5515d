// R9 compression for every codec (format-spec/batch.md §5.1): mq's encoder
// round-trips gzip, snappy, lz4 and zstd as Kafka frames them; bad,
// truncated and oversized records are R9; decompression memory follows the
// bytes really produced, never what a header claims.
#include <catch2/catch.hpp>

#include <lz4frame.h>
#include <snappy.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "batch_test_util.h"
#include "format/compression.h"
#include "mq/batch.h"

using mq::Compression;
using mq::test::WrapRecords;

using mq::test::ToHex;

namespace {

constexpr Compression kCodecs[] = {Compression::kGzip, Compression::kSnappy, Compression::kLz4,
                                   Compression::kZstd};

std::vector<std::byte> Bytes(std::string_view s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// A gzip stream of `in` (zlib, gzip header).
std::vector<std::byte> Gzip(std::span<const std::byte> in) {
  std::vector<std::byte> out;
  REQUIRE(mq::compression::Compress(Compression::kGzip, in, 0, nullptr, &out).ok());
  return out;
}

// One LZ4 frame of `in`; with `content_size` the header states it.
std::vector<std::byte> Lz4Frame(std::span<const std::byte> in, uint64_t content_size = 0) {
  LZ4F_preferences_t prefs{};
  prefs.frameInfo.contentSize = content_size;
  std::vector<std::byte> out(LZ4F_compressFrameBound(in.size(), &prefs));
  size_t n = LZ4F_compressFrame(out.data(), out.size(), in.data(), in.size(), &prefs);
  REQUIRE_FALSE(LZ4F_isError(n));
  out.resize(n);
  return out;
}

// XXH32 with seed 0 of fewer than 16 bytes: the LZ4 frame header checksum
// is its second byte (lz4_Frame_format.md).
uint32_t Xxh32Short(std::span<const std::byte> in) {
  constexpr uint32_t k1 = 2654435761u, k2 = 2246822519u, k3 = 3266489917u, k4 = 668265263u,
                     k5 = 374761393u;
  auto rotl = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  uint32_t h = k5 + static_cast<uint32_t>(in.size());
  size_t i = 0;
  for (; i + 4 <= in.size(); i += 4) {
    uint32_t v = 0;
    for (int j = 3; j >= 0; --j) v = (v << 8) | std::to_integer<uint32_t>(in[i + j]);
    h = rotl(h + v * k3, 17) * k4;
  }
  for (; i < in.size(); ++i) h = rotl(h + std::to_integer<uint32_t>(in[i]) * k5, 11) * k1;
  h ^= h >> 15;
  h *= k2;
  h ^= h >> 13;
  h *= k3;
  h ^= h >> 16;
  return h;
}

// Sets the content size an LZ4 frame states (FLG bit 3) and its header
// checksum.
void StateContentSize(std::vector<std::byte>* frame, uint64_t size) {
  REQUIRE((std::to_integer<int>((*frame)[4]) & 0x08) != 0);
  for (int i = 0; i < 8; ++i) (*frame)[6 + i] = std::byte((size >> (8 * i)) & 0xff);
  (*frame)[14] = std::byte((Xxh32Short(std::span(*frame).subspan(4, 10)) >> 8) & 0xff);
}

std::vector<std::byte> RawSnappy(std::span<const std::byte> in) {
  std::string out;
  snappy::Compress(reinterpret_cast<const char*>(in.data()), in.size(), &out);
  return Bytes(out);
}

mq::Status Open(Compression codec, std::span<const std::byte> records, size_t limit,
                std::vector<std::byte>* scratch, int32_t count = 1) {
  auto batch = WrapRecords(records, count, count - 1, static_cast<uint16_t>(codec));
  mq::DecodeLimits limits;
  limits.max_decompressed_bytes = static_cast<uint32_t>(limit);
  auto view = mq::BatchView::Parse(batch, limits, "c.log", 0);
  if (!view) return view.error();
  auto reader = mq::RecordReader::Open(*view, scratch, limits, "c.log", 0);
  return reader ? mq::Status::Ok() : reader.error();
}

std::string Name(Compression c) { return std::string(mq::CompressionName(c)); }

}  // namespace

TEST_CASE("R9 compression: every codec round-trips through the batch encoder",
          "[compression][R9]") {
  // 3000 records of ~100 bytes: several snappy (32 KiB) and lz4 (64 KiB)
  // blocks.
  std::vector<std::string> keys, values;
  for (int i = 0; i < 3000; ++i) {
    keys.push_back("key-" + std::to_string(i));
    values.push_back("value " + std::to_string(i * 7919) + std::string(i % 97, 'x'));
  }
  for (Compression codec : kCodecs) {
    INFO(Name(codec));
    mq::BatchOptions o;
    o.compression = codec;
    mq::BatchBuilder builder(o);
    for (size_t i = 0; i < keys.size(); ++i) {
      mq::RecordInput r;
      r.timestamp = 1700000000000 + static_cast<int64_t>(i);
      r.key = mq::AsBytes(keys[i]);
      r.value = mq::AsBytes(values[i]);
      mq::Header h{"h", mq::AsBytes(keys[i])};
      if (i % 3 == 0) r.headers = std::span(&h, 1);
      builder.Add(r);
    }
    std::vector<std::byte> out;
    REQUIRE(builder.Finish(0, &out).ok());
    auto view = mq::BatchView::Parse(out, {}, "rt.log", 0);
    REQUIRE(view.has_value());
    CHECK(view->header().compression() == codec);
    auto rec = view->records_bytes();
    switch (codec) {
      case Compression::kGzip:  // gzip magic, deflate
        CHECK(rec[0] == std::byte{0x1f});
        CHECK(rec[1] == std::byte{0x8b});
        CHECK(rec[2] == std::byte{8});
        break;
      case Compression::kSnappy:  // snappy-java's header, version 1, compatible 1
        CHECK(ToHex(rec.first(16)) == "82534e41505059000000000100000001");
        break;
      case Compression::kLz4:
        // LZ4 frame magic; FLG 0x60: version 1, independent blocks, no
        // checksums, no content size; BD 0x40: 64 KiB blocks. Header
        // checksum: the one the LZ4 frame format defines (liblz4 checks it).
        CHECK(ToHex(rec.first(6)) == "04224d186040");
        break;
      default:
        break;
    }
    std::vector<std::byte> scratch;
    auto reader = mq::RecordReader::Open(*view, &scratch, {}, "rt.log", 0);
    REQUIRE(reader.has_value());
    CHECK(scratch.size() > rec.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      auto r = reader->Next();
      REQUIRE(r.has_value());
      REQUIRE(r->has_value());
      CHECK((*r)->offset == static_cast<int64_t>(i));
      CHECK((*r)->timestamp == 1700000000000 + static_cast<int64_t>(i));
      CHECK(mq::AsText(*(*r)->key) == keys[i]);
      CHECK(mq::AsText(*(*r)->value) == values[i]);
      CHECK((*r)->headers_count == (i % 3 == 0 ? 1 : 0));
    }
    auto end = reader->Next();
    REQUIRE(end.has_value());
    CHECK_FALSE(end->has_value());
  }
}

TEST_CASE("R9 compression: an empty batch round-trips in every codec", "[compression][R9]") {
  for (Compression codec : kCodecs) {
    INFO(Name(codec));
    mq::BatchOptions o;
    o.compression = codec;
    mq::BatchBuilder builder(o);
    std::vector<std::byte> out;
    REQUIRE(builder.Finish(0, &out).ok());
    auto view = mq::BatchView::Parse(out, {}, "e.log", 0);
    REQUIRE(view.has_value());
    std::vector<std::byte> scratch;
    auto reader = mq::RecordReader::Open(*view, &scratch, {}, "e.log", 0);
    REQUIRE(reader.has_value());
    CHECK(scratch.empty());
  }
}

TEST_CASE("R9 compression: damaged, truncated or padded records are corruption in every codec",
          "[compression][R9]") {
  std::string text(5000, 'a');
  text.append("records that are not records");
  auto plain = Bytes(text);
  for (Compression codec : kCodecs) {
    INFO(Name(codec));
    std::vector<std::byte> good;
    REQUIRE(mq::compression::Compress(codec, plain, 3, nullptr, &good).ok());
    std::vector<std::byte> out;
    REQUIRE(mq::compression::Decompress(codec, good, 1 << 20, &out, "d.log", 7).ok());
    CHECK(out == plain);
    std::vector<std::byte> scratch;
    // Cut short.
    auto cut = std::span(good).first(good.size() - 3);
    mq::Status s = Open(codec, cut, 1 << 20, &scratch);
    CHECK(s.rule() == "R9");
    CHECK(s.message().find("c.log: position 0: R9: ") == 0);
    // Garbage after the stream.
    auto padded = good;
    padded.push_back(std::byte{0x42});
    padded.push_back(std::byte{0x42});
    CHECK(Open(codec, padded, 1 << 20, &scratch).rule() == "R9");
    // Not this codec at all.
    CHECK(Open(codec, plain, 1 << 20, &scratch).rule() == "R9");
    CHECK(Open(codec, {}, 1 << 20, &scratch).rule() == "R9");
  }
}

TEST_CASE("R9 compression: gzip members may follow each other", "[compression][R9]") {
  auto a = Gzip(Bytes("first "));
  auto b = Gzip(Bytes("second"));
  a.insert(a.end(), b.begin(), b.end());
  std::vector<std::byte> out;
  REQUIRE(mq::compression::Decompress(Compression::kGzip, a, 100, &out, "g.log", 0).ok());
  CHECK(mq::AsText(out) == "first second");
}

TEST_CASE("R9 compression: a bomb over the limit stops at the limit in every codec",
          "[compression][R9][memory]") {
  // 64 MiB of zeros in a few hundred KiB; read with a 16 MiB limit. Like
  // zstd, a stream yielding more than max(1 MiB, 32 x its size) is counted
  // through a fixed buffer before any larger buffer: over the limit, no
  // buffer of the limit's size is ever allocated.
  std::vector<std::byte> zeros(64u << 20);
  const size_t limit = 16u << 20;
  for (Compression codec : kCodecs) {
    INFO(Name(codec));
    std::vector<std::byte> bomb;
    REQUIRE(mq::compression::Compress(codec, zeros, 3, nullptr, &bomb).ok());
    REQUIRE(bomb.size() < (4u << 20));
    std::vector<std::byte> scratch;
    mq::Status s = Open(codec, bomb, limit, &scratch);
    CHECK(s.rule() == "R9");
    CHECK(s.message().find("more than") != std::string::npos);
    CHECK(s.message().find(std::to_string(limit)) != std::string::npos);
    INFO("compressed " << bomb.size() << ", buffer " << scratch.capacity());
    CHECK(scratch.capacity() <= std::max<size_t>(1u << 20, 32 * bomb.size()) + 1);
    CHECK(scratch.capacity() < limit);
  }
  // One raw snappy block of 8 MiB (as librdkafka writes): refused from its
  // stated size, before any buffer.
  {
    std::vector<std::byte> scratch;
    auto block = RawSnappy(std::span(zeros).first(8u << 20));
    CHECK(Open(Compression::kSnappy, block, (8u << 20) - 1, &scratch).rule() == "R9");
    CHECK(scratch.capacity() == 0);
    REQUIRE(Open(Compression::kSnappy, block, 8u << 20, &scratch).ok());
    CHECK(scratch.size() == (8u << 20));
  }
  // 8 MiB within a limit above it: decoded whole, in a buffer of its size
  // (counted first, then decoded into exactly that and a spare byte).
  for (Compression codec : kCodecs) {
    INFO(Name(codec));
    std::vector<std::byte> bomb;
    REQUIRE(
        mq::compression::Compress(codec, std::span(zeros).first(8u << 20), 3, nullptr, &bomb).ok());
    std::vector<std::byte> out;
    REQUIRE(mq::compression::Decompress(codec, bomb, 64u << 20, &out, "b.log", 0).ok());
    CHECK(out.size() == (8u << 20));
    CHECK(out.capacity() <= (8u << 20) + 1);
    CHECK(std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0}; }));
  }
}

TEST_CASE("R9 compression: a stated size over the limit is refused before any allocation",
          "[compression][R9][memory]") {
  std::vector<std::byte> scratch;
  SECTION("raw snappy block claiming 1 GiB") {
    // Varint 2^30, then a 3-byte literal: claims 1 GiB, holds 3 bytes.
    auto block =
        Bytes(std::string("\x80\x80\x80\x80\x04\x08"
                          "abc",
                          9));
    mq::Status s = Open(Compression::kSnappy, block, 64u << 20, &scratch);
    CHECK(s.rule() == "R9");
    CHECK(scratch.capacity() == 0);
  }
  SECTION("raw snappy block claiming more than it holds, within the limit") {
    auto block =
        Bytes(std::string("\x80\x80\x80\x02\x08"
                          "abc",
                          8));  // claims 4 MiB
    mq::Status s = Open(Compression::kSnappy, block, 64u << 20, &scratch);
    CHECK(s.rule() == "R9");
    CHECK(scratch.capacity() == 0);
  }
  SECTION("xerial blocks that together pass the limit") {
    std::vector<std::byte> x(16);
    std::vector<std::byte> one(600 << 10);
    REQUIRE(mq::compression::Compress(Compression::kSnappy, one, 0, nullptr, &x).ok());
    std::vector<std::byte> two = x;
    two.insert(two.end(), x.begin() + 16, x.end());  // the blocks twice: 1.2 MiB
    CHECK(mq::compression::Decompress(Compression::kSnappy, two, 2u << 20, &scratch, "x", 0).ok());
    CHECK(scratch.size() == (1200u << 10));
    scratch = std::vector<std::byte>();
    CHECK(Open(Compression::kSnappy, two, 1u << 20, &scratch).rule() == "R9");
    CHECK(scratch.capacity() <= (1u << 20));
  }
  SECTION("lz4 frame whose header claims 1 GiB and holds 10 bytes") {
    auto frame = Lz4Frame(Bytes("0123456789"), 1);
    // The checksum helper reproduces liblz4's: the frame is valid as built.
    std::vector<std::byte> copy = frame;
    StateContentSize(&copy, 10);
    REQUIRE(copy == frame);
    REQUIRE(mq::compression::Decompress(Compression::kLz4, frame, 100, &scratch, "l", 0).ok());
    StateContentSize(&frame, 1u << 30);
    mq::Status s = Open(Compression::kLz4, frame, 64u << 20, &scratch);
    INFO(s.message());
    CHECK(s.rule() == "R9");
    CHECK(scratch.capacity() <= (1u << 20));  // the first buffer, as zstd
  }
  SECTION("gzip trailer claiming 1 GiB") {
    auto gz = Gzip(Bytes("0123456789"));
    gz[gz.size() - 1] = std::byte{0x40};  // ISIZE = 2^30 + 10
    mq::Status s = Open(Compression::kGzip, gz, 64u << 20, &scratch);
    CHECK(s.rule() == "R9");
    CHECK(scratch.capacity() <= (1u << 20));  // the first buffer, as zstd
  }
}
