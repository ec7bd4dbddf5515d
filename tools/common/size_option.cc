#include "size_option.h"

#include <cstdint>
#include <limits>
#include <string>

#include "mq/units.h"

namespace mq::cli {

CLI::Validator SizeUnits() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        auto bytes = ParseSizeBytes(value, {}, 0, std::numeric_limits<int64_t>::max());
        if (!bytes) return bytes.error().message();
        value = std::to_string(*bytes);
        return {};
      },
      "SIZE");
}

CLI::Validator DurationUnits() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        auto ms = ParseDurationMs(value, {}, 0, std::numeric_limits<int64_t>::max());
        if (!ms) return ms.error().message();
        value = std::to_string(*ms);
        return {};
      },
      "MS");
}

}  // namespace mq::cli
