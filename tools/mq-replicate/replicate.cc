#include "replicate.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "exit_code.h"
#include "group_carry.h"
#include "mq/group.h"
#include "mq/lock.h"
#include "remote.h"
#include "replica.h"

namespace mq::replicate {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// --max-bytes-per-second: shared by every partition. Bytes fetched delay
// the next fetch by their share of a second from when they came, or from
// when the bytes before them were due if that is later: time without
// fetches (connecting, a leader with nothing to send) is no credit for a
// burst later.
class Throttle {
 public:
  explicit Throttle(uint64_t rate) : rate_(rate) {}
  void Spend(uint64_t bytes) {
    if (rate_ == 0 || bytes == 0) return;
    std::chrono::steady_clock::time_point until;
    {
      std::lock_guard lock(mu_);
      next_ = std::max(next_, std::chrono::steady_clock::now()) +
              std::chrono::microseconds(bytes * 1'000'000 / rate_);
      until = next_;
    }
    while (!g_stop.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          until - std::chrono::steady_clock::now(), std::chrono::milliseconds(100)));
  }

 private:
  uint64_t rate_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point next_{};  // when the bytes spent so far are due
};

// --follow keeps a partition open on a thread of its own while there are at
// most this many, each with about kFollowDescriptors descriptors (its log
// and the leader's, their indexes, locks and state files, a reader, and the
// files a fetch and a HW store keep open: the leader's leader.lock,
// fetch-positions and high-watermark, the follower's high-watermark).
constexpr size_t kMaxFollowThreads = 256;
constexpr size_t kFollowDescriptors = 18;

// One partition this root follows.
struct Job {
  std::string topic;
  int32_t partition = 0;
  LogConfig log;
  std::shared_ptr<cli::ReplicaBinding> binding;
};

struct Totals {
  std::mutex mu;
  int rc = 0;
  void Fail(const Status& s) {
    std::lock_guard lock(mu);
    int code = cli::Fail(s);
    if (rc == 0) rc = code;
  }
};

