// mq-isr's commands (see isr.h; manual: man/man1/mq-isr.1).
#include "isr.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "format_string.h"
#include "json.h"
#include "mq/cluster.h"
#include "mq/election.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replication.h"
#include "mq/topic.h"
#include "mq/wire.h"
#include "remote.h"

namespace mq::isr {
namespace {

Result<std::unique_ptr<FileClusterStore>> OpenStore(const std::string& cluster, bool create) {
  return FileClusterStore::Open(AbsolutePath(cluster), create);
}

// The cluster state at `cluster`: the directory on this host, or host:path
// reached through `mq-isr --serve` there.
Result<std::unique_ptr<ClusterStore>> OpenAnyStore(const std::string& cluster) {
  return cli::OpenClusterStore(AbsoluteAddress(cluster));
}

wire::Client& RemoteClient(const Address& a) { return *ReplicaClientOf(a); }

// What a replica on another host holds of a partition (it answers: live).
Result<wire::ReplicaStatusReply> RemoteStatus(const Address& a, const std::string& topic,
                                              int32_t partition) {
  return wire::QueryReplicaStatus(RemoteClient(a), topic, partition);
}

}  // namespace

std::shared_ptr<wire::Client> ReplicaClientOf(const Address& a) {
  static std::map<std::string, std::shared_ptr<wire::Client>> clients;
  auto& client = clients[a.ToString()];
  if (!client) client = cli::ReplicaClient(a, true);
  return client;
}

Result<wire::ReplicaCheckReply> RemoteCheck(const Address& a, const PartitionState& p,
                                            bool verify) {
  return wire::QueryReplicaCheck(RemoteClient(a), p.topic, p.partition, verify,
                                 fmt::format("{}/{}-{}", a.ToString(), p.topic, p.partition));
}

namespace {

// One read of the entries of the directory `dir_fd` (a fresh descriptor):
// it can be read. Not the whole listing: a root holds a directory per
// partition, and this is asked of it for every partition.
Status CanRead(int dir_fd, const std::string& path) {
  alignas(8) char buf[1024];
  long n;
  do n = ::syscall(SYS_getdents64, dir_fd, buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus(path + ": list", errno);
  return Status::Ok();
}

// Whether replica root `root` serves `topic`-`partition`: the root and the
// partition directory exist and can be read (format-spec/cluster.md
// §18.4). OK, or why not.
Status PartitionUsable(const std::string& root, const std::string& topic, int32_t partition) {
  auto fd = OpenDirectory(root, false);
  if (!fd) return fd.error();
  MQ_RETURN_IF_ERROR(CanRead(fd->get(), root));
  const std::string name = fmt::format("{}-{}", topic, partition);
  auto pfd = OpenDirectoryAt(fd->get(), name, false);
  if (!pfd) return pfd.error();
  return CanRead(pfd->get(), root + "/" + name);
}

// Liveness of each replica of one partition, looked at once.
class Liveness {
 public:
  Liveness(const ClusterState& state, const PartitionState& p) : state_(state), p_(p) {}
  // R55: a replica (of this host, or of another as its ReplicaStatus
  // says) that restarted since it last claimed an epoch (it may hold less than the ISR
  // acknowledged) counts as unavailable while another ISR member is not known to have restarted so
  // (available or not: it may hold what this one lost).
  Status Why(int32_t id) {
    const Seen& s = Look(id);
    if (!s.usable.ok()) return s.usable;
    const int32_t m = HeldBackByRestart(p_, id, [this](int32_t r) { return Look(r).restarted; });
    if (m >= 0)
      return Status(Code::kUnavailable,
                    fmt::format("replica {} restarted since it last led (its leader-claim is "
                                "of another boot, R55) and in-sync replica {} did not",
                                id, m));
    return Status::Ok();
  }
  bool Live(int32_t id) { return Why(id).ok(); }
  // Live, and (a root on this host) its log verifies without corruption
  // (VerifyForLeadership): a replica with damaged records must not lead
  // while a healthy one can. Each candidate is verified once, and only
  // when an election asks.
  Status Electable(int32_t id) {
    MQ_RETURN_IF_ERROR(Why(id));
    auto it = verified_.find(id);
    if (it != verified_.end()) return it->second;
    Status s;
    const ReplicaRoot* r = state_.Replica(id);
    if (auto a = ParseAddress(r->dir, "replica dir"); a && a->host.empty()) {
      s = VerifyForLeadership(fmt::format("{}/{}-{}", r->dir, p_.topic, p_.partition));
    } else if (a) {
      // Verified on its host (ReplicaCheck, R63); a host of an earlier mq
      // (wire protocol version 1) cannot say: it stays a candidate.
      auto check = RemoteCheck(*a, p_, true);
      if (check) s = check->damage;
    }
    if (!s.ok())
      cli::Warn(fmt::format("{}-{}: replica {} cannot lead: {}", p_.topic, p_.partition, id,
                            s.message()));
    return verified_.emplace(id, s).first->second;
  }

 private:
  struct Seen {
    Status usable;
    bool restarted = false;
  };
  const Seen& Look(int32_t id) {
    auto it = seen_.find(id);
    if (it != seen_.end()) return it->second;
    const ReplicaRoot* r = state_.Replica(id);
    Seen s;
    if (r == nullptr) {
      s.usable = Status(Code::kNotFound, fmt::format("replica {} unknown", id));
    } else if (auto a = ParseAddress(r->dir, "replica dir"); a && !a->host.empty()) {
      auto status = RemoteStatus(*a, p_.topic, p_.partition);  // live when it answers
      if (!status)
        s.usable = status.error();
      else
        s.restarted = status->restarted_since_claim;
    } else {
      s.usable = PartitionUsable(r->dir, p_.topic, p_.partition);
      if (s.usable.ok()) {
        auto restarted =
            RestartedSinceClaim(fmt::format("{}/{}-{}", r->dir, p_.topic, p_.partition));
        if (!restarted)
          s.usable = restarted.error();
        else
          s.restarted = *restarted;
      }
    }
    return seen_.emplace(id, s).first->second;
  }

  const ClusterState& state_;
  const PartitionState& p_;
  std::map<int32_t, Seen> seen_;
  std::map<int32_t, Status> verified_;
};

// Kafka's partition health (TopicCommand's PartitionDescription).
struct Health {
  bool under_replicated = false;  // ISR smaller than the replicas
  bool under_min_isr = false;     // no leader, or ISR below min.insync.replicas
  bool at_min_isr = false;        // ISR exactly min.insync.replicas
  bool unavailable = false;       // no leader, or its root or partition unusable
  std::string why;                // why unavailable
};

Health HealthOf(const ClusterState& state, const PartitionState& p) {
  const ReplicatedTopic* t = state.Topic(p.topic);
  const size_t min_isr = static_cast<size_t>(t->min_insync_replicas);
  Health h;
  h.under_replicated = p.isr.size() < p.replicas.size();
  h.under_min_isr = p.leader < 0 || p.isr.size() < min_isr;
  h.at_min_isr = p.isr.size() == min_isr;
  if (p.leader < 0) {
    h.unavailable = true;
    h.why = "no leader";
  } else if (Status s = Liveness(state, p).Why(p.leader); !s.ok()) {
    h.unavailable = true;
    h.why = s.message();
  }
  return h;
}

// ---- each replica's log end and lag (describe) ------------------------------

// Replica `id`'s log end: read from its root on this host, or asked of its
// host (mq-replicate --serve there).
Result<int64_t> LogEndOf(const ClusterState& state, int32_t id, const PartitionState& p) {
  const ReplicaRoot* r = state.Replica(id);
  if (r == nullptr) return Status(Code::kNotFound, fmt::format("replica {} unknown", id));
  if (auto a = ParseAddress(r->dir, "replica dir"); a && !a->host.empty()) {
    auto status = RemoteStatus(*a, p.topic, p.partition);
    if (!status) return status.error();
    return status->log_end_offset;
  }
  MQ_RETURN_IF_ERROR(PartitionUsable(r->dir, p.topic, p.partition));
  auto reader = PartitionReader::Open(fmt::format("{}/{}-{}", r->dir, p.topic, p.partition));
  if (!reader) return reader.error();
  return (*reader)->end_offset();
}

// The partition directory of replica `id` when its root is on this host.
std::optional<std::string> LocalPartitionDir(const ClusterState& state, int32_t id,
                                             const PartitionState& p) {
  const ReplicaRoot* r = state.Replica(id);
  if (r == nullptr) return std::nullopt;
  if (auto a = ParseAddress(r->dir, "replica dir"); !a || !a->host.empty()) return std::nullopt;
  return fmt::format("{}/{}-{}", r->dir, p.topic, p.partition);
}

// ---- followers that stopped (R58) ---------------------------------------------

// What replica `id`'s partition directory records of a follower that
// stopped there on an error it does not wait out (follower-stopped, written
// by mq-replicate, cleared by its next round); a replica on another host
// is asked (ReplicaCheck, R63). A record that cannot be read, or a host that
// cannot say, counts as none (mq-inspect --verify reports a damaged one).
std::optional<FollowerStop> StoppedFollower(const ClusterState& state, const PartitionState& p,
                                            int32_t id) {
  const ReplicaRoot* r = state.Replica(id);
  if (r == nullptr) return std::nullopt;
  if (auto a = ParseAddress(r->dir, "replica dir"); a && !a->host.empty()) {
    auto check = RemoteCheck(*a, p, false);
    if (!check) return std::nullopt;
    return check->stop;
  }
  auto dir = LocalPartitionDir(state, id, p);
  if (!dir) return std::nullopt;
  auto stop = ReadFollowerStop(*dir);
  if (!stop) return std::nullopt;
  return *stop;
}

struct StoppedReplica {
  int32_t id = -1;
  FollowerStop stop;
};

// The followers of `p` (every replica but its leader) that stopped.
std::vector<StoppedReplica> StoppedFollowers(const ClusterState& state, const PartitionState& p) {
  std::vector<StoppedReplica> out;
  for (int32_t id : p.replicas)
    if (id != p.leader)
      if (auto stop = StoppedFollower(state, p, id)) out.push_back({id, *stop});
  return out;
}

std::vector<int32_t> StoppedIds(const std::vector<StoppedReplica>& stopped) {
  std::vector<int32_t> ids;
  for (const StoppedReplica& r : stopped) ids.push_back(r.id);
  return ids;
}

// What describe shows of one replica of a partition.
struct ReplicaView {
  int32_t id = -1;
  int64_t log_end = -1;              // -1: unknown
  ReplicaLag lag;                    // LagOf (liblog): the ISR rule's view
  std::optional<FollowerStop> stop;  // a follower that stopped (R58)
};

// Each replica of `p` at `now_ms`: log ends read from the replicas, the
// times from the leader's fetch-positions (R47, R60, on this host).
std::vector<ReplicaView> ReplicaViews(const ClusterState& state, const PartitionState& p,
                                      int64_t now_ms) {
  std::vector<FollowerPosition> positions;
  int64_t leader_end = -1;
  if (p.leader >= 0) {
    if (auto dir = LocalPartitionDir(state, p.leader, p);
        dir && PartitionUsable(state.Replica(p.leader)->dir, p.topic, p.partition).ok()) {
      if (auto read = ReadReplicaPositions(*dir)) positions = std::move(*read);
    } else if (const ReplicaRoot* r = state.Replica(p.leader)) {
      // A leader on another host: its fetch-positions read there
      // (ReplicaCheck, R63); its times are that host's clock.
      if (auto a = ParseAddress(r->dir, "replica dir"); a && !a->host.empty())
        if (auto check = RemoteCheck(*a, p, false)) positions = std::move(check->positions);
    }
    if (auto end = LogEndOf(state, p.leader, p)) leader_end = *end;
  }
  std::vector<ReplicaView> views;
  for (int32_t id : p.replicas) {
    ReplicaView v;
    v.id = id;
    if (id == p.leader) {
      v.log_end = leader_end;
    } else if (auto end = LogEndOf(state, id, p)) {
      v.log_end = *end;
    }
    if (p.leader >= 0)
      v.lag = LagOf(id, p.leader, p.leader_epoch, leader_end, v.log_end, positions, now_ms);
    if (id != p.leader) v.stop = StoppedFollower(state, p, id);
    views.push_back(std::move(v));
  }
  return views;
}

std::string TimeText(int64_t ms) {
  fmt::memory_buffer b;
  fmtstr::AppendIsoTime(b, ms);
  return fmt::to_string(b);
}

std::string KnownText(int64_t v) { return v < 0 ? std::string("unknown") : std::to_string(v); }

// One line per replica under its partition's describe line.
void PrintReplicas(cli::Output& out, const PartitionState& p,
                   const std::vector<ReplicaView>& views) {
  for (const ReplicaView& v : views) {
    out.Print("\t\tReplica: {}\tLogEnd: {}\tLag: {}\tLagMs: {}\tLastCaughtUp: {}", v.id,
              KnownText(v.log_end), KnownText(v.lag.offsets), KnownText(v.lag.ms),
              v.id == p.leader              ? std::string("-")
              : v.lag.last_caught_up_ms < 0 ? std::string("unknown")
                                            : TimeText(v.lag.last_caught_up_ms));
    if (v.stop)
      out.Print("\tStopped: {} (exit {})", TimeText(v.stop->stopped_ms), v.stop->exit_status);
    out.Print("\n");
  }
}

// A time or offset known when not negative, else null.
json::Writer& JsonKnown(json::Writer& j, const char* key, int64_t v) {
  return j.Key(key).IntOrNull(v < 0 ? std::nullopt : std::optional<int64_t>(v));
}

// The partition object's "replica_lag": the same fields as PrintReplicas.
void JsonReplicas(json::Writer& j, const std::vector<ReplicaView>& views) {
  j.Key("replica_lag").BeginArray();
  for (const ReplicaView& v : views) {
    j.BeginObject().Int("replica", v.id);
    JsonKnown(j, "log_end_offset", v.log_end);
    JsonKnown(j, "lag", v.lag.offsets);
    JsonKnown(j, "lag_ms", v.lag.ms);
    JsonKnown(j, "last_caught_up_ms", v.lag.last_caught_up_ms);
    JsonKnown(j, "last_fetch_ms", v.lag.last_fetch_ms);
    if (v.stop)
      j.Key("stopped")
          .BeginObject()
          .Int("at_ms", v.stop->stopped_ms)
          .Int("exit_status", v.stop->exit_status)
          .EndObject();
    else
      j.Null("stopped");
    j.EndObject();
  }
  j.EndArray();
}

std::string LeaderText(int32_t leader) {
  return leader < 0 ? std::string("none") : std::to_string(leader);
}

// Kafka's describe line, then mq's own fields.
void PrintPartition(cli::Output& out, const PartitionState& p, const Health& h) {
  out.Print(
      "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tLeaderEpoch: {}"
      "\tPartitionEpoch: {}",
      p.topic, p.partition, LeaderText(p.leader), FormatReplicaList(p.replicas),
      FormatReplicaList(p.isr), p.leader_epoch, p.partition_epoch);
  if (h.unavailable) out.Print("\tUnavailable: {}", h.why);
  out.Print("\n");
}

void JsonList(json::Writer& j, const char* key, const std::vector<int32_t>& ids) {
  j.Key(key).BeginArray();
  for (int32_t id : ids) j.Int(id);
  j.EndArray();
}

void JsonPartition(cli::Output& out, const ClusterState& state, const PartitionState& p,
                   const Health& h, const std::vector<ReplicaView>& views) {
  json::Line j;
  j.Str("type", "partition").Str("topic", p.topic).Int("partition", p.partition);
  j.Key("leader").IntOrNull(p.leader < 0 ? std::nullopt : std::optional<int64_t>(p.leader));
  JsonList(j, "replicas", p.replicas);
  JsonList(j, "isr", p.isr);
  j.Int("leader_epoch", p.leader_epoch).Int("partition_epoch", p.partition_epoch);
  const ReplicaRoot* r = p.leader < 0 ? nullptr : state.Replica(p.leader);
  if (r != nullptr)
    j.Key("leader_dir").StrOrNull(r->dir);
  else
    j.Null("leader_dir");
  j.Bool("under_replicated", h.under_replicated)
      .Bool("under_min_isr", h.under_min_isr)
      .Bool("at_min_isr", h.at_min_isr)
      .Bool("unavailable", h.unavailable);
  JsonReplicas(j, views);
  out.Write(j.Finish());
}

void JsonTopic(cli::Output& out, const ReplicatedTopic& t) {
  json::Line j;
  j.Str("type", "topic")
      .Str("topic", t.name)
      .Int("partitions", t.partitions)
      .Int("replication_factor", t.replication_factor)
      .Int("min_insync_replicas", t.min_insync_replicas)
      .Int("replica_lag_time_max_ms", t.replica_lag_time_max_ms);
  out.Write(j.Finish());
}

void JsonReplica(cli::Output& out, const ReplicaRoot& r) {
  json::Line j;
  j.Str("type", "replica").Int("id", r.id).Key("dir").StrOrNull(r.dir);
  out.Write(j.Finish());
}

bool Selected(const DescribeOptions& o, const Health& h) {
  if (!o.any_filter()) return true;
  return (o.under_replicated && h.under_replicated) || (o.under_min_isr && h.under_min_isr) ||
         (o.at_min_isr && h.at_min_isr) || (o.unavailable && h.unavailable);
}

Status NoTopic(const std::string& cluster, const std::string& topic) {
  return Status(Code::kNotFound,
                fmt::format("{}: no topic \"{}\" in the cluster state", cluster, topic));
}

// ---- create -----------------------------------------------------------------

// Opens (creating) each root and raises it to this layout version.
Status PrepareRoots(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    auto root = DataDir::Open(d, true);
    if (!root) return root.error();
    MQ_RETURN_IF_ERROR(root->UpgradeLayout());
  }
  return Status::Ok();
}

// The topic in replica root `dir` with id `id`, linked to the cluster.
Status CreateInRoot(const std::string& dir, int32_t id, const std::string& cluster,
                    const CreateOptions& o) {
  auto root = DataDir::Open(dir, false);
  if (!root) return root.error();
  TopicConfig config = o.config;
  config.partitions = o.partitions;
  config.cluster = cluster;
  config.replica_id = id;
  MQ_RETURN_IF_ERROR(root->CreateTopic(o.topic, config));
  auto have = root->ReadTopic(o.topic);
  if (!have) return have.error();
  if (have->cluster != cluster || have->replica_id != id)
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: topic {} exists there {} (cluster={}, replica.id={})", dir,
                              o.topic, have->cluster.empty() ? "unreplicated" : "linked otherwise",
                              have->cluster.empty() ? "none" : have->cluster, have->replica_id));
  return Status::Ok();
}

