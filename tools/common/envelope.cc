#include "envelope.h"

#include <array>
#include <cstring>

#include <simdjson.h>

namespace mq::envelope {
namespace {

// Base64 character -> 6-bit value, 64 for '=', 255 for anything else.
constexpr std::array<uint8_t, 256> MakeDecodeTable() {
  std::array<uint8_t, 256> t{};
  for (auto& v : t) v = 255;
  for (int i = 0; i < 64; ++i)
    t[static_cast<uint8_t>(json::kBase64Alphabet[i])] = static_cast<uint8_t>(i);
  t['='] = 64;
  return t;
}
constexpr std::array<uint8_t, 256> kBase64Decode = MakeDecodeTable();

Status EnvelopeError(std::string_view source, uint64_t line_no, std::string_view what) {
  return Status(Code::kCorruption, fmt::format("{}:{}: envelope: {}", source, line_no, what));
}

// Writes the "headers" array: [{"key":...,"value":...},...].
[[gnu::flatten]] void WriteHeaders(json::Writer& w, std::span<const Header> headers) {
  w.BeginArray();
  for (const Header& h : headers)
    w.BeginObject().Blob("key", AsBytes(h.key)).Blob("value", h.value).EndObject();
  w.EndArray();
}

}  // namespace

bool DecodeBase64(std::string_view text, std::vector<std::byte>* out) {
  if (text.size() % 4 != 0) return false;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size(); i += 4) {
    uint8_t a = kBase64Decode[s[i]], b = kBase64Decode[s[i + 1]];
    uint8_t c = kBase64Decode[s[i + 2]], d = kBase64Decode[s[i + 3]];
    bool last = i + 4 == text.size();
    if (a > 63 || b > 63) return false;
    if (c == 64 || d == 64) {
      // Padding only in the last quantum: "xx==" or "xxx=".
      if (!last || (c == 64 && d != 64) || c == 255 || d == 255) return false;
    } else if (c > 63 || d > 63) {
      return false;
    }
    uint32_t v = (uint32_t{a} << 18) | (uint32_t{b} << 12);
    out->push_back(static_cast<std::byte>(v >> 16));
    if (c == 64) continue;
    v |= uint32_t{c} << 6;
    out->push_back(static_cast<std::byte>((v >> 8) & 0xff));
    if (d == 64) continue;
    v |= d;
    out->push_back(static_cast<std::byte>(v & 0xff));
  }
  return true;
}

// Flattened: the writer's calls are inlined, as a fixed-field encoder's
// would be (mq-consume -J writes one line per message).
[[gnu::flatten]] void AppendEnvelopeJson(fmt::memory_buffer& out, const EnvelopeFields& f) {
  json::Writer w(&out);
  w.BeginObject()
      .Str("topic", f.topic)
      .Int("partition", f.partition)
      .Int("offset", f.offset)
      .Str("tstype", f.log_append_time ? "logappend" : "create")
      .Int("ts", f.timestamp)
      .Blob("key", f.key)
      .Blob("payload", f.value)
      .Key("headers");
  WriteHeaders(w, f.headers);
  w.Finish();
}

void AppendHeadersJson(fmt::memory_buffer& out, std::span<const Header> headers) {
  json::Writer w(&out);
  WriteHeaders(w, headers);
}

// ---------------------------------------------------------------------------
// Parsing

struct EnvelopeParser::Impl {
  simdjson::ondemand::parser parser;
  std::vector<char> padded;      // the line plus simdjson's padding
  std::vector<std::byte> arena;  // decoded base64; never reallocated mid-parse
  ParsedEnvelope result;
  std::string error;  // what went wrong, for the caller's Status

  bool Fail(std::string what) {
    error = std::move(what);
    return false;
  }
  bool ParseTop(simdjson::ondemand::object obj);
  bool ParseHeaders(simdjson::ondemand::value v);
  bool ParseHeader(simdjson::ondemand::object obj);
  // Reads a string-or-null field; `b64` decodes base64 into the arena.
  bool ReadBytes(simdjson::ondemand::value v, std::string_view name, bool b64,
                 std::optional<Bytes>* dst);
  bool ReadInt(simdjson::ondemand::value v, std::string_view name, int64_t* dst);
};

namespace {
const char* ErrorText(simdjson::error_code e) { return simdjson::error_message(e); }
}  // namespace

