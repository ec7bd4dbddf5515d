// mq-replicate --serve: the leader's side of replication across hosts
// (format-spec/protocol.md): answers Fetch, OffsetForLeaderEpoch,
// ReplicaStatus, CarryState, ReadLog and ReplicaCheck (R63: a replica's log
// and follower-stopped record read only, for mq-isr --verify-replicas,
// --check and elect) for the partitions of one log root, on
// standard input and output, as `ssh HOST mq-replicate --serve -C DIR` is
// started by a follower on another host.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "cli.h"
#include "group_carry.h"
#include "mq/committed_fetch.h"
#include "mq/partition.h"
#include "mq/replica_verification.h"
#include "mq/replication.h"
#include "mq/topic.h"
#include "mq/wire.h"
#include "replica.h"
#include "replicate.h"

namespace mq::replicate {
namespace {

std::atomic<bool> g_serve_stop{false};

void OnServeSignal(int) { g_serve_stop.store(true); }

// Descriptors a partition served holds: its log, offset and time indexes,
// directory, writer lock and state file, a reader while a fetch waits, and
// what fetches keep open (leader.lock, fetch-positions, high-watermark read
// and stored).
constexpr size_t kServedDescriptors = 14;

// One partition of the root, opened at its first request.
struct Served {
  std::shared_ptr<cli::ReplicaBinding> binding;
  ReplicationContext ctx;
  std::unique_ptr<ReplicaLog> log;
  std::unique_ptr<PartitionReader> reader;
  std::string dir;
  uint64_t used = 0;  // Server::clock_ at its last request
  int64_t next_isr_check_ms = 0;
  // What a fetch reply's batches are read into when they are not sent from
  // their segment file (ReplicaLog::ReadInPlace: batches of two segments):
  // the reply borrows them until it is sent (before the next request), and
  // the pages stay allocated. Once it is sent, the next batches are read
  // ahead (into it, or checked in their file).
  std::vector<std::byte> buffer;
};

// A topic's binding to its cluster (cli::BindReplica: the controller's
// state loaded, over a connection of its own when the controller is on
// another host), made on a thread of its own from the first request for
// the topic: meanwhile fetches are answered below the HW (R102).
struct TopicBinding {
  std::future<Result<std::optional<cli::ReplicaBinding>>> pending;
  std::shared_ptr<cli::ReplicaBinding> bound;
};

class Server {
 public:
  explicit Server(const Options& o) : o_(o) {}

  // The partition with its topic's cluster state (waited for).
  Result<Served*> Get(const std::string& topic, int32_t partition) {
    auto s = Open(topic, partition);
    if (!s) return s.error();
    MQ_RETURN_IF_ERROR(Bind(**s));
    return *s;
  }

