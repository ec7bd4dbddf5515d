// Offset order: R10, R11, R26 (format-spec/segment.md).
#include "storage/offset_order.h"

#include <climits>

#include <fmt/format.h>

namespace mq {

OffsetStep StepOf(int64_t base_offset, int64_t next, OffsetPolicy policy) {
  if (base_offset < next) return OffsetStep::kGoesBack;
  if (base_offset > next && policy == OffsetPolicy::kContiguous) return OffsetStep::kSkips;
  return OffsetStep::kFollows;
}

std::vector<OffsetBreach> BatchOffsetBreaches(const BatchHeader& h, const BatchPlace& place,
                                              OffsetPolicy policy) {
  std::vector<OffsetBreach> out;
  const int64_t base = place.segment_base;
  if (base >= 0 && h.base_offset < base)
    out.push_back(
        {"R10", fmt::format("baseOffset {} below the segment base {}", h.base_offset, base)});
  if (h.base_offset <= place.prev_last) {
    out.push_back({place.first_in_segment ? "R11" : "R10",
                   fmt::format("baseOffset {} not after the previous last offset {}", h.base_offset,
                               place.prev_last)});
  } else if (base >= 0) {
    // The offset the batch must start at where offsets continue (R26). A
    // first batch below the segment base misses it too (and breaks R10).
    const int64_t next = place.first_in_segment || place.prev_last < 0 ? base : place.prev_last + 1;
    if (policy == OffsetPolicy::kContiguous && h.base_offset != next)
      out.push_back({"R26", fmt::format("baseOffset {} skips offsets {}..{}", h.base_offset, next,
                                        h.base_offset - 1)});
  }
  if (base >= 0 && h.last_offset() - base > INT32_MAX)
    out.push_back({"R10", "lastOffset too far from the segment base"});
  return out;
}

std::optional<OffsetBreach> SegmentNotAfter(int64_t prev_last, int64_t next_base) {
  if (prev_last < 0 ||
      StepOf(next_base, prev_last + 1, OffsetPolicy::kGapsAllowed) != OffsetStep::kGoesBack)
    return std::nullopt;
  return OffsetBreach{"R11", fmt::format("segment base {} is not after the last offset {} of the "
                                         "segment before",
                                         next_base, prev_last)};
}

std::optional<OffsetBreach> SegmentDoesNotContinue(int64_t prev_last, int64_t next_base,
                                                   const std::string& next_name,
                                                   OffsetPolicy policy) {
  if (prev_last < 0 || policy != OffsetPolicy::kContiguous ||
      StepOf(next_base, prev_last + 1, policy) == OffsetStep::kFollows)
    return std::nullopt;
  return OffsetBreach{"R26", fmt::format("the segment ends at offset {} but the next one, {}, "
                                         "starts at {}",
                                         prev_last, next_name, next_base)};
}

std::optional<OffsetBreach> SegmentOffsetBreach(int64_t prev_last, int64_t next_base,
                                                const std::string& next_name, OffsetPolicy policy) {
  if (auto b = SegmentNotAfter(prev_last, next_base)) return b;
  return SegmentDoesNotContinue(prev_last, next_base, next_name, policy);
}

}  // namespace mq
