// The replication logic of one partition (mq/replication.h,
// format-spec/replication.md §17), after Kafka's Partition,
// ReplicaFetcherThread and AbstractFetcherThread.
#include "mq/replication.h"

#include <algorithm>
#include <climits>
#include <ctime>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/batch.h"
#include "replication/planted_bugs.h"

namespace mq {

namespace internal {
PlantedBugs planted_bugs;
}  // namespace internal

namespace {

class RealClock : public Clock {
 public:
  int64_t NowMs() override {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
  }
};

std::string Where(const ReplicationContext& ctx) {
  return fmt::format("{}-{}", ctx.topic, ctx.partition);
}

// The cluster state: ctx.loaded, or else loaded into `*read`.
Result<const ClusterState*> LoadState(const ReplicationContext& ctx, ClusterState* read) {
  if (ctx.loaded != nullptr) return ctx.loaded;
  auto loaded = ctx.cluster->Load();
  if (!loaded) return loaded.error();
  *read = std::move(*loaded);
  return read;
}

// The partition's state in `state`.
Result<PartitionState> PartitionIn(const ReplicationContext& ctx, const ClusterState& state) {
  const PartitionState* p = state.Partition(ctx.topic, ctx.partition);
  if (!p)
    return Status(Code::kNotFound,
                  fmt::format("{}: not a partition of the cluster state", Where(ctx)));
  return *p;
}

Result<PartitionState> LoadPartition(const ReplicationContext& ctx) {
  ClusterState read;
  auto state = LoadState(ctx, &read);
  if (!state) return state.error();
  return PartitionIn(ctx, **state);
}

// kFenced unless `me` leads `p` in `epoch`.
Status CheckLeader(const ReplicationContext& ctx, const PartitionState& p, int32_t me,
                   int32_t epoch) {
  if (IsLeader(p, me) && p.leader_epoch == epoch) return Status::Ok();
  return Status(Code::kFenced,
                fmt::format("{}: replica {} does not lead in epoch {} (the cluster state says "
                            "leader {} in epoch {})",
                            Where(ctx), me, epoch, p.leader, p.leader_epoch));
}

std::optional<FollowerPosition> Find(const std::vector<FollowerPosition>& all, int32_t replica,
                                     int32_t epoch) {
  for (const FollowerPosition& f : all)
    if (f.replica == replica && f.leader_epoch == epoch) return f;
  return std::nullopt;
}

// The leader's own entry: when it began leading in `epoch` (recorded the
// first time a replication call meets the epoch). Followers without a
// position of this epoch count as caught up at that time, as Kafka's leader
// resets lastCaughtUpTime when it takes over.
Result<FollowerPosition> LeaderEntry(const ReplicationContext& ctx, ReplicaLog& leader,
                                     int32_t epoch, const std::vector<FollowerPosition>& all) {
  if (auto mine = Find(all, leader.replica_id(), epoch)) return *mine;
  auto leo = leader.LogEndOffset();
  if (!leo) return leo.error();
  const int64_t now = ctx.clock->NowMs();
  FollowerPosition mine{leader.replica_id(), epoch, *leo, now, now, *leo};
  MQ_RETURN_IF_ERROR(leader.RecordFollower(mine));
  return mine;
}

std::string BootText(const BootId& b) {
  std::string hex;
  for (uint8_t x : b) hex += fmt::format("{:02x}", x);
  return hex;
}

// R55: the replica `me`, named leader in `p`, restarted since its claim
// (another boot: its log may lack what it held). As the ISR's only member
// (nobody in the ISR holds more) it leads on in the next epoch, so that
// followers cut what it lost (§17.3 step 2); otherwise it leaves the ISR,
// whose other members hold every acknowledged record, and the partition
// has no leader until an election. The claim is renewed on this boot only
// after the change.
Result<PartitionState> GiveUpEpoch(const ReplicationContext& ctx, ReplicaLog& leader,
                                   const PartitionState& p, const LeaderClaim& claim,
                                   const BootId& boot) {
  const int32_t me = leader.replica_id();
  const std::string why = fmt::format(
      "leader {} restarted (R55): its claim on epoch {} is of boot {}, its host runs boot {}", me,
      claim.epoch, BootText(claim.boot), BootText(boot));
  PartitionState proposed = p;
  proposed.leader_epoch = p.leader_epoch + 1;
  const bool alone = p.isr.size() == 1 && p.isr.front() == me;
  if (!alone) {
    proposed.leader = -1;
    proposed.isr.erase(std::remove(proposed.isr.begin(), proposed.isr.end(), me),
                       proposed.isr.end());
  }
  auto done = ctx.cluster->AlterPartition(
      proposed, why + (alone ? "; the only ISR member: a new epoch" : "; it leaves the ISR"));
  if (!done) return done.error();
  MQ_RETURN_IF_ERROR(leader.StoreLeaderClaim({done->leader_epoch, boot}));
  if (alone) return *done;
  return Status(Code::kUnavailable,
                fmt::format("{}: replica {} gave up leading after its host restarted (R55): its "
                            "log may lack records that the ISR {{{}}} holds; it left the ISR, and "
                            "the partition has no leader in epoch {}: run mq-isr elect",
                            Where(ctx), me, FormatReplicaList(done->isr), done->leader_epoch));
}

// ClaimLeadership's decision on the claim as stored, under the leader lock.
Result<PartitionState> ClaimLocked(const ReplicationContext& ctx, ReplicaLog& leader,
                                   const PartitionState& p, const BootId& boot) {
  auto claim = leader.ReadLeaderClaim();
  if (!claim) return claim.error();
  if (claim->epoch > p.leader_epoch)
    return Status(Code::kFenced,
                  fmt::format("{}: replica {} claimed leader epoch {}, above epoch {} of the "
                              "cluster state (R54)",
                              Where(ctx), leader.replica_id(), claim->epoch, p.leader_epoch));
  if (claim->epoch == p.leader_epoch && claim->boot == boot) return p;
  // No claim (it never led), or one taken on this boot: a new epoch.
  if (claim->epoch < 0 || claim->boot == boot || Planted().no_reboot_fence) {
    MQ_RETURN_IF_ERROR(leader.StoreLeaderClaim({p.leader_epoch, boot}));
    return p;
  }
  return GiveUpEpoch(ctx, leader, p, *claim, boot);
}

}  // namespace

Result<PartitionState> ClaimLeadership(const ReplicationContext& ctx, ReplicaLog& leader,
                                       const PartitionState& p) {
  const int32_t me = leader.replica_id();
  MQ_RETURN_IF_ERROR(CheckLeader(ctx, p, me, p.leader_epoch));
  const BootId boot = leader.RunningBoot();
  if (boot == BootId{})
    return Status(Code::kUnavailable,
                  fmt::format("{}: the kernel's boot id cannot be read: replica {} cannot claim "
                              "leader epoch {} (R54)",
                              Where(ctx), me, p.leader_epoch));
  auto claim = leader.LoadLeaderClaim();
  if (!claim) return claim.error();
  if (claim->epoch == p.leader_epoch && claim->boot == boot) return p;
  // Anything else is decided again under the leader lock, on the claim as
  // stored now: another process of this replica (mq-produce, mq-replicate
  // --serve) may have stored one since this one read it, and two stores at
  // once would race for one staging file (R39) or put an older epoch back.
  Result<PartitionState> out = p;
  Status s = leader.WithLeaderLock([&]() -> Status {
    out = ClaimLocked(ctx, leader, p, boot);
    return out ? Status::Ok() : out.error();
  });
  if (!s.ok()) return s;
  return out;
}

namespace {

// R55 at a follower: one that restarted since its claim (another boot) may
// have lost records while in the ISR: it leaves the ISR before it fetches,
// and rejoins as any follower does (§17.5). Then the claim is renewed on
// this boot (on its old epoch: the cluster state has moved past it).
Status LeaveIsrAfterRestart(const ReplicationContext& ctx, ReplicaLog& follower,
                            const PartitionState& p) {
  const int32_t me = follower.replica_id();
  const BootId boot = follower.RunningBoot();
  auto moot = [&](const LeaderClaim& claim) {
    return claim.epoch < 0 || claim.boot == boot || boot == BootId{} || Planted().no_reboot_fence;
  };
  auto cached = follower.LoadLeaderClaim();
  if (!cached) return cached.error();
  if (moot(*cached)) return Status::Ok();
  // Stored under the leader lock, as ClaimLeadership stores.
  return follower.WithLeaderLock([&]() -> Status {
    auto claim = follower.ReadLeaderClaim();
    if (!claim) return claim.error();
    if (moot(*claim)) return Status::Ok();
    // The ISR's only member stays: nobody in the ISR holds more (as R55's
    // leader alone in the ISR leads on).
    if (InIsr(p, me) && p.isr.size() > 1) {
      PartitionState proposed = p;
      proposed.isr.erase(std::remove(proposed.isr.begin(), proposed.isr.end(), me),
                         proposed.isr.end());
      auto done = ctx.cluster->AlterPartition(
          proposed, fmt::format("replica {} restarted (R55): its claim on epoch {} is of boot {}, "
                                "its host runs boot {}; it leaves the ISR",
                                me, claim->epoch, BootText(claim->boot), BootText(boot)));
      if (!done) return done.error();
    }
    return follower.StoreLeaderClaim({claim->epoch, boot});
  });
}

// ClaimLeadership for a call made in p.leader_epoch: kFenced when R55
// moved the leader to a new epoch (the caller's epoch is over).
Status ClaimEpoch(const ReplicationContext& ctx, ReplicaLog& leader, const PartitionState& p) {
  auto held = ClaimLeadership(ctx, leader, p);
  if (!held) return held.error();
  if (held->leader_epoch == p.leader_epoch) return Status::Ok();
  return Status(Code::kFenced,
                fmt::format("{}: leader epoch {} is over: replica {} leads in "
                            "epoch {} (R55)",
                            Where(ctx), p.leader_epoch, held->leader, held->leader_epoch));
}

// Starts `epoch` in the leader's log unless it holds it already.
Status EnsureEpoch(ReplicaLog& leader, int32_t epoch) { return leader.EnsureEpoch(epoch); }

// UpdateHighWatermark's body; the caller holds the leader lock. `leo` and
// `followers`: the leader's LEO and its followers' positions when the
// caller has just read them (nullopt: read here).
Result<int64_t> ComputeHighWatermark(ReplicaLog& leader, const PartitionState& p,
                                     std::optional<int64_t> leo = std::nullopt,
                                     const std::vector<FollowerPosition>* followers = nullptr) {
  auto stored = leader.HighWatermark();
  if (!stored) return stored.error();
  if (!leo) {
    auto now = leader.LogEndOffset();
    if (!now) return now.error();
    leo = *now;
  }
  int64_t hw = *leo;
  if (!Planted().hw_at_log_end) {
    std::vector<FollowerPosition> read;
    if (!followers) {
      auto all = leader.Followers();
      if (!all) return all.error();
      read = std::move(*all);
      followers = &read;
    }
    for (int32_t r : p.isr) {
      if (r == leader.replica_id()) continue;
      auto f = Find(*followers, r, p.leader_epoch);
      // An ISR member not heard from in this epoch holds the HW where it is.
      hw = std::min(hw, f ? f->log_end_offset : std::max<int64_t>(*stored, 0));
    }
  }
  if (hw > *stored) {
    MQ_RETURN_IF_ERROR(leader.SetHighWatermark(hw));
    return hw;
  }
  return *stored;
}

// The planted bug hw_without_controller (PlantedBugs): the partition's
// state as the leader's own positions of `epoch` show it, it leading and
// every replica it heard from in the epoch in the ISR.
Result<PartitionState> StateFromPositions(const ReplicationContext& ctx, ReplicaLog& leader,
                                          int32_t epoch) {
  auto all = leader.Followers();
  if (!all) return all.error();
  PartitionState p;
  p.topic = ctx.topic;
  p.partition = ctx.partition;
  p.leader = leader.replica_id();
  p.leader_epoch = epoch;
  p.isr.push_back(p.leader);
  for (const FollowerPosition& f : *all)
    if (f.leader_epoch == epoch && f.replica != p.leader) p.isr.push_back(f.replica);
  p.replicas = p.isr;
  return p;
}

}  // namespace

namespace {
Result<PartitionState> ShrinkLocked(const ReplicationContext& ctx, ReplicaLog& leader,
                                    int32_t leader_epoch, const PartitionState& state,
                                    int64_t lag_ms, const std::vector<int32_t>& stopped);
}  // namespace

std::optional<int64_t> LastCaughtUpMs(const std::vector<FollowerPosition>& positions,
                                      int32_t replica, int32_t leader, int32_t epoch) {
  if (auto f = Find(positions, replica, epoch)) return f->last_caught_up_ms;
  if (auto mine = Find(positions, leader, epoch)) return mine->last_caught_up_ms;
  return std::nullopt;
}

ReplicaLag LagOf(int32_t replica, int32_t leader, int32_t epoch, int64_t leader_log_end,
                 int64_t replica_log_end, const std::vector<FollowerPosition>& positions,
                 int64_t now_ms) {
  ReplicaLag lag;
  if (leader_log_end >= 0 && replica_log_end >= 0)
    lag.offsets = std::max<int64_t>(0, leader_log_end - replica_log_end);
  if (replica == leader) {
    lag.ms = 0;
    return lag;
  }
  if (auto f = Find(positions, replica, epoch)) lag.last_fetch_ms = f->last_fetch_ms;
  if (auto caught_up = LastCaughtUpMs(positions, replica, leader, epoch)) {
    lag.last_caught_up_ms = *caught_up;
    lag.ms = std::max<int64_t>(0, now_ms - *caught_up);
  }
  return lag;
}

Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

Result<int64_t> UpdateHighWatermark(const ReplicationContext& ctx, ReplicaLog& leader,
                                    int32_t leader_epoch, bool wait, PartitionState* seen) {
  int64_t hw = -1;
  auto body = [&]() -> Status {
    auto p = LoadPartition(ctx);
    if (!p && Planted().hw_without_controller) p = StateFromPositions(ctx, leader, leader_epoch);
    if (!p) return p.error();
    MQ_RETURN_IF_ERROR(CheckLeader(ctx, *p, leader.replica_id(), leader_epoch));
    auto computed = ComputeHighWatermark(leader, *p);
    if (!computed) return computed.error();
    hw = *computed;
    if (seen) *seen = *p;
    return Status::Ok();
  };
  Status s = wait ? leader.WithLeaderLock(body) : leader.TryWithLeaderLock(body);
  if (!s.ok()) return s;
  return hw;
}

Result<PartitionState> MaybeShrinkIsr(const ReplicationContext& ctx, ReplicaLog& leader,
                                      int32_t leader_epoch, const std::vector<int32_t>& stopped) {
  ClusterState read;
  auto whole = LoadState(ctx, &read);
  if (!whole) return whole.error();
  auto p = PartitionIn(ctx, **whole);
  if (!p) return p.error();
  const int32_t me = leader.replica_id();
  if (!Planted().isr_shrink_without_cas) {
    MQ_RETURN_IF_ERROR(CheckLeader(ctx, *p, me, leader_epoch));
    // R54: a leader that restarted shrinks nothing in its old epoch.
    auto held = ClaimLeadership(ctx, leader, *p);
    if (!held) return held.error();
    if (held->leader_epoch != leader_epoch) return *held;
  }
  const ReplicatedTopic* topic = (*whole)->Topic(ctx.topic);
  const int64_t lag_ms = topic ? topic->replica_lag_time_max_ms : 30000;
  Result<PartitionState> out = *p;
  Status s = leader.TryWithLeaderLock([&]() -> Status {
    out = ShrinkLocked(ctx, leader, leader_epoch, *p, lag_ms, stopped);
    return out ? Status::Ok() : out.error();
  });
  if (s.code() == Code::kBusy) return *p;
  if (!s.ok()) return s;
  return out;
}

Result<PartitionState> LeaveIsrStopped(ClusterStore& store, const std::string& topic,
                                       int32_t partition, int32_t replica, const Status& why) {
  for (int attempt = 0;; ++attempt) {
    auto state = store.Load();
    if (!state) return state.error();
    const PartitionState* p = state->Partition(topic, partition);
    if (p == nullptr)
      return Status(
          Code::kNotFound,
          fmt::format("topic {} has no partition {} in the cluster state", topic, partition));
    if (p->leader == replica || std::find(p->isr.begin(), p->isr.end(), replica) == p->isr.end())
      return *p;
    PartitionState proposed = *p;
    std::erase(proposed.isr, replica);
    auto after = store.AlterPartition(
        proposed,
        fmt::format("shrink: replica {} stopped following (R58): {}", replica, why.message()));
    // The partition epoch moved meanwhile: decide again on the new state.
    if (!after && after.error().code() == Code::kFenced && attempt < 10) continue;
    return after;
  }
}

namespace {

Result<PartitionState> ShrinkLocked(const ReplicationContext& ctx, ReplicaLog& leader,
                                    int32_t leader_epoch, const PartitionState& state,
                                    int64_t lag_ms, const std::vector<int32_t>& stopped) {
  const PartitionState* p = &state;
  const int32_t me = leader.replica_id();
  auto all = leader.Followers();
  if (!all) return all.error();
  auto mine = LeaderEntry(ctx, leader, leader_epoch, *all);
  if (!mine) return mine.error();
  const int64_t now = ctx.clock->NowMs();
  std::vector<int32_t> keep;
  std::string reason;
  for (int32_t r : p->isr) {
    if (r == me) {
      keep.push_back(r);
      continue;
    }
    const int64_t caught_up =
        LastCaughtUpMs(*all, r, me, leader_epoch).value_or(mine->last_caught_up_ms);
    if (std::find(stopped.begin(), stopped.end(), r) != stopped.end()) {
      reason += fmt::format("{}replica {} stopped following (R58)",
                            reason.empty() ? "shrink: " : "; ", r);
    } else if (now - caught_up > lag_ms) {
      reason += fmt::format("{}replica {} not caught up for {} ms (replica.lag.time.max.ms {})",
                            reason.empty() ? "shrink: " : "; ", r, now - caught_up, lag_ms);
    } else {
      keep.push_back(r);
    }
  }
  if (reason.empty()) return *p;
  PartitionState proposed = *p;
  if (Planted().isr_shrink_without_cas) {
    // The planted bug: a blind write of what this leader believes, whatever
    // the partition epoch now is.
    proposed.leader = me;
    proposed.leader_epoch = leader_epoch;
    if (std::find(keep.begin(), keep.end(), me) == keep.end()) keep.insert(keep.begin(), me);
  }
  proposed.isr = keep;
  return ctx.cluster->AlterPartition(proposed, reason);
}

}  // namespace

Result<EpochEndOffset> HandleOffsetForLeaderEpoch(const ReplicationContext& ctx, ReplicaLog& leader,
                                                  int32_t leader_epoch, int32_t requested_epoch) {
  auto p = LoadPartition(ctx);
  if (!p) return p.error();
  MQ_RETURN_IF_ERROR(CheckLeader(ctx, *p, leader.replica_id(), leader_epoch));
  MQ_RETURN_IF_ERROR(ClaimEpoch(ctx, leader, *p));
  MQ_RETURN_IF_ERROR(EnsureEpoch(leader, leader_epoch));
  return leader.EndOffsetFor(requested_epoch);
}

namespace {

// The request names a follower of this partition, and holds no more than
// it fetches from.
Status CheckFetchRequest(const ReplicationContext& ctx, const PartitionState& p, int32_t me,
                         const FetchRequest& request) {
  if (request.replica == me ||
      std::find(p.replicas.begin(), p.replicas.end(), request.replica) == p.replicas.end())
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: replica {} is not a follower of this partition", Where(ctx),
                              request.replica));
  // A fetch ahead (R62): the follower holds up to held_offset, and asks
  // for what follows the batches it has yet to append.
  const int64_t held = request.held();
  if (held > request.fetch_offset)
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: replica {} holds up to offset {}, past its fetch offset {}",
                              Where(ctx), request.replica, held, request.fetch_offset));
  return Status::Ok();
}

