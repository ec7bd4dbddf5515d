#include "simulation.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "model.h"
#include "mq/election.h"
#include "real_log.h"

namespace mq::sim {

void SimStats::Add(const SimStats& o) {
  steps += o.steps;
  crashes += o.crashes;
  power_losses += o.power_losses;
  io_faults += o.io_faults;
  elections += o.elections;
  produced += o.produced;
  acked += o.acked;
  refused += o.refused;
  fetches += o.fetches;
  link_faults += o.link_faults;
  clock_jumps += o.clock_jumps;
  isr_changes += o.isr_changes;
  partitions += o.partitions;
  heals += o.heals;
  controller_refused += o.controller_refused;
  controller_faults += o.controller_faults;
  replies_lost += o.replies_lost;
  cut_messages += o.cut_messages;
  cut_elections += o.cut_elections;
  cut_shrinks += o.cut_shrinks;
  isr_expands += o.isr_expands;
  leader_reboots += o.leader_reboots;
  epochs_given_up += o.epochs_given_up;
  paused_writes += o.paused_writes;
  follower_kills += o.follower_kills;
  readers += o.readers;
  reader_batches += o.reader_batches;
  reader_drops += o.reader_drops;
  unclean_schedules += o.unclean_schedules;
  unclean_elections += o.unclean_elections;
  isr_outages += o.isr_outages;
  reader_cuts += o.reader_cuts;
  real_reader_batches += o.real_reader_batches;
  real_reader_cuts += o.real_reader_cuts;
  for (const auto& [kind, n] : o.disagreements) disagreements[kind] += n;
  fenced_writes += o.fenced_writes;
}

namespace {

constexpr const char* kTopic = "sim";
constexpr int32_t kMinIsr = 2;

std::string IsrText(const std::vector<int32_t>& isr) {
  std::string s;
  for (int32_t r : isr) s += fmt::format("{}{}", s.empty() ? "" : ",", r);
  return "[" + s + "]";
}

// A producer's write appended at a leader, not yet acknowledged.
struct PendingWrite {
  int32_t leader = -1;
  int32_t epoch = -1;
  SimBatch batch;
};

// What the invariants know of an offset.
enum : uint8_t { kAcked = 1, kSeen = 2 };

class Simulation;

// A follower's way to its leader through the simulated network: requests
// and responses get lost, delayed (an older response arrives instead of the
// one asked for), duplicated and corrupted. The leader's side runs the real
// HandleFetch / HandleOffsetForLeaderEpoch on the leader's model log.
class SimLink : public LeaderLink {
 public:
  SimLink(Simulation* sim, int32_t follower, int32_t leader, bool faults)
      : sim_(sim), follower_(follower), leader_(leader), faults_(faults) {}
  Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                              int32_t requested_epoch) override;
  Result<FetchResponse> Fetch(const FetchRequest& request) override;

 private:
  Simulation* sim_;
  int32_t follower_;
  int32_t leader_;
  bool faults_;
};

// The cluster state as one replica reaches it across the network: the
// controller's MemClusterStore behind a path that a partition cuts (every
// call fails kUnavailable, without effect) and that now and then loses a
// request, or loses AlterPartition's reply after the controller applied the
// change (the caller sees kUnavailable; the CAS on the partition epoch must
// keep that safe).
class ReplicaStore : public ClusterStore {
 public:
  ReplicaStore(Simulation* sim, int32_t id) : sim_(sim), id_(id) {}
  Result<ClusterState> Load() override;
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override;

 private:
  Status Refuse();
  Simulation* sim_;
  int32_t id_;
};

struct Replica {
  std::unique_ptr<ModelReplicaLog> log;
  bool up = true;
  bool lost_data = false;  // a power loss since it last ran
  PartitionState view;     // its last read of the cluster state
  FollowerState follower;
  int slow = 1;  // a slow disk: it gets 1/slow of its turns
  // Responses the network still holds for this follower, for one leader
  // and epoch (a TCP connection's responses come from one leader).
  std::vector<FetchResponse> stash;
  int32_t stash_leader = -1;
  int32_t stash_epoch = -1;
  // How far its log is known to match the canonical history.
  int64_t verified_hw = 0;
  uint64_t verified_hw_gen = 0;
  int64_t verified_all = 0;
  uint64_t verified_all_gen = 0;
  std::string last_error;  // its last FollowerStep's, while converging
  // A producer of the replica's process paused between its check of the
  // cluster state and its write (a SIGSTOP, a debugger, a long stall): it
  // goes on later from where it stopped, on what it checked then, and dies
  // with the process.
  struct Writer {
    PartitionState view;  // the state its check read
    int records = 1;
    int at = 0;  // its next stage: 0 claim (R54), 1 epoch, 2 append
  };
  std::optional<Writer> paused;
  // Its follower dies after its next fetch reached the leader (which
  // recorded its position), before anything of the response is written.
  bool kill_after_fetch = false;
  bool killed_after_fetch = false;
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& options);
  SimOutcome Run();

 private:
  friend class SimLink;
  friend class ReplicaStore;

  // Steps.
  void Step();
  void Produce();
  // Runs writer `w` of `r` from its stage on; with `pause_at` (a stage),
  // pauses it there instead.
  void Write(Replica& r, Replica::Writer w, int pause_at);
  void Resume(int32_t id);
  void Follow();
  void Ack();
  void AckWrite(Replica& r, size_t i, int64_t hw);
  void Shrink();
  void Refresh();
  void Consume();
  void Read();
  void ReadModel();
  // --real-log: the shipped reader (README.md, "The real log"); the model's
  // files are the oracle it is checked against.
  void ReadReal(RealReplicaLog& log);
  void RealReaderCut(const ReplicaFiles& f, int64_t to);
  bool CheckRealBatch(const ReplicaFiles& f, const SimBatch& b, int64_t hw);
  void RealReaderStalled(RealReplicaLog& log, const SimBatch& at, int64_t hw);
  void Crash(int32_t r, bool allow_power_loss);
  void Restart(int32_t r);
  void Reboot(int32_t r);
  void IsrOutage();
  void NewProcess(Replica& r);
  void ClaimFailed(Replica& r, const Status& s);
  // R54: the replica restarted since it last claimed an epoch (its claim
  // is of another boot): it leads in no epoch before R55 gave one up.
  static bool StaleClaim(const Replica& r) {
    return r.log->claim().epoch >= 0 && r.log->claim().boot != r.log->RunningBoot();
  }
  void Controller(bool move_leader);
  void Network();
  void Cut();
  void Heal();
  void HealAll();
  void CutController(int32_t id);
  void CutLink(int32_t from, int32_t to);
  void Quiesce();

  // Invariants.
  void CheckInvariants();
  void CheckBelowHw(Replica& r);
  void CheckLeaderHolds(Replica& r);
  void CheckFinal();
  void CheckTruncations();
  void Fail(std::string what);
  const char* KindOf(int64_t offset) const;
  std::string Origin(int64_t offset) const;

  // Helpers.
  int32_t PickUp(bool (*pred)(const Simulation&, const Replica&));
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  const PartitionState& State() const { return store_->partition(); }
  // The replica reads the cluster state through its own path (false: it
  // could not; its view stays as it was).
  bool RefreshView(Replica& r) {
    auto st = stores_[r.log->replica_id()]->Load();
    if (!st) return false;
    r.view = State();
    return true;
  }
  // The controller tells a replica (it reaches it: LeaderAndIsr).
  void PushView(Replica& r) { r.view = State(); }
  void AfterIo();
  void Trace(const std::string& s) {
    if (options_.trace) std::printf("[%lld] %s\n", static_cast<long long>(stats_.steps), s.c_str());
  }
  bool Live(int32_t id) const {
    return id >= 0 && id < static_cast<int32_t>(reps_.size()) && reps_[id].up;
  }
  // Elections run at the controller: a replica is live there only when its
  // process runs and the controller reaches it.
  // Nor one that restarted since it last claimed an epoch and has not
  // given it up while another ISR member, up or not, did not (R55; mq-isr
  // elect reads the claims of its own host's replicas).
  bool Electable(int32_t id) const {
    if (!Live(id) || ctrl_cut_[id]) return false;
    return HeldBackByRestart(State(), id, [this](int32_t r) { return StaleClaim(reps_[r]); }) < 0;
  }
  // The controller gives up on a leader that crashed at once (its session
  // ends with the process), on one it cannot reach after session_steps_.
  bool LeaderGone(int32_t id) const {
    return !Live(id) || (ctrl_cut_[id] && stats_.steps - cut_since_[id] >= session_steps_);
  }
  bool LinkCut(int32_t from, int32_t to) const {
    return link_cut_[static_cast<size_t>(from) * reps_.size() + to] != 0;
  }
  bool AnyCut() const {
    return std::count(ctrl_cut_.begin(), ctrl_cut_.end(), 1) +
               std::count(link_cut_.begin(), link_cut_.end(), 1) >
           0;
  }
  std::string NetText() const;

  // A consumer's reader of one replica's files, in a process of its own (a
  // crash of the replica's process leaves it; a power loss of the host
  // ends it). As PartitionReader bound by the high watermark, it hands out
  // the batches below the replica's HW in order and holds the first one
  // above it, read but not handed out. Opened on a leader that is then
  // deposed and follows the new leader, it holds a batch that the
  // returning leader's truncation cuts and another leader's batch
  // replaces.
  struct Reader {
    int32_t replica = -1;
    BootId boot{};
    uint64_t gen = 0;  // the log's cut generation when it positioned
    int64_t next = 0;  // after the batch it last handed out
    // The epochs of the batches it handed out, each from the offset of its
    // first batch (what ReaderResumeOffset walks back over).
    std::vector<EpochEntry> epochs;
    std::optional<SimBatch> held;  // read above the HW
    // The batch it handed out last, since it positioned or went back
    // (invariant 9); identity 0: none.
    SimBatch last;
    // --real-log: liblog's PartitionReader over the same replica's files
    // (RealReplicaLog::OpenReader), read beside the model's reader and
    // held to the same invariants (8, 9, 10) against the model's files.
    struct Real {
      bool open = false;
      int64_t next = 0;  // after the batch it last handed out
      SimBatch last;     // as `last` above
    } real;
  };
  std::optional<Reader> reader_;

