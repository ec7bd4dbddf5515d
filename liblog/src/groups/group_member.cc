// GroupMember: membership by locks, assignment by mq/assignment.h
// (format-spec/group.md §14.6).
#include "mq/group_member.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/assignment.h"
#include "mq/member_lease.h"
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

// Replaces the note of a held lock file (§14.5): written over the old one
// from byte 0, then cut to its length, so that a reader never finds the
// file empty (a member being written, left out) while a note grows (R64);
// a rest of the old note after the new one is ignored by readers. Best
// effort: a failure changes nothing else.
void WriteNote(int fd, const std::string& text) {
  if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return;
  (void)!::ftruncate(fd, static_cast<off_t>(text.size()));
}

int64_t WallMs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
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

std::optional<int64_t> UnitHandledEnd(int64_t last_offset, bool handled,
                                      int64_t handled_alone_end) {
  if (last_offset < 0) return std::nullopt;
  if (handled) return last_offset + 1;
  if (handled_alone_end < 0) return std::nullopt;
  return std::min(handled_alone_end, last_offset + 1);
}

void LowerToCut(int64_t cut, PartitionOffsets* o) {
  if (o->handed > cut) {
    o->handed = cut;
    o->epoch = -1;
  }
  if (o->ahead > cut) {
    o->ahead = cut;
    o->ahead_epoch = -1;
  }
  if (o->committed > cut) {
    // The offset stored stays what a lowering commit must find there.
    if (o->lower_from < 0) o->lower_from = o->committed;
    o->committed = cut;
  }
}

std::optional<OffsetCommit> OutputAheadCommit(std::string_view topic, int32_t partition,
                                              int64_t committed, int64_t position,
                                              int32_t leader_epoch, int64_t lower_from) {
  if (position < 0 || position <= committed) return std::nullopt;
  OffsetCommit c;
  c.topic = std::string(topic);
  c.partition = partition;
  c.offset = position;
  c.leader_epoch = leader_epoch;
  c.lower_from = lower_from;
  return c;
}

GroupMember::~GroupMember() { Leave(); }

GroupMember& GroupMember::operator=(GroupMember&& other) noexcept {
  if (this == &other) return *this;
  Leave();
  group_ = std::exchange(other.group_, nullptr);
  id_ = std::move(other.id_);
  topics_ = std::move(other.topics_);
  group_lock_ = std::move(other.group_lock_);
  member_lock_ = std::move(other.member_lock_);
  ownership_ = std::move(other.ownership_);
  last_members_ = std::move(other.last_members_);
  last_subscriptions_ = std::move(other.last_subscriptions_);
  session_timeout_ms_ = other.session_timeout_ms_;
  lease_written_ms_ = other.lease_written_ms_;
  known_topics_ = std::move(other.known_topics_);
  heartbeat_deadline_ms_ = other.heartbeat_deadline_ms_;
  heartbeat_written_ms_ = other.heartbeat_written_ms_;
  watches_ = std::move(other.watches_);
  denied_ = std::move(other.denied_);
  fenced_waiting_ = std::move(other.fenced_waiting_);
  interrupt_ = other.interrupt_;
  return *this;
}

Result<GroupMember> GroupMember::Join(Group* group, std::string member_id, std::string topic,
                                      int32_t partitions, int wait_ms) {
  std::vector<TopicPartitions> topics{{std::move(topic), partitions}};
  return Join(group, std::move(member_id), std::move(topics), wait_ms);
}

