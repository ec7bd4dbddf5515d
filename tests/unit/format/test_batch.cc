// Batch header rules R1-R7 and R19 (format-spec/README.md §11), one TEST_CASE each.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "batch_test_util.h"
#include "exit_code.h"  // tools/common: a status's exit status

using mq::test::FixCrc;
using mq::test::SimpleBatch;
namespace fmt_ = mq::format;

namespace {

mq::Status ParseStatus(const std::vector<std::byte>& b, const mq::DecodeLimits& limits = {}) {
  return mq::BatchView::Parse(b, limits, "00000000000000000000.log", 1234).status();
}

void Put32(std::vector<std::byte>& b, size_t at, int32_t v) {
  mq::coding::PutFixed32(b.data() + at, static_cast<uint32_t>(v));
}

}  // namespace

TEST_CASE("R1 complete: a batch cut short is a torn tail, never a batch", "[batch][R1]") {
  auto b = SimpleBatch(3);
  mq::BatchHeader h;
  for (size_t n :
       {size_t{0}, size_t{11}, size_t{16}, size_t{17}, size_t{60}, size_t{61}, b.size() - 1}) {
    INFO("bytes " << n);
    std::span<const std::byte> cut(b.data(), n);
    auto probe = mq::ProbeBatch(cut, &h, {});
    REQUIRE(probe.has_value());
    CHECK(*probe == mq::Probe::kTornTail);
    auto parsed = mq::BatchView::Parse(cut, {}, "f.log", 99);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().rule() == "R1");
    CHECK(parsed.error().position() == 99);
    CHECK(parsed.error().file() == "f.log");
  }
  auto whole = mq::ProbeBatch(b, &h, {});
  REQUIRE(whole.has_value());
  CHECK(*whole == mq::Probe::kBatch);
  CHECK(h.size_bytes() == b.size());
  // Extra bytes after the batch are not part of it.
  auto more = b;
  more.resize(b.size() + 10);
  auto view = mq::BatchView::Parse(more, {});
  REQUIRE(view.has_value());
  CHECK(view->bytes().size() == b.size());
}

TEST_CASE("R2 length: batchLength below 49 or over the maximum is corruption", "[batch][R2]") {
  auto b = SimpleBatch(2);
  SECTION("below the header") {
    for (int32_t len : {48, 0, -1, std::numeric_limits<int32_t>::min()}) {
      Put32(b, fmt_::kBatchLengthOffset, len);
      mq::BatchHeader h;
      auto probe = mq::ProbeBatch(b, &h, {}, "f", 7);
      REQUIRE_FALSE(probe.has_value());
      CHECK(probe.error().rule() == "R2");
      CHECK(probe.error().code() == mq::Code::kCorruption);
    }
  }
  SECTION("over the configured maximum, even when the bytes are there") {
    mq::DecodeLimits limits;
    limits.max_batch_bytes = static_cast<uint32_t>(b.size() - 1);
    CHECK(ParseStatus(b, limits).rule() == "R2");
    limits.max_batch_bytes = static_cast<uint32_t>(b.size());
    CHECK(ParseStatus(b, limits).ok());
  }
  SECTION("a huge length in a short buffer is corruption, not a torn tail") {
    Put32(b, fmt_::kBatchLengthOffset, std::numeric_limits<int32_t>::max());
    CHECK(ParseStatus(b).rule() == "R2");
  }
  SECTION("49 is the smallest legal length: an empty batch") {
    auto empty = SimpleBatch(0);
    CHECK(empty.size() == 61);
    CHECK(ParseStatus(empty).ok());
  }
}

TEST_CASE("R3 magic: a batch whose magic is not 2 is corruption", "[batch][R3]") {
  for (int magic : {0, 1, 3, 0xFF}) {
    auto b = SimpleBatch(1);
    b[fmt_::kMagicOffset] = std::byte(magic);
    auto s = ParseStatus(b);
    CHECK(s.rule() == "R3");
    // Known from the first 17 bytes, before the batch is complete.
    mq::BatchHeader h;
    auto probe = mq::ProbeBatch(std::span<const std::byte>(b).first(17), &h, {});
    REQUIRE_FALSE(probe.has_value());
    CHECK(probe.error().rule() == "R3");
  }
}

