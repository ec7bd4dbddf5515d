#include "group_admin.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <map>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "format_string.h"
#include "json.h"
#include "mq/group.h"
#include "mq/group_status.h"
#include "mq/topic.h"
#include "options.h"
#include "position.h"

namespace mq::consume {
namespace {

// Columns padded to their widest cell, two spaces apart (the last one not
// padded), like kafka-consumer-groups.
class Table {
 public:
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(cli::Output& out) const {
    std::vector<size_t> width;
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], r[i].size());
      }
    for (const auto& r : rows_) {
      std::string line;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
      }
      out.Print("{}\n", line);
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Dash(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "-"; }
std::string Dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string IsoTime(int64_t ms) {
  fmt::memory_buffer b;
  fmtstr::AppendIsoTime(b, ms);
  return fmt::to_string(b);
}

// A JSON string, null when absent or empty.
json::Writer& OptStr(json::Writer& j, const std::optional<std::string>& s) {
  return s && !s->empty() ? j.StrOrNull(*s) : j.Null();
}

const char* NoteOf(CommittedPosition p) {
  switch (p) {
    case CommittedPosition::kBelowLogStart:
      return "below-log-start";
    case CommittedPosition::kAboveLogEnd:
      return "above-log-end";
    case CommittedPosition::kDiverged:
      return "diverged";
    case CommittedPosition::kNoTopic:
      return "no-topic";
    case CommittedPosition::kNoPartition:
      return "no-partition";
    case CommittedPosition::kUnreadable:
      return "unreadable";
    case CommittedPosition::kNone:
    case CommittedPosition::kInLog:
      break;
  }
  return nullptr;
}

bool HasLog(const GroupPartitionStatus& s) {
  return s.position != CommittedPosition::kNoTopic &&
         s.position != CommittedPosition::kNoPartition &&
         s.position != CommittedPosition::kUnreadable;
}

// The flags that only mean something when consuming.
Status CheckNoConsumeFlags(const Flags& f, std::string_view mode) {
  const std::pair<bool, const char*> given[] = {
      {!f.offsets.empty(), "-o"},
      {f.count.has_value(), "-c"},
      {f.exit_at_end, "-e"},
      {f.print_key, "-k"},
      {f.key_delim.has_value(), "-K"},
      {f.delim.has_value(), "-D"},
      {f.null_delim, "-0"},
      {f.raw, "--raw"},
      {f.format.has_value(), "-f"},
      {f.null_text, "-Z"},
      {!f.header_filters.empty(), "--header-filter"},
      {f.skip_corrupt, "--skip-corrupt"},
  };
  for (const auto& [set, name] : given)
    if (set)
      return Status(Code::kInvalidArgument,
                    fmt::format("{} does not consume: {} does not apply", mode, name));
  return Status::Ok();
}

// -G is required unless `group_required` is false (--all-groups), and
// valid (R12); -t, when `topic` says so.
Status CheckGroupAndTopic(const Flags& f, std::string_view mode, bool topic_required,
                          bool topic_allowed, bool group_required = true) {
  if (!f.group && group_required)
    return Status(
        Code::kInvalidArgument,
        fmt::format("{} needs a group (-G GROUP{})", mode,
                    mode == "--describe" || mode == "--reset-offsets" ? " or --all-groups" : ""));
  if (f.group)
    if (Status s = ValidateName(*f.group, "group"); !s.ok())
      return Status(Code::kInvalidArgument, "--group: " + s.message());
  if (f.topic.empty() && topic_required)
    return Status(Code::kInvalidArgument, fmt::format("{} needs a topic (-t TOPIC)", mode));
  if (!f.topic.empty() && !topic_allowed)
    return Status(Code::kInvalidArgument, fmt::format("{} takes no topic (-t)", mode));
  if (f.topics.size() > 1)
    return Status(Code::kInvalidArgument,
                  fmt::format("{} takes one topic (-t TOPIC), not {}", mode, f.topics.size()));
  if (!f.topic.empty())
    if (Status s = ValidateName(f.topic, "topic"); !s.ok())
      return Status(Code::kInvalidArgument, "--topic: " + s.message());
  return Status::Ok();
}

// --- --list ----------------------------------------------------------------------------

int List(const Flags& f) {
  auto names = ListGroups(f.dir);
  if (!names) return cli::Fail(names.error());
  cli::Output out;
  for (const std::string& g : *names) {
    if (f.json)
      out.Write(json::Line().Str("group", g).Finish());
    else
      out.Print("{}\n", g);
  }
  return out.FinishExitCode();
}

// --- --describe ------------------------------------------------------------------------

// Everything was printed, but some partition's log could not be read (as
// --skip-corrupt's 1: complete except what stderr names).
constexpr int kExitDescribeIncomplete = 1;

const GroupMemberStatus* FindMember(const GroupDescription& d,
                                    const std::optional<std::string>& id) {
  if (!id) return nullptr;
  for (const auto& m : d.members)
    if (m.id == *id) return &m;
  return nullptr;
}

// Rows whose lag is not known (LAG -: nothing committed, the partition
// gone, the log unreadable): not in d.total_lag. A removed topic's rows
// are no lag at all (nothing is left to read; group.md §14.4).
size_t UnknownLags(const GroupDescription& d) {
  return static_cast<size_t>(std::count_if(
      d.partitions.begin(), d.partitions.end(),
      [](const auto& s) { return !s.lag && s.position != CommittedPosition::kNoTopic; }));
}

// The total lag as the text says it: never a 0 over rows whose lag is
// unknown ("-" when no row's lag is known).
std::string TotalLagText(const GroupDescription& d) {
  const size_t unknown = UnknownLags(d);
  if (unknown == 0) return std::to_string(d.total_lag);
  const std::string rows =
      fmt::format("{} partition{} with LAG -", unknown, unknown == 1 ? "" : "s");
  if (unknown == d.partitions.size()) return fmt::format("- (unknown: {})", rows);
  return fmt::format("{} (not counting {})", d.total_lag, rows);
}

// What the note under the table says of row `s` of group `group`'s
// description (its committed offset against the log), if anything.
std::optional<std::string> PositionNote(const GroupPartitionStatus& s, const std::string& group) {
  const std::string tp = fmt::format("{}-{}", s.topic, s.partition);
  switch (s.position) {
    case CommittedPosition::kBelowLogStart:
      return fmt::format(
          "{}: committed offset {} is below the log start {}: retention deleted {} offset(s) "
          "before the group read them; a member resumes at {}",
          tp, s.committed->offset, s.log.start, s.lost, s.log.start);
    case CommittedPosition::kAboveLogEnd:
      return fmt::format(
          "{}: committed offset {} is above the log end {} (the log was truncated); a member "
          "resumes at {}",
          tp, s.committed->offset, s.log.end, s.log.end);
    case CommittedPosition::kDiverged:
      if (s.committed->leader_epoch < 0)
        return fmt::format(
            "{}: the log was truncated to offset {} after offset {} was committed (its "
            "truncation history); a member resumes at {}",
            tp, *s.diverged_at, s.committed->offset, *s.resume_at);
      return fmt::format(
          "{}: committed offset {} follows a record of leader epoch {}, which ends at offset {} "
          "in the log (a failover cut the records after it, others may be at their offsets); a "
          "member resumes at {}",
          tp, s.committed->offset, s.committed->leader_epoch, *s.diverged_at, *s.resume_at);
    case CommittedPosition::kNoTopic:
      return fmt::format(
          "{}: topic {} does not exist (any more): no lag; its "
          "committed offset is left over until mq-consume -G {} "
          "--delete-offsets -t {} removes it",
          tp, s.topic, group, s.topic);
    case CommittedPosition::kNoPartition:
      return fmt::format("{}: topic {} has no partition {}", tp, s.topic, s.partition);
    case CommittedPosition::kUnreadable:  // said on standard error
    case CommittedPosition::kNone:
    case CommittedPosition::kInLog:
      break;
  }
  return std::nullopt;
}

// "topic-p,topic-p...".
std::string PartitionList(const std::vector<std::pair<std::string, int32_t>>& list) {
  std::string text;
  for (const auto& [topic, p] : list)
    text += fmt::format("{}{}-{}", text.empty() ? "" : ",", topic, p);
  return text;
}

// The members' part of the text: their count, a table, the static
// members' sessions (group.md §14.6).
void DescribeMembersText(const GroupDescription& d, cli::Output& out) {
  const auto absent = std::count_if(d.members.begin(), d.members.end(),
                                    [](const GroupMemberStatus& m) { return m.absent; });
  if (d.members.empty()) {
    out.Print("members: none live\n");
    return;
  }
  if (absent == 0)
    out.Print("members: {}\n", d.members.size());
  else
    out.Print("members: {} ({} absent)\n", d.members.size(), absent);
  Table mt;
  mt.Add({"CONSUMER-ID", "HOST", "PID", "TOPICS", "PARTITIONS"});
  for (const auto& m : d.members) {
    // "?": its note names no topics (an earlier mq) or is being written.
    const std::string topics = m.topics ? Dash(fmt::format("{}", fmt::join(*m.topics, ","))) : "?";
    mt.Add({m.id, Dash(m.host), Dash(m.pid), topics,
            Dash(PartitionList(m.absent ? m.held : m.owned))});
  }
  mt.Print(out);
  for (const auto& m : d.members) {
    if (m.absent)
      out.Print("static member {}: absent, its session ends at {} (timeout {} ms)\n", m.id,
                IsoTime(m.session_end), *m.session_timeout_ms);
    else if (m.session_timeout_ms)
      out.Print("static member {}: running (session timeout {} ms)\n", m.id, *m.session_timeout_ms);
  }
}

void DescribeText(const GroupDescription& d, cli::Output& out) {
  Table t;
  t.Add({"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
         "HOST", "PID", "NOTE"});
  std::vector<std::string> notes;
  for (const auto& s : d.partitions) {
    const GroupMemberStatus* m = FindMember(d, s.owner);
    // A partition waiting for an absent static member shows that member.
    std::string owner = s.owner ? (s.owner->empty() ? "?" : *s.owner) : s.held_for.value_or("-");
    const char* note = !s.corrupt.ok() ? "corrupt" : s.unread ? "unread" : NoteOf(s.position);
    if (!note && s.held_for) note = "absent";
    t.Add({d.group, s.topic, std::to_string(s.partition),
           Dash(s.committed ? std::optional<int64_t>(s.committed->offset) : std::nullopt),
           HasLog(s) ? std::to_string(s.log.end) : "-", Dash(s.lag), owner, m ? Dash(m->host) : "-",
           m ? Dash(m->pid) : "-", note ? note : "-"});
    if (auto n = PositionNote(s, d.group)) notes.push_back(std::move(*n));
    if (!s.corrupt.ok())
      notes.push_back(
          fmt::format("{}-{}: stopped: a member stops at offset {}, where a batch is "
                      "corrupt (said on standard error)",
                      s.topic, s.partition, *s.resume_at));
  }
  // An absent static member (group.md §14.6): a member still, its
  // partitions waiting for it until its session ends.
  for (const auto& m : d.members)
    if (m.absent)
      notes.push_back(fmt::format(
          "static member {} is absent (not running) until its session ends at {}: {}", m.id,
          IsoTime(m.session_end),
          m.held.empty() ? std::string("it is assigned no partition")
                         : fmt::format("its partitions {} wait for it, no other member takes "
                                       "them",
                                       PartitionList(m.held))));
  t.Print(out);
  for (const auto& n : notes) out.Print("note: {}\n", n);
  out.Print("\ntotal lag: {}\n", TotalLagText(d));
  DescribeMembersText(d, out);
  if (d.state.last_rebalance_timestamp == kNoTimestamp)
    out.Print("rebalances: {}\n", d.state.rebalances);
  else
    out.Print("rebalances: {} (last at {})\n", d.state.rebalances,
              IsoTime(d.state.last_rebalance_timestamp));
  std::string per;
  for (const auto& e : d.state.offsets)
    if (e.dead_letters > 0)
      per +=
          fmt::format("{}{}-{}: {}", per.empty() ? "" : ", ", e.topic, e.partition, e.dead_letters);
  if (per.empty())
    out.Print("dead letters: {}\n", d.state.dead_letters());
  else
    out.Print("dead letters: {} ({})\n", d.state.dead_letters(), per);
}

using Num = std::optional<int64_t>;

// A --describe --json line of row `s`.
std::string_view PartitionJson(const GroupDescription& d, const GroupPartitionStatus& s,
                               json::Line& j) {
  const GroupMemberStatus* m = FindMember(d, s.owner);
  const bool log = HasLog(s);
  const CommittedOffset* c = s.committed ? &*s.committed : nullptr;
  j.Str("type", "partition").Key("group").StrOrNull(d.group).Key("topic").StrOrNull(s.topic);
  j.Int("partition", s.partition);
  j.Key("current_offset").IntOrNull(c ? Num(c->offset) : std::nullopt);
  j.Key("log_start_offset").IntOrNull(log ? Num(s.log.start) : std::nullopt);
  j.Key("log_end_offset").IntOrNull(log ? Num(s.log.end) : std::nullopt);
  j.Key("lag").IntOrNull(s.lag).Key("resume_offset").IntOrNull(s.resume_at);
  j.Key("lost").IntOrNull(s.lost);
  OptStr(j.Key("consumer_id"), s.owner);
  OptStr(j.Key("held_for"), s.held_for);
  OptStr(j.Key("host"), m ? std::optional<std::string>(m->host) : std::nullopt);
  j.Key("pid").IntOrNull(m ? m->pid : std::nullopt);
  j.Key("note");
  if (const char* n = !s.corrupt.ok() ? "corrupt" : s.unread ? "unread" : NoteOf(s.position))
    j.Str(n);
  else if (s.held_for)
    j.Str("absent");
  else
    j.Null();
  j.Key("leader_epoch").IntOrNull(c ? Num(c->leader_epoch) : std::nullopt);
  j.Key("commit_timestamp").IntOrNull(c ? Num(c->commit_timestamp) : std::nullopt);
  OptStr(j.Key("committed_by"), c ? std::optional<std::string>(c->member_id) : std::nullopt);
  j.Int("dead_letters", c ? c->dead_letters : 0);
  j.Key("error");
  if (s.position == CommittedPosition::kUnreadable)
    j.StrOrNull(s.error.message());
  else if (!s.corrupt.ok())
    j.StrOrNull(s.corrupt.message());
  else
    j.Null();
  return j.Finish();
}

// Member `m` as an object of the summary's members array.
void MemberJson(const GroupMemberStatus& m, json::Writer& j) {
  j.BeginObject().Key("consumer_id").StrOrNull(m.id);
  OptStr(j.Key("host"), m.host);
  j.Key("pid").IntOrNull(m.pid);
  j.Key("topics");
  if (m.topics) {
    j.BeginArray();
    for (const std::string& t : *m.topics) j.StrOrNull(t);
    j.EndArray();
  } else {
    j.Null();
  }
  // An absent member's partitions are the ones waiting for it.
  const auto& partitions = m.absent ? m.held : m.owned;
  j.Key("partitions").BeginArray();
  for (const auto& [topic, partition] : partitions)
    j.BeginObject().Key("topic").StrOrNull(topic).Int("partition", partition).EndObject();
  j.EndArray();
  j.Bool("static", static_cast<bool>(m.session_timeout_ms));
  j.Key("session_timeout_ms").IntOrNull(m.session_timeout_ms);
  j.Bool("absent", m.absent);
  j.Key("session_end").IntOrNull(m.absent ? Num(m.session_end) : std::nullopt);
  j.EndObject();
}

void DescribeJson(const GroupDescription& d, cli::Output& out) {
  for (const auto& s : d.partitions) {
    json::Line j;
    out.Write(PartitionJson(d, s, j));
  }
  json::Line j;
  j.Str("type", "summary").Key("group").StrOrNull(d.group);
  j.Key("total_lag")
      .IntOrNull(!d.partitions.empty() && UnknownLags(d) == d.partitions.size() ? std::nullopt
                                                                                : Num(d.total_lag));
  j.Key("members").BeginArray();
  for (const auto& m : d.members) MemberJson(m, j);
  j.EndArray();
  j.Int("rebalances", d.state.rebalances);
  j.Key("last_rebalance_timestamp")
      .IntOrNull(d.state.last_rebalance_timestamp == kNoTimestamp
                     ? std::nullopt
                     : Num(d.state.last_rebalance_timestamp));
  j.Int("dead_letters", d.state.dead_letters()).Int("generation", d.state.generation);
  j.Key("update_timestamp")
      .IntOrNull(d.state.generation == 0 ? std::nullopt : Num(d.state.update_timestamp));
  out.Write(j.Finish());
}

// The groups a mode acts on: -G's, or with --all-groups every group of
// the data directory.
Result<std::vector<std::string>> SelectedGroups(const Flags& f) {
  if (!f.admin.all_groups) return std::vector<std::string>{*f.group};
  return ListGroups(f.dir);
}

int Describe(const Flags& f) {
  auto dir = DataDir::Open(f.dir, false);
  if (!dir) return cli::Fail(dir.error());
  auto names = SelectedGroups(f);
  if (!names) return cli::Fail(names.error());
  cli::Output out;
  // --all-groups: a group that cannot be described is said, and the others
  // are (the exit status is the first failure's).
  int failed = cli::kExitOk;
  bool unreadable = false;
  bool corrupt = false;
  bool first = true;
  for (const std::string& name : *names) {
    auto group = Group::Open(f.dir, name, false);
    auto d = group ? DescribeGroup(
                         *dir, *group,
                         f.topic.empty() ? std::nullopt : std::optional<std::string_view>(f.topic))
                   : Result<GroupDescription>(group.error());
    if (!d) {
      out.Flush();
      const int rc = cli::Fail(d.error());
      if (failed == cli::kExitOk) failed = rc;
      continue;
    }
    if (f.json) {
      DescribeJson(*d, out);
    } else {
      if (!first) out.Print("\n");
      DescribeText(*d, out);
    }
    first = false;
    // A partition whose log could not be read shows '-' for its log end and
    // lag; the rest is complete. Said here, and in the exit status.
    for (const auto& s : d->partitions) {
      if (!s.corrupt.ok()) {
        corrupt = true;
        out.Flush();
        cli::Warn(fmt::format("group {}: {}-{}: stopped at offset {}: {}", d->group, s.topic,
                              s.partition, *s.resume_at, s.corrupt.message()));
      }
      if (s.position != CommittedPosition::kUnreadable) continue;
      unreadable = true;
      out.Flush();
      cli::Warn(fmt::format("group {}: {}-{}: log end and lag unknown: {}", d->group, s.topic,
                            s.partition, s.error.message()));
    }
  }
  int rc = out.FinishExitCode();
  if (rc != cli::kExitOk) return rc;
  if (failed != cli::kExitOk) return failed;
  if (corrupt) return cli::kExitDataErr;
  return unreadable ? kExitDescribeIncomplete : rc;
}

// --- --reset-offsets -------------------------------------------------------------------

struct PlanRow {
  std::string group;
  std::string topic;
  int32_t partition = 0;
  std::optional<int64_t> current;
  int64_t target = 0;  // before clamping
  int64_t next = 0;    // after
  LogBounds log;
};

int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
  return a + b;
}