Result<GroupMember> GroupMember::Join(Group* group, std::string member_id,
                                      std::vector<TopicPartitions> topics, int wait_ms) {
  MQ_RETURN_IF_ERROR(ValidateName(member_id, "member id"));
  for (const TopicPartitions& t : topics) MQ_RETURN_IF_ERROR(ValidateName(t.topic, "topic"));
  std::sort(topics.begin(), topics.end(),
            [](const TopicPartitions& a, const TopicPartitions& b) { return a.topic < b.topic; });
  for (size_t i = 1; i < topics.size(); ++i)
    if (topics[i].topic == topics[i - 1].topic)
      return Status(Code::kInvalidArgument,
                    fmt::format("topic \"{}\" named twice", topics[i].topic));
  GroupMember m;
  m.group_ = group;
  m.id_ = std::move(member_id);
  m.topics_ = std::move(topics);
  auto group_lock =
      Retry(wait_ms, [&] { return group->LockGroup(LockMode::kShared, LockWait::kTry); });
  if (!group_lock && group_lock.error().code() == Code::kBusy)
    return Status(Code::kBusy, fmt::format("group \"{}\" is being reset or deleted ({}/{} is "
                                           "locked exclusively)",
                                           group->name(), group->path(), format::kGroupLock));
  if (!group_lock) return group_lock.error();
  m.group_lock_ = std::move(*group_lock);
  auto member_lock = Retry(wait_ms, [&] { return group->LockMember(m.id_, LockWait::kTry); });
  if (!member_lock && member_lock.error().code() == Code::kBusy)
    return Status(Code::kBusy, fmt::format("member id \"{}\" is in use by a live member of group "
                                           "\"{}\"",
                                           m.id_, group->name()));
  if (!member_lock) return member_lock.error();
  m.member_lock_ = std::move(*member_lock);
  // A heartbeat an earlier holder of the id left is not this member's
  // (R69): gone before the note makes it live.
  {
    auto members = OpenDirectoryAt(group->dir_fd(), format::kGroupMembersDir, false, group->fs());
    if (!members) return members.error();
    MQ_RETURN_IF_ERROR(RemoveMemberHeartbeat(members->get(), m.id_, group->fs()));
  }
  // The subscription is in the note: the other members assign the topic
  // among the members that read it (§14.6). Until it is written, they
  // leave this member out.
  m.WriteOwnNote();
  for (const TopicPartitions& t : m.topics_) {
    auto ownership = Ownership::Open(*group, t.topic);
    if (!ownership) return ownership.error();
    m.ownership_.emplace(t.topic, std::move(*ownership));
  }
  return m;
}

void GroupMember::WriteOwnNote() const {
  std::vector<std::string> names;
  for (const TopicPartitions& t : topics_) names.push_back(t.topic);
  WriteNote(member_lock_.fd(), FormatMemberNote(id_, HostName(), ::getpid(), names));
}

Status GroupMember::Subscribe(std::span<const TopicPartitions> topics) {
  std::vector<TopicPartitions> added;
  for (const TopicPartitions& t : topics) {
    MQ_RETURN_IF_ERROR(ValidateName(t.topic, "topic"));
    if (ownership_.contains(t.topic) ||
        std::any_of(added.begin(), added.end(),
                    [&](const TopicPartitions& a) { return a.topic == t.topic; }))
      continue;
    added.push_back(t);
  }
  if (added.empty()) return Status::Ok();
  // Ownership files first: once the note names a topic, the member must be
  // able to take its partitions.
  for (const TopicPartitions& t : added) {
    auto ownership = Ownership::Open(*group_, t.topic);
    if (!ownership) return ownership.error();
    ownership_.emplace(t.topic, std::move(*ownership));
    topics_.push_back(t);
  }
  std::sort(topics_.begin(), topics_.end(),
            [](const TopicPartitions& a, const TopicPartitions& b) { return a.topic < b.topic; });
  WriteOwnNote();
  return Status::Ok();
}

Status GroupMember::Unsubscribe(std::string_view topic) {
  auto t = std::find_if(topics_.begin(), topics_.end(),
                        [&](const TopicPartitions& tp) { return tp.topic == topic; });
  if (t == topics_.end()) return Status::Ok();
  auto it = ownership_.find(std::string(topic));
  if (it != ownership_.end()) {
    for (int32_t p : it->second.owned()) MQ_RETURN_IF_ERROR(it->second.Disown(p));
    ownership_.erase(it);
  }
  topics_.erase(t);
  WriteOwnNote();
  return Status::Ok();
}

const std::string& GroupMember::topic() const {
  static const std::string kNone;
  return topics_.empty() ? kNone : topics_.front().topic;
}

Status GroupMember::KeepSession(int64_t session_timeout_ms, int64_t now_ms) {
  if (session_timeout_ms < 1 || session_timeout_ms > kMaxSessionTimeoutMs)
    return Status(Code::kInvalidArgument, fmt::format("session timeout {} ms: 1 to {}",
                                                      session_timeout_ms, kMaxSessionTimeoutMs));
  if (group_ == nullptr) return Status(Code::kInvalidArgument, "not a member");
  auto members = OpenDirectoryAt(group_->dir_fd(), format::kGroupMembersDir, false, group_->fs());
  if (!members) return members.error();
  const int64_t now = now_ms == kNoTimestamp ? WallMs() : now_ms;
  MQ_RETURN_IF_ERROR(
      WriteMemberLease(members->get(), id_, {session_timeout_ms, now}, group_->fs()));
  session_timeout_ms_ = session_timeout_ms;
  lease_written_ms_ = now;
  return Status::Ok();
}

