#include "group_run.h"

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dispatcher.h"
#include "pipeline.h"
#include "mq/consumer.h"
#include "mq/group.h"
#include "mq/group_member.h"
#include "mq/group_status.h"

namespace mq::consume {
namespace {

// How often membership is probed (format-spec/group.md §14.6).
constexpr int kRebalancePollMs = 100;
// At exit with --ack-fd: how long to wait for the next acknowledgement.
constexpr int kAckWaitMs = 5000;

int64_t MonotonicMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Per owned partition: how far messages were handed over, and committed.
struct Progress {
  int64_t committed = -1;  // the group's committed offset (-1: none)
  int64_t handed = -1;     // position whose messages all reached stdout (or were
                           // acknowledged, or with --exec: were handled)
  int32_t epoch = -1;      // leader epoch of the batch holding handed - 1
  int64_t ahead = -1;       // at-most-once: offset committed ahead of output
  int32_t ahead_epoch = -1;
  int64_t dead_letters = 0;  // dead letters below `handed`, not committed yet
  // The committed offset was past the log end (a truncation): this is it,
  // and `committed` is the log end until the next commit lowers it there
  // or beyond (R31's exception). -1: nothing to lower.
  int64_t lower_from = -1;
};

class Member {
 public:
  Member(const Flags& f, Settings& settings, const DataDir* dir, Consumer* consumer, Group* group,
         GroupMember* member, cli::Output* out, Dispatcher* dispatcher)
      : f_(f),
        settings_(settings),
        dir_(dir),
        consumer_(consumer),
        group_(group),
        member_(member),
        out_(out),
        dispatcher_(dispatcher),
        printer_(std::move(settings.print), out) {}

  Status Run(const volatile std::sig_atomic_t* interrupted);
  // Hands over and commits what the run left (always called, also after
  // an error or a signal; `completed`: the run ended without either, so
  // pending --batch messages are handed over first).
  Status Finish(bool completed);
  uint64_t delivered() const { return delivered_; }

 private:
  Status Rebalance();
  // Starts reading partition p, just taken (its ownership lock held), from
  // its committed offset in `state`, read after it was taken; false when
  // it let p go again, to be taken at a later poll.
  Result<bool> Acquire(int32_t p, const GroupOffsets& state);
  Status Revoke(int32_t p);
  // Everything printed reached stdout: each partition's position is handed over.
  void MarkFlushed();
  // --exec: a partition (`only`, or each) with no message waiting for its
  // handler has had every message handed out handled: its position is
  // handed over, with the dead letters below it. Once a run stopped (a
  // poison message, a stuck handler, an interrupt) only what was handled
  // moves, serially up to the last unit handled (handled_through; a
  // handler that exited 0 after the interrupt's SIGTERM counts): a
  // message whose handler did not finish is never handed over.
  void MarkHandled(std::optional<int32_t> only = std::nullopt);
  // Partition `p`'s position is handed over, with the epoch of its last record.
  void HandOver(int32_t p, Progress& pr);
  // --parallel: takes the handler runs that ended (waiting up to
  // `timeout_ms` for one): each handled unit hands its partition over up
  // to its last message; the first that stopped the run is kept in stop_.
  void Collect(int timeout_ms);
  Status Commit();
  // Printing: the output was stalled (its reader took nothing for
  // --max-poll-interval): the member gives up (exit 75).
  Status Stalled() const;
  Status CommitAhead(const ConsumedRecord& m);
  // --at-most-once, letting go of partition `only` (or of each) without a
  // crash: what was committed ahead of the output and not handed out is
  // handed back to the next owner (HandBackCommit), in one commit.
  Status HandBack(std::optional<int32_t> only = std::nullopt);
  // --at-most-once: commits the dead letters counted since the last commit
  // at once (see the definition).
  Status CommitDeadLetters();
  // With `until_eof`, waits until every message handed out is
  // acknowledged, the stream ends, or kAckWaitMs pass without one.
  void ReadAcks(bool until_eof);
  bool AllAcknowledged() const;

