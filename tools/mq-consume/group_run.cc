#include "group_run.h"

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dispatcher.h"
#include "mq/assignment.h"
#include "mq/consumer.h"
#include "mq/group.h"
#include "mq/group_member.h"
#include "mq/group_status.h"
#include "mq/topic_admin.h"
#include "pipeline.h"

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

// The topics of the directory the member's -t arguments match (R64). A
// pattern never matches the member's own --dlq or --to-topic topic (named
// outright, they are refused: options.cc): it would read what it writes.
Result<std::vector<std::string>> MatchSubscription(const Flags& f, const DataDir& dir) {
  auto existing = dir.ListTopics();
  if (!existing) return existing.error();
  std::erase_if(*existing, [&](const std::string& t) {
    return (f.dlq && f.exec_given && t == *f.dlq) || (f.to_topic && t == *f.to_topic);
  });
  return MatchTopics(f.topics, *existing);
}

// Per owned partition: how far messages were handed over, and committed.
struct Progress {
  int64_t committed = -1;  // the group's committed offset (-1: none)
  int64_t handed = -1;     // position whose messages all reached stdout (or were
                           // acknowledged, or with --exec: were handled)
  int32_t epoch = -1;      // leader epoch of the batch holding handed - 1
  int64_t ahead = -1;      // at-most-once: offset committed ahead of output
  int32_t ahead_epoch = -1;
  int64_t dead_letters = 0;  // dead letters below `handed`, not committed yet
  // The committed offset was past the log end (a truncation): this is it,
  // and `committed` is the log end until the next commit lowers it there
  // or beyond (R31's exception). -1: nothing to lower.
  int64_t lower_from = -1;
  // With --exec: cuts of the log applied (OnCuts), which the handler
  // units given since carry (Dispatcher::Add); and the lowest cut since
  // the oldest unit that may still end (-1: none). A unit given before a
  // cut holds messages cut from the log: it hands over nothing past the
  // cut, where the messages read since are other records (R59).
  uint32_t generation = 0;
  int64_t stale_cut = -1;
};

// How far a handler unit given at `generation` that ended handled up to
// `end` hands over partition `pr`'s messages.
int64_t UnitHandOver(const Progress& pr, uint32_t generation, int64_t end) {
  if (generation == pr.generation || pr.stale_cut < 0) return end;
  return std::min(end, pr.stale_cut);
}

// One topic the member reads: its consumer and its owned partitions.
struct Source {
  std::string topic;
  int32_t number = 0;  // with --exec: the topic's number in the dispatcher's lanes (LaneOf)
  std::unique_ptr<Consumer> consumer;
  std::map<int32_t, Progress> progress;
  std::vector<int32_t> last_epoch;  // by partition: leader epoch of the last record handed out
};

// The open-file budget of a member's readers (and a pipeline's output
// writers: a reader and a writer per share): what the open-file limit
// leaves once a pipeline's producer locks of every source partition (the
// most this member can own), the handler runs that may go at once and the
// dead-letter writers are counted out.
struct ReaderBudget {
  size_t per_share = kDescriptorsPerReader;
  size_t reserved = 0;    // handler runs and dead-letter writers
  bool pipeline = false;  // a producer lock per source partition more
  // What the readers and the producer locks may hold, measured at the first
  // Share (later, the descriptors in use include the readers' own).
  size_t descriptors = 0;

  // A pipeline's output writers (a share holds a writer too): their limit
  // follows the shares (PipelineWriterBudget) once the pipeline is open.
  Pipeline* writers = nullptr;

  // The shares for `sources` (with `more_partitions` of a topic about to
  // be added), without changing anything.
  size_t Count(const std::vector<std::unique_ptr<Source>>& sources, int32_t more_partitions = 0) {
    size_t locks = 0;
    if (pipeline) {
      for (const auto& s : sources)
        locks += kLocksPerSourcePartition * static_cast<size_t>(s->consumer->config().partitions);
      locks += kLocksPerSourcePartition * static_cast<size_t>(more_partitions);
    }
    if (descriptors == 0) {
      const size_t shares = cli::OpenPartitionBudget(per_share, reserved + locks);
      descriptors = shares * per_share + locks;
      return shares;
    }
    return descriptors > locks + per_share ? (descriptors - locks) / per_share : 1;
  }
  // Whether a topic of `partitions` more has room for its reader: each
  // topic read keeps one at least, so a member reads at most as many
  // topics as it has shares.
  bool Room(const std::vector<std::unique_ptr<Source>>& sources, int32_t partitions) {
    return Count(sources, partitions) >= sources.size() + 1;
  }
  // The shares for `sources`; the topics read share them (one reader each
  // at least, Room): each consumer's max_open is set to its share, and a
  // pipeline's writer limit to what the shares leave, lowered as a
  // pattern adds topics, so that the total stays within the budget.
  size_t Share(const std::vector<std::unique_ptr<Source>>& sources) {
    const size_t shares = Count(sources);
    int32_t partitions = 0;
    for (const auto& s : sources) {
      s->consumer->set_max_open(std::max<size_t>(1, shares / sources.size()));
      partitions = static_cast<int32_t>(
          std::min<int64_t>(INT32_MAX, int64_t{partitions} + s->consumer->config().partitions));
    }
    if (writers != nullptr) writers->set_max_open(PipelineWriterBudget(shares, partitions));
    return shares;
  }
};

class Member {
 public:
  // `sources`: the topics read so far (with a pattern, more are added as
  // they appear, Resubscribe). `subscribe_mu`: held while the member's
  // subscription changes (handler threads take handler locks meanwhile).
  Member(const Flags& f, Settings& settings, const DataDir* dir,
         std::vector<std::unique_ptr<Source>> sources, ConsumerOptions options, Group* group,
         GroupMember* member, cli::Output* out, Dispatcher* dispatcher,
         std::vector<std::pair<std::string, int32_t>>* stopped, std::mutex* subscribe_mu,
         ReaderBudget budget, std::vector<std::pair<std::string, ConsumerNotice>>* cuts)
      : stopped_(stopped),
        subscribe_mu_(subscribe_mu),
        budget_(budget),
        cuts_(cuts),
        f_(f),
        settings_(settings),
        dir_(dir),
        sources_(std::move(sources)),
        options_(std::move(options)),
        several_(ReadsSeveralTopics(f)),
        group_(group),
        member_(member),
        out_(out),
        dispatcher_(dispatcher),
        printer_(std::move(settings.print), out) {
    for (auto& s : sources_)
      s->last_epoch.assign(static_cast<size_t>(s->consumer->config().partitions), -1);
    // At most once, printing: the offsets of what is in the output buffer
    // are committed before the buffer is written (CommitPrinted).
    if (f_.at_most_once && !dispatcher_)
      out_->set_before_write([this] {
        if (write_error_.ok()) write_error_ = CommitPrinted();
        return write_error_.ok();
      });
  }
  ~Member() {
    if (f_.at_most_once && !dispatcher_) out_->set_before_write({});
  }

  Status Run(const volatile std::sig_atomic_t* interrupted);
  // Hands over and commits what the run left (always called, also after
  // an error or a signal; `completed`: the run ended without either, so
  // pending --batch messages are handed over first).
  Status Finish(bool completed);
  uint64_t delivered() const { return delivered_; }

 private:
  // Partitions a corrupt batch stopped since the last look (the consumer's
  // notices): what was handed out below it is committed at once, and at
  // most once, what was committed ahead of it is handed back, so that the
  // committed offset is where the partition stopped (--describe says so).
  Status OnStopped();
  std::vector<std::pair<std::string, int32_t>>* stopped_;  // (topic, partition)
  std::mutex* subscribe_mu_;
  ReaderBudget budget_;
  std::set<std::string> over_budget_;  // topics matched but left out (Room), warned once
  // Records handed out were cut from a partition's log since the last look
  // (kTruncated notices): what was handed over and committed ahead goes
  // down to the cut, and a committed offset above it is lowered by the
  // next commit (LowerToCut).
  void OnCuts();
  std::vector<std::pair<std::string, ConsumerNotice>>* cuts_;  // (topic, notice)

