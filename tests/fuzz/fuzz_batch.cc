// Fuzzes the batch layer with arbitrary bytes read as a segment: ProbeBatch
// and BatchView::Parse on every batch position, then -- after re-signing the
// CRC so the fuzzer gets past R4 -- RecordReader over the records both as
// given and with the codec switched between none and zstd. Whatever it
// decodes is re-encoded with BatchBuilder and must parse back to the same
// records. Limits are small so any unchecked length shows up as a failed
// allocation (-malloc_limit_mb).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "format/coding.h"
#include "format/format.h"
#include "mq/batch.h"
#include "mq/crc32c.h"

namespace {

constexpr mq::DecodeLimits kLimits{1 << 20, 4 << 20};

void Check(bool ok) {
  if (!ok) std::abort();
}

// Re-encodes what was decoded and checks it reads back the same.
void RoundTrip(const mq::BatchHeader& h, const std::vector<mq::RecordView>& records) {
  mq::BatchOptions o;
  o.producer_id = h.producer_id;
  o.producer_epoch = h.producer_epoch;
  o.base_sequence = h.base_sequence;
  o.is_control = h.is_control();
  mq::BatchBuilder builder(o);
  std::vector<std::vector<mq::Header>> headers;
  for (const auto& r : records) {
    headers.push_back(r.headers());
    mq::RecordInput in;
    in.timestamp = r.timestamp;
    in.key = r.key;
    in.value = r.value;
    in.headers = headers.back();
    builder.Add(in);
  }
  std::vector<std::byte> out;
  Check(builder.Finish(h.base_offset, &out).ok());
  auto view = mq::BatchView::Parse(out, {});
  Check(view.has_value());
  std::vector<std::byte> scratch;
  auto reader = mq::RecordReader::Open(*view, &scratch, {});
  Check(reader.has_value());
  for (const auto& want : records) {
    mq::RecordView got;
    Check(reader->Read(&got));
    Check(got.key.has_value() == want.key.has_value());
    Check(got.value.has_value() == want.value.has_value());
    if (got.value) Check(got.value->size() == want.value->size());
    Check(got.headers_count == want.headers_count);
  }
  mq::RecordView extra;
  Check(!reader->Read(&extra) && reader->status().ok());
}

void ReadRecords(std::vector<std::byte>& batch, uint16_t codec, std::vector<std::byte>* scratch) {
  using namespace mq::format;
  uint16_t attributes = mq::coding::GetFixed16(batch.data() + kAttributesOffset);
  attributes = static_cast<uint16_t>((attributes & ~kCodecMask) | codec);
  mq::coding::PutFixed16(batch.data() + kAttributesOffset, attributes);
  uint32_t crc = mq::Crc32c(std::span<const std::byte>(batch).subspan(kAttributesOffset));
  mq::coding::PutFixed32(batch.data() + kCrcOffset, crc);
  auto view = mq::BatchView::Parse(batch, kLimits, "fuzz", 0);
  if (!view) return;
  auto reader = mq::RecordReader::Open(*view, scratch, kLimits, "fuzz", 0);
  if (!reader) return;
  std::vector<mq::RecordView> records;
  for (;;) {
    auto r = reader->Next();
    if (!r) return;  // a rule broken: fine, as long as we got here safely
    if (!*r) break;
    if (view->header().is_control()) Check(mq::DecodeControlRecord(**r).has_value());
    records.push_back(**r);
  }
  Check(records.size() == static_cast<size_t>(view->header().records_count));
  // The copy keeps the views alive while the builder reuses nothing of them.
  RoundTrip(view->header(), records);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mq::Bytes bytes(reinterpret_cast<const std::byte*>(data), size);
  static std::vector<std::byte> scratch;
  size_t pos = 0;
  while (pos < size) {
    mq::Bytes rest = bytes.subspan(pos);
    mq::BatchHeader h;
    auto probe = mq::ProbeBatch(rest, &h, kLimits, "fuzz", pos);
    auto parsed = mq::BatchView::Parse(rest, kLimits, "fuzz", pos);
    if (!probe || *probe == mq::Probe::kTornTail) {
      Check(!parsed.has_value());
      break;
    }
    Check(h.size_bytes() <= rest.size());
    if (parsed) {
      Check(parsed->bytes().size() == h.size_bytes());
      auto reader = mq::RecordReader::Open(*parsed, &scratch, kLimits, "fuzz", pos);
      if (reader) {
        mq::RecordView rv;
        while (reader->Read(&rv)) (void)rv.headers();
      }
    }
    std::vector<std::byte> batch(rest.begin(),
                                 rest.begin() + static_cast<ptrdiff_t>(h.size_bytes()));
    ReadRecords(batch, 0, &scratch);
    ReadRecords(batch, 4, &scratch);
    pos += h.size_bytes();
  }
  return 0;
}