// The fetching follower's position at `now`, the leader's log ending at
// `leo`; `before`: its position of this epoch recorded last, `mine` the
// leader's own entry.
FollowerPosition FetchedPosition(const FetchRequest& request, int64_t now, int64_t leo,
                                 const std::optional<FollowerPosition>& before,
                                 const FollowerPosition& mine) {
  const int64_t held = request.held();
  // The follower's position is what it holds, never what it is about to
  // receive (a fetch ahead's fetch offset).
  FollowerPosition f;
  f.replica = request.replica;
  f.leader_epoch = request.leader_epoch;
  f.log_end_offset = held;
  f.last_fetch_ms = now;
  f.last_fetch_leader_leo = leo;
  // Kafka's Replica.updateFetchState: caught up now when it has all the
  // leader has; caught up as of its previous fetch when it now has what
  // the leader had then.
  if (held >= leo)
    f.last_caught_up_ms = now;
  else if (before && held >= before->last_fetch_leader_leo)
    f.last_caught_up_ms = before->last_fetch_ms;
  else
    f.last_caught_up_ms = before ? before->last_caught_up_ms : mine.last_caught_up_ms;
  return f;
}

// Kafka's isFollowerInSync: a follower outside the ISR joins once it
// holds everything below the HW and something of this epoch's log.
Status ExpandIsrIfInSync(const ReplicationContext& ctx, ReplicaLog& leader, const PartitionState& p,
                         const FetchRequest& request, int64_t hw) {
  const int64_t held = request.held();
  if (InIsr(p, request.replica) || held < hw) return Status::Ok();
  auto epoch_start = leader.EndOffsetFor(request.leader_epoch - 1);
  if (!epoch_start) return epoch_start.error();
  const int64_t starts = epoch_start->end_offset < 0 ? 0 : epoch_start->end_offset;
  if (held < starts) return Status::Ok();
  PartitionState proposed = p;
  proposed.isr.push_back(request.replica);
  auto done = ctx.cluster->AlterPartition(
      proposed,
      fmt::format("expand: replica {} caught up to offset {} (HW {})", request.replica, held, hw));
  // Another change won the race: the next fetch decides again.
  if (!done && done.error().code() != Code::kFenced) return done.error();
  return Status::Ok();
}

