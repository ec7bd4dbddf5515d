// A static member's session (format-spec/group.md §14.5, R65): the file
// members/<member>.lease that keeps a member's partitions assigned to it
// for its session timeout after it stopped (Kafka's group.instance.id with
// session.timeout.ms), so that a restart within it resumes exactly its
// partitions and nothing moves.
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

// R65 byte table constants (big-endian).
constexpr uint32_t kMemberLeaseMagic = 0x4D51474C;  // "MQGL"
constexpr int16_t kMemberLeaseVersion = 1;
constexpr size_t kMemberLeaseSize = 32;
constexpr int64_t kMaxSessionTimeoutMs = 86400000;  // a day
// members/<member>.lease (at most 255 bytes: a member id is at most 249),
// written through members/<member>.tmp under the member's lock.
constexpr std::string_view kMemberLeaseSuffix = ".lease";
constexpr std::string_view kMemberLeaseStagingSuffix = ".tmp";

struct MemberLease {
  int64_t session_timeout_ms = 0;  // 1 to kMaxSessionTimeoutMs
  int64_t last_seen = 0;           // ms since the epoch: the member was running then
  bool operator==(const MemberLease&) const = default;
};

std::vector<std::byte> EncodeMemberLease(const MemberLease& lease);
// R65: the lease, or kCorruption naming `file`, the byte position and the
// rule (kUnsupported for a newer version).
Result<MemberLease> DecodeMemberLease(std::span<const std::byte> bytes, const std::string& file);
// By path (mq-inspect --verify).
Result<MemberLease> ReadMemberLeaseFile(const std::string& path);

// Whether a member that is not running (its lock is free, or it is
// joining) still holds its partitions at `now_ms` (ms since the epoch):
// its lease names a session that has not ended, SessionEnd > now_ms. No
// lease (nullopt: none, or one that breaks R65): no session, its
// partitions are reassigned at once.
bool LeaseHolds(const std::optional<MemberLease>& lease, int64_t now_ms);
// When the session of `lease` ends (ms since the epoch): last_seen +
// session_timeout_ms, INT64_MAX for a last_seen that close to it (R65
// bounds it below only).
int64_t SessionEnd(const MemberLease& lease);
// How often a running member refreshes last_seen (at its polls): a quarter
// of its session timeout, at most a second, at least 1 ms.
int64_t LeaseRefreshMs(int64_t session_timeout_ms);

// members/<member>.lease in the members directory `members_dir`: written
// atomically (no fsync: the lease is liveness, like the locks) by its
// member, which holds members/<member>.lock; read by anyone. Read: nullopt
// when there is none; kCorruption (R65) when it is not a lease.
Status WriteMemberLease(int members_dir, std::string_view member_id, const MemberLease& lease,
                        FileSystem* fs = nullptr);
Result<std::optional<MemberLease>> ReadMemberLease(int members_dir, std::string_view member_id,
                                                   FileSystem* fs = nullptr);
// The lease as the other members and the admin modes take it: a lease
// that breaks R65 (kCorruption, or kUnsupported for a newer version) is no
// session, as no lease is (nullopt); other errors are returned.
Result<std::optional<MemberLease>> ReadSessionLease(int members_dir, std::string_view member_id,
                                                    FileSystem* fs = nullptr);
// Removes members/<member>.lease (by whoever holds the member's lock
// exclusively: the member leaving, or a prober removing a dead member whose
// session ended). A missing one is no error.
Status RemoveMemberLease(int members_dir, std::string_view member_id, FileSystem* fs = nullptr);

}  // namespace mq