  Status Rebalance();
  // Rebalance: the partitions `view` assigns and this member does not own
  // are taken (those whose previous owner let go) and read from their
  // committed offsets.
  Status TakePartitions(const MembershipView& view);
  // Rebalance: the stuck members the poll fenced (R69) are said.
  void SayFenced(const MembershipView& view);
  // What each record does in Run depends on these alone, fixed for the run.
  struct RunMode {
    bool filtered = false;      // --header filters
    bool need_headers = false;  // the printer or a filter reads the headers
    bool commit_ahead = false;  // --at-most-once --exec: committed before it is handed out
    bool count_each = false;    // counted toward --commit-every as handed out
    uint64_t count = 0;         // -c (0: none)
  };
  // Run's look every so many records and whenever it waits: membership,
  // acknowledgements, commits (by --commit-every and the interval), a
  // stalled output.
  Status Tick();
  // Run's record `m` of `src`, handed to the handler or printed
  // (`headers`: its headers when needed); true when the run ends with it
  // (-c reached, the output gone).
  Result<bool> Deliver(Source& src, const ConsumedRecord& m, const RunMode& mode,
                       std::vector<Header>& headers);
  // Run when every owned partition is at its end: what is buffered is
  // handed over and committed, then a wait for appends or the next probe;
  // true when the run ends (-e, the output gone).
  Result<bool> AtEnd();
  // With several topics (R64): those removed from the directory leave the
  // member's subscription, and the topics the -t arguments match now that
  // are not read (a pattern's new matches, a named topic created again)
  // are opened and added to it.
  Status Resubscribe();
  // A member of one topic: kNotFound, naming the group, once it was deleted.
  Status StopIfTopicDeleted();
  // Resubscribe: a topic removed from the directory leaves the
  // subscription; true when one did.
  Result<bool> DropRemovedTopics();
  Source* FindSource(std::string_view topic);
  // --exec: partition p of `s` as the dispatcher names it.
  static int32_t Lane(const Source& s, int32_t p) { return LaneOf(s.number, p); }
  // "P", or "TOPIC-P" for a member of several topics, in messages.
  std::string Name(const Source& s, int32_t p) const {
    return several_ ? fmt::format("{}-{}", s.topic, p) : std::to_string(p);
  }
  // Starts reading partition p, just taken (its ownership lock held), from
  // its committed offset in `state`, read after it was taken; false when
  // it let p go again, to be taken at a later poll.
  Result<bool> Acquire(Source& s, int32_t p, const GroupOffsets& state);
  // Acquire's start for partition p of `s` with committed offset `c`: the
  // committed offset moved into the log (what is moved is said), with
  // `pr`'s committed offset (and lower_from when lowered).
  Result<StartPosition> ResumeAt(Source& s, int32_t p, const CommittedOffset& c, Progress* pr);
  Status Revoke(Source& s, int32_t p);
  // Everything printed reached stdout: each partition's position is handed over.
  void MarkFlushed();
  // --exec: a partition (`only`, or each) with no message waiting for its
  // handler has had every message handed out handled: its position is
  // handed over, with the dead letters below it. Once a run stopped (a
  // poison message, a stuck handler, an interrupt) only what was handled
  // moves, serially up to the last unit handled (handled_through; a
  // handler that exited 0 after the interrupt's SIGTERM counts): a
  // message whose handler did not finish is never handed over.
  void MarkHandled(const Source* only_src = nullptr, std::optional<int32_t> only = std::nullopt);
  // Partition `p`'s position is handed over, with the epoch of its last record.
  void HandOver(Source& s, int32_t p, Progress& pr);
  // --parallel: takes the handler runs that ended (waiting up to
  // `timeout_ms` for one): each handled unit hands its partition over up
  // to its last message; the first that stopped the run is kept in stop_.
  void Collect(int timeout_ms);
  Status Commit();
  // Printing: the output was stalled (its reader took nothing for
  // --max-poll-interval): the member gives up (exit 75).
  Status Stalled() const;
  Status CommitAhead(Source& s, const ConsumedRecord& m);
  // --at-most-once, printing: commits each partition's position (every
  // message below it is in the output buffer or was written) before the
  // output buffer is written, in one commit. Called by the output (its
  // before_write gate); an error, kept in write_error_, drops the buffer
  // unwritten and stops the run.
  Status CommitPrinted();
  // --at-most-once, letting go of partition `only` of `src` (or of each)
  // without a crash: what was committed ahead of the output and not handed
  // out is handed back to the next owner (HandBackCommit), in one commit.
  Status HandBack(const Source* src = nullptr, std::optional<int32_t> only = std::nullopt);
  // The next record of any topic (round-robin over the topics), or nullptr
  // when every one is at its end; `from` says whose.
  Result<const ConsumedRecord*> Next(Source** from);
  // Waits for an append to any topic, up to `timeout_ms`.
  void WaitForAppend(int timeout_ms);
  bool Finished() const;
  // --at-most-once: commits the dead letters counted since the last commit
  // at once (see the definition).
  Status CommitDeadLetters();
  // With `until_eof`, waits until every message handed out is
  // acknowledged, the stream ends, or kAckWaitMs pass without one.
  void ReadAcks(bool until_eof);
  // One --ack-fd line: "PARTITION OFFSET" or "TOPIC/PARTITION/OFFSET" of a
  // message handed out hands its partition over past it; another is said
  // and ignored.
  void Acknowledge(std::string line);
  bool AllAcknowledged() const;

