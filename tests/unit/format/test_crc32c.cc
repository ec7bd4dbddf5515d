// CRC-32C check values and the hardware path against the portable one.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "mq/batch.h"
#include "mq/crc32c.h"

namespace {

std::vector<std::byte> RandomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(rng() & 0xFF);
  return v;
}

}  // namespace

TEST_CASE("crc32c: check values", "[crc32c]") {
  CHECK(mq::Crc32c(mq::AsBytes("")) == 0u);
  CHECK(mq::Crc32c(mq::AsBytes(std::string_view("\0", 1))) == 1383945041u);
  CHECK(mq::Crc32c(mq::AsBytes("123456789")) == 0xE3069283u);
  CHECK(mq::Crc32cPortable(0, mq::AsBytes("123456789")) == 0xE3069283u);
  // 32 zero bytes and 32 0xFF bytes (RFC 3720 B.4 iSCSI examples).
  std::vector<std::byte> zeros(32, std::byte{0}), ones(32, std::byte{0xFF});
  CHECK(mq::Crc32c(zeros) == 0x8A9136AAu);
  CHECK(mq::Crc32c(ones) == 0x62A8AB43u);
}

TEST_CASE("crc32c: hardware equals portable for every length 0..1024 and alignment", "[crc32c]") {
  std::mt19937_64 rng(42);
  std::vector<std::byte> buf = RandomBytes(1024 + 16, rng);
  for (size_t len = 0; len <= 1024; ++len) {
    size_t align = rng() % 8;
    std::span<const std::byte> s(buf.data() + align, len);
    uint32_t seed = static_cast<uint32_t>(rng());
    REQUIRE(mq::Crc32cExtend(seed, s) == mq::Crc32cPortable(seed, s));
  }
}

TEST_CASE("crc32c: long buffers take the three-stream path and agree", "[crc32c]") {
  std::mt19937_64 rng(7);
  std::vector<std::byte> buf = RandomBytes(70000, rng);
  for (size_t len : {767u, 768u, 769u, 12287u, 12288u, 12289u, 16384u, 16363u, 40000u, 69990u}) {
    size_t align = rng() % 8;
    std::span<const std::byte> s(buf.data() + align, len);
    REQUIRE(mq::Crc32c(s) == mq::Crc32cPortable(0, s));
  }
}

TEST_CASE("crc32c: Extend over a split equals the whole", "[crc32c]") {
  std::mt19937_64 rng(3);
  std::vector<std::byte> buf = RandomBytes(5000, rng);
  std::span<const std::byte> all(buf);
  uint32_t whole = mq::Crc32c(all);
  for (size_t cut : {0u, 1u, 7u, 8u, 100u, 2500u, 4999u, 5000u}) {
    CHECK(mq::Crc32cExtend(mq::Crc32c(all.first(cut)), all.subspan(cut)) == whole);
    CHECK(mq::Crc32cPortable(mq::Crc32cPortable(0, all.first(cut)), all.subspan(cut)) == whole);
  }
}

TEST_CASE("crc32c: Combine of the parts' CRCs equals the whole", "[crc32c]") {
  std::mt19937_64 rng(11);
  std::vector<std::byte> buf = RandomBytes(70000, rng);
  std::span<const std::byte> all(buf);
  for (size_t len : {0u, 1u, 9u, 5000u, 70000u}) {
    std::span<const std::byte> s = all.first(len);
    const uint32_t whole = mq::Crc32c(s);
    for (size_t cut :
         {size_t{0}, size_t{1}, len / 3, len / 2, len - std::min<size_t>(len, 1), len}) {
      if (cut > len) continue;
      CHECK(mq::Crc32cCombine(mq::Crc32c(s.first(cut)), mq::Crc32c(s.subspan(cut)), len - cut) ==
            whole);
    }
  }
}

TEST_CASE("crc32c: ExtendKnown equals Extend, short and long", "[crc32c]") {
  std::mt19937_64 rng(12);
  std::vector<std::byte> buf = RandomBytes(20000, rng);
  std::span<const std::byte> all(buf);
  for (size_t len : {0u, 100u, 4095u, 4096u, 19000u}) {
    std::span<const std::byte> b = all.subspan(1000, len);
    const uint32_t a = mq::Crc32c(all.first(1000));
    CHECK(mq::Crc32cExtendKnown(a, b, mq::Crc32c(b)) == mq::Crc32cExtend(a, b));
  }
}
