// A running member's heartbeat and fencing by termination
// (format-spec/group.md §14.5, R69).
#include "mq/member_heartbeat.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "format/coding.h"
#include "groups/member_file_header.h"
#include "io/fence_seam.h"
#include "mq/crc32c.h"

namespace mq {

using namespace coding;

namespace {

// R69 field positions.
using member_file::kCrcAt;
using member_file::kMagicAt;
using member_file::kReservedAt;
using member_file::kVersionAt;
constexpr size_t kPidAt = 12;
constexpr size_t kStartAt = 16;
constexpr size_t kDeadlineAt = 24;
constexpr size_t kLastPollAt = 32;
using member_file::kCrcFrom;
static_assert(kLastPollAt + 8 == kMemberHeartbeatSize);
// A heartbeat read is at most this long: anything longer breaks R69 anyway.
constexpr uint64_t kMaxHeartbeatRead = 4096;

std::string HeartbeatName(std::string_view id) {
  return fmt::format("{}{}", id, kMemberHeartbeatSuffix);
}

// The staging name it shares with the lease (R65): both are written by
// their member only, never at once.
std::string StagingName(std::string_view id) { return fmt::format("{}.tmp", id); }

}  // namespace

std::vector<std::byte> EncodeMemberHeartbeat(const MemberHeartbeat& hb) {
  std::vector<std::byte> out(kMemberHeartbeatSize);
  std::byte* b = out.data();
  PutFixed32(b + kMagicAt, kMemberHeartbeatMagic);
  PutFixed16(b + kVersionAt, static_cast<uint16_t>(kMemberHeartbeatVersion));
  PutFixed16(b + kReservedAt, 0);
  PutFixed32(b + kPidAt, static_cast<uint32_t>(hb.pid));
  PutFixed64(b + kStartAt, static_cast<uint64_t>(hb.start_time));
  PutFixed64(b + kDeadlineAt, static_cast<uint64_t>(hb.deadline_ms));
  PutFixed64(b + kLastPollAt, static_cast<uint64_t>(hb.last_poll));
  PutFixed32(b + kCrcAt, Crc32c(std::span<const std::byte>(out).subspan(kCrcFrom)));
  return out;
}

Result<MemberHeartbeat> DecodeMemberHeartbeat(std::span<const std::byte> b,
                                              const std::string& file) {
  MQ_RETURN_IF_ERROR(member_file::CheckHeader(b, file, "R69", kMemberHeartbeatSize,
                                              kMemberHeartbeatMagic, kMemberHeartbeatVersion));
  const std::byte* h = b.data();
  MemberHeartbeat hb;
  hb.pid = static_cast<int32_t>(GetFixed32(h + kPidAt));
  hb.start_time = static_cast<int64_t>(GetFixed64(h + kStartAt));
  hb.deadline_ms = static_cast<int64_t>(GetFixed64(h + kDeadlineAt));
  hb.last_poll = static_cast<int64_t>(GetFixed64(h + kLastPollAt));
  if (hb.pid < 1) return Status::Corruption(file, kPidAt, "R69", fmt::format("pid {}", hb.pid));
  if (hb.start_time < 0)
    return Status::Corruption(file, kStartAt, "R69", fmt::format("start time {}", hb.start_time));
  if (hb.deadline_ms < 1 || hb.deadline_ms > kMaxHeartbeatDeadlineMs)
    return Status::Corruption(
        file, kDeadlineAt, "R69",
        fmt::format("deadline {} ms (1 to {})", hb.deadline_ms, kMaxHeartbeatDeadlineMs));
  if (hb.last_poll < 0)
    return Status::Corruption(file, kLastPollAt, "R69",
                              fmt::format("last-poll time {}", hb.last_poll));
  return hb;
}

Result<MemberHeartbeat> ReadMemberHeartbeatFile(const std::string& path) {
  const size_t slash = path.rfind('/');
  auto dir = OpenDirectory(slash == std::string::npos ? "." : path.substr(0, slash + 1), false);
  if (!dir) return dir.error();
  auto bytes = ReadFileAt(dir->get(), path.substr(slash + 1), kMaxHeartbeatRead);
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(path, kMemberHeartbeatSize, "R69",
                              fmt::format("more than {} bytes", kMemberHeartbeatSize));
  if (!bytes) return bytes.error();
  return DecodeMemberHeartbeat(*bytes, path);
}

int64_t MonotonicNowMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

Result<int64_t> ProcessStartTime(int32_t pid) {
  const std::string path = fmt::format("/proc/{}/stat", pid);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT || errno == ESRCH)
      return Status(Code::kNotFound, fmt::format("{}: no such process", path));
    return ErrnoStatus(path, errno);
  }
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields are counted from the last ')'; starttime is field 22.
  std::string text;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) return Status(Code::kNotFound, fmt::format("{}: gone", path));
    if (n < 0) return ErrnoStatus(path, errno);
    if (n == 0 || text.size() > 8192) break;
    text.append(buf, static_cast<size_t>(n));
  }
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return Status(Code::kNotFound, fmt::format("{}: empty", path));
  std::string_view rest = std::string_view(text).substr(paren + 1);
  // Field 3 (state) is the first after ')'; field 22 is the 20th.
  for (int field = 3; field <= 22; ++field) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const size_t end = std::min(rest.find(' '), rest.size());
    if (field == 22) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(rest.data(), rest.data() + end, v);
      if (ec != std::errc() || p != rest.data() + end || end == 0)
        return Status(Code::kNotFound, fmt::format("{}: no start time", path));
      return v;
    }
    rest.remove_prefix(end);
  }
  return Status(Code::kNotFound, fmt::format("{}: no start time", path));
}