  const Flags& f_;
  Settings& settings_;
  const DataDir* dir_;
  std::vector<std::unique_ptr<Source>> sources_;  // sorted by topic
  ConsumerOptions options_;  // for the consumers of topics a pattern matches later
  const bool several_;       // -t repeated or a pattern
  size_t next_source_ = 0;   // Next(): the topic read first
  Group* group_;
  GroupMember* member_;
  cli::Output* out_;
  Dispatcher* dispatcher_;  // --exec; nullptr: messages are printed
  Printer printer_;
  uint64_t delivered_ = 0;
  uint64_t since_commit_ = 0;
  uint64_t seen_flushes_ = 0;
  int64_t last_commit_ms_ = 0;
  int64_t next_poll_ms_ = 0;
  bool said_idle_ = false;
  size_t waiting_ = 0;                    // assigned partitions their previous owner still holds
  std::vector<std::string> last_absent_;  // static members in their session, not running
  std::string ack_buf_;
  bool ack_eof_ = false;
  Status stop_;         // --parallel: why a handler run stopped the member
  Status write_error_;  // --at-most-once, printing: a commit before a write failed
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

Result<StartPosition> Member::ResumeAt(Source& src, int32_t p, const CommittedOffset& c,
                                       Progress* pr) {
  // Out of the log's range, the committed offset is said, and moved into
  // it: the consumer would wait for an offset past the end (-o N), so
  // after a truncation every message appended up to the old offset
  // would be passed over.
  // Also where the log diverged below it (KIP-320): a failover cut
  // records the group read, and others may be at their offsets now.
  auto log = PartitionBounds(*dir_, src.consumer->config(), src.topic, p);
  if (!log) return log.error();
  auto diverged = CommittedDivergence(*dir_, src.topic, p, c);
  if (!diverged) return diverged.error();
  int64_t from = 0;
  const CommittedPosition where = PlaceCommitted(c.offset, *log, *diverged, &from);
  if (where == CommittedPosition::kBelowLogStart && !f_.quiet)
    cli::Warn(
        fmt::format("group {}: partition {}: committed offset {} is below the log start "
                    "{} (records lost to retention or truncation): starting at {}",
                    group_->name(), Name(src, p), c.offset, from, from));
  if (where == CommittedPosition::kDiverged && !f_.quiet && c.leader_epoch >= 0)
    cli::Warn(
        fmt::format("group {}: partition {}: committed offset {} follows a record of "
                    "leader epoch {}, which ends at offset {} in the log (a failover cut "
                    "the records after it): starting at {}; the next commit lowers it",
                    group_->name(), Name(src, p), c.offset, c.leader_epoch, **diverged, from));
  if (where == CommittedPosition::kDiverged && !f_.quiet && c.leader_epoch < 0)
    cli::Warn(
        fmt::format("group {}: partition {}: the log was truncated to offset {} after "
                    "offset {} was committed (its truncation history): starting at {}; "
                    "the next commit lowers it",
                    group_->name(), Name(src, p), **diverged, c.offset, from));
  if (where == CommittedPosition::kAboveLogEnd && !f_.quiet)
    cli::Warn(
        fmt::format("group {}: partition {}: committed offset {} is past the log end {} "
                    "(the log was truncated): starting at the end; the next commit "
                    "lowers it",
                    group_->name(), Name(src, p), c.offset, from));
  pr->committed = c.offset;
  if (from < c.offset) {
    pr->lower_from = c.offset;
    pr->committed = from;
  }
  return StartPosition{StartPosition::Kind::kOffset, from};
}

Result<bool> Member::Acquire(Source& src, int32_t p, const GroupOffsets& state) {
  Consumer* consumer = src.consumer.get();
  StartPosition start;
  const CommittedOffset* c = state.Find(src.topic, p);
  Progress pr;
  if (c != nullptr) {
    auto resume = ResumeAt(src, p, *c, &pr);
    if (!resume) return resume.error();
    start = *resume;
  } else {
    start = {f_.reset == "latest" ? StartPosition::Kind::kEnd : StartPosition::Kind::kBeginning, 0};
  }
  MQ_RETURN_IF_ERROR(consumer->Assign(p, start));
  auto at = consumer->position(p);
  // --to-topic: what an earlier owner appended decides which messages are
  // complete (format-spec/pipeline.md, E5).
  if (dispatcher_ && dispatcher_->sink()) {
    Status s = dispatcher_->sink()->Acquire(Lane(src, p), at.value_or(0));
    if (!s.ok()) {
      consumer->Unassign(p);
      // kBusy: another process still holds the partition's producer id
      // (pipeline.md E1), as a previous owner's may for a moment after it
      // let the partition go. As when the previous owner still holds the
      // partition (group.md §14.6), the member holds nothing of it and
      // tries again at the next poll. Any other error stops the run, which
      // lets go of everything.
      Status released = member_->Release(src.topic, p);
      if (s.code() != Code::kBusy) return s;
      MQ_RETURN_IF_ERROR(released);
      return false;
    }
  }
  if (f_.verbose) {
    if (c != nullptr)
      cli::Eprint("partition {}: resuming at offset {} (committed at {} ms by {})\n", Name(src, p),
                  at.value_or(c->offset), c->commit_timestamp,
                  c->member_id.empty() ? "a reset" : c->member_id);
    else
      cli::Eprint("partition {}: no committed offset: starting at the {} ({})\n", Name(src, p),
                  f_.reset == "latest" ? "end" : "beginning", at ? std::to_string(*at) : "-");
  }
  pr.handed = at.value_or(pr.committed);
  src.progress[p] = pr;
  return true;
}

Status Member::Revoke(Source& src, int32_t p) {
  if (dispatcher_ && dispatcher_->parallel()) {
    // Its handler may be running: it is waited for (as serially), so that
    // what it finished is committed below and never run again by the next
    // owner; its queued messages are dropped, unhandled, for the next owner.
    dispatcher_->Yield(Lane(src, p));
    Collect(0);
  } else if (dispatcher_) {
    // Handlers run one at a time on this thread: none runs now. A --batch
    // still collecting is dropped, unhandled: the next owner hands its
    // messages over again.
    MarkHandled();
    dispatcher_->Drop(Lane(src, p));
  } else {
    if (out_->Flush()) MarkFlushed();
    if (!write_error_.ok()) return write_error_;
    ReadAcks(false);
  }
  MQ_RETURN_IF_ERROR(Commit());
  MQ_RETURN_IF_ERROR(HandBack(&src, p));
  src.consumer->Unassign(p);
  src.progress.erase(p);
  if (dispatcher_ && dispatcher_->sink()) dispatcher_->sink()->Release(Lane(src, p));
  MQ_RETURN_IF_ERROR(member_->Release(src.topic, p));
  if (dispatcher_) dispatcher_->Forget(Lane(src, p));
  if (f_.verbose) cli::Eprint("partition {}: released\n", Name(src, p));
  return Status::Ok();
}

Source* Member::FindSource(std::string_view topic) {
  for (auto& s : sources_)
    if (s->topic == topic) return s.get();
  return nullptr;
}

Result<bool> Member::DropRemovedTopics() {
  // A topic removed from the directory leaves the subscription: its owned
  // partitions are let go (committed first, as at any revoke) and the
  // other members' polls no longer count this member among its readers.
  auto existing = dir_->ListTopics();
  if (!existing) return existing.error();
  bool removed = false;
  for (size_t i = 0; i < sources_.size();) {
    Source& src = *sources_[i];
    if (std::binary_search(existing->begin(), existing->end(), src.topic)) {
      ++i;
      continue;
    }
    std::vector<int32_t> owned;
    for (const auto& [p, pr] : src.progress) owned.push_back(p);
    for (int32_t p : owned) MQ_RETURN_IF_ERROR(Revoke(src, p));
    {
      std::lock_guard<std::mutex> lk(*subscribe_mu_);
      MQ_RETURN_IF_ERROR(member_->Unsubscribe(src.topic));
    }
    if (!f_.quiet)
      cli::Warn(
          fmt::format("group {}: topic {} was deleted (or removed): no longer read by "
                      "this member; its other topics are",
                      group_->name(), src.topic));
    sources_.erase(sources_.begin() + static_cast<std::ptrdiff_t>(i));
    next_source_ = 0;
    removed = true;
  }
  return removed;
}

Status Member::StopIfTopicDeleted() {
  // R83: the one topic this member reads was deleted (mq-topic delete): it
  // stops, as a follower does (exit 66), instead of waiting for appends
  // that cannot come.
  if (sources_.empty()) return Status::Ok();
  Status gone = CheckTopicExists(*dir_, sources_.front()->topic);
  if (gone.ok()) return gone;
  return Status(gone.code(), fmt::format("group {}: {}; this member stops reading it",
                                         group_->name(), gone.message()));
}

Status Member::Resubscribe() {
  if (!several_) return StopIfTopicDeleted();
  auto removed = DropRemovedTopics();
  if (!removed) return removed.error();
  // A named topic removed is read again once it exists again, as a
  // pattern's new match is.
  auto topics = MatchSubscription(f_, *dir_);
  if (!topics) return topics.error();
  std::vector<TopicPartitions> added;
  for (const std::string& t : *topics) {
    if (FindSource(t) != nullptr) continue;
    auto consumer = Consumer::Open(*dir_, t, options_);
    // Listed, but its configuration is not readable (yet): a later poll
    // tries again.
    if (!consumer && consumer.error().code() == Code::kNotFound) continue;
    if (!consumer) return consumer.error();
    // No room for one more reader: the topic is left out of this member's
    // subscription (its note), for the members that have room; a later
    // poll tries again (a topic removed makes room).
    if (!budget_.Room(sources_, (*consumer)->config().partitions)) {
      if (over_budget_.insert(t).second && !f_.quiet)
        cli::Warn(
            fmt::format("group {}: topic {} matches, but the open-file limit leaves this "
                        "member room for {} readers, one a topic, and it reads {} topics: "
                        "not read by this member (other members may read it; raise "
                        "ulimit -n)",
                        group_->name(), t, budget_.Count(sources_), sources_.size()));
      continue;
    }
    over_budget_.erase(t);
    auto src = std::make_unique<Source>();
    src->topic = t;
    src->consumer = std::move(*consumer);
    src->last_epoch.assign(static_cast<size_t>(src->consumer->config().partitions), -1);
    if (dispatcher_) {
      auto number = dispatcher_->AddTopic(t);
      if (!number) return number.error();
      src->number = *number;
    }
    added.push_back({t, src->consumer->config().partitions});
    if (f_.verbose)
      cli::Eprint("group {}: topic {} matches, read from now on\n", group_->name(), t);
    sources_.push_back(std::move(src));
  }
  if (added.empty()) {
    if (*removed) budget_.Share(sources_);
    return Status::Ok();
  }
  std::sort(sources_.begin(), sources_.end(),
            [](const auto& a, const auto& b) { return a->topic < b->topic; });
  budget_.Share(sources_);
  std::lock_guard<std::mutex> lk(*subscribe_mu_);
  return member_->Subscribe(added);
}

Status Member::Stalled() const {
  return Status(
      Code::kBusy,
      fmt::format("group {}: standard output took nothing for {} ms "
                  "(--max-poll-interval {}): its reader stopped reading; giving up this "
                  "member's partitions without committing what was not written",
                  group_->name(), f_.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs),
                  f_.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs)));
}

