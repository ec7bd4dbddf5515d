#include "position.h"

#include <charconv>

#include <fmt/format.h>

#include "format_string.h"

namespace mq::consume {
namespace {

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

Status Bad(std::string_view spec, std::string_view why) {
  return Status(Code::kInvalidArgument, fmt::format("--offset: invalid value '{}': {}", spec, why));
}

Result<StartPosition> ParseStart(std::string_view spec, std::string_view s) {
  using K = StartPosition::Kind;
  if (s == "beginning" || s == "earliest") return StartPosition{K::kBeginning, 0};
  if (s == "end" || s == "latest") return StartPosition{K::kEnd, 0};
  if (s == "stored") return Bad(spec, "'stored' needs a consumer group (-G GROUP)");
  if (s.starts_with("s@")) {
    auto t = ParseTime(s.substr(2));
    if (!t) return Bad(spec, "expected s@<milliseconds> or s@<ISO 8601 time>");
    return StartPosition{K::kTimestamp, *t};
  }
  if (s.starts_with("-")) {
    auto n = ParseInt(s.substr(1));
    if (!n || *n < 0) return Bad(spec, "expected -N, N a non-negative count");
    return StartPosition{K::kFromEnd, *n};
  }
  if (auto n = ParseInt(s)) {
    if (*n < 0) return Bad(spec, "offsets are non-negative");
    return StartPosition{K::kOffset, *n};
  }
  if (auto t = fmtstr::ParseIsoTime(s)) return StartPosition{K::kTimestamp, *t};
  return Bad(spec, "expected beginning, end, N, -N, s@TIME, e@TIME or an ISO 8601 time");
}

}  // namespace

std::optional<int64_t> ParseTime(std::string_view s) {
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos) return ParseInt(s);
  return fmtstr::ParseIsoTime(s);
}

StartPosition Positions::StartFor(int32_t partition, StartPosition fallback) const {
  if (auto it = per_partition.find(partition); it != per_partition.end()) return it->second;
  return all.value_or(fallback);
}

Result<Positions> ParsePositions(const std::vector<std::string>& specs) {
  Positions out;
  for (const std::string& spec : specs) {
    std::string_view s = spec;
    if (s.starts_with("e@")) {
      auto t = ParseTime(s.substr(2));
      if (!t) return Bad(spec, "expected e@<milliseconds> or e@<ISO 8601 time>");
      if (out.end_timestamp) return Bad(spec, "only one end time (e@) may be given");
      out.end_timestamp = *t;
      continue;
    }
    // "P:START" applies to one partition. ISO times also hold ':', but never
    // right after a run of digits at the start.
    std::optional<int32_t> partition;
    if (size_t colon = s.find(':');
        colon != std::string_view::npos && colon > 0 &&
        s.substr(0, colon).find_first_not_of("0123456789") == std::string_view::npos) {
      auto p = ParseInt(s.substr(0, colon));
      if (!p || *p > INT32_MAX) return Bad(spec, "partition out of range");
      partition = static_cast<int32_t>(*p);
      s = s.substr(colon + 1);
    }
    auto start = ParseStart(spec, s);
    if (!start) return start.error();
    if (partition) {
      if (!out.per_partition.emplace(*partition, *start).second)
        return Bad(spec, fmt::format("partition {} already has a start position", *partition));
    } else {
      if (out.all) return Bad(spec, "only one start position may be given for all partitions");
      out.all = *start;
    }
  }
  return out;
}

}  // namespace mq::consume