  const Flags& f_;
  Settings& settings_;
  const DataDir* dir_;
  Consumer* consumer_;
  Group* group_;
  GroupMember* member_;
  cli::Output* out_;
  Dispatcher* dispatcher_;  // --exec; nullptr: messages are printed
  Printer printer_;
  std::map<int32_t, Progress> progress_;
  std::vector<int32_t> last_epoch_;  // by partition: leader epoch of the last record handed out
  uint64_t delivered_ = 0;
  uint64_t since_commit_ = 0;
  uint64_t seen_flushes_ = 0;
  int64_t last_commit_ms_ = 0;
  int64_t next_poll_ms_ = 0;
  bool said_idle_ = false;
  size_t waiting_ = 0;  // assigned partitions their previous owner still holds
  std::vector<std::string> last_absent_;  // static members in their session, not running
  std::string ack_buf_;
  bool ack_eof_ = false;
  Status stop_;  // --parallel: why a handler run stopped the member
};

// Test seam (mq(7), MQ_TEST_PAUSE=acquire:MS): a pause before each
// partition this member tries to take, so that a test can let its previous
// owner go on meanwhile.
void PauseBeforeAcquire() {
  static const int ms = [] {
    const char* v = std::getenv("MQ_TEST_PAUSE");
    constexpr std::string_view kPoint = "acquire:";
    if (v == nullptr || !std::string_view(v).starts_with(kPoint)) return 0;
    const std::string_view digits = std::string_view(v).substr(kPoint.size());
    int n = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    return ec == std::errc() && end == digits.data() + digits.size() ? n : 0;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

Result<bool> Member::Acquire(int32_t p, const GroupOffsets& state) {
  StartPosition start;
  const CommittedOffset* c = state.Find(f_.topic, p);
  Progress pr;
  if (c != nullptr) {
    // Out of the log's range, the committed offset is said, and moved into
    // it: the consumer would wait for an offset past the end (-o N), so
    // after a truncation every message appended up to the old offset
    // would be passed over.
    // Also where the log diverged below it (KIP-320): a failover cut
    // records the group read, and others may be at their offsets now.
    auto log = PartitionBounds(*dir_, consumer_->config(), f_.topic, p);
    if (!log) return log.error();
    auto diverged = CommittedDivergence(*dir_, f_.topic, p, *c);
    if (!diverged) return diverged.error();
    int64_t from = 0;
    const CommittedPosition where = PlaceCommitted(c->offset, *log, *diverged, &from);
    if (where == CommittedPosition::kBelowLogStart && !f_.quiet)
      cli::Warn(fmt::format("group {}: partition {}: committed offset {} is below the log start "
                            "{} (records lost to retention or truncation): starting at {}",
                            group_->name(), p, c->offset, from, from));
    if (where == CommittedPosition::kDiverged && !f_.quiet && c->leader_epoch >= 0)
      cli::Warn(fmt::format("group {}: partition {}: committed offset {} follows a record of "
                            "leader epoch {}, which ends at offset {} in the log (a failover cut "
                            "the records after it): starting at {}; the next commit lowers it",
                            group_->name(), p, c->offset, c->leader_epoch, **diverged, from));
    if (where == CommittedPosition::kDiverged && !f_.quiet && c->leader_epoch < 0)
      cli::Warn(fmt::format("group {}: partition {}: the log was truncated to offset {} after "
                            "offset {} was committed (its truncation history): starting at {}; "
                            "the next commit lowers it",
                            group_->name(), p, **diverged, c->offset, from));
    if (where == CommittedPosition::kAboveLogEnd && !f_.quiet)
      cli::Warn(fmt::format("group {}: partition {}: committed offset {} is past the log end {} "
                            "(the log was truncated): starting at the end; the next commit "
                            "lowers it",
                            group_->name(), p, c->offset, from));
    start = {StartPosition::Kind::kOffset, from};
    pr.committed = c->offset;
    if (from < c->offset) {
      pr.lower_from = c->offset;
      pr.committed = from;
    }
  } else {
    start = {f_.reset == "latest" ? StartPosition::Kind::kEnd : StartPosition::Kind::kBeginning, 0};
  }
  MQ_RETURN_IF_ERROR(consumer_->Assign(p, start));
  auto at = consumer_->position(p);
  // --to-topic: what an earlier owner appended decides which messages are
  // complete (format-spec/pipeline.md, E5).
  if (dispatcher_ && dispatcher_->sink()) {
    Status s = dispatcher_->sink()->Acquire(p, at.value_or(0));
    if (!s.ok()) {
      consumer_->Unassign(p);
      // kBusy: another process still holds the partition's producer id
      // (pipeline.md E1), as a previous owner's may for a moment after it
      // let the partition go. As when the previous owner still holds the
      // partition (group.md §14.6), the member holds nothing of it and
      // tries again at the next poll. Any other error stops the run, which
      // lets go of everything.
      Status released = member_->Release(p);
      if (s.code() != Code::kBusy) return s;
      MQ_RETURN_IF_ERROR(released);
      return false;
    }
  }
  if (f_.verbose) {
    if (c != nullptr)
      cli::Eprint("partition {}: resuming at offset {} (committed at {} ms by {})\n", p,
                  at.value_or(c->offset), c->commit_timestamp,
                  c->member_id.empty() ? "a reset" : c->member_id);
    else
      cli::Eprint("partition {}: no committed offset: starting at the {} ({})\n", p,
                  f_.reset == "latest" ? "end" : "beginning", at ? std::to_string(*at) : "-");
  }
  pr.handed = at.value_or(pr.committed);
  progress_[p] = pr;
  return true;
}

Status Member::Revoke(int32_t p) {
  if (dispatcher_ && dispatcher_->parallel()) {
    // Its handler may be running: it is waited for (as serially), so that
    // what it finished is committed below and never run again by the next
    // owner; its queued messages are dropped, unhandled, for the next owner.
    dispatcher_->Yield(p);
    Collect(0);
  } else if (dispatcher_) {
    // Handlers run one at a time on this thread: none runs now. A --batch
    // still collecting is dropped, unhandled: the next owner hands its
    // messages over again.
    MarkHandled();
    dispatcher_->Drop(p);
  } else {
    if (out_->Flush()) MarkFlushed();
    ReadAcks(false);
  }
  MQ_RETURN_IF_ERROR(Commit());
  MQ_RETURN_IF_ERROR(HandBack(p));
  consumer_->Unassign(p);
  progress_.erase(p);
  if (dispatcher_ && dispatcher_->sink()) dispatcher_->sink()->Release(p);
  MQ_RETURN_IF_ERROR(member_->Release(p));
  if (dispatcher_) dispatcher_->Forget(p);
  if (f_.verbose) cli::Eprint("partition {}: released\n", p);
  return Status::Ok();
}

Status Member::Stalled() const {
  return Status(Code::kBusy,
                fmt::format("group {}: standard output took nothing for {} ms "
                            "(--max-poll-interval {}): its reader stopped reading; giving up this "
                            "member's partitions without committing what was not written",
                            group_->name(), f_.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs),
                            f_.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs)));
}

Status Member::Rebalance() {
  auto view = member_->Poll();
  if (!view) return view.error();
  for (int32_t p : view->release) MQ_RETURN_IF_ERROR(Revoke(p));
  std::vector<int32_t> taken;
  for (int32_t p : view->acquire) {
    PauseBeforeAcquire();
    auto got = member_->TryAcquire(p);
    if (!got) return got.error();
    if (*got) taken.push_back(p);  // else the previous owner has not let go yet
  }
  if (!taken.empty()) {
    // Read once the partitions are held: each previous owner committed
    // before it let go, so this holds its last commit. A state read before
    // the locks can be older, and what an owner handed out since would be
    // handed out again.
    auto state = group_->Read();
    if (!state) return state.error();
    std::vector<int32_t> started;
    for (int32_t p : taken) {
      auto ok = Acquire(p, *state);
      if (!ok) return ok.error();
      if (*ok) started.push_back(p);
    }
    taken = std::move(started);
    // Serially a handler run costs far more than reading a batch: the
    // partitions taken are read next (in order), not after the rest of the
    // batch being handled and a batch of every other partition, so that a
    // dead member's partitions are handled again within a poll or so.
    if (dispatcher_ && !dispatcher_->parallel())
      for (auto it = taken.rbegin(); it != taken.rend(); ++it) consumer_->ReadNext(*it);
  }
  waiting_ = 0;
  for (int32_t p : view->target) waiting_ += member_->owns(p) ? 0 : 1;
  if (view->absent != last_absent_ && f_.verbose && !view->absent.empty())
    cli::Eprint("group {}: static member(s) {} not running: their partitions wait for them "
                "until their session ends\n",
                group_->name(), fmt::join(view->absent, ","));
  last_absent_ = view->absent;
  if (view->changed) {
    if (f_.verbose)
      cli::Eprint("group {}: members {}; this member ({}) is assigned partitions {}\n",
                  group_->name(), fmt::join(view->members, ","), member_->id(),
                  fmt::join(view->target, ","));
    if (view->target.empty() && !said_idle_ && !f_.quiet) {
      cli::Warn(fmt::format("group {}: {} members for {} partition(s) of {}: member {} is idle "
                            "until an owner leaves",
                            group_->name(), view->subscribers.size(), consumer_->config().partitions,
                            f_.topic, member_->id()));
    }
    said_idle_ = view->target.empty();
  }
  return Status::Ok();
}

void Member::MarkFlushed() {
  seen_flushes_ = out_->flushes();
  if (f_.ack_fd) return;  // only acknowledgements hand messages over
  for (auto& [p, pr] : progress_) HandOver(p, pr);
}

void Member::HandOver(int32_t p, Progress& pr) {
  auto pos = consumer_->position(p);
  if (pos && *pos > pr.handed) {
    pr.handed = *pos;
    pr.epoch = last_epoch_[p];
  }
}

void Member::Collect(int timeout_ms) {
  for (const Dispatcher::Done& d : dispatcher_->TakeDone(timeout_ms)) {
    if (!d.status.ok() && stop_.ok()) stop_ = d.status;
    auto it = progress_.find(d.partition);
    if (!d.handled || it == progress_.end()) continue;
    Progress& pr = it->second;
    since_commit_ += d.messages;
    if (d.next_offset > pr.handed) {
      pr.handed = d.next_offset;
      pr.epoch = d.leader_epoch;
    }
    pr.dead_letters += d.dead_letters;
  }
}

void Member::MarkHandled(std::optional<int32_t> only) {
  if (!dispatcher_) return;
  const bool healthy = dispatcher_->healthy();
  // --parallel reports each unit that ended (Collect).
  if (!healthy && dispatcher_->parallel()) return;
  for (auto& [p, pr] : progress_) {
    if (only && p != *only) continue;
    if (healthy) {
      if (dispatcher_->has_pending(p)) continue;
      pr.dead_letters += dispatcher_->TakeDeadLetters(p);
      HandOver(p, pr);
      continue;
    }
    // Serially, once a run stopped: up to the last unit handled, which
    // every earlier message was, and nothing past it.
    auto h = dispatcher_->handled_through(p);
    if (h && h->end > pr.handed) {
      pr.handed = h->end;
      pr.epoch = h->leader_epoch;
    }
    pr.dead_letters += dispatcher_->TakeDeadLetters(p);
  }
}

// Every message handed out was acknowledged.
bool Member::AllAcknowledged() const {
  for (const auto& [p, pr] : progress_) {
    auto last = consumer_->last_handed_out(p);
    if (last && pr.handed <= *last) return false;
  }
  return true;
}

// Acknowledgements on --ack-fd: lines "PARTITION OFFSET" or the message id
// "TOPIC/PARTITION/OFFSET"; each hands over its offset and every earlier
// one of its partition (cumulative, like a Kafka commit).
void Member::ReadAcks(bool until_eof) {
  if (!f_.ack_fd || ack_eof_) return;
  const int fd = *f_.ack_fd;
  char buf[4096];
  for (;;) {
    if (until_eof && AllAcknowledged()) return;
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, until_eof ? kAckWaitMs : 0);
    if (ready == 0) {
      if (until_eof && !f_.quiet)
        cli::Warn(fmt::format("--ack-fd: no acknowledgement for {} s: committing what was "
                              "acknowledged",
                              kAckWaitMs / 1000));
      return;
    }
    if (ready < 0) {
      if (errno == EINTR && !until_eof) continue;
      return;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      if (until_eof) return;  // a signal ends the wait
      continue;
    }
    if (n <= 0) {
      ack_eof_ = true;
      return;
    }
    ack_buf_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = ack_buf_.find('\n')) != std::string::npos) {
      std::string line = ack_buf_.substr(0, nl);
      ack_buf_.erase(0, nl + 1);
      std::string_view v = line;
      if (auto slash = v.rfind('/'); slash != std::string_view::npos) {
        auto first = v.find('/');
        if (first == slash || v.substr(0, first) != f_.topic) {
          if (!f_.quiet) cli::Warn(fmt::format("--ack-fd: ignored '{}': not a message of {}", line, f_.topic));
          continue;
        }
        line = std::string(v.substr(first + 1, slash - first - 1)) + " " + std::string(v.substr(slash + 1));
      }
      int32_t p = -1;
      int64_t o = -1;
      auto sp = line.find(' ');
      bool ok = sp != std::string::npos &&
                std::from_chars(line.data(), line.data() + sp, p).ec == std::errc() &&
                std::from_chars(line.data() + sp + 1, line.data() + line.size(), o).ec == std::errc();
      auto it = progress_.find(p);
      if (!ok || it == progress_.end()) {
        if (!f_.quiet)
          cli::Warn(fmt::format("--ack-fd: ignored '{}': expected PARTITION OFFSET of a partition "
                                "this member owns",
                                line));
        continue;
      }
      auto last = consumer_->last_handed_out(p);
      if (!last || o > *last) {
        if (!f_.quiet)
          cli::Warn(fmt::format("--ack-fd: ignored '{}': offset {} of partition {} was not handed "
                                "out",
                                line, o, p));
        continue;
      }
      if (o + 1 > it->second.handed) it->second.handed = o + 1;
    }
  }
}

