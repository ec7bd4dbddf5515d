// mq-isr --verify-replicas: every replica of each partition compared with
// its leader's batch by batch up to the high watermark (CompareReplicaLogs,
// mq/replica_verification.h, R57), those on other hosts read through their
// `mq-replicate --serve` (ReadLog, R63). Manual: man/man1/mq-isr.1.
#include <map>

#include <fmt/format.h>

#include "isr.h"
#include "json.h"
#include "mq/cluster.h"
#include "mq/partition.h"
#include "mq/replica_verification.h"
#include "mq/wire.h"
#include "remote.h"

namespace mq::isr {
namespace {

enum class Outcome : uint8_t { kAgrees, kNotVerified, kDiverged };

struct ReplicaLine {
  int32_t id = -1;
  std::string dir;
  std::string state;  // agrees, behind, diverged, corrupt, not-verified
  std::string detail;
  const ReplicaAgreement* agreement = nullptr;
};

struct PartitionReport {
  Outcome outcome = Outcome::kAgrees;
  std::string why;  // when the partition as a whole could not be compared
  int64_t high_watermark = -1;
  std::vector<ReplicaLine> replicas;
};

// A compared replica's line; a divergence or a replica not verified
// makes `*outcome` so.
ReplicaLine LineOf(const ReplicaAgreement& a, Outcome* outcome) {
  ReplicaLine line;
  line.id = a.id;
  line.dir = a.dir;
  line.agreement = &a;
  if (a.status.code() == Code::kCorruption) {
    line.state = a.status.rule() == "R57" ? "diverged" : "corrupt";
    line.detail = a.status.message();
    *outcome = Outcome::kDiverged;
  } else if (!a.status.ok()) {
    line.state = "not-verified";
    line.detail = a.status.message();
    if (*outcome == Outcome::kAgrees) *outcome = Outcome::kNotVerified;
  } else {
    line.state = a.behind ? "behind" : "agrees";
  }
  return line;
}

PartitionReport VerifyPartitionReplicas(const ClusterState& state, const PartitionState& p,
                                        ReplicaComparison* storage) {
  PartitionReport r;
  std::vector<ReplicaToCompare> logs;
  size_t reference = SIZE_MAX;
  for (int32_t id : p.replicas) {
    const ReplicaRoot* root = state.Replica(id);
    ReplicaLine line;
    line.id = id;
    line.dir = root ? root->dir : "";
    auto a = root ? ParseAddress(root->dir, "replica dir")
                  : Result<Address>(Status(Code::kNotFound, fmt::format("replica {} unknown", id)));
    if (!a) {
      line.state = "not-verified";
      line.detail = a.error().message();
      r.replicas.push_back(line);
      r.outcome = Outcome::kNotVerified;
      continue;
    }
    ReplicaToCompare log;
    log.id = id;
    log.dir = fmt::format("{}/{}-{}", root->dir, p.topic, p.partition);
    // One on another host is read there, through its mq-replicate --serve (R63).
    Result<std::unique_ptr<ReplicaLogSource>> source = Status(Code::kInternal, "not opened");
    if (a->host.empty()) {
      source = OpenLocalReplica(log.dir);
    } else {
      source = wire::OpenRemoteReplica(ReplicaClientOf(*a), p.topic, p.partition, log.dir);
    }
    if (source)
      log.source = std::move(*source);
    else
      log.open_error = source.error();
    if (id == p.leader) reference = logs.size();
    logs.push_back(std::move(log));
  }
  if (reference == SIZE_MAX) {
    r.outcome = Outcome::kNotVerified;
    r.why = p.leader < 0 ? "no leader to compare with"
                         : fmt::format("leader {} is not a replica", p.leader);
    return r;
  }
  auto cmp = CompareReplicaLogs(logs, reference);
  if (!cmp) {
    r.outcome =
        cmp.error().code() == Code::kCorruption ? Outcome::kDiverged : Outcome::kNotVerified;
    r.why = fmt::format("leader {}: {}", p.leader, cmp.error().message());
    return r;
  }
  *storage = std::move(*cmp);
  r.high_watermark = storage->high_watermark;
  for (const ReplicaAgreement& a : storage->replicas) r.replicas.push_back(LineOf(a, &r.outcome));
  return r;
}

void PrintText(cli::Output& out, const PartitionState& p, const PartitionReport& r) {
  const std::string name = fmt::format("{}-{}", p.topic, p.partition);
  if (!r.why.empty())
    out.Print("{}: {}: {}\n", name, r.outcome == Outcome::kDiverged ? "CORRUPT" : "NOT VERIFIED",
              r.why);
  for (const ReplicaLine& l : r.replicas) {
    const ReplicaAgreement* a = l.agreement;
    if (l.state == "agrees" && a != nullptr && l.id != p.leader)
      out.Print("{}: replica {} agrees with leader {} up to the high watermark {} ({} batches)\n",
                name, l.id, p.leader, r.high_watermark < 0 ? 0 : r.high_watermark, a->batches);
    else if (l.state == "behind")
      out.Print(
          "{}: replica {} is behind: its log ends at {}, below the high watermark {}; it "
          "agrees with leader {} up to {} ({} batches)\n",
          name, l.id, a->log_end_offset, r.high_watermark, p.leader, a->compared_to, a->batches);
    else if (l.state == "diverged" || l.state == "corrupt")
      out.Print("{}: replica {} {}: {}\n", name, l.id,
                l.state == "diverged" ? "DIVERGED" : "CORRUPT", l.detail);
    else if (l.state == "not-verified")
      out.Print("{}: replica {} ({}) not verified: {}\n", name, l.id, l.dir, l.detail);
  }
  if (r.why.empty())
    out.Print("{}: {}: leader {}, high watermark {}\n", name,
              r.outcome == Outcome::kAgrees     ? "OK"
              : r.outcome == Outcome::kDiverged ? "DIVERGED"
                                                : "NOT VERIFIED",
              p.leader,
              r.high_watermark < 0 ? std::string("none") : std::to_string(r.high_watermark));
}

void PrintJson(cli::Output& out, const PartitionState& p, const PartitionReport& r) {
  json::Line j;
  j.Str("type", "verify-replicas").Str("topic", p.topic).Int("partition", p.partition);
  j.Key("leader").IntOrNull(p.leader < 0 ? std::nullopt : std::optional<int64_t>(p.leader));
  j.Key("high_watermark")
      .IntOrNull(r.high_watermark < 0 ? std::nullopt : std::optional<int64_t>(r.high_watermark));
  j.Str("status", r.outcome == Outcome::kAgrees     ? "ok"
                  : r.outcome == Outcome::kDiverged ? "diverged"
                                                    : "not-verified");
  if (r.why.empty())
    j.Null("error");
  else
    j.Str("error", r.why);
  j.Key("replicas").BeginArray();
  for (const ReplicaLine& l : r.replicas) {
    j.BeginObject().Int("id", l.id).Key("dir").StrOrNull(l.dir).Str("state", l.state);
    if (const ReplicaAgreement* a = l.agreement; a != nullptr && a->log_end_offset >= 0)
      j.Int("log_end_offset", a->log_end_offset)
          .Int("compared_to", a->compared_to)
          .Uint("batches", a->batches);
    if (l.detail.empty())
      j.Null("detail");
    else
      j.Str("detail", l.detail);
    j.EndObject();
  }
  j.EndArray();
  out.Write(j.Finish());
}

}  // namespace

Result<size_t> ApplyDamageRule(ClusterStore* store, const ClusterState& state,
                               const std::optional<std::string>& topic, cli::Output& out) {
  size_t found = 0;
  for (const PartitionState& p : state.partitions) {
    if (topic && p.topic != *topic) continue;
    std::map<int32_t, Status> damaged;
    for (int32_t id : p.replicas) {
      const ReplicaRoot* root = state.Replica(id);
      if (root == nullptr) continue;
      auto a = ParseAddress(root->dir, "replica dir");
      if (!a) continue;
      Status s;
      if (a->host.empty()) {
        s = VerifyForLeadership(fmt::format("{}/{}-{}", root->dir, p.topic, p.partition));
      } else {
        // Verified on its host (ReplicaCheck, R63); one that cannot be
        // asked is the liveness rule's, as below.
        auto check = RemoteCheck(*a, p, true);
        if (check) s = check->damage;
      }
      // A root or partition that cannot be read is the liveness rule's
      // (unavailable), not damage.
      if (s.code() == Code::kCorruption) damaged.emplace(id, s);
    }
    if (damaged.empty()) continue;
    found += damaged.size();
    auto after = ShrinkIsrOfDamaged(*store, p, damaged);
    if (!after && after.error().code() != Code::kFenced) return after.error();
    for (const auto& [id, s] : damaged) {
      const std::string what =
          id == p.leader  ? "it leads: elect another leader, then repair it (mq-replicate --repair)"
          : !InIsr(p, id) ? "not in the ISR; repair it with mq-replicate --repair"
          : !after        ? "the ISR changed meanwhile: run --check again"
                          : fmt::format(
                                "left the ISR ({} -> {}); repair it with mq-replicate "
                                       "--repair",
                                FormatReplicaList(p.isr), FormatReplicaList(after->isr));
      out.Print("{}-{}: replica {} fails verification: {}; {}\n", p.topic, p.partition, id,
                s.message(), what);
    }
  }
  return found;
}

int VerifyReplicas(const std::string& cluster, const std::optional<std::string>& topic, bool json,
                   cli::Output& out) {
  auto store = cli::OpenClusterStore(AbsoluteAddress(cluster));
  if (!store) return cli::Fail(store.error());
  auto state = (*store)->Load();
  if (!state) return cli::Fail(state.error());
  if (topic && state->Topic(*topic) == nullptr)
    return cli::Fail(Status(
        Code::kNotFound, fmt::format("{}: no topic \"{}\" in the cluster state", cluster, *topic)));
  size_t partitions = 0, diverged = 0, unverified = 0;
  for (const PartitionState& p : state->partitions) {
    if (topic && p.topic != *topic) continue;
    ++partitions;
    ReplicaComparison storage;
    const PartitionReport r = VerifyPartitionReplicas(*state, p, &storage);
    if (r.outcome == Outcome::kDiverged) ++diverged;
    if (r.outcome == Outcome::kNotVerified) ++unverified;
    if (json)
      PrintJson(out, p, r);
    else
      PrintText(out, p, r);
  }
  if (!json) {
    if (diverged + unverified == 0)
      out.Print(
          "OK: {} partition(s): every replica agrees with its leader up to the high "
          "watermark\n",
          partitions);
    else
      out.Print("PROBLEMS: {} of {} partition(s) diverged, {} not verified\n", diverged, partitions,
                unverified);
  }
  if (int rc = out.FinishExitCode(); rc != 0) return rc;
  return diverged > 0 ? cli::kExitDataErr : unverified > 0 ? cli::kExitUnavailable : cli::kExitOk;
}

}  // namespace mq::isr