// --follow: a partition whose follower stopped on an error that
// FollowerRetries does not wait out (its own lock held by another
// mq-replicate, a damaged file, a registry conflict) is started again after
// the delay FollowerRestarts gives, the other partitions going on
// meanwhile. Each failure is told (not with -q); one still failing when a
// signal stops the run is its exit status.
struct Restarts {
  using Clock = std::chrono::steady_clock;
  FollowerRestarts policy;
  Clock::time_point next{};
  Status last;
  bool Due() const { return Clock::now() >= next; }
  // `ran_ms`: how long the failed start ran (0: not measured).
  void Failed(const Options& o, const std::string& name, const Status& s, int64_t ran_ms = 0) {
    const int64_t delay = policy.Failed(ran_ms);
    next = Clock::now() + std::chrono::milliseconds(delay);
    last = s;
    if (!o.quiet)
      cli::Warn(fmt::format("{}: {} (started again in {} ms)", name, s.message(), delay));
  }
  void Succeeded() {
    policy.Succeeded();
    last = Status::Ok();
  }
  // Until the next start is due, or a signal.
  void Wait() const {
    while (!g_stop.load() && !Due()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
};

// Connections to leaders on other hosts, by address: shared by the
// partitions a run takes in turn (a catch-up, or --follow in rounds).
using Clients = std::map<std::string, std::shared_ptr<wire::Client>>;

class Follower {
 public:
  // `clients`: the run's connections when this is one of many partitions
  // taken in turn; null for one on a thread of its own (--follow), which
  // has its own.
  Follower(const Options& o, Job job, Throttle* throttle, Clients* clients = nullptr)
      : o_(o), job_(std::move(job)), throttle_(throttle), clients_(clients) {
    ctx_.cluster = job_.binding->store.get();
    ctx_.clock = Clock::Real();
    ctx_.topic = job_.topic;
    ctx_.partition = job_.partition;
  }

  std::string Name() const { return fmt::format("{}-{}", job_.topic, job_.partition); }

  // Catches up once: until a fetch brings nothing new.
  Status CatchUp() { return Stopped(CatchUpOnce()); }
  // --follow over more partitions than can stay open (Run): one round.
  Status Poll() { return Stopped(PollOnce()); }
  // --follow: catches up, then waits for the leader's appends.
  Status Follow() { return Stopped(FollowRounds()); }

 private:
  Status CatchUpOnce() {
    MQ_RETURN_IF_ERROR(Open());
    MQ_RETURN_IF_ERROR(StepToEnd());
    return Finish();
  }

  // A follower that stops on an error it does not wait out leaves that in
  // its partition directory (follower-stopped, R58), so that mq-isr
  // --check reports it at once; its next round clears it (Step). Only the
  // holder of replicate.lock records: not a run that found another
  // following here. One that cannot record there (the directory cannot be
  // opened or locked, the record not written) leaves the ISR itself.
  Status Stopped(Status s) {
    if (!FollowerRecordsStop(s, lock_busy_)) return s;
    if (lock_.is_open()) {
      Status r = RecordFollowerStop(PartitionDir(root_),
                                    FollowerStop{Clock::Real()->NowMs(), cli::ExitCode(s)});
      if (r.ok()) return s;
      if (!o_.quiet) cli::Warn(fmt::format("{}: {}", Name(), r.message()));
    }
    auto left =
        LeaveIsrStopped(*ctx_.cluster, job_.topic, job_.partition, job_.binding->replica_id, s);
    if (!left && !o_.quiet)
      cli::Warn(fmt::format("{}: cannot leave the ISR: {}", Name(), left.error().message()));
    return s;
  }

  // --follow over more partitions than can stay open (Run): one round of
  // this partition, then it is closed. A leadership that moves or a leader
  // away is looked at again next round, as Follow does.
  Status PollOnce() {
    Status s = Open();
    if (s.ok()) s = StepToEnd();
    if (!s.ok()) return Transient(s) ? Status::Ok() : s;
    if (Status f = Finish(); !f.ok() && !Transient(f)) return f;
    if (leader_log_) {
      auto shrunk = MaybeShrinkIsr(ctx_, *leader_log_, leader_epoch_);
      if (!shrunk && !Transient(shrunk.error())) return shrunk.error();
    }
    return Status::Ok();
  }

  // --follow: catches up, then waits for the leader's appends.
  Status FollowRounds() {
    // A cluster state that cannot be reached yet (the controller's host is
    // away) is waited for, as later in the loop.
    for (;;) {
      Status s = Open();
      if (s.ok()) break;
      if (s.code() != Code::kUnavailable || g_stop.load()) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(kFollowerRetryMs));
    }
    int64_t next_round = 0;
    while (!g_stop.load()) {
      auto r = Step();
      if (!r) {
        if (Transient(r.error())) {
          // Look again soon.
          link_.reset();
          leader_log_.reset();
          std::this_thread::sleep_for(std::chrono::milliseconds(kFollowerRetryMs));
          continue;
        }
        return r.error();
      }
      // A step that appended fetches again at once unless it reported its
      // new LEO to the leader already (R98).
      if (!r->caught_up || (r->appended_bytes > 0 && !r->reported)) continue;
      // Once a second, not at each of the leader's appends: what follows
      // the leader besides its log, and the ISR rule (whoever waits on a
      // partition may apply it, §17.5).
      const int64_t now = Clock::Real()->NowMs();
      if (now >= next_round) {
        // A leader that went away meanwhile (its host, its root): the next
        // round asks again, as for a fetch.
        if (Status s = Finish(); !s.ok() && !Transient(s)) return s;
        if (leader_log_) {
          auto shrunk = MaybeShrinkIsr(ctx_, *leader_log_, leader_epoch_);
          // kUnavailable also when the leader gave its epoch up after a
          // restart (R55).
          if (!shrunk && !Transient(shrunk.error())) return shrunk.error();
        }
        next_round = now + 1000;
      }
      WaitForLeader();
    }
    return Finish();
  }

  // Fetches until a fetch brings nothing new, or the leader learnt the log
  // end that caught it up (R98) (a fencing, the leadership moving under the
  // fetch, is retried up to 100 times).
  Status StepToEnd() {
    for (int fenced = 0; !g_stop.load();) {
      auto r = Step();
      if (!r && FollowerFetchesAgain(r.error(), ++fenced)) continue;
      if (!r) return r.error();
      if (r->caught_up && (r->appended_bytes == 0 || r->reported)) break;
    }
    return Status::Ok();
  }

  // What --follow waits out rather than exits for, at every step of a
  // round (FollowerRetries: the leadership moves, the leader is away, its
  // root is gone), the leader on this host or another (told with -v).
  bool Transient(const Status& s) const {
    const bool transient = FollowerRetries(s);
    if (transient && o_.verbose) cli::Warn(fmt::format("{}: {}", Name(), s.message()));
    return transient;
  }

  Status Open() {
    if (log_) return Status::Ok();
    auto state = ctx_.cluster->Load();
    if (!state) return state.error();
    const ReplicaRoot* me = state->Replica(job_.binding->replica_id);
    if (!me) return Status(Code::kInternal, "replica vanished from the cluster state");
    auto address = ParseAddress(me->dir, "replica dir");
    if (!address) return address.error();
    root_ = address->path;  // the state may name this host too (host:path)
    auto lock_dir = OpenDirectory(PartitionDir(root_), false);
    if (!lock_dir) return lock_dir.error();
    auto lock =
        FileLock::Acquire(lock_dir->get(), "replicate.lock", LockMode::kExclusive, LockWait::kTry);
    lock_busy_ = !lock && lock.error().code() == Code::kBusy;
    if (lock_busy_)
      return Status(Code::kBusy, fmt::format("{}: another mq-replicate follows this partition",
                                             PartitionDir(root_)));
    if (!lock) return lock.error();
    lock_ = std::move(*lock);
    if (o_.repair) {
      // Damage is cut only where another replica leads and holds it whole.
      const PartitionState* ps = state->Partition(job_.topic, job_.partition);
      if (ps != nullptr && ps->leader == job_.binding->replica_id)
        return Status(Code::kUnavailable,
                      fmt::format("{}: --repair: this replica leads the partition; elect another "
                                  "leader first (mq-isr elect)",
                                  Name()));
      auto repaired = RepairFollowerLog(PartitionDir(root_), job_.log);
      if (!repaired) return repaired.error();
      if (*repaired && !o_.quiet)
        cli::Warn(
            fmt::format("{}: repaired: {}; truncated to offset {}, fetching the rest from "
                        "the leader",
                        Name(), (*repaired)->corruption.message(), (*repaired)->valid_end));
    }
    auto log = OpenReplicaLog(PartitionDir(root_), job_.binding->replica_id, job_.log);
    if (!log) return log.error();
    log_ = std::move(*log);
    return Status::Ok();
  }

  std::string PartitionDir(const std::string& root) const {
    return fmt::format("{}/{}-{}", root, job_.topic, job_.partition);
  }

  // The leader's log, opened again when the leadership moved: on this host
  // its root itself, on another a connection to `mq-replicate --serve`
  // there (format-spec/protocol.md).
  Status OpenLeader(const ClusterState& state, const PartitionState& p) {
    if (link_ && leader_id_ == p.leader && leader_epoch_ == p.leader_epoch) return Status::Ok();
    link_.reset();
    leader_log_.reset();
    reader_.reset();
    const ReplicaRoot* r = state.Replica(p.leader);
    if (!r)
      return Status(
          Code::kUnavailable,
          fmt::format("{}: leader replica {} is not in the cluster state", Name(), p.leader));
    auto address = ParseAddress(r->dir, "replica dir");
    if (!address) return address.error();
    if (!address->host.empty()) {
      if (!client_ || client_address_ != r->dir) {
        if (clients_ != nullptr) {
          std::shared_ptr<wire::Client>& shared = (*clients_)[r->dir];
          if (!shared) shared = cli::ReplicaClient(*address);
          client_ = shared;
        } else {
          client_ = cli::ReplicaClient(*address);
        }
        client_address_ = r->dir;
      }
      // --follow on a thread of its own waits at the leader for its next
      // append (a long poll); a partition taken in turn does not.
      const int wait_ms = o_.follow && clients_ == nullptr ? 500 : 0;
      link_ = wire::RemoteLeaderLink(client_, job_.topic, job_.partition, wait_ms);
      leader_id_ = p.leader;
      leader_epoch_ = p.leader_epoch;
      leader_root_.clear();
      return Status::Ok();
    }
    auto log = OpenReplicaLog(PartitionDir(r->dir), p.leader, job_.log);
    if (!log)
      return Status(Code::kUnavailable, fmt::format("{}: leader replica {}: {}", Name(), p.leader,
                                                    log.error().message()));
    leader_log_ = std::move(*log);
    leader_id_ = p.leader;
    leader_epoch_ = p.leader_epoch;
    leader_root_ = r->dir;
    // The leader answers a fetch from the cluster state this step loaded
    // (loaded_): a decision is as current as one on a state it loaded
    // itself a moment later, and its changes are compare-and-swaps on the
    // partition epoch all the same.
    ReplicationContext at_leader = ctx_;
    at_leader.loaded = &loaded_;
    link_ = DirectLeaderLink(at_leader, leader_log_.get());
    return Status::Ok();
  }

  Result<FollowerStepResult> Step() {
    // Catching up from a leader on another host: the state the last step
    // loaded, while it is young (FollowerReusesState).
    const FollowerStepResult last = last_step_;
    last_step_ = FollowerStepResult{};  // a step that fails loads again
    const int64_t now = Clock::Real()->NowMs();
    if (!FollowerReusesState(link_ && !leader_log_, last, loaded_ms_, now)) {
      auto loaded = ctx_.cluster->Load();
      if (!loaded) return loaded.error();
      loaded_ = std::move(*loaded);
      loaded_ms_ = now;
    }
    const ClusterState* state = &loaded_;
    auto p = cli::PartitionOf(*state, job_.binding->cluster_dir, job_.topic, job_.partition);
    if (!p) return p.error();
    if (p->leader == job_.binding->replica_id) {
      // This root leads: nothing to fetch.
      FollowerStepResult done;
      done.caught_up = true;
      link_.reset();
      leader_log_.reset();
      return done;
    }
    if (p->leader < 0) return Status(Code::kUnavailable, fmt::format("{}: no leader", Name()));
    MQ_RETURN_IF_ERROR(OpenLeader(*state, *p));
    auto r = FollowerStep(ctx_, *log_, *link_, state_, o_.fetch_max_bytes, &*p);
    if (!r) return r;
    if (!cleared_stop_) {  // following again (R58)
      MQ_RETURN_IF_ERROR(ClearFollowerStop(PartitionDir(root_)));
      cleared_stop_ = true;
    }
    if (r->truncated_to >= 0 && !o_.quiet)
      cli::Warn(
          fmt::format("{}: truncated to offset {}, where the leader's epoch ends "
                      "(replica {} leads in epoch {})",
                      Name(), r->truncated_to, p->leader, p->leader_epoch));
    last_step_ = *r;
    if (r->started_over_at >= 0)
      cli::Warn(
          fmt::format("{}: behind the leader's log start (this log ended at offset {}; "
                      "retention at the leader deleted what it lacks): starting over "
                      "from offset {}",
                      Name(), r->behind_at, r->started_over_at));
    records_ += r->appended_records;
    bytes_ += r->appended_bytes;
    throttle_->Spend(static_cast<uint64_t>(r->appended_bytes));
    return r;
  }

  // What else follows the leader: its group offsets (replication.md
  // §17.6), read from the leader's root on this host, or asked of its
  // `mq-replicate --serve` (CarryState) on another. Not its producer-id
  // registry: a replicated topic's ids live in the cluster (P10), and a
  // root's own registry names its unreplicated topics' producers, which
  // another root's must not be merged with.
  Status Finish() {
    if (!leader_log_ && !link_) return Status::Ok();
    if (leader_log_) {
      auto offsets = ReadGroupOffsets(leader_root_, job_.topic, job_.partition);
      if (!offsets) return offsets.error();
      MQ_RETURN_IF_ERROR(ApplyGroupOffsets(root_, *offsets));
    } else if (client_) {
      auto carried = wire::QueryCarryState(*client_, job_.topic, job_.partition);
      if (!carried) return carried.error();
      MQ_RETURN_IF_ERROR(ApplyGroupOffsets(root_, carried->offsets));
    }
    if (o_.verbose && (records_ > 0 || !reported_)) {
      auto leo = log_->LogEndOffset();
      auto hw = log_->HighWatermark();
      cli::Eprint("{}: {}: {} records ({} bytes) from replica {}; log end {}, high watermark {}\n",
                  cli::ProgramName(), Name(), records_, bytes_, leader_id_, leo ? *leo : -1,
                  hw ? *hw : -1);
      records_ = 0;
      bytes_ = 0;
      reported_ = true;
    }
    return Status::Ok();
  }

  void WaitForLeader() {
    if (link_ && !leader_log_) return;  // a remote leader's fetch waited already
    if (!leader_log_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return;
    }
    if (!reader_) {
      auto opened = PartitionReader::Open(PartitionDir(leader_root_), job_.log.limits);
      if (!opened) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return;
      }
      reader_ = std::move(*opened);
    }
    auto leo = log_->LogEndOffset();
    // Wakes at the leader's next append, or to fetch again within the
    // lag limit so that it stays caught up (§17.5).
    reader_->WaitForAppend(leo ? *leo : 0, 500);
  }