Result<MemberHeartbeat> OwnHeartbeat(int64_t deadline_ms, int64_t now_ms) {
  // Read each time, not kept: a forked child is another process.
  auto start = ProcessStartTime(static_cast<int32_t>(::getpid()));
  if (!start) return start.error();
  MemberHeartbeat hb;
  hb.pid = static_cast<int32_t>(::getpid());
  hb.start_time = *start;
  hb.deadline_ms = std::clamp<int64_t>(deadline_ms, 1, kMaxHeartbeatDeadlineMs);
  hb.last_poll = now_ms;
  return hb;
}

bool HeartbeatOverdue(const MemberHeartbeat& hb, int64_t now_ms) {
  // Compared so as not to overflow: R69 bounds the deadline, not lastPoll.
  return now_ms - hb.deadline_ms - kHeartbeatMarginMs > hb.last_poll;
}

bool WatchHeartbeat(HeartbeatWatch* watch, const MemberHeartbeat& hb, int64_t now_ms) {
  if (!watch->seen || *watch->seen != hb) *watch = {hb, now_ms, -1};
  if (!HeartbeatOverdue(hb, now_ms)) {
    watch->overdue_since = -1;
    return false;
  }
  if (watch->overdue_since < 0) watch->overdue_since = now_ms;
  return now_ms - watch->overdue_since >= kFenceConfirmMs &&
         now_ms - watch->seen_since > hb.deadline_ms + kHeartbeatMarginMs;
}

int64_t HeartbeatRefreshMs(int64_t deadline_ms) {
  return std::clamp<int64_t>(deadline_ms / 4, 1, 1000);
}