// --from-file: the whole plan file (at most 64 MiB), or standard input for "-".
Result<std::vector<PlannedOffset>> ReadPlanFile(const std::string& path) {
  constexpr size_t kMaxPlanBytes = 64u << 20;
  const std::string name = path == "-" ? "<stdin>" : path;
  UniqueFd fd(path == "-" ? ::dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(name, errno);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(name, errno);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxPlanBytes)
      return Status(Code::kTooLarge,
                    fmt::format("{}: an offset plan of more than {} bytes", name, kMaxPlanBytes));
  }
  return ParseOffsetPlan(text, name);
}

// One group's part of a reset: its lock (--execute), its committed offsets
// and the rows planned for it.
struct GroupPlan {
  std::string name;
  std::optional<Group> group;  // nullopt: a dry run for a group not created yet
  FileLock lock;
  GroupOffsets state;
  std::vector<PlanRow> rows;
};

// Topic configurations (members do not change them), read once each.
class TopicConfigs {
 public:
  explicit TopicConfigs(const DataDir& dir) : dir_(dir) {}

  Result<TopicConfig> Get(const std::string& topic) {
    if (auto it = configs_.find(topic); it != configs_.end()) return it->second;
    auto config = dir_.ReadTopic(topic);
    if (!config) return config.error();
    configs_.emplace(topic, *config);
    return *config;
  }