  SimOptions options_;
  Rng rng_;
  VirtualClock clock_;
  std::unique_ptr<MemClusterStore> store_;
  // One context per replica: its calls reach the cluster state through
  // its own ReplicaStore.
  std::vector<std::unique_ptr<ReplicaStore>> stores_;
  std::vector<ReplicationContext> ctxs_;
  std::vector<Replica> reps_;
  std::vector<PendingWrite> pending_;
  uint64_t next_write_ = 1;
  int64_t steps_ = 0;
  int64_t lag_ms_ = 0;
  // Link fault probabilities.
  double p_drop_ = 0, p_stale_ = 0, p_dup_ = 0, p_corrupt_ = 0;
  double p_crash_ = 0, p_io_ = 0, p_jump_ = 0;
  // The network: per replica, cut from the controller (both ways) and
  // since which step; per ordered pair (from * n + to), messages from
  // `from` to `to` lost.
  std::vector<uint8_t> ctrl_cut_;
  std::vector<int64_t> cut_since_;
  std::vector<uint8_t> link_cut_;
  double p_net_ = 0, p_ctrl_flaky_ = 0, p_alter_flaky_ = 0;
  int64_t session_steps_ = 0;
  bool quiet_ = false;  // converging: no fault any more
  // Unclean elections (SimOptions::unclean): allowed in this schedule; the
  // epoch of the last one (-1: none yet); per replica, whether its log may
  // still hold the history that election forked from (it is not back in
  // the ISR since): the invariants of one history (1, 2, 3, 6, 7) skip it.
  bool unclean_ = false;
  int32_t unclean_epoch_ = -1;
  std::vector<uint8_t> forked_;
  // The last step in which a cluster-state call of each replica succeeded
  // (invariant 5).
  std::vector<int64_t> ctrl_ok_step_;
  // Invariant 6: per offset, the epoch and leader that acknowledged it.
  std::vector<int32_t> acked_epoch_;
  std::vector<int32_t> acked_leader_;
  // The canonical history: per offset, the identity of the record every
  // replica holds there once the offset is below its HW (0: none yet).
  std::vector<uint64_t> canon_;
  std::vector<int32_t> canon_from_;
  std::vector<uint8_t> flags_;
  // Invariant 4: which leader completed acks=all writes in each epoch.
  std::vector<int32_t> acked_by_epoch_;
  PartitionState last_state_;       // as the last check saw it
  bool corrupt_delivered_ = false;  // the link corrupted this step's response
  SimStats stats_;
  SimOutcome outcome_;
  bool failed_ = false;
};

Result<EpochEndOffset> SimLink::OffsetForLeaderEpoch(int32_t leader_epoch,
                                                     int32_t requested_epoch) {
  Simulation& s = *sim_;
  if (s.LinkCut(follower_, leader_)) {
    ++s.stats_.cut_messages;
    return Status(Code::kUnavailable,
                  fmt::format("link {}->{} cut: request lost", follower_, leader_));
  }
  if (!s.Live(leader_)) return Status(Code::kIoError, "leader unavailable");
  if (faults_ && s.Chance(s.p_drop_)) {
    ++s.stats_.link_faults;
    return Status(Code::kIoError, "request lost");
  }
  auto r = HandleOffsetForLeaderEpoch(s.ctxs_[leader_], *s.reps_[leader_].log, leader_epoch,
                                      requested_epoch);
  if (s.LinkCut(leader_, follower_)) {
    ++s.stats_.cut_messages;
    return Status(Code::kUnavailable,
                  fmt::format("link {}->{} cut: response lost", leader_, follower_));
  }
  if (faults_ && s.Chance(s.p_drop_)) {
    ++s.stats_.link_faults;
    return Status(Code::kIoError, "response lost");
  }
  return r;
}

Result<FetchResponse> SimLink::Fetch(const FetchRequest& request) {
  Simulation& s = *sim_;
  ++s.stats_.fetches;
  if (s.LinkCut(follower_, leader_)) {
    ++s.stats_.cut_messages;
    return Status(Code::kUnavailable,
                  fmt::format("link {}->{} cut: request lost", follower_, leader_));
  }
  if (!s.Live(leader_)) return Status(Code::kIoError, "leader unavailable");
  Replica& f = s.reps_[follower_];
  if (f.stash_leader != leader_ || f.stash_epoch != request.leader_epoch) {
    f.stash.clear();
    f.stash_leader = leader_;
    f.stash_epoch = request.leader_epoch;
  }
  if (faults_) {
    double roll = std::uniform_real_distribution<double>(0, 1)(s.rng_);
    if ((roll -= s.p_drop_) < 0) {
      ++s.stats_.link_faults;
      return Status(Code::kIoError, "request lost");
    }
    if ((roll -= s.p_dup_) < 0 && !f.stash.empty() && !s.LinkCut(leader_, follower_)) {
      ++s.stats_.link_faults;
      if (s.options_.trace)
        s.Trace(fmt::format("link {}<-{}: duplicate response", follower_, leader_));
      return f.stash.back();
    }
  }
  auto r = HandleFetch(s.ctxs_[leader_], *s.reps_[leader_].log, request);
  if (!r) return r;
  if (f.kill_after_fetch) {
    f.kill_after_fetch = false;
    f.killed_after_fetch = true;
    return Status(Code::kUnavailable, fmt::format("follower {} killed after its fetch", follower_));
  }
  if (s.LinkCut(leader_, follower_)) {
    // The leader recorded the fetch; the follower never hears of it.
    ++s.stats_.cut_messages;
    return Status(Code::kUnavailable,
                  fmt::format("link {}->{} cut: response lost", leader_, follower_));
  }
  if (f.stash.size() >= 4) f.stash.erase(f.stash.begin());
  f.stash.push_back(*r);
  if (!faults_) return r;
  double roll = std::uniform_real_distribution<double>(0, 1)(s.rng_);
  if ((roll -= s.p_drop_) < 0) {
    ++s.stats_.link_faults;
    return Status(Code::kIoError, "response lost");
  }
  if ((roll -= s.p_stale_) < 0 && f.stash.size() >= 2) {
    ++s.stats_.link_faults;
    size_t i = static_cast<size_t>(s.Uniform(0, static_cast<int64_t>(f.stash.size()) - 2));
    if (s.options_.trace)
      s.Trace(fmt::format("link {}<-{}: stale response {} of {}", follower_, leader_, i,
                          f.stash.size()));
    return f.stash[i];
  }
  if ((roll -= s.p_corrupt_) < 0 && !r->batches.empty()) {
    ++s.stats_.link_faults;
    s.corrupt_delivered_ = true;
    FetchResponse bad = *r;
    // The batches' boundaries, then one CRC-covered byte flipped, or a
    // batch's base offset moved (the append's continuity check).
    std::vector<std::pair<size_t, size_t>> spans;
    size_t pos = 0;
    while (pos + 61 <= bad.batches.size()) {
      BatchHeader h = DecodeBatchHeader(Bytes(bad.batches).subspan(pos));
      size_t size = h.size_bytes();
      if (size < 61 || pos + size > bad.batches.size()) break;
      spans.emplace_back(pos, size);
      pos += size;
    }
    if (!spans.empty()) {
      auto [at, size] =
          spans[static_cast<size_t>(s.Uniform(0, static_cast<int64_t>(spans.size()) - 1))];
      if (s.Chance(0.8)) {
        size_t byte = at + static_cast<size_t>(s.Uniform(21, static_cast<int64_t>(size) - 1));
        bad.batches[byte] ^= std::byte{static_cast<unsigned char>(s.Uniform(1, 255))};
        if (s.options_.trace)
          s.Trace(fmt::format("link {}<-{}: byte {} corrupted", follower_, leader_, byte));
      } else {
        // baseOffset is big-endian at bytes 0-7: bump its low byte.
        bad.batches[at + 7] ^= std::byte{static_cast<unsigned char>(s.Uniform(1, 3))};
        if (s.options_.trace)
          s.Trace(fmt::format("link {}<-{}: base offset corrupted", follower_, leader_));
      }
    }
    return bad;
  }
  return r;
}

Status ReplicaStore::Refuse() {
  ++sim_->stats_.controller_refused;
  return Status(Code::kUnavailable,
                fmt::format("replica {} cannot reach the controller (cut)", id_));
}

Result<ClusterState> ReplicaStore::Load() {
  Simulation& s = *sim_;
  if (s.ctrl_cut_[id_]) return Refuse();
  if (!s.quiet_ && s.Chance(s.p_ctrl_flaky_)) {
    ++s.stats_.controller_faults;
    return Status(Code::kUnavailable, fmt::format("replica {}: cluster-state read lost", id_));
  }
  s.ctrl_ok_step_[id_] = s.stats_.steps;
  return s.store_->Load();
}

Result<PartitionState> ReplicaStore::AlterPartition(const PartitionState& proposed,
                                                    std::string_view reason) {
  Simulation& s = *sim_;
  if (s.ctrl_cut_[id_]) return Refuse();
  if (!s.quiet_ && s.Chance(s.p_alter_flaky_)) {
    ++s.stats_.controller_faults;
    if (s.Chance(0.5)) {
      return Status(Code::kUnavailable,
                    fmt::format("replica {}: AlterPartition request lost", id_));
    }
    auto applied = s.store_->AlterPartition(proposed, reason);
    if (applied) ++s.stats_.replies_lost;
    if (s.options_.trace) {
      s.Trace(fmt::format("replica {}: AlterPartition reply lost ({})", id_,
                          applied ? "applied: " + std::string(reason) : applied.error().message()));
    }
    return Status(Code::kUnavailable, fmt::format("replica {}: AlterPartition reply lost", id_));
  }
  s.ctrl_ok_step_[id_] = s.stats_.steps;
  return s.store_->AlterPartition(proposed, reason);
}

