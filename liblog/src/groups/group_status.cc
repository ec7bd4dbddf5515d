// A consumer group's description (mq/group_status.h): the offsets file
// against each partition's log, and the lock files probed for members and
// owners (format-spec/group.md §14.5).
#include "mq/group_status.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/assignment.h"
#include "mq/consumer.h"
#include "mq/file.h"
#include "mq/group_member.h"
#include "mq/lock.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "storage/recovery.h"

namespace mq {
namespace {

// The first line of a note (§14.5) at byte `at` of `fd`, within `max`
// bytes (at most 1 KiB); empty when there is no complete line (none, or
// being written).
std::string ReadNoteAt(int fd, uint64_t at, size_t max = 1024) {
  char buf[1024];
  ssize_t n;
  do n = ::pread(fd, buf, std::min(max, sizeof buf), static_cast<off_t>(at));
  while (n < 0 && errno == EINTR);
  if (n <= 0) return {};
  std::string_view text(buf, static_cast<size_t>(n));
  const size_t nl = text.find('\n');
  return nl == std::string_view::npos ? std::string() : std::string(text.substr(0, nl));
}

// partitions/<topic> (§14.5): partitions whose ownership or handler byte
// someone holds: (topic, p) -> owner id from the slot (empty when the owner
// has not written it yet). Only `topic` when given. A partitions/<topic>/
// directory of an earlier mq is not looked into. Adds to `read` every topic
// with such a file: a topic some member of the group has read.
Result<std::map<std::pair<std::string, int32_t>, std::string>> Owners(
    const Group& group, std::optional<std::string_view> topic, std::set<std::string>* read) {
  std::map<std::pair<std::string, int32_t>, std::string> out;
  auto partitions = OpenDirectoryAt(group.dir_fd(), format::kGroupPartitionsDir, false, group.fs());
  if (!partitions && partitions.error().code() == Code::kNotFound) return out;
  if (!partitions) return partitions.error();
  const std::string base = group.path() + "/" + format::kGroupPartitionsDir;
  auto topics = ListDirectory(partitions->get(), base, group.fs());
  if (!topics) return topics.error();
  constexpr uint64_t kSlots = static_cast<uint64_t>(kMaxGroupPartition) + 1;
  for (const auto& [t, is_dir] : *topics) {
    if (is_dir || !ValidateName(t, "topic").ok() || (topic && t != *topic)) continue;
    auto file = group.OpenOwnership(t, false);
    if (!file && file.error().code() == Code::kNotFound) continue;  // removed meanwhile
    if (!file) return file.error();
    read->insert(t);
    // One probe of every slot first: an idle group's file costs one call.
    auto any = file->IsRangeLocked(0, kSlots * format::kOwnershipSlotSize);
    if (!any) return any.error();
    for (uint64_t p = 0; *any && p < kSlots; ++p) {
      const uint64_t slot = p * format::kOwnershipSlotSize;
      auto held = file->IsRangeLocked(slot, format::kOwnershipSlotSize);
      if (!held) return held.error();
      if (!*held) continue;
      std::string id = ReadNoteAt(file->fd(), slot, format::kOwnershipSlotSize);
      if (!ValidateName(id, "member id").ok()) id.clear();
      out[{t, static_cast<int32_t>(p)}] = std::move(id);
    }
  }
  return out;
}

int64_t WallNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The running members and the absent static members in their session at
// `now_ms` (Group::AbsentMembers), sorted by id, and in `subscriptions`
// what the running members assign among (GroupMember::Poll): the members
// whose note is complete, the ones restarting in their session and the
// absent ones.
Result<std::vector<GroupMemberStatus>> Members(const Group& group, int64_t now_ms,
                                               std::vector<Subscription>* subscriptions) {
  std::vector<GroupMemberStatus> out;
  auto ids = group.ListMemberFiles();
  if (!ids) return ids.error();
  if (ids->empty()) return out;
  auto members = OpenDirectoryAt(group.dir_fd(), format::kGroupMembersDir, false, group.fs());
  if (!members && members.error().code() == Code::kNotFound) return out;
  if (!members) return members.error();
  auto absent = group.AbsentMembers(now_ms);
  if (!absent) return absent.error();
  for (const std::string& id : *ids) {
    GroupMemberStatus m;
    m.id = id;
    auto away = std::find_if(absent->begin(), absent->end(),
                             [&](const AbsentMember& a) { return a.id == id; });
    std::optional<MemberLease> lease;
    if (away != absent->end()) {
      m.absent = true;
      m.session_end = away->session_end();
      lease = away->lease;
    } else {
      auto alive = group.IsMemberAlive(id);
      if (!alive) return alive.error();
      if (!*alive) continue;
      // A lease that breaks R65 is none (a member reads it so).
      if (auto read = ReadSessionLease(members->get(), id, group.fs())) lease = *read;
    }
    if (lease) m.session_timeout_ms = lease->session_timeout_ms;
    std::optional<MemberNote> note = ReadMemberNote(members->get(), id);
    const bool complete = note && note->id == id;
    if (complete) {
      m.host = note->host;
      m.pid = note->pid;
      m.topics = note->topics;
    }
    // A running member whose note is not complete is joining (left out),
    // unless its session holds: restarting, it stays a member.
    if (complete || m.absent || LeaseHolds(lease, now_ms))
      subscriptions->push_back({id, complete ? note->topics : std::nullopt});
    // Not running: no process has that pid.
    if (m.absent) m.pid.reset();
    out.push_back(std::move(m));
  }
  return out;
}

void Place(GroupPartitionStatus* s) {
  if (!s->committed) return;
  const int64_t c = s->committed->offset;
  int64_t at = 0;
  s->position = PlaceCommitted(c, s->log, s->diverged_at, &at);
  if (s->position != CommittedPosition::kDiverged) s->diverged_at.reset();
  if (s->position == CommittedPosition::kBelowLogStart) s->lost = s->log.start - c;
  s->resume_at = at;
  s->lag = s->log.end - at;
}

}  // namespace

CommittedPosition PlaceCommitted(int64_t committed, const LogBounds& log,
                                 std::optional<int64_t> diverged, int64_t* resume_at) {
  if (committed < log.start) {
    *resume_at = log.start;
    return CommittedPosition::kBelowLogStart;
  }
  const int64_t in_log = std::min(committed, log.end);
  if (diverged && *diverged < in_log) {
    *resume_at = std::max(*diverged, log.start);
    return CommittedPosition::kDiverged;
  }
  *resume_at = in_log;
  return committed > log.end ? CommittedPosition::kAboveLogEnd : CommittedPosition::kInLog;
}

Result<std::optional<int64_t>> CommittedDivergence(const DataDir& dir, std::string_view topic,
                                                   int32_t partition,
                                                   const CommittedOffset& committed) {
  const std::string pdir = dir.PartitionDir(topic, partition);
  auto fd = OpenDirectory(pdir, false);
  if (!fd && fd.error().code() == Code::kNotFound) return std::optional<int64_t>();
  if (!fd) return fd.error();
  auto epochs = LeaderEpochCache::Load(fd->get());
  if (!epochs && epochs.error().code() == Code::kNotFound) {
    // No checkpoint (an unreplicated partition): the truncation history
    // (R59) says where the log was cut since the commit.
    auto history = ReadTruncations(fd->get(), nullptr, pdir);
    if (!history) return history.error();
    return CutBelowSince(*history, committed.offset, committed.commit_timestamp);
  }
  if (!epochs) return epochs.error();
  if (committed.leader_epoch < 0) return std::optional<int64_t>();
  // The latest epoch has not ended: it runs to the log end and past it.
  const EpochEndOffset end = epochs->EndOffsetFor(committed.leader_epoch, INT64_MAX);
  if (end.epoch < 0 || end.end_offset < 0 || end.end_offset >= committed.offset)
    return std::optional<int64_t>();
  return std::optional<int64_t>(end.end_offset);
}

Result<LogBounds> PartitionBounds(const DataDir& dir, const TopicConfig& config,
                                  std::string_view topic, int32_t partition) {
  ReadOptions options;
  options.limits = DataDir::DecodeLimitsFor(config);
  options.offsets = config.cleanup_policy == CleanupPolicy::kDelete ? OffsetPolicy::kContiguous
                                                                    : OffsetPolicy::kGapsAllowed;
  auto reader = PartitionReader::Open(dir.PartitionDir(topic, partition), options);
  if (!reader && reader.error().code() == Code::kNotFound) return LogBounds{};  // not written yet
  if (!reader) return reader.error();
  LogBounds b;
  b.start = (*reader)->log_start_offset();
  b.end = (*reader)->end_offset();
  b.start = std::min(b.start, b.end);
  return b;
}

Result<int64_t> OffsetForTimestamp(const DataDir& dir, const std::string& topic, int32_t partition,
                                   int64_t timestamp_ms) {
  // The consume loop's own timestamp start (the time index, then records
  // before the time passed over), stopping at the committed end.
  ConsumerOptions options;
  options.stop_at_end = true;
  options.max_open = 1;
  auto consumer = Consumer::Open(dir, topic, std::move(options));
  if (!consumer) return consumer.error();
  MQ_RETURN_IF_ERROR(
      (*consumer)->Assign(partition, {StartPosition::Kind::kTimestamp, timestamp_ms}));
  auto next = (*consumer)->Next();
  if (!next) return next.error();
  if (const ConsumedRecord* r = *next) return r->record.offset;
  auto bounds = PartitionBounds(dir, (*consumer)->config(), topic, partition);
  if (!bounds) return bounds.error();
  return bounds->end;
}

Status CheckReadableAt(const DataDir& dir, const std::string& topic, int32_t partition,
                       int64_t offset) {
  ConsumerOptions options;
  options.stop_at_end = true;
  options.max_open = 1;
  auto consumer = Consumer::Open(dir, topic, std::move(options));
  if (!consumer) return consumer.error();
  return CheckReadableAt(**consumer, partition, offset);
}

Status CheckReadableAt(Consumer& consumer, int32_t partition, int64_t offset) {
  MQ_RETURN_IF_ERROR(consumer.Assign(partition, {StartPosition::Kind::kOffset, offset}));
  auto next = consumer.Next();
  consumer.Unassign(partition);
  return next ? Status::Ok() : next.error();
}

Result<bool> HasLiveMembers(const Group& group) {
  return IsLocked(group.dir_fd(), format::kGroupLock, LockMode::kExclusive, group.fs());
}

namespace {

using PartitionKey = std::pair<std::string, int32_t>;
using TopicConfigs = std::map<std::string, std::optional<TopicConfig>>;
using OwnerMap = std::map<PartitionKey, std::string>;

// The config of topic `t` (nullopt: no such topic), read once per
// description and kept in `configs`.
Result<const std::optional<TopicConfig>*> ConfigOf(const DataDir& dir, TopicConfigs& configs,
                                                   const std::string& t) {
  auto c = configs.find(t);
  if (c == configs.end()) {
    auto config = dir.ReadTopic(t);
    if (!config && config.error().code() != Code::kNotFound) return config.error();
    c = configs.emplace(t, config ? std::optional<TopicConfig>(*config) : std::nullopt).first;
  }
  return &c->second;
}

// The rows: committed entries, owned partitions, and every partition of
// the group's topics (`topic`, or each one the group has committed, a
// member has read or a live member reads), so that a partition nobody
// has read shows its backlog. `topics` holds the topics members have read
// (Owners) and gets the others.
Status CollectRows(const DataDir& dir, const GroupDescription& d,
                   std::optional<std::string_view> topic, const OwnerMap& owners,
                   TopicConfigs& configs, std::set<std::string>* topics,
                   std::set<PartitionKey>* keys) {
  for (const CommittedOffset& e : d.state.offsets)
    if (!topic || e.topic == *topic) keys->insert({e.topic, e.partition});
  for (const auto& [key, id] : owners) keys->insert(key);
  for (const auto& [t, p] : *keys) topics->insert(t);
  for (const GroupMemberStatus& m : d.members)
    if (m.topics)
      for (const std::string& t : *m.topics)
        if (!topic || t == *topic) topics->insert(t);
  if (topic) *topics = {std::string(*topic)};
  for (const std::string& t : *topics) {
    auto config = ConfigOf(dir, configs, t);
    if (!config) return config.error();
    if (**config)
      for (int32_t p = 0; p < (**config)->partitions; ++p) keys->insert({t, p});
  }
  return Status::Ok();
}

// The partitions assigned to each absent member, as the running members
// assign each topic among its subscribers (§14.6, R64): added to the
// member's `held` and returned as partition -> member id.
OwnerMap AssignAbsentMembers(std::vector<GroupMemberStatus>& members,
                             const std::vector<Subscription>& subscriptions,
                             const std::set<std::string>& topics, const TopicConfigs& configs) {
  OwnerMap held;
  for (GroupMemberStatus& m : members) {
    if (!m.absent) continue;
    for (const std::string& t : topics) {
      auto c = configs.find(t);
      if (c == configs.end() || !c->second) continue;
      if (m.topics && std::find(m.topics->begin(), m.topics->end(), t) == m.topics->end()) continue;
      const TopicPartitions tp{t, c->second->partitions};
      for (const TopicAssignment& a : AssignSubscription(subscriptions, {&tp, 1}, m.id))
        for (int32_t p : a.partitions) {
          m.held.push_back({t, p});
          held[{t, p}] = m.id;
        }
    }
  }
  return held;
}

// Where a member resumes: a corrupt batch there stops it. A consumer per
// topic (kept in `readers`) reads from there (CheckReadableAt).
void CheckResume(const DataDir& dir, std::map<std::string, std::unique_ptr<Consumer>>& readers,
                 GroupPartitionStatus* s) {
  if (!s->resume_at || *s->resume_at >= s->log.end) return;
  auto& reader = readers[s->topic];
  if (!reader) {
    ConsumerOptions options;
    options.stop_at_end = true;
    options.max_open = 1;
    if (auto opened = Consumer::Open(dir, s->topic, std::move(options)))
      reader = std::move(*opened);
  }
  Status readable = reader ? CheckReadableAt(*reader, s->partition, *s->resume_at) : Status::Ok();
  if (readable.code() == Code::kCorruption) s->corrupt = readable;
}

// A row against its partition's log (`config`: the topic's, nullopt when
// there is no such topic): where the commit falls, the lag, a divergence,
// a corrupt batch where a member resumes.
void PlaceRow(const DataDir& dir, const std::optional<TopicConfig>& config,
              std::map<std::string, std::unique_ptr<Consumer>>& readers, GroupPartitionStatus* s) {
  if (!config) {
    s->position = CommittedPosition::kNoTopic;
    return;
  }
  if (s->partition >= config->partitions) {
    s->position = CommittedPosition::kNoPartition;
    return;
  }
  auto bounds = PartitionBounds(dir, *config, s->topic, s->partition);
  if (bounds && s->committed) {
    auto diverged = CommittedDivergence(dir, s->topic, s->partition, *s->committed);
    if (!diverged)
      bounds = diverged.error();
    else
      s->diverged_at = *diverged;
  }
  if (!bounds) {
    // One damaged partition does not hide the others' lag.
    s->position = CommittedPosition::kUnreadable;
    s->error = bounds.error();
    return;
  }
  s->log = *bounds;
  Place(s);
  CheckResume(dir, readers, s);
  if (!s->committed && !s->owner) {
    s->lag = s->log.end - s->log.start;
    s->unread = true;
  }
}

// DescribeGroup of `topic`, which the directory does not have (`missing`
// says so): kNotFound, as for a member of a deleted topic (R83). A topic
// the group still has offsets of was deleted or removed: said so, with how
// many offsets are left over and what removes them (the whole group's
// description shows them as no-topic rows); one it has none of is no
// topic at all.
Status NoTopicToDescribe(const GroupDescription& d, std::string_view topic, const Status& missing) {
  const auto left = std::count_if(d.state.offsets.begin(), d.state.offsets.end(),
                                  [&](const CommittedOffset& e) { return e.topic == topic; });
  if (left == 0) return missing;
  return Status(Code::kNotFound,
                fmt::format("group {}: {}: the topic was deleted or removed, nothing to describe; "
                            "the group's {} committed offset{} of it {} left over until "
                            "mq-consume -G {} --delete-offsets -t {} removes {}",
                            d.group, missing.message(), left, left == 1 ? "" : "s",
                            left == 1 ? "is" : "are", d.group, topic, left == 1 ? "it" : "them"));
}

}  // namespace

Result<GroupDescription> DescribeGroup(const DataDir& dir, const Group& group,
                                       std::optional<std::string_view> topic, int64_t now_ms) {
  if (now_ms == kNoTimestamp) now_ms = WallNowMs();
  GroupDescription d;
  d.group = group.name();
  TopicConfigs configs;
  Status no_topic;
  if (topic) {
    auto config = dir.ReadTopic(*topic);
    if (!config && config.error().code() == Code::kNotFound)
      no_topic = config.error();
    else if (!config)
      return config.error();
    else
      configs[std::string(*topic)] = *config;
  }
  auto state = group.Read();
  if (!state) return state.error();
  d.state = std::move(*state);
  if (!no_topic.ok()) return NoTopicToDescribe(d, *topic, no_topic);
  std::set<std::string> topics;  // the group's topics
  auto owners = Owners(group, topic, &topics);
  if (!owners) return owners.error();
  std::vector<Subscription> subscriptions;
  auto members = Members(group, now_ms, &subscriptions);
  if (!members) return members.error();
  d.members = std::move(*members);

  std::set<PartitionKey> keys;
  MQ_RETURN_IF_ERROR(CollectRows(dir, d, topic, *owners, configs, &topics, &keys));
  const OwnerMap held = AssignAbsentMembers(d.members, subscriptions, topics, configs);
  std::map<std::string, std::unique_ptr<Consumer>> readers;
  for (const auto& [t, p] : keys) {
    GroupPartitionStatus s;
    s.topic = t;
    s.partition = p;
    if (const CommittedOffset* e = d.state.Find(t, p)) s.committed = *e;
    if (auto it = owners->find({t, p}); it != owners->end())
      s.owner = it->second;
    else if (auto h = held.find({t, p}); h != held.end())
      s.held_for = h->second;
    auto config = ConfigOf(dir, configs, t);
    if (!config) return config.error();
    PlaceRow(dir, **config, readers, &s);
    if (s.lag) d.total_lag += *s.lag;
    d.partitions.push_back(std::move(s));
  }
  for (GroupMemberStatus& m : d.members)
    for (const auto& [key, id] : *owners)
      if (id == m.id) m.owned.push_back(key);
  return d;
}

std::string FormatOffsetPlan(std::span<const PlannedOffset> plan, bool with_group) {
  std::string out;
  for (const PlannedOffset& e : plan) {
    if (with_group) out += e.group + ",";
    out += fmt::format("{},{},{}\n", e.topic, e.partition, e.offset);
  }
  return out;
}

Result<std::vector<PlannedOffset>> ParseOffsetPlan(std::string_view text,
                                                   const std::string& source) {
  std::vector<PlannedOffset> plan;
  std::set<std::tuple<std::string, std::string, int32_t>> seen;
  size_t columns = 0;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto bad = [&](const std::string& what) {
      return Status(Code::kCorruption, fmt::format("{}:{}: offset plan: {} (expected "
                                                   "TOPIC,PARTITION,OFFSET or "
                                                   "GROUP,TOPIC,PARTITION,OFFSET)",
                                                   source, line_no, what));
    };
    std::vector<std::string_view> fields;
    for (size_t at = 0;;) {
      const size_t comma = line.find(',', at);
      fields.push_back(line.substr(at, comma == std::string_view::npos ? comma : comma - at));
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    if (fields.size() != 3 && fields.size() != 4)
      return bad(fmt::format("{} field(s)", fields.size()));
    if (columns != 0 && fields.size() != columns)
      return bad(fmt::format("{} fields after lines of {}", fields.size(), columns));
    columns = fields.size();
    PlannedOffset e;
    size_t i = 0;
    if (columns == 4) {
      e.group = std::string(fields[i++]);
      if (Status s = ValidateName(e.group, "group"); !s.ok()) return bad(s.message());
    }
    e.topic = std::string(fields[i++]);
    if (Status s = ValidateName(e.topic, "topic"); !s.ok()) return bad(s.message());
    const std::string_view p = fields[i++], o = fields[i++];
    auto [pend, pec] = std::from_chars(p.data(), p.data() + p.size(), e.partition);
    if (p.empty() || pec != std::errc() || pend != p.data() + p.size() || e.partition < 0 ||
        e.partition > kMaxGroupPartition)
      return bad(fmt::format("partition '{}' is not a number from 0 to {}", p, kMaxGroupPartition));
    auto [oend, oec] = std::from_chars(o.data(), o.data() + o.size(), e.offset);
    if (o.empty() || oec != std::errc() || oend != o.data() + o.size() || e.offset < 0)
      return bad(fmt::format("offset '{}' is not a number >= 0", o));
    if (!seen.insert({e.group, e.topic, e.partition}).second)
      return bad(fmt::format("{}-{} named twice", e.topic, e.partition));
    plan.push_back(std::move(e));
  }
  return plan;
}

}  // namespace mq
