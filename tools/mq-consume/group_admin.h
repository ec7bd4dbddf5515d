// mq-consume's consumer-group administration modes (Kafka's
// kafka-consumer-groups): --list, --describe, --reset-offsets, --delete and
// --delete-offsets.
// None of them consumes; each reads or changes the group's files
// (format-spec/group.md §14) and exits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli.h"

namespace mq::consume {

struct Flags;

struct AdminFlags {
  bool list = false;
  bool describe = false;
  bool reset = false;   // --reset-offsets
  bool remove = false;  // --delete
  bool delete_offsets = false;
  bool all_groups = false;
  bool all_topics = false;
  bool export_plan = false;  // --export
  std::optional<std::string> from_file;
  bool execute = false;
  bool to_earliest = false;
  bool to_latest = false;
  std::optional<int64_t> to_offset;
  std::optional<int64_t> shift_by;
  std::optional<std::string> to_datetime;
  std::optional<std::string> remove_member;  // --remove-member ID

  // One of the modes was asked for.
  bool any() const {
    return list || describe || reset || remove || delete_offsets || remove_member.has_value();
  }
};

void AddAdminFlags(CLI::App& app, AdminFlags* f);

// Runs the mode the flags ask for (f.admin.any() must hold) and returns the
// exit status; usage errors print `usage`'s first line (exit 64).
int RunAdmin(const Flags& f, const char* usage);

}  // namespace mq::consume