// ---- elect ------------------------------------------------------------------

std::string EndOffsetOf(const ClusterState& state, int32_t id, const PartitionState& p) {
  const ReplicaRoot* r = state.Replica(id);
  if (r == nullptr) return "unknown";
  if (auto a = ParseAddress(r->dir, "replica dir"); a && !a->host.empty()) {
    auto status = RemoteStatus(*a, p.topic, p.partition);
    if (!status) return fmt::format("unknown ({})", status.error().message());
    return std::to_string(status->log_end_offset);
  }
  if (!PartitionUsable(r->dir, p.topic, p.partition).ok()) return "unknown (unreadable)";
  auto reader = PartitionReader::Open(fmt::format("{}/{}-{}", r->dir, p.topic, p.partition));
  if (!reader) return fmt::format("unknown ({})", reader.error().message());
  return std::to_string((*reader)->end_offset());
}

void WarnUnclean(const ClusterState& state, const PartitionState& p, const PartitionState& next) {
  const std::string new_end = EndOffsetOf(state, next.leader, p);
  const std::string old_end =
      p.leader < 0 ? "unknown (no leader)" : EndOffsetOf(state, p.leader, p);
  cli::Warn(fmt::format(
      "WARNING: UNCLEAN leader election for {}-{}: replica {} is not in the ISR ({}). Its log "
      "ends at offset {}; the old leader {}'s ended at {}. Records the old leader held from "
      "offset {} on, acknowledged ones included, may be LOST, and every replica will truncate "
      "to the new leader's log.",
      p.topic, p.partition, next.leader, FormatReplicaList(p.isr), new_end, LeaderText(p.leader),
      old_end, new_end));
}

