// The cluster state (format-spec/cluster.md §18): its text (R41-R45), and
// the one-host store, a directory whose lock serializes every change (R46).
#include <time.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "format/format.h"
#include "io/checkpoint_file.h"
#include "io/shown.h"
#include "mq/batch.h"
#include "mq/cluster.h"
#include "mq/crc32c.h"
#include "mq/lock.h"
#include "mq/topic.h"
#include "storage/producer_registry.h"

namespace mq {
namespace {

// ---- R43-R45 on a state, wherever it comes from --------------------------

// Which line a breach is about, so Parse can name its byte position.
enum class LineKind : uint8_t { kNone, kReplica, kTopic, kPartition };
struct Breach {
  const char* rule;
  std::string what;
  LineKind kind = LineKind::kNone;
  size_t index = 0;
};

bool Distinct(const std::vector<int32_t>& ids) {
  std::set<int32_t> seen(ids.begin(), ids.end());
  return seen.size() == ids.size();
}

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::optional<Breach> CheckReplicas(const ClusterState& s) {
  std::set<std::string_view> dirs;
  for (size_t i = 0; i < s.replicas.size(); ++i) {
    const ReplicaRoot& r = s.replicas[i];
    if (r.id < 0)
      return Breach{"R43", fmt::format("replica id {} is negative", r.id), LineKind::kReplica, i};
    if (i > 0 && r.id <= s.replicas[i - 1].id)
      return Breach{"R43",
                    fmt::format("replica id {} does not follow {} (ids strictly increase)", r.id,
                                s.replicas[i - 1].id),
                    LineKind::kReplica, i};
    if (auto a = ParseAddress(r.dir, "replica dir"); !a)
      return Breach{"R43", a.error().message(), LineKind::kReplica, i};
    if (!dirs.insert(r.dir).second)
      return Breach{"R43",
                    fmt::format("replica {}: dir {} is another replica's", r.id, Shown(r.dir)),
                    LineKind::kReplica, i};
  }
  return std::nullopt;
}

std::optional<Breach> CheckTopics(const ClusterState& s) {
  for (size_t i = 0; i < s.topics.size(); ++i) {
    const ReplicatedTopic& t = s.topics[i];
    auto at = [&](std::string what) { return Breach{"R44", std::move(what), LineKind::kTopic, i}; };
    if (Status n = ValidateName(t.name, "topic"); !n.ok()) return at(n.message());
    if (i > 0 && t.name <= s.topics[i - 1].name)
      return at(fmt::format("topic {} does not follow {} (names strictly increase)", t.name,
                            s.topics[i - 1].name));
    if (t.partitions < 1 || t.partitions > format::kMaxTopicPartitions)
      return at(fmt::format("topic {}: partitions {} outside 1..{}", t.name, t.partitions,
                            format::kMaxTopicPartitions));
    if (t.replication_factor < 1 || t.replication_factor > format::kMaxReplicationFactor)
      return at(fmt::format("topic {}: replication.factor {} outside 1..{}", t.name,
                            t.replication_factor, format::kMaxReplicationFactor));
    if (t.min_insync_replicas < 1 || t.min_insync_replicas > t.replication_factor)
      return at(fmt::format("topic {}: min.insync.replicas {} outside 1..replication.factor ({})",
                            t.name, t.min_insync_replicas, t.replication_factor));
    if (t.replica_lag_time_max_ms < 1)
      return at(fmt::format("topic {}: replica.lag.time.max.ms {} is below 1", t.name,
                            t.replica_lag_time_max_ms));
    if (static_cast<size_t>(t.replication_factor) > s.replicas.size())
      return at(fmt::format("topic {}: replication.factor {} but {} replica(s) known", t.name,
                            t.replication_factor, s.replicas.size()));
  }
  return std::nullopt;
}

std::optional<Breach> CheckPartitionLine(const ClusterState& s, const PartitionState& p,
                                         const ReplicatedTopic& t, size_t i) {
  auto at = [&](std::string what) {
    return Breach{"R45", fmt::format("{}-{}: {}", p.topic, p.partition, what), LineKind::kPartition,
                  i};
  };
  if (p.partition < 0 || p.partition >= t.partitions)
    return at(fmt::format("partition outside 0..{}", t.partitions - 1));
  if (p.replicas.size() != static_cast<size_t>(t.replication_factor))
    return at(fmt::format("{} replicas, replication.factor is {}", p.replicas.size(),
                          t.replication_factor));
  if (!Distinct(p.replicas)) return at("a replica is listed twice");
  for (int32_t r : p.replicas)
    if (s.Replica(r) == nullptr) return at(fmt::format("replica {} has no replica line", r));
  if (!Distinct(p.isr)) return at("an ISR member is listed twice");
  for (int32_t r : p.isr)
    if (!Contains(p.replicas, r)) return at(fmt::format("ISR member {} is not a replica", r));
  if (p.leader != format::kNoLeader && !Contains(p.isr, p.leader))
    return at(fmt::format("leader {} is not in the ISR", p.leader));
  if (p.leader_epoch < 0 || p.partition_epoch < 0) return at("a negative epoch");
  return std::nullopt;
}

std::optional<Breach> CheckPartitions(const ClusterState& s) {
  size_t ti = 0;         // the topic the lines are at
  int32_t expected = 0;  // the next partition it needs
  for (size_t i = 0; i < s.partitions.size(); ++i) {
    const PartitionState& p = s.partitions[i];
    if (i > 0) {
      const PartitionState& q = s.partitions[i - 1];
      if (std::tie(p.topic, p.partition) <= std::tie(q.topic, q.partition))
        return Breach{"R45",
                      fmt::format("{}-{} does not follow {}-{} (sorted by topic, partition, "
                                  "each once)",
                                  p.topic, p.partition, q.topic, q.partition),
                      LineKind::kPartition, i};
    }
    while (ti < s.topics.size() && s.topics[ti].name < p.topic) {
      if (expected != s.topics[ti].partitions)
        return Breach{
            "R45", fmt::format("topic {}: partition {} has no line", s.topics[ti].name, expected),
            LineKind::kTopic, ti};
      ++ti;
      expected = 0;
    }
    if (ti == s.topics.size() || s.topics[ti].name != p.topic)
      return Breach{"R45",
                    fmt::format("{}-{}: no topic line for {}", p.topic, p.partition, p.topic),
                    LineKind::kPartition, i};
    if (auto b = CheckPartitionLine(s, p, s.topics[ti], i)) return b;
    if (p.partition != expected)
      return Breach{"R45", fmt::format("topic {}: partition {} has no line", p.topic, expected),
                    LineKind::kTopic, ti};
    ++expected;
  }
  for (; ti < s.topics.size(); ++ti, expected = 0) {
    if (expected != s.topics[ti].partitions)
      return Breach{"R45",
                    fmt::format("topic {}: partition {} has no line", s.topics[ti].name, expected),
                    LineKind::kTopic, ti};
  }
  return std::nullopt;
}

std::optional<Breach> CheckState(const ClusterState& s) {
  if (auto b = CheckReplicas(s)) return b;
  if (auto b = CheckTopics(s)) return b;
  return CheckPartitions(s);
}

// ---- the text (R41, R42) --------------------------------------------------

// One line of the file, split at single spaces.
struct Field {
  std::string_view text;
  uint64_t position = 0;
};

class Parser {
 public:
  Parser(std::string_view text, const std::string& file) : t_(text), file_(file) {}