Status Member::Commit() {
  std::vector<OffsetCommit> commits;
  if (f_.at_most_once) {
    // Offsets were committed ahead of the output already; only dead
    // letters are left to count.
    for (auto& [p, pr] : progress_)
      if ((pr.dead_letters > 0 || pr.lower_from >= 0) && pr.committed >= 0)
        commits.push_back({f_.topic, p, pr.committed, pr.ahead_epoch, pr.dead_letters,
                           pr.lower_from});
  } else {
    for (auto& [p, pr] : progress_)
      if ((pr.handed > pr.committed || pr.dead_letters > 0 || pr.lower_from >= 0) &&
          pr.handed >= 0)
        commits.push_back({f_.topic, p, std::max(pr.handed, pr.committed), pr.epoch,
                           pr.dead_letters, pr.lower_from});
  }
  if (!commits.empty()) {
    MQ_RETURN_IF_ERROR(group_->Commit(commits, member_->id()));
    for (const OffsetCommit& c : commits) {
      Progress& pr = progress_[c.partition];
      if (pr.lower_from >= 0 && f_.verbose)
        cli::Eprint("partition {}: committed offset lowered from {} to {}\n", c.partition,
                    pr.lower_from, c.offset);
      pr.committed = c.offset;
      pr.dead_letters = 0;
      pr.lower_from = -1;
    }
  }
  last_commit_ms_ = MonotonicMs();
  since_commit_ = 0;
  return Status::Ok();
}

