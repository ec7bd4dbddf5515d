// A member's note (format-spec/group.md §14.5): the text of its lock file
// members/<member>.lock, which the member writes (GroupMember) and the
// group reads (Group: absent static members, R65; the status views).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mq {

// The text of members/<member>.lock (format-spec/group.md §14.5): a line
// "<member> <host> <pid>" for people, then a line "topics <topic>..." with
// the topics the member reads (its subscription, sorted), which the
// assignment of every other member reads (§14.6).
struct MemberNote {
  std::string id;
  std::string host;            // empty if the line names none
  std::optional<int64_t> pid;  // likewise
  // nullopt: no "topics" line (a member of an earlier mq, which reads one
  // topic and counts every live member in its assignment: taken to read
  // every topic, mq/assignment.h).
  std::optional<std::vector<std::string>> topics;
};
std::string FormatMemberNote(std::string_view id, std::string_view host, int64_t pid,
                             std::span<const std::string> topics);
// nullopt when `text` is no complete note: empty or cut short (its member
// has not written it yet: lines end with a newline), or a first line that
// does not start with a valid member id. Names in the "topics" line that
// break R12 are left out; lines of other kinds are ignored.
std::optional<MemberNote> ParseMemberNote(std::string_view text);
// Reads members/<member>.lock of the `members_dir` descriptor (at most
// 64 KiB) and parses it; nullopt when it is missing, unreadable or no
// complete note.
std::optional<MemberNote> ReadMemberNote(int members_dir, std::string_view member_id);

}  // namespace mq
