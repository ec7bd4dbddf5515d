#include "member.h"

#include <poll.h>

#include <algorithm>

namespace mq::consume {

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
    MQ_RETURN_IF_ERROR(CommitInBackground());
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
    if (!cuts_->empty()) {
      // A lowering starts from the offset stored: the commit under way's.
      MQ_RETURN_IF_ERROR(JoinCommit());
      OnCuts();
    }
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

}  // namespace mq::consume
