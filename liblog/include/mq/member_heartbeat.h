// A running member's heartbeat (format-spec/group.md §14.5, R69): the file
// members/<member>.alive that says when the member last polled and by when
// it polls again, so that another member of its host can tell a stuck
// member (stopped by SIGSTOP or a debugger, or hung) from a slow one, and
// fence it by termination: SIGKILL through a pidfd, after which the kernel
// releases its locks and its partitions are taken over as after a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// R69 byte table constants (big-endian).
constexpr uint32_t kMemberHeartbeatMagic = 0x4D514748;  // "MQGH"
constexpr int16_t kMemberHeartbeatVersion = 1;
constexpr size_t kMemberHeartbeatSize = 40;
constexpr int64_t kMaxHeartbeatDeadlineMs = 604800000;  // a week
// members/<member>.alive (at most 255 bytes), written through
// members/<member>.tmp (the lease's staging name: both are written by
// their member only, one after the other) under the member's lock.
constexpr std::string_view kMemberHeartbeatSuffix = ".alive";
// R69: a heartbeat is overdue this long after its deadline ...
constexpr int64_t kHeartbeatMarginMs = 5000;
// ... and its member is fenced once the same heartbeat was overdue at a
// poll of the fencing member at least this long before.
constexpr int64_t kFenceConfirmMs = 1000;

struct MemberHeartbeat {
  int32_t pid = 0;          // >= 1
  int64_t start_time = 0;   // the process's start, clock ticks since boot (/proc/<pid>/stat 22)
  int64_t deadline_ms = 0;  // 1 to kMaxHeartbeatDeadlineMs
  int64_t last_poll = 0;    // CLOCK_MONOTONIC ms
  bool operator==(const MemberHeartbeat&) const = default;
};

std::vector<std::byte> EncodeMemberHeartbeat(const MemberHeartbeat& hb);
// R69: the heartbeat, or kCorruption naming `file`, the byte position and
// the rule (kUnsupported for a newer version).
Result<MemberHeartbeat> DecodeMemberHeartbeat(std::span<const std::byte> bytes,
                                              const std::string& file);
// By path (mq-inspect --verify).
Result<MemberHeartbeat> ReadMemberHeartbeatFile(const std::string& path);

// The host's CLOCK_MONOTONIC in ms (what lastPoll and `now` below are).
int64_t MonotonicNowMs();
// The start time of process `pid` in clock ticks since boot (field 22 of
// /proc/<pid>/stat); kNotFound when there is no such process.
Result<int64_t> ProcessStartTime(int32_t pid);
// This process's heartbeat, polled at `now_ms` (CLOCK_MONOTONIC).
Result<MemberHeartbeat> OwnHeartbeat(int64_t deadline_ms, int64_t now_ms);

// R69: the member neither polled nor gave up within its deadline plus
// kHeartbeatMarginMs: now_ms > last_poll + deadline_ms + kHeartbeatMarginMs.
bool HeartbeatOverdue(const MemberHeartbeat& hb, int64_t now_ms);
// What a member learned of another member's heartbeat at its own polls
// (R69): the heartbeat it last read, since when (its own clock) it has
// read that same one, and since when it has found it overdue (-1: not).
struct HeartbeatWatch {
  std::optional<MemberHeartbeat> seen;
  int64_t seen_since = 0;
  int64_t overdue_since = -1;
};
// R69: records `hb`, read at `now_ms` (CLOCK_MONOTONIC of the reader), in
// `watch` and says whether its member is stuck, to be fenced: the
// heartbeat is overdue, was already overdue when read at least
// kFenceConfirmMs earlier, and the reader has read that same heartbeat
// for longer than its deadline plus kHeartbeatMarginMs by its own clock
// (so that a writer whose clock reads differently, as in another time
// namespace, is judged by how long it has not written, never by its
// timestamps alone). A heartbeat that changed starts the watch again.
bool WatchHeartbeat(HeartbeatWatch* watch, const MemberHeartbeat& hb, int64_t now_ms);

// How often a running member rewrites its heartbeat (at its polls): a
// quarter of its deadline, at most a second, at least 1 ms.
int64_t HeartbeatRefreshMs(int64_t deadline_ms);

// mq-consume --exec: a member's deadline (R69) when each handler run is
// killed after `max_run_ms` (plus `kill_grace_ms` for it to exit), a failed
// message or batch is run up to `attempts` times, and the backoff between
// attempts starts at `retry_backoff_ms` and doubles up to `max_backoff_ms`:
// every attempt of one message or batch, with the backoffs between them.
// Clamped to 1 to kMaxHeartbeatDeadlineMs.
int64_t HandlerDeadlineMs(int64_t max_run_ms, int64_t kill_grace_ms, uint32_t attempts,
                          int64_t retry_backoff_ms, int64_t max_backoff_ms);

// What FenceStuckMember did.
enum class Fence {
  kKilled,     // SIGKILL sent to the process that wrote the heartbeat
  kOtherHost,  // the note names another host (or none): never touched
  kSelf,       // the heartbeat's pid is the caller's own
  kMismatch,   // the note's pid is not the heartbeat's
  kGone,       // no such process, or another one under its pid (start time differs)
  kDenied,     // not allowed to signal it (EPERM), or no pidfd on this kernel
};
// R69: kills the member whose heartbeat is `hb` (found overdue, with its
// lock held) and whose note names `note_host` and `note_pid`, when it is
// the process that wrote the heartbeat on this host (`own_host`: this
// host's name), never the caller: opens a pidfd on hb.pid, checks its start
// time, then sends SIGKILL through the pidfd, which cannot reach a later
// process with that pid. An error only for an unexpected failure.
Result<Fence> FenceStuckMember(const MemberHeartbeat& hb, std::string_view note_host,
                               std::optional<int64_t> note_pid, std::string_view own_host);

// members/<member>.alive in the members directory `members_dir`: written
// atomically (no fsync) by its member, which holds members/<member>.lock;
// read by anyone. Read: nullopt when there is none; kCorruption (R69) when
// it is not a heartbeat.
Status WriteMemberHeartbeat(int members_dir, std::string_view member_id, const MemberHeartbeat& hb,
                            FileSystem* fs = nullptr);
Result<std::optional<MemberHeartbeat>> ReadMemberHeartbeat(int members_dir,
                                                           std::string_view member_id,
                                                           FileSystem* fs = nullptr);
// Removes members/<member>.alive (its member leaving, or a prober removing
// a dead member). A missing one is no error.
Status RemoveMemberHeartbeat(int members_dir, std::string_view member_id, FileSystem* fs = nullptr);

}  // namespace mq
