// Known-good batches (shared/reference kafka-format.md §10, format-spec/batch.md
// §13): each decodes to its documented fields and BatchBuilder reproduces
// its bytes exactly.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <zlib.h>

#include "batch_test_util.h"
#include "format/compression.h"
#include "mq/batch.h"
#include "mq/crc32c.h"

using mq::test::ToHex;

namespace {

std::vector<std::byte> Hex(std::string_view hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(std::byte(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// The hex strings below are repeated verbatim in format-spec/batch.md §13;
// the last test checks that the document still holds them.
constexpr std::string_view kV1 =
    "00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063cff"
    "ffffffffffffffffffffffffff0000000112000000010631323300";
constexpr std::string_view kV2 =
    "0000000000000001000000400000000202c85cbd230000000000010000015dff7cdd6c0000015dff7cde14ff"
    "ffffffffffffffffffffffffff000000020c0000000100000e00d00202010000";
constexpr std::string_view kV3 =
    "00000000000000000000004500000000025cd8ef520000000000000000016585b6f3c10000016585b6f3c1ff"
    "ffffffffffffffffffffffffff000000012600000001066864720208686b6579086876616c";
constexpr std::string_view kV4 =
    "0000000000000000000000460000000002547961fd000000000000000001588dcd5938000000000000000000"
    "000000000000000000000000000000000128000a00080102030406050607020608090a040b0c";
constexpr std::string_view kV6 =
    "000000000000000a000000420000000302809c88c40030000000000000018bcfe568000000018bcfe5680000"
    "000000000003e80002ffffffff000000012000000008000000010c00000000000700";
constexpr std::string_view kV7 =
    "000000000000002a0000004f00000005023bb28b760000000000020000018bcfe568000000018bcfe5680000"
    "0000000000000700000000006400000003120000000106616263001200000201066162630012000004010661"
    "626300";

// Compressed vectors, one hex line each in tests/data/kafka (shared with
// tests/cli/kafka_codecs.sh):
// - sarama_{gzip,snappy,lz4}.hex: IBM/sarama record_test.go
//   (recordBatchTestCases "gzipped record", "snappy compressed record", "lz4
//   compressed record"): V4's record (key 01020304, value 050607, header
//   08090a=0b0c) compressed by sarama's writers. Snappy is one raw block;
//   lz4 one LZ4 frame with a content checksum.
// - kafka_ex_xerial_snappy.hex: kafkaex/kafka_ex test/compression_test.exs
//   ("snappy decompression works with chunked messages"): a snappy-java
//   (xerial) stream of two blocks, 14 and 75 bytes, holding a magic-0
//   message set: offset 37, one message of 1014 bytes, "ABCDEFGHIJ" x 100.

std::vector<std::byte> HexFile(const std::string& name) {
  std::string path(MQ_TEST_DATA_DIR);
  path.append("/kafka/").append(name);
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string hex;
  in >> hex;
  return Hex(hex);
}

struct Decoded {
  mq::BatchHeader header;
  std::vector<mq::RecordView> records;
};

// Parses and reads every record; the views point into `bytes`, or into
// `*scratch` for a compressed batch.
Decoded Decode(const std::vector<std::byte>& bytes, std::vector<std::byte>* scratch) {
  auto view = mq::BatchView::Parse(bytes, {}, "vector", 0);
  REQUIRE(view.has_value());
  REQUIRE(view->bytes().size() == bytes.size());
  auto reader = mq::RecordReader::Open(*view, scratch, {}, "vector", 0);
  INFO((reader ? "" : reader.error().message()));
  REQUIRE(reader.has_value());
  Decoded d{view->header(), {}};
  for (;;) {
    auto rec = reader->Next();
    REQUIRE(rec.has_value());
    if (!*rec) break;
    d.records.push_back(**rec);
  }
  return d;
}

Decoded Decode(const std::vector<std::byte>& bytes) {
  std::vector<std::byte> scratch;
  Decoded d = Decode(bytes, &scratch);
  REQUIRE(scratch.empty());  // uncompressed: the views point into `bytes`
  return d;
}

// Sarama's record: offset 0, timestamp base + 5 ms, key 01020304, value
// 050607, one header 08090a = 0b0c.
void CheckSaramaRecord(const Decoded& d) {
  CHECK(d.header.base_offset == 0);
  CHECK(d.header.base_timestamp == 1479847795000);
  CHECK(d.header.max_timestamp == 0);
  CHECK(d.header.producer_id == 0);
  REQUIRE(d.records.size() == 1);
  CHECK(d.records[0].offset == 0);
  CHECK(d.records[0].timestamp == 1479847795005);
  CHECK(ToHex(*d.records[0].key) == "01020304");
  CHECK(ToHex(*d.records[0].value) == "050607");
  auto headers = d.records[0].headers();
  REQUIRE(headers.size() == 1);
  CHECK(ToHex(mq::AsBytes(headers[0].key)) == "08090a");
  REQUIRE(headers[0].value.has_value());
  CHECK(ToHex(*headers[0].value) == "0b0c");
}

// One of sarama's compressed vectors: its size, CRC and codec, and the
// record every one of them holds.
void CheckSaramaVector(const char* file, size_t size, uint32_t crc, mq::Compression codec) {
  auto bytes = HexFile(file);
  REQUIRE(bytes.size() == size);
  std::vector<std::byte> scratch;
  Decoded d = Decode(bytes, &scratch);
  CHECK(d.header.crc == crc);
  CHECK(d.header.compression() == codec);
  CheckSaramaRecord(d);
}

std::string Text(const std::optional<mq::Bytes>& b) { return std::string(mq::AsText(*b)); }

std::vector<std::byte> Build(mq::BatchOptions options, int64_t base_offset,
                             const std::vector<mq::RecordInput>& records) {
  mq::BatchBuilder builder(options);
  for (const auto& r : records) builder.Add(r);
  std::vector<std::byte> out;
  REQUIRE(builder.Finish(base_offset, &out).ok());
  return out;
}

}  // namespace

TEST_CASE("V1 kafka 0.11 broker batch: decode and re-encode", "[vectors]") {
  auto bytes = Hex(kV1);
  REQUIRE(bytes.size() == 71);
  Decoded d = Decode(bytes);
  CHECK(d.header.base_offset == 0);
  CHECK(d.header.last_offset() == 0);
  CHECK(d.header.partition_leader_epoch == 1);
  CHECK(d.header.crc == 51946096u);
  CHECK(d.header.compression() == mq::Compression::kNone);
  CHECK(d.header.max_timestamp == 1503229838908);
  CHECK(d.header.producer_id == -1);
  CHECK(d.header.producer_epoch == -1);
  CHECK(d.header.base_sequence == -1);
  CHECK(d.header.last_sequence() == -1);
  CHECK(d.header.size_bytes() == 71);
  REQUIRE(d.records.size() == 1);
  CHECK(d.records[0].offset == 0);
  CHECK(d.records[0].timestamp == 1503229838908);
  CHECK_FALSE(d.records[0].key.has_value());
  CHECK(Text(d.records[0].value) == "123");
  CHECK(d.records[0].headers_count == 0);

  mq::BatchOptions o;
  o.partition_leader_epoch = 1;
  mq::RecordInput r;
  r.timestamp = 1503229838908;
  r.value = mq::AsBytes("123");
  CHECK(ToHex(Build(o, 0, {r})) == kV1);
}

TEST_CASE("V2 two records, empty values, timestamp delta 168: decode and re-encode", "[vectors]") {
  auto bytes = Hex(kV2);
  REQUIRE(bytes.size() == 76);
  Decoded d = Decode(bytes);
  CHECK(d.header.base_offset == 1);
  CHECK(d.header.last_offset() == 2);
  CHECK(d.header.partition_leader_epoch == 2);
  CHECK(d.header.base_timestamp == 1503229959532);
  CHECK(d.header.max_timestamp == 1503229959532 + 168);
  REQUIRE(d.records.size() == 2);
  CHECK(d.records[0].offset == 1);
  CHECK(d.records[1].offset == 2);
  CHECK(d.records[1].timestamp == 1503229959532 + 168);
  for (const auto& rec : d.records) {
    CHECK_FALSE(rec.key.has_value());
    REQUIRE(rec.value.has_value());
    CHECK(rec.value->empty());
  }

  mq::BatchOptions o;
  o.partition_leader_epoch = 2;
  mq::RecordInput a, b;
  a.timestamp = 1503229959532;
  b.timestamp = 1503229959532 + 168;
  a.value = b.value = mq::AsBytes("");
  CHECK(ToHex(Build(o, 1, {a, b})) == kV2);
}

TEST_CASE("V3 record header hkey=hval: decode and re-encode", "[vectors]") {
  auto bytes = Hex(kV3);
  REQUIRE(bytes.size() == 81);
  Decoded d = Decode(bytes);
  CHECK(d.header.partition_leader_epoch == 0);
  REQUIRE(d.records.size() == 1);
  CHECK(Text(d.records[0].value) == "hdr");
  auto headers = d.records[0].headers();
  REQUIRE(headers.size() == 1);
  CHECK(headers[0].key == "hkey");
  CHECK(Text(headers[0].value) == "hval");

  mq::BatchOptions o;
  o.partition_leader_epoch = 0;
  mq::Header h{"hkey", mq::AsBytes("hval")};
  mq::RecordInput r;
  r.timestamp = 1535546684353;
  r.value = mq::AsBytes("hdr");
  r.headers = std::span<const mq::Header>(&h, 1);
  CHECK(ToHex(Build(o, 0, {r})) == kV3);
}

TEST_CASE("V4 sarama: producerId 0, binary key, maxTimestamp 0: decode and re-encode",
          "[vectors]") {
  auto bytes = Hex(kV4);
  REQUIRE(bytes.size() == 82);
  Decoded d = Decode(bytes);
  CHECK(d.header.producer_id == 0);
  CHECK(d.header.has_producer_id());
  CHECK(d.header.producer_epoch == 0);
  CHECK(d.header.base_sequence == 0);
  CHECK(d.header.last_sequence() == 0);
  CHECK(d.header.base_timestamp == 1479847795000);
  CHECK(d.header.max_timestamp == 0);
  CHECK(mq::CheckProducerFields(d.header).ok());
  REQUIRE(d.records.size() == 1);
  CHECK(d.records[0].timestamp == 1479847795005);
  CHECK(ToHex(*d.records[0].key) == "01020304");
  CHECK(ToHex(*d.records[0].value) == "050607");
  auto headers = d.records[0].headers();
  REQUIRE(headers.size() == 1);
  CHECK(ToHex(mq::AsBytes(headers[0].key)) == "08090a");
  CHECK(ToHex(*headers[0].value) == "0b0c");

  mq::BatchOptions o;
  o.partition_leader_epoch = 0;
  o.producer_id = 0;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  o.base_timestamp = 1479847795000;
  o.max_timestamp = 0;
  auto key = Hex("01020304"), value = Hex("050607"), hkey = Hex("08090a"), hval = Hex("0b0c");
  mq::Header h{mq::AsText(hkey), mq::Bytes(hval)};
  mq::RecordInput r;
  r.timestamp = 1479847795005;
  r.key = mq::Bytes(key);
  r.value = mq::Bytes(value);
  r.headers = std::span<const mq::Header>(&h, 1);
  CHECK(ToHex(Build(o, 0, {r})) == kV4);
}

TEST_CASE("V6 COMMIT marker control batch: decode and re-encode", "[vectors]") {
  auto bytes = Hex(kV6);
  REQUIRE(bytes.size() == 78);
  Decoded d = Decode(bytes);
  CHECK(d.header.base_offset == 10);
  CHECK(d.header.partition_leader_epoch == 3);
  CHECK(d.header.attributes == 0x30);
  CHECK(d.header.is_control());
  CHECK(d.header.is_transactional());
  CHECK(d.header.producer_id == 1000);
  CHECK(d.header.producer_epoch == 2);
  CHECK(d.header.base_sequence == -1);
  REQUIRE(d.records.size() == 1);
  auto c = mq::DecodeControlRecord(d.records[0]);
  REQUIRE(c.has_value());
  CHECK(c->type == static_cast<int16_t>(mq::ControlType::kCommit));
  CHECK(mq::ControlTypeName(c->type) == "COMMIT");
  CHECK(c->coordinator_epoch == 7);

  mq::BatchOptions o;
  o.partition_leader_epoch = 3;
  o.producer_id = 1000;
  o.producer_epoch = 2;
  o.is_transactional = true;
  o.is_control = true;
  mq::BatchBuilder builder(o);
  builder.AddControl(1700000000000, mq::ControlType::kCommit, 7);
  std::vector<std::byte> out;
  REQUIRE(builder.Finish(10, &out).ok());
  CHECK(ToHex(out) == kV6);
}

TEST_CASE("V7 idempotent batch of three records: decode and re-encode", "[vectors]") {
  auto bytes = Hex(kV7);
  REQUIRE(bytes.size() == 91);
  Decoded d = Decode(bytes);
  CHECK(d.header.base_offset == 42);
  CHECK(d.header.last_offset() == 44);
  CHECK(d.header.partition_leader_epoch == 5);
  CHECK(d.header.producer_id == 7);
  CHECK(d.header.producer_epoch == 0);
  CHECK(d.header.base_sequence == 100);
  CHECK(d.header.last_sequence() == 102);
  REQUIRE(d.records.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(d.records[i].offset == 42 + i);
    CHECK_FALSE(d.records[i].key.has_value());
    CHECK(Text(d.records[i].value) == "abc");
  }

  mq::BatchOptions o;
  o.partition_leader_epoch = 5;
  o.producer_id = 7;
  o.producer_epoch = 0;
  o.base_sequence = 100;
  mq::RecordInput r;
  r.timestamp = 1700000000000;
  r.value = mq::AsBytes("abc");
  CHECK(ToHex(Build(o, 42, {r, r, r})) == kV7);
}

TEST_CASE("vectors: batch.md §13 holds exactly the bytes these tests check", "[vectors]") {
  std::string path(MQ_TEST_DATA_DIR);
  path.append("/../../format-spec/batch.md");
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  // The document prints each vector as one hex line after "hex: ".
  for (std::string_view v : {kV1, kV2, kV3, kV4, kV6, kV7}) {
    INFO(v);
    CHECK(doc.find("hex: " + std::string(v)) != std::string::npos);
  }
}

TEST_CASE("V5 kafkajs gzip batch with LogAppendTime: decodes", "[vectors][gzip]") {
  std::ifstream in(std::string(MQ_TEST_DATA_DIR) + "/kafka/v5_kafkajs_gzip.hex");
  REQUIRE(in.good());
  std::string hex;
  in >> hex;
  auto bytes = Hex(hex);
  REQUIRE(bytes.size() == 125);
  std::vector<std::byte> scratch;
  Decoded d = Decode(bytes, &scratch);
  const mq::BatchHeader& h = d.header;
  CHECK(h.crc == 0xe4c324a5u);
  CHECK(h.attributes == 0x0009);
  CHECK(h.compression() == mq::Compression::kGzip);
  CHECK(h.log_append_time());
  CHECK(h.producer_id == -1);
  CHECK(h.producer_epoch == 0);
  CHECK(h.base_sequence == 0);
  CHECK(h.records_count == 1);
  CHECK(h.base_timestamp == 1597425188775);
  CHECK(h.max_timestamp == 1597425188809);
  CHECK(mq::CompressionName(h.compression()) == "gzip");
  // kafkajs decoder.spec.js: one record, key "key-0", a value stamped with
  // the time it was produced; LogAppendTime reads as maxTimestamp.
  REQUIRE(d.records.size() == 1);
  CHECK(d.records[0].offset == 0);
  CHECK(d.records[0].timestamp == 1597425188809);
  CHECK(Text(d.records[0].key) == "key-0");
  CHECK(Text(d.records[0].value) == "value-0-2020-08-14T17:13:08.682Z");
  CHECK(d.records[0].headers_count == 0);
  CHECK(scratch.size() == 44);  // the gzip stream's content
}

TEST_CASE("sarama gzip batch: CRC valid, record decodes", "[vectors][gzip]") {
  CheckSaramaVector("sarama_gzip.hex", 107, 0xe74acea5u, mq::Compression::kGzip);
}

TEST_CASE("sarama snappy batch (one raw block): CRC valid, record decodes", "[vectors][snappy]") {
  CheckSaramaVector("sarama_snappy.hex", 84, 0x15009f61u, mq::Compression::kSnappy);
}

TEST_CASE("sarama lz4 batch (LZ4 frame with content checksum): CRC valid, record decodes",
          "[vectors][lz4]") {
  CheckSaramaVector("sarama_lz4.hex", 101, 0xa94a77c5u, mq::Compression::kLz4);
}

TEST_CASE("sarama lz4 batch with a wrong frame header checksum (as magic 0 wrote it): R9",
          "[vectors][lz4][R9]") {
  // Kafka's magic-0 writer hashed the magic number into the frame header
  // checksum (byte 6 of the frame); a v2 batch never carries that.
  auto bytes = HexFile("sarama_lz4.hex");
  bytes[61 + 6] ^= std::byte{0x5a};
  mq::test::FixCrc(bytes);
  auto view = mq::BatchView::Parse(bytes, {}, "lz4.log", 0);
  REQUIRE(view.has_value());
  std::vector<std::byte> scratch;
  auto reader = mq::RecordReader::Open(*view, &scratch, {}, "lz4.log", 0);
  REQUIRE_FALSE(reader.has_value());
  CHECK(reader.error().rule() == "R9");
}

TEST_CASE("kafka_ex xerial snappy stream (snappy-java framing): two blocks decode",
          "[vectors][snappy]") {
  auto in = HexFile("kafka_ex_xerial_snappy.hex");
  REQUIRE(in.size() == 113);
  std::vector<std::byte> out;
  REQUIRE(mq::compression::Decompress(mq::Compression::kSnappy, in, 64 << 20, &out, "x", 0).ok());
  REQUIRE(out.size() == 26 + 1000);
  // A magic-0 message set: offset 37, size 1014, crc, magic 0, attributes
  // 0, null key, value of 1000 bytes. The message's own CRC-32 (over magic
  // to the end) matches: these bytes came from a real Kafka client.
  CHECK(ToHex(std::span(out).first(26)) == "0000000000000025000003f60a2c10ec0000ffffffff000003e8");
  std::string value(reinterpret_cast<const char*>(out.data()) + 26, 1000);
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += "ABCDEFGHIJ";
  CHECK(value == expected);
  CHECK(crc32(0, reinterpret_cast<const Bytef*>(out.data()) + 16,
              static_cast<uInt>(out.size() - 16)) == 0x0a2c10ecu);
}

TEST_CASE("sarama snappy record in snappy-java's framing: decodes like the raw block",
          "[vectors][snappy]") {
  // Sarama's raw block (23 bytes) as snappy-java's SnappyOutputStream
  // frames it: the 16-byte header (magic, version 1, compatible 1), the
  // block's length as a big-endian int32, the block.
  auto raw = HexFile("sarama_snappy.hex");
  std::vector<std::byte> records = Hex("82534e4150505900000000010000000100000017");
  records.insert(records.end(), raw.begin() + 61, raw.end());
  REQUIRE(records.size() == 16 + 4 + 23);
  auto bytes = mq::test::WrapRecords(records, 1, 0, 2);
  std::vector<std::byte> scratch;
  auto view = mq::BatchView::Parse(bytes, {}, "x", 0);
  REQUIRE(view.has_value());
  auto reader = mq::RecordReader::Open(*view, &scratch, {}, "x", 0);
  REQUIRE(reader.has_value());
  auto rec = reader->Next();
  REQUIRE(rec.has_value());
  REQUIRE(rec->has_value());
  CHECK(ToHex(*(*rec)->key) == "01020304");
  CHECK(ToHex(*(*rec)->value) == "050607");
  CHECK(ToHex(std::span(scratch)) == ToHex(std::span(raw).subspan(61 + 2)));
}
