// Records (R8), compression (R9), control records (R17) and the varint
// coding of format-spec/batch.md §4.1.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "batch_test_util.h"
#include "test_support.h"

using mq::test::ReadAll;
using mq::test::WrapRecords;

namespace {

// A record from explicit varint fields, so tests can write malformed ones.
struct RawRecord {
  std::vector<std::byte> body;  // after the length
  RawRecord& Byte(int b) {
    body.push_back(std::byte(b));
    return *this;
  }
  RawRecord& Varint(int32_t v) {
    std::byte tmp[5];
    auto* e = mq::coding::PutVarint(tmp, v);
    body.insert(body.end(), tmp, e);
    return *this;
  }
  RawRecord& Varlong(int64_t v) {
    std::byte tmp[10];
    auto* e = mq::coding::PutVarlong(tmp, v);
    body.insert(body.end(), tmp, e);
    return *this;
  }
  RawRecord& Text(std::string_view s) {
    for (char c : s) body.push_back(std::byte(c));
    return *this;
  }
  // Appends length + body to `out`; `length_adjust` makes the length lie.
  void AppendTo(std::vector<std::byte>& out, int length_adjust = 0) const {
    std::byte tmp[5];
    auto* e = mq::coding::PutVarint(tmp, static_cast<int32_t>(body.size()) + length_adjust);
    out.insert(out.end(), tmp, e);
    out.insert(out.end(), body.begin(), body.end());
  }
};

// attributes 0, tsDelta 0, offsetDelta d, null key, value "v", no headers.
RawRecord Plain(int32_t delta) {
  RawRecord r;
  r.Byte(0).Varlong(0).Varint(delta).Varint(-1).Varint(1).Text("v").Varint(0);
  return r;
}

std::string Rule(const mq::Status& s) { return s.ok() ? "ok" : s.rule(); }

}  // namespace

TEST_CASE("R8 records: well-formed records read back", "[record][R8]") {
  std::vector<std::byte> recs;
  Plain(0).AppendTo(recs);
  Plain(1).AppendTo(recs);
  Plain(3).AppendTo(recs);  // a gap, as after compaction
  int n = 0;
  CHECK(ReadAll(WrapRecords(recs, 3, 3), {}, &n).ok());
  CHECK(n == 3);
}

TEST_CASE("R8 records: each malformed record is corruption naming the batch", "[record][R8]") {
  std::vector<std::byte> recs;
  SECTION("fewer records than recordsCount") {
    Plain(0).AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 2, 1))) == "R8");
  }
  SECTION("bytes left after the last record") {
    Plain(0).AppendTo(recs);
    recs.push_back(std::byte{0});
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("records present in an empty batch") {
    Plain(0).AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 0, 0))) == "R8");
  }
  SECTION("length larger than the fields") {
    Plain(0).AppendTo(recs, +1);
    recs.push_back(std::byte{0});
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("length smaller than the fields") {
    Plain(0).AppendTo(recs, -1);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("length past the end of the batch") {
    Plain(0).AppendTo(recs, +100);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("negative and zero length") {
    RawRecord r = Plain(0);
    std::vector<std::byte> neg{std::byte{0x01}};  // zigzag -1
    neg.insert(neg.end(), r.body.begin(), r.body.end());
    CHECK(Rule(ReadAll(WrapRecords(neg, 1, 0))) == "R8");
    std::vector<std::byte> zero{std::byte{0x00}};
    CHECK(Rule(ReadAll(WrapRecords(zero, 1, 0))) == "R8");
  }
  SECTION("varint longer than 5 bytes") {
    RawRecord r;
    r.Byte(0).Varlong(0);
    for (int i = 0; i < 5; ++i) r.Byte(0x80);
    r.Byte(0x00).Varint(-1).Varint(-1).Varint(0);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("varlong longer than 10 bytes") {
    RawRecord r;
    r.Byte(0);
    for (int i = 0; i < 10; ++i) r.Byte(0x80);
    r.Byte(0x00).Varint(0).Varint(-1).Varint(-1).Varint(0);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("key length below -1") {
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(-2).Varint(-1).Varint(0);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("value longer than the record") {
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(-1).Varint(50).Text("abc").Varint(0);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("negative headersCount") {
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(-1).Varint(-1).Varint(-1);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("huge headersCount with no header bytes") {
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(-1).Varint(-1).Varint(
        std::numeric_limits<int32_t>::max());
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("null header key") {
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(-1).Varint(-1).Varint(1).Varint(-1).Varint(-1);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("header value length below -1") {
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(-1).Varint(-1).Varint(1).Varint(1).Text("k").Varint(-2);
    r.AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
  SECTION("offset deltas not strictly increasing") {
    Plain(0).AppendTo(recs);
    Plain(0).AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 2, 1))) == "R8");
  }
  SECTION("offset delta beyond lastOffsetDelta") {
    Plain(0).AppendTo(recs);
    Plain(2).AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 2, 1))) == "R8");
  }
  SECTION("negative offset delta") {
    Plain(-1).AppendTo(recs);
    CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0))) == "R8");
  }
}

