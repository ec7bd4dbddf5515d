// The tools' JSON writer: every JSON the tools print (mq-consume -J's
// envelope lines, mq-consume's group admin, mq-inspect, mq-isr, mq-topic)
// is written with it, into a fmt::memory_buffer, compact (no spaces).
// Objects and arrays nest and the writer places the commas; keys are ASCII
// literals, written as given; strings are escaped ('"', '\' and control
// characters). Its calls are inline and each string is written through
// one reservation of its upper bound, so an envelope line costs what a
// hand-written fixed-field encoder costs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "mq/batch.h"

namespace mq::json {

// RFC 4648's alphabet (base64 with '=' padding).
inline constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// True when `text` is valid UTF-8 (and so may be written as a plain JSON
// string rather than base64).
bool IsUtf8(std::string_view text);
// Appends `utf8` as a JSON string literal (with quotes), escaping '"', '\'
// and control characters. `utf8` must be valid UTF-8.
void AppendString(fmt::memory_buffer& out, std::string_view utf8);
// Appends `bytes` as RFC 4648 base64 with '=' padding (no quotes).
void AppendBase64(fmt::memory_buffer& out, Bytes bytes);
inline size_t Base64EncodedSize(size_t n) { return (n + 2) / 3 * 4; }

class Writer {
 public:
  // Writes into a buffer of its own (buffer()).
  Writer() : out_(&own_) {}
  // Appends to `*out`.
  explicit Writer(fmt::memory_buffer* out) : out_(out) {}
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& BeginObject() { return Open('{'); }
  Writer& EndObject() { return Close('}'); }
  Writer& BeginArray() { return Open('['); }
  Writer& EndArray() { return Close(']'); }
  // An object's member name; its value is the next thing written.
  Writer& Key(std::string_view key) { return KeyWithSuffix(key, {}); }

  // `utf8` as a string: it must be valid UTF-8.
  Writer& Str(std::string_view utf8) {
    char* d = Separate(Room(kStringBound * utf8.size() + 3));
    return Done(PutString(d, utf8));
  }
  // `text` as a string when it is valid UTF-8, else null.
  Writer& StrOrNull(std::string_view text) { return IsUtf8(text) ? Str(text) : Null(); }
  Writer& Int(int64_t v) { return Number(fmt::format_int(v)); }
  Writer& Uint(uint64_t v) { return Number(fmt::format_int(v)); }
  // The number, or null without one.
  Writer& IntOrNull(const std::optional<int64_t>& v) { return v ? Int(*v) : Null(); }
  Writer& Bool(bool v) { return Raw(v ? "true" : "false"); }
  Writer& Null() { return Raw("null"); }
  // Already-encoded JSON (an array or an object).
  Writer& Raw(std::string_view json) {
    char* d = Separate(Room(json.size() + 1));
    return Done(Put(d, json));
  }

  // Members: the key, then the value.
  Writer& Str(std::string_view key, std::string_view utf8) { return Key(key).Str(utf8); }
  Writer& Int(std::string_view key, int64_t v) { return Key(key).Int(v); }
  Writer& Uint(std::string_view key, uint64_t v) { return Key(key).Uint(v); }
  Writer& Bool(std::string_view key, bool v) { return Key(key).Bool(v); }
  Writer& Null(std::string_view key) { return Key(key).Null(); }
  Writer& Raw(std::string_view key, std::string_view json) { return Key(key).Raw(json); }
  // `key` as a string when `bytes` is UTF-8, else `key`_b64 as base64 (as
  // in the envelope); null when absent.
  Writer& Blob(std::string_view key, const std::optional<Bytes>& bytes) {
    if (!bytes) return Null(key);
    if (IsUtf8(AsText(*bytes))) return Str(key, AsText(*bytes));
    KeyWithSuffix(key, "_b64");
    char* d = Separate(Room(Base64EncodedSize(bytes->size()) + 2));
    *d++ = '"';
    d = PutBase64(d, *bytes);
    *d++ = '"';
    return Done(d);
  }

  // A Line's end: its object closed, then '\n'; the line (valid until the
  // buffer changes). Here, not in Line, so that a chain of members written
  // on a Line ends with it.
  std::string_view Finish() {
    char* d = Room(2);
    *d++ = '}';
    *d++ = '\n';
    --depth_;
    Done(d);
    return view();
  }

  fmt::memory_buffer& buffer() { return *out_; }
  std::string_view view() const { return std::string_view(out_->data(), out_->size()); }

  // The encoders beneath, on space the caller reserved: `"<utf8, escaped>"`
  // needs kStringBound bytes per byte of `utf8` and 2; base64 needs
  // Base64EncodedSize. Each returns the end of what it wrote.
  static constexpr size_t kStringBound = 6;  // \u00XX
  static char* PutString(char* d, std::string_view utf8);
  static char* PutBase64(char* d, Bytes bytes);

 protected:
  fmt::memory_buffer* out_;

 private:
  // Every value is written through a raw pointer into room reserved for
  // its upper bound, and the buffer's size set once after it: no capacity
  // check per byte, and the buffer is exact between calls. Inlined, so a
  // key's or a literal's length is a constant where it is written.
  [[gnu::always_inline]] char* Room(size_t n) {
    const size_t size = out_->size();
    if (out_->capacity() - size < n) out_->reserve(size + n);
    return out_->data() + size;
  }
  [[gnu::always_inline]] Writer& Done(char* end) {
    out_->resize(static_cast<size_t>(end - out_->data()));
    return *this;
  }
  [[gnu::always_inline]] static char* Put(char* d, std::string_view text) {
    if (text.empty()) return d;  // text.data() may be null
    std::memcpy(d, text.data(), text.size());
    return d + text.size();
  }
  // Before a value (at `d`, with room for one more byte): the comma that
  // separates it from the one before in its array or object (none after
  // a key).
  [[gnu::always_inline]] char* Separate(char* d) {
    if (after_key_) {
      after_key_ = false;
      return d;
    }
    if (depth_ == 0) return d;
    const uint64_t bit = uint64_t{1} << (depth_ - 1);
    if (filled_ & bit) *d++ = ',';
    filled_ |= bit;
    return d;
  }
  [[gnu::always_inline]] Writer& Number(const fmt::format_int& digits) {
    char* d = Separate(Room(digits.size() + 1));
    return Done(Put(d, std::string_view(digits.data(), digits.size())));
  }
  Writer& Open(char c) {
    char* d = Separate(Room(2));
    *d++ = c;
    ++depth_;
    filled_ &= ~(uint64_t{1} << (depth_ - 1));
    return Done(d);
  }
  Writer& Close(char c) {
    char* d = Room(1);
    *d++ = c;
    --depth_;
    return Done(d);
  }
  // `"<key><suffix>":`.
  [[gnu::always_inline]] Writer& KeyWithSuffix(std::string_view key, std::string_view suffix) {
    char* d = Separate(Room(key.size() + suffix.size() + 4));
    *d++ = '"';
    d = Put(d, key);
    d = Put(d, suffix);
    *d++ = '"';
    *d++ = ':';
    after_key_ = true;
    return Done(d);
  }

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
