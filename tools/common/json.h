// The tools' JSON writer: every -J/--json output (mq-consume's group
// admin, mq-inspect, mq-isr) is written with it, into a fmt::memory_buffer,
// compact (no spaces). Objects and arrays nest and the writer places the
// commas; keys are ASCII literals, written as given; strings are escaped as
// the envelope escapes them (envelope.h AppendJsonString: '"', '\' and
// control characters). mq-consume -J's envelope line, one per message, is
// written by envelope.cc's fixed-field path with the same escaping.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "mq/batch.h"

namespace mq::json {

class Writer {
 public:
  // Writes into a buffer of its own (buffer()).
  Writer() : out_(&own_) {}
  // Appends to `*out`.
  explicit Writer(fmt::memory_buffer* out) : out_(out) {}
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& BeginObject();
  Writer& EndObject();
  Writer& BeginArray();
  Writer& EndArray();
  // An object's member name; its value is the next thing written.
  Writer& Key(std::string_view key);

  // `utf8` as a string: it must be valid UTF-8.
  Writer& Str(std::string_view utf8);
  // `text` as a string when it is valid UTF-8, else null.
  Writer& StrOrNull(std::string_view text);
  Writer& Int(int64_t v);
  Writer& Uint(uint64_t v);
  // The number, or null without one.
  Writer& IntOrNull(const std::optional<int64_t>& v);
  Writer& Bool(bool v);
  Writer& Null();
  // Already-encoded JSON (an array or an object).
  Writer& Raw(std::string_view json);

  // Members: the key, then the value.
  Writer& Str(std::string_view key, std::string_view utf8) { return Key(key).Str(utf8); }
  Writer& Int(std::string_view key, int64_t v) { return Key(key).Int(v); }
  Writer& Uint(std::string_view key, uint64_t v) { return Key(key).Uint(v); }
  Writer& Bool(std::string_view key, bool v) { return Key(key).Bool(v); }
  Writer& Null(std::string_view key) { return Key(key).Null(); }
  Writer& Raw(std::string_view key, std::string_view json) { return Key(key).Raw(json); }
  // `key` as a string when `bytes` is UTF-8, else `key`_b64 as base64 (as
  // in the envelope); null when absent.
  Writer& Blob(std::string_view key, const std::optional<Bytes>& bytes);

  // A Line's end: its object closed, then '\n'; the line (valid until the
  // buffer changes). Here, not in Line, so that a chain of members written
  // on a Line ends with it.
  std::string_view Finish() {
    EndObject();
    out_->push_back('\n');
    return view();
  }

  fmt::memory_buffer& buffer() { return *out_; }
  std::string_view view() const { return std::string_view(out_->data(), out_->size()); }

 protected:
  fmt::memory_buffer* out_;

 private:
  // Before a value: the comma that separates it from the one before in
  // its array or object (none after a key).
  void Separate();
  void Append(std::string_view text) { out_->append(text); }

  fmt::memory_buffer own_;
  uint64_t filled_ = 0;  // bit d: the open array or object at depth d holds a value
  int depth_ = 0;
  bool after_key_ = false;
};

// One JSON Lines object: `{`, its members, then Finish() gives `}\n`. With
// a buffer (cleared first), which the caller may reuse across lines so
// printing a line allocates nothing.
class Line : public Writer {
 public:
  Line() { BeginObject(); }
  explicit Line(fmt::memory_buffer* buffer) : Writer(buffer) {
    out_->clear();
    BeginObject();
  }
};

}  // namespace mq::json