Simulation::Simulation(const SimOptions& options) : options_(options), rng_(options.seed) {
  int32_t n = static_cast<int32_t>(Uniform(3, 5));
  ClusterState state;
  ReplicatedTopic topic;
  topic.name = kTopic;
  topic.replication_factor = n;
  topic.min_insync_replicas = kMinIsr;
  static constexpr int64_t kLags[] = {30, 100, 300, 1000};
  lag_ms_ = kLags[Uniform(0, 3)];
  topic.replica_lag_time_max_ms = lag_ms_;
  state.topics.push_back(topic);
  PartitionState p;
  p.topic = kTopic;
  p.partition = 0;
  for (int32_t i = 0; i < n; ++i) {
    state.replicas.push_back(ReplicaRoot{i, fmt::format("/sim/r{}", i)});
    p.replicas.push_back(i);
  }
  std::shuffle(p.replicas.begin(), p.replicas.end(), rng_);
  p.leader = p.replicas.front();
  p.leader_epoch = 0;
  p.partition_epoch = 0;
  p.isr = p.replicas;
  std::sort(p.isr.begin(), p.isr.end());
  state.partitions.push_back(p);
  store_ = std::make_unique<MemClusterStore>(std::move(state));
  store_->set_clock(&clock_);
  for (int32_t i = 0; i < n; ++i) {
    stores_.push_back(std::make_unique<ReplicaStore>(this, i));
    ReplicationContext ctx;
    ctx.cluster = stores_.back().get();
    ctx.clock = &clock_;
    ctx.topic = kTopic;
    ctx.partition = 0;
    ctxs_.push_back(ctx);
  }
  ctrl_cut_.assign(n, 0);
  cut_since_.assign(n, -1);
  link_cut_.assign(static_cast<size_t>(n) * n, 0);
  ctrl_ok_step_.assign(n, -1);
  forked_.assign(n, 0);
  // Drawn from the seed apart from the schedule's generator, so that the
  // other schedules draw what they drew before unclean elections existed.
  {
    uint64_t z = options.seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    unclean_ = options.unclean && ((z ^ (z >> 31)) & 7) == 0;
  }
  if (unclean_) ++stats_.unclean_schedules;

  double chaos = static_cast<double>(Uniform(1, 4)) / 4.0;
  p_drop_ = 0.05 * chaos;
  p_stale_ = 0.05 * chaos;
  p_dup_ = 0.03 * chaos;
  p_corrupt_ = 0.03 * chaos;
  p_crash_ = 0.02 * chaos;
  p_io_ = 0.01 * chaos;
  p_jump_ = 0.01 * chaos;
  steps_ = Uniform(150, 400);
  // A quarter of the schedules keep the network whole.
  const bool net = options.partitions && Chance(0.75);
  p_net_ = net ? 0.04 * chaos : 0.0;
  p_ctrl_flaky_ = net ? 0.02 * chaos : 0.0;
  // ISR changes are rare and matter most: their requests and replies get
  // lost more often.
  p_alter_flaky_ = net ? 0.10 * chaos : 0.0;
  session_steps_ = Uniform(0, 8);

  std::string policies;
  for (int32_t i = 0; i < n; ++i) {
    Replica r;
    auto policy = static_cast<SyncPolicy>(Uniform(0, 2));
    const DiskOrder order = options.independent_files  ? DiskOrder::kIndependent
                            : options.ordered_metadata ? DiskOrder::kMetadataOrdered
                                                       : DiskOrder::kOrdered;
    if (options.real_log)
      r.log = std::make_unique<RealReplicaLog>(i, policy, order, kTopic, options.state_kept);
    else
      r.log = std::make_unique<ModelReplicaLog>(i, policy, order);
    r.log->set_lenient_empty_epochs(options.lenient_empty_epochs);
    r.slow = Chance(0.2) ? 4 : 1;
    reps_.push_back(std::move(r));
    policies +=
        fmt::format(" r{}:{}{}", i, SyncPolicyName(policy), reps_[i].slow > 1 ? "/slow" : "");
  }
  for (Replica& r : reps_) PushView(r);
  last_state_ = State();
  (void)reps_[p.leader].log->BeginEpoch(0);
  outcome_.summary =
      fmt::format("replicas={} lag={}ms steps={} chaos={:.2f} net={}{}{}", n, lag_ms_, steps_,
                  chaos, net ? fmt::format("on(session={} steps)", session_steps_) : "off",
                  unclean_ ? " unclean=allowed" : "", policies);
}

void Simulation::Fail(std::string what) {
  if (failed_) return;
  failed_ = true;
  outcome_.ok = false;
  outcome_.step = stats_.steps;
  std::string replicas;
  for (const Replica& r : reps_) {
    const ReplicaFiles& f = r.log->files();
    replicas += fmt::format("\n  r{}: {} leo={} hw={} epoch={} view(leader={} epoch={})",
                            r.log->replica_id(), r.up ? "up" : "down", f.LogEnd(), f.hw,
                            f.epochs.latest() ? f.epochs.latest()->epoch : -1, r.view.leader,
                            r.view.leader_epoch);
  }
  const PartitionState& p = State();
  std::string changes;
  for (const std::string& c : store_->recent()) changes += "\n  " + c;
  outcome_.violation = fmt::format(
      "{}\n state: leader={} epoch={} pepoch={} isr={}{}\n network: {}\n recent cluster-state "
      "changes:{}",
      what, p.leader, p.leader_epoch, p.partition_epoch, IsrText(p.isr), replicas, NetText(),
      changes);
}

std::string Simulation::Origin(int64_t offset) const {
  if (flags_[offset] & kAcked) return fmt::format("acknowledged by leader {}", canon_from_[offset]);
  return fmt::format("first seen below replica {}'s HW", canon_from_[offset]);
}

const char* Simulation::KindOf(int64_t offset) const {
  uint8_t f = offset < static_cast<int64_t>(flags_.size()) ? flags_[offset] : 0;
  if (f & kAcked) return "invariant 1 (an acknowledged write lost or changed)";
  if (f & kSeen) return "invariant 3 (a record a consumer was shown changed or disappeared)";
  return "invariant 2 (two replicas hold different records at one offset)";
}

// Every up replica's log below its HW agrees with the canonical history
// (and extends it).
void Simulation::CheckBelowHw(Replica& r) {
  if (forked_[r.log->replica_id()]) return;
  const ReplicaFiles& f = r.log->files();
  if (r.verified_hw_gen != r.log->cut_generation()) {
    r.verified_hw = 0;
    r.verified_hw_gen = r.log->cut_generation();
  }
  int64_t hw = std::min(f.hw, f.LogEnd());
  if (hw <= r.verified_hw) return;
  auto it = std::lower_bound(f.log.begin(), f.log.end(), r.verified_hw,
                             [](const SimBatch& b, int64_t o) { return b.last < o; });
  int64_t done = r.verified_hw;
  for (; it != f.log.end() && it->base < hw; ++it) {
    if (static_cast<int64_t>(canon_.size()) <= it->last) {
      canon_.resize(it->last + 1, 0);
      canon_from_.resize(it->last + 1, -1);
      flags_.resize(it->last + 1, 0);
    }
    for (int64_t o = std::max(it->base, done); o <= it->last; ++o) {
      if (canon_[o] == 0) {
        canon_[o] = it->identity;
        canon_from_[o] = r.log->replica_id();
      } else if (canon_[o] != it->identity) {
        Fail(fmt::format(
            "{}: offset {} below replica {}'s HW {} is batch [{}..{}] epoch {}, "
            "but another record was committed there ({})",
            KindOf(o), o, r.log->replica_id(), f.hw, it->base, it->last, it->epoch, Origin(o)));
        return;
      }
    }
    done = it->last + 1;
  }
  r.verified_hw = std::min(done, hw);
}

// The cluster state's leader, when it runs, holds every offset of the
// canonical history: every acknowledged write, every record a consumer saw,
// every record below any replica's HW.
void Simulation::CheckLeaderHolds(Replica& r) {
  const ReplicaFiles& f = r.log->files();
  if (r.verified_all_gen != r.log->cut_generation()) {
    r.verified_all = 0;
    r.verified_all_gen = r.log->cut_generation();
  }
  int64_t need = static_cast<int64_t>(canon_.size());
  if (need <= r.verified_all) return;
  auto it = std::lower_bound(f.log.begin(), f.log.end(), r.verified_all,
                             [](const SimBatch& b, int64_t o) { return b.last < o; });
  int64_t o = r.verified_all;
  for (; o < need && it != f.log.end(); ++it) {
    for (; o <= it->last && o < need; ++o) {
      if (o < it->base || (canon_[o] != 0 && canon_[o] != it->identity)) {
        Fail(
            fmt::format("{}: the leader {} (epoch {}) holds batch [{}..{}] epoch {} at offset "
                        "{}, not the record committed there ({})",
                        KindOf(o), r.log->replica_id(), State().leader_epoch, it->base, it->last,
                        it->epoch, o, Origin(o)));
        return;
      }
    }
  }
  if (o < need) {
    Fail(fmt::format("{}: the leader {} (epoch {}) ends at {}, but offset {} was committed ({})",
                     KindOf(o), r.log->replica_id(), State().leader_epoch, f.LogEnd(), o,
                     Origin(o)));
    return;
  }
  r.verified_all = o;
}

