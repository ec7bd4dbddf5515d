// mq-consume -G: a member's loop over the partitions the group assigns to
// it (format-spec/group.md §14.6): reading, handing out, committing and
// following rebalances. Its parts: member_membership.cc (rebalances,
// taking and letting go of partitions, the subscription),
// member_handover.cc (what was handed over: output flushed, handlers
// ended, acknowledgements), member_commit.cc (commits, at most once's
// commits ahead and hand-backs, cuts and stopped partitions) and
// member_loop.cc (the run and its end).
#pragma once

#include <time.h>

#include <csignal>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dispatcher.h"
#include "group_source.h"
#include "mq/assignment.h"
#include "mq/consumer.h"
#include "mq/group.h"
#include "mq/group_member.h"
#include "options.h"
#include "printer.h"
#include "reader_budget.h"

namespace mq::consume {

// How often membership is probed (format-spec/group.md §14.6).
constexpr int kRebalancePollMs = 100;
// At exit with --ack-fd: how long to wait for the next acknowledgement.
constexpr int kAckWaitMs = 5000;

inline int64_t MonotonicMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

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
    if (in_flight_) in_flight_->thread.join();
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
  // Commits what was handed over and not committed, after the commit under
  // way (JoinCommit).
  Status Commit();
  // At least once, printing: Tick's commit (by --commit-every and
  // --commit-interval) is written on a thread of its own while the member
  // reads on. One at a time: it and every other commit first wait for the
  // one under way, so offsets are committed in order and a partition is
  // let go only once its offsets are.
  Status CommitInBackground();
  // Waits for the commit under way (if any) and takes its offsets as the
  // committed ones; its error is returned. One that found commit.lock held
  // by another process is given up: the next commit (on this thread,
  // waiting for the lock as R69 says) writes its offsets.
  Status JoinCommit();
  // What Commit writes: each partition's offset (with its dead letters and
  // a lowering) handed over and not committed, and whose.
  void PendingCommits(std::vector<OffsetCommit>* commits,
                      std::vector<std::pair<Source*, Progress*>>* of);
  // A commit under way on its own thread (CommitInBackground).
  struct InFlight {
    std::vector<OffsetCommit> commits;
    std::thread thread;
    Status result;
    bool lock_held = false;  // commit.lock was held by another process
  };
  std::unique_ptr<InFlight> in_flight_;
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

}  // namespace mq::consume
