// libFuzzer target: the replica checkpoints' text layout over arbitrary
// bytes (format-spec/replication.md §16, R35-R38). Every input is either
// refused as corruption naming the file, a position inside it and one of
// R35, R36, R38, or accepted; what is accepted is canonical (the writer
// writes exactly those bytes for it) and obeys R36.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "mq/replica_checkpoint.h"

namespace {

void Check(const mq::Status& s, size_t size) {
  if (s.code() != mq::Code::kCorruption || s.file() != "f" || s.position() > size ||
      (s.rule() != "R35" && s.rule() != "R36" && s.rule() != "R38"))
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
  return 0;
}
