#include "member.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <thread>

#include <fmt/ranges.h>

#include "mq/group_status.h"
#include "mq/topic_admin.h"

namespace mq::consume {

namespace {

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

}  // namespace

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

}  // namespace mq::consume