bool EnvelopeParser::Impl::ReadBytes(simdjson::ondemand::value v, std::string_view name, bool b64,
                                     std::optional<Bytes>* dst) {
  simdjson::ondemand::json_type type;
  if (auto e = v.type().get(type)) return Fail(fmt::format("field \"{}\": {}", name, ErrorText(e)));
  if (type == simdjson::ondemand::json_type::null) {
    if (auto e = v.is_null().error())
      return Fail(fmt::format("field \"{}\": {}", name, ErrorText(e)));
    dst->reset();
    return true;
  }
  std::string_view s;
  if (type != simdjson::ondemand::json_type::string || v.get_string().get(s))
    return Fail(fmt::format("field \"{}\": expected a string or null", name));
  if (!b64) {
    *dst = AsBytes(s);
    return true;
  }
  size_t start = arena.size();
  if (!DecodeBase64(s, &arena)) return Fail(fmt::format("field \"{}\": invalid base64", name));
  *dst = Bytes(arena.data() + start, arena.size() - start);
  return true;
}

bool EnvelopeParser::Impl::ReadInt(simdjson::ondemand::value v, std::string_view name,
                                   int64_t* dst) {
  if (v.get_int64().get(*dst)) return Fail(fmt::format("field \"{}\": expected an integer", name));
  return true;
}

bool EnvelopeParser::Impl::ParseHeader(simdjson::ondemand::object obj) {
  std::optional<Bytes> key, value;
  bool seen_key = false, seen_value = false;
  for (auto field_result : obj) {
    simdjson::ondemand::field field;
    if (auto e = std::move(field_result).get(field))
      return Fail(fmt::format("headers: {}", ErrorText(e)));
    std::string_view name;
    if (auto e = field.unescaped_key().get(name))
      return Fail(fmt::format("headers: {}", ErrorText(e)));
    bool is_b64 = name == "key_b64" || name == "value_b64";
    bool is_key = name == "key" || name == "key_b64";
    bool is_value = name == "value" || name == "value_b64";
    if (!is_key && !is_value) continue;
    bool& seen = is_key ? seen_key : seen_value;
    if (seen)
      return Fail(
          fmt::format("headers: \"{}\" given twice (plain and _b64)", is_key ? "key" : "value"));
    seen = true;
    std::string label = fmt::format("headers[].{}", name);
    if (!ReadBytes(field.value(), label, is_b64, is_key ? &key : &value)) return false;
  }
  if (!key) return Fail("headers: a header needs a string \"key\" (or \"key_b64\")");
  result.headers.push_back(Header{AsText(*key), value});
  return true;
}

// mq's form, an array of {"key","value"} objects, or kcat's: a flat array
// of alternating names and values (kcat -J), or an object of names to
// arrays of values (kcat -J with its header map option).
bool EnvelopeParser::Impl::ParseHeaders(simdjson::ondemand::value v) {
  simdjson::ondemand::json_type type;
  if (v.type().get(type)) return Fail("field \"headers\": expected an array");
  if (type == simdjson::ondemand::json_type::object) {
    simdjson::ondemand::object map;
    if (v.get_object().get(map)) return Fail("field \"headers\": expected an array or object");
    for (auto field_result : map) {
      simdjson::ondemand::field field;
      if (auto e = std::move(field_result).get(field))
        return Fail(fmt::format("headers: {}", ErrorText(e)));
      std::string_view name;
      if (auto e = field.unescaped_key().get(name))
        return Fail(fmt::format("headers: {}", ErrorText(e)));
      // Unescaped strings live in the parser's buffer until the next line.
      std::string_view key = name;
      simdjson::ondemand::array values;
      if (field.value().get_array().get(values))
        return Fail("field \"headers\": a header map holds arrays of values");
      for (auto value : values) {
        std::optional<Bytes> bytes;
        if (!ReadBytes(value.value(), "headers{}", false, &bytes)) return false;
        result.headers.push_back(Header{key, bytes});
      }
    }
    return true;
  }
  simdjson::ondemand::array arr;
  if (v.get_array().get(arr)) return Fail("field \"headers\": expected an array");
  std::optional<std::string_view> name;  // kcat's flat form: a name waiting for its value
  bool flat = false, objects = false;
  for (auto elem : arr) {
    simdjson::ondemand::json_type t;
    if (elem.type().get(t)) return Fail("field \"headers\": bad element");
    if (t == simdjson::ondemand::json_type::object) {
      objects = true;
      simdjson::ondemand::object obj;
      if (flat || elem.get_object().get(obj))
        return Fail("field \"headers\": each header must be an object");
      if (!ParseHeader(obj)) return false;
      continue;
    }
    flat = true;
    if (objects) return Fail("field \"headers\": each header must be an object");
    std::optional<Bytes> bytes;
    if (!ReadBytes(elem.value(), "headers[]", false, &bytes)) return false;
    if (!name) {
      if (!bytes) return Fail("field \"headers\": a header name is null");
      name = AsText(*bytes);
    } else {
      result.headers.push_back(Header{*name, bytes});
      name.reset();
    }
  }
  if (name) return Fail("field \"headers\": a name without a value (kcat's flat form pairs them)");
  return true;
}

