// Retention's decisions (format-spec/retention.md, R73-R78): the segments
// as retention sees them, the plan, what it costs consumer groups, and the
// purge of `.deleted` files (R77).
#include "mq/retention.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"
#include "storage/log_segment.h"
#include "storage/segment.h"
#include "storage/state_file.h"

namespace mq {

int64_t RetentionSegment::clock_ms() const {
  if (max_timestamp < 0) return append_time_ms;
  return std::min(max_timestamp, append_time_ms);
}

const char* RetentionReasonName(RetentionReason r) {
  switch (r) {
    case RetentionReason::kBelowStart:
      return "below-start";
    case RetentionReason::kTime:
      return "time";
    case RetentionReason::kSize:
      return "size";
    case RetentionReason::kRecords:
      return "delete-records";
  }
  return "?";
}

uint64_t RetentionPlan::bytes() const {
  uint64_t n = 0;
  for (const auto& d : deletions) n += d.segment.bytes;
  return n;
}

Result<RetentionLog> ListRetentionSegments(const std::string& dir, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  RetentionLog log;
  log.dir = dir;
  PartitionListing places;  // R97: tiered segments are retention's too
  auto bases = ListSegments(dfd->get(), fs, nullptr, &places);
  if (!bases) return bases.error();
  log.tier_dir = places.tier_dir;
  auto state = StateFile::OpenForRead(dfd->get(), fs);
  if (!state) {
    if (bases->empty() && state.error().code() == Code::kNotFound) return log;
    return Status(state.error().code(),
                  fmt::format("{}: retention needs the partition's state file (open it with a "
                              "writer first): {}",
                              dir, state.error().message()));
  }
  auto fields = state->Read();
  if (!fields) return fields.error();
  log.log_start_offset = fields->log_start_offset;
  log.log_end_offset = fields->log_end_offset;
  if (auto p = PartitionOfDirectory(dir)) {
    auto hw = LoadHighWatermark(dfd->get(), p->first, p->second, fs);
    if (hw)
      log.high_watermark = *hw;
    else if (hw.error().code() != Code::kNotFound)
      return hw.error();
  }
  // Segments past the committed end were never published (a writer died):
  // not retention's.
  for (size_t i = 0; i < bases->size() && (*bases)[i] <= fields->end_segment_base; ++i) {
    RetentionSegment s;
    s.base = (*bases)[i];
    s.active = s.base == fields->end_segment_base;
    s.end = s.active ? fields->log_end_offset : (*bases)[i + 1];
    s.tiered = places.is_tiered(s.base);
    const int seg_dir = places.DirOf(s.base, dfd->get());
    auto info = fs->StatAt(seg_dir, SegmentFileName(s.base, format::kLogSuffix));
    if (!info) return info.error();
    s.bytes = s.active ? fields->end_position : info->size;
    s.append_time_ms = info->mtime_ms;
    // The active segment's time index may lag its last batches (an entry
    // per index.interval.bytes): its append time alone judges it, which is
    // never earlier than the clock of R74.
    if (!s.active)
      if (auto t = LogSegment::LastTimeEntry(fs, seg_dir, s.base)) s.max_timestamp = t->timestamp;
    log.segments.push_back(s);
  }
  return log;
}

RetentionPlan PlanRetention(const RetentionLog& log, const RetentionPolicy& policy) {
  RetentionPlan plan;
  plan.old_log_start = log.log_start_offset;
  plan.new_log_start = log.log_start_offset;
  const auto& segs = log.segments;
  // R76: nothing at or above the high watermark goes.
  const int64_t limit = log.high_watermark.value_or(std::numeric_limits<int64_t>::max());
  size_t n = 0;  // segments planned so far: segs[0, n)
  auto take = [&](RetentionReason why) {
    plan.deletions.push_back({segs[n], why});
    ++n;
  };
  auto may_go = [&](const RetentionSegment& s) {
    if (s.end > limit) {
      ++plan.held_by_high_watermark;
      return false;
    }
    return true;
  };
  // R73: a run that stopped after publishing the log start left these.
  while (n < segs.size() && !segs[n].active && segs[n].end <= log.log_start_offset)
    take(RetentionReason::kBelowStart);
  // R74: by time, a run of the oldest.
  if (policy.retention_ms >= 0) {
    const int64_t horizon = policy.now_ms - policy.retention_ms;
    while (n < segs.size() && segs[n].clock_ms() < horizon) {
      const RetentionSegment& s = segs[n];
      if (s.active) {
        // Rolled first when it holds records (R76), as Kafka does.
        if (s.end > s.base && may_go(s)) {
          plan.roll_active = true;
          take(RetentionReason::kTime);
        }
        break;
      }
      if (!may_go(s)) break;
      take(RetentionReason::kTime);
    }
  }
  // R75: by size, oldest first, while what stays is at least retention.bytes.
  if (policy.retention_bytes >= 0 && !plan.roll_active) {
    uint64_t total = 0;
    for (size_t i = n; i < segs.size(); ++i) total += segs[i].bytes;
    const auto keep = static_cast<uint64_t>(policy.retention_bytes);
    while (n < segs.size() && !segs[n].active && total - segs[n].bytes >= keep && total > keep) {
      if (!may_go(segs[n])) break;
      total -= segs[n].bytes;
      take(RetentionReason::kSize);
    }
  }
  if (n > 0) plan.new_log_start = plan.roll_active ? log.log_end_offset : segs[n - 1].end;
  plan.new_log_start = std::max(plan.new_log_start, log.log_start_offset);
  // R73: a log start below the first segment (one removed by hand) is
  // raised to it.
  if (!segs.empty()) plan.new_log_start = std::max(plan.new_log_start, segs.front().base);
  // Delete-records: the log start moves to the offset asked for.
  if (policy.delete_before && *policy.delete_before > plan.new_log_start) {
    const int64_t to = std::min({*policy.delete_before, log.log_end_offset, limit});
    if (to > plan.new_log_start) {
      plan.new_log_start = to;
      while (n < segs.size() && !segs[n].active && segs[n].end <= to)
        take(RetentionReason::kRecords);
    }
  }
  return plan;
}

std::vector<GroupLoss> RetentionLosses(const RetentionPlan& plan,
                                       const std::vector<GroupPosition>& groups, int64_t now_ms,
                                       int64_t protect_max_ms) {
  std::vector<GroupLoss> out;
  for (const GroupPosition& g : groups) {
    if (g.committed >= plan.new_log_start) continue;
    const int64_t from = std::max(g.committed, plan.old_log_start);
    if (from >= plan.new_log_start) continue;
    GroupLoss loss;
    loss.group = g.group;
    loss.committed = g.committed;
    loss.messages = plan.new_log_start - from;
    loss.commit_timestamp = g.commit_timestamp;
    for (const auto& d : plan.deletions)
      if (d.segment.end > from) {
        loss.oldest_ms = d.segment.clock_ms();
        break;
      }
    loss.expired = protect_max_ms >= 0 && now_ms - g.commit_timestamp > protect_max_ms;
    out.push_back(loss);
  }
  return out;
}

RetentionPlan ProtectGroups(const RetentionPlan& plan, const std::vector<GroupLoss>& losses) {
  int64_t floor = plan.new_log_start;
  for (const GroupLoss& l : losses)
    if (!l.expired) floor = std::min(floor, std::max(l.committed, plan.old_log_start));
  if (floor >= plan.new_log_start) return plan;
  RetentionPlan cut;
  cut.old_log_start = plan.old_log_start;
  cut.held_by_high_watermark = plan.held_by_high_watermark;
  cut.new_log_start = plan.old_log_start;
  for (const auto& d : plan.deletions) {
    if (d.segment.end > floor) break;
    cut.deletions.push_back(d);
    cut.new_log_start = std::max(cut.new_log_start, d.segment.end);
  }
  return cut;
}

std::optional<int64_t> RetentionHeadroomMs(const RetentionLog& log, const RetentionPolicy& policy,
                                           int64_t committed) {
  if (policy.retention_ms < 0 || committed >= log.log_end_offset) return std::nullopt;
  for (const RetentionSegment& s : log.segments) {
    if (s.end <= committed) continue;
    return std::max<int64_t>(0, s.clock_ms() + policy.retention_ms - policy.now_ms);
  }
  return std::nullopt;
}

Result<int> PurgeDeletedFiles(const std::string& dir, int64_t now_ms, int64_t delay_ms,
                              FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  auto names = fs->ListDir(dfd->get());
  if (!names) return names.error();
  const std::string suffix = format::kDeletedSuffix;
  int purged = 0;
  for (const std::string& name : *names) {
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    auto info = fs->StatAt(dfd->get(), name);
    if (!info) {
      if (info.error().code() == Code::kNotFound) continue;  // another run purged it
      return info.error();
    }
    if (!info->is_regular() || now_ms - info->ctime_ms < delay_ms) continue;
    Status s = fs->Unlink(dfd->get(), name);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
    if (s.ok()) ++purged;
  }
  if (purged > 0) MQ_RETURN_IF_ERROR(fs->SyncDir(dfd->get()));
  return purged;
}

}  // namespace mq
