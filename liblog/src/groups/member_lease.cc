// A static member's session record (format-spec/group.md §14.5, R65).
#include "mq/member_lease.h"

#include <fcntl.h>

#include <algorithm>

#include <fmt/format.h>

#include "format/coding.h"
#include "groups/member_file_header.h"
#include "mq/crc32c.h"

namespace mq {

using namespace coding;

namespace {

// R65 field positions.
using member_file::kCrcAt;
using member_file::kMagicAt;
using member_file::kReservedAt;
using member_file::kVersionAt;
constexpr size_t kReserved2At = 12;
constexpr size_t kTimeoutAt = 16;
constexpr size_t kLastSeenAt = 24;
using member_file::kCrcFrom;
static_assert(kLastSeenAt + 8 == kMemberLeaseSize);
// A lease read is at most this long: anything longer breaks R65 anyway.
constexpr uint64_t kMaxLeaseRead = 4096;

std::string LeaseName(std::string_view id) { return fmt::format("{}{}", id, kMemberLeaseSuffix); }

}  // namespace

std::vector<std::byte> EncodeMemberLease(const MemberLease& lease) {
  std::vector<std::byte> out(kMemberLeaseSize);
  std::byte* b = out.data();
  PutFixed32(b + kMagicAt, kMemberLeaseMagic);
  PutFixed16(b + kVersionAt, static_cast<uint16_t>(kMemberLeaseVersion));
  PutFixed16(b + kReservedAt, 0);
  PutFixed32(b + kReserved2At, 0);
  PutFixed64(b + kTimeoutAt, static_cast<uint64_t>(lease.session_timeout_ms));
  PutFixed64(b + kLastSeenAt, static_cast<uint64_t>(lease.last_seen));
  PutFixed32(b + kCrcAt, Crc32c(std::span<const std::byte>(out).subspan(kCrcFrom)));
  return out;
}

Result<MemberLease> DecodeMemberLease(std::span<const std::byte> b, const std::string& file) {
  MQ_RETURN_IF_ERROR(member_file::CheckHeader(b, file, "R65", kMemberLeaseSize, kMemberLeaseMagic,
                                              kMemberLeaseVersion));
  const std::byte* h = b.data();
  if (uint32_t reserved = GetFixed32(h + kReserved2At); reserved != 0)
    return Status::Corruption(file, kReserved2At, "R65",
                              fmt::format("reserved field {} is not 0", reserved));
  MemberLease lease;
  lease.session_timeout_ms = static_cast<int64_t>(GetFixed64(h + kTimeoutAt));
  lease.last_seen = static_cast<int64_t>(GetFixed64(h + kLastSeenAt));
  if (lease.session_timeout_ms < 1 || lease.session_timeout_ms > kMaxSessionTimeoutMs)
    return Status::Corruption(file, kTimeoutAt, "R65",
                              fmt::format("session timeout {} ms (1 to {})",
                                          lease.session_timeout_ms, kMaxSessionTimeoutMs));
  if (lease.last_seen < 0)
    return Status::Corruption(file, kLastSeenAt, "R65",
                              fmt::format("last-seen timestamp {}", lease.last_seen));
  return lease;
}

Result<MemberLease> ReadMemberLeaseFile(const std::string& path) {
  const size_t slash = path.rfind('/');
  auto dir = OpenDirectory(slash == std::string::npos ? "." : path.substr(0, slash + 1), false);
  if (!dir) return dir.error();
  auto bytes = ReadFileAt(dir->get(), path.substr(slash + 1), kMaxLeaseRead);
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(path, kMemberLeaseSize, "R65",
                              fmt::format("more than {} bytes", kMemberLeaseSize));
  if (!bytes) return bytes.error();
  return DecodeMemberLease(*bytes, path);
}

bool LeaseHolds(const std::optional<MemberLease>& lease, int64_t now_ms) {
  return lease && SessionEnd(*lease) > now_ms;
}

int64_t SessionEnd(const MemberLease& lease) {
  int64_t end = 0;
  if (__builtin_add_overflow(lease.last_seen, lease.session_timeout_ms, &end))
    return lease.session_timeout_ms < 0 ? INT64_MIN : INT64_MAX;
  return end;
}

int64_t LeaseRefreshMs(int64_t session_timeout_ms) {
  return std::clamp<int64_t>(session_timeout_ms / 4, 1, 1000);
}

Status WriteMemberLease(int members_dir, std::string_view member_id, const MemberLease& lease,
                        FileSystem* fs) {
  const std::vector<std::byte> bytes = EncodeMemberLease(lease);
  return WriteFileAtomic(members_dir, LeaseName(member_id), bytes, fs,
                         fmt::format("{}{}", member_id, kMemberLeaseStagingSuffix),
                         /*sync=*/false);
}

Result<std::optional<MemberLease>> ReadMemberLease(int members_dir, std::string_view member_id,
                                                   FileSystem* fs) {
  const std::string name = LeaseName(member_id);
  auto bytes = ReadFileAt(members_dir, name, kMaxLeaseRead, fs);
  if (!bytes && bytes.error().code() == Code::kNotFound) return std::optional<MemberLease>();
  if (!bytes && bytes.error().code() == Code::kTooLarge)
    return Status::Corruption(PathAt(members_dir, name), kMemberLeaseSize, "R65",
                              fmt::format("more than {} bytes", kMemberLeaseSize));
  if (!bytes) return bytes.error();
  auto lease = DecodeMemberLease(*bytes, PathAt(members_dir, name));
  if (!lease) return lease.error();
  return std::optional<MemberLease>(*lease);
}

Result<std::optional<MemberLease>> ReadSessionLease(int members_dir, std::string_view member_id,
                                                    FileSystem* fs) {
  auto lease = ReadMemberLease(members_dir, member_id, fs);
  if (!lease &&
      (lease.error().code() == Code::kCorruption || lease.error().code() == Code::kUnsupported))
    return std::optional<MemberLease>();
  return lease;
}

Status RemoveMemberLease(int members_dir, std::string_view member_id, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  Status s = fs->Unlink(members_dir, LeaseName(member_id));
  return s.code() == Code::kNotFound ? Status::Ok() : s;
}

}  // namespace mq
