// Offset order (format-spec/segment.md R10, R11, R26), decided in one place
// for the readers of a log: recovery, verification, the partition reader
// and the simulator's model.
//
//  R10: inside a segment every batch starts after the last offset of the
//       batch before it, at or after the segment's base, and its last offset
//       fits the indexes' 32-bit relative offsets.
//  R11: a segment's base is after the last offset of the segment before.
//  R26: in a delete-policy log (OffsetPolicy::kContiguous) offsets also
//       continue: each batch starts one past the last offset before it, the
//       first batch of a segment at the segment's base.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/partition.h"

namespace mq {

// How a batch (or segment) starting at `base_offset` stands to `next`, the
// offset after everything before it (the least it may start at).
enum class OffsetStep : uint8_t {
  kFollows,   // base_offset == next, or after it where gaps are allowed
  kGoesBack,  // base_offset < next: R10 inside a segment, R11 across segments
  kSkips,     // base_offset > next in a kContiguous log: R26
};
OffsetStep StepOf(int64_t base_offset, int64_t next, OffsetPolicy policy);

// A batch or segment that breaks offset order: the rule and what is wrong.
struct OffsetBreach {
  const char* rule = "";
  std::string detail;
};

// Where a batch sits for the checks of R10/R11/R26 inside a segment.
struct BatchPlace {
  int64_t segment_base = -1;  // the base offset of its segment; -1: unknown
  int64_t prev_last = -1;     // the last offset before the batch; -1: none
  // The batch is the first of its segment, so `prev_last` (if any) is the
  // last offset of the segment before: a batch not after it breaks R11.
  bool first_in_segment = false;
};

// The breaches of batch `h` at `place`, in this order (recovery stops at the
// first, verification reports each): R10 below the segment base; R10 (R11
// for the first batch of a segment) not after `prev_last`, or else R26
// offsets skipped (kContiguous only; the first batch of a segment must start
// at its base); R10 last offset more than 2^31-1 past the segment base.
std::vector<OffsetBreach> BatchOffsetBreaches(const BatchHeader& h, const BatchPlace& place,
                                              OffsetPolicy policy);

// Across segments, the segment `next_base` (file `next_name`) after a
// segment whose last offset is `prev_last` (-1: no batch before it):
// R11 when its base is not after `prev_last`.
std::optional<OffsetBreach> SegmentNotAfter(int64_t prev_last, int64_t next_base);
// R26 (kContiguous only) when its base is not `prev_last` + 1.
std::optional<OffsetBreach> SegmentDoesNotContinue(int64_t prev_last, int64_t next_base,
                                                   const std::string& next_name,
                                                   OffsetPolicy policy);
// The first of both.
std::optional<OffsetBreach> SegmentOffsetBreach(int64_t prev_last, int64_t next_base,
                                                const std::string& next_name, OffsetPolicy policy);

}  // namespace mq