// At-most-once: the offsets were committed ahead of the handlers, so no
// rerun comes back to a dead-lettered message to find it in the dead-letter
// topic and count it (as at-least-once does): a dead letter not counted by
// the time the member dies is never counted. So its count is committed as
// soon as the member knows of it, not at the next --commit-interval; only a
// member killed between the append and this commit leaves it uncounted
// (mq-consume(1), With a consumer group).
Status Member::CommitDeadLetters() {
  if (!f_.at_most_once) return Status::Ok();
  for (const auto& [p, pr] : progress_)
    if (pr.dead_letters > 0) return Commit();
  return Status::Ok();
}

// At-most-once: before a batch's first message is printed, its partition's
// offset is committed past the whole batch.
Status Member::CommitAhead(const ConsumedRecord& m) {
  Progress& pr = progress_[m.partition];
  if (m.record.offset < pr.ahead) return Status::Ok();
  const int64_t next = m.batch_last_offset + 1;
  const std::vector<OffsetCommit> commit{
      {f_.topic, m.partition, next, m.leader_epoch, 0, pr.lower_from}};
  MQ_RETURN_IF_ERROR(group_->Commit(commit, member_->id()));
  pr.ahead = next;
  pr.ahead_epoch = m.leader_epoch;
  pr.committed = next;
  pr.lower_from = -1;
  return Status::Ok();
}