  Result<ClusterState> Run();
  Result<ClusterState> RunLines();

 private:
  Status Corrupt(uint64_t at, const char* rule, std::string what) const {
    return Status::Corruption(file_, at, rule, std::move(what));
  }
  Status CheckFrame(size_t* body_end);
  // Splits at single spaces into exactly `n` fields; with `rest`, the last
  // field is the rest of the line, spaces included (a replica's dir).
  Status Split(std::string_view line, uint64_t at, size_t n, bool rest,
               std::vector<Field>* out) const;
  Result<int64_t> Number(const Field& f, int64_t min, int64_t max, const char* what) const;
  Result<std::vector<int32_t>> List(const Field& f, bool may_be_empty, const char* what) const;
  Status Line(std::string_view line, uint64_t at, ClusterState* s);
  // One line of each kind (R42), its fields parsed into `s`.
  Status ReplicaLine(std::string_view line, uint64_t at, ClusterState* s);
  Status TopicLine(std::string_view line, uint64_t at, ClusterState* s);
  Status PartitionLine(std::string_view line, uint64_t at, ClusterState* s);

  std::string_view t_;
  const std::string& file_;
  int kind_ = 0;  // 1 replica, 2 topic, 3 partition: lines come in that order
  int version_ = 0;
  std::vector<uint64_t> replica_at_, topic_at_, partition_at_;
};

// R41: the size, the version line, the crc line. `*body_end` is where the
// crc line starts.
Status Parser::CheckFrame(size_t* body_end) {
  if (t_.size() > format::kMaxClusterStateBytes)
    return Corrupt(format::kMaxClusterStateBytes, "R41",
                   fmt::format("{} bytes, more than the {} allowed", t_.size(),
                               format::kMaxClusterStateBytes));
  const std::string magic = std::string(format::kClusterStateMagic) + ' ';
  const size_t nl = t_.find('\n');
  const std::string_view first = t_.substr(0, nl);
  if (!first.starts_with(magic))
    return Corrupt(0, "R41",
                   fmt::format("the first line is not \"{} {}\" (not a cluster state)",
                               format::kClusterStateMagic, format::kClusterStateVersion));
  const std::string_view version = first.substr(magic.size());
  if (version == std::to_string(format::kClusterStateLocalVersion)) {
    version_ = format::kClusterStateLocalVersion;
  } else if (version == std::to_string(format::kClusterStateVersion)) {
    version_ = format::kClusterStateVersion;
  } else {
    if (nl != std::string_view::npos && !version.empty() &&
        std::all_of(version.begin(), version.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Status(Code::kUnsupported,
                    fmt::format("{}: position {}: R41: cluster state version {}: this mq reads "
                                "versions {} and {} only (unsupported)",
                                file_, magic.size(), Shown(version),
                                format::kClusterStateLocalVersion, format::kClusterStateVersion));
    return Corrupt(magic.size(), "R41", fmt::format("bad version \"{}\"", Shown(version)));
  }
  if (t_.back() != '\n')
    return Corrupt(t_.size(), "R41", "the file does not end in '\\n' (truncated)");
  const size_t last = t_.rfind('\n', t_.size() - 2);
  const size_t crc_at = last == std::string_view::npos ? 0 : last + 1;
  const std::string_view crc_line = t_.substr(crc_at, t_.size() - 1 - crc_at);
  const std::string keyword = std::string(format::kClusterCrcKeyword) + ' ';
  if (crc_at <= nl || !crc_line.starts_with(keyword) ||
      crc_line.size() != keyword.size() + format::kClusterCrcHexDigits)
    return Corrupt(crc_at, "R41",
                   fmt::format("the last line is not \"{} <8 hex digits>\" "
                               "(truncated or edited)",
                               format::kClusterCrcKeyword));
  uint32_t stored = 0;
  for (char c : crc_line.substr(keyword.size())) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0)
      return Corrupt(crc_at + keyword.size(), "R41",
                     "the checksum is not 8 lowercase hexadecimal digits");
    stored = stored << 4 | static_cast<uint32_t>(d);
  }
  const uint32_t actual = Crc32c(AsBytes(t_.substr(0, crc_at)));
  if (stored != actual)
    return Corrupt(crc_at, "R41",
                   fmt::format("crc32c {:08x} of the {} bytes before this line, the file says "
                               "{:08x} (torn or edited)",
                               actual, crc_at, stored));
  *body_end = crc_at;
  return Status::Ok();
}

Status Parser::Split(std::string_view line, uint64_t at, size_t n, bool rest,
                     std::vector<Field>* out) const {
  out->clear();
  size_t start = 0;
  while (out->size() + 1 < n) {
    const size_t sp = line.find(format::kClusterFieldSeparator, start);
    if (sp == std::string_view::npos) break;
    if (sp == start) return Corrupt(at + start, "R42", "an empty field (one space between fields)");
    out->push_back({line.substr(start, sp - start), at + start});
    start = sp + 1;
  }
  out->push_back({line.substr(start), at + start});
  if (out->size() != n)
    return Corrupt(at, "R42",
                   fmt::format("{} field(s) in a {} line, not {}", out->size(), (*out)[0].text, n));
  if (out->back().text.empty()) return Corrupt(at + start, "R42", "an empty last field");
  const size_t extra = out->back().text.find(format::kClusterFieldSeparator);
  if (!rest && extra != std::string_view::npos)
    return Corrupt(at + start + extra, "R42",
                   fmt::format("more than {} fields in a {} line", n, (*out)[0].text));
  return Status::Ok();
}

Result<int64_t> Parser::Number(const Field& f, int64_t min, int64_t max, const char* what) const {
  std::string_view t = f.text;
  const bool negative = !t.empty() && t[0] == '-' && min < 0;
  if (negative) t.remove_prefix(1);
  bool ok = !t.empty() && (t.size() == 1 || t[0] != '0') &&
            std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
            t.size() <= 19;
  int64_t v = 0;
  if (ok) {
    for (char c : t) {
      const int d = c - '0';
      if (v > (INT64_MAX - d) / 10) {
        ok = false;
        break;
      }
      v = v * 10 + d;
    }
  }
  if (negative) v = -v;
  if (!ok || v < min || v > max)
    return Corrupt(f.position, "R42",
                   fmt::format("{} \"{}\": not a number in {}..{}", what, Shown(f.text), min, max));
  return v;
}

Result<std::vector<int32_t>> Parser::List(const Field& f, bool may_be_empty,
                                          const char* what) const {
  std::vector<int32_t> ids;
  if (f.text == format::kClusterEmptyList) {
    if (may_be_empty) return ids;
    return Corrupt(f.position, "R42", fmt::format("{}: the list may not be empty", what));
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = f.text.find(format::kClusterListSeparator, start);
    Field one{f.text.substr(start, comma == std::string_view::npos ? comma : comma - start),
              f.position + start};
    auto id = Number(one, 0, INT32_MAX, what);
    if (!id) return id.error();
    ids.push_back(static_cast<int32_t>(*id));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ids;
}

Status Parser::Line(std::string_view line, uint64_t at, ClusterState* s) {
  const std::string_view keyword = line.substr(0, line.find(' '));
  int kind = keyword == "replica" ? 1 : keyword == "topic" ? 2 : keyword == "partition" ? 3 : 0;
  if (kind == 0)
    return Corrupt(
        at, "R42",
        fmt::format("unknown line \"{}\" (replica, topic or partition)", Shown(keyword)));
  if (kind < kind_)
    return Corrupt(at, "R42",
                   fmt::format("a {} line after a later kind (replica lines, then "
                               "topic lines, then partition lines)",
                               keyword));
  kind_ = kind;
  if (kind == 1) return ReplicaLine(line, at, s);
  if (kind == 2) return TopicLine(line, at, s);
  return PartitionLine(line, at, s);
}

Status Parser::ReplicaLine(std::string_view line, uint64_t at, ClusterState* s) {
  std::vector<Field> f;
  MQ_RETURN_IF_ERROR(Split(line, at, format::kReplicaLineFields, true, &f));
  auto id = Number(f[1], 0, INT32_MAX, "replica id");
  if (!id) return id.error();
  s->replicas.push_back({static_cast<int32_t>(*id), std::string(f[2].text)});
  replica_at_.push_back(at);
  return Status::Ok();
}

Status Parser::TopicLine(std::string_view line, uint64_t at, ClusterState* s) {
  std::vector<Field> f;
  MQ_RETURN_IF_ERROR(Split(line, at, format::kTopicLineFields, false, &f));
  ReplicatedTopic t;
  t.name = std::string(f[1].text);
  auto n = Number(f[2], 0, INT32_MAX, "partitions");
  if (!n) return n.error();
  auto rf = Number(f[3], 0, INT32_MAX, "replication.factor");
  if (!rf) return rf.error();
  auto min = Number(f[4], 0, INT32_MAX, "min.insync.replicas");
  if (!min) return min.error();
  auto lag = Number(f[5], 0, INT64_MAX, "replica.lag.time.max.ms");
  if (!lag) return lag.error();
  t.partitions = static_cast<int32_t>(*n);
  t.replication_factor = static_cast<int32_t>(*rf);
  t.min_insync_replicas = static_cast<int32_t>(*min);
  t.replica_lag_time_max_ms = *lag;
  s->topics.push_back(std::move(t));
  topic_at_.push_back(at);
  return Status::Ok();
}

Status Parser::PartitionLine(std::string_view line, uint64_t at, ClusterState* s) {
  std::vector<Field> f;
  MQ_RETURN_IF_ERROR(Split(line, at, format::kPartitionLineFields, false, &f));
  PartitionState p;
  p.topic = std::string(f[1].text);
  auto part = Number(f[2], 0, INT32_MAX, "partition");
  if (!part) return part.error();
  auto replicas = List(f[3], false, "replicas");
  if (!replicas) return replicas.error();
  auto leader = Number(f[4], format::kNoLeader, INT32_MAX, "leader");
  if (!leader) return leader.error();
  auto le = Number(f[5], 0, INT32_MAX, "leader_epoch");
  if (!le) return le.error();
  auto pe = Number(f[6], 0, INT32_MAX, "partition_epoch");
  if (!pe) return pe.error();
  auto isr = List(f[7], true, "isr");
  if (!isr) return isr.error();
  p.partition = static_cast<int32_t>(*part);
  p.replicas = std::move(*replicas);
  p.leader = static_cast<int32_t>(*leader);
  p.leader_epoch = static_cast<int32_t>(*le);
  p.partition_epoch = static_cast<int32_t>(*pe);
  p.isr = std::move(*isr);
  s->partitions.push_back(std::move(p));
  partition_at_.push_back(at);
  return Status::Ok();
}

Result<ClusterState> Parser::Run() {
  auto s = RunLines();
  if (!s) return s;
  // R41, R43: a replica on another host needs version 2.
  if (version_ == format::kClusterStateLocalVersion)
    for (size_t i = 0; i < s->replicas.size(); ++i)
      if (!s->replicas[i].dir.starts_with('/'))
        return Corrupt(
            replica_at_[i], "R43",
            fmt::format("replica {}: a host (\"{}\") in a version {} state", s->replicas[i].id,
                        Shown(s->replicas[i].dir), format::kClusterStateLocalVersion));
  return s;
}

Result<ClusterState> Parser::RunLines() {
  size_t body_end = 0;
  MQ_RETURN_IF_ERROR(CheckFrame(&body_end));
  ClusterState s;
  size_t pos = t_.find('\n') + 1;
  while (pos < body_end) {
    const size_t nl = t_.find('\n', pos);
    const std::string_view line = t_.substr(pos, nl - pos);
    for (size_t i = 0; i < line.size(); ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if (c < 0x20 || c == 0x7f)
        return Corrupt(pos + i, "R42", fmt::format("control byte 0x{:02x} in a line", c));
    }
    MQ_RETURN_IF_ERROR(Line(line, pos, &s));
    pos = nl + 1;
  }
  if (auto b = CheckState(s)) {
    const std::vector<uint64_t>& at = b->kind == LineKind::kReplica ? replica_at_
                                      : b->kind == LineKind::kTopic ? topic_at_
                                                                    : partition_at_;
    const uint64_t where = b->kind == LineKind::kNone ? 0 : at[b->index];
    return Corrupt(where, b->rule, b->what);
  }
  return s;
}

// ---- the store ------------------------------------------------------------

std::string Iso8601Now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  const time_t secs = static_cast<time_t>(ms.count() / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms.count() % 1000);
}

std::string Printable(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

// One isr-changes line without its time (§18.5); `old` null for a created
// partition.
std::string ChangeLine(const PartitionState* old, const PartitionState& now,
                       std::string_view reason) {
  auto was = [&](auto get) { return old ? get(*old) : std::string("-"); };
  return fmt::format(
      "{} {} leader {}>{} leader_epoch {}>{} partition_epoch {}>{} isr {}>{} reason {}", now.topic,
      now.partition, was([](const PartitionState& p) { return std::to_string(p.leader); }),
      now.leader, was([](const PartitionState& p) { return std::to_string(p.leader_epoch); }),
      now.leader_epoch,
      was([](const PartitionState& p) { return std::to_string(p.partition_epoch); }),
      now.partition_epoch, was([](const PartitionState& p) { return FormatReplicaList(p.isr); }),
      FormatReplicaList(now.isr), Printable(reason));
}

}  // namespace

std::string FormatReplicaList(const std::vector<int32_t>& ids) {
  if (ids.empty()) return format::kClusterEmptyList;
  return fmt::format("{}", fmt::join(ids, std::string(1, format::kClusterListSeparator)));
}

Result<ClusterState> ClusterState::Parse(std::string_view text, const std::string& file) {
  return Parser(text, file).Run();
}

bool ClusterState::HasHosts() const {
  for (const ReplicaRoot& r : replicas)
    if (!r.dir.starts_with('/')) return true;
  return false;
}

std::string ClusterState::Serialize() const {
  // R41: version 1 while every replica is on the controller's host, so
  // that an older mq still reads such a state.
  std::string out =
      fmt::format("{} {}\n", format::kClusterStateMagic,
                  HasHosts() ? format::kClusterStateVersion : format::kClusterStateLocalVersion);
  for (const ReplicaRoot& r : replicas) out += fmt::format("replica {} {}\n", r.id, r.dir);
  for (const ReplicatedTopic& t : topics)
    out += fmt::format("topic {} {} {} {} {}\n", t.name, t.partitions, t.replication_factor,
                       t.min_insync_replicas, t.replica_lag_time_max_ms);
  for (const PartitionState& p : partitions)
    out += fmt::format("partition {} {} {} {} {} {} {}\n", p.topic, p.partition,
                       FormatReplicaList(p.replicas), p.leader, p.leader_epoch, p.partition_epoch,
                       FormatReplicaList(p.isr));
  out += fmt::format("{} {:08x}\n", format::kClusterCrcKeyword, Crc32c(AsBytes(out)));
  return out;
}

Status ClusterState::Validate() const {
  if (auto b = CheckState(*this))
    return Status(Code::kInvalidArgument, fmt::format("cluster state: {}: {}", b->rule, b->what));
  return Status::Ok();
}

const ReplicaRoot* ClusterState::Replica(int32_t id) const {
  for (const auto& r : replicas)
    if (r.id == id) return &r;
  return nullptr;
}

const ReplicaRoot* ClusterState::ReplicaByDir(std::string_view dir) const {
  for (const auto& r : replicas)
    if (r.dir == dir) return &r;
  return nullptr;
}

const ReplicatedTopic* ClusterState::Topic(std::string_view name) const {
  for (const auto& t : topics)
    if (t.name == name) return &t;
  return nullptr;
}

const PartitionState* ClusterState::Partition(std::string_view topic, int32_t partition) const {
  for (const auto& p : partitions)
    if (p.topic == topic && p.partition == partition) return &p;
  return nullptr;
}

PartitionState* ClusterState::Partition(std::string_view topic, int32_t partition) {
  for (auto& p : partitions)
    if (p.topic == topic && p.partition == partition) return &p;
  return nullptr;
}

// ---- FileClusterStore -----------------------------------------------------

Result<std::unique_ptr<FileClusterStore>> FileClusterStore::Open(const std::string& dir,
                                                                 bool create, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  MQ_RETURN_IF_ERROR(CheckAbsoluteDir(dir, "cluster directory"));
  auto fd = OpenDirectory(dir, create, fs);
  if (!fd && fd.error().code() == Code::kNotFound)
    return Status(Code::kNotFound, fmt::format("{}: no such cluster directory", dir));
  if (!fd) return fd.error();
  std::unique_ptr<FileClusterStore> store(new FileClusterStore());
  store->dir_ = dir;
  store->fs_ = fs;
  store->dir_fd_ = std::move(*fd);
  const int dfd = store->dir_fd_.get();
  // cluster.lock serializes every change: NFS locks are not reliable.
  MQ_RETURN_IF_ERROR(CheckLockableFileSystem(dfd, dir));
  auto st = fs->StatAt(dfd, format::kClusterStateName);
  if (st) return store;
  if (st.error().code() != Code::kNotFound) return st.error();
  if (!create)
    return Status(Code::kNotFound, fmt::format("{}: not an mq cluster directory (no {})", dir,
                                               format::kClusterStateName));
  // Of several creators, the one holding the lock writes the empty state.
  auto lock =
      FileLock::Acquire(dfd, format::kClusterLockName, LockMode::kExclusive, LockWait::kBlock, fs);
  if (!lock) return lock.error();
  st = fs->StatAt(dfd, format::kClusterStateName);
  if (st) return store;
  if (st.error().code() != Code::kNotFound) return st.error();
  const std::string empty = ClusterState{}.Serialize();
  MQ_RETURN_IF_ERROR(WriteFileAtomic(dfd, format::kClusterStateName, AsBytes(empty), fs));
  return store;
}

Result<ClusterState> FileClusterStore::ReadState() {
  const std::string path = dir_ + "/" + format::kClusterStateName;
  // R41: a file over the limit is refused by its size, before it is read.
  std::unique_ptr<File> file;
  auto text = ReadBoundedTextFile(fs_, dir_fd_.get(), format::kClusterStateName, path,
                                  format::kMaxClusterStateBytes, "R41", &file);
  if (!text && text.error().code() == Code::kNotFound)
    return Status(Code::kNotFound, fmt::format("{}: missing (not an mq cluster directory)", path));
  if (!text) return text.error();
  auto state = ClusterState::Parse(*text, path);
  // What Load may return again while the name still names this file.
  std::lock_guard<std::mutex> guard(held_mu_);
  held_.reset();
  held_state_.reset();
  auto info = state ? file->StatAtOpen() : Result<FileInfo>(Status(Code::kNotFound, ""));
  if (info) {
    held_ = std::move(file);
    held_info_ = *info;
    held_state_ = *state;
  }
  return state;
}

Result<ClusterState> FileClusterStore::Load() {
  {
    std::lock_guard<std::mutex> guard(held_mu_);
    if (held_) {
      auto now = fs_->StatAt(dir_fd_.get(), format::kClusterStateName);
      if (now && now->dev == held_info_.dev && now->ino == held_info_.ino) return *held_state_;
    }
  }
  auto lock = FileLock::Acquire(dir_fd_.get(), format::kClusterLockName, LockMode::kShared,
                                LockWait::kBlock, fs_);
  if (!lock) return lock.error();
  return ReadState();
}

Status FileClusterStore::WithSharedLock(const std::function<Status(const ClusterState&)>& fn) {
  auto lock = FileLock::Acquire(dir_fd_.get(), format::kClusterLockName, LockMode::kShared,
                                LockWait::kBlock, fs_);
  if (!lock) return lock.error();
  auto state = ReadState();
  if (!state) return state.error();
  return fn(*state);
}

Status FileClusterStore::Change(const Changer& change) {
  auto lock = FileLock::Acquire(dir_fd_.get(), format::kClusterLockName, LockMode::kExclusive,
                                LockWait::kBlock, fs_);
  if (!lock) return lock.error();
  auto state = ReadState();
  if (!state) return state.error();
  std::vector<std::string> lines;
  auto changed = change(*state, &lines);
  if (!changed) return changed.error();
  if (!*changed) return Status::Ok();
  MQ_RETURN_IF_ERROR(state->Validate());
  const std::string text = state->Serialize();
  if (text.size() > format::kMaxClusterStateBytes)
    return Status(
        Code::kTooLarge,
        fmt::format("{}/{}: the new state is {} bytes, more than the {} allowed (R41)", dir_,
                    format::kClusterStateName, text.size(), format::kMaxClusterStateBytes));
  MQ_RETURN_IF_ERROR(WriteFileAtomic(dir_fd_.get(), format::kClusterStateName, AsBytes(text), fs_));
  // The change log (§18.5): after the state is durable, under the lock.
  const std::string now = Iso8601Now();
  std::string log;
  for (const std::string& l : lines) log += now + " " + l + "\n";
  auto file = fs_->Open(dir_fd_.get(), format::kIsrChangesName, FileSystem::kCreate);
  if (!file) return file.error();
  auto size = (*file)->Size();
  if (!size) return size.error();
  MQ_RETURN_IF_ERROR((*file)->WriteAt(*size, AsBytes(log)));
  return (*file)->Sync();
}

Result<PartitionState> FileClusterStore::AlterPartition(const PartitionState& proposed,
                                                        std::string_view reason) {
  PartitionState stored;
  Status s = Change([&](ClusterState& state, std::vector<std::string>* lines) -> Result<bool> {
    PartitionState* p = state.Partition(proposed.topic, proposed.partition);
    if (p == nullptr)
      return Status(Code::kNotFound, fmt::format("{}: no partition {}-{} in the cluster state",
                                                 dir_, proposed.topic, proposed.partition));
    if (p->partition_epoch != proposed.partition_epoch)
      return Status(Code::kFenced,
                    fmt::format("{}-{}: partition epoch {} was proposed, the cluster state is at "
                                "{} (changed meanwhile; reload and decide again)",
                                proposed.topic, proposed.partition, proposed.partition_epoch,
                                p->partition_epoch));
    if (p->partition_epoch == INT32_MAX)
      return Status(Code::kInvalidArgument,
                    fmt::format("{}-{}: partition epoch exhausted", p->topic, p->partition));
    const PartitionState old = *p;
    p->leader = proposed.leader;
    p->leader_epoch = proposed.leader_epoch;
    p->isr = proposed.isr;
    p->partition_epoch = old.partition_epoch + 1;
    stored = *p;
    lines->push_back(ChangeLine(&old, *p, reason));
    return true;
  });
  if (!s.ok()) return s;
  return stored;
}

Result<int64_t> ClusterStore::ProducerId(std::string_view name) {
  return Status(
      Code::kUnsupported,
      fmt::format("producer id '{}': this cluster store allocates no producer ids", name));
}

Result<int64_t> FileClusterStore::ProducerId(std::string_view name) {
  MQ_RETURN_IF_ERROR(ValidateName(name, "producer id"));
  // Under the lock of every change (R46): one allocation at a time.
  auto lock = FileLock::Acquire(dir_fd_.get(), format::kClusterLockName, LockMode::kExclusive,
                                LockWait::kBlock, fs_);
  if (!lock) return lock.error();
  // The cluster's producer registry (§18.6): the files of producer.md P8,
  // in `<cluster>/producers/`.
  auto reg = OpenDirectoryAt(dir_fd_.get(), format::kProducerRegistryDir, true, fs_);
  if (!reg) return reg.error();
  // Never below the cluster's range: a counter edited down must not give
  // out an id a root's registry may hold.
  return LookUpProducerId(fs_, reg->get(), dir_ + "/" + format::kProducerRegistryDir, name,
                          kFirstClusterProducerId);
}

namespace {

// The ids of the replicas at `dirs`, in their order; a root the state does
// not list yet is added with the next id, and `*all_known` becomes false.
std::vector<int32_t> ReplicaIdsOf(ClusterState& state, const std::vector<std::string>& dirs,
                                  bool* all_known) {
  std::vector<int32_t> ids;
  for (const auto& d : dirs) {
    const ReplicaRoot* r = state.ReplicaByDir(d);
    if (r != nullptr) {
      ids.push_back(r->id);
      continue;
    }
    *all_known = false;
    int32_t next = state.replicas.empty() ? 0 : state.replicas.back().id + 1;
    state.replicas.push_back({next, d});
    ids.push_back(next);
  }
  return ids;
}

// Partition `p`'s replicas: `ids` rotated by `p`, so that leaders spread.
std::vector<int32_t> RotatedAssignment(const std::vector<int32_t>& ids, int32_t p) {
  const int32_t n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> r;
  for (int32_t j = 0; j < n; ++j) r.push_back(ids[static_cast<size_t>((p + j) % n)]);
  return r;
}

}  // namespace

Status FileClusterStore::CreateTopic(const ReplicatedTopic& topic,
                                     const std::vector<std::string>& replica_dirs) {
  MQ_RETURN_IF_ERROR(ValidateName(topic.name, "topic"));
  if (replica_dirs.size() != static_cast<size_t>(topic.replication_factor))
    return Status(Code::kInvalidArgument,
                  fmt::format("topic {}: {} replica dirs for replication.factor {}", topic.name,
                              replica_dirs.size(), topic.replication_factor));
  for (const auto& d : replica_dirs)
    if (auto a = ParseAddress(d, "replica dir"); !a) return a.error();
  if (std::set<std::string>(replica_dirs.begin(), replica_dirs.end()).size() != replica_dirs.size())
    return Status(Code::kInvalidArgument,
                  fmt::format("topic {}: a replica dir is given twice", topic.name));
  return Change([&](ClusterState& state, std::vector<std::string>* lines) -> Result<bool> {
    bool all_known = true;
    const std::vector<int32_t> ids = ReplicaIdsOf(state, replica_dirs, &all_known);
    auto assignment = [&](int32_t p) { return RotatedAssignment(ids, p); };
    if (const ReplicatedTopic* existing = state.Topic(topic.name)) {
      bool same = all_known && *existing == topic;
      for (int32_t p = 0; same && p < topic.partitions; ++p) {
        const PartitionState* ps = state.Partition(topic.name, p);
        same = ps != nullptr && ps->replicas == assignment(p);
      }
      if (same) return false;
      return Status(
          Code::kInvalidArgument,
          fmt::format("topic {} exists in {} with other settings or replicas", topic.name, dir_));
    }
    state.topics.push_back(topic);
    std::sort(state.topics.begin(), state.topics.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    for (int32_t p = 0; p < topic.partitions; ++p) {
      PartitionState ps;
      ps.topic = topic.name;
      ps.partition = p;
      ps.replicas = assignment(p);
      ps.leader = ps.replicas.front();
      ps.isr = ps.replicas;
      lines->push_back(ChangeLine(nullptr, ps, "create"));
      state.partitions.push_back(std::move(ps));
    }
    std::sort(state.partitions.begin(), state.partitions.end(), [](const auto& a, const auto& b) {
      return std::tie(a.topic, a.partition) < std::tie(b.topic, b.partition);
    });
    return true;
  });
}

}  // namespace mq
