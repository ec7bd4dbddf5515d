// Rendering bytes for people: escaped text for the line output (--json
// is written with tools/common/json.h).
#pragma once

#include <fmt/format.h>

#include "mq/batch.h"

namespace mq::inspect {

// Appends `bytes` for a text line: printable UTF-8 as is; backslash as "\\";
// control characters, DEL and bytes that are not valid UTF-8 as "\xNN". The
// result never holds a newline, so one record stays on one line.
void AppendEscaped(fmt::memory_buffer* out, Bytes bytes);

}  // namespace mq::inspect