// mq-isr elect's view of one partition's replicas (ElectAndStore): live
// as Liveness says, electable when its log also verifies; the reasons and
// warnings it gives.
class ElectView : public ElectionView {
 public:
  ElectView(const ClusterState& state, const PartitionState& p) : state_(state), live_(state, p) {}
  bool LeaderAvailable(int32_t id) override { return live_.Live(id); }
  bool Electable(int32_t id) override { return live_.Electable(id).ok(); }
  std::string Reason(const PartitionState& p, const ElectionDecision& d) override {
    if (d.kind == ElectionKind::kPreferred)
      return fmt::format("preferred election: leader {} -> {}", LeaderText(p.leader),
                         d.next->leader);
    const std::string why = p.leader < 0 ? "no leader" : live_.Why(p.leader).message();
    if (d.outcome == ElectionOutcome::kStuck) {
      cli::Warn(d.kind == ElectionKind::kUnclean
                    ? fmt::format("{}-{}: leader {} is unavailable ({}) and no replica is "
                                  "live: nothing to elect",
                                  p.topic, p.partition, LeaderText(p.leader), why)
                    : fmt::format("{}-{}: leader {} is unavailable ({}) and no in-sync replica "
                                  "is live; --unclean would elect one outside the ISR, losing "
                                  "records",
                                  p.topic, p.partition, LeaderText(p.leader), why));
      return {};
    }
    if (d.kind == ElectionKind::kUnclean) {
      WarnUnclean(state_, p, *d.next);
      return fmt::format("UNCLEAN election: leader {} unavailable ({}), no ISR member live",
                         LeaderText(p.leader), why);
    }
    return fmt::format("clean election: leader {} unavailable ({})", LeaderText(p.leader), why);
  }