Status Member::TakePartitions(const MembershipView& view) {
  std::vector<std::pair<Source*, int32_t>> taken;
  for (const MembershipView::Topic& t : view.topics) {
    Source* src = FindSource(t.topic);
    for (int32_t p : t.acquire) {
      PauseBeforeAcquire();
      auto got = member_->TryAcquire(t.topic, p);
      if (!got) return got.error();
      if (*got) taken.emplace_back(src, p);  // else the previous owner has not let go yet
    }
  }
  if (!taken.empty()) {
    // Read once the partitions are held: each previous owner committed
    // before it let go, so this holds its last commit. A state read before
    // the locks can be older, and what an owner handed out since would be
    // handed out again.
    auto state = group_->Read();
    if (!state) return state.error();
    std::vector<std::pair<Source*, int32_t>> started;
    for (auto [src, p] : taken) {
      auto ok = Acquire(*src, p, *state);
      if (!ok) return ok.error();
      if (*ok) started.emplace_back(src, p);
    }
    taken = std::move(started);
    // Serially a handler run costs far more than reading a batch: the
    // partitions taken are read next (in order), not after the rest of the
    // batch being handled and a batch of every other partition, so that a
    // dead member's partitions are handled again within a poll or so.
    if (dispatcher_ && !dispatcher_->parallel())
      for (auto it = taken.rbegin(); it != taken.rend(); ++it)
        it->first->consumer->ReadNext(it->second);
  }
  return Status::Ok();
}

void Member::SayFenced(const MembershipView& view) {
  for (const MembershipView::Fenced& x : view.fenced) {
    if (x.outcome == Fence::kKilled && !f_.quiet)
      cli::Warn(fmt::format(
          "group {}: member {} (pid {}) did not poll for {} ms past its deadline "
          "of {} ms (stopped or hung): killed it; its partitions move once its "
          "locks are gone",
          group_->name(), x.id, x.heartbeat.pid, x.overdue_ms, x.heartbeat.deadline_ms));
    if (x.outcome == Fence::kDenied && !f_.quiet)
      cli::Warn(fmt::format(
          "group {}: member {} (pid {}) did not poll for {} ms past its deadline "
          "of {} ms (stopped or hung), and this member may not kill it: its "
          "partitions wait until it is continued or killed",
          group_->name(), x.id, x.heartbeat.pid, x.overdue_ms, x.heartbeat.deadline_ms));
  }
}

Status Member::Rebalance() {
  MQ_RETURN_IF_ERROR(Resubscribe());
  auto view = member_->Poll();
  if (!view) return view.error();
  for (const MembershipView::Topic& t : view->topics) {
    Source* src = FindSource(t.topic);
    for (int32_t p : t.release) MQ_RETURN_IF_ERROR(Revoke(*src, p));
  }
  MQ_RETURN_IF_ERROR(TakePartitions(*view));
  waiting_ = 0;
  bool idle = true;
  std::vector<std::string> assigned, names;
  for (const MembershipView::Topic& t : view->topics) {
    names.push_back(t.topic);
    for (int32_t p : t.target) {
      waiting_ += member_->owns(t.topic, p) ? 0 : 1;
      assigned.push_back(several_ ? fmt::format("{}-{}", t.topic, p) : std::to_string(p));
    }
    idle = idle && t.target.empty();
  }
  SayFenced(*view);
  if (view->absent != last_absent_ && f_.verbose && !view->absent.empty())
    cli::Eprint(
        "group {}: static member(s) {} not running: their partitions wait for them "
        "until their session ends\n",
        group_->name(), fmt::join(view->absent, ","));
  last_absent_ = view->absent;
  if (view->changed) {
    if (f_.verbose)
      cli::Eprint("group {}: members {}; this member ({}) is assigned partitions {}\n",
                  group_->name(), fmt::join(view->members, ","), member_->id(),
                  fmt::join(assigned, ","));
    if (idle && !said_idle_ && !f_.quiet) {
      if (!several_)
        cli::Warn(
            fmt::format("group {}: {} members for {} partition(s) of {}: member {} is idle "
                        "until an owner leaves",
                        group_->name(), view->subscribers.size(),
                        sources_.front()->consumer->config().partitions, f_.topic, member_->id()));
      else
        cli::Warn(
            fmt::format("group {}: member {} is assigned no partition of the {} topic(s) it "
                        "reads{}: idle until an owner leaves or a matching topic appears",
                        group_->name(), member_->id(), names.size(),
                        names.empty() ? "" : fmt::format(" ({})", fmt::join(names, ","))));
    }
    said_idle_ = idle;
  }
  return Status::Ok();
}

void Member::MarkFlushed() {
  seen_flushes_ = out_->flushes();
  if (f_.ack_fd) return;  // only acknowledgements hand messages over
  for (auto& src : sources_)
    for (auto& [p, pr] : src->progress) HandOver(*src, p, pr);
}

void Member::HandOver(Source& src, int32_t p, Progress& pr) {
  auto pos = src.consumer->position(p);
  if (pos && *pos > pr.handed) {
    pr.handed = *pos;
    pr.epoch = src.last_epoch[static_cast<size_t>(p)];
  }
}

void Member::Collect(int timeout_ms) {
  for (const Dispatcher::Done& d : dispatcher_->TakeDone(timeout_ms)) {
    if (!d.status.ok() && stop_.ok()) stop_ = d.status;
    // Handled whole, or (a split batch cut short) in part: R72.
    if (d.handled_end < 0) continue;
    Source* src = nullptr;
    for (auto& s : sources_)
      if (s->number == LaneTopic(d.partition)) src = s.get();
    if (src == nullptr) continue;
    auto it = src->progress.find(LanePartition(d.partition));
    if (it == src->progress.end()) continue;
    Progress& pr = it->second;
    since_commit_ += d.messages;
    // Units end in the order given: once one given since the last cut
    // ended, none given before it is left.
    const int64_t end = UnitHandOver(pr, d.generation, d.handled_end);
    if (d.generation == pr.generation) pr.stale_cut = -1;
    if (end > pr.handed) {
      pr.handed = end;
      pr.epoch = end == d.next_offset ? d.leader_epoch : kNoLeaderEpoch;
    }
    pr.dead_letters += d.dead_letters;
  }
}

void Member::MarkHandled(const Source* only_src, std::optional<int32_t> only) {
  if (!dispatcher_) return;
  const bool healthy = dispatcher_->healthy();
  // --parallel reports each unit that ended (Collect).
  if (!healthy && dispatcher_->parallel()) return;
  for (auto& s : sources_) {
    Source& src = *s;
    if (only_src && &src != only_src) continue;
    for (auto& [p, pr] : src.progress) {
      if (only && p != *only) continue;
      const int32_t lane = Lane(src, p);
      if (healthy) {
        if (dispatcher_->has_pending(lane)) continue;
        pr.dead_letters += dispatcher_->TakeDeadLetters(lane);
        HandOver(src, p, pr);
        continue;
      }
      // Serially, once a run stopped: up to the last unit handled, which
      // every earlier message was, and nothing past it.
      auto h = dispatcher_->handled_through(lane);
      const int64_t end = h ? UnitHandOver(pr, h->generation, h->end) : -1;
      if (end > pr.handed) {
        pr.handed = end;
        pr.epoch = end == h->end ? h->leader_epoch : kNoLeaderEpoch;
      }
      pr.dead_letters += dispatcher_->TakeDeadLetters(lane);
    }
  }
}