// The batches from the fetch offset into `out`: borrowed from the log's
// file when the caller asks for them in place into its buffer.
// R92: a follower behind the log start `start` (retention deleted what it
// lacks) is sent the log from its start, where it starts over.
Status ReadFetched(ReplicaLog& leader, const FetchRequest& request, int64_t start,
                   std::vector<std::byte>* buffer, bool in_place, std::vector<std::byte>* out,
                   uint32_t* crc, FetchResponse& response) {
  const int64_t from = std::max(request.fetch_offset, start);
  if (in_place && buffer)
    return leader.ReadInPlace(from, request.max_bytes, out, crc, &response.file);
  return leader.Read(from, request.max_bytes, out, crc);
}

}  // namespace

namespace {

// HandleFetch and HandleReport before the leader lock: the request is
// answered only by the leader of its epoch, which claimed it (R54) and
// began it in its log.
Status CheckFetchAtLeader(const ReplicationContext& ctx, ReplicaLog& leader,
                          const PartitionState& p, const FetchRequest& request) {
  const int32_t me = leader.replica_id();
  MQ_RETURN_IF_ERROR(CheckLeader(ctx, p, me, request.leader_epoch));
  MQ_RETURN_IF_ERROR(CheckFetchRequest(ctx, p, me, request));
  MQ_RETURN_IF_ERROR(ClaimEpoch(ctx, leader, p));
  return EnsureEpoch(leader, request.leader_epoch);
}

// Under the leader lock: the leader's log start and LEO into `response`;
// kOutOfOrder when the fetch offset is past the LEO. One below the log
// start is answered (R92: the follower is sent the log from its start).
Status LeaderBoundsLocked(const ReplicationContext& ctx, ReplicaLog& leader,
                          const FetchRequest& request, FetchResponse& response) {
  auto leo = leader.LogEndOffset();
  if (!leo) return leo.error();
  auto start = leader.LogStartOffset();
  if (!start) return start.error();
  if (request.fetch_offset > *leo)
    return Status(Code::kOutOfOrder,
                  fmt::format("{}: fetch offset {} outside the leader's log [{}, {})", Where(ctx),
                              request.fetch_offset, *start, *leo));
  response.log_start_offset = *start;
  response.log_end_offset = *leo;
  return Status::Ok();
}

// Under the leader lock, for a fetch (or a report, R98) at
// request.fetch_offset inside the leader's log as `bounds` holds it
// (LeaderBoundsLocked): records the follower's position (R47) with the
// leader's own entry, raises the HW (§17.4) and expands the ISR when the
// follower caught up (§17.5). Returns the HW. `planted_end`: the planted
// bug position_at_response_end's position (the end of the batches read),
// recorded instead of what the request holds.
Result<int64_t> RecordFetchLocked(const ReplicationContext& ctx, ReplicaLog& leader,
                                  const PartitionState& p, const FetchRequest& request,
                                  const FetchResponse& bounds,
                                  std::optional<int64_t> planted_end = std::nullopt) {
  const int64_t leo = bounds.log_end_offset;
  auto all = leader.Followers();
  if (!all) return all.error();
  auto mine = LeaderEntry(ctx, leader, request.leader_epoch, *all);
  if (!mine) return mine.error();
  auto before = Find(*all, request.replica, request.leader_epoch);
  FollowerPosition f = FetchedPosition(request, ctx.clock->NowMs(), leo, before, *mine);
  if (planted_end) f.log_end_offset = *planted_end;
  // The positions as read under this lock, the leader's own entry (which
  // LeaderEntry may just have stored) and this follower's: one write.
  UpsertPosition(&*all, *mine);
  UpsertPosition(&*all, f);
  MQ_RETURN_IF_ERROR(leader.RecordFollowers(*all));
  auto hw = ComputeHighWatermark(leader, p, leo, &*all);
  if (!hw) return hw.error();
  MQ_RETURN_IF_ERROR(ExpandIsrIfInSync(ctx, leader, p, request, *hw));
  return *hw;
}

// The planted bug position_at_response_end: the batches read first, and
// the follower's position taken as the end of what they hold.
Result<int64_t> ReadForPlantedPosition(ReplicaLog& leader, const FetchRequest& request,
                                       std::vector<std::byte>* out, uint32_t* crc) {
  MQ_RETURN_IF_ERROR(leader.Read(request.fetch_offset, request.max_bytes, out, crc));
  int64_t end = request.held();
  for (size_t pos = 0; pos + 61 <= out->size();) {
    const BatchHeader h = DecodeBatchHeader(Bytes(*out).subspan(pos));
    end = h.last_offset() + 1;
    pos += static_cast<size_t>(h.size_bytes());
  }
  return end;
}

}  // namespace

