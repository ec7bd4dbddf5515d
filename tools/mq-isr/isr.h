// mq-isr's commands over the cluster state (mq/cluster.h,
// format-spec/cluster.md): create, describe, --check, elect.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "mq/cluster.h"
#include "mq/election.h"
#include "mq/topic.h"
#include "mq/wire.h"

namespace mq::isr {

struct CreateOptions {
  std::string topic;
  int32_t partitions = 1;
  std::vector<std::string> replica_dirs;  // absolute
  int32_t min_insync_replicas = 1;
  int64_t replica_lag_time_max_ms = 30000;
  TopicConfig config;  // -X keys for each root's .conf (cluster= and replica.id= added)
  std::vector<std::string> config_overrides;  // those -X KEY=VALUE, for roots on other hosts
  std::string controller;  // --controller: the host others reach the cluster directory on
};

// attach: links one root on this host to a topic of a cluster state
// elsewhere (what create runs on a replica's host).
struct AttachOptions {
  CreateOptions create;  // topic, partitions, config
  std::string dir;       // -C
  int32_t replica_id = -1;
};

struct DescribeOptions {
  std::optional<std::string> topic;
  bool under_replicated = false;
  bool under_min_isr = false;
  bool at_min_isr = false;
  bool unavailable = false;
  bool json = false;
  bool any_filter() const { return under_replicated || under_min_isr || at_min_isr || unavailable; }
};

// --unclean, --preferred or neither (mq/election.h).
using ElectMode = ::mq::ElectMode;

struct ElectOptions {
  std::optional<std::string> topic;
  std::optional<int32_t> partition;
  ElectMode mode = ElectMode::kUnavailableOnly;
};

// Exit status of --check when a partition is under-replicated, under its
// min.insync.replicas or unavailable (cli-conventions: a check found problems).
constexpr int kExitCheckProblems = cli::kExitProblems;

// Each returns the exit status (messages printed).
int Create(const std::string& cluster, const CreateOptions& options, cli::Output& out);
int Describe(const std::string& cluster, const DescribeOptions& options, cli::Output& out);
// `verify`: also the damage rule (ApplyDamageRule), which reads every
// replica's whole log.
int Check(const std::string& cluster, const std::optional<std::string>& topic, bool verify,
          cli::Output& out);
int Elect(const std::string& cluster, const ElectOptions& options, cli::Output& out);
// The client of the replica root at `a` (on another host), shared by all
// a run asks of it (--check, describe, elect, --verify-replicas): one
// `mq-replicate --serve` there for the whole run, its connection made at
// most once, so a host that is down is contacted once per run.
std::shared_ptr<wire::Client> ReplicaClientOf(const Address& a);
// R63: what a replica on another host records of partition `p` (a follower
// that stopped there, R58) and, with `verify`, whether its log verifies
// (VerifyForLeadership, run there), asked of its mq-replicate --serve.
Result<wire::ReplicaCheckReply> RemoteCheck(const Address& a, const PartitionState& p, bool verify);
// --check's rule for damage: every replica whose log fails
// verification (VerifyForLeadership, as elect asks of a candidate; on its
// own host for one on another, RemoteCheck) is
// printed with its corruption (file, byte position, rule); the in-sync
// followers among them leave the ISR (ShrinkIsrOfDamaged). Returns how
// many replicas were found damaged.
Result<size_t> ApplyDamageRule(ClusterStore* store, const ClusterState& state,
                               const std::optional<std::string>& topic, cli::Output& out);
// --verify-replicas: each partition's replicas compared with its leader's
// batch by batch up to the high watermark (R57); 0 when every replica
// agrees, 65 on a divergence or corruption, 69 when one could not be read.
int VerifyReplicas(const std::string& cluster, const std::optional<std::string>& topic, bool json,
                   cli::Output& out);
int Attach(const std::string& cluster, const AttachOptions& options, cli::Output& out);
// --serve: the cluster state for tools on other hosts (format-spec/protocol.md).
int Serve(const std::string& cluster);

// A replica's address as given: host:path is kept, a path made absolute.
std::string AbsoluteAddress(const std::string& address);

// `path` made absolute against the working directory and normalized
// lexically (no ".", "..", "//", trailing "/"), as the cluster state records it.
std::string AbsolutePath(const std::string& path);

}  // namespace mq::isr
