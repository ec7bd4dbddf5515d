// Whether a partition's published committed end is where a writer's
// recovery would leave its log (format-spec/segment.md §9.7, §12).
#pragma once

#include <string>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// Whether a writer opening the partition at `dir` now could keep batches
// past its published committed end (segment.md §9.7, §12), so that a
// reader, which stops at that end, may miss batches the log will hold.
// False when the state file is valid, was published on this boot (R27), no
// writer died inside a publication (odd generation), no truncation is
// pending (R40) and the segment holding the committed end is not shorter
// than it: a writer then cuts every byte past the end, and what a reader
// sees up to it is the log as recovered (a batch appended but never
// published is gone, whoever appends next). True otherwise (a reboot since
// the publication, R28; a missing or invalid state file, R24): open a
// writer first, which recovers. A missing directory, or one with neither a
// state file nor a segment (a topic's new partition), holds nothing (false).
// Writers appending meanwhile only publish more of the same log.
Result<bool> MayKeepPastCommittedEnd(const std::string& dir, FileSystem* fs = nullptr);

}  // namespace mq
