// Recovery of a partition at its writer's open (format-spec/segment.md §12).
#include "storage/log_loader.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/segment.h"
#include "storage/recovery.h"
#include "storage/segment.h"
#include "storage/truncation.h"

namespace mq {

namespace {

class LogLoader {
 public:
  LogLoader(PartitionView* view, RecoveryReport* report) : v_(*view), report_(report) {}

  Result<LoadedLog> Load(bool recreated);

 private:
  Result<bool> OpenSameBoot(const StateFields& prev, std::vector<int64_t> list,
                            const std::vector<int64_t>& snapshots);
  Status CutUnpublished(const StateFields& prev, File* active_log, uint64_t size,
                        std::vector<int64_t>* list);
  Status CheckRolledIndexes(const std::vector<int64_t>& list);
  Status OpenCheckedActive(std::unique_ptr<File> active_log, uint64_t size);
  void ReportRebuiltIndex(int64_t base);
  void SetSegments(std::vector<int64_t> local);
  Status RecoverFromLog(const Result<StateFields>& old, bool recreated,
                        const std::vector<int64_t>& list, const std::vector<int64_t>& snapshots,
                        const CompletedIntent& intent);
  Result<uint32_t> RewritesAfterRebuild(uint32_t rewrites);

  PartitionView& v_;
  RecoveryReport* report_;
  // R96: the tiered segments, set apart: recovery checks and repairs the
  // local ones only (a tiered segment was sealed when it moved, R95, and
  // its copy fsynced before it was published, R94), while the log holds both.
  std::vector<int64_t> tiered_;
};

void LogLoader::SetSegments(std::vector<int64_t> local) {
  v_.segments.clear();
  std::merge(tiered_.begin(), tiered_.end(), local.begin(), local.end(),
             std::back_inserter(v_.segments));
}

Result<LoadedLog> LogLoader::Load(bool recreated) {
  std::vector<int64_t> snapshots;
  PartitionListing listed;
  auto list = ListSegments(v_.fd(), v_.fs, &snapshots, &listed);
  if (!list) return list.error();
  tiered_ = listed.tiered;
  std::erase_if(*list, [&](int64_t base) { return listed.is_tiered(base); });
  // R40: an interrupted truncation is completed before anything else, and
  // the log it leaves is validated as after a crash.
  auto intent = CompleteTruncateIntent(v_, listed.truncate_intent, &*list, &snapshots, report_);
  if (!intent) return intent.error();
  LoadedLog loaded;
  // The same goes for the leader epochs' checkpoint, unless the truncation
  // changed them.
  loaded.checkpoint_listed = listed.epoch_checkpoint || intent->intent;
  auto old = v_.state.Read();
  if (old && !recreated && old->same_boot() && !list->empty() && !intent->truncated_to) {
    auto done = OpenSameBoot(*old, *list, snapshots);
    if (!done) return done.error();
    if (*done) return loaded;
    report_->repaired.push_back(
        {SegmentFileName(old->end_segment_base, format::kLogSuffix), old->end_position, "R27",
         fmt::format("the log ends before the committed end (segment {}, position {}) published "
                     "on this boot; validated from the recovery point",
                     old->end_segment_base, old->end_position)});
  }
  MQ_RETURN_IF_ERROR(RecoverFromLog(old, recreated, *list, snapshots, *intent));
  return loaded;
}

// R27: the committed end was published on this boot, so it is
// authoritative. Everything below it was validated when it was appended and
// its pages are intact; everything past it was never published: segment
// files above endSegmentBase are removed and the active segment is cut to
// endPosition (never adopted, never re-validated). The cost is independent
// of the bytes appended since the last fsync. Returns false (nothing
// changed) when the log does not hold the committed end: that is damage,
// left to the full recovery of §12, which reports it.
Result<bool> LogLoader::OpenSameBoot(const StateFields& prev, std::vector<int64_t> list,
                                     const std::vector<int64_t>& snapshots) {
  if (!std::binary_search(list.begin(), list.end(), prev.end_segment_base)) return false;
  std::string name = SegmentFileName(prev.end_segment_base, format::kLogSuffix);
  auto active_log = v_.fs->Open(v_.fd(), name, FileSystem::kReadWrite);
  if (!active_log) return active_log.error();
  // Just opened, under the lock: its size then is its size now.
  auto info = (*active_log)->StatAtOpen();
  if (!info) return info.error();
  const uint64_t size = info->size;
  if (size < prev.end_position) return false;
  MQ_RETURN_IF_ERROR(CutUnpublished(prev, active_log->get(), size, &list));
  MQ_RETURN_IF_ERROR(CheckRolledIndexes(list));
  SetSegments(std::move(list));
  v_.fields = prev;
  v_.fields.rewrites = prev.rewrites + 1;
  MQ_RETURN_IF_ERROR(OpenCheckedActive(std::move(*active_log), size));
  // Everything below the committed end was checked when it was appended:
  // the producer table is built from it when first needed (producer.md
  // §10.2, P7). Snapshots past the end are removed now, before anything is
  // appended past them.
  v_.producers.Defer(
      ProducerStateTable::DropSnapshotsPast(v_.fd(), v_.fields.log_end_offset, snapshots, v_.fs));
  v_.stale_check = false;
  v_.state.SetAppending(false);
  MQ_RETURN_IF_ERROR(v_.Publish());
  return true;
}

// R27: the segments past the committed end go, the active one is cut to it.
Status LogLoader::CutUnpublished(const StateFields& prev, File* active_log, uint64_t size,
                                 std::vector<int64_t>* list) {
  while (list->back() > prev.end_segment_base) {
    MQ_RETURN_IF_ERROR(LogSegment::Remove(v_.fs, v_.fd(), list->back()));
    report_->repaired.push_back(
        {SegmentFileName(list->back(), format::kLogSuffix), 0, "unpublished-tail",
         "R27: segment past the committed end was never published; removed"});
    list->pop_back();
    v_.dir_dirty = true;
  }
  if (size > prev.end_position) {
    MQ_RETURN_IF_ERROR(active_log->Truncate(prev.end_position));
    report_->bytes_truncated += size - prev.end_position;
    report_->repaired.push_back(
        {SegmentFileName(prev.end_segment_base, format::kLogSuffix), prev.end_position,
         "unpublished-tail",
         fmt::format("R27: {} bytes past the committed end were never published; cut",
                     size - prev.end_position)});
  }
  return Status::Ok();
}

void LogLoader::ReportRebuiltIndex(int64_t base) {
  ++report_->indexes_rebuilt;
  report_->repaired.push_back({SegmentFileName(base, format::kIndexSuffix), 0, "index-rebuilt",
                               "R23: index inconsistent with its log; rebuilt"});
}

// R25's cheap checks of the rolled segments' indexes; R23 rebuilds.
Status LogLoader::CheckRolledIndexes(const std::vector<int64_t>& list) {
  for (size_t i = 0; i + 1 < list.size(); ++i) {
    auto looks = IndexLooksRight(v_.fd(), v_.config, list[i], list[i + 1]);
    if (!looks) return looks.error();
    if (*looks) continue;
    auto f = v_.fs->Open(v_.fd(), SegmentFileName(list[i], format::kLogSuffix), FileSystem::kRead);
    if (!f) return f.error();
    auto rolled_size = (*f)->Size();
    if (!rolled_size) return rolled_size.error();
    MQ_RETURN_IF_ERROR(RebuildIndexes(v_.fd(), v_.fs, v_.config, list[i], *rolled_size, true));
    ReportRebuiltIndex(list[i]);
  }
  return Status::Ok();
}

// The active segment's indexes are derived data: the cheap checks of R25
// (entries past the committed end, left by a writer that died before
// publishing, are dropped), and a rebuild (R23) when they fail.
Status LogLoader::OpenCheckedActive(std::unique_ptr<File> active_log, uint64_t size) {
  const StateFields& f = v_.fields;
  auto checked = LogSegment::Open(v_.fs, v_.fd(), v_.config, f.end_segment_base, f.end_position,
                                  f.log_end_offset, std::move(active_log), size);
  if (!checked) return checked.error();
  v_.active = std::move(*checked);
  if (v_.active) return Status::Ok();
  MQ_RETURN_IF_ERROR(
      RebuildIndexes(v_.fd(), v_.fs, v_.config, f.end_segment_base, f.end_position, false));
  ReportRebuiltIndex(f.end_segment_base);
  return v_.OpenActive(f.end_segment_base, f.end_position);
}

// A state file rebuilt (R24) or recovered starts its counter past every
// rewrites value the truncation history names (§6.6, §9.4): a reader never
// takes a cut published before for one under way. A history that cannot be read (R59)
// fails the open, as it fails the next truncation.
Result<uint32_t> LogLoader::RewritesAfterRebuild(uint32_t rewrites) {
  auto history = ReadTruncations(v_.fd(), v_.fs, v_.dir);
  if (!history) return history.error();
  if (!history->empty() && history->back().rewrites &&
      RewritesAfter(*history->back().rewrites, rewrites))
    rewrites = *history->back().rewrites;
  return rewrites;
}

// §12: the log validated from the recovery point (from the start when the
// state file is not trusted), and the state rebuilt from what it holds.
Status LogLoader::RecoverFromLog(const Result<StateFields>& old, bool recreated,
                                 const std::vector<int64_t>& list,
                                 const std::vector<int64_t>& snapshots,
                                 const CompletedIntent& intent) {
  // R24: a missing or invalid state file is rebuilt from the log (worth a
  // report only when there is a log to rebuild it from).
  if (!old)
    report_->repaired.push_back(
        {kStateFileName, old.error().position(), "R24",
         "state file invalid (" + old.error().message() + "); rebuilt from the log"});
  else if (recreated && !list.empty())
    report_->repaired.push_back(
        {kStateFileName, 0, "R24", "state file missing; rebuilt from the log"});
  StateFields prev = old ? *old : StateFields{};
  const bool trusted = old.has_value() && !recreated;
  const auto& truncated_to = intent.truncated_to;
  if (truncated_to) prev.recovery_point = std::min(prev.recovery_point, *truncated_to);
  // R88: a power loss may have taken a rolled segment's unsynced tail; on
  // the boot that published the state, nothing was lost.
  const bool after_reboot = !trusted || !old->same_boot();
  auto recovered = RecoverLog(v_.fd(), v_.config, list, trusted ? prev.recovery_point : 0,
                              trusted ? prev.log_start_offset : 0, after_reboot, report_);
  if (!recovered) return recovered.error();
  // R59: a recovery that leaves less log than the state file had published
  // (a machine crash lost page-cache writes, or a damaged tail was cut) cut
  // records consumers may have read. (An interrupted truncation was
  // recorded when it began.)
  // The counter goes on from the truncation history's when that is ahead,
  // trusted state file or not: a power loss can keep an older state file
  // page beside a truncation record that was synced (§6.6).
  Result<uint32_t> rewrites = RewritesAfterRebuild(prev.rewrites);
  if (!rewrites) return rewrites.error();
  if (old && !truncated_to && recovered->log_end_offset < old->log_end_offset)
    MQ_RETURN_IF_ERROR(RecordLostTail(v_, recovered->log_end_offset, *rewrites + 1));
  StateFields& f = v_.fields;
  SetSegments(recovered->segments);
  f.rewrites = *rewrites + 1;
  f.log_end_offset = recovered->log_end_offset;
  f.end_segment_base = v_.segments.back();
  f.end_position = recovered->active_size;
  f.log_start_offset = std::clamp(trusted ? prev.log_start_offset : v_.segments.front(),
                                  v_.segments.front(), recovered->log_end_offset);
  f.recovery_point = trusted ? std::min(prev.recovery_point, recovered->log_end_offset) : 0;
  MQ_RETURN_IF_ERROR(LowerHighWatermarkTo(v_, f.log_end_offset, report_));
  MQ_RETURN_IF_ERROR(v_.producers.Rebuild(v_, v_.segments, f, nullptr, &snapshots));
  MQ_RETURN_IF_ERROR(v_.OpenActive(f.end_segment_base, f.end_position));
  v_.stale_check = false;  // recovery cut the tail already
  v_.state.SetAppending(false);
  MQ_RETURN_IF_ERROR(v_.Publish());
  return intent.intent ? FinishCut(v_) : Status::Ok();
}

}  // namespace

Result<LoadedLog> LoadLog(PartitionView* view, RecoveryReport* report, bool recreated) {
  return LogLoader(view, report).Load(recreated);
}

Status OpenLog(PartitionView* view, RecoveryReport* report) {
  bool recreated = false;
  auto state =
      StateFile::OpenForWrite(view->fd(), view->fs, StateFields{}, &recreated, view->sync());
  if (!state) return state.error();
  view->state = std::move(*state);
  auto loaded = LoadLog(view, report, recreated);
  if (!loaded) return loaded.error();
  // A writer that stamps no epoch loads them only from a checkpoint
  // (EpochState::Load); the loader's listing, under the lock, tells whether
  // there is one.
  if (view->config.leader_epoch >= 0 || loaded->checkpoint_listed)
    MQ_RETURN_IF_ERROR(view->LoadEpochs());
  return Status::Ok();
}

Status CatchUp(PartitionView* view) {
  PartitionView& v = *view;
  uint32_t gen = 0;
  auto now = v.state.Read(&gen);
  if (!now) {
    RecoveryReport ignored;
    auto loaded = LoadLog(view, &ignored, false);
    return loaded ? Status::Ok() : loaded.error();
  }
  if (gen != v.generation && *now == v.fields && v.active) {
    // Published since with the committed fields this writer holds (another
    // writer raised the high watermark, stored an epoch fence or began an
    // epoch without a batch): the log is the one this writer has open.
    // Every change of the log's bytes or segments changes the fields (an
    // append its end, a roll its end segment, a deletion its start, a
    // truncation or a writer's recovery `rewrites`). The epochs are still
    // read again (FreshEpochs: they are as of the older generation).
    v.generation = gen;
  } else if (gen != v.generation || !(*now == v.fields)) {
    MQ_RETURN_IF_ERROR(v.Follow(gen, *now));
  }
  return v.CutUnacknowledged();
}

}  // namespace mq
