// mq-consume's run: reads the chosen partitions through mq::Consumer and
// prints each message until a stop condition, a closed output, an error or
// a signal.
#pragma once

#include <csignal>

#include "options.h"

namespace mq::consume {

// Returns the exit status. `*interrupted` becoming non-zero (set by a
// signal handler) stops the run; it is checked at least every 250 ms while
// following.
int Run(const Flags& flags, Settings settings, const volatile std::sig_atomic_t* interrupted);

}  // namespace mq::consume