TEST_CASE("R4 crc: a flipped byte under the CRC fails the check", "[batch][R4]") {
  auto b = SimpleBatch(4);
  for (size_t i = fmt_::kAttributesOffset; i < b.size(); ++i) {
    auto c = b;
    c[i] ^= std::byte{0x01};
    INFO("byte " << i);
    CHECK(ParseStatus(c).rule() == "R4");
  }
  auto c = b;
  c[fmt_::kCrcOffset] ^= std::byte{0x80};
  auto s = ParseStatus(c);
  CHECK(s.rule() == "R4");
  CHECK(s.position() == 1234);
  CHECK(s.message().find("00000000000000000000.log: position 1234: R4:") == 0);
}

TEST_CASE("R4 crc: kAlreadyComputed skips only the CRC, every other rule is still checked",
          "[batch][R4]") {
  auto b = SimpleBatch(3);
  auto view = mq::BatchView::Parse(b, {}, "f", 0, mq::CrcCheck::kAlreadyComputed);
  REQUIRE(view.has_value());
  CHECK(view->header().records_count == 3);
  auto bad_magic = b;
  bad_magic[fmt_::kMagicOffset] = std::byte{1};
  auto s = mq::BatchView::Parse(bad_magic, {}, "f", 0, mq::CrcCheck::kAlreadyComputed);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().rule() == "R3");
  auto torn = std::span<const std::byte>(b).first(b.size() - 1);
  s = mq::BatchView::Parse(torn, {}, "f", 0, mq::CrcCheck::kAlreadyComputed);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().rule() == "R1");
  // The default still verifies it.
  auto flipped = b;
  flipped[b.size() - 1] ^= std::byte{0x01};
  CHECK(ParseStatus(flipped).rule() == "R4");
}