 private:
  const ClusterState& state_;
  Liveness live_;
};

// Decides and applies one partition's election (ElectAndStore; it reloads
// and decides again when the state moved meanwhile) and tells it.
Result<ElectionOutcome> ElectOne(ClusterStore& store, const ClusterState& loaded,
                                 const std::string& topic, int32_t partition, ElectMode mode,
                                 cli::Output& out) {
  auto r = ElectAndStore(store, loaded, topic, partition, mode,
                         [](const ClusterState& state, const PartitionState& p) {
                           return std::make_unique<ElectView>(state, p);
                         });
  if (!r) return r.error();
  if (r->outcome == ElectionOutcome::kElected)
    out.Print("Elected leader {} for {}-{}: leader epoch {}, ISR {} (was leader {}, ISR {}; {})\n",
              r->stored.leader, topic, partition, r->stored.leader_epoch,
              FormatReplicaList(r->stored.isr), LeaderText(r->before.leader),
              FormatReplicaList(r->before.isr), r->reason);
  return r->outcome;
}

}  // namespace

std::string AbsoluteAddress(const std::string& address) {
  auto a = ParseAddress(address, "address");
  if (a && !a->host.empty()) return address;
  return AbsolutePath(address);
}

std::string AbsolutePath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return path;
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Create's replica in root `d` (id `id`): created here, or by `mq-isr
// attach` run on the root's host.
Status CreateReplica(const std::string& d, int32_t id, const std::string& cluster,
                     const CreateOptions& o) {
  auto a = ParseAddress(d, "replica dir");
  if (a->host.empty()) return CreateInRoot(d, id, cluster, o);
  std::vector<std::string> argv = {cli::RemoteProgram("mq-isr"),
                                   "--cluster",
                                   o.controller + ":" + cluster,
                                   "attach",
                                   "-t",
                                   o.topic,
                                   "--partitions",
                                   std::to_string(o.partitions),
                                   "--replica-id",
                                   std::to_string(id),
                                   "-C",
                                   a->path};
  for (const std::string& kv : o.config_overrides) {
    argv.push_back("-X");
    argv.push_back(kv);
  }
  return cli::RunRemote(a->host, argv);
}