Status Member::HandBack(std::optional<int32_t> only) {
  if (!f_.at_most_once) return Status::Ok();
  std::vector<OffsetCommit> commits;
  for (const auto& [p, pr] : progress_) {
    if ((only && p != *only) || pr.ahead < 0) continue;
    // Printed, or its handler started: every message below the first one
    // given to a handler that never started (--batch, --parallel's queue, a
    // stop), or else below the consumer's position.
    std::optional<int64_t> from = dispatcher_ ? dispatcher_->first_unstarted(p) : std::nullopt;
    int32_t epoch = kNoLeaderEpoch;
    if (!dispatcher_ && out_->stalled()) {
      // What the output dropped was never handed out: only what was written.
      from = pr.handed;
      epoch = pr.epoch;
    }
    if (!from) {
      from = consumer_->position(p);
      epoch = last_epoch_[static_cast<size_t>(p)];
    }
    if (!from) continue;
    if (auto c = HandBackCommit(f_.topic, p, pr.committed, *from, epoch))
      commits.push_back(std::move(*c));
  }
  if (commits.empty()) return Status::Ok();
  MQ_RETURN_IF_ERROR(group_->Commit(commits, member_->id()));
  for (const OffsetCommit& c : commits) {
    Progress& pr = progress_[c.partition];
    if (f_.verbose)
      cli::Eprint("partition {}: handed back offsets {} to {} (committed ahead, not handed "
                  "out)\n",
                  c.partition, c.offset, pr.committed - 1);
    pr.committed = c.offset;
    pr.ahead = c.offset;
    pr.ahead_epoch = c.leader_epoch;
  }
  return Status::Ok();
}

