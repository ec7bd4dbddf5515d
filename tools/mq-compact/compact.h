// mq-compact's options and run (manual: man/man1/mq-compact.1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mq::compact {

// The man page's SYNOPSIS and summary.
extern const char* const kUsage;

// Exit statuses of mq-compact besides the common ones (mq-compact(1)).
// A protected group kept unread data that retention would have deleted.
constexpr int kExitProtected = 3;

struct Options {
  std::string dir;
  std::vector<std::string> topics;  // none: every topic
  int32_t partition = -1;
  bool execute = false;
  int64_t delete_before = -1;               // --delete-before (needs one topic); -1: none
  bool protect_all = false;                 // --protect
  std::vector<std::string> protect_groups;  // --protect-group
  int64_t protect_max_ms = -1;              // --protect-max-ms; -1: no bound
  int64_t delete_delay_ms = -1;             // --delete-delay-ms (-1: the default)
  bool wait = false;                        // --wait for another run's lock
  bool quiet = false;
  // Tiered segments (retention.md §21): --tier-dir, --tier-after.
  std::string tier_dir;        // absolute once parsed; "": no moves
  std::string tier_after;      // a duration with units; "": the topic's tier.after.ms
  int64_t tier_after_ms = -1;  // parsed from tier_after (-1: the topic's)
};

void AddFlags(CLI::App& app, Options* o);
int Run(const Options& o);

}  // namespace mq::compact