  const Options& o_;
  Job job_;
  Throttle* throttle_;
  Clients* clients_;
  ReplicationContext ctx_;
  std::string root_;
  FileLock lock_;
  bool lock_busy_ = false;  // another follower holds replicate.lock
  std::unique_ptr<ReplicaLog> log_;
  std::unique_ptr<ReplicaLog> leader_log_;
  std::unique_ptr<LeaderLink> link_;
  std::shared_ptr<wire::Client> client_;  // to a leader on another host
  std::string client_address_;
  std::unique_ptr<PartitionReader> reader_;
  int32_t leader_id_ = -1;
  int32_t leader_epoch_ = -1;
  std::string leader_root_;
  ClusterState loaded_;  // by the current step, for it and a leader here
  int64_t loaded_ms_ = 0;
  FollowerStepResult last_step_;  // of the last step that succeeded
  FollowerState state_;
  int64_t records_ = 0;
  int64_t bytes_ = 0;
  bool reported_ = false;
  bool cleared_stop_ = false;
};

// The partitions of `o` this root follows.
Result<std::vector<Job>> Jobs(const Options& o, const DataDir& dir) {
  std::vector<std::string> topics;
  if (o.topic) {
    topics.push_back(*o.topic);
  } else {
    auto all = dir.ListTopics();
    if (!all) return all.error();
    topics = *all;
  }
  std::vector<Job> jobs;
  for (const std::string& t : topics) {
    auto config = dir.ReadTopic(t);
    if (!config) return config.error();
    auto bound = cli::BindReplica(o.dir, t, *config);
    if (!bound) return bound.error();
    if (!*bound) {
      if (o.topic)
        return Status(
            Code::kInvalidArgument,
            fmt::format("-t {}: not a replicated topic (create one with mq-isr create)", t));
      continue;
    }
    auto binding = std::make_shared<cli::ReplicaBinding>(std::move(**bound));
    auto state = binding->store->Load();
    if (!state) return state.error();
    if (o.partition && *o.partition >= config->partitions)
      return Status(Code::kInvalidArgument, fmt::format("-p {}: topic \"{}\" has {} partitions",
                                                        *o.partition, t, config->partitions));
    for (int32_t p = 0; p < config->partitions; ++p) {
      if (o.partition && p != *o.partition) continue;
      const PartitionState* ps = state->Partition(t, p);
      if (!ps || std::find(ps->replicas.begin(), ps->replicas.end(), binding->replica_id) ==
                     ps->replicas.end())
        continue;
      Job job;
      job.topic = t;
      job.partition = p;
      job.log = DataDir::LogConfigFor(*config);
      // As mq-produce's --fsync: page cache only, or each append fsynced.
      job.log.durability = o.fsync ? Durability::kEveryBatch : Durability::kNone;
      job.log.sync_on_close = o.fsync;
      job.binding = binding;
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

// A single catch-up: one partition at a time, each closed (its logs, lock
// and connection) before the next is opened: any number of partitions
// within a few descriptors.
int CatchUpOnce(const Options& o, std::vector<Job>& jobs, Throttle* throttle) {
  Totals totals;
  Clients clients;
  for (Job& j : jobs) {
    Follower f(o, std::move(j), throttle, &clients);
    Status s = f.CatchUp();
    if (!s.ok()) totals.Fail(s);
  }
  return totals.rc;
}

// --follow past the threads' limits: rounds over the partitions, each
// opened, caught up and closed in turn, one round a second.
int FollowInRounds(const Options& o, const std::vector<Job>& jobs, Throttle* throttle) {
  Totals totals;
  Clients clients;
  std::vector<Restarts> restarts(jobs.size());
  while (!g_stop.load()) {
    const auto next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (size_t i = 0; i < jobs.size() && !g_stop.load(); ++i) {
      if (!restarts[i].Due()) continue;
      Follower f(o, jobs[i], throttle, &clients);
      if (Status s = f.Poll(); !s.ok())
        restarts[i].Failed(o, f.Name(), s);
      else
        restarts[i].Succeeded();
    }
    while (!g_stop.load() && std::chrono::steady_clock::now() < next)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const Restarts& r : restarts)
    if (!r.last.ok()) totals.Fail(r.last);
  return totals.rc;
}

// --follow on a thread of its own: partition `j` followed until a stop
// signal, started again after each failure (Restarts).
void FollowPartition(const Options& o, const Job& j, Throttle* throttle, Totals* totals) {
  const std::string name = fmt::format("{}-{}", j.topic, j.partition);
  Restarts restarts;
  while (!g_stop.load()) {
    const auto started = std::chrono::steady_clock::now();
    // Closed (its logs, lock and connection) before the wait.
    Status s = Follower(o, j, throttle).Follow();
    if (s.ok()) {  // stopped by a signal
      restarts.Succeeded();
      break;
    }
    if (g_stop.load()) {
      restarts.last = s;  // failed as it stopped
      break;
    }
    // A follower that failed after it ran for the longest delay starts
    // again after the first.
    restarts.Failed(o, name, s,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count());
    restarts.Wait();
  }
  if (!restarts.last.ok()) totals->Fail(restarts.last);
}

}  // namespace

int Run(const Options& o) {
  auto dir = DataDir::Open(o.dir, false);
  if (!dir) return cli::Fail(dir.error());
  CatchStopSignals();
  auto jobs = Jobs(o, *dir);
  // --follow waits for a cluster state it cannot reach yet; a single
  // catch-up (cron) exits 69 and the next run tries again.
  for (bool warned = false;
       o.follow && !jobs && jobs.error().code() == Code::kUnavailable && !g_stop.load();) {
    if (!warned && !o.quiet) cli::Warn(jobs.error().message() + " (waiting)");
    warned = true;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    jobs = Jobs(o, *dir);
  }
  if (!jobs) return cli::Fail(jobs.error());
  if (jobs->empty()) {
    if (!o.quiet) cli::Warn(fmt::format("{}: follows no partition of a replicated topic", o.dir));
    return 0;
  }
  Throttle throttle(o.max_bytes_per_second);
  if (!o.follow) return CatchUpOnce(o, *jobs, &throttle);
  // --follow: each partition open on a thread of its own while there are
  // at most kMaxFollowThreads and their descriptors fit the open-file limit
  // (raised to the hard one); past that, rounds over the partitions
  // (mq-replicate(1), OPEN FILES).
  if (jobs->size() > kMaxFollowThreads ||
      jobs->size() > cli::OpenPartitionBudget(kFollowDescriptors))
    return FollowInRounds(o, *jobs, &throttle);
  Totals totals;
  std::vector<std::thread> threads;
  for (Job& j : *jobs) {
    threads.emplace_back(
        [&o, &totals, &throttle, j = std::move(j)] { FollowPartition(o, j, &throttle, &totals); });
  }
  for (auto& t : threads) t.join();
  return totals.rc;
}

}  // namespace mq::replicate