TEST_CASE("R8 records: the error names file, batch position and record", "[record][R8]") {
  std::vector<std::byte> recs;
  Plain(0).AppendTo(recs);
  Plain(0).AppendTo(recs);
  auto b = WrapRecords(recs, 2, 1);
  auto view = mq::BatchView::Parse(b, {}, "x.log", 512);
  REQUIRE(view.has_value());
  std::vector<std::byte> scratch;
  auto reader = mq::RecordReader::Open(*view, &scratch, {}, "x.log", 512);
  REQUIRE(reader.has_value());
  REQUIRE(reader->Next().has_value());
  auto second = reader->Next();
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().file() == "x.log");
  CHECK(second.error().position() == 512);
  CHECK(second.error().message().find("record 1 at byte 8 of the records") != std::string::npos);
}

namespace {

std::vector<std::byte> ZstdBatch(std::span<const std::byte> frame, int32_t count) {
  return WrapRecords(frame, count, count > 0 ? count - 1 : 0,
                     static_cast<uint16_t>(mq::Compression::kZstd));
}

std::vector<std::byte> Compress(std::span<const std::byte> in, bool with_size = true) {
  std::vector<std::byte> out(ZSTD_compressBound(in.size()));
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, with_size ? 1 : 0);
  size_t n;
  if (with_size) {
    n = ZSTD_compress2(c, out.data(), out.size(), in.data(), in.size());
  } else {
    // Streaming without a pledged size leaves the content size out of the frame.
    ZSTD_inBuffer src{in.data(), in.size(), 0};
    ZSTD_outBuffer dst{out.data(), out.size(), 0};
    ZSTD_compressStream2(c, &dst, &src, ZSTD_e_end);
    n = dst.pos;
  }
  ZSTD_freeCCtx(c);
  out.resize(n);
  return out;
}

}  // namespace

TEST_CASE("R9 compression: a zstd batch round-trips, with or without a content size",
          "[record][R9]") {
  std::vector<std::byte> recs;
  for (int i = 0; i < 50; ++i) Plain(i).AppendTo(recs);
  for (bool with_size : {true, false}) {
    int n = 0;
    CHECK(ReadAll(ZstdBatch(Compress(recs, with_size), 50), {}, &n).ok());
    CHECK(n == 50);
  }
}