Status Member::Run(const volatile std::sig_atomic_t* interrupted) {
  if (f_.count && *f_.count == 0) return Status::Ok();
  const bool need_headers = printer_.needs_headers() || !settings_.header_filters.empty();
  std::vector<Header> headers;
  last_commit_ms_ = MonotonicMs();
  last_epoch_.assign(static_cast<size_t>(consumer_->config().partitions), -1);
  // Membership, acknowledgements and commits are looked at every
  // kTickRecords records and whenever the member waits.
  // With --exec, every record: a handler run costs far more than a look.
  const uint32_t kTickRecords = dispatcher_ ? 1 : 256;
  uint32_t ticks = 0;
  while (!*interrupted) {
    if (ticks == 0) {
      ticks = kTickRecords;
      int64_t now = MonotonicMs();
      if (now >= next_poll_ms_) {
        MQ_RETURN_IF_ERROR(Rebalance());
        next_poll_ms_ = now + kRebalancePollMs;
      }
      ReadAcks(false);
      if ((f_.commit_every > 0 && since_commit_ >= f_.commit_every) ||
          now - last_commit_ms_ >= f_.commit_interval_ms) {
        if (!dispatcher_ && out_->Flush()) MarkFlushed();
        MQ_RETURN_IF_ERROR(Commit());
      }
      if (out_->stalled()) return Stalled();
    }
    --ticks;
    auto next = consumer_->Next();
    if (!next) return next.error();
    if (const ConsumedRecord* m = *next) {
      if (f_.at_most_once) MQ_RETURN_IF_ERROR(CommitAhead(*m));
      last_epoch_[static_cast<size_t>(m->partition)] = m->leader_epoch;
      if (need_headers) headers = m->record.headers();
      if (!settings_.header_filters.empty() && !MatchesAll(headers, settings_.header_filters))
        continue;
      if (dispatcher_) {
        const int32_t p = m->partition;
        MQ_RETURN_IF_ERROR(
            dispatcher_->Add(p, m->log_append_time, m->record, headers, m->leader_epoch));
        if (dispatcher_->parallel()) {
          Collect(0);
          if (!stop_.ok()) return stop_;
        } else {
          MarkHandled(p);
        }
        MQ_RETURN_IF_ERROR(CommitDeadLetters());
      } else {
        printer_.Print(m->partition, m->log_append_time, m->record, headers);
        if (out_->flushes() != seen_flushes_) MarkFlushed();
        if (out_->stalled()) return Stalled();
      }
      // --parallel counts messages toward --commit-every as they are
      // handled (Collect), not as they are queued.
      if (!dispatcher_ || !dispatcher_->parallel()) ++since_commit_;
      if (++delivered_ == f_.count || out_->broken()) return Status::Ok();
      continue;
    }
    // --parallel: handlers still run (or --batch messages wait): their
    // partitions are committed as they finish, by the interval and count
    // of the check above, not at every one that ends.
    const bool draining = dispatcher_ && dispatcher_->parallel() && dispatcher_->busy();
    // -e: every partition this member is assigned (none, for an idle
    // member) is owned and read to the end it had when it was taken (and
    // with --parallel, handled).
    if (f_.exit_at_end && consumer_->finished() && waiting_ == 0 && !draining)
      return Status::Ok();
    // Every owned partition is at its committed end: hand over what is
    // buffered, commit, then wait for appends or the next membership probe.
    if (dispatcher_) {
      MQ_RETURN_IF_ERROR(dispatcher_->Flush());
      if (dispatcher_->parallel()) {
        Collect(0);
        if (!stop_.ok()) return stop_;
      }
      MarkHandled();
    } else if (out_->Flush()) {
      MarkFlushed();
    } else if (out_->broken()) {
      return Status::Ok();
    } else if (out_->stalled()) {
      return Stalled();
    }
    if (!draining) MQ_RETURN_IF_ERROR(Commit());
    // A reader of our standard output that went away is seen here, not at
    // a next write that may never come (as plain follow mode): the member
    // stops and lets its partitions go.
    if (cli::OutputClosed()) return Status::Ok();
    const int wait = static_cast<int>(std::clamp<int64_t>(next_poll_ms_ - MonotonicMs(), 1, kRebalancePollMs));
    if (dispatcher_ && dispatcher_->parallel() && dispatcher_->busy()) {
      // Handlers run: the next one to end (or the next probe) comes first;
      // appends are seen on the way round.
      Collect(wait);
      if (!stop_.ok()) return stop_;
      MQ_RETURN_IF_ERROR(CommitDeadLetters());
    } else {
      consumer_->WaitForAppend(wait);
    }
    ticks = 0;
  }
  return Status::Ok();
}

