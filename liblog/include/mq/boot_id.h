// A kernel boot id (format-spec/segment.md §9.7, R27): the 16 bytes of the
// UUID in /proc/sys/kernel/random/boot_id, in the order its text spells
// them. All zeros means unknown: it never matches, so nothing is trusted
// for it. The state file (R27) and a leader's claim (R53) record one.
#pragma once

#include <array>
#include <cstdint>

namespace mq {

using BootId = std::array<uint8_t, 16>;

}  // namespace mq
