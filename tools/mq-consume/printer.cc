#include "printer.h"

#include "envelope.h"

namespace mq::consume {

bool MatchesAll(std::span<const Header> headers, std::span<const HeaderFilter> filters) {
  for (const HeaderFilter& f : filters) {
    bool found = false;
    for (const Header& h : headers) {
      if (h.key != f.name) continue;
      if (!f.value || (h.value && AsText(*h.value) == *f.value)) {
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  return true;
}

Printer::Printer(PrintOptions options, cli::Output* out) : options_(std::move(options)), out_(out) {
  needs_headers_ =
      options_.mode == PrintOptions::Mode::kJson ||
      (options_.mode == PrintOptions::Mode::kFormat && options_.format->needs_headers());
}

void Printer::Print(int32_t partition, bool log_append_time, const RecordView& r,
                    std::span<const Header> headers) {
  Print(options_.topic, partition, log_append_time, r, headers);
}

void Printer::Print(std::string_view topic, int32_t partition, bool log_append_time,
                    const RecordView& r, std::span<const Header> headers) {
  using Mode = PrintOptions::Mode;
  switch (options_.mode) {
    case Mode::kValue:
      if (r.value)
        out_->Write(*r.value);
      else
        out_->Write(options_.null_text);
      out_->Write(options_.delimiter);
      break;
    case Mode::kKeyValue:
      if (r.key)
        out_->Write(*r.key);
      else
        out_->Write(options_.null_text);
      out_->Write(options_.key_delimiter);
      if (r.value)
        out_->Write(*r.value);
      else
        out_->Write(options_.null_text);
      out_->Write(options_.delimiter);
      break;
    case Mode::kFormat: {
      scratch_.clear();
      fmtstr::Message m{topic, partition, r.offset, r.timestamp, r.key, r.value, headers};
      options_.format->Render(scratch_, m, options_.null_text);
      out_->Write(std::string_view(scratch_.data(), scratch_.size()));
      break;
    }
    case Mode::kJson: {
      scratch_.clear();
      envelope::EnvelopeFields f{topic,       partition, r.offset, log_append_time,
                                 r.timestamp, r.key,     r.value,  headers};
      envelope::AppendEnvelopeJson(scratch_, f);
      out_->Write(std::string_view(scratch_.data(), scratch_.size()));
      break;
    }
  }
  out_->EndRecord();
}

}  // namespace mq::consume