namespace {

// HandleFetch and HandleReport: the request is checked at the leader
// (CheckFetchAtLeader), then `locked(partition, response)` runs under the
// leader lock and returns the HW the answer carries, with the request's
// epoch. `partition` is the cluster state read again under the lock (not
// ctx.loaded, or the state read before the lock: an ISR change decided
// since, such as another follower's fetch expanding it while this one
// waited for the lock, must be in the HW computed here, which may never pass
// an ISR member's log end, §17.4), and this replica still leads in it.
template <typename Locked>
Result<FetchResponse> AnswerAtLeader(const ReplicationContext& ctx, ReplicaLog& leader,
                                     const FetchRequest& request, Locked locked) {
  auto p = LoadPartition(ctx);
  if (!p) return p.error();
  MQ_RETURN_IF_ERROR(CheckFetchAtLeader(ctx, leader, *p, request));
  FetchResponse response;
  int64_t hw = -1;
  Status s = leader.WithLeaderLock([&]() -> Status {
    ReplicationContext fresh = ctx;
    fresh.loaded = nullptr;
    auto now = LoadPartition(fresh);
    if (!now) return now.error();
    MQ_RETURN_IF_ERROR(CheckLeader(ctx, *now, leader.replica_id(), request.leader_epoch));
    Result<int64_t> got = locked(*now, response);
    if (!got) return got.error();
    hw = *got;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  response.high_watermark = hw;
  response.leader_epoch = request.leader_epoch;
  return response;
}

}  // namespace

Result<FetchResponse> HandleFetch(const ReplicationContext& ctx, ReplicaLog& leader,
                                  const FetchRequest& request, std::vector<std::byte>* buffer,
                                  bool in_place) {
  return AnswerAtLeader(
      ctx, leader, request,
      [&](const PartitionState& p, FetchResponse& response) -> Result<int64_t> {
        std::vector<std::byte>* out = buffer ? buffer : &response.batches;
        uint32_t crc = 0;
        MQ_RETURN_IF_ERROR(LeaderBoundsLocked(ctx, leader, request, response));
        std::optional<int64_t> planted;
        if (Planted().position_at_response_end) {
          auto end = ReadForPlantedPosition(leader, request, out, &crc);
          if (!end) return end.error();
          planted = *end;
        }
        auto hw = RecordFetchLocked(ctx, leader, p, request, response, planted);
        if (!hw) return hw.error();
        if (!planted)
          MQ_RETURN_IF_ERROR(ReadFetched(leader, request, response.log_start_offset, buffer,
                                         in_place, out, &crc, response));
        response.crc = crc;
        if (buffer && response.file.size == 0) response.borrowed = *buffer;
        return *hw;
      });
}

Result<FetchResponse> HandleReport(const ReplicationContext& ctx, ReplicaLog& leader,
                                   const FetchRequest& request) {
  return AnswerAtLeader(ctx, leader, request,
                        [&](const PartitionState& p, FetchResponse& response) -> Result<int64_t> {
                          MQ_RETURN_IF_ERROR(LeaderBoundsLocked(ctx, leader, request, response));
                          return RecordFetchLocked(ctx, leader, p, request, response);
                        });
}

namespace {

// Where the follower's log is cut to agree with the leader's (KIP-101,
// KIP-279), from the leader's answer about its latest epoch.
struct Truncation {
  int64_t target = 0;
  bool again = false;  // KIP-279: ask again with the epoch then latest
  bool cut = false;    // truncate, even at the log end (to drop epochs)
};

Result<Truncation> FindTruncation(ReplicaLog& follower, LeaderLink& leader, int32_t leader_epoch,
                                  int64_t leo) {
  // KIP-101, KIP-279: where does my latest epoch end at the leader?
  auto latest = follower.LatestEpoch();
  if (!latest) return latest.error();
  Truncation t;
  t.target = leo;
  EpochEndOffset at_leader;
  if (*latest >= 0) {
    auto asked = leader.OffsetForLeaderEpoch(leader_epoch, *latest);
    if (!asked) return asked.error();
    at_leader = *asked;
  }
  if (at_leader.epoch < 0 || at_leader.end_offset < 0) {
    // No epoch to compare: keep only what is below the HW.
    auto hw = follower.HighWatermark();
    if (!hw) return hw.error();
    t.target = std::max<int64_t>(*hw, 0);
  } else {
    t.target = at_leader.end_offset;
    if (at_leader.epoch < *latest) {
      // The leader does not know my latest epoch: my log diverges after
      // the end of the largest epoch we share.
      auto mine = follower.EndOffsetFor(at_leader.epoch);
      if (!mine) return mine.error();
      if (mine->end_offset >= 0) t.target = std::min(t.target, mine->end_offset);
      // I lack the leader's epoch itself: what I keep below the cut may
      // still diverge; the next step asks about my epoch before it.
      if (mine->epoch != at_leader.epoch) t.again = true;
    }
  }
  // A cut at my log end still drops the epochs that start there (an
  // epoch I began as a leader and wrote nothing in).
  t.cut = t.target < leo || t.again || (at_leader.epoch >= 0 && at_leader.epoch < *latest);
  return t;
}

// Cuts the follower's log where it stops agreeing with the leader's;
// `leo` becomes its log end after. True when the next step asks the
// leader again before fetching (KIP-279).
Result<bool> TruncateToLeader(ReplicaLog& follower, LeaderLink& leader, const PartitionState& p,
                              FollowerState& state, int64_t* leo, FollowerStepResult& result) {
  auto t = FindTruncation(follower, leader, p.leader_epoch, *leo);
  if (!t) return t.error();
  if (t->cut) {
    // In the leader's epoch: refused if a newer one reached the log
    // since this step read it (this replica elected and appending).
    MQ_RETURN_IF_ERROR(follower.TruncateTo(t->target, p.leader_epoch));
    state.high_watermark = -1;  // the cut may have lowered it
    auto now = follower.LogEndOffset();
    if (!now) return now.error();
    if (*now < *leo) result.truncated_to = *now;
    *leo = *now;
  }
  return t->again;
}

// §17.3: the follower's HW becomes min(leader's HW, own LEO `end`) as an
// answer of the leader carries it; only ever raised, so an answer that
// brings none above the one stored last leaves the file alone.
Status RaiseFollowerHw(ReplicaLog& follower, const FetchResponse& response, int64_t end,
                       FollowerState& state) {
  const int64_t hw = std::min(response.high_watermark, end);
  if (response.high_watermark < 0 || hw <= state.high_watermark) return Status::Ok();
  MQ_RETURN_IF_ERROR(follower.SetHighWatermark(hw));
  state.high_watermark = hw;
  return Status::Ok();
}

// R92: a follower whose log ends below the leader's log start (retention
// deleted what it lacks) starts over at the leader's first batch fetched
// (the one holding the leader's log start), or at the log start itself
// when the leader sent none.
Status StartOverIfBehind(ReplicaLog& follower, const FetchResponse& response,
                         FollowerStepResult& result) {
  auto leo = follower.LogEndOffset();
  if (!leo) return leo.error();
  if (response.log_start_offset <= *leo) return Status::Ok();
  const auto batches = response.data();
  const int64_t at = batches.size() >= format::kBatchHeaderSize
                         ? DecodeBatchHeader(batches).base_offset
                         : response.log_start_offset;
  if (at <= *leo) return Status::Ok();
  MQ_RETURN_IF_ERROR(follower.DeleteBefore(at));
  result.behind_at = *leo;
  result.started_over_at = at;
  return Status::Ok();
}

// Appends the fetched batches (after starting over when the follower is
// behind the leader's log start, R92), follows the leader's log start and
// raises the follower's HW. `*end` receives its LEO after.
Status ApplyFetch(ReplicaLog& follower, const FetchResponse& response, FollowerState& state,
                  FollowerStepResult& result, int64_t* end) {
  MQ_RETURN_IF_ERROR(StartOverIfBehind(follower, response, result));
  if (const auto batches = response.data(); !batches.empty()) {
    auto appended = follower.AppendReplicated(
        batches, response.batches_checked ? CrcCheck::kAlreadyComputed : CrcCheck::kVerify);
    if (!appended) {
      // The log no longer ends where this step fetched from: reconcile
      // again before the next fetch.
      if (appended.error().code() == Code::kOutOfOrder) state.truncated = false;
      return appended.error();
    }
    result.appended_bytes = static_cast<int64_t>(batches.size());
    result.appended_records = appended->last_offset - appended->base_offset + 1;
  }
  auto start = follower.LogStartOffset();
  if (!start) return start.error();
  if (response.log_start_offset > *start)
    MQ_RETURN_IF_ERROR(follower.DeleteBefore(response.log_start_offset));
  auto leo = follower.LogEndOffset();
  if (!leo) return leo.error();
  *end = *leo;
  result.caught_up = *end >= response.log_end_offset;
  // A fetch that brought the leader's last batches leaves the HW to the
  // report of the new LEO (ReportAppended), whose answer carries one at
  // least as high: that report is what an acks=all producer waits for, and
  // a store first (R61) would delay it.
  if (result.caught_up && result.appended_bytes > 0) return Status::Ok();
  return RaiseFollowerHw(follower, response, *end, state);
}

// R98: after a fetch whose batches caught the follower up, its new LEO
// `end` goes to the leader at once, without a fetch (the one the leader's
// HW and an acks=all producer wait for); the answer raises the follower's
// HW and tells whether the leader appended meanwhile. A link without
// reports leaves it to the next step's fetch.
Status ReportAppended(ReplicaLog& follower, LeaderLink& leader, const FetchRequest& fetched,
                      int64_t end, FollowerState& state, FollowerStepResult& result) {
  FetchRequest request = fetched;
  request.fetch_offset = end;
  request.held_offset = -1;
  auto answer = leader.Report(request);
  if (!answer) {
    // Past the leader's end (it was cut meanwhile): reconcile again.
    if (answer.error().code() == Code::kOutOfOrder) state.truncated = false;
    return answer.error();
  }
  if (!*answer) return Status::Ok();
  result.reported = true;
  result.caught_up = end >= (*answer)->log_end_offset;
  return RaiseFollowerHw(follower, **answer, end, state);
}

}  // namespace

Result<FollowerStepResult> FollowerStep(const ReplicationContext& ctx, ReplicaLog& follower,
                                        LeaderLink& leader, FollowerState& state, size_t max_bytes,
                                        const PartitionState* current) {
  FollowerStepResult result;
  auto p = current ? Result<PartitionState>(*current) : LoadPartition(ctx);
  if (!p) return p.error();
  const int32_t me = follower.replica_id();
  if (IsLeader(*p, me)) {
    result.caught_up = true;
    return result;
  }
  MQ_RETURN_IF_ERROR(LeaveIsrAfterRestart(ctx, follower, *p));
  if (p->leader < 0)
    return Status(Code::kUnavailable, fmt::format("{}: the partition has no leader", Where(ctx)));
  if (state.leader_epoch != p->leader_epoch) state = FollowerState{p->leader_epoch, false};

  // R56: before the log is compared with the leader's, no writer of an
  // older epoch (a deposed leader that passed its check before the
  // election) appends to it any more: what one appended before is seen
  // below and cut, nothing lands after.
  if (!state.truncated && !Planted().no_epoch_fence)
    MQ_RETURN_IF_ERROR(follower.FenceEpochsBelow(p->leader_epoch));
  auto leo = follower.LogEndOffset();
  if (!leo) return leo.error();
  if (!state.truncated && !Planted().no_epoch_truncation) {
    auto again = TruncateToLeader(follower, leader, *p, state, &*leo, result);
    if (!again) return again.error();
    if (*again) return result;
    state.truncated = true;
  }

  FetchRequest request;
  request.replica = me;
  request.leader_epoch = p->leader_epoch;
  request.fetch_offset = *leo;
  request.max_bytes = max_bytes;
  auto response = leader.Fetch(request);
  if (!response) {
    // Past the leader's end: reconcile again before the next fetch.
    if (response.error().code() == Code::kOutOfOrder) state.truncated = false;
    return response.error();
  }
  int64_t end = 0;
  MQ_RETURN_IF_ERROR(ApplyFetch(follower, *response, state, result, &end));
  if (result.caught_up && result.appended_bytes > 0)
    MQ_RETURN_IF_ERROR(ReportAppended(follower, leader, request, end, state, result));
  return result;
}

bool FollowerRetries(const Status& s) {
  switch (s.code()) {
    case Code::kFenced:
    case Code::kUnavailable:
    case Code::kNotFound:
    case Code::kOutOfOrder:
      return true;
    default:
      return false;
  }
}

int64_t FollowerRestartDelayMs(int failures) {
  constexpr int64_t kFirst = 200, kMost = 30000;
  int64_t delay = kFirst;
  for (int i = 1; i < failures && delay < kMost; ++i) delay *= 2;
  return std::min(delay, kMost);
}

bool FollowerFetchesAgain(const Status& s, int fenced) {
  return s.code() == Code::kFenced && fenced < 100;
}

bool FollowerReusesState(bool remote_leader, const FollowerStepResult& last, int64_t loaded_ms,
                         int64_t now_ms) {
  return remote_leader && last.appended_bytes > 0 && !last.caught_up && now_ms >= loaded_ms &&
         now_ms - loaded_ms < kFollowerStateReuseMs;
}

bool FollowerRecordsStop(const Status& s, bool lock_busy) {
  return !s.ok() && !lock_busy && !FollowerRetries(s);
}

int64_t FollowerRestarts::Failed(int64_t ran_ms) {
  if (ran_ms >= FollowerRestartDelayMs(INT_MAX)) failures_ = 0;
  return FollowerRestartDelayMs(++failures_);
}

}  // namespace mq