Status GroupMember::KeepHeartbeat(int64_t deadline_ms, int64_t now_ms) {
  if (deadline_ms < 1 || deadline_ms > kMaxHeartbeatDeadlineMs)
    return Status(Code::kInvalidArgument, fmt::format("heartbeat deadline {} ms: 1 to {}",
                                                      deadline_ms, kMaxHeartbeatDeadlineMs));
  if (group_ == nullptr) return Status(Code::kInvalidArgument, "not a member");
  heartbeat_deadline_ms_ = deadline_ms;
  heartbeat_written_ms_ = 0;
  return WriteHeartbeat(now_ms == kNoTimestamp ? MonotonicNowMs() : now_ms);
}

Status GroupMember::WriteHeartbeat(int64_t mono) {
  auto hb = OwnHeartbeat(heartbeat_deadline_ms_, mono);
  if (!hb) return hb.error();
  auto members = OpenDirectoryAt(group_->dir_fd(), format::kGroupMembersDir, false, group_->fs());
  if (!members) return members.error();
  MQ_RETURN_IF_ERROR(WriteMemberHeartbeat(members->get(), id_, *hb, group_->fs()));
  heartbeat_written_ms_ = mono;
  return Status::Ok();
}

Status GroupMember::Beat(int64_t now_ms) {
  if (group_ == nullptr || heartbeat_deadline_ms_ == 0) return Status::Ok();
  const int64_t mono = now_ms == kNoTimestamp ? MonotonicNowMs() : now_ms;
  if (mono - heartbeat_written_ms_ < HeartbeatRefreshMs(heartbeat_deadline_ms_))
    return Status::Ok();
  return WriteHeartbeat(mono);
}

Result<UniqueFd> GroupMember::BeatAndList(int64_t mono, std::vector<std::string>* files) {
  // Our own heartbeat before anyone else's: of two members continued after
  // a common stop, the second to look finds the first one's (R69).
  MQ_RETURN_IF_ERROR(Beat(mono));
  auto listed = group_->ListMemberFiles();
  if (!listed) return listed.error();
  *files = std::move(*listed);
  // Our own file is there: so is the directory, opened once for the probes.
  return OpenDirectoryAt(group_->dir_fd(), format::kGroupMembersDir, false, group_->fs());
}

Status GroupMember::WhileLockedOut(int64_t mono_ms) {
  if (group_ == nullptr) return Status(Code::kInvalidArgument, "not a member");
  if (interrupt_ != nullptr && *interrupt_ != 0)
    return Status(Code::kBusy, fmt::format("interrupted while waiting for {}/{}", group_->path(),
                                           format::kGroupCommitLock));
  const int64_t mono = mono_ms == kNoTimestamp ? MonotonicNowMs() : mono_ms;
  std::vector<std::string> files;
  auto members = BeatAndList(mono, &files);
  if (!members) return members.error();
  for (const std::string& id : files) {
    if (id == id_) continue;
    auto alive =
        IsLocked(members->get(), fmt::format("{}.lock", id), LockMode::kShared, group_->fs());
    if (!alive) return alive.error();
    if (!*alive) continue;
    std::optional<MemberNote> note = ReadMemberNote(members->get(), id);
    if (!note || note->id != id) continue;
    MQ_RETURN_IF_ERROR(CheckStuck(members->get(), *note, mono, &watches_, &fenced_waiting_));
  }
  return Status::Ok();
}