  // Partition `p` of `topic` exists (`flag`: where `p` was given).
  Status CheckPartition(const std::string& topic, int32_t p, std::string_view flag) {
    auto config = Get(topic);
    if (!config) return config.error();
    if (p < config->partitions) return Status::Ok();
    return Status(Code::kInvalidArgument,
                  fmt::format("{} {}: topic {} has {} partition(s), 0 to {}", flag, p, topic,
                              config->partitions, config->partitions - 1));
  }

 private:
  const DataDir& dir_;
  std::map<std::string, TopicConfig> configs_;
};

// A reset's topic and partitions (-t, -p, --from-file) exist: a plan for
// a topic that does not exist creates no group.
Status CheckResetPartitions(const Flags& f,
                            const std::optional<std::vector<PlannedOffset>>& from_file,
                            TopicConfigs& configs) {
  if (!f.topic.empty()) {
    if (auto config = configs.Get(f.topic); !config) return config.error();
    for (int32_t p : f.partitions)
      MQ_RETURN_IF_ERROR(configs.CheckPartition(f.topic, p, "--partition"));
  }
  if (from_file)
    for (const PlannedOffset& e : *from_file)
      MQ_RETURN_IF_ERROR(configs.CheckPartition(e.topic, e.partition, "--from-file: partition"));
  return Status::Ok();
}

