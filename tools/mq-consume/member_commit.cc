#include "member.h"

#include <algorithm>

namespace mq::consume {

void Member::PendingCommits(std::vector<OffsetCommit>* commits,
                            std::vector<std::pair<Source*, Progress*>>* of) {
  for (auto& src : sources_) {
    for (auto& [p, pr] : src->progress) {
      if (f_.at_most_once) {
        // Offsets were committed ahead of the output already; only dead
        // letters are left to count.
        if ((pr.dead_letters > 0 || pr.lower_from >= 0) && pr.committed >= 0)
          commits->push_back(
              {src->topic, p, pr.committed, pr.ahead_epoch, pr.dead_letters, pr.lower_from});
        else
          continue;
      } else if ((pr.handed > pr.committed || pr.dead_letters > 0 || pr.lower_from >= 0) &&
                 pr.handed >= 0) {
        commits->push_back({src->topic, p, std::max(pr.handed, pr.committed), pr.epoch,
                            pr.dead_letters, pr.lower_from});
      } else {
        continue;
      }
      of->emplace_back(src.get(), &pr);
    }
  }
}

Status Member::Commit() {
  MQ_RETURN_IF_ERROR(JoinCommit());
  // Every topic's partitions in one commit (R32).
  std::vector<OffsetCommit> commits;
  std::vector<std::pair<Source*, Progress*>> of;
  PendingCommits(&commits, &of);
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

Status Member::CommitInBackground() {
  // At most once commits ahead of the output, and handlers count dead
  // letters: those commit on this thread, as does a lowering (R31's
  // exception, said with -v).
  if (f_.at_most_once || dispatcher_) return Commit();
  MQ_RETURN_IF_ERROR(JoinCommit());
  std::vector<OffsetCommit> commits;
  std::vector<std::pair<Source*, Progress*>> of;
  PendingCommits(&commits, &of);
  for (const OffsetCommit& c : commits)
    if (c.lower_from >= 0 || c.dead_letters_added > 0) return Commit();
  last_commit_ms_ = MonotonicMs();
  since_commit_ = 0;
  if (commits.empty()) return Status::Ok();
  in_flight_ = std::make_unique<InFlight>();
  InFlight* f = in_flight_.get();
  f->commits = std::move(commits);
  // Without this member's state: another process holding commit.lock
  // (for kCommitWaitCallMs) ends the try, and the next commit, on this
  // thread, waits for the lock as a member does (LockedOutWait).
  f->thread = std::thread([f, group = group_, id = member_->id()] {
    f->result = group->Commit(f->commits, id, CommitKind::kForward, kNoTimestamp, nullptr,
                              CommitSync::kAtomic, [f] {
                                f->lock_held = true;
                                return Status(Code::kBusy, "commit.lock held by another process");
                              });
  });
  return Status::Ok();
}

Status Member::JoinCommit() {
  if (!in_flight_) return Status::Ok();
  in_flight_->thread.join();
  const std::unique_ptr<InFlight> f = std::move(in_flight_);
  if (!f->result.ok()) return f->lock_held ? Status::Ok() : f->result;
  for (const OffsetCommit& c : f->commits) {
    Source* src = FindSource(c.topic);
    if (src == nullptr) continue;
    auto pr = src->progress.find(c.partition);
    if (pr != src->progress.end()) pr->second.committed = std::max(pr->second.committed, c.offset);
  }
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

}  // namespace mq::consume