void Simulation::CheckInvariants() {
  // The cluster state's epochs only go forward, and a new leader comes
  // with a new epoch (the CAS is what guarantees both).
  const PartitionState& p = State();
  if (p.leader_epoch < last_state_.leader_epoch ||
      (p.leader != last_state_.leader && p.leader_epoch == last_state_.leader_epoch) ||
      p.partition_epoch < last_state_.partition_epoch) {
    Fail(
        fmt::format("cluster state: leader {} epoch {} (partition epoch {}) became leader {} "
                    "epoch {} (partition epoch {}): an epoch went back or a leader changed "
                    "without a new epoch",
                    last_state_.leader, last_state_.leader_epoch, last_state_.partition_epoch,
                    p.leader, p.leader_epoch, p.partition_epoch));
    return;
  }
  if (p.leader_epoch == last_state_.leader_epoch && p.isr.size() > last_state_.isr.size())
    ++stats_.isr_expands;
  last_state_ = p;
  // A replica back in the ISR since the last unclean election (or since a
  // power loss after it) holds the new leader's history: it caught up with
  // its log end.
  for (Replica& r : reps_) {
    const int32_t id = r.log->replica_id();
    if (forked_[id] && r.up && !r.lost_data && InIsr(p, id) && p.leader_epoch >= unclean_epoch_) {
      forked_[id] = 0;
      r.verified_hw = 0;
      r.verified_all = 0;
    }
  }
  for (Replica& r : reps_) {
    for (const auto& [kind, what] : r.log->TakeDisagreements()) {
      ++stats_.disagreements[kind];
      if (options_.trace) Trace("real log disagrees with the model: " + what);
      if (options_.strict_oracle && !failed_)
        Fail("the real log disagrees with the model: " + what);
    }
  }
  CheckTruncations();
  for (Replica& r : reps_) {
    if (failed_) return;
    if (r.up) CheckBelowHw(r);
  }
  int32_t leader = State().leader;
  // A leader restarted on a stale claim holds what it kept; R54 keeps it
  // from leading on it, R55 hands the epoch to the ISR.
  if (!failed_ && Live(leader) && !StaleClaim(reps_[leader])) CheckLeaderHolds(reps_[leader]);
  for (Replica& r : reps_) {
    if (!failed_ && !r.log->contract_breach().empty()) {
      Fail("the ReplicaLog contract was broken: " + r.log->contract_breach());
    }
  }
}

// Invariant 7: no replica ever truncates a record a consumer was shown
// (a power loss's losses are not truncations).
void Simulation::CheckTruncations() {
  for (Replica& r : reps_) {
    for (const SimBatch& b : r.log->TakeTruncated()) {
      if (failed_) continue;
      for (int64_t o = b.base; o <= b.last && o < static_cast<int64_t>(flags_.size()); ++o) {
        if ((flags_[o] & kSeen) && canon_[o] == b.identity) {
          Fail(
              fmt::format("invariant 7 (a record a consumer read was truncated): replica {} cut "
                          "batch [{}..{}] epoch {} holding offset {} ({})",
                          r.log->replica_id(), b.base, b.last, b.epoch, o, Origin(o)));
          break;
        }
      }
    }
  }
}

int32_t Simulation::PickUp(bool (*pred)(const Simulation&, const Replica&)) {
  int32_t n = static_cast<int32_t>(reps_.size());
  int32_t start = static_cast<int32_t>(Uniform(0, n - 1));
  for (int32_t i = 0; i < n; ++i) {
    int32_t id = (start + i) % n;
    if (pred(*this, reps_[id])) return id;
  }
  return -1;
}

// A crash at any I/O: the replica whose model failed an I/O dies now.
void Simulation::AfterIo() {
  for (Replica& r : reps_) {
    if (r.up && r.log->io_failed()) {
      r.log->clear_io_failed();
      Crash(r.log->replica_id(), true);
    }
  }
}

void Simulation::Produce() {
  int32_t id = PickUp([](const Simulation&, const Replica& r) {
    return r.up && r.view.leader == r.log->replica_id();
  });
  if (id < 0) return;
  Replica& r = reps_[id];
  // The writer's own check of the state; one that fails refuses the write.
  if (Chance(0.7) && !RefreshView(r)) return;
  if (r.view.leader != id) return;
  if (static_cast<int32_t>(r.view.isr.size()) < kMinIsr) {
    ++stats_.refused;
    if (options_.trace)
      Trace(fmt::format("produce at {}: NOT_ENOUGH_REPLICAS isr={}", id, IsrText(r.view.isr)));
    return;
  }
  Replica::Writer w{r.view, static_cast<int>(Uniform(1, 3)), 0};
  // Now and then the writer stops at one of the points between its check
  // and its write (one paused writer per replica).
  const int pause_at = !r.paused && Chance(0.1) ? static_cast<int>(Uniform(0, 2)) : -1;
  Write(r, w, pause_at);
}

void Simulation::Write(Replica& r, Replica::Writer w, int pause_at) {
  const int32_t id = r.log->replica_id();
  for (; w.at <= 2; ++w.at) {
    if (w.at == pause_at) {
      ++stats_.paused_writes;
      if (options_.trace)
        Trace(fmt::format("produce at {} epoch {}: paused before stage {}", id, w.view.leader_epoch,
                          w.at));
      r.paused = w;
      return;
    }
    if (w.at == 0) {
      // R54, R55, as mq-produce: only on a claim of this boot.
      auto held = ClaimLeadership(ctxs_[id], *r.log, w.view);
      if (!held) return ClaimFailed(r, held.error());
      if (held->leader_epoch != w.view.leader_epoch) {
        if (options_.trace)
          Trace(fmt::format("produce at {}: epoch {} given up, leads in {} (R55)", id,
                            w.view.leader_epoch, held->leader_epoch));
        r.view = *held;
        (void)r.log->BeginEpoch(held->leader_epoch);
        return;
      }
    } else if (w.at == 1) {
      auto latest = r.log->LatestEpoch();
      if (!latest || *latest != w.view.leader_epoch) return;  // not begun (or moved on)
    } else {
      // The append checks the fences in the same call as the write (R56).
      auto b = r.log->AppendAsLeader(next_write_++, w.records, w.view.leader_epoch, clock_.NowMs());
      if (!b) {
        if (b.error().code() == Code::kFenced) ++stats_.fenced_writes;
        if (options_.trace)
          Trace(fmt::format("produce at {} epoch {}: {}", id, w.view.leader_epoch,
                            b.error().message()));
        return;
      }
      ++stats_.produced;
      pending_.push_back(PendingWrite{id, w.view.leader_epoch, *b});
      if (options_.acks_one) AckWrite(r, pending_.size() - 1, b->last + 1);
      if (options_.trace)
        Trace(fmt::format("produce at {} epoch {}: [{}..{}]", id, w.view.leader_epoch, b->base,
                          b->last));
    }
  }
}

// A paused writer goes on (its process runs again), whatever happened since.
void Simulation::Resume(int32_t id) {
  Replica& r = reps_[id];
  if (!r.up || !r.paused) return;
  Replica::Writer w = *r.paused;
  r.paused.reset();
  if (options_.trace)
    Trace(
        fmt::format("produce at {} epoch {}: resumes at stage {} (leader now {} "
                    "in epoch {})",
                    id, w.view.leader_epoch, w.at, State().leader, State().leader_epoch));
  Write(r, w, -1);
}

void Simulation::Follow() {
  int32_t id = PickUp([](const Simulation&, const Replica& r) {
    return r.up && r.view.leader != r.log->replica_id();
  });
  if (id < 0) return;
  Replica& r = reps_[id];
  if (r.slow > 1 && !Chance(1.0 / r.slow)) return;
  if (Chance(0.6)) RefreshView(r);
  int32_t leader = r.view.leader;
  if (leader < 0 || leader == id) return;
  SimLink link(this, id, leader, true);
  size_t max_bytes = Chance(0.5) ? static_cast<size_t>(Uniform(1, 400)) : size_t{1} << 20;
  int64_t leo = r.log->files().LogEnd();
  corrupt_delivered_ = false;
  // Now and then the follower's process dies within the step: after the
  // fetch reached the leader, or before one of the writes that carry its
  // state (the epoch fence, a truncation, the append, the HW), whichever
  // this step makes.
  const int kill_at =
      options_.follower_kills && Chance(0.05) ? static_cast<int>(Uniform(0, 4)) : -1;
  if (kill_at == 4)
    r.kill_after_fetch = true;
  else if (kill_at >= 0)
    r.log->KillBeforeWrite(kill_at);
  auto res = FollowerStep(ctxs_[id], *r.log, link, r.follower, max_bytes);
  const bool killed = r.log->killed() || r.killed_after_fetch;
  r.log->KillBeforeWrite(-1);
  r.kill_after_fetch = r.killed_after_fetch = false;
  if (killed) {
    ++stats_.follower_kills;
    if (options_.trace)
      Trace(fmt::format("follower {} of {}: killed within its step ({})", id, leader,
                        res ? "after it" : res.error().message()));
    Crash(id, false);
    return;
  }
  if (res && corrupt_delivered_ && res->appended_bytes > 0) {
    Fail(fmt::format("follower {} appended a corrupted fetch response", id));
    return;
  }
  if (res) {
    if (options_.trace)
      Trace(fmt::format(
          "follower {} of {}: leo {} -> {} hw {}{}{}", id, leader, leo, r.log->files().LogEnd(),
          r.log->files().hw,
          res->truncated_to >= 0 ? fmt::format(" truncated to {}", res->truncated_to) : "",
          res->caught_up ? " caught up" : ""));
  } else {
    if (options_.trace)
      Trace(fmt::format("follower {} of {}: {}", id, leader, res.error().message()));
    if (res.error().code() == Code::kInternal) {
      Fail(fmt::format("FollowerStep at replica {} failed kInternal: {}", id,
                       res.error().message()));
    }
  }
}

