// Offset order (format-spec/segment.md R10, R11, R26): the one checker that
// recovery, verification, the partition reader and the simulator's model
// call (offset_order.h).
#include <catch2/catch.hpp>

#include <climits>
#include <string>
#include <vector>

#include "storage/offset_order.h"

using namespace mq;

namespace {

BatchHeader Batch(int64_t base_offset, int32_t last_offset_delta = 0) {
  BatchHeader h;
  h.base_offset = base_offset;
  h.last_offset_delta = last_offset_delta;
  return h;
}

std::vector<std::string> Rules(const std::vector<OffsetBreach>& breaches) {
  std::vector<std::string> out;
  for (const OffsetBreach& b : breaches) out.emplace_back(b.rule);
  return out;
}

constexpr auto kGaps = OffsetPolicy::kGapsAllowed;
constexpr auto kContiguous = OffsetPolicy::kContiguous;

}  // namespace

TEST_CASE("R10 offset order: StepOf tells follows, goes back and skips", "[offset_order][R10]") {
  CHECK(StepOf(5, 5, kGaps) == OffsetStep::kFollows);
  CHECK(StepOf(5, 5, kContiguous) == OffsetStep::kFollows);
  CHECK(StepOf(9, 5, kGaps) == OffsetStep::kFollows);
  CHECK(StepOf(9, 5, kContiguous) == OffsetStep::kSkips);
  CHECK(StepOf(4, 5, kGaps) == OffsetStep::kGoesBack);
  CHECK(StepOf(4, 5, kContiguous) == OffsetStep::kGoesBack);
}

TEST_CASE("R10 offset order: a batch after the one before it passes", "[offset_order][R10]") {
  CHECK(BatchOffsetBreaches(Batch(100, 4), {100, -1, true}, kContiguous).empty());
  CHECK(BatchOffsetBreaches(Batch(105), {100, 104, false}, kContiguous).empty());
  CHECK(BatchOffsetBreaches(Batch(110), {100, 104, false}, kGaps).empty());
  // The first batch of a segment after the segment before's last offset.
  CHECK(BatchOffsetBreaches(Batch(100), {100, 99, true}, kContiguous).empty());
  // Nothing known about the segment (a file whose name is not a segment's).
  CHECK(BatchOffsetBreaches(Batch(7), {-1, -1, false}, kContiguous).empty());
}

TEST_CASE("R10 offset order: a batch not after the batch before it", "[offset_order][R10]") {
  auto b = BatchOffsetBreaches(Batch(104), {100, 104, false}, kGaps);
  REQUIRE(Rules(b) == std::vector<std::string>{"R10"});
  CHECK(b[0].detail == "baseOffset 104 not after the previous last offset 104");
  CHECK(Rules(BatchOffsetBreaches(Batch(101), {100, 104, false}, kContiguous)) ==
        std::vector<std::string>{"R10"});
}

TEST_CASE("R10 offset order: a batch below its segment's base", "[offset_order][R10]") {
  auto b = BatchOffsetBreaches(Batch(90), {100, -1, true}, kGaps);
  REQUIRE(Rules(b) == std::vector<std::string>{"R10"});
  CHECK(b[0].detail == "baseOffset 90 below the segment base 100");
  // Where offsets continue it also does not start at the base (a verifier
  // reports both; recovery stops at the first).
  CHECK(Rules(BatchOffsetBreaches(Batch(90), {100, -1, true}, kContiguous)) ==
        std::vector<std::string>{"R10", "R26"});
}

TEST_CASE("R10 offset order: a last offset too far from the segment base", "[offset_order][R10]") {
  const int64_t base = 1000;
  CHECK(BatchOffsetBreaches(Batch(base + INT32_MAX), {base, -1, false}, kGaps).empty());
  auto b = BatchOffsetBreaches(Batch(base + INT32_MAX, 1), {base, -1, false}, kGaps);
  REQUIRE(Rules(b) == std::vector<std::string>{"R10"});
  CHECK(b[0].detail == "lastOffset too far from the segment base");
}

TEST_CASE("R11 offset order: a segment's first batch not after the segment before",
          "[offset_order][R11]") {
  auto b = BatchOffsetBreaches(Batch(100), {100, 100, true}, kGaps);
  REQUIRE(Rules(b) == std::vector<std::string>{"R11"});
  CHECK(b[0].detail == "baseOffset 100 not after the previous last offset 100");
}

TEST_CASE("R11 offset order: a segment base not after the last offset before it",
          "[offset_order][R11]") {
  CHECK_FALSE(SegmentNotAfter(99, 100));
  CHECK_FALSE(SegmentNotAfter(-1, 0));  // nothing before it
  auto b = SegmentNotAfter(100, 100);
  REQUIRE(b);
  CHECK(std::string(b->rule) == "R11");
  CHECK(b->detail == "segment base 100 is not after the last offset 100 of the segment before");
  auto first = SegmentOffsetBreach(150, 100, "00000000000000000100.log", kContiguous);
  REQUIRE(first);
  CHECK(std::string(first->rule) == "R11");  // R11 before R26
}

TEST_CASE("R26 offset order: batches of a delete-policy log continue the offsets",
          "[offset_order][R26]") {
  auto b = BatchOffsetBreaches(Batch(107), {100, 104, false}, kContiguous);
  REQUIRE(Rules(b) == std::vector<std::string>{"R26"});
  CHECK(b[0].detail == "baseOffset 107 skips offsets 105..106");
  // The first batch of a segment starts at its base.
  auto first = BatchOffsetBreaches(Batch(102), {100, 99, true}, kContiguous);
  REQUIRE(Rules(first) == std::vector<std::string>{"R26"});
  CHECK(first[0].detail == "baseOffset 102 skips offsets 100..101");
  // With gaps allowed (compacted logs) both are fine.
  CHECK(BatchOffsetBreaches(Batch(107), {100, 104, false}, kGaps).empty());
  CHECK(BatchOffsetBreaches(Batch(102), {100, 99, true}, kGaps).empty());
}

TEST_CASE("R26 offset order: a segment starts one past the segment before", "[offset_order][R26]") {
  const std::string next = "00000000000000000110.log";
  CHECK_FALSE(SegmentDoesNotContinue(109, 110, next, kContiguous));
  CHECK_FALSE(SegmentDoesNotContinue(104, 110, next, kGaps));
  CHECK_FALSE(SegmentDoesNotContinue(-1, 110, next, kContiguous));  // nothing before it
  auto b = SegmentDoesNotContinue(104, 110, next, kContiguous);
  REQUIRE(b);
  CHECK(std::string(b->rule) == "R26");
  CHECK(b->detail ==
        "the segment ends at offset 104 but the next one, 00000000000000000110.log, starts at 110");
  CHECK_FALSE(SegmentOffsetBreach(104, 110, next, kGaps));
}