int Create(const std::string& cluster_arg, const CreateOptions& o, cli::Output& out) {
  const std::string cluster = AbsolutePath(cluster_arg);
  ReplicatedTopic t;
  t.name = o.topic;
  t.partitions = o.partitions;
  t.replication_factor = static_cast<int32_t>(o.replica_dirs.size());
  t.min_insync_replicas = o.min_insync_replicas;
  t.replica_lag_time_max_ms = o.replica_lag_time_max_ms;
  if (t.min_insync_replicas > t.replication_factor)
    return cli::Fail(Status(Code::kInvalidArgument,
                            fmt::format("--min-insync-replicas {} exceeds the {} replica(s) given",
                                        t.min_insync_replicas, t.replication_factor)));
  if (Status s = ValidateName(o.topic, "topic"); !s.ok()) return cli::Fail(s);
  // Roots on this host are prepared here, those on others by `mq-isr
  // attach` run there; they reach this directory as CONTROLLER:path.
  std::vector<std::string> local;
  bool remote = false;
  for (const std::string& d : o.replica_dirs) {
    auto a = ParseAddress(d, "replica dir");
    if (!a) return cli::Fail(a.error());
    if (a->host.empty())
      local.push_back(d);
    else
      remote = true;
  }
  if (auto a = ParseAddress(cluster_arg, "cluster"); a && !a->host.empty())
    return cli::Fail(Status(Code::kInvalidArgument,
                            fmt::format("--cluster {}: create runs on the host that holds the "
                                        "cluster directory",
                                        cluster_arg)));
  if (remote && o.controller.empty())
    return cli::Fail(Status(Code::kInvalidArgument,
                            "replicas on other hosts need --controller HOST: the name they reach "
                            "this host by"));
  if (!o.controller.empty())
    if (Status s = CheckHost(o.controller, "--controller"); !s.ok()) return cli::Fail(s);
  if (Status s = PrepareRoots(local); !s.ok()) return cli::Fail(s);
  auto store = OpenStore(cluster, true);
  if (!store) return cli::Fail(store.error());
  if (Status s = (*store)->CreateTopic(t, o.replica_dirs); !s.ok()) return cli::Fail(s);
  auto state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  for (const std::string& d : o.replica_dirs)
    if (Status s = CreateReplica(d, state->ReplicaByDir(d)->id, cluster, o); !s.ok())
      return cli::Fail(s);
  out.Print("Created topic {}.\n", o.topic);
  return 0;
}

