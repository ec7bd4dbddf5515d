// GroupMember: membership by locks, assignment by mq/assignment.h
// (format-spec/group.md §14.6).
#include "mq/group_member.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "mq/assignment.h"
#include "mq/topic.h"

namespace mq {
namespace {

// Retries of a lock another process may hold for an instant.
constexpr int kRetrySleepMs = 10;

void SleepMs(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  ::nanosleep(&ts, nullptr);
}

template <typename F>
auto Retry(int wait_ms, F attempt) -> decltype(attempt()) {
  for (int waited = 0;; waited += kRetrySleepMs) {
    auto r = attempt();
    if (r || r.error().code() != Code::kBusy || waited >= wait_ms) return r;
    SleepMs(kRetrySleepMs);
  }
}

// Replaces the text of a held lock file (for people and --describe; not
// part of the format's rules). Best effort: a failure changes nothing else.
void WriteNote(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) return;
  (void)!::pwrite(fd, text.data(), text.size(), 0);
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

std::string DefaultMemberId() {
  std::string h = HostName();
  for (char& c : h)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      c = '_';
  if (h.size() > 200) h.resize(200);
  std::random_device rd;
  return fmt::format("{}-{}-{:08x}", h, ::getpid(), rd());
}

std::optional<OffsetCommit> HandBackCommit(std::string_view topic, int32_t partition,
                                           int64_t committed, int64_t handed_out,
                                           int32_t leader_epoch) {
  if (committed < 0 || handed_out < 0 || handed_out >= committed) return std::nullopt;
  OffsetCommit c;
  c.topic = std::string(topic);
  c.partition = partition;
  c.offset = handed_out;
  c.leader_epoch = leader_epoch;
  c.lower_from = committed;
  return c;
}

GroupMember::~GroupMember() { Leave(); }

GroupMember& GroupMember::operator=(GroupMember&& other) noexcept {
  if (this == &other) return *this;
  Leave();
  group_ = std::exchange(other.group_, nullptr);
  id_ = std::move(other.id_);
  topic_ = std::move(other.topic_);
  partitions_ = other.partitions_;
  group_lock_ = std::move(other.group_lock_);
  member_lock_ = std::move(other.member_lock_);
  ownership_ = std::move(other.ownership_);
  last_members_ = std::move(other.last_members_);
  return *this;
}

Result<GroupMember> GroupMember::Join(Group* group, std::string member_id,
                                      std::string topic, int32_t partitions, int wait_ms) {
  MQ_RETURN_IF_ERROR(ValidateName(member_id, "member id"));
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  GroupMember m;
  m.group_ = group;
  m.id_ = std::move(member_id);
  m.topic_ = std::move(topic);
  m.partitions_ = partitions;
  auto group_lock = Retry(wait_ms, [&] { return group->LockGroup(LockMode::kShared, LockWait::kTry); });
  if (!group_lock && group_lock.error().code() == Code::kBusy)
    return Status(Code::kBusy, fmt::format("group \"{}\" is being reset or deleted ({}/{} is "
                                           "locked exclusively)",
                                           group->name(), group->path(), kGroupLock));
  if (!group_lock) return group_lock.error();
  m.group_lock_ = std::move(*group_lock);
  auto member_lock = Retry(wait_ms, [&] { return group->LockMember(m.id_, LockWait::kTry); });
  if (!member_lock && member_lock.error().code() == Code::kBusy)
    return Status(Code::kBusy, fmt::format("member id \"{}\" is in use by a live member of group "
                                           "\"{}\"",
                                           m.id_, group->name()));
  if (!member_lock) return member_lock.error();
  m.member_lock_ = std::move(*member_lock);
  WriteNote(m.member_lock_.fd(), fmt::format("{} {} {}\n", m.id_, HostName(), ::getpid()));
  auto ownership = Ownership::Open(*group, m.topic_);
  if (!ownership) return ownership.error();
  m.ownership_ = std::move(*ownership);
  return m;
}

Result<MembershipView> GroupMember::Poll() {
  MembershipView view;
  auto files = group_->ListMemberFiles();
  if (!files) return files.error();
  // Our own file is there: so is the directory, opened once for the probes.
  auto members = OpenDirectoryAt(group_->dir_fd(), kGroupMembersDir, false, group_->fs());
  if (!members) return members.error();
  for (const std::string& id : *files) {
    if (id == id_) continue;
    auto alive =
        IsLocked(members->get(), fmt::format("{}.lock", id), LockMode::kShared, group_->fs());
    if (!alive) return alive.error();
    if (*alive) {
      view.members.push_back(id);
      continue;
    }
    auto removed = group_->RemoveDeadMember(id);
    if (!removed) return removed.error();
    view.removed_dead += *removed ? 1 : 0;
  }
  view.members.push_back(id_);
  std::sort(view.members.begin(), view.members.end());
  view.changed = !last_members_ || *last_members_ != view.members;
  view.target = AssignedTo(view.members, topic_, partitions_, id_);
  for (int32_t p : owned())
    if (!std::binary_search(view.target.begin(), view.target.end(), p)) view.release.push_back(p);
  for (int32_t p : view.target)
    if (!owns(p)) view.acquire.push_back(p);
  if (view.changed && view.members.front() == id_) MQ_RETURN_IF_ERROR(group_->RecordRebalance());
  last_members_ = view.members;
  return view;
}

Result<bool> GroupMember::TryAcquire(int32_t p) {
  if (p < 0 || p >= partitions_)
    return Status(Code::kInvalidArgument, fmt::format("partition {} out of range", p));
  return ownership_->TryOwn(p, id_);
}

Status GroupMember::Release(int32_t p) { return ownership_->Disown(p); }

std::vector<int32_t> GroupMember::owned() const {
  return ownership_ ? ownership_->owned() : std::vector<int32_t>{};
}

Result<FileLock> GroupMember::LockForHandler(int32_t p) const {
  // Not owns(p): another thread may be changing the owned set.
  if (!ownership_) return Status(Code::kInvalidArgument, "not a member");
  return ownership_->LockForHandler(p);
}

void GroupMember::Leave() {
  if (group_ == nullptr) return;
  ownership_.reset();
  if (member_lock_.is_open()) {
    // Still holding it: nobody else can be using the name.
    // Best effort: a file left behind is removed by the next Poll of any
    // member (RemoveDeadMember).
    auto members = OpenDirectoryAt(group_->dir_fd(), kGroupMembersDir, false, group_->fs());
    if (members) (void)group_->fs()->Unlink(members->get(), fmt::format("{}.lock", id_));
    member_lock_.Close();
  }
  group_lock_.Close();
  group_ = nullptr;
}

}  // namespace mq