// Every message handed out was acknowledged.
bool Member::AllAcknowledged() const {
  for (const auto& src : sources_)
    for (const auto& [p, pr] : src->progress) {
      auto last = src->consumer->last_handed_out(p);
      if (last && pr.handed <= *last) return false;
    }
  return true;
}

// Acknowledgements on --ack-fd: lines "PARTITION OFFSET" or the message id
// "TOPIC/PARTITION/OFFSET"; each hands over its offset and every earlier
// one of its partition (cumulative, like a Kafka commit).
void Member::Acknowledge(std::string line) {
  std::string_view v = line;
  Source* src = several_ ? nullptr : sources_.front().get();
  if (auto slash = v.rfind('/'); slash != std::string_view::npos) {
    auto first = v.find('/');
    src = first == slash ? nullptr : FindSource(v.substr(0, first));
    if (src == nullptr) {
      if (!f_.quiet)
        cli::Warn(fmt::format("--ack-fd: ignored '{}': not a message of {}", line,
                              several_ ? "a topic this member reads" : f_.topic));
      return;
    }
    line = std::string(v.substr(first + 1, slash - first - 1)) + " " +
           std::string(v.substr(slash + 1));
  } else if (src == nullptr) {
    // With several topics a partition number alone names no message.
    if (!f_.quiet)
      cli::Warn(
          fmt::format("--ack-fd: ignored '{}': this member reads several topics: "
                      "acknowledge TOPIC/PARTITION/OFFSET",
                      line));
    return;
  }
  auto& progress = src->progress;
  int32_t p = -1;
  int64_t o = -1;
  auto sp = line.find(' ');
  bool ok = sp != std::string::npos &&
            std::from_chars(line.data(), line.data() + sp, p).ec == std::errc() &&
            std::from_chars(line.data() + sp + 1, line.data() + line.size(), o).ec == std::errc();
  auto it = progress.find(p);
  if (!ok || it == progress.end()) {
    if (!f_.quiet)
      cli::Warn(
          fmt::format("--ack-fd: ignored '{}': expected PARTITION OFFSET of a partition "
                      "this member owns",
                      line));
    return;
  }
  auto last = src->consumer->last_handed_out(p);
  if (!last || o > *last) {
    if (!f_.quiet)
      cli::Warn(
          fmt::format("--ack-fd: ignored '{}': offset {} of partition {} was not handed "
                      "out",
                      line, o, p));
    return;
  }
  if (o + 1 > it->second.handed) it->second.handed = o + 1;
}

