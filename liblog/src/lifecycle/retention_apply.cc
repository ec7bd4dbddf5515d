// Two-phase segment deletion (format-spec/retention.md §2-§3, R73, R76, R77).
#include "lifecycle/retention_apply.h"

#include <algorithm>

#include <fmt/format.h>

#include "format/format.h"
#include "storage/log_segment.h"
#include "storage/segment.h"

namespace mq {

namespace {

// R73: the state file's bytes on disk, so that the log start published
// survives a machine crash before any segment file is renamed.
Status SyncStateFile(PartitionView* w) {
  auto f = w->fs->Open(w->fd(), format::kStateFileName, FileSystem::kRead);
  if (!f) return f.error();
  return (*f)->Sync();
}

// R77: renames the files of segment `base` to `<name>.deleted`, in the
// tier directory for a tiered segment (R97); a file already gone is skipped.
Status RenameDeleted(PartitionView* w, const PartitionListing& places, int64_t base) {
  const int dir = places.DirOf(base, w->fd());
  for (const std::string& name : LogSegment::FileNames(base)) {
    Status s = w->fs->Rename(dir, name, name + format::kDeletedSuffix);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  return Status::Ok();
}

// R92: a follower behind its leader's log start: the producer table of
// its old log carried to a snapshot at `offset` (R111), a new empty active
// segment at `offset`, published as the log's start and end (durable
// before any file is renamed, as R73), then every older segment renamed
// `.deleted`. A crash before the publication leaves the old log (the new
// segment past the committed end is removed at the next open, the
// snapshot past its end at the next load); after it, segments wholly
// below the log start, which retention deletes (R73).
Status StartOver(PartitionView* w, int64_t offset) {
  StateFields& f = w->fields;
  MQ_RETURN_IF_ERROR(w->producers.SnapshotAtRoll(*w, w->segments, f, w->active->log(), offset));
  MQ_RETURN_IF_ERROR(w->active->Seal(w->sync()));
  auto created = LogSegment::Create(w->fs, w->fd(), w->config, offset);
  if (!created) return created.error();
  if (w->sync()) MQ_RETURN_IF_ERROR(w->fs->SyncDir(w->fd()));
  w->active = std::move(*created);
  std::vector<int64_t> old = std::move(w->segments);
  w->segments = {offset};
  f.log_end_offset = offset;
  f.end_segment_base = offset;
  f.end_position = 0;
  f.log_start_offset = offset;
  f.recovery_point = offset;
  MQ_RETURN_IF_ERROR(w->epochs.DropBefore(*w, offset, offset, w->generation));
  MQ_RETURN_IF_ERROR(w->Publish());
  if (w->sync()) MQ_RETURN_IF_ERROR(SyncStateFile(w));
  PartitionListing places;  // R97: where each old segment's files are
  MQ_RETURN_IF_ERROR(ListSegments(w->fd(), w->fs, nullptr, &places).status());
  bool tiered = false;
  for (int64_t base : old) {
    MQ_RETURN_IF_ERROR(RenameDeleted(w, places, base));
    tiered = tiered || places.is_tiered(base);
  }
  if (tiered) MQ_RETURN_IF_ERROR(w->fs->SyncDir(places.tier_fd.get()));
  return w->fs->SyncDir(w->fd());
}

}  // namespace

Status RetireSegmentsBefore(PartitionView* w, int64_t offset, const SegmentDeletion& how) {
  StateFields& f = w->fields;
  if (how.start_over && offset > f.log_end_offset) return StartOver(w, offset);
  if (how.roll_active && offset >= f.log_end_offset && f.end_position > 0 &&
      f.log_end_offset > f.end_segment_base) {
    // R76: the active segment qualified: a new (empty) one takes its place.
    MQ_RETURN_IF_ERROR(w->Roll());
    if (w->sync()) MQ_RETURN_IF_ERROR(w->fs->SyncDir(w->fd()));
    w->dir_dirty = false;
    MQ_RETURN_IF_ERROR(w->Publish());
  }
  size_t n = 0;  // segments to delete: all their records are below `offset`
  while (n + 1 < w->segments.size() && w->segments[n + 1] <= offset) ++n;
  // Never below the first segment (R73): one removed by hand left the
  // state's log start behind.
  int64_t start = std::max(f.log_start_offset, w->segments.empty() ? 0 : w->segments.front());
  if (n > 0) start = std::max(start, w->segments[n]);
  if (how.exact_start) start = std::max(start, std::min(offset, f.log_end_offset));
  if (n == 0 && start == f.log_start_offset) return Status::Ok();
  f.log_start_offset = start;
  MQ_RETURN_IF_ERROR(w->epochs.DropBefore(*w, f.log_start_offset, f.log_end_offset, w->generation));
  MQ_RETURN_IF_ERROR(w->Publish());
  if (w->sync()) MQ_RETURN_IF_ERROR(SyncStateFile(w));
  PartitionListing places;  // R97: where each segment's files are
  if (n > 0) MQ_RETURN_IF_ERROR(ListSegments(w->fd(), w->fs, nullptr, &places).status());
  for (size_t i = 0; i < n; ++i) MQ_RETURN_IF_ERROR(RenameDeleted(w, places, w->segments[i]));
  const bool tiered = n > 0 && places.is_tiered(w->segments[0]);
  w->segments.erase(w->segments.begin(), w->segments.begin() + static_cast<ptrdiff_t>(n));
  if (tiered) MQ_RETURN_IF_ERROR(w->fs->SyncDir(places.tier_fd.get()));
  return n > 0 ? w->fs->SyncDir(w->fd()) : Status::Ok();
}

}  // namespace mq
