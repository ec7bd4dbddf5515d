// The cluster state of replicated topics (format-spec/cluster.md): which
// log roots (replicas) hold each partition, and per partition its leader,
// leader epoch, partition epoch and in-sync replica set (ISR). It has
// exactly one authoritative copy, a directory:
//
//     <cluster>/cluster-state    the state (text, R41-R45; updates R46)
//     <cluster>/cluster.lock     flock: shared to read, exclusive to change
//     <cluster>/isr-changes      every change, one line each (time, reason)
//
// Every change is a compare-and-swap on the partition epoch under the lock
// (Kafka's AlterPartition, KIP-497): a writer that read an older state
// cannot change the partition, so a leader that has been replaced cannot
// shrink the ISR, and cannot complete an acks=all write.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/address.h"
#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// One replica: a log root (`-C DIR`) and its id in the cluster.
struct ReplicaRoot {
  int32_t id = -1;
  std::string dir;  // its address: an absolute path, or host:path (R43)
  bool operator==(const ReplicaRoot&) const = default;
};

// A replicated topic's settings that live in the cluster state only.
struct ReplicatedTopic {
  std::string name;
  int32_t partitions = 1;
  int32_t replication_factor = 1;
  int32_t min_insync_replicas = 1;
  int64_t replica_lag_time_max_ms = 30000;  // Kafka's default
  bool operator==(const ReplicatedTopic&) const = default;
};

// Kafka's PartitionRegistration.
struct PartitionState {
  std::string topic;
  int32_t partition = 0;
  std::vector<int32_t> replicas;  // preferred leader first
  int32_t leader = -1;            // -1: no leader (offline)
  int32_t leader_epoch = 0;       // bumped at each leader change
  int32_t partition_epoch = 0;    // bumped at every change (the CAS token)
  std::vector<int32_t> isr;       // in-sync replicas, leader included
  bool operator==(const PartitionState&) const = default;
};

// The whole state, as the file holds it.
struct ClusterState {
  static constexpr int kVersion = 1;
  std::vector<ReplicaRoot> replicas;
  std::vector<ReplicatedTopic> topics;
  std::vector<PartitionState> partitions;  // sorted by topic, partition

  // Parses the file's bytes; a breach of R41-R45 is kCorruption naming
  // `file`, the byte position and the rule; another version (R41) is
  // kUnsupported.
  static Result<ClusterState> Parse(std::string_view text, const std::string& file);
  // The file's bytes (§18.2 order, the crc32c line last). Parse(Serialize())
  // == *this for a state that passes Validate().
  std::string Serialize() const;
  // R42-R45 on a state in memory (the one a change is about to write):
  // kInvalidArgument naming the rule.
  Status Validate() const;

  // Whether a replica lives on another host (then the file is version 2).
  bool HasHosts() const;
  const ReplicaRoot* Replica(int32_t id) const;
  const ReplicaRoot* ReplicaByDir(std::string_view dir) const;
  const ReplicatedTopic* Topic(std::string_view name) const;
  const PartitionState* Partition(std::string_view topic, int32_t partition) const;
  PartitionState* Partition(std::string_view topic, int32_t partition);
  bool operator==(const ClusterState&) const = default;
};

// Where the cluster state lives. An interface so that the simulator keeps
// it in memory and a later transport reaches it remotely; FileClusterStore
// is the one-host authority.
class ClusterStore {
 public:
  virtual ~ClusterStore() = default;
  // The whole state as it is now.
  virtual Result<ClusterState> Load() = 0;
  // Kafka's AlterPartition: replaces the partition's leader, leader epoch
  // and ISR with `proposed`'s if its partition epoch is still
  // `proposed.partition_epoch`; the stored partition epoch becomes one
  // more. Returns the stored state. A partition epoch that moved: kFenced
  // (nothing changed; reload and decide again). `reason` is recorded with
  // the time in the change log.
  virtual Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                                std::string_view reason) = 0;
  // The producer id of `name` (mq-produce --producer-id) for the cluster's
  // topics, allocated on first use (cluster.md §18.6, P10): one name has
  // one id on every root, and no two names share one, whatever was
  // replicated. kInvalidArgument for a name that breaks R12. A store that
  // keeps no registry: kUnsupported.
  virtual Result<int64_t> ProducerId(std::string_view name);
};