int Attach(const std::string& cluster, const AttachOptions& o, cli::Output& out) {
  auto a = ParseAddress(cluster, "--cluster");
  if (!a) return cli::Fail(a.error());
  if (Status s = PrepareRoots({o.dir}); !s.ok()) return cli::Fail(s);
  if (Status s = CreateInRoot(o.dir, o.replica_id, cluster, o.create); !s.ok()) return cli::Fail(s);
  out.Print("Attached {} to topic {} as replica {}.\n", o.dir, o.create.topic, o.replica_id);
  return out.FinishExitCode();
}

int Serve(const std::string& cluster) {
  auto a = ParseAddress(AbsoluteAddress(cluster), "--cluster");
  if (!a) return cli::Fail(a.error());
  if (!a->host.empty())
    return cli::Fail(Status(Code::kInvalidArgument,
                            "--serve serves a cluster directory of this host, not HOST:DIR"));
  auto store = OpenStore(a->path, false);
  if (!store) return cli::Fail(store.error());
  wire::Handlers h;
  h.load_state = [&]() -> Result<std::string> {
    auto state = (*store)->Load();
    if (!state) return state.error();
    return state->Serialize();
  };
  h.alter_partition = [&](const wire::AlterPartitionMessage& m) -> Result<PartitionState> {
    auto state = (*store)->Load();
    if (!state) return state.error();
    const PartitionState* p = state->Partition(m.proposed.topic, m.proposed.partition);
    if (!p)
      return Status(Code::kNotFound, fmt::format("{}: no partition {}-{}", a->path,
                                                 m.proposed.topic, m.proposed.partition));
    PartitionState proposed = m.proposed;
    proposed.replicas = p->replicas;  // never changed by AlterPartition (§18.3)
    return (*store)->AlterPartition(proposed, m.reason);
  };
  h.producer_id = [&](const std::string& name) { return (*store)->ProducerId(name); };
  wire::ServeOptions so;
  so.name = "mq-isr " + a->path;
  mq::Status s = wire::Serve(0, 1, h, so);
  if (!s.ok()) return cli::Fail(s);
  return 0;
}