void Member::ReadAcks(bool until_eof) {
  if (!f_.ack_fd || ack_eof_) return;
  const int fd = *f_.ack_fd;
  char buf[4096];
  for (;;) {
    if (until_eof && AllAcknowledged()) return;
    // At exit, each acknowledgement may take up to kAckWaitMs, with no poll
    // in between: the heartbeat says the member is not stuck (R69).
    if (until_eof) (void)member_->Beat();
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, until_eof ? kAckWaitMs : 0);
    if (ready == 0) {
      if (until_eof && !f_.quiet)
        cli::Warn(
            fmt::format("--ack-fd: no acknowledgement for {} s: committing what was "
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
      Acknowledge(std::move(line));
    }
  }
}

Status Member::Commit() {
  // Every topic's partitions in one commit (R32).
  std::vector<OffsetCommit> commits;
  std::vector<std::pair<Source*, Progress*>> of;
  for (auto& src : sources_) {
    for (auto& [p, pr] : src->progress) {
      if (f_.at_most_once) {
        // Offsets were committed ahead of the output already; only dead
        // letters are left to count.
        if ((pr.dead_letters > 0 || pr.lower_from >= 0) && pr.committed >= 0)
          commits.push_back(
              {src->topic, p, pr.committed, pr.ahead_epoch, pr.dead_letters, pr.lower_from});
        else
          continue;
      } else if ((pr.handed > pr.committed || pr.dead_letters > 0 || pr.lower_from >= 0) &&
                 pr.handed >= 0) {
        commits.push_back({src->topic, p, std::max(pr.handed, pr.committed), pr.epoch,
                           pr.dead_letters, pr.lower_from});
      } else {
        continue;
      }
      of.emplace_back(src.get(), &pr);
    }
  }
  if (!commits.empty()) {
    // At least once, a commit that a machine crash undoes delivers its
    // messages again, which is allowed: no directory fsync (R32,
    // CommitSync::kAtomic). At most once it is what keeps them from being
    // delivered twice: durable.
    MQ_RETURN_IF_ERROR(group_->Commit(
        commits, member_->id(), CommitKind::kForward, kNoTimestamp, nullptr,
        f_.at_most_once ? CommitSync::kDurable : CommitSync::kAtomic, member_->LockedOutWait()));
    for (size_t i = 0; i < commits.size(); ++i) {
      const OffsetCommit& c = commits[i];
      Progress& pr = *of[i].second;
      if (pr.lower_from >= 0 && f_.verbose)
        cli::Eprint("partition {}: committed offset lowered from {} to {}\n",
                    Name(*of[i].first, c.partition), pr.lower_from, c.offset);
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
  for (const auto& src : sources_)
    for (const auto& [p, pr] : src->progress)
      if (pr.dead_letters > 0) return Commit();
  return Status::Ok();
}

// At-most-once, with handlers: before a batch's first message is handed to
// a handler, its partition's offset is committed past the whole batch.
Status Member::CommitAhead(Source& src, const ConsumedRecord& m) {
  Progress& pr = src.progress[m.partition];
  if (m.record.offset < pr.ahead) return Status::Ok();
  const int64_t next = m.batch_last_offset + 1;
  const std::vector<OffsetCommit> commit{
      {src.topic, m.partition, next, m.leader_epoch, 0, pr.lower_from}};
  MQ_RETURN_IF_ERROR(group_->Commit(commit, member_->id(), CommitKind::kForward, kNoTimestamp,
                                    nullptr, CommitSync::kDurable, member_->LockedOutWait()));
  pr.ahead = next;
  pr.ahead_epoch = m.leader_epoch;
  pr.committed = next;
  pr.lower_from = -1;
  return Status::Ok();
}

Status Member::CommitPrinted() {
  std::vector<OffsetCommit> commits;
  std::vector<Progress*> of;
  for (auto& src : sources_) {
    for (auto& [p, pr] : src->progress) {
      auto pos = src->consumer->position(p);
      if (!pos) continue;
      if (auto c = OutputAheadCommit(src->topic, p, pr.committed, *pos,
                                     src->last_epoch[static_cast<size_t>(p)], pr.lower_from)) {
        commits.push_back(std::move(*c));
        of.push_back(&pr);
      }
    }
  }
  if (commits.empty()) return Status::Ok();
  MQ_RETURN_IF_ERROR(group_->Commit(commits, member_->id(), CommitKind::kForward, kNoTimestamp,
                                    nullptr, CommitSync::kDurable, member_->LockedOutWait()));
  for (size_t i = 0; i < commits.size(); ++i) {
    const OffsetCommit& c = commits[i];
    Progress& pr = *of[i];
    pr.ahead = c.offset;
    pr.ahead_epoch = c.leader_epoch;
    pr.committed = c.offset;
    pr.lower_from = -1;
  }
  return Status::Ok();
}

Status Member::HandBack(const Source* only_src, std::optional<int32_t> only) {
  if (!f_.at_most_once) return Status::Ok();
  std::vector<OffsetCommit> commits;
  std::vector<std::pair<Source*, Progress*>> of;
  for (auto& src : sources_) {
    for (auto& [p, pr] : src->progress) {
      if ((only_src && src.get() != only_src) || (only && p != *only) || pr.ahead < 0) continue;
      // Printed, or its handler started: every message below the first one
      // given to a handler that never started (--batch, --parallel's queue, a
      // stop), or else below the consumer's position.
      // (A plain offset and a flag, not an optional: GCC 12 took the
      // optional's value for maybe uninitialized.)
      int64_t from = 0;
      bool known = false;
      if (dispatcher_) {
        if (std::optional<int64_t> u = dispatcher_->first_unstarted(Lane(*src, p))) {
          from = *u;
          known = true;
        }
      }
      int32_t epoch = kNoLeaderEpoch;
      if (!dispatcher_ && out_->stalled() && !out_->stalled_partway()) {
        // What the output dropped was never handed out: only what was
        // written. A write that stalled partway was committed ahead (R67)
        // and may still be read: it stays committed, lost as at a crash,
        // never repeated.
        from = pr.handed;
        known = true;
        epoch = pr.epoch;
      }
      if (!known) {
        std::optional<int64_t> position = src->consumer->position(p);
        if (!position) continue;
        from = *position;
        epoch = src->last_epoch[static_cast<size_t>(p)];
      }
      if (auto c = HandBackCommit(src->topic, p, pr.committed, from, epoch)) {
        commits.push_back(std::move(*c));
        of.emplace_back(src.get(), &pr);
      }
    }
  }
  if (commits.empty()) return Status::Ok();
  MQ_RETURN_IF_ERROR(group_->Commit(commits, member_->id(), CommitKind::kForward, kNoTimestamp,
                                    nullptr, CommitSync::kDurable, member_->LockedOutWait()));
  for (size_t i = 0; i < commits.size(); ++i) {
    const OffsetCommit& c = commits[i];
    Progress& pr = *of[i].second;
    if (f_.verbose)
      cli::Eprint(
          "partition {}: handed back offsets {} to {} (committed ahead, not handed "
          "out)\n",
          Name(*of[i].first, c.partition), c.offset, pr.committed - 1);
    pr.committed = c.offset;
    pr.ahead = c.offset;
    pr.ahead_epoch = c.leader_epoch;
  }
  return Status::Ok();
}

void Member::OnCuts() {
  for (const auto& [topic, n] : std::exchange(*cuts_, {})) {
    Source* src = FindSource(topic);
    if (!src) continue;
    auto it = src->progress.find(n.partition);
    if (it == src->progress.end()) continue;
    Progress& pr = it->second;
    PartitionOffsets o{pr.committed, pr.handed, pr.epoch, pr.ahead, pr.ahead_epoch, pr.lower_from};
    LowerToCut(n.first_offset, &o);
    pr.committed = o.committed;
    pr.handed = o.handed;
    pr.epoch = o.epoch;
    pr.ahead = o.ahead;
    pr.ahead_epoch = o.ahead_epoch;
    pr.lower_from = o.lower_from;
    ++pr.generation;
    pr.stale_cut = pr.stale_cut < 0 ? n.first_offset : std::min(pr.stale_cut, n.first_offset);
  }
}

Status Member::OnStopped() {
  if (stopped_->empty()) return Status::Ok();
  if (dispatcher_ && dispatcher_->parallel())
    Collect(0);
  else if (dispatcher_)
    MarkHandled();
  else if (out_->Flush())
    MarkFlushed();
  MQ_RETURN_IF_ERROR(Commit());
  for (const auto& [topic, p] : std::exchange(*stopped_, {}))
    if (Source* src = FindSource(topic); src && src->progress.contains(p))
      MQ_RETURN_IF_ERROR(HandBack(src, p));
  return Status::Ok();
}

Status Member::Tick() {
  int64_t now = MonotonicMs();
  if (now >= next_poll_ms_) {
    MQ_RETURN_IF_ERROR(Rebalance());
    next_poll_ms_ = now + kRebalancePollMs;
  }
  ReadAcks(false);
  if ((f_.commit_every > 0 && since_commit_ >= f_.commit_every) ||
      now - last_commit_ms_ >= f_.commit_interval_ms) {
    if (!dispatcher_ && out_->Flush()) MarkFlushed();
    if (!write_error_.ok()) return write_error_;
    MQ_RETURN_IF_ERROR(Commit());
  }
  if (out_->stalled()) return Stalled();
  return Status::Ok();
}

Result<bool> Member::Deliver(Source& src, const ConsumedRecord& m, const RunMode& mode,
                             std::vector<Header>& headers) {
  if (mode.commit_ahead) MQ_RETURN_IF_ERROR(CommitAhead(src, m));
  src.last_epoch[static_cast<size_t>(m.partition)] = m.leader_epoch;
  if (mode.need_headers) headers = m.record.headers();
  if (mode.filtered && !MatchesAll(headers, settings_.header_filters)) return false;
  if (dispatcher_) {
    const int32_t p = m.partition;
    auto pr = src.progress.find(p);
    MQ_RETURN_IF_ERROR(dispatcher_->Add(Lane(src, p), m.log_append_time, m.record, headers,
                                        m.leader_epoch,
                                        pr == src.progress.end() ? 0 : pr->second.generation));
    if (dispatcher_->parallel()) {
      Collect(0);
      if (!stop_.ok()) return stop_;
    } else {
      MarkHandled(&src, p);
    }
    MQ_RETURN_IF_ERROR(CommitDeadLetters());
  } else {
    printer_.Print(src.topic, m.partition, m.log_append_time, m.record, headers);
    if (!write_error_.ok()) return write_error_;
    if (out_->flushes() != seen_flushes_) MarkFlushed();
    if (out_->stalled()) return Stalled();
  }
  // --parallel counts messages toward --commit-every as they are
  // handled (Collect), not as they are queued.
  if (mode.count_each) ++since_commit_;
  return ++delivered_ == mode.count || out_->broken();
}

Result<bool> Member::AtEnd() {
  // --parallel: handlers still run (or --batch messages wait): their
  // partitions are committed as they finish, by the interval and count
  // of the check above, not at every one that ends.
  const bool draining = dispatcher_ && dispatcher_->parallel() && dispatcher_->busy();
  // -e: every partition this member is assigned (none, for an idle
  // member) is owned and read to the end it had when it was taken (and
  // with --parallel, handled).
  if (f_.exit_at_end && Finished() && waiting_ == 0 && !draining) return true;
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
    return true;
  } else if (out_->stalled()) {
    return Stalled();
  }
  if (!write_error_.ok()) return write_error_;
  if (!draining) MQ_RETURN_IF_ERROR(Commit());
  // A reader of our standard output that went away is seen here, not at
  // a next write that may never come (as plain follow mode): the member
  // stops and lets its partitions go.
  if (cli::OutputClosed()) return true;
  const int wait =
      static_cast<int>(std::clamp<int64_t>(next_poll_ms_ - MonotonicMs(), 1, kRebalancePollMs));
  if (dispatcher_ && dispatcher_->parallel() && dispatcher_->busy()) {
    // Handlers run: the next one to end (or the next probe) comes first;
    // appends are seen on the way round.
    Collect(wait);
    if (!stop_.ok()) return stop_;
    MQ_RETURN_IF_ERROR(CommitDeadLetters());
  } else {
    WaitForAppend(wait);
  }
  return false;
}

Status Member::Run(const volatile std::sig_atomic_t* interrupted) {
  if (f_.count && *f_.count == 0) return Status::Ok();
  RunMode mode;
  mode.filtered = !settings_.header_filters.empty();
  mode.need_headers = printer_.needs_headers() || mode.filtered;
  mode.commit_ahead = f_.at_most_once && dispatcher_;
  mode.count_each = !dispatcher_ || !dispatcher_->parallel();
  mode.count = f_.count.value_or(0);  // 0: no -c (a -c 0 returned above)
  std::vector<Header> headers;
  last_commit_ms_ = MonotonicMs();
  // Membership, acknowledgements and commits are looked at every
  // kTickRecords records and whenever the member waits.
  // With --exec, every record: a handler run costs far more than a look.
  const uint32_t kTickRecords = dispatcher_ ? 1 : 256;
  uint32_t ticks = 0;
  while (!*interrupted) {
    if (ticks == 0) {
      ticks = kTickRecords;
      MQ_RETURN_IF_ERROR(Tick());
    }
    --ticks;
    Source* src = nullptr;
    auto next = Next(&src);
    if (!next) return next.error();
    // Notices are rare: looked at only when the consumer left one.
    if (!cuts_->empty()) OnCuts();
    if (!stopped_->empty()) MQ_RETURN_IF_ERROR(OnStopped());
    if (const ConsumedRecord* m = *next) {
      auto ends = Deliver(*src, *m, mode, headers);
      if (!ends) return ends.error();
      if (*ends) return Status::Ok();
      continue;
    }
    auto ends = AtEnd();
    if (!ends) return ends.error();
    if (*ends) return Status::Ok();
    ticks = 0;
  }
  return Status::Ok();
}

Result<const ConsumedRecord*> Member::Next(Source** from) {
  const size_t n = sources_.size();
  // The topic read first, then each in turn (a wrap, not a division per record).
  size_t at = next_source_ < n ? next_source_ : (n == 0 ? 0 : next_source_ % n);
  for (size_t i = 0; i < n; ++i) {
    Source* src = sources_[at].get();
    if (++at == n) at = 0;
    auto next = src->consumer->Next();
    if (!next && several_) {
      // Its topic was removed from under its readers: it leaves the
      // subscription now (Resubscribe), not at the next poll.
      auto config = dir_->ReadTopic(src->topic);
      if (!config && config.error().code() == Code::kNotFound) {
        MQ_RETURN_IF_ERROR(Resubscribe());
        return static_cast<const ConsumedRecord*>(nullptr);
      }
    }
    if (!next) return next.error();
    if (*next != nullptr) {
      // One record of each topic in turn: a busy topic does not hold the
      // others back.
      next_source_ = at;
      *from = src;
      return *next;
    }
  }
  return static_cast<const ConsumedRecord*>(nullptr);
}

void Member::WaitForAppend(int timeout_ms) {
  if (sources_.empty()) {
    // A pattern that matches no topic yet: the next poll looks again.
    ::poll(nullptr, 0, timeout_ms);
    return;
  }
  // Each topic's consumer waits on its own partitions: a slice each, so
  // that an append to any is seen within the slice.
  const int slice = std::max(1, timeout_ms / static_cast<int>(sources_.size()));
  for (auto& src : sources_)
    if (src->consumer->WaitForAppend(slice)) return;
}

bool Member::Finished() const {
  for (const auto& src : sources_)
    if (!src->consumer->finished()) return false;
  return true;
}

Status Member::Finish(bool completed) {
  if (dispatcher_) {
    Status flushed;
    if (dispatcher_->parallel()) {
      // Completed: every message handed out is handled first. Otherwise
      // nothing new starts, and the runs under way end (killed on an
      // interrupt, except at most once); what they handled is committed.
      if (completed && dispatcher_->healthy())
        flushed = dispatcher_->Drain();
      else
        dispatcher_->Stop();
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
  if (!write_error_.ok()) return write_error_;
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

// R69: the longest this member may go between two polls without being
// stuck by its own rules: a write to standard output is given up after
// --max-poll-interval; with --exec, a message or batch takes every attempt
// (each run killed after --max-poll-interval) and the backoffs between them.
int64_t MemberDeadlineMs(const Flags& f, const Settings& settings) {
  const int64_t interval = f.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs);
  if (!settings.handler) return interval;
  const HandlerOptions& h = *settings.handler;
  return HandlerDeadlineMs(interval, h.kill_grace_ms, h.max_attempts, h.retry_backoff_ms,
                           h.max_backoff_ms);
}

// What the consumers say of their partitions, as a member's run collects
// it: stopped partitions and truncations since the member last looked,
// and the counts the exit status comes from.
struct GroupNotices {
  std::vector<std::pair<std::string, int32_t>> stopped;      // since the member last looked
  std::vector<std::pair<std::string, ConsumerNotice>> cuts;  // likewise
  uint64_t stops = 0, skipped = 0, skipped_offsets = 0;

  // A consumer's notice, counted and said (unless -q).
  void Add(const Flags& f, bool several, const ConsumerNotice& n) {
    using K = ConsumerNotice::Kind;
    // The partition directory is <dir>/<topic>-<partition>.
    std::string topic = n.dir.substr(n.dir.rfind('/') + 1);
    topic.resize(topic.size() - std::min(topic.size(), std::to_string(n.partition).size() + 1));
    const std::string name =
        several ? fmt::format("{}-{}", topic, n.partition) : std::to_string(n.partition);
    if (n.kind == K::kStoppedPartition) {
      stopped.emplace_back(topic, n.partition);
      ++stops;
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: partition {} stopped at offset {}: {}; the member "
                        "goes on with its other partitions",
                        *f.group, name, n.first_offset, n.error.message()));
    } else if (n.kind == K::kTruncated) {
      cuts.emplace_back(topic, n);
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: partition {}: the log was truncated to offset {} below "
                        "records handed out ({}..{}): handing out what it holds there now",
                        *f.group, name, n.first_offset, n.first_offset, n.last_offset));
    } else if (n.kind == K::kSkippedBatch) {
      ++skipped;
      if (!f.quiet)
        cli::Warn(fmt::format("group {}: skipping corrupt batch: {}", *f.group, n.error.message()));
    } else if (n.kind == K::kSkippedOffsets) {
      skipped_offsets += static_cast<uint64_t>(n.last_offset - n.first_offset + 1);
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: skipped offsets {}..{} of topic {} partition {}: "
                        "committed past with the messages after them",
                        *f.group, n.first_offset, n.last_offset, topic, n.partition));
    } else if (n.kind == K::kOutOfRange) {
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: partition {}: offsets {}..{} were deleted by retention "
                        "before they were read: going on at the log start, {}",
                        *f.group, name, n.first_offset, n.last_offset, n.last_offset + 1));
    }
  }
};