namespace {

// Per topic `member` reads, its share in `assigned` (AssignSubscription):
// the subscribers, the target, and what to release and acquire of it.
std::vector<MembershipView::Topic> PlanTopics(const GroupMember& member,
                                              std::vector<TopicAssignment> assigned) {
  std::vector<MembershipView::Topic> out;
  for (TopicAssignment& a : assigned) {
    MembershipView::Topic t;
    t.topic = std::move(a.topic);
    t.subscribers = std::move(a.subscribers);
    t.target = std::move(a.partitions);
    for (int32_t p : member.owned(t.topic))
      if (!std::binary_search(t.target.begin(), t.target.end(), p)) t.release.push_back(p);
    for (int32_t p : t.target)
      if (!member.owns(t.topic, p)) t.acquire.push_back(p);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

Result<MembershipView> GroupMember::Poll(int64_t now_ms, int64_t mono_ms) {
  MembershipView view;
  view.fenced = std::exchange(fenced_waiting_, {});
  const int64_t now = now_ms == kNoTimestamp ? WallMs() : now_ms;
  const int64_t mono = mono_ms == kNoTimestamp ? MonotonicNowMs() : mono_ms;
  std::vector<std::string> files;
  auto members = BeatAndList(mono, &files);
  if (!members) return members.error();
  if (session_timeout_ms_ > 0 && now - lease_written_ms_ >= LeaseRefreshMs(session_timeout_ms_)) {
    MQ_RETURN_IF_ERROR(
        WriteMemberLease(members->get(), id_, {session_timeout_ms_, now}, group_->fs()));
    lease_written_ms_ = now;
  }
  std::vector<std::string> mine;
  for (const TopicPartitions& t : topics_) mine.push_back(t.topic);
  std::vector<Subscription> subscriptions{{id_, std::move(mine)}};
  MQ_RETURN_IF_ERROR(ScanMembers(members->get(), files, now, mono, &view, &subscriptions));
  view.members.push_back(id_);
  std::sort(view.members.begin(), view.members.end());
  std::sort(subscriptions.begin(), subscriptions.end(),
            [](const Subscription& a, const Subscription& b) { return a.member < b.member; });
  view.changed = !last_members_ || *last_members_ != view.members || !last_subscriptions_ ||
                 *last_subscriptions_ != subscriptions;
  view.topics = PlanTopics(*this, AssignSubscription(subscriptions, topics_, id_));
  if (!view.topics.empty()) {
    view.subscribers = view.topics.front().subscribers;
    view.target = view.topics.front().target;
    view.release = view.topics.front().release;
    view.acquire = view.topics.front().acquire;
  }
  // Counted by the running member with the smallest id.
  auto first_running = std::find_if(view.members.begin(), view.members.end(), [&](const auto& m) {
    return !std::binary_search(view.absent.begin(), view.absent.end(), m);
  });
  if (view.changed && *first_running == id_)
    MQ_RETURN_IF_ERROR(group_->RecordRebalance(kNoTimestamp, LockedOutWait()));
  last_members_ = view.members;
  last_subscriptions_ = std::move(subscriptions);
  return view;
}

Status GroupMember::ScanMembers(int members_dir, const std::vector<std::string>& files, int64_t now,
                                int64_t mono, MembershipView* view,
                                std::vector<Subscription>* subscriptions) {
  // A static member's session (R65): a lease that breaks R65 is none.
  auto in_session = [&](const std::string& id) -> Result<bool> {
    auto lease = ReadSessionLease(members_dir, id, group_->fs());
    if (!lease) return lease.error();
    return LeaseHolds(*lease, now);
  };
  // Its subscription: its note, or what an earlier Poll read (every topic
  // when none did).
  auto topics_of = [&](const std::string& id) -> std::optional<std::vector<std::string>> {
    std::optional<MemberNote> note = ReadMemberNote(members_dir, id);
    if (note && note->id == id) return note->topics;
    auto it = known_topics_.find(id);
    return it != known_topics_.end() ? it->second : std::nullopt;
  };
  std::map<std::string, std::optional<std::vector<std::string>>> known;
  std::map<std::string, HeartbeatWatch, std::less<>> watches;
  for (const std::string& id : files) {
    if (id == id_) continue;
    auto alive = IsLocked(members_dir, fmt::format("{}.lock", id), LockMode::kShared, group_->fs());
    if (!alive) return alive.error();
    if (*alive) {
      // A member whose note is not complete yet is joining: left out (not
      // counted, assigned nothing) until a later Poll reads its topics, so
      // that its join is one change, with its subscription known. A static
      // member restarting in its session is not joining: it stays.
      std::optional<MemberNote> note = ReadMemberNote(members_dir, id);
      if (!note || note->id != id) {
        auto held = in_session(id);
        if (!held) return held.error();
        if (!*held) continue;
        note = MemberNote{id, {}, {}, topics_of(id)};
      }
      view->members.push_back(id);
      subscriptions->push_back({id, note->topics});
      known[id] = note->topics;
      MQ_RETURN_IF_ERROR(CheckStuck(members_dir, *note, mono, &watches, &view->fenced));
      continue;
    }
    auto held = in_session(id);
    if (!held) return held.error();
    if (*held) {
      view->members.push_back(id);
      view->absent.push_back(id);
      known[id] = topics_of(id);
      subscriptions->push_back({id, known[id]});
      continue;
    }
    auto removed = group_->RemoveDeadMember(id);
    if (!removed) return removed.error();
    view->removed_dead += *removed ? 1 : 0;
  }
  known_topics_ = std::move(known);
  watches_ = std::move(watches);
  return Status::Ok();
}

Status GroupMember::CheckStuck(int members_dir, const MemberNote& note, int64_t mono,
                               std::map<std::string, HeartbeatWatch, std::less<>>* watches,
                               std::vector<MembershipView::Fenced>* fenced) {
  auto hb = ReadMemberHeartbeat(members_dir, note.id, group_->fs());
  // None, or one that breaks R69: never taken for stuck.
  if (!hb && (hb.error().code() == Code::kCorruption || hb.error().code() == Code::kUnsupported ||
              hb.error().code() == Code::kNotFound))
    return Status::Ok();
  if (!hb) return hb.error();
  if (!*hb) return Status::Ok();
  const MemberHeartbeat& h = **hb;
  auto known = watches_.find(note.id);
  HeartbeatWatch& watch = (*watches)[note.id] =
      known != watches_.end() ? known->second : HeartbeatWatch{};
  if (!WatchHeartbeat(&watch, h, mono)) return Status::Ok();
  auto outcome = FenceStuckMember(h, note.host, note.pid, HostName());
  if (!outcome) return outcome.error();
  const int64_t late = mono - (h.last_poll + h.deadline_ms);
  if (*outcome == Fence::kKilled) {
    fenced->push_back({note.id, h, late, *outcome});
    watches->erase(note.id);
  } else if (*outcome == Fence::kDenied) {
    auto said = denied_.find(note.id);
    if (said == denied_.end() || said->second != h.last_poll) {
      denied_[note.id] = h.last_poll;
      fenced->push_back({note.id, h, late, *outcome});
    }
  }
  return Status::Ok();
}

Result<bool> GroupMember::TryAcquire(std::string_view topic, int32_t p) {
  auto t = std::find_if(topics_.begin(), topics_.end(),
                        [&](const TopicPartitions& x) { return x.topic == topic; });
  auto it = ownership_.find(topic);
  if (t == topics_.end() || it == ownership_.end())
    return Status(Code::kInvalidArgument,
                  fmt::format("topic {} is not read by this member", topic));
  if (p < 0 || p >= t->partitions)
    return Status(Code::kInvalidArgument, fmt::format("partition {} out of range", p));
  return it->second.TryOwn(p, id_);
}

Status GroupMember::Release(std::string_view topic, int32_t p) {
  auto it = ownership_.find(topic);
  if (it == ownership_.end())
    return Status(Code::kInvalidArgument,
                  fmt::format("topic {} is not read by this member", topic));
  return it->second.Disown(p);
}

std::vector<int32_t> GroupMember::owned(std::string_view topic) const {
  auto it = ownership_.find(topic);
  return it == ownership_.end() ? std::vector<int32_t>{} : it->second.owned();
}

bool GroupMember::owns(std::string_view topic, int32_t p) const {
  auto it = ownership_.find(topic);
  return it != ownership_.end() && it->second.owns(p);
}

Result<FileLock> GroupMember::LockForHandler(std::string_view topic, int32_t p) const {
  // Not owns(p): another thread may be changing the owned set.
  auto it = ownership_.find(topic);
  if (it == ownership_.end()) return Status(Code::kInvalidArgument, "not a member");
  return it->second.LockForHandler(p);
}

void GroupMember::Leave() {
  if (group_ == nullptr) return;
  ownership_.clear();
  if (member_lock_.is_open()) {
    // Still holding it: nobody else can be using the name.
    // Best effort: a file left behind is removed by the next Poll of any
    // member (RemoveDeadMember). A static member's session starts now: its
    // lease says when it stopped, and its note stays for its subscription.
    auto members = OpenDirectoryAt(group_->dir_fd(), format::kGroupMembersDir, false, group_->fs());
    if (members && heartbeat_deadline_ms_ > 0)
      (void)RemoveMemberHeartbeat(members->get(), id_, group_->fs());
    if (members && session_timeout_ms_ > 0) {
      (void)WriteMemberLease(members->get(), id_, {session_timeout_ms_, WallMs()}, group_->fs());
    } else if (members) {
      (void)RemoveMemberLease(members->get(), id_, group_->fs());
      (void)group_->fs()->Unlink(members->get(), fmt::format("{}.lock", id_));
    }
    member_lock_.Close();
  }
  group_lock_.Close();
  group_ = nullptr;
}

}  // namespace mq
