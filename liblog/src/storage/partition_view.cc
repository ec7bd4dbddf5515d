// A partition writer's view of its partition.
#include "storage/partition_view.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "storage/segment.h"

namespace mq {

int64_t PartitionView::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status PartitionView::OpenActive(int64_t base, uint64_t size) {
  auto opened = LogSegment::Open(fs, fd(), config, base, size, fields.log_end_offset);
  if (!opened) return opened.error();
  active = std::move(*opened);
  return Status::Ok();
}

Status PartitionView::Publish() {
  fields.boot_id = CurrentBootId();  // R27: the committed end is this boot's
  const bool epochs_current = epochs.CurrentAt(generation);
  generation = state.Publish(fields);
  if (epochs_current) epochs.Published(generation);  // ours: still current
  return Status::Ok();
}

Status PartitionView::Follow(uint32_t gen, const StateFields& now) {
  StateFields old = fields;
  fields = now;
  auto list = ListSegments(fd(), fs);
  if (!list) return list.error();
  segments = std::move(*list);
  // Segments past the committed end were started by a writer that died
  // before publishing them: never acknowledged.
  while (!segments.empty() && segments.back() > fields.end_segment_base) {
    (void)LogSegment::Remove(fs, fd(), segments.back());
    segments.pop_back();
    dir_dirty = true;
  }
  if (segments.empty() || segments.back() != fields.end_segment_base)
    return Status(Code::kNotFound, fmt::format("{}: segment {} of the committed end is missing",
                                               dir, fields.end_segment_base));
  MQ_RETURN_IF_ERROR(producers.CatchUp(*this, segments, old, fields));
  MQ_RETURN_IF_ERROR(OpenActive(fields.end_segment_base, fields.end_position));
  generation = gen;
  return Status::Ok();
}

Status PartitionView::CutUnacknowledged() {
  if (!state.appending() && !stale_check) return Status::Ok();
  auto size = active->log()->Size();
  if (!size) return size.error();
  if (*size > fields.end_position) MQ_RETURN_IF_ERROR(active->Truncate(fields.end_position));
  state.SetAppending(false);
  stale_check = false;
  return Status::Ok();
}

Status PartitionView::Roll() {
  MQ_RETURN_IF_ERROR(active->Seal(config.durability == Durability::kEveryBatch));
  int64_t base = fields.log_end_offset;
  MQ_RETURN_IF_ERROR(producers.SnapshotAtRoll(*this, segments, fields, active->log(), base));
  auto created = LogSegment::Create(fs, fd(), config, base);
  if (!created) return created.error();
  active = std::move(*created);
  dir_dirty = true;
  segments.push_back(base);
  fields.end_segment_base = base;
  fields.end_position = 0;
  return Status::Ok();
}

// R96: a rolled segment whose files are not in the partition directory is
// skipped when it is tiered (its copy was fsynced before it was published,
// R94); the listing that says so is made only then.
Status PartitionView::SyncRolled(int64_t base, std::optional<PartitionListing>* places) {
  Status s = LogSegment::SyncFiles(fs, fd(), base);
  if (s.code() != Code::kNotFound) return s;
  if (!*places) {
    places->emplace();
    auto listed = ListSegments(fd(), fs, nullptr, &**places);
    if (!listed) return listed.error();
  }
  return (*places)->is_tiered(base) ? Status::Ok() : s;
}

Status PartitionView::SyncAll() {
  std::optional<PartitionListing> places;
  for (int64_t base : segments) {
    auto next = std::upper_bound(segments.begin(), segments.end(), base);
    if (next != segments.end() && *next <= fields.recovery_point) continue;
    MQ_RETURN_IF_ERROR(base == fields.end_segment_base ? active->Sync()
                                                       : SyncRolled(base, &places));
  }
  MQ_RETURN_IF_ERROR(fs->SyncDir(fd()));
  dir_dirty = false;
  last_sync_ms = NowMs();
  return Status::Ok();
}

}  // namespace mq
