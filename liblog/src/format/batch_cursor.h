// A bounded sequential reader of one segment file's batches
// (format-spec/segment.md §6), shared by the writer's recovery, the
// segment's header walks, the partition reader, the scanner and
// verification.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mq/batch.h"
#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// Reads the batches of one segment file in order through a reused buffer
// that grows only to the largest batch seen (reads never map the segment).
class BatchCursor {
 public:
  enum class Step : uint8_t { kBatch, kEnd, kTorn };

  BatchCursor(const DecodeLimits& limits, size_t chunk_bytes = 1 << 20);
  // Reads `file` (named `name` in errors) up to byte `end`.
  void Reset(File* file, std::string name, uint64_t end);
  void set_end(uint64_t end) { end_ = end; }
  uint64_t end() const { return end_; }
  const std::string& name() const { return name_; }

  // Looks at the batch starting at `pos` (R1-R3, no CRC): kBatch with
  // `*header` and `*bytes` (the whole batch) filled, kEnd at `end`, kTorn
  // when the bytes stop before the header or the batch does. A garbage
  // header is a kCorruption error.
  Result<Step> Peek(uint64_t pos, BatchHeader* header, Bytes* bytes);
  // Peek + BatchView::Parse (adds the CRC, R4-R6).
  Result<Step> Read(uint64_t pos, BatchView* view);
  // What the resync scan knows about the batches before the damage: a
  // valid batch after it must continue the offsets (R10).
  struct ResyncHint {
    int64_t after_offset = -1;  // last offset of the last valid batch; -1: none
    int64_t segment_base = -1;  // base offset of the segment; -1: unknown
  };
  // The first position after `from` where a valid batch (R1-R6, and R10
  // against `hint`) starts, or nullopt. Used to tell a garbage tail (R21)
  // from a corrupt batch followed by data (R22). Always decides, in time
  // linear in `end - from` whatever the bytes: cheap header facts are
  // checked before any CRC, and a candidate's CRC comes from prefix CRCs
  // (R22), never from re-reading its bytes.
  Result<std::optional<uint64_t>> FindNextValid(uint64_t from, ResyncHint hint);
  Result<std::optional<uint64_t>> FindNextValid(uint64_t from) { return FindNextValid(from, {}); }

 private:
  Status Fill(uint64_t pos, size_t n);

  DecodeLimits limits_;
  size_t chunk_;
  size_t next_chunk_ = 64 << 10;
  File* file_ = nullptr;
  std::string name_;
  uint64_t end_ = 0;
  // Read into, never zeroed first (std::vector would zero every growth).
  std::unique_ptr<std::byte[]> buf_;
  size_t buf_cap_ = 0;
  uint64_t buf_pos_ = 0;
  size_t buf_len_ = 0;
};

}  // namespace mq