void Simulation::Ack() {
  int32_t id = PickUp([](const Simulation&, const Replica& r) {
    return r.up && r.view.leader == r.log->replica_id();
  });
  if (id < 0) return;
  Replica& r = reps_[id];
  if (r.slow > 1 && !Chance(1.0 / r.slow)) return;
  int32_t epoch = r.view.leader_epoch;
  // The acks=all wait: the HW and the ISR it was computed under, from one
  // read of the cluster state (through this replica's path to it).
  PartitionState s;
  auto hw = UpdateHighWatermark(ctxs_[id], *r.log, epoch, true, &s);
  if (!hw) {
    if (hw.error().code() == Code::kFenced) RefreshView(r);
    return;
  }
  bool may_ack =
      s.leader == id && s.leader_epoch == epoch && static_cast<int32_t>(s.isr.size()) >= kMinIsr;
  if (!may_ack) return;
  for (size_t i = 0; i < pending_.size() && !failed_;) {
    const PendingWrite& w = pending_[i];
    if (w.leader != id || w.epoch != epoch || w.batch.last >= *hw) {
      ++i;
      continue;
    }
    AckWrite(r, i, *hw);
  }
}

// Pending write `i` at leader `r` is acknowledged (at HW `hw`): it must be
// in the leader's log, and no other leader may have acknowledged in its
// epoch. It joins the canonical history.
void Simulation::AckWrite(Replica& r, size_t i, int64_t hw) {
  PendingWrite w = pending_[i];
  pending_[i] = std::move(pending_.back());
  pending_.pop_back();
  int32_t id = r.log->replica_id();
  int32_t epoch = w.epoch;
  // Invariant 5: an acks=all acknowledgement rests on a cluster-state read
  // of this step; a leader cut from the controller cannot have made one.
  if (!options_.acks_one && (ctrl_cut_[id] || ctrl_ok_step_[id] != stats_.steps)) {
    Fail(fmt::format(
        "invariant 5 (an acknowledgement without the controller): leader {} "
        "acknowledged [{}..{}] in epoch {} at HW {} while {}",
        id, w.batch.base, w.batch.last, epoch, hw,
        ctrl_cut_[id] ? "cut from the controller" : "its cluster-state read of this step failed"));
    return;
  }
  const ReplicaFiles& f = r.log->files();
  auto it = std::lower_bound(f.log.begin(), f.log.end(), w.batch.base,
                             [](const SimBatch& b, int64_t o) { return b.last < o; });
  if (it == f.log.end() || it->identity != w.batch.identity) {
    Fail(
        fmt::format("invariant 1: leader {} acknowledged [{}..{}] at HW {} but its log no "
                    "longer holds it",
                    id, w.batch.base, w.batch.last, hw));
    return;
  }
  if (static_cast<int32_t>(acked_by_epoch_.size()) <= epoch) acked_by_epoch_.resize(epoch + 1, -1);
  if (acked_by_epoch_[epoch] >= 0 && acked_by_epoch_[epoch] != id) {
    Fail(fmt::format("invariant 4: leaders {} and {} both completed acks=all writes in epoch {}",
                     acked_by_epoch_[epoch], id, epoch));
    return;
  }
  acked_by_epoch_[epoch] = id;
  // Invariant 6: no offset is acknowledged twice (two leaders completing
  // acks=all writes at overlapping offsets: a split brain).
  if (static_cast<int64_t>(acked_epoch_.size()) <= w.batch.last) {
    acked_epoch_.resize(w.batch.last + 1, -1);
    acked_leader_.resize(w.batch.last + 1, -1);
  }
  for (int64_t o = w.batch.base; o <= w.batch.last; ++o) {
    if (acked_epoch_[o] >= 0) {
      Fail(
          fmt::format("invariant 6 (split brain): offset {} acknowledged by leader {} in epoch "
                      "{}, and again by leader {} in epoch {} ([{}..{}])",
                      o, acked_leader_[o], acked_epoch_[o], id, epoch, w.batch.base, w.batch.last));
      return;
    }
    acked_epoch_[o] = epoch;
    acked_leader_[o] = id;
  }
  if (static_cast<int64_t>(flags_.size()) <= w.batch.last) {
    canon_.resize(w.batch.last + 1, 0);
    canon_from_.resize(w.batch.last + 1, -1);
    flags_.resize(w.batch.last + 1, 0);
  }
  for (int64_t o = w.batch.base; o <= w.batch.last; ++o) {
    flags_[o] |= kAcked;
    if (canon_[o] == 0) {
      canon_[o] = w.batch.identity;
      canon_from_[o] = id;
    } else if (canon_[o] != w.batch.identity) {
      Fail(
          fmt::format("invariant 1: leader {} acknowledged [{}..{}] in epoch {}, but another "
                      "record was committed at offset {} (below replica {}'s HW)",
                      id, w.batch.base, w.batch.last, epoch, o, canon_from_[o]));
      return;
    }
  }
  ++stats_.acked;
  if (options_.trace)
    Trace(fmt::format("ack at {} epoch {} hw {}: [{}..{}]", id, epoch, hw, w.batch.base,
                      w.batch.last));
}

void Simulation::Shrink() {
  int32_t id = PickUp([](const Simulation&, const Replica& r) {
    return r.up && r.view.leader == r.log->replica_id();
  });
  if (id < 0) return;
  Replica& r = reps_[id];
  auto before = store_->changes();
  auto res = MaybeShrinkIsr(ctxs_[id], *r.log, r.view.leader_epoch);
  if (res) {
    if (store_->changes() != before) {
      ++stats_.isr_changes;
      for (int32_t i = 0; i < static_cast<int32_t>(reps_.size()); ++i) {
        if (i != id && (LinkCut(id, i) || LinkCut(i, id))) {
          ++stats_.cut_shrinks;
          break;
        }
      }
      if (options_.trace)
        Trace(fmt::format("leader {} shrank the ISR to {}", id, IsrText(State().isr)));
    }
    r.view = *res;
  } else if (res.error().code() == Code::kFenced) {
    RefreshView(r);
  } else if (res.error().code() == Code::kUnavailable) {
    ClaimFailed(r, res.error());
  }
}

void Simulation::Refresh() {
  int32_t id = PickUp([](const Simulation&, const Replica& r) { return r.up; });
  if (id >= 0) RefreshView(reps_[id]);
}

// A consumer reads the leader (now and then another replica: consumers
// read below the HW on every replica, §17.4) up to its HW and remembers
// what it saw.
void Simulation::Consume() {
  int32_t leader = State().leader;
  if (Chance(0.3)) leader = PickUp([](const Simulation&, const Replica& r) { return r.up; });
  if (!Live(leader) || forked_[leader]) return;
  Replica& r = reps_[leader];
  CheckBelowHw(r);
  if (failed_) return;
  int64_t hw = std::min(r.log->files().hw, r.log->files().LogEnd());
  for (int64_t o = 0; o < hw && o < static_cast<int64_t>(flags_.size()); ++o) flags_[o] |= kSeen;
}

// The reader goes on (README.md, "stale reader"): after a rewrite of its
// replica's log (a truncation, a recovery) since it positioned, nothing it
// read before is handed out, and it goes back to the least of its position,
// the log end and where the leader epoch of its last batch ends (segment.md
// §9.4, R2, as PartitionReader::Next). Every batch it hands out must be
// the one the log holds there (invariant 8) and is then a record a consumer
// was shown.
void Simulation::Read() {
  ReadModel();
  if (failed_ || !reader_ || !options_.real_log) return;
  if (auto* real = dynamic_cast<RealReplicaLog*>(reps_[reader_->replica].log.get()))
    ReadReal(*real);
}

