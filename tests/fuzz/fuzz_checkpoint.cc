// libFuzzer target: the replica checkpoints' text layout over arbitrary
// bytes (format-spec/replication.md §16, R35-R38), and the binary
// high-watermark file (§16.3, R61: two copies, the whole one with the
// higher sequence current). Every input is either refused as corruption
// naming the file, a position inside it and one of R35, R36, R38 (R61 and
// R38 for a high-watermark file), or accepted; what is accepted is
// canonical (the writer writes exactly those bytes for it: for R61, the
// current copy) and obeys R36 (R38: it names the partition read).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "mq/replica_checkpoint.h"

namespace {

void Check(const mq::Status& s, size_t size) {
  if (s.code() != mq::Code::kCorruption || s.file() != "f" || s.position() > size ||
      (s.rule() != "R35" && s.rule() != "R36" && s.rule() != "R38"))
    std::abort();
}

// R61 over the same bytes, read as partition t-0's high-watermark file.
void CheckHighWatermark(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = mq::DecodeHighWatermarkFile(bytes, "f", std::make_pair(std::string("t"), 0));
  if (!file) {
    const mq::Status& s = file.error();
    if (s.code() != mq::Code::kCorruption || s.file() != "f" || s.position() > size ||
        (s.rule() != "R61" && s.rule() != "R38"))
      std::abort();
    return;
  }
  if (size == 0) {
    if (file->entry || file->copy != -1) std::abort();
    return;
  }
  if (!file->entry || (file->copy != 0 && file->copy != 1) || file->entry->topic != "t" ||
      file->entry->partition != 0)
    std::abort();
  auto copy = mq::EncodeHighWatermarkCopy(*file->entry, file->sequence);
  if (!copy) std::abort();
  const size_t at = static_cast<size_t>(file->copy) * copy->size();
  if (at + copy->size() > size || std::memcmp(copy->data(), data + at, copy->size()) != 0)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto epochs = mq::DecodeLeaderEpochCheckpoint(bytes, "f");
  if (!epochs) {
    Check(epochs.error(), size);
  } else {
    if (size > 0 && epochs->Encode() != bytes) std::abort();
    for (size_t i = 1; i < epochs->entries().size(); ++i) {
      const auto& a = epochs->entries()[i - 1];
      const auto& b = epochs->entries()[i];
      if (b.epoch <= a.epoch || b.start_offset <= a.start_offset) std::abort();
    }
  }
  auto hw = mq::DecodeReplicationOffsetCheckpoint(bytes, "f", std::make_pair(std::string("t"), 0));
  if (!hw) {
    Check(hw.error(), size);
  } else if (size > 0) {
    if (!*hw || mq::EncodeReplicationOffsetCheckpoint(**hw) != bytes) std::abort();
  }
  CheckHighWatermark(data, size);
  return 0;
}