TEST_CASE("R9 compression: bad frames and oversized output are corruption", "[record][R9]") {
  std::vector<std::byte> recs;
  for (int i = 0; i < 50; ++i) Plain(i).AppendTo(recs);
  auto frame = Compress(recs);
  SECTION("output over the configured maximum, with and without a stated size") {
    mq::DecodeLimits limits;
    limits.max_decompressed_bytes = static_cast<uint32_t>(recs.size() - 1);
    CHECK(Rule(ReadAll(ZstdBatch(frame, 50), limits)) == "R9");
    CHECK(Rule(ReadAll(ZstdBatch(Compress(recs, false), 50), limits)) == "R9");
    limits.max_decompressed_bytes = static_cast<uint32_t>(recs.size());
    CHECK(ReadAll(ZstdBatch(frame, 50), limits).ok());
    CHECK(ReadAll(ZstdBatch(Compress(recs, false), 50), limits).ok());
  }
  SECTION("bytes after the frame") {
    frame.push_back(std::byte{0});
    CHECK(Rule(ReadAll(ZstdBatch(frame, 50))) == "R9");
  }
  SECTION("two frames") {
    auto two = frame;
    two.insert(two.end(), frame.begin(), frame.end());
    CHECK(Rule(ReadAll(ZstdBatch(two, 50))) == "R9");
  }
  SECTION("truncated frame") {
    frame.resize(frame.size() - 3);
    CHECK(Rule(ReadAll(ZstdBatch(frame, 50))) == "R9");
  }
  SECTION("not zstd at all") {
    CHECK(Rule(ReadAll(ZstdBatch(recs, 50))) == "R9");
    CHECK(Rule(ReadAll(ZstdBatch({}, 0))) == "R9");
  }
  SECTION("a frame claiming more than the limit fails before allocating") {
    std::vector<std::byte> big(1 << 20, std::byte{0});
    mq::DecodeLimits limits;
    limits.max_decompressed_bytes = 1000;
    std::vector<std::byte> scratch;
    auto b = ZstdBatch(Compress(big), 1);
    auto view = mq::BatchView::Parse(b, limits);
    REQUIRE(view.has_value());
    auto reader = mq::RecordReader::Open(*view, &scratch, limits);
    REQUIRE_FALSE(reader.has_value());
    CHECK(reader.error().rule() == "R9");
    CHECK(scratch.size() <= 1001);
  }
  SECTION("decompressed records that break R8") {
    CHECK(Rule(ReadAll(ZstdBatch(frame, 49))) == "R8");
  }
}

TEST_CASE("R17 control record: key and value sizes and version", "[record][R17]") {
  auto control = [](std::string_view key_hex, std::string_view value_hex) {
    auto key = mq::test::HexBytes(key_hex), value = mq::test::HexBytes(value_hex);
    RawRecord r;
    r.Byte(0).Varlong(0).Varint(0).Varint(static_cast<int32_t>(key.size()));
    r.body.insert(r.body.end(), key.begin(), key.end());
    r.Varint(static_cast<int32_t>(value.size()));
    r.body.insert(r.body.end(), value.begin(), value.end());
    r.Varint(0);
    std::vector<std::byte> recs;
    r.AppendTo(recs);
    return Rule(ReadAll(WrapRecords(recs, 1, 0, 0x30)));
  };
  CHECK(control("00000001", "000000000007") == "ok");      // COMMIT
  CHECK(control("00000000", "00000000000700ff") == "ok");  // ABORT; extra value bytes ignored
  CHECK(control("00010001", "000000000007") == "ok");      // newer key version reads as v0
  CHECK(control("000000", "000000000007") == "R17");       // key too short
  CHECK(control("ffff0001", "000000000007") == "R17");     // negative version
  CHECK(control("00000001", "0000000000") == "R17");       // value too short
  CHECK(control("00000002", "") == "ok");                  // LEADER_CHANGE: value not checked here
}

TEST_CASE("R17 control record: a null key is corruption", "[record][R17]") {
  RawRecord r;
  r.Byte(0).Varlong(0).Varint(0).Varint(-1).Varint(-1).Varint(0);
  std::vector<std::byte> recs;
  r.AppendTo(recs);
  CHECK(Rule(ReadAll(WrapRecords(recs, 1, 0, 0x30))) == "R17");
}

