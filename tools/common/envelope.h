// The JSON Lines envelope: one message per line, written by `mq-consume -J`
// and read by `mq-produce -J`, so `mq-consume -J | mq-produce -J` copies
// messages with keys, headers and timestamps, byte for byte.
//
//   {"topic":"t","partition":0,"offset":5,"tstype":"create","ts":1700000000000,
//    "key":"k","payload":"v","headers":[{"key":"h","value":"v"}]}
//
// - "key" and "payload" are null for a null key / null value (tombstone).
// - Bytes that are not valid UTF-8 are written base64 (RFC 4648, padded) in
//   "key_b64" / "payload_b64" / a header's "value_b64" (and "key_b64" for a
//   header key) instead of the plain field. Valid UTF-8 is always written
//   plain, with control characters, '"' and '\' escaped, so every line is
//   valid JSON whatever the bytes.
// - "tstype" is "create" or "logappend" (the batch's timestamp type).
// - Writing: fields in the order above, one line, terminated by '\n'.
// - Reading: any field order; unknown fields are ignored; every field is
//   optional (a missing key or payload reads as null). A header value may be
//   null or absent (null).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "json.h"
#include "mq/batch.h"
#include "mq/status.h"

namespace mq::envelope {

// One message as mq-consume -J prints it.
struct EnvelopeFields {
  std::string_view topic;
  int32_t partition = 0;
  int64_t offset = 0;
  bool log_append_time = false;  // tstype "logappend" instead of "create"
  int64_t timestamp = 0;
  std::optional<Bytes> key;
  std::optional<Bytes> value;
  std::span<const Header> headers;
};

// Appends one envelope line (terminated by '\n') to `out`, written with
// json::Writer.
void AppendEnvelopeJson(fmt::memory_buffer& out, const EnvelopeFields& fields);

// Appends the envelope's "headers" array alone (no newline):
// [{"key":"h","value":"v"},...], binary-safe as in a line.
void AppendHeadersJson(fmt::memory_buffer& out, std::span<const Header> headers);

// The JSON writer's UTF-8 check and base64 (json.h).
using json::AppendBase64;
using json::IsUtf8;

// One message read back from an envelope line. Every view points into the
// EnvelopeParser that produced it and stays valid until its next Parse().
struct ParsedEnvelope {
  std::optional<std::string_view> topic;
  std::optional<int32_t> partition;
  std::optional<int64_t> offset;
  std::optional<int64_t> timestamp;  // "ts"
  bool log_append_time = false;      // "tstype":"logappend"
  std::optional<Bytes> key;          // nullopt = null or absent
  std::optional<Bytes> value;        // nullopt = null or absent (tombstone)
  std::vector<Header> headers;
};

// Parses envelope lines with simdjson (On Demand). Reuse one parser for a
// whole input: steady-state parsing allocates nothing.
class EnvelopeParser {
 public:
  EnvelopeParser();
  ~EnvelopeParser();
  EnvelopeParser(const EnvelopeParser&) = delete;
  EnvelopeParser& operator=(const EnvelopeParser&) = delete;

  // Parses one line (without its '\n'; a trailing '\r' is JSON whitespace).
  // Errors are kCorruption (exit 65) and read
  // "<source>:<line_no>: envelope: <what>", naming the field at fault
  // (bad JSON, wrong type, invalid base64, both "payload" and
  // "payload_b64", ...). Lines longer than `max_line_bytes` are refused
  // (kTooLarge) before anything is copied.
  Result<const ParsedEnvelope*> Parse(std::string_view line, std::string_view source = "<stdin>",
                                      uint64_t line_no = 0);

  void set_max_line_bytes(size_t n) { max_line_bytes_ = n; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  size_t max_line_bytes_ = 64u << 20;
};

// Decodes strict padded base64 into `out` (appending). Returns false on a
// character outside the alphabet, bad padding or a length not a multiple of 4.
bool DecodeBase64(std::string_view text, std::vector<std::byte>* out);

}  // namespace mq::envelope
