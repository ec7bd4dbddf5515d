// mq-consume -G GROUP: a member of a consumer group (mq-consume(1),
// CONSUMER GROUPS; format-spec/group.md §14). Reads the partitions the
// group assigns to it from their committed offsets, commits what it has
// handed over, and follows rebalances.
#pragma once

#include <csignal>

#include "options.h"

namespace mq::consume {

int RunGroup(const Flags& flags, Settings settings, const volatile std::sig_atomic_t* interrupted);

}  // namespace mq::consume