TEST_CASE("varint: the examples of format-spec/batch.md §4.1", "[record][varint]") {
  const std::pair<int32_t, std::string_view> examples[] = {
      {0, "00"},
      {-1, "01"},
      {1, "02"},
      {20, "28"},
      {63, "7e"},
      {-64, "7f"},
      {64, "8001"},
      {168, "d002"},
      {300, "d804"},
      {std::numeric_limits<int32_t>::max(), "feffffff0f"},
      {std::numeric_limits<int32_t>::min(), "ffffffff0f"}};
  for (auto [v, hex] : examples) {
    auto want = mq::test::HexBytes(hex);
    std::byte buf[5];
    auto* e = mq::coding::PutVarint(buf, v);
    CHECK(std::vector<std::byte>(buf, e) == want);
    CHECK(mq::coding::VarintLength(v) == want.size());
    const std::byte* p = want.data();
    int32_t back = 0;
    REQUIRE(mq::coding::GetVarint(&p, want.data() + want.size(), &back));
    CHECK(back == v);
    CHECK(p == want.data() + want.size());
  }
}

TEST_CASE("varint: longs round-trip at the edges, overlong encodings are rejected",
          "[record][varint]") {
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{1} << 40, std::numeric_limits<int64_t>::max(),
                    std::numeric_limits<int64_t>::min()}) {
    std::byte buf[10];
    auto* e = mq::coding::PutVarlong(buf, v);
    CHECK(static_cast<size_t>(e - buf) == mq::coding::VarlongLength(v));
    const std::byte* p = buf;
    int64_t back = 0;
    REQUIRE(mq::coding::GetVarlong(&p, e, &back));
    CHECK(back == v);
  }
  auto bad32 = mq::test::HexBytes("ffffffff1f");  // 33 bits
  const std::byte* p = bad32.data();
  int32_t v32;
  CHECK_FALSE(mq::coding::GetVarint(&p, bad32.data() + bad32.size(), &v32));
  auto bad64 = mq::test::HexBytes("ffffffffffffffffff02");  // 65 bits
  p = bad64.data();
  int64_t v64;
  CHECK_FALSE(mq::coding::GetVarlong(&p, bad64.data() + bad64.size(), &v64));
  auto cut = mq::test::HexBytes("8080");
  p = cut.data();
  CHECK_FALSE(mq::coding::GetVarint(&p, cut.data() + cut.size(), &v32));
}

TEST_CASE("R8 records: Read() sees the same records and errors as Next()", "[record][R8]") {
  std::vector<std::byte> recs;
  Plain(0).AppendTo(recs);
  Plain(1).AppendTo(recs);
  Plain(1).AppendTo(recs);  // breaks R8: delta not increasing
  auto b = WrapRecords(recs, 3, 2);
  auto view = mq::BatchView::Parse(b, {});
  REQUIRE(view.has_value());
  std::vector<std::byte> scratch;
  auto reader = mq::RecordReader::Open(*view, &scratch, {});
  REQUIRE(reader.has_value());
  mq::RecordView rv;
  REQUIRE(reader->Read(&rv));
  CHECK(rv.offset == 0);
  REQUIRE(reader->Read(&rv));
  CHECK(rv.offset == 1);
  CHECK(mq::AsText(*rv.value) == "v");
  CHECK_FALSE(reader->Read(&rv));
  CHECK(reader->status().rule() == "R8");

  auto good = WrapRecords(std::span<const std::byte>(recs).first(16), 2, 1);
  auto view2 = mq::BatchView::Parse(good, {});
  REQUIRE(view2.has_value());
  auto reader2 = mq::RecordReader::Open(*view2, &scratch, {});
  REQUIRE(reader2.has_value());
  int n = 0;
  while (reader2->Read(&rv)) ++n;
  CHECK(n == 2);
  CHECK(reader2->status().ok());
}

// ---- bounded decompression (F9): buffers grow with the data ---------------

namespace {

using mq::test::ZstdFrameBatch;
using mq::test::ZstdRleFrame;

// Opens the records of `batch`; the scratch buffer is left in *scratch.
mq::Status OpenRecords(const std::vector<std::byte>& batch, const mq::DecodeLimits& limits,
                       std::vector<std::byte>* scratch) {
  auto view = mq::BatchView::Parse(batch, limits, "t.log", 0);
  if (!view) return view.error();
  auto reader = mq::RecordReader::Open(*view, scratch, limits, "t.log", 0);
  return reader ? mq::Status::Ok() : reader.error();
}

}  // namespace