bool EnvelopeParser::Impl::ParseTop(simdjson::ondemand::object obj) {
  bool seen_key = false, seen_payload = false;
  for (auto field_result : obj) {
    simdjson::ondemand::field field;
    if (auto e = std::move(field_result).get(field)) return Fail(ErrorText(e));
    std::string_view name;
    if (auto e = field.unescaped_key().get(name)) return Fail(ErrorText(e));
    simdjson::ondemand::value v = field.value();
    int64_t n = 0;
    if (name == "key" || name == "key_b64") {
      if (seen_key) return Fail("\"key\" given twice (plain and _b64)");
      seen_key = true;
      if (!ReadBytes(v, name, name == "key_b64", &result.key)) return false;
    } else if (name == "payload" || name == "payload_b64") {
      if (seen_payload) return Fail("\"payload\" given twice (plain and _b64)");
      seen_payload = true;
      if (!ReadBytes(v, name, name == "payload_b64", &result.value)) return false;
    } else if (name == "headers") {
      if (!ParseHeaders(v)) return false;
    } else if (name == "ts") {
      if (!ReadInt(v, name, &n)) return false;
      result.timestamp = n;
    } else if (name == "tstype") {
      std::string_view s;
      // kcat writes "unknown" when the timestamp type is neither.
      if (v.get_string().get(s) || (s != "create" && s != "logappend" && s != "unknown"))
        return Fail("field \"tstype\": expected \"create\", \"logappend\" or \"unknown\"");
      result.log_append_time = s == "logappend";
    } else if (name == "partition") {
      if (!ReadInt(v, name, &n)) return false;
      if (n < 0 || n > INT32_MAX) return Fail("field \"partition\": out of range");
      result.partition = static_cast<int32_t>(n);
    } else if (name == "offset") {
      if (!ReadInt(v, name, &n)) return false;
      result.offset = n;
    } else if (name == "topic") {
      std::string_view s;
      if (v.get_string().get(s)) return Fail("field \"topic\": expected a string");
      result.topic = s;
    }
  }
  return true;
}

EnvelopeParser::EnvelopeParser() : impl_(std::make_unique<Impl>()) {}
EnvelopeParser::~EnvelopeParser() = default;

Result<const ParsedEnvelope*> EnvelopeParser::Parse(std::string_view line, std::string_view source,
                                                    uint64_t line_no) {
  if (line.size() > max_line_bytes_)
    return Status(Code::kTooLarge,
                  fmt::format("{}:{}: envelope: line of {} bytes exceeds the maximum of {}", source,
                              line_no, line.size(), max_line_bytes_));
  Impl& m = *impl_;
  std::vector<Header> headers = std::move(m.result.headers);
  headers.clear();
  m.result = ParsedEnvelope{};
  m.result.headers = std::move(headers);
  m.arena.clear();
  m.arena.reserve(line.size());  // decoded base64 is shorter than the line: no reallocation
  m.padded.resize(line.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(m.padded.data(), line.data(), line.size());
  std::memset(m.padded.data() + line.size(), 0, simdjson::SIMDJSON_PADDING);

  simdjson::ondemand::document doc;
  if (auto e = m.parser.iterate(m.padded.data(), line.size(), m.padded.size()).get(doc))
    return EnvelopeError(source, line_no, ErrorText(e));
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj)) return EnvelopeError(source, line_no, "not a JSON object");
  if (!m.ParseTop(obj)) return EnvelopeError(source, line_no, m.error);
  if (!doc.current_location().error())
    return EnvelopeError(source, line_no, "trailing characters after the object");
  return &m.result;
}

}  // namespace mq::envelope