// The first producer id a cluster allocates (P10): 2^32, above every id a
// root's own registry allocates (those count from 0, producer.md P8), so
// that a cluster's id is never one a root gave to another name.
constexpr int64_t kFirstClusterProducerId = int64_t{1} << 32;

// The one-host authority: a directory (see the top of this file).
class FileClusterStore : public ClusterStore {
 public:
  // Opens the cluster directory `dir`; with `create`, creates it holding an
  // empty state. kNotFound when it is missing.
  static Result<std::unique_ptr<FileClusterStore>> Open(const std::string& dir, bool create,
                                                        FileSystem* fs = nullptr);
  // The state as R46 reads it, holding cluster.lock shared; but while
  // `cluster-state` still names the very file this store last read (one
  // fstatat: the same device and inode as the file it keeps open), that
  // state is returned again without the lock or a read. A change always
  // renames a new file over the name (R46), and the kept file's inode
  // cannot be reused while it is open, so the name still naming it means
  // no change was made since: the state is the current one, as a locked
  // read at that moment would return (cluster.md §18.3).
  Result<ClusterState> Load() override;
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override;
  // `<dir>/producers/<name>.id`, allocated under the exclusive lock from
  // `producers/next-producer-id` (absent: kFirstClusterProducerId) as P8
  // allocates, the counter written first (cluster.md §18.6).
  Result<int64_t> ProducerId(std::string_view name) override;
  // Adds a topic, its partitions and any replica roots it names that the
  // state lacks, under the exclusive lock (cluster.md §18.3): `replica_dirs`
  // are absolute (R43), distinct, and as many as topic.replication_factor;
  // partition p's replicas are their ids rotated by p, the first leads, ISR
  // all, epochs 0. A topic that exists: kInvalidArgument unless identical
  // (then OK, nothing changes).
  Status CreateTopic(const ReplicatedTopic& topic, const std::vector<std::string>& replica_dirs);
  // Runs `fn` on the state under the shared lock (a consistent view that no
  // change can interleave with: the high watermark is advanced under it).
  Status WithSharedLock(const std::function<Status(const ClusterState&)>& fn);
  const std::string& dir() const { return dir_; }

 private:
  FileClusterStore() = default;
  // Reads cluster-state (the caller holds cluster.lock).
  Result<ClusterState> ReadState();
  // Under the exclusive lock: reads the state, lets `change` edit it and
  // say what changed (isr-changes lines, without time), validates, replaces
  // the file atomically and appends the lines (R46). `change` returning
  // false writes nothing.
  using Changer = std::function<Result<bool>(ClusterState&, std::vector<std::string>*)>;
  Status Change(const Changer& change);
  std::string dir_;
  UniqueFd dir_fd_;
  FileSystem* fs_ = nullptr;
  // The file of the last read and the state it held (Load); guarded by
  // held_mu_ (a store is shared by the threads of mq-replicate --follow).
  std::mutex held_mu_;
  std::unique_ptr<File> held_;
  FileInfo held_info_;
  std::optional<ClusterState> held_state_;
};

// A replica list as the file writes it: "0,1,2", or "-" when empty.
std::string FormatReplicaList(const std::vector<int32_t>& ids);

// What the partition's state says of replica `id`.
bool IsLeader(const PartitionState& p, int32_t id);
bool InIsr(const PartitionState& p, int32_t id);

// Elections (Kafka's PartitionLeaderElectionAlgorithms).
enum class ElectionKind : uint8_t {
  kClean,      // a live ISR member; the ISR keeps only live members
  kUnclean,    // a live replica outside the ISR when no ISR member lives
  kPreferred,  // the first replica, when it is live and in the ISR
};
// The proposed next state of `p` (leader, leader epoch + 1, ISR), the
// partition epoch unchanged (AlterPartition bumps it); nullopt when no
// replica qualifies (or, for kPreferred, when the first replica leads
// already). `live(id)` says whether a replica's root is usable.
std::optional<PartitionState> ElectLeader(const PartitionState& p, ElectionKind kind,
                                          const std::function<bool(int32_t)>& live);

}  // namespace mq