  // The partition, opened at its first request, its topic's binding
  // started there, not waited for.
  Result<Served*> Open(const std::string& topic, int32_t partition) {
    auto key = std::make_pair(topic, partition);
    auto it = served_.find(key);
    if (it != served_.end()) {
      it->second->used = ++clock_;
      return it->second.get();
    }
    // A client that takes many partitions in turn (mq-replicate catching
    // up, or following in rounds) keeps one connection: the partitions
    // served stay open up to what the open-file limit holds, the least
    // recently asked for closed first (their fetch positions and high
    // watermark are on disk, not here).
    if (max_served_ == 0) max_served_ = cli::OpenPartitionBudget(kServedDescriptors);
    while (served_.size() >= max_served_) {
      auto oldest = served_.end();
      for (auto i = served_.begin(); i != served_.end(); ++i) {
        if (i->second.get() == last_fetched_) continue;
        if (oldest == served_.end() || i->second->used < oldest->second->used) oldest = i;
      }
      if (oldest == served_.end()) break;
      served_.erase(oldest);
    }
    if (!dir_) {
      auto d = DataDir::Open(o_.dir, false);
      if (!d) return d.error();
      dir_ = std::make_unique<DataDir>(std::move(*d));
    }
    auto config = dir_->ReadTopic(topic);
    if (!config) return config.error();
    if (config->cluster.empty())
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: topic \"{}\" is not replicated", o_.dir, topic));
    if (partition >= config->partitions)
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: topic \"{}\" has {} partitions, not {}", o_.dir, topic,
                                config->partitions, partition + 1));
    StartBinding(topic, *config);
    auto s = std::make_unique<Served>();
    s->ctx.clock = Clock::Real();
    s->ctx.topic = topic;
    s->ctx.partition = partition;
    s->dir = fmt::format("{}/{}-{}", o_.dir, topic, partition);
    LogConfig log = DataDir::LogConfigFor(*config);
    log.durability = o_.fsync ? Durability::kEveryBatch : Durability::kNone;
    auto opened = OpenReplicaLog(s->dir, config->replica_id, log);
    if (!opened) return opened.error();
    s->log = std::move(*opened);
    s->used = ++clock_;
    Served* out = s.get();
    served_.emplace(key, std::move(s));
    return out;
  }

  // The topic's binding started, unless it is made or being made.
  void StartBinding(const std::string& topic, const TopicConfig& config) {
    TopicBinding& b = bindings_[topic];
    if (b.bound || b.pending.valid()) return;
    b.pending = std::async(std::launch::async, [root = o_.dir, topic, config] {
      return cli::BindReplica(root, topic, config);
    });
  }

  // Whether the partition's topic is bound, or its binding is done (made
  // or failed): then Bind does not wait.
  bool BindingDone(const Served& s) {
    if (s.binding) return true;
    auto it = bindings_.find(s.ctx.topic);
    if (it == bindings_.end() || it->second.bound) return true;
    return !it->second.pending.valid() ||
           it->second.pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

  // The partition's cluster state: its topic's binding, waited for (one
  // that failed is started again at the next request).
  Status Bind(Served& s) {
    if (s.binding) return Status::Ok();
    TopicBinding& b = bindings_[s.ctx.topic];
    if (!b.bound) {
      if (!b.pending.valid()) {  // the last one failed: again
        auto config = dir_->ReadTopic(s.ctx.topic);
        if (!config) return config.error();
        StartBinding(s.ctx.topic, *config);
      }
      auto r = b.pending.get();
      if (!r) return r.error();
      if (!*r)
        return Status(Code::kInvalidArgument,
                      fmt::format("{}: topic \"{}\" is not replicated", o_.dir, s.ctx.topic));
      b.bound = std::make_shared<cli::ReplicaBinding>(std::move(**r));
    }
    s.binding = b.bound;
    s.ctx.cluster = s.binding->store.get();
    return Status::Ok();
  }

  Result<FetchResponse> Fetch(const wire::FetchMessage& m) {
    auto s = Open(m.topic, m.partition);
    if (!s) return s.error();
    Served& p = **s;
    last_fetched_ = &p;
    if (!BindingDone(p)) {
      // R102: while the controller's state is on its way, what this
      // replica holds below its HW, which needs no leader's check.
      auto committed = HandleCommittedFetch(*p.log, m.request, &p.buffer);
      if (!committed) return committed.error();
      if (*committed) return std::move(**committed);
    }
    MQ_RETURN_IF_ERROR(Bind(p));
    auto r = HandleFetch(p.ctx, *p.log, m.request, &p.buffer, /*in_place=*/true);
    if (r && r->data().empty() && m.max_wait_ms > 0 &&
        r->log_end_offset == m.request.fetch_offset) {
      // Nothing to send: wait for an append (Kafka's fetch.max.wait.ms).
      if (!p.reader) {
        auto reader = PartitionReader::Open(p.dir);
        if (reader) p.reader = std::move(*reader);
      }
      if (p.reader && p.reader->WaitForAppend(r->log_end_offset, static_cast<int>(m.max_wait_ms)))
        r = HandleFetch(p.ctx, *p.log, m.request, &p.buffer, /*in_place=*/true);
    }
    // The ISR rule, once a second, by whoever waits on the partition
    // (replication.md §17.5): here the leader's side of the fetches.
    const int64_t now = Clock::Real()->NowMs();
    if (r && now >= p.next_isr_check_ms) {
      p.next_isr_check_ms = now + 1000;
      auto shrunk = MaybeShrinkIsr(p.ctx, *p.log, m.request.leader_epoch);
      if (!shrunk && shrunk.error().code() != Code::kFenced && !o_.quiet)
        cli::Warn(
            fmt::format("{}-{}: ISR rule: {}", m.topic, m.partition, shrunk.error().message()));
    }
    return r;
  }

  // After a fetch's reply is sent, while the follower appends it: the
  // partition's next batches, read and checked (ReplicaLog::ReadAhead).
  void AfterReply() {
    if (last_fetched_) last_fetched_->log->ReadAhead(&last_fetched_->buffer);
    last_fetched_ = nullptr;
  }

  Result<EpochEndOffset> OffsetForLeaderEpoch(const wire::OffsetForLeaderEpochMessage& m) {
    auto s = Get(m.topic, m.partition);
    if (!s) return s.error();
    return HandleOffsetForLeaderEpoch((*s)->ctx, *(*s)->log, m.leader_epoch, m.requested_epoch);
  }

  Result<wire::ReplicaStatusReply> ReplicaStatus(const wire::PartitionRef& m) {
    auto s = Get(m.topic, m.partition);
    if (!s) return s.error();
    ReplicaLog& log = *(*s)->log;
    wire::ReplicaStatusReply r;
    auto start = log.LogStartOffset();
    if (!start) return start.error();
    auto end = log.LogEndOffset();
    if (!end) return end.error();
    auto hw = log.HighWatermark();
    if (!hw) return hw.error();
    auto epoch = log.LatestEpoch();
    if (!epoch) return epoch.error();
    r.log_start_offset = *start;
    r.log_end_offset = *end;
    r.high_watermark = *hw;
    r.latest_epoch = *epoch;
    auto restarted = RestartedSinceClaim((*s)->dir);
    if (!restarted) return restarted.error();
    r.restarted_since_claim = *restarted;
    return r;
  }

  // What follows the partition's leader besides its log (§17.6): this
  // root's group offsets of the partition. No producers: a replicated
  // topic's ids live in the cluster (P10), and this root's registry is its
  // own (protocol.md, CarryState).
  Result<wire::CarryStateReply> CarryState(const wire::PartitionRef& m) {
    auto s = Get(m.topic, m.partition);
    if (!s) return s.error();
    wire::CarryStateReply r;
    auto offsets = ReadGroupOffsets(o_.dir, m.topic, m.partition);
    if (!offsets) return offsets.error();
    r.offsets = std::move(*offsets);
    return r;
  }

  // R63: the partition's log read only, whatever this replica's role (no
  // writer lock, no follower position): mq-isr --verify-replicas comparing
  // it with its leader's. Reads of one partition in turn continue.
  Result<LogChunk> ReadLog(const wire::ReadLogMessage& m) {
    auto key = std::make_pair(m.topic, m.partition);
    if (!reading_ || reading_key_ != key) {
      reading_.reset();
      auto source = OpenLocalReplica(fmt::format("{}/{}-{}", o_.dir, m.topic, m.partition));
      if (!source) return source.error();
      reading_ = std::make_unique<LogChunkReader>(std::move(*source));
      reading_key_ = key;
    }
    return reading_->Read(m.offset, m.max_bytes);
  }

 private:
  const Options& o_;
  std::unique_ptr<LogChunkReader> reading_;
  std::pair<std::string, int32_t> reading_key_;
  std::unique_ptr<DataDir> dir_;
  std::map<std::string, TopicBinding> bindings_;
  std::map<std::pair<std::string, int32_t>, std::unique_ptr<Served>> served_;
  Served* last_fetched_ = nullptr;  // by the request just answered
  uint64_t clock_ = 0;              // requests so far
  size_t max_served_ = 0;           // partitions open at most (0: not yet known)
};

}  // namespace

