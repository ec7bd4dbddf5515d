// Members' notes (mq/member_note.h, format-spec/group.md §14.5).
#include "mq/member_note.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include <fmt/format.h>

#include "mq/file.h"
#include "mq/topic.h"

namespace mq {

std::string FormatMemberNote(std::string_view id, std::string_view host, int64_t pid,
                             std::span<const std::string> topics) {
  std::vector<std::string> sorted(topics.begin(), topics.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string text = fmt::format("{} {} {}\ntopics", id, host, pid);
  for (const std::string& t : sorted) text += " " + t;
  text += "\n";
  return text;
}

std::optional<MemberNote> ParseMemberNote(std::string_view text) {
  if (text.empty() || text.back() != '\n') return std::nullopt;
  const size_t nl = text.find('\n');
  const std::string_view first = text.substr(0, nl);
  MemberNote note;
  const size_t a = first.find(' ');
  note.id = std::string(first.substr(0, a));
  if (!ValidateName(note.id, "member id").ok()) return std::nullopt;
  if (a != std::string_view::npos) {
    const size_t b = first.rfind(' ');
    if (b != a) {
      note.host = std::string(first.substr(a + 1, b - a - 1));
      const std::string_view pid = first.substr(b + 1);
      int64_t v = 0;
      auto [end, ec] = std::from_chars(pid.data(), pid.data() + pid.size(), v);
      if (ec == std::errc() && end == pid.data() + pid.size() && v > 0) note.pid = v;
    }
  }
  std::string_view rest = text.substr(nl + 1);
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 1);
    constexpr std::string_view kTopics = "topics";
    // The first "topics" line counts: a member that rewrites its note
    // (R64) may leave the tail of a longer old one after it for an instant.
    if (note.topics || !line.starts_with(kTopics) ||
        (line.size() > kTopics.size() && line[kTopics.size()] != ' '))
      continue;
    line.remove_prefix(kTopics.size());
    std::vector<std::string> topics;
    while (!line.empty()) {
      const size_t sp = line.find(' ');
      std::string t(line.substr(0, sp));
      line.remove_prefix(sp == std::string_view::npos ? line.size() : sp + 1);
      if (ValidateName(t, "topic").ok()) topics.push_back(std::move(t));
    }
    note.topics = std::move(topics);
  }
  return note;
}

std::optional<MemberNote> ReadMemberNote(int members_dir, std::string_view member_id) {
  auto fd = OpenRegularFileAt(members_dir, fmt::format("{}.lock", member_id), O_RDONLY);
  if (!fd) return std::nullopt;
  constexpr size_t kMaxNote = 64 << 10;
  std::string text;
  char buf[4096];
  while (text.size() < kMaxNote) {
    const ssize_t n = ::pread(fd->get(), buf, std::min(sizeof buf, kMaxNote - text.size()),
                              static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return ParseMemberNote(text);
}

}  // namespace mq