// A member's run (RunGroup), in the order it is set up: the topics'
// consumers, the group joined, the outputs (--exec's dispatcher,
// --to-topic's pipeline), then the member's loop and its end.
class GroupRun {
 public:
  GroupRun(const Flags& f, Settings settings, const volatile std::sig_atomic_t* interrupted)
      : f_(f), settings_(std::move(settings)), interrupted_(interrupted) {}

  Status Open() {
    auto dir = DataDir::Open(f_.dir, false);
    if (!dir) return dir.error();
    dir_.emplace(std::move(*dir));
    SetConsumerOptions();
    MQ_RETURN_IF_ERROR(OpenSources());
    MQ_RETURN_IF_ERROR(Join());
    MQ_RETURN_IF_ERROR(FindFirstConfig());
    return OpenOutputs();
  }

  int Run();

 private:
  void SetConsumerOptions() {
    options_.limits = {f_.max_batch_bytes, f_.max_batch_bytes};
    options_.stop_at_end = f_.exit_at_end;
    // A corrupt batch stops its partition, not the member (format-spec/
    // group.md §14.7): reported here, committed up to it by the member
    // (Member::OnStopped), and the exit status at the end is 65. With
    // --skip-corrupt it is skipped, and the offsets past it are committed
    // as the messages after it are handed over.
    options_.skip_corrupt = f_.skip_corrupt;
    options_.stop_corrupt = true;
    const bool several = ReadsSeveralTopics(f_);
    options_.on_notice = [this, several](const ConsumerNotice& n) { notices_.Add(f_, several, n); };
    if (settings_.pipeline) budget_.per_share = kDescriptorsPerReader + kDescriptorsPerWriter;
    budget_.pipeline = settings_.pipeline.has_value();
    if (settings_.handler) budget_.reserved = ReservedDescriptors(*settings_.handler);
    // The consumers' max_open is their share (budget.Share), once opened.
    options_.max_open = 1;
  }

  // The topics read (R64): those named (each must exist) and those a
  // pattern matches now; a pattern's later matches are added at each poll
  // (Member::Resubscribe).
  Status OpenSources() {
    std::vector<std::string> names{f_.topic};
    if (ReadsSeveralTopics(f_)) {
      auto matched = MatchSubscription(f_, *dir_);
      if (!matched) return matched.error();
      names = std::move(*matched);
    }
    for (const std::string& t : names) {
      auto consumer = Consumer::Open(*dir_, t, options_);
      if (!consumer) return consumer.error();
      auto src = std::make_unique<Source>();
      src->topic = t;
      src->consumer = std::move(*consumer);
      subscription_.push_back({t, src->consumer->config().partitions});
      sources_.push_back(std::move(src));
    }
    shares_ = budget_.Share(sources_);
    // A topic read keeps a reader at least (ReaderBudget::Room): more topics
    // than the open-file limit has room for are refused.
    if (sources_.size() > shares_)
      return Status(Code::kUnavailable,
                    fmt::format("group {}: {} topics to read, but the open-file limit "
                                "leaves room for {} readers, one a topic at least: raise "
                                "ulimit -n or read fewer topics",
                                *f_.group, sources_.size(), shares_));
    return Status::Ok();
  }

