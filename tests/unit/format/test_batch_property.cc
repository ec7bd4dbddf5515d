// Property tests: random batches round-trip exactly; cutting a batch
// anywhere is a torn tail; damaging a byte never goes unnoticed.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "batch_test_util.h"

namespace {

struct RandomRecord {
  int64_t timestamp = 0;
  std::optional<std::string> key, value;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
};

std::optional<std::string> RandomBytes(std::mt19937_64& rng, bool nullable) {
  int kind = static_cast<int>(rng() % 10);
  if (nullable && kind == 0) return std::nullopt;
  if (kind == 1) return std::string();
  size_t n = kind == 2 ? rng() % 2000 : rng() % 40;  // sometimes past one varint byte
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::vector<RandomRecord> RandomRecords(std::mt19937_64& rng) {
  std::vector<RandomRecord> out(rng() % 30);
  int64_t base = static_cast<int64_t>(rng() % (int64_t{1} << 42)) - (int64_t{1} << 30);
  for (auto& r : out) {
    // Timestamps go backwards too: deltas may be negative.
    r.timestamp = base + static_cast<int64_t>(rng() % 2'000'000) - 1'000'000;
    if (rng() % 50 == 0) r.timestamp = static_cast<int64_t>(rng());  // far away: 10-byte varlong
    r.key = RandomBytes(rng, true);
    r.value = RandomBytes(rng, true);
    size_t nh = rng() % 4;
    for (size_t i = 0; i < nh; ++i)
      r.headers.emplace_back(*RandomBytes(rng, false), RandomBytes(rng, true));
  }
  return out;
}

std::optional<mq::Bytes> View(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  return mq::AsBytes(*s);
}

std::optional<std::string> Str(const std::optional<mq::Bytes>& b) {
  if (!b) return std::nullopt;
  return std::string(mq::AsText(*b));
}

}  // namespace

TEST_CASE("property: random batches round-trip exactly (none and zstd)", "[property]") {
  std::mt19937_64 rng(20261130);
  std::vector<std::byte> scratch;
  for (int iter = 0; iter < 300; ++iter) {
    auto records = RandomRecords(rng);
    mq::BatchOptions o;
    o.compression = iter % 2 ? mq::Compression::kZstd : mq::Compression::kNone;
    o.zstd_level = 1 + iter % 5;
    if (rng() % 2) {
      o.producer_id = static_cast<int64_t>(rng() % 100000);
      o.producer_epoch = static_cast<int16_t>(rng() % 100);
      o.base_sequence = static_cast<int32_t>(rng() % 1000000);
    }
    o.partition_leader_epoch = static_cast<int32_t>(rng() % 10) - 1;
    int64_t base_offset = static_cast<int64_t>(rng() % (int64_t{1} << 50));

    mq::BatchBuilder builder(o);
    std::vector<std::vector<mq::Header>> headers(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      for (auto& [k, v] : records[i].headers) headers[i].push_back({k, View(v)});
      mq::RecordInput in;
      in.timestamp = records[i].timestamp;
      in.key = View(records[i].key);
      in.value = View(records[i].value);
      in.headers = headers[i];
      builder.Add(in);
    }
    std::vector<std::byte> out;
    REQUIRE(builder.Finish(base_offset, &out).ok());

    auto view = mq::BatchView::Parse(out, {}, "rand.log", 0);
    REQUIRE(view.has_value());
    const auto& h = view->header();
    CHECK(h.base_offset == base_offset);
    CHECK(h.records_count == static_cast<int32_t>(records.size()));
    CHECK(h.compression() == o.compression);
    CHECK(h.producer_id == o.producer_id);
    CHECK(h.base_sequence == o.base_sequence);
    CHECK(mq::CheckProducerFields(h).ok());
    auto reader = mq::RecordReader::Open(*view, &scratch, {}, "rand.log", 0);
    REQUIRE(reader.has_value());
    for (size_t i = 0; i < records.size(); ++i) {
      auto r = reader->Next();
      REQUIRE(r.has_value());
      REQUIRE(r->has_value());
      const mq::RecordView& rv = **r;
      CHECK(rv.offset == base_offset + static_cast<int64_t>(i));
      CHECK(rv.timestamp == records[i].timestamp);
      CHECK(Str(rv.key) == records[i].key);
      CHECK(Str(rv.value) == records[i].value);
      auto hs = rv.headers();
      REQUIRE(hs.size() == records[i].headers.size());
      for (size_t j = 0; j < hs.size(); ++j) {
        CHECK(hs[j].key == records[i].headers[j].first);
        CHECK(Str(hs[j].value) == records[i].headers[j].second);
      }
    }
    auto end = reader->Next();
    REQUIRE(end.has_value());
    CHECK_FALSE(end->has_value());
  }
}

TEST_CASE("property: a valid batch cut at every length is a torn tail", "[property][R1]") {
  for (auto compression : {mq::Compression::kNone, mq::Compression::kZstd}) {
    mq::BatchOptions o;
    o.compression = compression;
    auto b = mq::test::SimpleBatch(20, o);
    mq::BatchHeader h;
    for (size_t n = 0; n < b.size(); ++n) {
      auto probe = mq::ProbeBatch(std::span<const std::byte>(b.data(), n), &h, {});
      REQUIRE(probe.has_value());
      REQUIRE(*probe == mq::Probe::kTornTail);
    }
    auto whole = mq::ProbeBatch(b, &h, {});
    REQUIRE(whole.has_value());
    CHECK(*whole == mq::Probe::kBatch);
  }
}

TEST_CASE(
    "property: any damaged byte of V1 after offset 21 fails R4 or an earlier rule, of baseOffset "
    "R19 or none",
    "[property][R4]") {
  const auto v1 = mq::test::HexBytes(
      "00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063cff"
      "ffffffffffffffffffffffffff0000000112000000010631323300");
  for (size_t i = 0; i < v1.size(); ++i) {
    for (int x : {0x01, 0x80, 0xFF, 0x5A}) {
      auto b = v1;
      b[i] ^= std::byte(x);
      auto s = mq::BatchView::Parse(b, {}, "v1.log", 0).status();
      INFO("byte " << i << " xor " << x << ": " << s.message());
      if (i >= mq::format::kAttributesOffset || i == mq::format::kMagicOffset ||
          (i >= mq::format::kCrcOffset && i < mq::format::kAttributesOffset)) {
        REQUIRE_FALSE(s.ok());
        CHECK((s.rule() == "R1" || s.rule() == "R2" || s.rule() == "R3" || s.rule() == "R4"));
      } else if (i >= mq::format::kBatchLengthOffset &&
                 i < mq::format::kPartitionLeaderEpochOffset) {
        CHECK_FALSE(s.ok());  // a changed length: R1 (short) or R2
      } else if (i < mq::format::kBatchLengthOffset && (b[0] & std::byte{0x80}) != std::byte{0}) {
        CHECK(s.rule() == "R19");  // outside the CRC, but a negative baseOffset
      } else {
        CHECK(s.ok());  // baseOffset and partitionLeaderEpoch are outside the CRC
      }
    }
  }
}

TEST_CASE("property: re-signed random damage is caught by a rule, never a crash", "[property]") {
  std::mt19937_64 rng(99);
  std::vector<std::byte> scratch;
  for (auto compression : {mq::Compression::kNone, mq::Compression::kZstd}) {
    mq::BatchOptions o;
    o.compression = compression;
    const auto good = mq::test::SimpleBatch(12, o);
    for (int iter = 0; iter < 2000; ++iter) {
      auto b = good;
      int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) {
        size_t i =
            mq::format::kAttributesOffset + rng() % (b.size() - mq::format::kAttributesOffset);
        b[i] ^= std::byte(1 + rng() % 255);
      }
      mq::test::FixCrc(b);  // reach the checks behind the CRC
      auto s = mq::test::ReadAll(b);
      if (!s.ok()) {
        CHECK((s.code() == mq::Code::kCorruption || s.code() == mq::Code::kUnsupported));
      }
    }
  }
}