int Describe(const std::string& cluster, const DescribeOptions& o, cli::Output& out) {
  auto store = OpenAnyStore(cluster);
  if (!store) return cli::Fail(store.error());
  auto state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  if (o.topic && state->Topic(*o.topic) == nullptr) return cli::Fail(NoTopic(cluster, *o.topic));
  if (!o.any_filter()) {
    for (const ReplicaRoot& r : state->replicas) {
      if (o.json)
        JsonReplica(out, r);
      else
        out.Print("Replica: {}\tDir: {}\n", r.id, r.dir);
    }
  }
  for (const ReplicatedTopic& t : state->topics) {
    if (o.topic && t.name != *o.topic) continue;
    if (!o.any_filter()) {
      if (o.json)
        JsonTopic(out, t);
      else
        out.Print(
            "Topic: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: "
            "min.insync.replicas={},replica.lag.time.max.ms={}\n",
            t.name, t.partitions, t.replication_factor, t.min_insync_replicas,
            t.replica_lag_time_max_ms);
    }
    for (const PartitionState& p : state->partitions) {
      if (p.topic != t.name) continue;
      const Health h = HealthOf(*state, p);
      if (!Selected(o, h)) continue;
      std::vector<ReplicaView> views;
      if (o.json || !o.any_filter()) views = ReplicaViews(*state, p, Clock::Real()->NowMs());
      if (o.json) {
        JsonPartition(out, *state, p, h, views);
      } else {
        PrintPartition(out, p, h);
        if (!o.any_filter()) PrintReplicas(out, p, views);
      }
    }
  }
  return out.FinishExitCode();
}