void Simulation::ReadModel() {
  if (reader_ && reps_[reader_->replica].log->RunningBoot() != reader_->boot) {
    if (options_.trace) Trace(fmt::format("reader of {}: its host restarted", reader_->replica));
    reader_.reset();
  }
  if (!reader_) {
    int32_t id = Chance(0.7) ? State().leader
                             : PickUp([](const Simulation&, const Replica& r) { return r.up; });
    if (!Live(id)) return;
    ModelReplicaLog& log = *reps_[id].log;
    reader_ =
        Reader{id, log.RunningBoot(), log.cut_generation(), log.files().log_start, {}, {}, {}, {}};
    ++stats_.readers;
    if (options_.trace) Trace(fmt::format("reader opened on {}", id));
  }
  Reader& rd = *reader_;
  Replica& r = reps_[rd.replica];
  const ReplicaFiles& f = r.log->files();
  if (rd.gen != r.log->cut_generation()) {
    rd.gen = r.log->cut_generation();
    if (!options_.stale_reader) {
      // PartitionReader's rule (ReaderResumeOffset).
      const int64_t to = ReaderResumeOffset(
          rd.next, f.LogEnd(),
          options_.reader_ignores_epoch ? std::span<const EpochEntry>() : rd.epochs, &f.epochs);
      while (!rd.epochs.empty() && rd.epochs.back().start_offset >= to) rd.epochs.pop_back();
      if (rd.held) ++stats_.reader_drops;
      if (to < rd.next) {
        // Batches it handed out were cut: it hands out what the log holds
        // from there on (a consumer's kTruncated notice).
        ++stats_.reader_cuts;
        rd.last = SimBatch{};
        auto at = std::lower_bound(f.log.begin(), f.log.end(), to,
                                   [](const SimBatch& x, int64_t o) { return x.last < o; });
        if (at != f.log.begin() && to > 0 && (at == f.log.end() || at->base >= to))
          rd.last = *(at - 1);
      }
      if (options_.trace)
        Trace(fmt::format(
            "reader of {}: log rewritten, from {} (was {}{})", rd.replica, to, rd.next,
            rd.held ? fmt::format(", held [{}..{}] dropped", rd.held->base, rd.held->last) : ""));
      rd.next = to;
      rd.held.reset();
    }
  }
  CheckBelowHw(r);
  if (failed_) return;
  const int64_t hw = std::min(f.hw, f.LogEnd());
  for (int n = 0; n < 8; ++n) {
    SimBatch b;
    if (rd.held) {
      b = *rd.held;
    } else {
      auto it = std::lower_bound(f.log.begin(), f.log.end(), rd.next,
                                 [](const SimBatch& x, int64_t o) { return x.last < o; });
      if (it == f.log.end()) break;
      b = *it;
    }
    if (b.last >= hw) {
      rd.held = b;
      break;
    }
    auto at = std::lower_bound(f.log.begin(), f.log.end(), b.base,
                               [](const SimBatch& x, int64_t o) { return x.last < o; });
    if (at == f.log.end() || at->base != b.base || at->identity != b.identity) {
      Fail(fmt::format(
          "invariant 8 (a reader handed out a record the log no longer holds, R2): the reader of "
          "replica {} handed out batch [{}..{}] epoch {} below its HW {}, read before its log was "
          "rewritten; the log holds {} there",
          rd.replica, b.base, b.last, b.epoch, hw,
          at == f.log.end()
              ? std::string("nothing")
              : fmt::format("batch [{}..{}] epoch {}", at->base, at->last, at->epoch)));
      return;
    }
    // Invariant 9: what it hands out continues what it handed out before
    // in the log as it is now: the batch it handed out last (since it went
    // back, if it did) is still the log's, right before this one. A reader
    // that went back only to its position or the log end after another
    // leader's batches took offsets it had handed out passes over them.
    if (rd.last.identity != 0) {
      auto prev = std::lower_bound(f.log.begin(), f.log.end(), rd.last.base,
                                   [](const SimBatch& x, int64_t o) { return x.last < o; });
      if (prev == f.log.end() || prev->identity != rd.last.identity || prev->last + 1 != b.base) {
        Fail(fmt::format(
            "invariant 9 (a reader passed over records another leader put where the records it "
            "handed out were, KIP-320): the reader of replica {} hands out batch [{}..{}] epoch "
            "{} after batch [{}..{}] epoch {}, but the log holds {} there now",
            rd.replica, b.base, b.last, b.epoch, rd.last.base, rd.last.last, rd.last.epoch,
            prev == f.log.end()
                ? std::string("nothing")
                : fmt::format("batch [{}..{}] epoch {}", prev->base, prev->last, prev->epoch)));
        return;
      }
    }
    // (A replica that may still hold a history an unclean election forked
    // from shows nothing the invariants of one history hold to.)
    if (!forked_[rd.replica]) {
      for (int64_t o = std::max(b.base, rd.next);
           o <= b.last && o < static_cast<int64_t>(flags_.size()); ++o)
        flags_[o] |= kSeen;
    }
    ++stats_.reader_batches;
    rd.next = b.last + 1;
    if (b.epoch >= 0 && (rd.epochs.empty() || rd.epochs.back().epoch != b.epoch))
      rd.epochs.push_back({b.epoch, b.base});
    rd.last = b;
    rd.held.reset();
  }
}

// The shipped reader goes back (TakeCut, TakeOutOfRange) to `to`: the
// batch before it in the log as it is now is what it handed out last.
void Simulation::RealReaderCut(const ReplicaFiles& f, int64_t to) {
  Reader::Real& real = reader_->real;
  if (to < real.next) ++stats_.real_reader_cuts;
  real.next = to;
  real.last = SimBatch{};
  auto at = std::lower_bound(f.log.begin(), f.log.end(), to,
                             [](const SimBatch& x, int64_t o) { return x.last < o; });
  if (at != f.log.begin() && to > f.log_start && (at == f.log.end() || at->base >= to))
    real.last = *(at - 1);
  if (options_.trace)
    Trace(fmt::format("real reader of {}: log rewritten, from {}", reader_->replica, to));
}

// A batch the shipped reader handed out: below the HW (10), the next
// offset after the one it handed out before (10), the log's batch there
// (8), right after the one it handed out before (9). False: failed.
bool Simulation::CheckRealBatch(const ReplicaFiles& f, const SimBatch& b, int64_t hw) {
  const Reader::Real& real = reader_->real;
  const int32_t id = reader_->replica;
  auto find = [&f](int64_t o) {
    return std::lower_bound(f.log.begin(), f.log.end(), o,
                            [](const SimBatch& x, int64_t off) { return x.last < off; });
  };
  auto text = [&f](std::vector<SimBatch>::const_iterator it) {
    return it == f.log.end()
               ? std::string("nothing")
               : fmt::format("batch [{}..{}] epoch {}", it->base, it->last, it->epoch);
  };
  std::string what;
  auto at = find(b.base);
  if (b.last >= hw)
    what = fmt::format(
        "invariant 10 (a reader hands out only committed records): the real reader "
        "of replica {} hands out batch [{}..{}] epoch {}, not below its HW {}",
        id, b.base, b.last, b.epoch, hw);
  else if (b.base != real.next)
    what = fmt::format(
        "invariant 10 (a reader hands out each committed record once, in order): "
        "the real reader of replica {} hands out batch [{}..{}] epoch {} after "
        "offset {}",
        id, b.base, b.last, b.epoch, real.next - 1);
  else if (at == f.log.end() || at->base != b.base || at->identity != b.identity)
    what = fmt::format(
        "invariant 8 (a reader handed out a record the log no longer holds, R2): "
        "the real reader of replica {} hands out batch [{}..{}] epoch {}; the log "
        "holds {} there",
        id, b.base, b.last, b.epoch, text(at));
  else if (real.last.identity != 0) {
    auto prev = find(real.last.base);
    if (prev == f.log.end() || prev->identity != real.last.identity || prev->last + 1 != b.base)
      what = fmt::format(
          "invariant 9 (a reader passed over records another leader put where the "
          "records it handed out were, KIP-320): the real reader of replica {} "
          "hands out batch [{}..{}] epoch {} after batch [{}..{}] epoch {}, but "
          "the log holds {} there now",
          id, b.base, b.last, b.epoch, real.last.base, real.last.last, real.last.epoch, text(prev));
  }
  if (what.empty()) return true;
  Fail(what);
  return false;
}

// Invariant 10's other half: the shipped reader reports its end with `at`,
// a batch below the HW, unread. Counted as a disagreement with the model's
// reader (a violation with --strict-oracle): README.md, "The real log".
void Simulation::RealReaderStalled(RealReplicaLog& log, const SimBatch& at, int64_t hw) {
  const std::string what = fmt::format(
      "the real reader of replica {} ends at offset {}, below its HW {}; the log holds batch "
      "[{}..{}] epoch {} there (the reader: {})",
      reader_->replica, reader_->real.next, hw, at.base, at.last, at.epoch, log.ReaderText());
  ++stats_.disagreements["real reader: ends below the HW with committed records unread"];
  if (options_.trace) Trace(what);
  if (options_.strict_oracle)
    Fail("invariant 10 (a reader hands out every committed record): " + what);
}

// README.md, "The real log": up to 8 batches of liblog's PartitionReader
// (bound by the HW) over the replica's files, each checked against the
// model's copy of them; at its end, nothing committed is left unread
// (invariant 10: it hands out exactly the committed records, in order,
// once, across truncations and power losses).
void Simulation::ReadReal(RealReplicaLog& log) {
  Reader::Real& real = reader_->real;
  const ReplicaFiles& f = log.files();
  if (!real.open || !log.reader_open()) {
    Status s = log.OpenReader(f.log_start);
    if (!s.ok()) {
      Fail(fmt::format("the real reader of replica {} does not open: {}", reader_->replica,
                       s.message()));
      return;
    }
    real = {true, f.log_start, {}};
  }
  const int64_t hw = std::min(f.hw, f.LogEnd());
  for (int n = 0; n < 8; ++n) {
    auto step = log.ReaderNext();
    if (!step) {
      Fail(fmt::format("the real reader of replica {} fails at offset {}: {}", reader_->replica,
                       real.next, step.error().message()));
      return;
    }
    if (step->cut) RealReaderCut(f, *step->cut);
    if (step->out_of_range) RealReaderCut(f, *step->out_of_range);
    if (!step->batch) {
      auto at = std::lower_bound(f.log.begin(), f.log.end(), real.next,
                                 [](const SimBatch& x, int64_t o) { return x.last < o; });
      if (at != f.log.end() && at->last < hw) RealReaderStalled(log, *at, hw);
      return;
    }
    const SimBatch& b = *step->batch;
    if (!CheckRealBatch(f, b, hw)) return;
    if (!forked_[reader_->replica]) {
      for (int64_t o = b.base; o <= b.last && o < static_cast<int64_t>(flags_.size()); ++o)
        flags_[o] |= kSeen;
    }
    ++stats_.real_reader_batches;
    real.next = b.last + 1;
    real.last = b;
  }
}