TEST_CASE("R9 compression: a frame claiming more than it holds allocates only what it holds",
          "[record][R9][memory]") {
  mq::DecodeLimits limits;
  limits.max_decompressed_bytes = 1u << 30;
  std::vector<std::byte> scratch;
  // 128 KiB of data under a header that claims 512 MiB (within the limit).
  mq::Status s = OpenRecords(ZstdFrameBatch(ZstdRleFrame(512u << 20, 128 << 10)), limits, &scratch);
  CHECK(s.rule() == "R9");
  CHECK(scratch.capacity() <= (1u << 20));
}

TEST_CASE("R9 compression: a frame yielding more than its header says is corruption",
          "[record][R9][memory]") {
  std::vector<std::byte> scratch;
  mq::Status s = OpenRecords(ZstdFrameBatch(ZstdRleFrame(100 << 10, 4 << 20)), {}, &scratch);
  CHECK(s.rule() == "R9");
  CHECK(scratch.capacity() <= (1u << 20));
}

TEST_CASE("R9 compression: the buffer of a highly compressed frame grows to its size",
          "[record][R9][memory]") {
  // A 16 KiB frame of 8 MiB: the buffer doubles with the data, to at most
  // twice it, and holds exactly the records.
  for (uint64_t claimed : {uint64_t{8} << 20, uint64_t{ZSTD_CONTENTSIZE_UNKNOWN}}) {
    std::vector<std::byte> frame = ZstdRleFrame(8u << 20, 8u << 20, std::byte{7});
    if (claimed == ZSTD_CONTENTSIZE_UNKNOWN) {
      // No Frame_Content_Size: descriptor 0x00 and the 8 size bytes removed.
      frame[4] = std::byte{0};
      frame.erase(frame.begin() + 6, frame.begin() + 14);
    }
    std::vector<std::byte> scratch;
    REQUIRE(OpenRecords(ZstdFrameBatch(frame), {}, &scratch).ok());
    CHECK(scratch.size() == (8u << 20));
    CHECK(
        std::all_of(scratch.begin(), scratch.end(), [](std::byte b) { return b == std::byte{7}; }));
    CHECK(scratch.capacity() <= (16u << 20));
    // Over the limit: stops one byte past it.
    mq::DecodeLimits limits;
    limits.max_decompressed_bytes = (8u << 20) - 1;
    scratch.clear();
    scratch.shrink_to_fit();
    CHECK(OpenRecords(ZstdFrameBatch(frame), limits, &scratch).rule() == "R9");
    CHECK(scratch.capacity() <= (8u << 20));
  }
}

TEST_CASE("R9 compression: an allocation that fails is kNoMemory, not an exception",
          "[record][R9][memory]") {
#if defined(MQ_TEST_ASAN)
  WARN("not run under AddressSanitizer: an address-space limit conflicts with its shadow memory");
#else
  // A 32 KiB frame of 1 GiB, read with a 2 GiB limit in a child process
  // whose address space is capped at 256 MiB more than it uses now.
  std::vector<std::byte> batch = ZstdFrameBatch(ZstdRleFrame(1u << 30, 1u << 30));
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::ifstream statm("/proc/self/statm");
    size_t pages = 0;
    statm >> pages;
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max =
        pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + (256u << 20);
    ::setrlimit(RLIMIT_AS, &lim);
    mq::DecodeLimits limits;
    limits.max_batch_bytes = limits.max_decompressed_bytes = 0x7FFFFFFF;
    std::vector<std::byte> scratch;
    int code = 1;
    try {
      mq::Status s = OpenRecords(batch, limits, &scratch);
      code = s.code() == mq::Code::kNoMemory &&
                     s.message().find("t.log: position 0: out of memory") != std::string::npos
                 ? 0
                 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
#endif
}