Status Member::Finish(bool completed) {
  if (dispatcher_) {
    Status flushed;
    if (dispatcher_->parallel()) {
      // Completed: every message handed out is handled first. Otherwise
      // nothing new starts, and the runs under way end (killed on an
      // interrupt); what they handled is committed.
      if (completed && dispatcher_->healthy()) flushed = dispatcher_->Drain();
      else dispatcher_->Stop();
      Collect(0);
      if (flushed.ok()) flushed = stop_;
    } else if (completed && dispatcher_->healthy()) {
      flushed = dispatcher_->Flush();
    }
    MarkHandled();
    Status committed = Commit();
    if (committed.ok()) committed = HandBack();
    return flushed.ok() ? committed : flushed;
  }
  if (out_->Flush()) MarkFlushed();
  if (f_.ack_fd) {
    // The downstream acknowledges what it processed; once our output is
    // closed it sees the end (unless another process holds the pipe),
    // finishes, and closes its side.
    out_->Close();
    ReadAcks(true);
  }
  MQ_RETURN_IF_ERROR(Commit());
  return HandBack();
}

}  // namespace

int RunGroup(const Flags& f, Settings settings, const volatile std::sig_atomic_t* interrupted) {
  auto dir = DataDir::Open(f.dir, false);
  if (!dir) return cli::Fail(dir.error());
  ConsumerOptions options;
  options.limits = {f.max_batch_bytes, f.max_batch_bytes};
  options.stop_at_end = f.exit_at_end;
  options.skip_corrupt = false;
  // Readers (and a pipeline's output writers: a reader and a writer per
  // share) share what the open-file limit leaves once a pipeline's producer
  // locks of every source partition (the most this member can own), the
  // handler runs that may go at once and the dead-letter writers are
  // counted out.
  size_t reserved = 0;
  if (settings.pipeline) {
    if (auto in = dir->ReadTopic(f.topic); in)
      reserved += kLocksPerSourcePartition * static_cast<size_t>(in->partitions);
  }
  if (settings.handler) reserved += ReservedDescriptors(*settings.handler);
  const size_t shares = cli::OpenPartitionBudget(
      settings.pipeline ? kDescriptorsPerReader + kDescriptorsPerWriter : kDescriptorsPerReader,
      reserved);
  options.max_open = shares;
  auto consumer = Consumer::Open(*dir, f.topic, std::move(options));
  if (!consumer) return cli::Fail(consumer.error());
  auto group = Group::Open(dir->path(), *f.group, true);
  if (!group) return cli::Fail(group.error());
  // The group must be readable before anything is consumed: a corrupt
  // offsets file stops here (R29, R30), never resets to earliest/latest.
  if (auto state = group->Read(); !state) return cli::Fail(state.error());
  const std::string id = f.member_id ? *f.member_id : DefaultMemberId();
  auto member = GroupMember::Join(&*group, id, f.topic, (*consumer)->config().partitions);
  if (!member) return cli::Fail(member.error());
  if (f.session_timeout_ms)
    if (Status s = member->KeepSession(*f.session_timeout_ms); !s.ok()) return cli::Fail(s);

  std::optional<Pipeline> pipeline;
  if (settings.pipeline) {
    settings.pipeline->max_open = PipelineWriterBudget(shares, (*consumer)->config().partitions);
    pipeline.emplace(std::move(*settings.pipeline), *dir, (*consumer)->config());
    if (Status s = pipeline->Open(); !s.ok()) return cli::Fail(s);
    settings.handler->sink = &*pipeline;
  }
  std::optional<Dispatcher> dispatcher;
  if (settings.handler) {
    // A handler holds a lock of its partition too: the partition is free
    // only once the member and every handler of it are gone.
    GroupMember* owner = &*member;
    settings.handler->handler_lock = [owner](int32_t p) { return owner->LockForHandler(p); };
    dispatcher.emplace(std::move(*settings.handler), f.topic, interrupted);
    if (Status s = dispatcher->Open(*dir, (*consumer)->config()); !s.ok()) return cli::Fail(s);
  }

  cli::Output out(1, 1 << 20);
  // Printing, a write its reader does not take holds up the member's polls
  // as a handler run does: the same bound (Kafka's max.poll.interval.ms).
  if (!dispatcher) out.set_write_timeout(f.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs));
  Member m(f, settings, &*dir, consumer->get(), &*group, &*member, &out,
           dispatcher ? &*dispatcher : nullptr);
  Status s = m.Run(interrupted);
  Status fin = m.Finish(s.ok());
  if (s.ok()) s = fin;
  if (dispatcher) {
    Status closed = dispatcher->Close();
    if (s.ok()) s = closed;
  }
  if (pipeline) {
    Status closed = pipeline->Close();
    if (s.ok()) s = closed;
  }
  int rc = out.FinishExitCode();
  member->Leave();
  if (f.verbose && pipeline)
    cli::Eprint("Processed a total of {} messages ({} outputs appended to {}, {} dead-lettered, "
                "{} retries)\n",
                dispatcher->handled(), pipeline->appended(), *f.to_topic,
                dispatcher->dead_lettered(), dispatcher->retries());
  else if (f.verbose && dispatcher)
    cli::Eprint("Processed a total of {} messages ({} dead-lettered, {} retries)\n",
                dispatcher->handled(), dispatcher->dead_lettered(), dispatcher->retries());
  else if (f.verbose)
    cli::Eprint("Processed a total of {} messages\n", out.records_written());
  if (!s.ok() && dispatcher && dispatcher->exit_code() != 0) {
    cli::Warn(fmt::format("group {}: {}", group->name(), s.message()));
    return dispatcher->exit_code();
  }
  if (!s.ok()) return cli::Fail(s);
  return rc;
}

}  // namespace mq::consume