// A crash: a process kill keeps the page cache; a power loss keeps only
// what reached the disk. A power loss that would take the only copy of
// acknowledged writes (no other live ISR member, the page cache not synced
// at every write) is turned into a kill: one host's replicas share their
// power, and mq(7) promises nothing beyond --fsync there.
void Simulation::Crash(int32_t id, bool allow_power_loss) {
  Replica& r = reps_[id];
  if (!r.up) return;
  const PartitionState& s = State();
  bool other_live_isr = false;
  bool isr_lost = false;  // another ISR member already lost its page cache
  // (A replica on a stale claim, R54, may hold less: it does not count.)
  for (int32_t m : s.isr) {
    if (m == id) continue;
    other_live_isr |= Live(m) && !StaleClaim(reps_[m]);
    isr_lost |= reps_[m].lost_data || StaleClaim(reps_[m]);
  }
  // A second power loss in an ISR one of whose members already lost what
  // it did not sync is a kill: a restarted replica gives its leadership to
  // the ISR (R55), which must hold what was acknowledged.
  bool power = allow_power_loss && Chance(0.4) && !isr_lost &&
               (r.log->policy() == SyncPolicy::kEveryWrite || other_live_isr);
  // A leader that has led in its epoch loses power and its host is back
  // before the controller notices (R54, R55 must keep it from leading on).
  // (Only with another live ISR member, even at every-write: R55 hands
  // the partition to the ISR, which must be able to take it.)
  if (power && other_live_isr && id == s.leader && !StaleClaim(r) &&
      r.log->claim().epoch == s.leader_epoch && Chance(0.5)) {
    ++stats_.crashes;
    return Reboot(id);
  }
  r.up = false;
  ++stats_.crashes;
  if (power) {
    ++stats_.power_losses;
    r.log->PowerLoss(rng_);
    // Its disk may hold the history an unclean election forked from.
    if (unclean_epoch_ >= 0) forked_[id] = 1;
    r.lost_data = r.log->policy() != SyncPolicy::kEveryWrite;
  } else {
    r.log->Kill();
  }
  r.stash.clear();
  r.paused.reset();
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [id](const PendingWrite& w) { return w.leader == id; }),
                 pending_.end());
  if (options_.trace)
    Trace(fmt::format("crash {} ({}) leo now {}", id, power ? "power loss" : "kill",
                      r.log->files().LogEnd()));
  Controller(false);
}

// Unclean schedules: the hosts of every in-sync replica go down together
// (process kills), and the controller elects what it can.
void Simulation::IsrOutage() {
  const std::vector<int32_t> isr = State().isr;
  ++stats_.isr_outages;
  if (options_.trace) Trace(fmt::format("outage of the ISR {}", IsrText(isr)));
  for (int32_t id : isr) Crash(id, false);
}

// A replica comes back. One that lost unsynced data leaves the ISR first
// (as Kafka fences a broker that restarts with a new broker epoch,
// KIP-903): it may hold less than the HW it reported.
void Simulation::Restart(int32_t id) {
  Replica& r = reps_[id];
  if (r.up) return;
  const PartitionState& s = State();
  if (r.lost_data && InIsr(s, id)) {
    if (s.leader == id || s.isr.size() <= 1) return;  // stays down (cannot happen)
    // It registers with the controller, which takes it out of the ISR: cut
    // from the controller, it waits.
    if (ctrl_cut_[id]) return;
    PartitionState next = s;
    next.isr.erase(std::remove(next.isr.begin(), next.isr.end(), id), next.isr.end());
    auto res = store_->AlterPartition(next, "replica restarted after losing unsynced data");
    if (!res) return;
    ++stats_.isr_changes;
  }
  r.up = true;
  r.lost_data = false;
  NewProcess(r);
  // (Not on a claim of another boot: it leads in no epoch before R55.)
  if (State().leader == id && !ctrl_cut_[id] && !StaleClaim(r)) {
    auto latest = r.log->LatestEpoch();
    if (latest && *latest < State().leader_epoch) (void)r.log->BeginEpoch(State().leader_epoch);
  }
  if (options_.trace)
    Trace(fmt::format("restart {} leo {} hw {}", id, r.log->files().LogEnd(), r.log->files().hw));
}

// A replica's process starts again: its view of the cluster state died
// with the old one; until it reads the state again, it neither leads nor
// follows.
void Simulation::NewProcess(Replica& r) {
  r.follower = FollowerState{};
  r.paused.reset();
  r.verified_hw = 0;
  r.verified_all = 0;
  r.view = PartitionState{};
  r.view.leader = -1;
  RefreshView(r);
}

// The leader's host loses power and boots again at once: the process
// restarts on a log that kept a prefix of its unsynced writes, still named
// leader in its epoch (the controller saw no session end). No ISR change
// here: the replication logic must fence it (R54) and give the epoch up
// (R55).
void Simulation::Reboot(int32_t id) {
  Replica& r = reps_[id];
  ++stats_.power_losses;
  ++stats_.leader_reboots;
  r.log->PowerLoss(rng_);
  if (unclean_epoch_ >= 0) forked_[id] = 1;
  r.stash.clear();
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [id](const PendingWrite& w) { return w.leader == id; }),
                 pending_.end());
  NewProcess(r);
  if (options_.trace)
    Trace(fmt::format("reboot of leader {} (power loss) leo now {}", id, r.log->files().LogEnd()));
}

// A leader-side call failed on the claim (R54, R55): it rereads the state.
void Simulation::ClaimFailed(Replica& r, const Status& s) {
  if (options_.trace) Trace(fmt::format("claim at {}: {}", r.log->replica_id(), s.message()));
  RefreshView(r);
}

// The controller: a crashed leader is replaced by a clean election; with
// `move_leader`, leadership is moved off a running leader (a preferred
// election, or the leader's directory marked failed while its process runs
// on: a zombie that must be fenced).
void Simulation::Controller(bool move_leader) {
  const PartitionState s = State();
  ElectMode mode = ElectMode::kUnavailableOnly;
  bool cut = false;
  bool dir_failed = false;  // the leader's directory failed: it must not lead again
  if (s.leader < 0 || LeaderGone(s.leader)) {
    cut = Live(s.leader);
    // No ISR member can lead: a schedule that allows it elects a replica
    // outside the ISR, which may lack acknowledged writes.
    if (unclean_) mode = ElectMode::kUnclean;
  } else if (move_leader) {
    if (Chance(0.5))
      mode = ElectMode::kPreferred;
    else
      dir_failed = true;
  } else {
    return;
  }
  // liblog's election as mq-isr elect runs it, over what the controller
  // sees: a leader gone (or whose directory failed) is unavailable.
  class View : public ElectionView {
   public:
    View(Simulation& sim, int32_t old, bool cut, bool dir_failed)
        : sim_(sim), old_(old), cut_(cut), dir_failed_(dir_failed) {}
    bool LeaderAvailable(int32_t id) override { return !dir_failed_ && !sim_.LeaderGone(id); }
    bool Electable(int32_t id) override {
      return (!dir_failed_ || id != old_) && sim_.Electable(id);
    }
    std::string Reason(const PartitionState&, const ElectionDecision& d) override {
      if (d.kind == ElectionKind::kPreferred) return "preferred election";
      if (dir_failed_) return "clean election: the leader's directory failed";
      if (d.kind == ElectionKind::kUnclean) return "unclean election: no ISR member can lead";
      return cut_ ? "clean election: the controller lost the leader"
                  : "clean election: the leader is down";
    }

   private:
    Simulation& sim_;
    int32_t old_;
    bool cut_, dir_failed_;
  };
  auto elected = ElectAndStore(*store_, store_->state(), s.topic, s.partition, mode,
                               [&](const ClusterState&, const PartitionState&) {
                                 return std::make_unique<View>(*this, s.leader, cut, dir_failed);
                               });
  if (!elected || elected->outcome != ElectionOutcome::kElected) return;
  const bool unclean = elected->kind == ElectionKind::kUnclean;
  const PartitionState* res = &elected->stored;
  const std::string& reason = elected->reason;
  ++stats_.elections;
  if (cut) ++stats_.cut_elections;
  if (unclean) {
    // The history forks here: what the new leader lacks of the old one
    // (acknowledged, shown to consumers) is lost, as unclean elections
    // lose it. The invariants of one history start again from the new
    // leader's log; every other replica is left out of them until it is
    // back in the ISR (it reconciled with the new leader).
    ++stats_.unclean_elections;
    unclean_epoch_ = res->leader_epoch;
    canon_.clear();
    canon_from_.clear();
    flags_.clear();
    acked_epoch_.clear();
    acked_leader_.clear();
    for (Replica& r : reps_) {
      forked_[r.log->replica_id()] = r.log->replica_id() != res->leader;
      r.verified_hw = 0;
      r.verified_all = 0;
    }
  }
  if (options_.trace)
    Trace(fmt::format("elected {} epoch {} isr {} ({})", res->leader, res->leader_epoch,
                      IsrText(res->isr), reason));
  Replica& l = reps_[res->leader];
  Status st = l.log->BeginEpoch(res->leader_epoch);
  PushView(l);
  if (!st.ok())
    if (options_.trace) Trace(fmt::format("BeginEpoch at {}: {}", res->leader, st.message()));
  AfterIo();
}

std::string Simulation::NetText() const {
  std::string out;
  const int32_t n = static_cast<int32_t>(reps_.size());
  for (int32_t i = 0; i < n; ++i) {
    if (ctrl_cut_[i]) out += fmt::format(" r{}-/-controller(since step {})", i, cut_since_[i]);
  }
  for (int32_t a = 0; a < n; ++a) {
    for (int32_t b = 0; b < n; ++b) {
      if (LinkCut(a, b)) out += fmt::format(" r{}-/->r{}", a, b);
    }
  }
  return out.empty() ? "whole" : out.substr(1);
}

void Simulation::CutController(int32_t id) {
  if (ctrl_cut_[id]) return;
  ctrl_cut_[id] = 1;
  cut_since_[id] = stats_.steps;
}

void Simulation::CutLink(int32_t from, int32_t to) {
  if (from != to) link_cut_[static_cast<size_t>(from) * reps_.size() + to] = 1;
}

// A network event: a cut, or (when something is cut) a heal.
void Simulation::Network() {
  if (AnyCut() && Chance(0.45)) {
    Heal();
  } else {
    Cut();
  }
  if (options_.trace) Trace("network: " + NetText());
}

