// The producer table of a partition writer: replay and snapshot policy
// (producer.md §10, P7).
#include "storage/producer_state_manager.h"

#include <algorithm>
#include <climits>
#include <optional>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/segment.h"
#include "storage/recovery.h"
#include "storage/segment.h"

namespace mq {

namespace {

Result<uint64_t> SegmentSize(const PartitionDir& d, int seg_dir, int64_t base) {
  auto f = d.fs->Open(seg_dir, SegmentFileName(base, format::kLogSuffix), FileSystem::kRead);
  if (!f) return f.error();
  return (*f)->Size();
}

// R96: the directory of rolled segment `base`, which may be tiered; the
// listing that says so is made once, when a rolled segment is read at all.
Result<int> RolledSegmentDir(const PartitionDir& d, std::optional<PartitionListing>* places,
                             int64_t base) {
  if (!*places) {
    places->emplace();
    auto listed = ListSegments(d.fd(), d.fs, nullptr, &**places);
    if (!listed) return listed.error();
  }
  return (*places)->DirOf(base, d.fd());
}

}  // namespace

// Replays into the table every batch from (from_base, from_pos) to the
// committed end.
Status ProducerStateManager::ReplayRange(const PartitionDir& d,
                                         const std::vector<int64_t>& segments,
                                         const StateFields& fields, int64_t from_base,
                                         uint64_t from_pos) {
  std::optional<PartitionListing> places;
  for (int64_t base : segments) {
    if (base < from_base) continue;
    if (base > fields.end_segment_base) break;
    uint64_t to = base == fields.end_segment_base ? fields.end_position : UINT64_MAX;
    int seg_dir = d.fd();
    if (to == UINT64_MAX) {
      auto dir = RolledSegmentDir(d, &places, base);
      if (!dir) return dir.error();
      seg_dir = *dir;
      auto s = SegmentSize(d, seg_dir, base);
      if (!s) return s.error();
      to = *s;
    }
    MQ_RETURN_IF_ERROR(ForEachHeader(seg_dir, d.fs, d.config.limits, base,
                                     base == from_base ? from_pos : 0, to,
                                     [&](const BatchHeader& h, uint64_t) {
                                       if (h.has_producer_id()) table_.Replay(h);
                                     }));
  }
  return Status::Ok();
}

Status ProducerStateManager::Rebuild(const PartitionDir& d, const std::vector<int64_t>& segments,
                                     const StateFields& fields, File* active_log,
                                     const std::vector<int64_t>* snapshots) {
  auto from = table_.LoadSnapshot(d.fd(), fields.log_end_offset, snapshots, d.fs);
  if (!from) return from.error();
  int64_t start = *from;
  // Nothing after the snapshot: the table is the snapshot's (no snapshot
  // at all on an empty log is the same, empty table).
  snapshot_at_ = start == fields.log_end_offset ? start : -1;
  snapshot_segment_ = -1;
  std::optional<PartitionListing> places;
  for (int64_t base : segments) {
    if (base > fields.end_segment_base) break;
    const bool is_active = base == fields.end_segment_base;
    uint64_t to = UINT64_MAX;
    int seg_dir = d.fd();
    if (is_active) {
      to = fields.end_position;
    } else {
      // Skip whole segments below the snapshot: the next one starts at or
      // before it.
      auto next = std::upper_bound(segments.begin(), segments.end(), base);
      if (next != segments.end() && *next <= start) continue;
      auto dir = RolledSegmentDir(d, &places, base);
      if (!dir) return dir.error();
      seg_dir = *dir;
      auto s = SegmentSize(d, seg_dir, base);
      if (!s) return s.error();
      to = *s;
    }
    // The snapshot is in the active segment: note where its replay starts.
    const bool note = is_active && start >= base;
    uint64_t first_after = to;
    // The segment holding the snapshot is read from the batch before it
    // (offset index), the later ones whole.
    MQ_RETURN_IF_ERROR(ForEachHeaderFrom(seg_dir, d.fs, d.config.limits, base,
                                         is_active ? active_log : nullptr, start, to,
                                         [&](const BatchHeader& h, uint64_t pos) {
                                           if (h.base_offset < start) return;
                                           if (first_after == to) first_after = pos;
                                           if (h.has_producer_id()) table_.Replay(h);
                                         }));
    if (note) {
      snapshot_segment_ = base;
      snapshot_pos_ = std::min<uint64_t>(first_after, to);
    }
  }
  loaded_ = true;
  return Status::Ok();
}

Status ProducerStateManager::CatchUp(const PartitionDir& d, const std::vector<int64_t>& segments,
                                     const StateFields& old, const StateFields& now) {
  // (A table not built yet is built from the log as it will be then.)
  if (!loaded_) return Status::Ok();
  const bool same_history =
      old.rewrites == now.rewrites &&
      std::binary_search(segments.begin(), segments.end(), old.end_segment_base) &&
      old.log_end_offset <= now.log_end_offset;
  if (same_history) return ReplayRange(d, segments, now, old.end_segment_base, old.end_position);
  return Rebuild(d, segments, now);
}

Status ProducerStateManager::Ensure(const PartitionDir& d, const std::vector<int64_t>& segments,
                                    const StateFields& fields, File* active_log) {
  if (loaded_) return Status::Ok();
  return Rebuild(d, segments, fields, active_log);
}

Status ProducerStateManager::SnapshotAtRoll(const PartitionDir& d,
                                            const std::vector<int64_t>& segments,
                                            const StateFields& fields, File* active_log,
                                            int64_t base) {
  MQ_RETURN_IF_ERROR(Ensure(d, segments, fields, active_log));
  MQ_RETURN_IF_ERROR(table_.WriteSnapshot(d.fd(), base, true, d.fs));
  NoteSnapshot(base, base, 0);
  return Status::Ok();
}

bool ProducerStateManager::TableWanted(const StateFields& fields, size_t segment_count) const {
  return !loaded_ && (fields.end_position >= format::kSnapshotReplayBytes ||
                      (newest_snapshot_ < fields.end_segment_base && segment_count > 1));
}

// Without fsync at close the snapshot is not fsynced either (producer.md
// §10.2, P7: derived data, a lost one costs only a longer replay).
bool ProducerStateManager::SnapshotWanted(const StateFields& fields) const {
  const bool short_replay = snapshot_segment_ == fields.end_segment_base &&
                            fields.end_position - snapshot_pos_ < format::kSnapshotReplayBytes;
  return loaded_ && snapshot_at_ != fields.log_end_offset && !short_replay;
}

// (An active segment of 256 KiB or more appended to a little at a time
// asks its offset index whether the replay after the newest snapshot is
// short.)
bool ProducerStateManager::SnapshotMayBeDue(const StateFields& fields, size_t segment_count,
                                            LogSegment* active) const {
  if (SnapshotWanted(fields)) return true;
  if (!TableWanted(fields, segment_count)) return false;
  if (newest_snapshot_ < fields.end_segment_base) return true;
  auto short_replay =
      active->AfterIsShort(newest_snapshot_, fields.end_position, format::kSnapshotReplayBytes);
  return !(short_replay && *short_replay);
}

Status ProducerStateManager::SnapshotAtClose(const PartitionDir& d, const StateFields& fields,
                                             bool sync) {
  MQ_RETURN_IF_ERROR(table_.WriteSnapshot(d.fd(), fields.log_end_offset, sync, d.fs));
  NoteSnapshot(fields.log_end_offset, fields.end_segment_base, fields.end_position);
  return Status::Ok();
}

Result<std::optional<AppendResult>> AppendCheck::Check(const BatchHeader& h, size_t at) {
  if (!h.has_producer_id() || h.is_control()) return std::optional<AppendResult>();
  std::optional<AppendResult> duplicate;
  auto seen = in_call_.find(h.producer_id);
  if (seen != in_call_.end()) {
    int32_t want = seen->second.second == INT32_MAX ? 0 : seen->second.second + 1;
    if (h.producer_epoch != seen->second.first || h.base_sequence != want)
      return Status(Code::kOutOfOrder,
                    fmt::format("append: producer {} batch at {}: sequence {} after {}",
                                h.producer_id, at, h.base_sequence, seen->second.second));
  } else {
    auto check = table_.CheckAppend(h);
    if (!check) return check.error();
    duplicate = *check;
  }
  if (!duplicate) in_call_[h.producer_id] = {h.producer_epoch, h.last_sequence()};
  return duplicate;
}

}  // namespace mq
