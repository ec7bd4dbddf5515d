#include "json.h"

#include "envelope.h"

namespace mq::json {

void Writer::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (depth_ == 0) return;
  const uint64_t bit = uint64_t{1} << (depth_ - 1);
  if (filled_ & bit) out_->push_back(',');
  filled_ |= bit;
}

Writer& Writer::BeginObject() {
  Separate();
  out_->push_back('{');
  ++depth_;
  filled_ &= ~(uint64_t{1} << (depth_ - 1));
  return *this;
}

Writer& Writer::EndObject() {
  out_->push_back('}');
  --depth_;
  return *this;
}

Writer& Writer::BeginArray() {
  Separate();
  out_->push_back('[');
  ++depth_;
  filled_ &= ~(uint64_t{1} << (depth_ - 1));
  return *this;
}

Writer& Writer::EndArray() {
  out_->push_back(']');
  --depth_;
  return *this;
}

Writer& Writer::Key(std::string_view key) {
  Separate();
  out_->push_back('"');
  Append(key);
  Append("\":");
  after_key_ = true;
  return *this;
}

Writer& Writer::Str(std::string_view utf8) {
  Separate();
  envelope::AppendJsonString(*out_, utf8);
  return *this;
}

Writer& Writer::StrOrNull(std::string_view text) {
  if (!envelope::IsUtf8(text)) return Null();
  return Str(text);
}

Writer& Writer::Int(int64_t v) {
  Separate();
  fmt::format_int digits(v);
  Append(std::string_view(digits.data(), digits.size()));
  return *this;
}

Writer& Writer::Uint(uint64_t v) {
  Separate();
  fmt::format_int digits(v);
  Append(std::string_view(digits.data(), digits.size()));
  return *this;
}

Writer& Writer::IntOrNull(const std::optional<int64_t>& v) { return v ? Int(*v) : Null(); }

Writer& Writer::Bool(bool v) {
  Separate();
  Append(v ? "true" : "false");
  return *this;
}

Writer& Writer::Null() {
  Separate();
  Append("null");
  return *this;
}

Writer& Writer::Raw(std::string_view json) {
  Separate();
  Append(json);
  return *this;
}

Writer& Writer::Blob(std::string_view key, const std::optional<Bytes>& bytes) {
  if (!bytes) return Null(key);
  if (envelope::IsUtf8(AsText(*bytes))) return Str(key, AsText(*bytes));
  Key(std::string(key) + "_b64");
  Separate();
  out_->push_back('"');
  envelope::AppendBase64(*out_, *bytes);
  out_->push_back('"');
  return *this;
}

}  // namespace mq::json