// Every group is opened and, with --execute, locked before any plan is
// made or written: a group with a live member refuses the whole reset
// (exit 75) and nothing is changed. --execute creates a group that does
// not exist yet (group.md §14.4), so that a group can be positioned
// before its first member runs; a dry run plans for it as a group with
// no commits and creates nothing.
Result<std::vector<GroupPlan>> OpenGroupsForReset(const Flags& f,
                                                  const std::vector<std::string>& names) {
  const AdminFlags& a = f.admin;
  std::vector<GroupPlan> groups;
  for (const std::string& name : names) {
    GroupPlan g;
    g.name = name;
    auto group = Group::Open(f.dir, name, a.execute && !a.all_groups);
    if (!group && !(group.error().code() == Code::kNotFound && !a.execute && !a.all_groups))
      return group.error();
    if (group) g.group.emplace(std::move(*group));
    // --execute: group.lock first (R33), then the plan. Held, no member can
    // join or commit, so the offsets and log ends the plan is computed from
    // (--shift-by's committed offsets above all) are still current when it
    // is written.
    if (a.execute) {
      auto held = g.group->LockForReset();
      if (!held) return held.error();
      g.lock = std::move(*held);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// A partition to plan, with --from-file's offset for it.
using ResetScope = std::vector<std::pair<std::pair<std::string, int32_t>, std::optional<int64_t>>>;

// The partitions to plan for group `g`, sorted: --from-file's rows for
// it, or -p's partitions (every one without -p) of -t or, with
// --all-topics, of every topic the group has committed that still exists
// (the others are said: --delete-offsets removes their entries).
Result<ResetScope> ResetScopeOf(const Flags& f, const GroupPlan& g,
                                const std::optional<std::vector<PlannedOffset>>& from_file,
                                TopicConfigs& configs) {
  const AdminFlags& a = f.admin;
  ResetScope scope;
  if (from_file) {
    for (const PlannedOffset& e : *from_file)
      if (e.group.empty() || e.group == g.name) scope.push_back({{e.topic, e.partition}, e.offset});
    std::sort(scope.begin(), scope.end());
    return scope;
  }
  std::vector<std::string> topics;
  if (a.all_topics) {
    for (const CommittedOffset& e : g.state.offsets)
      if (topics.empty() || topics.back() != e.topic) topics.push_back(e.topic);
  } else {
    topics.push_back(f.topic);
  }
  for (const std::string& t : topics) {
    auto config = configs.Get(t);
    if (!config && config.error().code() == Code::kNotFound && a.all_topics) {
      if (!f.quiet)
        cli::Warn(fmt::format("group {}: topic {} does not exist (any more): left out", g.name, t));
      continue;
    }
    if (!config) return config.error();
    std::vector<int32_t> partitions(f.partitions.begin(), f.partitions.end());
    if (partitions.empty())
      for (int32_t p = 0; p < config->partitions; ++p) partitions.push_back(p);
    std::sort(partitions.begin(), partitions.end());
    partitions.erase(std::unique(partitions.begin(), partitions.end()), partitions.end());
    for (int32_t p : partitions) scope.push_back({{t, p}, std::nullopt});
  }
  std::sort(scope.begin(), scope.end());
  return scope;
}

// Where row `r` (its current offset and log bounds read) is to go:
// --from-file's offset, or the --to-* / --shift-by target (--to-datetime:
// `datetime`), before clamping to the log.
Result<int64_t> ResetTarget(const Flags& f, const DataDir& dir, const PlanRow& r,
                            std::optional<int64_t> file_offset, std::optional<int64_t> datetime) {
  const AdminFlags& a = f.admin;
  if (file_offset) return *file_offset;
  if (a.to_earliest) return r.log.start;
  if (a.to_latest) return r.log.end;
  if (a.to_offset) return *a.to_offset;
  if (a.shift_by) {
    if (!r.current)
      return Status(Code::kInvalidArgument,
                    fmt::format("--shift-by: group \"{}\" has no committed offset "
                                "for {}-{} to shift from (leave it out with -p, or "
                                "use a --to-* target)",
                                r.group, r.topic, r.partition));
    return SaturatingAdd(*r.current, *a.shift_by);
  }
  return OffsetForTimestamp(dir, r.topic, r.partition, *datetime);
}

// Group `g`'s rows: its committed offsets read, then a row per partition
// of its scope.
Status PlanGroup(const Flags& f, const DataDir& dir,
                 const std::optional<std::vector<PlannedOffset>>& from_file,
                 std::optional<int64_t> datetime, TopicConfigs& configs, GroupPlan* g) {
  if (g->group) {
    auto state = g->group->Read();
    if (!state) return state.error();
    g->state = std::move(*state);
  }
  auto scope = ResetScopeOf(f, *g, from_file, configs);
  if (!scope) return scope.error();
  for (const auto& [tp, file_offset] : *scope) {
    const auto& [topic, p] = tp;
    auto config = configs.Get(topic);
    if (!config) return config.error();
    PlanRow r;
    r.group = g->name;
    r.topic = topic;
    r.partition = p;
    if (const CommittedOffset* e = g->state.Find(topic, p)) r.current = e->offset;
    auto bounds = PartitionBounds(dir, *config, topic, p);
    if (!bounds) return bounds.error();
    r.log = *bounds;
    auto target = ResetTarget(f, dir, r, file_offset, datetime);
    if (!target) return target.error();
    r.target = *target;
    r.next = std::clamp(r.target, r.log.start, r.log.end);
    g->rows.push_back(r);
  }
  return Status::Ok();
}

// --execute: each group's rows committed, under its lock.
Status CommitPlans(std::vector<GroupPlan>& groups) {
  for (GroupPlan& g : groups) {
    std::vector<OffsetCommit> commits;
    for (const PlanRow& r : g.rows)
      commits.push_back({r.topic, r.partition, r.next, kNoLeaderEpoch, 0});
    if (commits.empty()) continue;
    MQ_RETURN_IF_ERROR(g.group->Commit(commits, {}, CommitKind::kReset, kNoTimestamp, &g.lock));
  }
  return Status::Ok();
}

// A dry run says which groups --execute would be refused for.
void WarnRefusals(const std::vector<GroupPlan>& groups) {
  for (const GroupPlan& g : groups) {
    if (!g.group) continue;
    auto live = HasLiveMembers(*g.group);
    if (live && *live) {
      cli::Warn(
          fmt::format("group \"{}\" has live members: --execute would be refused (exit "
                      "75) until they stop",
                      g.name));
      continue;
    }
    // An absent static member in its session refuses --execute as well.
    if (Status s = g.group->CheckNoAbsentMembers(); s.code() == Code::kBusy)
      cli::Warn(fmt::format("--execute would be refused (exit 75): {}", s.message()));
  }
}

// The plan: exported (--export), a JSON line per row (--json), or a table.
void PrintPlans(const Flags& f, const std::vector<GroupPlan>& groups, cli::Output& out) {
  const AdminFlags& a = f.admin;
  if (a.export_plan) {
    // kafka-consumer-groups --export: topic,partition,offset; with
    // --all-groups the group first.
    std::vector<PlannedOffset> plan;
    for (const GroupPlan& g : groups)
      for (const PlanRow& r : g.rows) plan.push_back({r.group, r.topic, r.partition, r.next});
    out.Write(FormatOffsetPlan(plan, a.all_groups));
    return;
  }
  Table t;
  t.Add({"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "NOTE"});
  for (const GroupPlan& g : groups) {
    for (const PlanRow& r : g.rows) {
      const char* note = r.target < r.next   ? "clamped-to-log-start"
                         : r.target > r.next ? "clamped-to-log-end"
                                             : nullptr;
      if (f.json) {
        json::Line j;
        j.Key("group").StrOrNull(r.group).Key("topic").StrOrNull(r.topic);
        j.Int("partition", r.partition).Key("current_offset").IntOrNull(r.current);
        j.Int("new_offset", r.next).Int("log_start_offset", r.log.start);
        j.Int("log_end_offset", r.log.end);
        j.Key("note");
        if (note)
          j.Str(note);
        else
          j.Null();
        out.Write(j.Bool("executed", a.execute).Finish());
      } else {
        t.Add({r.group, r.topic, std::to_string(r.partition), Dash(r.current),
               std::to_string(r.next), note ? note : "-"});
      }
    }
  }
  if (!f.json) t.Print(out);
}

int Reset(const Flags& f) {
  const AdminFlags& a = f.admin;
  std::optional<int64_t> datetime;
  if (a.to_datetime) {
    datetime = ParseTime(*a.to_datetime);
    if (!datetime)
      return cli::Fail(Status(Code::kInvalidArgument,
                              fmt::format("--to-datetime: invalid value '{}': expected "
                                          "milliseconds since the epoch or an ISO 8601 time",
                                          *a.to_datetime)));
  }
  auto dir = DataDir::Open(f.dir, false);
  if (!dir) return cli::Fail(dir.error());
  std::optional<std::vector<PlannedOffset>> from_file;
  if (a.from_file) {
    auto read = ReadPlanFile(*a.from_file);
    if (!read) return cli::Fail(read.error());
    from_file = std::move(*read);
  }
  TopicConfigs configs(*dir);
  if (Status s = CheckResetPartitions(f, from_file, configs); !s.ok()) return cli::Fail(s);
  auto names = SelectedGroups(f);
  if (!names) return cli::Fail(names.error());
  auto groups = OpenGroupsForReset(f, *names);
  if (!groups) return cli::Fail(groups.error());
  for (GroupPlan& g : *groups)
    if (Status s = PlanGroup(f, *dir, from_file, datetime, configs, &g); !s.ok())
      return cli::Fail(s);
  if (a.execute) {
    if (Status s = CommitPlans(*groups); !s.ok()) return cli::Fail(s);
  } else if (!f.quiet) {
    WarnRefusals(*groups);
  }
  cli::Output out;
  PrintPlans(f, *groups, out);
  if (!a.execute && !f.quiet)
    cli::Warn("dry run: nothing changed (add --execute to apply the plan)");
  return out.FinishExitCode();
}

// --- --delete-offsets ------------------------------------------------------------------

// kafka-consumer-groups --delete-offsets: the committed offsets of -t (its
// -p partitions) are removed, so the group reads them as never committed.
// The topic need not exist any more (its entries are what is left of it).
int DeleteOffsets(const Flags& f) {
  auto group = Group::Open(f.dir, *f.group, false);
  if (!group) return cli::Fail(group.error());
  auto removed = group->DeleteOffsets(f.topic, f.partitions);
  if (!removed) return cli::Fail(removed.error());
  std::vector<int32_t> rows = f.partitions;
  if (rows.empty()) rows = *removed;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  cli::Output out;
  Table t;
  t.Add({"GROUP", "TOPIC", "PARTITION", "STATUS"});
  for (int32_t p : rows) {
    const bool gone = std::binary_search(removed->begin(), removed->end(), p);
    const char* status = gone ? "deleted" : "not-committed";
    if (f.json) {
      json::Line j;
      j.Key("group").StrOrNull(*f.group).Key("topic").StrOrNull(f.topic).Int("partition", p);
      out.Write(j.Str("status", status).Finish());
    } else {
      t.Add({*f.group, f.topic, std::to_string(p), status});
    }
  }
  if (!f.json) t.Print(out);
  if (removed->empty() && !f.quiet)
    cli::Warn(
        fmt::format("group \"{}\" has no committed offset of {} to delete", *f.group, f.topic));
  return out.FinishExitCode();
}

// --- --delete --------------------------------------------------------------------------

int Delete(const Flags& f) {
  if (Status s = DeleteGroup(f.dir, *f.group); !s.ok()) return cli::Fail(s);
  return cli::kExitOk;
}

// --- --remove-member -------------------------------------------------------------------

// Kafka's RemoveMembersFromGroup for a static member: a member that is not
// running leaves the group now instead of when its session ends, so that
// the running members take its partitions, and a reset or delete is no
// longer refused for it.
int RemoveMember(const Flags& f) {
  auto group = Group::Open(f.dir, *f.group, false);
  if (!group) return cli::Fail(group.error());
  if (Status s = group->RemoveMember(*f.admin.remove_member); !s.ok()) return cli::Fail(s);
  if (!f.quiet)
    cli::Warn(fmt::format("group \"{}\": member \"{}\" removed", *f.group, *f.admin.remove_member));
  return cli::kExitOk;
}

// An offset: decimal digits, said so (CLI11's NonNegativeNumber would
// print its floating-point range for "-5").
const CLI::Validator kOffsetArg(
    [](std::string& s) -> std::string {
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return "";
      return "expected an offset (an integer >= 0), got '" + s + "'";
    },
    "N");

}  // namespace

void AddAdminFlags(CLI::App& app, AdminFlags* f) {
  auto* list = app.add_flag("--list", f->list, "list the consumer groups");
  auto* describe = app.add_flag("--describe", f->describe,
                                "show a group's offsets, lag, members and rebalances (-G)");
  auto* reset = app.add_flag("--reset-offsets", f->reset,
                             "plan (or with --execute apply) new offsets for a group (-G, -t)");
  auto* del = app.add_flag("--delete", f->remove, "delete a group with no live member (-G)");
  auto* del_offsets = app.add_flag("--delete-offsets", f->delete_offsets,
                                   "remove a group's committed offsets of a topic (-G, -t)");
  auto* remove_member = app.add_option("--remove-member", f->remove_member,
                                       "remove a member that is not running from a group (-G), "
                                       "ending its session");
  const std::vector<CLI::Option*> modes = {list, describe, reset, del, del_offsets, remove_member};
  for (size_t i = 0; i < modes.size(); ++i)
    for (size_t j = i + 1; j < modes.size(); ++j) modes[i]->excludes(modes[j]);
  app.add_flag("--all-groups", f->all_groups,
               "--describe, --reset-offsets: every group of the data directory");
  app.add_flag("--all-topics", f->all_topics,
               "--reset-offsets: every topic the group has committed")
      ->needs(reset);
  std::vector<CLI::Option*> targets = {
      app.add_flag("--to-earliest", f->to_earliest, "reset to the log start"),
      app.add_flag("--to-latest", f->to_latest, "reset to the committed end"),
      app.add_option("--to-offset", f->to_offset, "reset to offset N")->check(kOffsetArg),
      app.add_option("--shift-by", f->shift_by, "move each committed offset by N (may be < 0)"),
      app.add_option("--to-datetime", f->to_datetime,
                     "reset to the first message with timestamp >= TIME (ms or ISO 8601)"),
      app.add_option("--from-file", f->from_file,
                     "reset to the offsets of a CSV plan: TOPIC,PARTITION,OFFSET lines "
                     "(as --export writes them; - for standard input)"),
  };
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i]->needs(reset);
    for (size_t j = i + 1; j < targets.size(); ++j) targets[i]->excludes(targets[j]);
  }
  app.add_flag("--export", f->export_plan,
               "--reset-offsets: print the plan as CSV (TOPIC,PARTITION,OFFSET) for --from-file")
      ->needs(reset);
  app.add_flag("--execute", f->execute, "apply the --reset-offsets plan")->needs(reset);
}

int RunAdmin(const Flags& f, const char* usage) {
  const AdminFlags& a = f.admin;
  const char* mode = a.list            ? "--list"
                     : a.describe      ? "--describe"
                     : a.reset         ? "--reset-offsets"
                     : a.remove        ? "--delete"
                     : a.remove_member ? "--remove-member"
                                       : "--delete-offsets";
  Status s = CheckNoConsumeFlags(f, mode);
  if (s.ok() && a.list && (f.group || !f.topic.empty() || !f.partitions.empty()))
    s = Status(Code::kInvalidArgument, "--list takes no group, topic or partition");
  if (s.ok() && a.all_groups && !(a.describe || a.reset))
    s = Status(Code::kInvalidArgument,
               fmt::format("{} takes no --all-groups (only --describe and --reset-offsets)", mode));
  if (s.ok() && a.all_groups && f.group)
    s = Status(Code::kInvalidArgument, "--all-groups and -G exclude each other");
  // --reset-offsets' scope: -t, --all-topics or the plan of --from-file.
  const bool topic_needed = a.reset && !a.all_topics && !a.from_file;
  if (s.ok() && a.reset && (a.all_topics || a.from_file) && !f.topic.empty())
    s = Status(Code::kInvalidArgument, fmt::format("--reset-offsets: -t and {} exclude each other",
                                                   a.all_topics ? "--all-topics" : "--from-file"));
  if (s.ok() && a.reset && a.all_topics && a.from_file)
    s = Status(Code::kInvalidArgument,
               "--reset-offsets: --all-topics and --from-file exclude "
               "each other");
  if (s.ok() && a.describe)
    s = a.all_groups ? CheckGroupAndTopic(f, mode, false, true, false)
                     : CheckGroupAndTopic(f, mode, false, true);
  if (s.ok() && a.reset)
    s = a.all_groups ? CheckGroupAndTopic(f, mode, topic_needed, true, false)
                     : CheckGroupAndTopic(f, mode, topic_needed, true);
  if (s.ok() && (a.remove || a.remove_member)) s = CheckGroupAndTopic(f, mode, false, false);
  if (s.ok() && a.remove_member)
    if (Status v = ValidateName(*a.remove_member, "member id"); !v.ok())
      s = Status(Code::kInvalidArgument, "--remove-member: " + v.message());
  if (s.ok() && a.delete_offsets) s = CheckGroupAndTopic(f, mode, true, true);
  if (s.ok() && !(a.reset || a.delete_offsets) && !f.partitions.empty())
    s = Status(Code::kInvalidArgument, fmt::format("{} takes no partitions (-p)", mode));
  if (s.ok() && a.reset && f.topic.empty() && !f.partitions.empty())
    s = Status(Code::kInvalidArgument, "--reset-offsets: -p needs -t");
  if (s.ok() && a.reset &&
      !(a.to_earliest || a.to_latest || a.to_offset || a.shift_by || a.to_datetime || a.from_file))
    s = Status(Code::kInvalidArgument,
               "--reset-offsets needs a target: --to-earliest, --to-latest, --to-offset N, "
               "--shift-by N, --to-datetime TIME or --from-file FILE");
  if (!s.ok()) return cli::UsageError(usage, s.message());
  if (a.list) return List(f);
  if (a.describe) return Describe(f);
  if (a.reset) return Reset(f);
  if (a.delete_offsets) return DeleteOffsets(f);
  if (a.remove_member) return RemoveMember(f);
  return Delete(f);
}

}  // namespace mq::consume