int64_t HandlerDeadlineMs(int64_t max_run_ms, int64_t kill_grace_ms, uint32_t attempts,
                          int64_t retry_backoff_ms, int64_t max_backoff_ms) {
  // Saturating: every term is bounded by the clamp anyway.
  int64_t total = std::max<int64_t>(kill_grace_ms, 0);
  int64_t backoff = std::max<int64_t>(retry_backoff_ms, 0);
  const int64_t cap = std::max(max_backoff_ms, backoff);
  for (uint32_t i = 0; i < std::max<uint32_t>(attempts, 1); ++i) {
    total += std::max<int64_t>(max_run_ms, 0);
    if (i > 0) {
      total += backoff;
      backoff = std::min(backoff * 2, cap);
    }
    if (total >= kMaxHeartbeatDeadlineMs) return kMaxHeartbeatDeadlineMs;
  }
  return std::clamp<int64_t>(total, 1, kMaxHeartbeatDeadlineMs);
}

namespace fence_seam {

SendSignal send_signal = [](int pidfd, int sig) -> int {
#if defined(SYS_pidfd_send_signal)
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
#else
  (void)pidfd;
  (void)sig;
  errno = ENOSYS;
  return -1;
#endif
};

}  // namespace fence_seam

Result<Fence> FenceStuckMember(const MemberHeartbeat& hb, std::string_view note_host,
                               std::optional<int64_t> note_pid, std::string_view own_host) {
  if (note_host.empty() || note_host != own_host) return Fence::kOtherHost;
  if (hb.pid == static_cast<int32_t>(::getpid())) return Fence::kSelf;
  if (!note_pid || *note_pid != hb.pid) return Fence::kMismatch;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
  // The pidfd first: it names the process that has the pid now, and no
  // later one; the start time read after it tells whether that process is
  // the one that wrote the heartbeat (if it died in between, the signal
  // below finds it gone).
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, hb.pid, 0));
  if (pidfd < 0) {
    if (errno == ESRCH) return Fence::kGone;
    if (errno == ENOSYS || errno == EPERM) return Fence::kDenied;
    return ErrnoStatus(fmt::format("pidfd_open({})", hb.pid), errno);
  }
  UniqueFd fd(pidfd);
  auto start = ProcessStartTime(hb.pid);
  if (!start && start.error().code() == Code::kNotFound) return Fence::kGone;
  if (!start) return start.error();
  if (*start != hb.start_time) return Fence::kGone;
  if (fence_seam::send_signal(fd.get(), SIGKILL) != 0) {
    if (errno == ESRCH) return Fence::kGone;
    if (errno == EPERM || errno == ENOSYS) return Fence::kDenied;
    return ErrnoStatus(fmt::format("pidfd_send_signal({}, SIGKILL)", hb.pid), errno);
  }
  return Fence::kKilled;
#else
  return Fence::kDenied;
#endif
}

Status WriteMemberHeartbeat(int members_dir, std::string_view member_id, const MemberHeartbeat& hb,
                            FileSystem* fs) {
  const std::vector<std::byte> bytes = EncodeMemberHeartbeat(hb);
  return WriteFileAtomic(members_dir, HeartbeatName(member_id), bytes, fs, StagingName(member_id),
                         /*sync=*/false);
}

Result<std::optional<MemberHeartbeat>> ReadMemberHeartbeat(int members_dir,
                                                           std::string_view member_id,
                                                           FileSystem* fs) {
  const std::string name = HeartbeatName(member_id);
  auto bytes = ReadFileAt(members_dir, name, kMaxHeartbeatRead, fs);
  if (!bytes && bytes.error().code() == Code::kNotFound) return std::optional<MemberHeartbeat>();
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(PathAt(members_dir, name), kMemberHeartbeatSize, "R69",
                              fmt::format("more than {} bytes", kMemberHeartbeatSize));
  if (!bytes) return bytes.error();
  auto hb = DecodeMemberHeartbeat(*bytes, PathAt(members_dir, name));
  if (!hb) return hb.error();
  return std::optional<MemberHeartbeat>(*hb);
}

Status RemoveMemberHeartbeat(int members_dir, std::string_view member_id, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  Status s = fs->Unlink(members_dir, HeartbeatName(member_id));
  return s.code() == Code::kNotFound ? Status::Ok() : s;
}

}  // namespace mq