void Simulation::Cut() {
  ++stats_.partitions;
  const int32_t n = static_cast<int32_t>(reps_.size());
  const int32_t leader = State().leader;
  auto any = [&] { return static_cast<int32_t>(Uniform(0, n - 1)); };
  auto other = [&](int32_t not_this) {
    int32_t x = static_cast<int32_t>(Uniform(0, n - 2));
    return x >= not_this ? x + 1 : x;
  };
  double roll = std::uniform_real_distribution<double>(0, 1)(rng_);
  auto take = [&roll](double p) { return (roll -= p) < 0; };
  if (take(0.30) && leader >= 0) {
    // The leader loses the controller while its followers keep it: after
    // the session timeout the controller elects another (split brain).
    CutController(leader);
  } else if (take(0.10)) {
    for (int32_t i = 0; i < n; ++i) CutController(i);  // the controller reachable by nobody
  } else if (take(0.15)) {
    CutController(any());
  } else if (take(0.15)) {
    int32_t a = any(), b = other(a);  // symmetric
    CutLink(a, b);
    CutLink(b, a);
  } else if (take(0.10)) {
    int32_t a = any();
    CutLink(a, other(a));  // asymmetric: one direction only
  } else if (take(0.10) && leader >= 0) {
    // The leader cut from every follower, not from the controller: the
    // ISR shrinks to it.
    for (int32_t i = 0; i < n; ++i) {
      CutLink(leader, i);
      CutLink(i, leader);
    }
  } else {
    int32_t a = any();  // a host isolated from everything
    CutController(a);
    for (int32_t i = 0; i < n; ++i) {
      CutLink(a, i);
      CutLink(i, a);
    }
  }
}

void Simulation::Heal() {
  ++stats_.heals;
  if (Chance(0.4)) {
    HealAll();
    return;
  }
  // One cut, drawn among all: a controller path or one direction of a link.
  std::vector<int64_t> cuts;
  const int64_t n = static_cast<int64_t>(reps_.size());
  for (int64_t i = 0; i < n; ++i) {
    if (ctrl_cut_[i]) cuts.push_back(-1 - i);
  }
  for (int64_t i = 0; i < n * n; ++i) {
    if (link_cut_[i]) cuts.push_back(i);
  }
  if (cuts.empty()) return;
  int64_t c = cuts[static_cast<size_t>(Uniform(0, static_cast<int64_t>(cuts.size()) - 1))];
  if (c < 0) {
    ctrl_cut_[-1 - c] = 0;
    cut_since_[-1 - c] = -1;
  } else {
    link_cut_[c] = 0;
  }
}

void Simulation::HealAll() {
  std::fill(ctrl_cut_.begin(), ctrl_cut_.end(), 0);
  std::fill(cut_since_.begin(), cut_since_.end(), -1);
  std::fill(link_cut_.begin(), link_cut_.end(), 0);
}

void Simulation::Step() {
  ++stats_.steps;
  clock_.Advance(Uniform(1, 5));
  double roll = std::uniform_real_distribution<double>(0, 1)(rng_);
  auto take = [&roll](double p) { return (roll -= p) < 0; };
  if (unclean_ && take(0.01)) {
    IsrOutage();
  } else if (take(p_crash_)) {
    int32_t id = PickUp([](const Simulation&, const Replica& r) { return r.up; });
    if (id >= 0) Crash(id, true);
  } else if (take(p_io_)) {
    int32_t id = PickUp([](const Simulation&, const Replica& r) { return r.up; });
    if (id >= 0) {
      ++stats_.io_faults;
      reps_[id].log->FailNextIo(static_cast<size_t>(Uniform(0, 3)));
    }
  } else if (take(p_jump_)) {
    ++stats_.clock_jumps;
    int64_t d = Chance(0.3) ? -Uniform(0, 2 * lag_ms_) : Uniform(lag_ms_, 3 * lag_ms_);
    clock_.Advance(d);
    if (options_.trace) Trace(fmt::format("clock jumps {} ms", d));
  } else if (take(p_net_)) {
    Network();
  } else if (take(0.02)) {
    Controller(true);
  } else if (take(0.05)) {
    int32_t id = PickUp([](const Simulation&, const Replica& r) { return !r.up; });
    if (id >= 0) Restart(id);
  } else if (take(0.03)) {
    int32_t id = PickUp([](const Simulation&, const Replica& r) {
      return r.up && r.log->policy() == SyncPolicy::kPeriodic;
    });
    if (id >= 0) reps_[id].log->Sync();
  } else if (take(0.18)) {
    Produce();
  } else if (take(0.12)) {
    Ack();
  } else if (take(0.04)) {
    Shrink();
  } else if (take(0.05)) {
    Refresh();
  } else if (take(0.04)) {
    Consume();
  } else if (take(0.04)) {
    Read();
  } else if (std::any_of(reps_.begin(), reps_.end(),
                         [](const Replica& r) { return r.paused.has_value(); }) &&
             take(0.03)) {
    int32_t id = PickUp([](const Simulation&, const Replica& r) { return r.up && r.paused; });
    if (id >= 0) Resume(id);
  } else {
    Follow();
  }
  AfterIo();
  Controller(false);
  CheckInvariants();
}

// Every replica comes back, the network heals, and fetching goes on until
// every replica holds the leader's log and its HW reached the end.
void Simulation::Quiesce() {
  for (Replica& r : reps_) r.log->CancelIoFault();
  if (AnyCut()) {
    ++stats_.heals;
    HealAll();
    if (options_.trace) Trace("network: whole again");
  }
  quiet_ = true;
  // Paused writers go on first: their appends must be fenced or cut.
  for (Replica& r : reps_) Resume(r.log->replica_id());
  CheckInvariants();
  for (int round = 0; round < 400 && !failed_; ++round) {
    ++stats_.steps;
    clock_.Advance(1);
    for (Replica& r : reps_) {
      if (!r.up) Restart(r.log->replica_id());
    }
    Controller(false);
    int32_t leader = State().leader;
    if (!Live(leader)) {
      Fail(fmt::format("liveness: after every replica returned, the leader {} is not running",
                       leader));
      return;
    }
    for (Replica& r : reps_) {
      RefreshView(r);
      int32_t id = r.log->replica_id();
      if (id == leader) continue;
      SimLink link(this, id, leader, false);
      int64_t leo = r.log->files().LogEnd();
      auto res = FollowerStep(ctxs_[id], *r.log, link, r.follower);
      r.last_error = res ? "" : res.error().message();
      if (options_.trace) {
        Trace(fmt::format("converging: follower {} of {}: leo {} -> {}: {}", id, leader, leo,
                          r.log->files().LogEnd(), res ? "ok" : r.last_error));
      }
    }
    Replica& l = reps_[leader];
    (void)UpdateHighWatermark(ctxs_[leader], *l.log, State().leader_epoch);
    AfterIo();
    CheckInvariants();
    if (failed_) return;
    int64_t end = l.log->files().LogEnd();
    // Every replica back in the ISR, every log the leader's, the HW at
    // the end everywhere.
    bool done = l.log->files().hw == end && State().isr.size() == reps_.size();
    for (const Replica& r : reps_) {
      done = done && r.up && r.log->files().LogEnd() == end && r.log->files().hw == end;
    }
    if (done) {
      CheckFinal();
      return;
    }
  }
  if (failed_) return;
  std::string where;
  for (const Replica& r : reps_) {
    where += fmt::format(" r{}:leo={},hw={}", r.log->replica_id(), r.log->files().LogEnd(),
                         r.log->files().hw);
    if (!r.last_error.empty()) where += fmt::format(" (FollowerStep: {})", r.last_error);
  }
  Fail("liveness: the replicas did not converge (or the ISR did not regrow to " +
       IsrText(State().isr) + " being all) within 400 rounds after every fault healed:" + where);
}

// After convergence: all logs identical, batch by batch.
void Simulation::CheckFinal() {
  const ReplicaFiles& l = reps_[State().leader].log->files();
  for (const Replica& r : reps_) {
    const ReplicaFiles& f = r.log->files();
    if (f.log.size() != l.log.size()) {
      Fail(fmt::format("liveness: after convergence replica {} holds {} batches, the leader {}",
                       r.log->replica_id(), f.log.size(), l.log.size()));
      return;
    }
    for (size_t i = 0; i < f.log.size() && i < l.log.size(); ++i) {
      if (f.log[i].identity != l.log[i].identity || *f.log[i].bytes != *l.log[i].bytes) {
        Fail(fmt::format(
            "{}: after convergence replica {} holds [{}..{}] epoch {} where the "
            "leader {} holds [{}..{}] epoch {}",
            KindOf(f.log[i].base), r.log->replica_id(), f.log[i].base, f.log[i].last,
            f.log[i].epoch, State().leader, l.log[i].base, l.log[i].last, l.log[i].epoch));
        return;
      }
    }
  }
}

SimOutcome Simulation::Run() {
  for (int64_t i = 0; i < steps_ && !failed_; ++i) Step();
  if (!failed_) Quiesce();
  stats_.epochs_given_up = store_->restart_changes();
  outcome_.stats = stats_;
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  for (const Replica& r : reps_) {
    for (const SimBatch& b : r.log->files().log) mix(b.identity);
    mix(static_cast<uint64_t>(r.log->files().hw));
  }
  for (int64_t v :
       {stats_.steps, stats_.crashes, stats_.power_losses, stats_.elections, stats_.produced,
        stats_.acked, stats_.fetches, stats_.link_faults, stats_.partitions, stats_.heals,
        stats_.controller_refused, stats_.replies_lost, stats_.cut_messages}) {
    mix(static_cast<uint64_t>(v));
  }
  outcome_.fingerprint = h;
  return outcome_;
}

}  // namespace

SimOutcome RunSchedule(const SimOptions& options) {
  // Every replication call of the schedule runs with its planted bugs.
  ScopedPlantedBugs planted(options.bugs);
  Simulation sim(options);
  return sim.Run();
}

}  // namespace mq::sim