  Status Join() {
    auto group = Group::Open(dir_->path(), *f_.group, true);
    if (!group) return group.error();
    group_.emplace(std::move(*group));
    // The group must be readable before anything is consumed: a corrupt
    // offsets file stops here (R29, R30), never resets to earliest/latest.
    if (auto state = group_->Read(); !state) return state.error();
    const std::string id = f_.member_id ? *f_.member_id : DefaultMemberId();
    auto member = GroupMember::Join(&*group_, id, subscription_);
    if (!member) return member.error();
    member_.emplace(std::move(*member));
    // A signal ends a wait for commit.lock (SIGTERM must end a member whose
    // commit waits for a stuck holder).
    member_->InterruptWaitsOn(interrupted_);
    if (f_.session_timeout_ms) MQ_RETURN_IF_ERROR(member_->KeepSession(*f_.session_timeout_ms));
    // Its heartbeat (R69): how long it may go between two polls before the
    // other members of this host take it for stuck and fence it.
    return member_->KeepHeartbeat(MemberDeadlineMs(f_, settings_));
  }

  // --exec, --dlq and --to-topic with several topics: the topics created
  // like the first one read; none matched yet, they must exist already.
  Status FindFirstConfig() {
    first_ = sources_.empty() ? nullptr : &sources_.front()->consumer->config();
    if (first_ != nullptr) return Status::Ok();
    for (const std::optional<std::string>& t :
         {settings_.handler ? settings_.handler->dlq : std::nullopt, f_.to_topic}) {
      if (!t) continue;
      if (auto c = dir_->ReadTopic(*t); !c && c.error().code() == Code::kNotFound)
        return Status(Code::kNotFound,
                      fmt::format("topic {} does not exist, and no topic matches {} "
                                  "yet to create it like: create it first",
                                  *t, fmt::join(f_.topics, " ")));
    }
    first_ = &none_;
    return Status::Ok();
  }

  Status OpenOutputs() {
    if (settings_.handler) {
      // Lanes (dispatcher.h): the topics read so far, in order.
      dispatcher_.emplace(std::move(*settings_.handler),
                          sources_.empty() ? "" : sources_.front()->topic, interrupted_);
      for (auto& src : sources_) {
        auto number = dispatcher_->AddTopic(src->topic);
        if (!number) return number.error();
        src->number = *number;
      }
    }
    if (settings_.pipeline) {
      settings_.pipeline->max_open = PipelineWriterBudget(shares_, first_->partitions);
      settings_.pipeline->topics = &dispatcher_->topics();
      pipeline_.emplace(std::move(*settings_.pipeline), *dir_, *first_);
      MQ_RETURN_IF_ERROR(pipeline_->Open());
      budget_.writers = &*pipeline_;
      budget_.Share(sources_);
      dispatcher_->set_sink(&*pipeline_);
    }
    if (!settings_.handler) return Status::Ok();
    // A handler holds a lock of its partition too: the partition is free
    // only once the member and every handler of it are gone.
    GroupMember* owner = &*member_;
    // Run on this thread (not --parallel), each message or batch starts a
    // wait of the member's deadline between two polls: its heartbeat says
    // so first (R69), so that a member retrying one message after another
    // is never taken for stuck.
    const bool serial = !dispatcher_->parallel();
    const TopicTable* topics = &dispatcher_->topics();
    std::mutex* subscribe_mu = &subscribe_mu_;
    dispatcher_->set_handler_lock(
        [owner, topics, serial, subscribe_mu](int32_t lane) -> Result<FileLock> {
          std::lock_guard<std::mutex> lk(*subscribe_mu);
          if (serial) MQ_RETURN_IF_ERROR(owner->Beat());
          return owner->LockForHandler(topics->TopicOf(lane), LanePartition(lane));
        });
    return dispatcher_->Open(*dir_, *first_);
  }

  // The run's outputs closed (--exec's, --to-topic's) after the member's
  // loop ended with `s`: the first error.
  Status CloseOutputs(Status s) {
    if (dispatcher_) {
      Status closed = dispatcher_->Close();
      if (s.ok()) s = closed;
    }
    if (pipeline_) {
      Status closed = pipeline_->Close();
      if (s.ok()) s = closed;
    }
    return s;
  }

  // -v: what the run processed.
  void PrintTotals(const cli::Output& out) {
    if (f_.verbose && pipeline_)
      cli::Eprint(
          "Processed a total of {} messages ({} outputs appended to {}, {} dead-lettered, "
          "{} retries)\n",
          dispatcher_->handled(), pipeline_->appended(), *f_.to_topic, dispatcher_->dead_lettered(),
          dispatcher_->retries());
    else if (f_.verbose && dispatcher_)
      cli::Eprint("Processed a total of {} messages ({} dead-lettered, {} retries)\n",
                  dispatcher_->handled(), dispatcher_->dead_lettered(), dispatcher_->retries());
    else if (f_.verbose)
      cli::Eprint("Processed a total of {} messages\n", out.records_written());
  }

  const Flags& f_;
  Settings settings_;
  const volatile std::sig_atomic_t* interrupted_;
  std::optional<DataDir> dir_;
  ConsumerOptions options_;
  GroupNotices notices_;
  ReaderBudget budget_;
  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<TopicPartitions> subscription_;
  size_t shares_ = 0;
  std::optional<Group> group_;
  std::optional<GroupMember> member_;
  std::optional<Pipeline> pipeline_;
  std::optional<Dispatcher> dispatcher_;
  std::mutex subscribe_mu_;  // the member's subscription, changed by Member::Resubscribe
  const TopicConfig* first_ = nullptr;
  const TopicConfig none_{};
};

int GroupRun::Run() {
  cli::Output out(1, 1 << 20);
  // Printing, a write its reader does not take holds up the member's polls
  // as a handler run does: the same bound (Kafka's max.poll.interval.ms).
  if (!dispatcher_)
    out.set_write_timeout(f_.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs));
  Member m(f_, settings_, &*dir_, std::move(sources_), options_, &*group_, &*member_, &out,
           dispatcher_ ? &*dispatcher_ : nullptr, &notices_.stopped, &subscribe_mu_, budget_,
           &notices_.cuts);
  Status s = m.Run(interrupted_);
  Status fin = m.Finish(s.ok());
  if (s.ok()) s = fin;
  s = CloseOutputs(std::move(s));
  int rc = out.FinishExitCode();
  member_->Leave();
  PrintTotals(out);
  if (!s.ok() && dispatcher_ && dispatcher_->exit_code() != 0) {
    cli::Warn(fmt::format("group {}: {}", group_->name(), s.message()));
    return dispatcher_->exit_code();
  }
  if (!s.ok()) return cli::Fail(s);
  if (rc != cli::kExitOk) return rc;
  // Everything readable was handed over; what stderr named was not.
  if (notices_.stops > 0) return cli::kExitDataErr;
  if (notices_.skipped > 0) {
    if (!f_.quiet)
      cli::Warn(fmt::format("skipped {} corrupt batch{} ({} offsets not delivered)",
                            notices_.skipped, notices_.skipped == 1 ? "" : "es",
                            notices_.skipped_offsets));
    return cli::kExitProblems;
  }
  return rc;
}

}  // namespace

int RunGroup(const Flags& f, Settings settings, const volatile std::sig_atomic_t* interrupted) {
  GroupRun run(f, std::move(settings), interrupted);
  if (Status s = run.Open(); !s.ok()) return cli::Fail(s);
  return run.Run();
}

}  // namespace mq::consume
