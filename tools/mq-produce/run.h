// One run of mq-produce: opens the data directory and topic (creating or
// describing it), takes the producer id, reads every input and appends.
#pragma once

#include "options.h"

namespace mq::produce {

// Returns the exit status (sysexits(3)); diagnostics go to stderr.
int Run(const Flags& flags, const Settings& settings);

}  // namespace mq::produce
