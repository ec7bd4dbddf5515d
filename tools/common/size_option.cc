#include "size_option.h"

#include <cstdint>
#include <limits>
#include <string>

#include "mq/units.h"

namespace mq::cli {
namespace {

// A CLI11 transform through one of mq/units.h's parsers: the value becomes
// the number it names; a value it refuses is a parse error naming the option.
CLI::Validator Units(Result<int64_t> (*parse)(std::string_view, std::string_view, int64_t, int64_t),
                     const char* name) {
  return CLI::Validator(
      [parse](std::string& value) -> std::string {
        auto n = parse(value, {}, 0, std::numeric_limits<int64_t>::max());
        if (!n) return n.error().message();
        value = std::to_string(*n);
        return {};
      },
      name);
}

}  // namespace

CLI::Validator SizeUnits() { return Units(ParseSizeBytes, "SIZE"); }

CLI::Validator DurationUnits() { return Units(ParseDurationMs, "MS"); }

}  // namespace mq::cli