namespace {

// Why the ISR rule took the members of `before` missing from `after` out.
std::string ShrinkReason(const std::vector<int32_t>& before, const std::vector<int32_t>& after,
                         const std::vector<int32_t>& stopped) {
  std::vector<int32_t> gone_stopped;
  bool lagged = false;
  for (int32_t id : before) {
    if (std::find(after.begin(), after.end(), id) != after.end()) continue;
    if (std::find(stopped.begin(), stopped.end(), id) != stopped.end())
      gone_stopped.push_back(id);
    else
      lagged = true;
  }
  if (gone_stopped.empty()) return "not caught up for replica.lag.time.max.ms";
  return fmt::format("replica {} stopped following{}", FormatReplicaList(gone_stopped),
                     lagged ? "; others not caught up for replica.lag.time.max.ms" : "");
}

// Kafka's maybeShrinkIsr, applied from cron (format-spec/replication.md
// §17.5): for each partition with a live leader, a follower not caught up
// for replica.lag.time.max.ms leaves the ISR (a compare-and-swap on the
// cluster state; the change is in isr-changes). Prints what changed.
Status ApplyIsrRule(ClusterStore* store, const ClusterState& state,
                    const std::optional<std::string>& topic, cli::Output& out) {
  for (const PartitionState& p : state.partitions) {
    if (topic && p.topic != *topic) continue;
    if (p.leader < 0 || !Liveness(state, p).Live(p.leader)) continue;
    const ReplicaRoot* root = state.Replica(p.leader);
    // A leader on another host applies the rule itself (its
    // `mq-replicate --serve` and its acks=all producers, §17.5).
    if (!root->dir.starts_with('/')) continue;
    auto dir = DataDir::Open(root->dir, false);
    if (!dir) return dir.error();
    auto config = dir->ReadTopic(p.topic);
    if (!config) return config.error();
    LogConfig log = DataDir::LogConfigFor(*config);
    log.sync_on_close = false;  // it appends nothing
    auto leader = OpenReplicaLog(dir->PartitionDir(p.topic, p.partition), p.leader, log);
    if (!leader) return leader.error();
    ReplicationContext ctx;
    ctx.cluster = store;
    ctx.clock = Clock::Real();
    ctx.topic = p.topic;
    ctx.partition = p.partition;
    ctx.loaded = &state;  // loaded once for every partition
    const std::vector<int32_t> stopped = StoppedIds(StoppedFollowers(state, p));
    auto after = MaybeShrinkIsr(ctx, **leader, p.leader_epoch, stopped);
    if (!after && after.error().code() == Code::kFenced) continue;  // changed meanwhile
    if (!after && after.error().code() == Code::kUnavailable) {
      // The leader's host restarted: it gave its epoch up (R55).
      out.Print("{}\n", after.error().message());
      continue;
    }
    if (!after) return after.error();
    if (after->isr != p.isr)
      out.Print("{}-{}: ISR {} -> {}: {}\n", p.topic, p.partition, FormatReplicaList(p.isr),
                FormatReplicaList(after->isr), ShrinkReason(p.isr, after->isr, stopped));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// --check: each follower of a problem partition that stopped (R58).
void PrintStopped(cli::Output& out, const std::vector<StoppedReplica>& stopped) {
  for (const StoppedReplica& r : stopped)
    out.Print(
        "\tReplica {} stopped following at {} (exit {}); its mq-replicate clears this "
        "when it follows again\n",
        r.id, TimeText(r.stop.stopped_ms), r.stop.exit_status);
}

}  // namespace

int Check(const std::string& cluster, const std::optional<std::string>& topic, bool verify,
          cli::Output& out) {
  auto store = OpenAnyStore(cluster);
  if (!store) return cli::Fail(store.error());
  auto state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  if (topic && state->Topic(*topic) == nullptr) return cli::Fail(NoTopic(cluster, *topic));
  if (Status s = ApplyIsrRule(store->get(), *state, topic, out); !s.ok()) return cli::Fail(s);
  state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  Result<size_t> damaged =
      verify ? ApplyDamageRule(store->get(), *state, topic, out) : Result<size_t>(size_t{0});
  if (!damaged) return cli::Fail(damaged.error());
  state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  size_t partitions = 0, bad = 0, topics = 0;
  for (const ReplicatedTopic& t : state->topics) {
    if (topic && t.name != *topic) continue;
    ++topics;
    for (const PartitionState& p : state->partitions) {
      if (p.topic != t.name) continue;
      ++partitions;
      const Health h = HealthOf(*state, p);
      const std::vector<StoppedReplica> stopped = StoppedFollowers(*state, p);
      std::vector<std::string> problems;
      if (h.unavailable) problems.push_back("unavailable");
      if (h.under_min_isr) problems.push_back("under-min-isr");
      if (h.under_replicated) problems.push_back("under-replicated");
      if (!stopped.empty()) problems.push_back("follower-stopped");
      if (problems.empty()) continue;
      ++bad;
      out.Print("{}-{}: {}\t", p.topic, p.partition, fmt::join(problems, ","));
      PrintPartition(out, p, h);
      PrintStopped(out, stopped);
    }
  }
  if (bad == 0 && *damaged == 0)
    out.Print(
        "OK: {} topic(s), {} partition(s): every partition has an available leader and "
        "its full ISR\n",
        topics, partitions);
  else
    out.Print("PROBLEMS: {} of {} partition(s) in {} topic(s){}\n", bad, partitions, topics,
              *damaged == 0 ? "" : fmt::format("; {} replica(s) fail verification", *damaged));
  if (int rc = out.FinishExitCode(); rc != 0) return rc;
  return bad == 0 && *damaged == 0 ? cli::kExitOk : kExitCheckProblems;
}

int Elect(const std::string& cluster, const ElectOptions& o, cli::Output& out) {
  auto store = OpenAnyStore(cluster);
  if (!store) return cli::Fail(store.error());
  auto state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  if (o.topic && state->Topic(*o.topic) == nullptr) return cli::Fail(NoTopic(cluster, *o.topic));
  if (o.partition && !state->Partition(*o.topic, *o.partition))
    return cli::Fail(Status(Code::kNotFound, fmt::format("{}: topic {} has no partition {}",
                                                         cluster, *o.topic, *o.partition)));
  size_t elected = 0, stuck = 0;
  for (const PartitionState& p : state->partitions) {
    if (o.topic && p.topic != *o.topic) continue;
    if (o.partition && p.partition != *o.partition) continue;
    auto outcome = ElectOne(**store, *state, p.topic, p.partition, o.mode, out);
    if (!outcome) return cli::Fail(outcome.error());
    if (*outcome == ElectionOutcome::kElected) ++elected;
    if (*outcome == ElectionOutcome::kStuck) ++stuck;
  }
  if (elected == 0 && stuck == 0)
    out.Write(o.mode == ElectMode::kPreferred
                  ? "Nothing to elect: every partition is led by its preferred replica, or it "
                    "is not in the ISR or not available.\n"
                  : "Nothing to elect: every partition's leader is available.\n");
  if (int rc = out.FinishExitCode(); rc != 0) return rc;
  return stuck == 0 ? cli::kExitOk : cli::kExitUnavailable;
}

}  // namespace mq::isr
