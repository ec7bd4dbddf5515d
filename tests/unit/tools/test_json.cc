// The tools' one JSON writer (tools/common/json.h) and mq-consume -J's
// envelope line written with it (envelope.h): field order, escaping,
// base64 for bytes that are not UTF-8, nulls, headers.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "envelope.h"
#include "json.h"

using namespace mq;

namespace {

std::string Envelope(const envelope::EnvelopeFields& f) {
  fmt::memory_buffer out;
  out.append(std::string_view("before|"));  // appended to, not cleared
  envelope::AppendEnvelopeJson(out, f);
  return std::string(out.data(), out.size());
}

}  // namespace

TEST_CASE("json writer: an envelope line, fields in order, UTF-8 plain and escaped") {
  const std::vector<Header> headers = {{"h1", AsBytes("v\"1")}, {"h2", std::nullopt}};
  envelope::EnvelopeFields f{
      "t-\x01", 3, 42, false, 1700000000000, AsBytes("k\\"), AsBytes("line\nnext\ttab é"), headers};
  CHECK(Envelope(f) ==
        "before|{\"topic\":\"t-\\u0001\",\"partition\":3,\"offset\":42,\"tstype\":\"create\","
        "\"ts\":1700000000000,\"key\":\"k\\\\\",\"payload\":\"line\\nnext\\ttab é\",\"headers\":"
        "[{\"key\":\"h1\",\"value\":\"v\\\"1\"},{\"key\":\"h2\",\"value\":null}]}\n");
}

TEST_CASE("json writer: an envelope line with nulls, base64 and log-append time") {
  const std::string binary("\xff\x00\x01", 3);
  const std::vector<Header> headers = {{std::string_view("\xfe", 1), AsBytes(binary)}};
  envelope::EnvelopeFields f{"t", 0, -1, true, -5, std::nullopt, AsBytes(binary), headers};
  CHECK(Envelope(f) ==
        "before|{\"topic\":\"t\",\"partition\":0,\"offset\":-1,\"tstype\":\"logappend\","
        "\"ts\":-5,\"key\":null,\"payload_b64\":\"/wAB\",\"headers\":[{\"key_b64\":\"/g==\","
        "\"value_b64\":\"/wAB\"}]}\n");
  envelope::EnvelopeFields empty{"t", 1, 2, false, 3, AsBytes(""), std::nullopt, {}};
  CHECK(Envelope(empty) ==
        "before|{\"topic\":\"t\",\"partition\":1,\"offset\":2,\"tstype\":\"create\",\"ts\":3,"
        "\"key\":\"\",\"payload\":null,\"headers\":[]}\n");
}

TEST_CASE("json writer: an envelope line reads back as it was written") {
  const std::string binary("\x80\x81 \"q\" \\ \x1f", 9);
  const std::vector<Header> headers = {{"a", AsBytes(binary)}, {"b", AsBytes("")}};
  envelope::EnvelopeFields f{"topic", 7, 99, true, 12345, AsBytes(binary), AsBytes("v"), headers};
  fmt::memory_buffer out;
  envelope::AppendEnvelopeJson(out, f);
  std::string_view line(out.data(), out.size() - 1);  // without '\n'
  envelope::EnvelopeParser parser;
  auto parsed = parser.Parse(line, "test", 1);
  REQUIRE(parsed);
  const envelope::ParsedEnvelope& p = **parsed;
  CHECK(*p.topic == "topic");
  CHECK(*p.offset == 99);
  CHECK(p.log_append_time);
  CHECK(AsText(*p.key) == binary);
  REQUIRE(p.headers.size() == 2);
  CHECK(AsText(*p.headers[0].value) == binary);
  CHECK(AsText(*p.headers[1].value).empty());
}

TEST_CASE("json writer: nesting places the commas") {
  json::Writer w;
  w.BeginObject().Key("a").BeginArray().Int(1).Null().BeginObject().EndObject();
  w.IntOrNull({}).IntOrNull(5).StrOrNull("\xff").StrOrNull("x").EndArray();
  w.Bool("b", true).Uint("c", 18446744073709551615ull).Blob("d", std::nullopt).EndObject();
  CHECK(w.view() ==
        "{\"a\":[1,null,{},null,5,null,\"x\"],\"b\":true,"
        "\"c\":18446744073709551615,\"d\":null}");
  fmt::memory_buffer buffer;
  buffer.append(std::string_view("stale"));
  json::Line line(&buffer);
  CHECK(line.Str("k", "v").Raw("r", "[1]").Finish() == "{\"k\":\"v\",\"r\":[1]}\n");
}