TEST_CASE("R4 crc: baseOffset and partitionLeaderEpoch are outside the CRC", "[batch][R4]") {
  auto b = SimpleBatch(2);
  mq::SetBaseOffset(b, 1'000'000'007);
  mq::SetPartitionLeaderEpoch(b, 42);
  auto view = mq::BatchView::Parse(b, {});
  REQUIRE(view.has_value());
  CHECK(view->header().base_offset == 1'000'000'007);
  CHECK(view->header().last_offset() == 1'000'000'008);
  CHECK(view->header().partition_leader_epoch == 42);
}

TEST_CASE("R5 attributes: bits 7-15 and codecs 5-7 are unsupported, not corrupt, and 1-4 are valid",
          "[batch][R5]") {
  for (uint16_t bad : {uint16_t{0x0080}, uint16_t{0x0100}, uint16_t{0x8000}, uint16_t{5},
                       uint16_t{6}, uint16_t{7}}) {
    auto b = SimpleBatch(1);
    mq::coding::PutFixed16(b.data() + fmt_::kAttributesOffset, bad);
    FixCrc(b);
    INFO("attributes " << bad);
    mq::Status s = ParseStatus(b);
    CHECK(s.code() == mq::Code::kUnsupported);
    CHECK(mq::cli::ExitCode(s) == 65);
    CHECK(s.message().find(": R5: unsupported ") != std::string::npos);
    CHECK(s.message().find("position 1234") != std::string::npos);
  }
  for (uint16_t ok : {uint16_t{1}, uint16_t{2}, uint16_t{3}, uint16_t{4}, uint16_t{0x08},
                      uint16_t{0x10}, uint16_t{0x40}}) {
    auto b = SimpleBatch(1);
    mq::coding::PutFixed16(b.data() + fmt_::kAttributesOffset, ok);
    FixCrc(b);
    INFO("attributes " << ok);
    CHECK(ParseStatus(b).ok());
  }
}

TEST_CASE("R6 counts: offsets and counts must agree", "[batch][R6]") {
  auto edit = [](int32_t lod, int32_t count, uint16_t attributes = 0) {
    auto b = SimpleBatch(1);
    Put32(b, fmt_::kLastOffsetDeltaOffset, lod);
    Put32(b, fmt_::kRecordsCountOffset, count);
    mq::coding::PutFixed16(b.data() + fmt_::kAttributesOffset, attributes);
    FixCrc(b);
    return ParseStatus(b);
  };
  CHECK(edit(-1, 0).rule() == "R6");
  CHECK(edit(0, -1).rule() == "R6");
  CHECK(edit(0, 2).rule() == "R6");
  CHECK(edit(std::numeric_limits<int32_t>::max(), 1).ok());  // no overflow in lod + 1
  CHECK(edit(9, 1).ok());                                    // compacted: gaps are legal
  CHECK(edit(0, 0).ok());                                    // empty batch
  CHECK(edit(0, 0, 0x30).rule() == "R6");                    // control batch holds 1 record
  CHECK(edit(1, 2, 0x30).rule() == "R6");
}

TEST_CASE("R19 offset range: offsets below 0 or past 2^63-2 are corruption", "[batch][R19]") {
  auto edit = [](int64_t base, int32_t lod) {
    auto b = SimpleBatch(1);
    mq::coding::PutFixed64(b.data() + fmt_::kBaseOffsetOffset, static_cast<uint64_t>(base));
    Put32(b, fmt_::kLastOffsetDeltaOffset, lod);
    FixCrc(b);  // baseOffset is outside the CRC anyway: R4 cannot see this
    mq::BatchHeader h;
    auto probe = mq::ProbeBatch(b, &h, {}, "00000000000000000000.log", 1234);
    return probe ? mq::Status::Ok() : probe.error();
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  CHECK(edit(-1, 0).rule() == "R19");
  CHECK(edit(std::numeric_limits<int64_t>::min(), 0).rule() == "R19");
  CHECK(edit(kMax, 0).rule() == "R19");      // the offset after it would overflow
  CHECK(edit(kMax - 1, 0).ok());             // the largest offset there is
  CHECK(edit(kMax - 3, 5).rule() == "R19");  // F8: base 2^63-3, last offset delta 5
  CHECK(edit(kMax - 3, 2).ok());
  CHECK(edit(kMax - 2, std::numeric_limits<int32_t>::max()).rule() == "R19");
  auto s = edit(kMax - 3, 5);
  CHECK(s.position() == 1234);
  CHECK(s.message().find("00000000000000000000.log") != std::string::npos);
  static_assert(mq::format::kMaxOffset == kMax - 1);
}

TEST_CASE("R7 producer: a producer id needs an epoch and a base sequence", "[batch][R7]") {
  mq::BatchHeader h;
  CHECK(mq::CheckProducerFields(h).ok());  // no producer: -1/-1/-1
  h.producer_id = 0;
  h.producer_epoch = 0;
  h.base_sequence = 0;
  CHECK(mq::CheckProducerFields(h).ok());  // 0 is a real id (V4)
  h.producer_epoch = -1;
  auto s = mq::CheckProducerFields(h, "p.log", 77);
  CHECK(s.rule() == "R7");
  CHECK(s.position() == 77);
  h.producer_epoch = 3;
  h.base_sequence = -1;
  CHECK(mq::CheckProducerFields(h).rule() == "R7");
  h.attributes = 0x30;  // a control batch carries no sequence
  CHECK(mq::CheckProducerFields(h).ok());
}

TEST_CASE("batch header: lastSequence wraps from INT32_MAX to 0", "[batch]") {
  mq::BatchHeader h;
  h.base_sequence = std::numeric_limits<int32_t>::max() - 1;
  h.last_offset_delta = 3;
  CHECK(h.last_sequence() == 1);
  h.base_sequence = 5;
  CHECK(h.last_sequence() == 8);
  h.base_sequence = -1;
  CHECK(h.last_sequence() == -1);
}

TEST_CASE("batch builder: header fields follow the options", "[batch]") {
  mq::BatchOptions o;
  o.producer_id = 12;
  o.producer_epoch = 3;
  o.base_sequence = 40;
  o.partition_leader_epoch = 9;
  o.log_append_time = true;
  o.max_timestamp = 1800000000000;
  auto b = SimpleBatch(5, o, 1000);
  auto view = mq::BatchView::Parse(b, {});
  REQUIRE(view.has_value());
  const auto& h = view->header();
  CHECK(h.base_offset == 1000);
  CHECK(h.last_offset() == 1004);
  CHECK(h.records_count == 5);
  CHECK(h.attributes == 0x08);
  CHECK(h.base_timestamp == 1700000000000);
  CHECK(h.max_timestamp == 1800000000000);
  CHECK(h.last_sequence() == 44);
  CHECK(h.partition_leader_epoch == 9);
  // LogAppendTime: every record reads as maxTimestamp.
  std::vector<std::byte> scratch;
  auto reader = mq::RecordReader::Open(*view, &scratch, {});
  REQUIRE(reader.has_value());
  auto r = reader->Next();
  REQUIRE(r.has_value());
  REQUIRE(r->has_value());
  CHECK((*r)->timestamp == 1800000000000);
}

TEST_CASE("batch builder: Finish resets for the next batch, and an empty batch is legal",
          "[batch]") {
  mq::BatchBuilder builder;
  std::vector<std::byte> out;
  REQUIRE(builder.Finish(0, &out).ok());
  REQUIRE(out.size() == 61);
  auto empty = mq::BatchView::Parse(out, {});
  REQUIRE(empty.has_value());
  CHECK(empty->header().records_count == 0);
  CHECK(empty->header().base_timestamp == -1);
  CHECK(empty->header().max_timestamp == -1);
  mq::RecordInput r;
  r.timestamp = 5;
  r.value = mq::AsBytes("x");
  builder.Add(r);
  CHECK(builder.count() == 1);
  REQUIRE(builder.Finish(61, &out).ok());
  CHECK(builder.count() == 0);
  CHECK(builder.size_bytes() == 61);
  auto second = mq::BatchView::Parse(std::span<const std::byte>(out).subspan(61), {});
  REQUIRE(second.has_value());
  CHECK(second->header().base_offset == 61);
  CHECK(second->header().records_count == 1);
}

TEST_CASE("batch: codec names", "[batch]") {
  CHECK(mq::CompressionName(mq::Compression::kNone) == "none");
  CHECK(mq::CompressionName(mq::Compression::kGzip) == "gzip");
  CHECK(mq::CompressionName(mq::Compression::kSnappy) == "snappy");
  CHECK(mq::CompressionName(mq::Compression::kLz4) == "lz4");
  CHECK(mq::CompressionName(mq::Compression::kZstd) == "zstd");
}

TEST_CASE("batch compressor: an uncompressed batch becomes the bytes Finish writes compressed",
          "[batch]") {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("MQ_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("batch compressor: seed %llu (MQ_TEST_SEED to repeat)\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  for (mq::Compression c :
       {mq::Compression::kNone, mq::Compression::kGzip, mq::Compression::kSnappy,
        mq::Compression::kLz4, mq::Compression::kZstd}) {
    INFO("codec " << mq::CompressionName(c));
    mq::BatchOptions o;
    o.producer_id = 7;
    o.producer_epoch = 1;
    o.base_sequence = 100;
    o.log_append_time = c == mq::Compression::kGzip;
    mq::BatchOptions plain_options = o;
    o.compression = c;
    mq::BatchBuilder compressed(o), plain(plain_options);
    mq::BatchCompressor compressor(c, 3);
    std::vector<std::byte> want, uncompressed, got;
    for (int batch = 0; batch < 5; ++batch) {
      const int n = static_cast<int>(rng() % 40);
      std::vector<std::string> values;
      for (int i = 0; i < n; ++i)
        values.push_back(std::string(rng() % 300, char('a' + rng() % 26)));
      for (int i = 0; i < n; ++i) {
        mq::RecordInput r;
        r.timestamp = 1700000000000 + static_cast<int64_t>(rng() % 1000);
        r.value = mq::AsBytes(values[static_cast<size_t>(i)]);
        if (i % 3 == 0) r.key = mq::AsBytes(values[0]);
        compressed.Add(r);
        plain.Add(r);
      }
      const size_t at = uncompressed.size();
      REQUIRE(compressed.Finish(1000 + batch, &want).ok());
      REQUIRE(plain.Finish(1000 + batch, &uncompressed).ok());
      REQUIRE(compressor.Compress(std::span<const std::byte>(uncompressed).subspan(at), &got).ok());
    }
    CHECK(got == want);
    // All five at once: the same bytes.
    std::vector<std::byte> all;
    REQUIRE(compressor.Compress(uncompressed, &all).ok());
    CHECK(all == want);
    // Cut short: refused.
    std::vector<std::byte> cut;
    CHECK(
        compressor
            .Compress(std::span<const std::byte>(uncompressed).first(uncompressed.size() - 1), &cut)
            .code() == mq::Code::kInvalidArgument);
    // Twice compressed, or not a batch: refused.
    if (c != mq::Compression::kNone) {
      std::vector<std::byte> again;
      CHECK(compressor.Compress(want, &again).code() == mq::Code::kInvalidArgument);
    }
    std::vector<std::byte> short_out;
    CHECK(compressor.Compress(std::span<const std::byte>(uncompressed).first(60), &short_out)
              .code() == mq::Code::kInvalidArgument);
  }
}

TEST_CASE("R3 crc: a batch finished with defer_crc and sealed is the batch Finish writes",
          "[batch][R3]") {
  std::vector<std::byte> plain, deferred;
  for (int k = 0; k < 3; ++k) {
    mq::BatchOptions o;
    o.producer_id = k == 1 ? 7 : -1;
    o.producer_epoch = k == 1 ? 0 : -1;
    o.base_sequence = k == 1 ? 5 : -1;
    mq::BatchOptions d = o;
    d.defer_crc = true;
    mq::BatchBuilder a(o), b(d);
    for (int i = 0; i <= k * 40; ++i) {
      std::string v = "value " + std::to_string(i * 7919);
      mq::RecordInput r;
      r.timestamp = 1700000000000 + i;
      r.value = mq::Bytes(reinterpret_cast<const std::byte*>(v.data()), v.size());
      a.Add(r);
      b.Add(r);
    }
    REQUIRE(a.Finish(100 * k, &plain).ok());
    REQUIRE(b.Finish(100 * k, &deferred).ok());
  }
  REQUIRE(plain.size() == deferred.size());
  CHECK(plain != deferred);  // unsealed: the crc fields are zero
  // Unsealed, the first batch fails its CRC check.
  auto unsealed = mq::BatchView::Parse(deferred, mq::DecodeLimits{}, "t", 0, mq::CrcCheck::kVerify);
  REQUIRE_FALSE(unsealed);
  CHECK_THAT(unsealed.error().message(), Catch::Contains("crc"));
  REQUIRE(mq::SealBatches(deferred).ok());
  CHECK(plain == deferred);
  // A batch cut short is refused, and nothing is read past the bytes.
  std::vector<std::byte> cut(deferred.begin(), deferred.end() - 1);
  CHECK(mq::SealBatches(cut).code() == mq::Code::kInvalidArgument);
  std::vector<std::byte> tiny(deferred.begin(), deferred.begin() + 20);
  CHECK(mq::SealBatches(tiny).code() == mq::Code::kInvalidArgument);
}
