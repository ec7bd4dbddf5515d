// Truncation of a partition's log (segment.md §6.4-§6.6, R38, R40, R59).
#include "storage/truncation.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "mq/replica_checkpoint.h"
#include "storage/segment.h"

namespace mq {

namespace {

// Wall-clock ms since the epoch: what a truncation history entry's time is.
int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<CompletedIntent> CompleteTruncateIntent(const PartitionDir& d, bool listed,
                                               std::vector<int64_t>* segments,
                                               std::vector<int64_t>* snapshots,
                                               RecoveryReport* report) {
  const int fd = d.fd();
  Result<std::optional<int64_t>> intent = std::optional<int64_t>();
  if (listed) intent = ReadTruncateIntent(fd, d.fs, d.dir);
  if (!intent) return intent.error();
  CompletedIntent done;
  done.intent = intent->has_value();
  if (!*intent || segments->empty()) return done;
  auto cut = PlanCut(d, *segments, **intent);
  if (!cut) return cut.error();
  MQ_RETURN_IF_ERROR(ApplyPlannedCut(d, *segments, *cut));
  report->repaired.push_back(
      {format::kTruncateIntentName, 0, "R40",
       fmt::format("an interrupted truncation to offset {} was completed", cut->end)});
  done.truncated_to = cut->end;
  // The leader epochs that start at or past the cut went with its batches
  // (a writer loading the checkpoint drops only those past the log end:
  // one at it may be an epoch begun with nothing in it yet).
  auto epochs_file = LeaderEpochCache::Load(fd, d.fs);
  if (epochs_file) {
    MQ_RETURN_IF_ERROR(epochs_file->TruncateFromEndAndStore(cut->end, fd, d.fs));
  } else if (epochs_file.error().code() != Code::kNotFound) {
    return epochs_file.error();
  }
  snapshots->clear();
  auto list = ListSegments(fd, d.fs, snapshots);
  if (!list) return list.error();
  *segments = std::move(*list);
  return done;
}

Status LowerHighWatermarkTo(const PartitionDir& d, int64_t end, RecoveryReport* report) {
  auto partition = PartitionOfDirectory(d.dir);
  if (!partition) return Status::Ok();  // no high watermark outside <topic>-<n>
  auto lowered = LowerHighWatermark(d.fd(), partition->first, partition->second, end, d.fs);
  if (!lowered) return lowered.error();
  if (*lowered && report != nullptr)
    report->repaired.push_back(
        {kHighWatermarkFile, 0, "R38",
         fmt::format("high watermark {} above the log end {} (appends it counted were lost, or a "
                     "truncation was interrupted); lowered to {}",
                     **lowered, end, end)});
  return Status::Ok();
}

// R59: in the truncation history before anything is cut, so that no
// consumer finds the cut log without it (a failure from here on leaves an
// entry for a cut not made, or not completed yet: a group then reads from
// there again, never skips). The entry names the rewrites value this
// truncation publishes (§9.4): a reader that reads it before the
// publication knows it is under way, one positioned at an earlier value
// that it was made since. R38: the high watermark never counts what goes;
// lowered (fsynced) before anything is cut, so no crash leaves it above the
// new end where other records may follow (an interrupted cut lowers it at
// the next open).
Status WriteDownCut(const PartitionDir& d, const LogCut& cut, uint32_t rewrites) {
  MQ_RETURN_IF_ERROR(
      RecordTruncation(d.fd(), d.fs, d.dir, cut.end, WallClockMs(), rewrites, d.sync()));
  MQ_RETURN_IF_ERROR(WriteTruncateIntent(d.fd(), d.fs, cut.end, d.sync()));
  return LowerHighWatermarkTo(d, cut.end, nullptr);
}

Status RecordLostTail(const PartitionDir& d, int64_t end, uint32_t rewrites) {
  return RecordTruncation(d.fd(), d.fs, d.dir, end, WallClockMs(), rewrites, d.sync());
}

Status CheckCutEpoch(PartitionView* view, int64_t offset, int32_t leader_epoch) {
  if (leader_epoch < 0) return Status::Ok();
  PartitionView& v = *view;
  MQ_RETURN_IF_ERROR(v.EpochsForReplication());
  auto latest = v.epochs.cache().latest();
  const int32_t newer = std::max(latest ? latest->epoch : -1, v.epochs.fence());
  if (newer > leader_epoch)
    return Status(Code::kFenced,
                  fmt::format("{}: truncation to {} decided in leader epoch {}, and the log is "
                              "now in epoch {} (R56): nothing cut",
                              v.dir, offset, leader_epoch, newer));
  return Status::Ok();
}

Status DropEpochsFrom(PartitionView* view, int64_t offset) {
  PartitionView& v = *view;
  MQ_RETURN_IF_ERROR(v.EpochsForReplication());
  auto latest = v.epochs.cache().latest();
  if (!latest || latest->start_offset < offset) return Status::Ok();
  MQ_RETURN_IF_ERROR(v.epochs.cache().TruncateFromEndAndStore(offset, v.fd(), v.fs));
  return v.Publish();
}

Status CommitCut(PartitionView* view, const LogCut& cut) {
  PartitionView& v = *view;
  Status s = WriteDownCut(v, cut, v.fields.rewrites + 1);
  if (!s.ok()) {
    // The entry may be on disk: its rewrites value is published all the
    // same, so that no reader holds at its cut waiting for it (readers
    // then go back to it: at least once, as for any entry of a cut not
    // made).
    v.fields.rewrites++;
    (void)v.Publish();
    return s;
  }
  // Publish first: readers stop short of what is about to go.
  v.fields.rewrites++;
  v.fields.log_end_offset = cut.end;
  v.fields.end_segment_base = cut.keep;
  v.fields.end_position = cut.position;
  v.fields.recovery_point = std::min(v.fields.recovery_point, cut.end);
  return v.Publish();
}

Status ApplyCommittedCut(PartitionView* view, const LogCut& cut) {
  PartitionView& v = *view;
  v.active.reset();
  MQ_RETURN_IF_ERROR(ApplyPlannedCut(v, v.segments, cut));
  while (v.segments.back() > cut.keep) v.segments.pop_back();
  MQ_RETURN_IF_ERROR(v.producers.Rebuild(v, v.segments, v.fields));
  MQ_RETURN_IF_ERROR(v.OpenActive(cut.keep, cut.position));
  // The epochs that start at or past the new end went with its batches
  // (loading drops only those past it).
  MQ_RETURN_IF_ERROR(v.LoadEpochs());
  if (v.epochs.loaded())
    MQ_RETURN_IF_ERROR(v.epochs.cache().TruncateFromEndAndStore(cut.end, v.fd(), v.fs));
  return FinishCut(v);
}

}  // namespace mq
