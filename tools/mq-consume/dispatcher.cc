#include "dispatcher.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "cli.h"
#include "envelope.h"
#include "exit_code.h"
#include "mq/group.h"
#include "mq/group_member.h"
#include "replica.h"

namespace mq::consume {

struct Dispatcher::Message {
  int64_t offset = 0;
  int64_t timestamp = 0;
  bool log_append_time = false;
  std::optional<Bytes> key;
  std::optional<Bytes> value;
  std::span<const Header> headers;
};

struct Dispatcher::Stored {
  int64_t offset = 0;
  int64_t timestamp = 0;
  bool log_append_time = false;
  std::optional<std::string> key, value;
  std::vector<std::string> header_keys;
  std::vector<std::optional<std::string>> header_values;
  std::vector<Header> headers;  // views into the two above, built by View()

  size_t bytes() const {
    size_t n = 64 + (key ? key->size() : 0) + (value ? value->size() : 0);
    for (size_t i = 0; i < header_keys.size(); ++i)
      n += 32 + header_keys[i].size() + (header_values[i] ? header_values[i]->size() : 0);
    return n;
  }
  Message View() {
    headers.clear();
    for (size_t i = 0; i < header_keys.size(); ++i) {
      std::optional<Bytes> v;
      if (header_values[i]) v = AsBytes(*header_values[i]);
      headers.push_back({header_keys[i], v});
    }
    Message m{offset, timestamp, log_append_time, std::nullopt, std::nullopt, headers};
    if (key) m.key = AsBytes(*key);
    if (value) m.value = AsBytes(*value);
    return m;
  }
};

namespace {

std::optional<std::string> Copy(const std::optional<Bytes>& b) {
  if (!b) return std::nullopt;
  return std::string(AsText(*b));
}

// The value of the last header named `name`.
std::optional<std::string_view> LastHeader(std::span<const Header> headers, std::string_view name) {
  std::optional<std::string_view> found;
  for (const Header& h : headers)
    if (h.key == name && h.value) found = AsText(*h.value);
  return found;
}

template <typename T>
bool ParseInt(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Dispatcher::Dispatcher(HandlerOptions options, std::string topic,
                       const volatile std::sig_atomic_t* interrupted)
    : options_(std::move(options)),
      interrupted_(interrupted),
      base_env_(handler::BaseEnvironment()) {
  if (!topic.empty()) (void)topics_.Add(topic);
}

Result<int32_t> Dispatcher::AddTopic(const std::string& topic) {
  auto number = topics_.Add(topic);
  if (!number) return number;
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  // A scan remembers the dead letters of the topics known then only.
  dlq_scanned_.assign(dlq_scanned_.size(), false);
  return number;
}

std::string Dispatcher::Where(int32_t lane) const {
  return fmt::format("topic {} partition {}", topics_.TopicOf(lane), LanePartition(lane));
}

size_t ReservedDescriptors(const HandlerOptions& options) {
  return handler::kDescriptorsPerRun * std::max<size_t>(options.parallel, 1) +
         (options.dlq ? kMaxDeadLetterWriters * kDescriptorsPerWriter : 0);
}

Dispatcher::~Dispatcher() { (void)Close(); }

Status Dispatcher::Open(const DataDir& dir, const TopicConfig& source) {
  if (parallel() && workers_.empty())
    for (uint32_t i = 0; i < options_.parallel; ++i) workers_.emplace_back([this] { Work(); });
  if (!options_.dlq) return Status::Ok();
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  dir_ = dir;
  auto config = dir.ReadTopic(*options_.dlq);
  if (!config && config.error().code() == Code::kNotFound) {
    MQ_RETURN_IF_ERROR(dir.CreateTopic(*options_.dlq, source.LocalCopy()));
    if (!options_.quiet)
      cli::Warn(fmt::format("created dead-letter topic {} like {} ({} partition{})", *options_.dlq,
                            topics_.TopicOf(0), source.partitions,
                            source.partitions == 1 ? "" : "s"));
    config = dir.ReadTopic(*options_.dlq);
  }
  if (!config) return config.error();
  MQ_RETURN_IF_ERROR(cli::RefuseReplicatedOutput(*config, "--dlq", *options_.dlq));
  dlq_config_ = *config;
  dlq_writers_.resize(static_cast<size_t>(config->partitions));
  dlq_scanned_.assign(static_cast<size_t>(config->partitions), false);
  return Status::Ok();
}

Status Dispatcher::Close() {
  if (!workers_.empty()) {
    Stop();
    {
      std::lock_guard<std::mutex> lk(mu_);
      shutdown_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  Status first;
  for (auto& w : dlq_writers_) {
    if (!w) continue;
    Status s = w->Close();
    if (first.ok() && !s.ok()) first = s;
    w.reset();
  }
  dlq_open_.clear();
  return first;
}

Status Dispatcher::Add(int32_t partition, bool log_append_time, const RecordView& r,
                       std::span<const Header> headers, int32_t leader_epoch, uint32_t generation) {
  {
    std::lock_guard<std::mutex> lk(given_mu_);
    Progress& g = progress_[partition];
    if (g.first_given < 0) g.first_given = r.offset;
    g.given_end = r.offset + 1;
  }
  if (interrupted() || exit_code_ != 0) return Status::Ok();
  if (!options_.batch && !parallel()) {
    Message m{r.offset, r.timestamp, log_append_time, r.key, r.value, headers};
    return HandleNow(partition, std::span<const Message>(&m, 1), leader_epoch, generation);
  }
  Stored s;
  s.offset = r.offset;
  s.timestamp = r.timestamp;
  s.log_append_time = log_append_time;
  s.key = Copy(r.key);
  s.value = Copy(r.value);
  for (const Header& h : headers) {
    s.header_keys.emplace_back(h.key);
    s.header_values.push_back(Copy(h.value));
  }
  if (!options_.batch) {
    std::vector<Stored> one;
    one.push_back(std::move(s));
    Enqueue(partition, std::move(one), leader_epoch, generation);
    return Status::Ok();
  }
  pending_bytes_ += s.bytes();
  auto& batch = pending_[partition];
  batch.push_back(std::move(s));
  pending_epoch_[partition] = leader_epoch;
  pending_generation_[partition] = generation;
  if (batch.size() >= *options_.batch) return FlushPartition(partition);
  if (pending_bytes_ >= options_.max_pending_bytes) return Flush();
  return Status::Ok();
}

Status Dispatcher::FlushPartition(int32_t partition) {
  auto it = pending_.find(partition);
  if (it == pending_.end() || it->second.empty()) return Status::Ok();
  std::vector<Stored> batch = std::move(it->second);
  it->second.clear();
  for (const Stored& s : batch) pending_bytes_ -= s.bytes();
  if (interrupted() || exit_code_ != 0) return Status::Ok();
  if (parallel()) {
    Enqueue(partition, std::move(batch), pending_epoch_[partition], pending_generation_[partition]);
    return Status::Ok();
  }
  std::vector<Message> views;
  views.reserve(batch.size());
  for (Stored& s : batch) views.push_back(s.View());
  return HandleNow(partition, views, pending_epoch_[partition], pending_generation_[partition]);
}

Status Dispatcher::HandleNow(int32_t partition, std::span<const Message> messages,
                             int32_t leader_epoch, uint32_t generation) {
  Ctl ctl;
  FileLock lock;
  Status s = LockForUnit(partition, &lock, &ctl);
  if (s.ok()) s = HandleUnit(partition, messages, ctl);
  // Whatever stopped the unit (an append to the output or dead-letter
  // topic that failed, a transform that is not deterministic) leaves it
  // unhandled: nothing is handed over (healthy() is false) or committed.
  if (!s.ok()) SetExit(cli::ExitCode(s));
  // What was handled counts: the unit, or the part of a split batch
  // handled alone before a stop cut it short (R72), with its dead letters;
  // the rest is run again by the next owner.
  auto end = Ended(partition, messages, s, ctl);
  if (!end) return s;
  if (ctl.dead_letters > 0) {
    std::lock_guard<std::mutex> dlq(dlq_mu_);
    dead_counts_[partition] += ctl.dead_letters;
  }
  std::lock_guard<std::mutex> lk(given_mu_);
  Progress& g = progress_[partition];
  g.handled_end = *end;
  // The epoch known is that of the unit's last message.
  g.handled_epoch = *end == messages.back().offset + 1 ? leader_epoch : kNoLeaderEpoch;
  g.handled_generation = generation;
  return s;
}

std::optional<int64_t> Dispatcher::Ended(int32_t partition, std::span<const Message> messages,
                                         const Status& s, const Ctl& ctl) {
  const bool whole = s.ok() && !ctl.cut;
  auto end = UnitHandledEnd(messages.back().offset, whole, ctl.handled_alone_end);
  // Cut short by a stop or a revoke (not by an error, nor a stuck handler,
  // which was killed): what was not handled never ran to its end, and is
  // handed back at most once.
  if (s.ok() && ctl.cut) MarkUnstarted(partition, end.value_or(messages.front().offset));
  return end;
}

std::optional<Dispatcher::Handled> Dispatcher::handled_through(int32_t partition) const {
  std::lock_guard<std::mutex> lk(given_mu_);
  auto it = progress_.find(partition);
  if (it == progress_.end() || it->second.handled_end < 0) return std::nullopt;
  return Handled{it->second.handled_end, it->second.handled_epoch, it->second.handled_generation};
}

void Dispatcher::MarkStarted(int32_t partition, int64_t end) {
  std::lock_guard<std::mutex> lk(given_mu_);
  Progress& g = progress_[partition];
  g.started_end = std::max(g.started_end, end);
}

void Dispatcher::MarkUnstarted(int32_t partition, int64_t from) {
  std::lock_guard<std::mutex> lk(given_mu_);
  Progress& g = progress_[partition];
  if (g.started_end > from) g.started_end = from;
}

std::optional<int64_t> Dispatcher::first_unstarted(int32_t partition) const {
  std::lock_guard<std::mutex> lk(given_mu_);
  auto it = progress_.find(partition);
  if (it == progress_.end() || it->second.given_end < 0) return std::nullopt;
  const Progress& g = it->second;
  if (g.started_end < 0) return g.first_given;
  // Messages are started in the order they were given: those past the
  // last unit started are the ones not started (offsets in between that
  // were never given are not messages to hand out).
  if (g.started_end < g.given_end) return g.started_end;
  return std::nullopt;
}

bool Dispatcher::has_pending(int32_t partition) const {
  auto it = pending_.find(partition);
  if (it != pending_.end() && !it->second.empty()) return true;
  if (!parallel()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto lane = lanes_.find(partition);
  return lane != lanes_.end() && lane->second.outstanding > 0;
}

// ---- parallel ---------------------------------------------------------------

void Dispatcher::Enqueue(int32_t partition, std::vector<Stored> messages, int32_t leader_epoch,
                         uint32_t generation) {
  Unit u;
  u.leader_epoch = leader_epoch;
  u.generation = generation;
  for (const Stored& s : messages) u.bytes += s.bytes();
  u.messages = std::move(messages);
  std::unique_lock<std::mutex> lk(mu_);
  // Bounded read-ahead: wait for a worker to take some (in slices, to see
  // an interrupt).
  while (queued_bytes_ >= options_.max_pending_bytes && !stopping_ && !interrupted())
    done_cv_.wait_for(lk, std::chrono::milliseconds(100));
  if (stopping_ || interrupted()) return;  // the run stops: never handed over
  Lane& lane = lanes_[partition];
  queued_bytes_ += u.bytes;
  ++lane.outstanding;
  lane.queued.push_back(std::move(u));
  lk.unlock();
  work_cv_.notify_one();
}

Dispatcher::Lane* Dispatcher::NextLane(int32_t* partition) {
  // Round-robin from the partition after the last one started, so that a
  // partition with a deep queue does not starve the others.
  auto it = lanes_.lower_bound(next_lane_);
  for (size_t n = 0; n < lanes_.size(); ++n, ++it) {
    if (it == lanes_.end()) it = lanes_.begin();
    Lane& lane = it->second;
    if (!lane.running && !lane.queued.empty() && !lane.cancel.load()) {
      *partition = it->first;
      next_lane_ = it->first + 1;
      return &lane;
    }
  }
  return nullptr;
}

void Dispatcher::Work() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    Lane* lane = nullptr;
    int32_t p = 0;
    work_cv_.wait(lk, [&] {
      if (shutdown_) return true;
      if (stopping_ || interrupted()) return false;
      lane = NextLane(&p);
      return lane != nullptr;
    });
    if (shutdown_) return;
    Unit u = std::move(lane->queued.front());
    lane->queued.pop_front();
    queued_bytes_ -= u.bytes;
    lane->running = true;
    ++running_;
    lk.unlock();
    done_cv_.notify_all();  // room for Enqueue
    Ctl ctl;
    ctl.cancel = &lane->cancel;
    std::vector<Message> views;
    views.reserve(u.messages.size());
    for (Stored& s : u.messages) views.push_back(s.View());
    Status st;
    try {
      FileLock lock;
      st = LockForUnit(p, &lock, &ctl);
      if (st.ok()) st = HandleUnit(p, views, ctl);
    } catch (const std::bad_alloc&) {  // no exception may leave a thread
      st = Status(Code::kNoMemory, fmt::format("{}: out of memory handling a message", Where(p)));
    }
    Done d;
    d.partition = p;
    d.next_offset = u.messages.back().offset + 1;
    d.messages = u.messages.size();
    d.leader_epoch = u.leader_epoch;
    d.generation = u.generation;
    d.dead_letters = ctl.dead_letters;
    d.handled = st.ok() && !ctl.cut;
    d.handled_end = Ended(p, views, st, ctl).value_or(-1);
    d.status = std::move(st);
    // As serially (HandleNow): whatever stopped the unit (an append to the
    // output or dead-letter topic that failed, a transform that is not
    // deterministic) leaves it unhandled, and the run unhealthy, so that no
    // partition is handed over past it.
    if (!d.status.ok()) SetExit(cli::ExitCode(d.status));
    lk.lock();
    lane->running = false;
    --running_;
    if (!d.status.ok()) stopping_ = true;  // nothing new starts; the member stops
    done_.push_back(std::move(d));
    done_cv_.notify_all();
    work_cv_.notify_all();  // the lane's next unit, for any worker
  }
}

std::vector<Dispatcher::Done> Dispatcher::TakeDone(int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  if (done_.empty() && timeout_ms > 0)
    done_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !done_.empty(); });
  std::vector<Done> out;
  out.swap(done_);
  for (const Done& d : out) --lanes_[d.partition].outstanding;
  return out;
}

bool Dispatcher::busy() const {
  for (const auto& [p, batch] : pending_)
    if (!batch.empty()) return true;
  std::lock_guard<std::mutex> lk(mu_);
  if (running_ > 0) return true;
  for (const auto& [p, lane] : lanes_)
    if (!lane.queued.empty()) return true;
  return false;
}

void Dispatcher::Yield(int32_t partition) {
  Drop(partition);
  std::unique_lock<std::mutex> lk(mu_);
  auto it = lanes_.find(partition);
  if (it == lanes_.end()) return;
  Lane& lane = it->second;
  for (const Unit& u : lane.queued) queued_bytes_ -= u.bytes;
  lane.outstanding -= lane.queued.size();
  lane.queued.clear();
  // A unit waiting to retry sees the flag within 100 ms and ends
  // unhandled (its failed attempt is run again by the next owner; at most
  // once it is handed back), a split batch with what it handled alone
  // (R72); a running handler is not stopped: what it finishes is committed.
  lane.cancel = true;
  done_cv_.wait(lk, [&] { return !lane.running; });
  lane.cancel = false;
}

Status Dispatcher::Drain() {
  MQ_RETURN_IF_ERROR(Flush());
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    bool queued = false;
    for (const auto& [p, lane] : lanes_) queued = queued || !lane.queued.empty();
    if (running_ == 0 && (!queued || stopping_ || interrupted())) return Status::Ok();
    done_cv_.wait_for(lk, std::chrono::milliseconds(100));
  }
}

void Dispatcher::Stop() {
  std::unique_lock<std::mutex> lk(mu_);
  stopping_ = true;
  for (auto& [p, lane] : lanes_) {
    for (const Unit& u : lane.queued) queued_bytes_ -= u.bytes;
    lane.outstanding -= lane.queued.size();
    lane.queued.clear();
  }
  done_cv_.wait(lk, [&] { return running_ == 0; });
}

void Dispatcher::SetExit(int code) {
  int none = 0;
  exit_code_.compare_exchange_strong(none, code);
}

void Dispatcher::Drop(int32_t partition) {
  auto it = pending_.find(partition);
  if (it == pending_.end()) return;
  for (const Stored& s : it->second) pending_bytes_ -= s.bytes();
  pending_.erase(it);
}

void Dispatcher::Forget(int32_t partition) {
  {
    std::lock_guard<std::mutex> lk(given_mu_);
    progress_.erase(partition);
  }
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  dead_.erase(partition);
  // Dead letters not taken with the partition's position are counted by
  // its next owner, which finds them in the dead-letter topic: counted
  // here too, they would be counted twice should the partition come back.
  dead_counts_.erase(partition);
  if (dlq_config_ && dlq_config_->partitions > 0) {
    const int32_t dp = LanePartition(partition) % dlq_config_->partitions;
    dlq_scanned_[static_cast<size_t>(dp)] = false;
  }
}

int64_t Dispatcher::TakeDeadLetters(int32_t partition) {
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  auto it = dead_counts_.find(partition);
  if (it == dead_counts_.end()) return 0;
  int64_t n = it->second;
  dead_counts_.erase(it);
  return n;
}

Status Dispatcher::Flush() {
  std::vector<int32_t> parts;
  for (const auto& [p, batch] : pending_)
    if (!batch.empty()) parts.push_back(p);
  std::sort(parts.begin(), parts.end());
  for (int32_t p : parts) MQ_RETURN_IF_ERROR(FlushPartition(p));
  return Status::Ok();
}

// A batch that fails every attempt is split: each of its messages is then
// handled alone (as a batch of one), so only the message that fails goes to
// the dead-letter topic; the others are handled again.
Status Dispatcher::LockForUnit(int32_t partition, FileLock* lock, Ctl* ctl) {
  if (!options_.handler_lock) return Status::Ok();
  auto got = options_.handler_lock(partition);
  if (!got) return got.error();
  *lock = std::move(*got);
  ctl->inherit_fd = lock->fd();
  return Status::Ok();
}

Result<bool> Dispatcher::HandledAlready(int32_t partition, const Message& m, Ctl& ctl) {
  // E8: a dead-lettered message gets no outputs, even if its transform
  // would succeed now. Looked at first: one whose commit was lost is
  // counted again (as the commit that moves past it counts it).
  if (options_.dlq) {
    auto dead = DeadAlready(partition, m.offset);
    if (!dead) return dead.error();
    if (*dead) {
      ++handled_;
      ++ctl.dead_letters;
      return true;
    }
  }
  auto complete = options_.sink->Complete(partition, m.offset);
  if (!complete) return complete.error();
  if (*complete) {
    ++handled_;
    return true;
  }
  return false;
}

Status Dispatcher::HandleUnit(int32_t partition, std::span<const Message> messages, Ctl& ctl) {
  MarkStarted(partition, messages.back().offset + 1);
  OutputSink* sink = options_.sink;
  if (sink) {
    // A transform: one message per unit (no --batch).
    auto done = HandledAlready(partition, messages.front(), ctl);
    if (!done) return done.error();
    if (*done) return Status::Ok();
  }
  auto a = Attempt(partition, messages, ctl);
  if (!a) return a.error();
  if (a->outcome.kind == handler::Outcome::Kind::kInterrupted) {
    ctl.cut = true;
    return Status::Ok();
  }
  if (a->outcome.ok()) {
    if (sink) {
      const Message& m = messages.front();
      MQ_RETURN_IF_ERROR(sink->Deliver(partition, m.offset, m.timestamp, a->outcome.output));
    }
    handled_ += messages.size();
    return Status::Ok();
  }
  if (messages.size() > 1 && !NotRunAgain(a->outcome)) {
    if (!options_.quiet)
      cli::Warn(fmt::format(
          "{} offsets {}..{}: batch failed {} attempt{} "
          "({}); handling its {} messages one by one",
          Where(partition), messages.front().offset, messages.back().offset, a->attempts,
          a->attempts == 1 ? "" : "s", a->outcome.Describe(), messages.size()));
    for (const Message& m : messages) {
      MQ_RETURN_IF_ERROR(HandleUnit(partition, std::span<const Message>(&m, 1), ctl));
      if (ctl.cut) return Status::Ok();
      // Handled: a stop or a revoke from here on commits it (R72).
      ctl.handled_alone_end = m.offset + 1;
      if (stopped(ctl)) {
        ctl.cut = true;
        return Status::Ok();
      }
    }
    return Status::Ok();
  }
  // At most once, a handler that died of a signal is not run again (below):
  // nor are the messages of its batch one by one.
  for (const Message& m : messages) MQ_RETURN_IF_ERROR(DeadLetter(partition, m, *a, ctl));
  return Status::Ok();
}

std::string_view Dispatcher::PrepareRun(int32_t lane, std::span<const Message> messages,
                                        const Ctl& ctl, handler::Spec* spec,
                                        fmt::memory_buffer* input) const {
  spec->argv = options_.command;
  spec->env = base_env_;
  spec->inherit_fd = ctl.inherit_fd;
  spec->capture_stdout = options_.sink != nullptr;
  std::string_view stdin_bytes;
  const Message& first = messages.front();
  // The message's own topic and partition, not its lane.
  const std::string topic = topics_.TopicOf(lane);
  const int32_t partition = LanePartition(lane);
  if (options_.batch) {
    handler::AppendBatchEnv(&spec->env, topic, partition, first.offset, messages.back().offset,
                            messages.size());
    for (const Message& m : messages) {
      envelope::EnvelopeFields f{topic,       partition, m.offset, m.log_append_time,
                                 m.timestamp, m.key,     m.value,  m.headers};
      envelope::AppendEnvelopeJson(*input, f);
    }
    stdin_bytes = std::string_view(input->data(), input->size());
  } else {
    handler::MessageInfo info{topic,           partition, first.offset,
                              first.timestamp, first.key, !first.value.has_value(),
                              first.headers};
    handler::AppendMessageEnv(&spec->env, info);
    if (first.value) stdin_bytes = AsText(*first.value);
  }
  return stdin_bytes;
}

Status Dispatcher::HandlerStuck(const std::string& where, size_t messages) const {
  return Status(Code::kBusy,
                fmt::format("{}: handler made no progress for {} ms (--max-poll-interval "
                            "{}): killed its process group; giving up this member's "
                            "partitions {}",
                            where, options_.max_run_ms, options_.max_run_ms,
                            options_.at_most_once
                                ? fmt::format("(--at-most-once: {} was committed before "
                                              "its handler ran, and is lost)",
                                              messages == 1 ? "the message" : "the batch")
                                : fmt::format("without committing {}",
                                              messages == 1 ? "the message" : "the batch")));
}

Result<Dispatcher::Attempted> Dispatcher::Attempt(int32_t partition,
                                                  std::span<const Message> messages, Ctl& ctl) {
  handler::Spec spec;
  fmt::memory_buffer input;
  const std::string_view stdin_bytes = PrepareRun(partition, messages, ctl, &spec, &input);
  const Message& first = messages.front();
  std::string where = messages.size() == 1
                          ? fmt::format("{} offset {}", Where(partition), first.offset)
                          : fmt::format("{} offsets {}..{}", Where(partition), first.offset,
                                        messages.back().offset);
  Attempted a;
  uint64_t backoff = options_.retry_backoff_ms;
  while (true) {
    ++a.attempts;
    // No cancel: a partition given up lets its running handler finish
    // (Yield); only an interrupt or the deadline stops it, and at most
    // once only the deadline: its messages were committed ahead, and a
    // handler stopped before it finished would lose them.
    auto outcome = handler::Run(spec, stdin_bytes, options_.at_most_once ? nullptr : interrupted_,
                                options_.kill_grace_ms, options_.max_run_ms);
    if (!outcome) return outcome.error();
    a.outcome = std::move(*outcome);
    if (a.outcome.ok() || a.outcome.kind == handler::Outcome::Kind::kInterrupted) return a;
    // Stuck: not the message's failure (no retry, no dead letter); the
    // member gives its partitions up, and the message is handed over again
    // by their next owner.
    if (a.outcome.kind == handler::Outcome::Kind::kTimedOut) {
      SetExit(kExitHandlerStuck);
      return HandlerStuck(where, messages.size());
    }
    // A command that cannot be run fails for every message: stop, naming
    // it. Only a message too large for the environment (E2BIG) is the
    // message's failure.
    if (a.outcome.kind == handler::Outcome::Kind::kExecFailed && a.outcome.code != E2BIG) {
      SetExit(a.outcome.code == ENOENT ? kExitNotFound : kExitCannotRun);
      return Status(Code::kInvalidArgument,
                    fmt::format("--exec {}: {}", options_.command.front(), a.outcome.Describe()));
    }
    if (a.attempts >= options_.max_attempts || NotRunAgain(a.outcome)) return a;
    ++retries_;
    if (!options_.quiet)
      cli::Warn(fmt::format("{}: handler {} (attempt {} of {}); retrying in {} ms", where,
                            a.outcome.Describe(), a.attempts, options_.max_attempts, backoff));
    if (!SleepMs(static_cast<uint32_t>(backoff), ctl)) {
      a.outcome.kind = handler::Outcome::Kind::kInterrupted;
      return a;
    }
    backoff = std::min<uint64_t>(backoff * 2, options_.max_backoff_ms);
  }
}

bool Dispatcher::NotRunAgain(const handler::Outcome& o) const {
  return options_.at_most_once && o.kind == handler::Outcome::Kind::kSignaled;
}

bool Dispatcher::SleepMs(uint32_t ms, const Ctl& ctl) {
  // In slices of at most 100 ms, so that SIGINT/SIGTERM (which make
  // nanosleep return early on the thread they reach; the flag says why)
  // and a cancel from another thread end the wait soon.
  uint32_t left_ms = ms;
  while (!stopped(ctl)) {
    if (left_ms == 0) return true;
    const uint32_t slice = std::min<uint32_t>(left_ms, 100);
    timespec t{0, static_cast<long>(slice) * 1000000L};
    if (::nanosleep(&t, &t) != 0 && errno == EINTR) {
      left_ms -= slice - static_cast<uint32_t>(t.tv_nsec / 1000000L);
      continue;
    }
    left_ms -= slice;
  }
  return false;
}

// Reads dead-letter partition `dlq_partition` once, remembering which
// offsets of this topic it already holds: a rerun after a crash between
// the append and the source offset's completion appends nothing twice.
Status Dispatcher::ScanDeadLetters(int32_t dlq_partition) {
  if (dlq_scanned_[static_cast<size_t>(dlq_partition)]) return Status::Ok();
  const std::string pdir = dir_->PartitionDir(*options_.dlq, dlq_partition);
  ReadOptions read;
  read.limits = DataDir::DecodeLimitsFor(*dlq_config_);
  read.offsets = dlq_config_->cleanup_policy == CleanupPolicy::kDelete ? OffsetPolicy::kContiguous
                                                                       : OffsetPolicy::kGapsAllowed;
  auto reader = PartitionReader::Open(pdir, read);
  if (!reader) {
    if (reader.error().code() != Code::kNotFound) return reader.error();
  } else {
    std::vector<std::byte> scratch;
    while (true) {
      auto batch = (*reader)->Next();
      if (!batch) return batch.error();
      if (!*batch) break;
      if ((*batch)->header().is_control()) continue;
      LogPosition pos = (*reader)->position();
      auto records = RecordReader::Open(**batch, &scratch, read.limits, pos.file, pos.position);
      if (!records) return records.error();
      RecordView r;
      while (records->Read(&r)) {
        std::vector<Header> hs = r.headers();
        // The dead-lettering's own headers follow the message's, from the
        // last mq.dlq.topic on: a message dead-lettered again carries the
        // earlier ones too, and only the latest says who appended it.
        size_t from = hs.size();
        for (size_t i = 0; i < hs.size(); ++i)
          if (hs[i].key == kDlqTopicHeader) from = i;
        if (from == hs.size()) continue;
        const std::span<const Header> mine(hs.data() + from, hs.size() - from);
        auto t = LastHeader(mine, kDlqTopicHeader);
        auto p = LastHeader(mine, kDlqPartitionHeader);
        auto o = LastHeader(mine, kDlqOffsetHeader);
        // No mq.dlq.group: appended without -G, or before the header
        // existed; it is this run's only when this run has no group.
        auto g = LastHeader(mine, kDlqGroupHeader);
        if (g != std::optional<std::string_view>(options_.group)) continue;
        int32_t part = 0;
        int64_t off = 0;
        if (!t || !p || !o || !ParseInt(*p, &part) || !ParseInt(*o, &off) || part < 0 ||
            part >= kLanesPerTopic)
          continue;
        if (auto number = topics_.Find(*t)) dead_[LaneOf(*number, part)].insert(off);
      }
      if (!records->status().ok()) return records->status();
    }
  }
  dlq_scanned_[static_cast<size_t>(dlq_partition)] = true;
  return Status::Ok();
}

Result<bool> Dispatcher::DeadAlready(int32_t partition, int64_t offset) {
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  MQ_RETURN_IF_ERROR(ScanDeadLetters(LanePartition(partition) % dlq_config_->partitions));
  auto it = dead_.find(partition);
  return it != dead_.end() && it->second.contains(offset);
}

Result<std::vector<std::byte>> Dispatcher::DeadLetterBatch(int32_t partition, const Message& m,
                                                           const Attempted& a) const {
  std::vector<Header> headers(m.headers.begin(), m.headers.end());
  const std::string topic = topics_.TopicOf(partition);
  const std::string part = std::to_string(LanePartition(partition)), off = std::to_string(m.offset);
  const std::string attempts = std::to_string(a.attempts), status = a.outcome.StatusText();
  headers.push_back({kDlqTopicHeader, AsBytes(topic)});
  headers.push_back({kDlqPartitionHeader, AsBytes(part)});
  headers.push_back({kDlqOffsetHeader, AsBytes(off)});
  headers.push_back({kDlqAttemptsHeader, AsBytes(attempts)});
  headers.push_back({kDlqExitHeader, AsBytes(status)});
  headers.push_back({kDlqStderrHeader, AsBytes(a.outcome.stderr_tail)});
  if (options_.group) headers.push_back({kDlqGroupHeader, AsBytes(*options_.group)});
  BatchBuilder builder;
  RecordInput r;
  r.timestamp = m.timestamp;
  r.key = m.key;
  r.value = m.value;
  r.headers = headers;
  builder.Add(r);
  std::vector<std::byte> bytes;
  MQ_RETURN_IF_ERROR(builder.Finish(0, &bytes));
  return bytes;
}

Result<PartitionWriter*> Dispatcher::DeadLetterWriter(int32_t dp) {
  auto& writer = dlq_writers_[static_cast<size_t>(dp)];
  if (writer) {
    dlq_open_.remove(dp);
  } else {
    if (dlq_open_.size() >= kMaxDeadLetterWriters) {
      // Every dead letter appended through it is on disk already.
      const int32_t old = dlq_open_.back();
      dlq_open_.pop_back();
      Status closed = dlq_writers_[static_cast<size_t>(old)]->Close();
      dlq_writers_[static_cast<size_t>(old)].reset();
      if (!closed.ok())
        return Status(closed.code(), fmt::format("dead-letter topic {} partition {}: close: {}",
                                                 *options_.dlq, old, closed.message()));
    }
    LogConfig log = DataDir::LogConfigFor(*dlq_config_);
    log.durability = Durability::kEveryBatch;  // appended means on disk
    RecoveryReport report;
    auto w = PartitionWriter::Open(dir_->PartitionDir(*options_.dlq, dp), log, false, &report);
    if (!w) return w.error();
    writer = std::move(*w);
  }
  return writer.get();
}

Status Dispatcher::DeadLetter(int32_t partition, const Message& m, const Attempted& a, Ctl& ctl) {
  std::string what =
      fmt::format("{} offset {}: handler failed {} attempt{} ({})", Where(partition), m.offset,
                  a.attempts, a.attempts == 1 ? "" : "s", a.outcome.Describe());
  if (!options_.dlq) {
    SetExit(kExitHandlerFailed);
    return Status(Code::kInternal,
                  what + "; stopping: without --dlq a message that fails stops its partition");
  }
  // E9: outputs of it may be in the output topic already: dead-lettered,
  // it would be half in each. The run stops; a rerun completes it.
  if (options_.sink && options_.sink->Started(partition, m.offset)) {
    SetExit(kExitHandlerFailed);
    return Status(Code::kInternal,
                  what +
                      "; stopping: some of its outputs are in the output topic already, so "
                      "it is not dead-lettered (a rerun completes it)");
  }
  // Workers dead-letter concurrently; the dead-letter topic's writers and
  // what was found in it are shared.
  std::lock_guard<std::mutex> dlq(dlq_mu_);
  // The source partition picks the dead-letter partition: a source
  // partition's dead letters stay in order, in one place. (Those of several
  // topics' partitions P share partition P's; mq.dlq.topic tells them apart.)
  const int32_t dp = LanePartition(partition) % dlq_config_->partitions;
  MQ_RETURN_IF_ERROR(ScanDeadLetters(dp));
  auto& seen = dead_[partition];
  if (seen.contains(m.offset)) {
    ++handled_;
    ++ctl.dead_letters;
    if (!options_.quiet)
      cli::Warn(fmt::format("{}; already in dead-letter topic {} partition {}, not appended again",
                            what, *options_.dlq, dp));
    return Status::Ok();
  }
  auto bytes = DeadLetterBatch(partition, m, a);
  if (!bytes) return bytes.error();
  auto writer = DeadLetterWriter(dp);
  if (!writer) return writer.error();
  dlq_open_.push_front(dp);
  auto appended = (*writer)->Append(*bytes);
  if (!appended)
    return Status(appended.error().code(),
                  fmt::format("{}: dead-letter topic {} partition {}: append: {}", what,
                              *options_.dlq, dp, appended.error().message()));
  // Test seam (mq(7), MQ_TEST_CRASH): die as a SIGKILL would, between the
  // append and the commit that counts it and moves past its message.
  if (const char* crash = std::getenv("MQ_TEST_CRASH");
      crash != nullptr && std::string_view(crash) == "dlq-appended")
    ::raise(SIGKILL);
  seen.insert(m.offset);
  ++ctl.dead_letters;
  ++dead_lettered_;
  ++handled_;
  if (!options_.quiet)
    cli::Warn(fmt::format("{}; appended to dead-letter topic {} partition {} offset {}", what,
                          *options_.dlq, dp, appended->base_offset));
  return Status::Ok();
}

}  // namespace mq::consume
