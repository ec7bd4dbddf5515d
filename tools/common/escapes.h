// Delimiters given on the command line (-D, -K): backslash escapes turn a
// shell word into any byte string, so NUL, CR and multi-byte separators can
// be named without the shell's help.
#pragma once

#include <string>
#include <string_view>

#include "mq/status.h"

namespace mq::cli {

// Decodes `text`: `\n` newline, `\t` tab, `\r` carriage return, `\0` NUL,
// `\\` backslash, `\xNN` the byte with hex value NN (exactly two digits);
// every other byte stands for itself. Any other escape or a trailing lone
// backslash is a kInvalidArgument error that names `flag` (e.g.
// "-D/--delimiter") and the byte position in `text`. The one decoder of
// escapes for every flag (-D, -K, -f literals).
Result<std::string> DecodeEscapes(std::string_view text, std::string_view flag);
// The same for the part of a longer argument `whole` at [pos, pos + len):
// errors quote `whole` and give byte positions in it (-f decodes the
// literal parts of its format this way).
Result<std::string> DecodeEscapesIn(std::string_view whole, size_t pos, size_t len,
                                    std::string_view flag);

// DecodeEscapes for a delimiter, which must not be empty.
Result<std::string> ParseEscapes(std::string_view text, std::string_view flag);

// The inverse for messages: printable ASCII stays, everything else is
// written with the escapes above (`\xNN` for bytes without a short form).
std::string EscapeBytes(std::string_view bytes);

}  // namespace mq::cli