int Serve(const Options& o) {
  struct sigaction sa {};
  sa.sa_handler = OnServeSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  Server server(o);
  wire::Handlers h;
  h.fetch = [&](const wire::FetchMessage& m) { return server.Fetch(m); };
  h.offset_for_leader_epoch = [&](const wire::OffsetForLeaderEpochMessage& m) {
    return server.OffsetForLeaderEpoch(m);
  };
  h.replica_status = [&](const wire::PartitionRef& m) { return server.ReplicaStatus(m); };
  h.carry_state = [&](const wire::PartitionRef& m) { return server.CarryState(m); };
  h.read_log = [&](const wire::ReadLogMessage& m) { return server.ReadLog(m); };
  h.replica_check = [&](const wire::ReplicaCheckMessage& m) {
    return wire::CheckReplica(fmt::format("{}/{}-{}", o.dir, m.topic, m.partition), m.verify);
  };
  h.after_reply = [&] { server.AfterReply(); };
  wire::ServeOptions so;
  so.name = fmt::format("mq-replicate {}", o.dir);
  so.peer = "client";
  so.stop = &g_serve_stop;
  if (o.idle_timeout_ms > 0) so.idle_timeout_ms = o.idle_timeout_ms;
  mq::Status s = wire::Serve(STDIN_FILENO, STDOUT_FILENO, h, so);
  if (!s.ok()) return cli::Fail(s);
  return 0;
}

}  // namespace mq::replicate
