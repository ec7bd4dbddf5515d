// Retention's decisions (format-spec/retention.md, R73-R78): the segments
// as retention sees them, the plan, what it costs consumer groups, and the
// purge of `.deleted` files (R77).
#include "mq/retention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"
#include "mq/topic.h"
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

namespace {

// PlanRetention's steps, each taking the oldest segments not planned yet.
class Planner {
 public:
  explicit Planner(const RetentionLog& log)
      : log_(log),
        segs_(log.segments),
        limit_(log.high_watermark.value_or(std::numeric_limits<int64_t>::max())) {
    plan_.old_log_start = log.log_start_offset;
    plan_.new_log_start = log.log_start_offset;
  }

  // R73: a run that stopped after publishing the log start left these.
  void BelowStart() {
    while (n_ < segs_.size() && !segs_[n_].active && segs_[n_].end <= log_.log_start_offset)
      Take(RetentionReason::kBelowStart);
  }

  // R74: by time, a run of the oldest.
  void ByTime(const RetentionPolicy& policy) {
    if (policy.retention_ms < 0) return;
    const int64_t horizon = policy.now_ms - policy.retention_ms;
    while (n_ < segs_.size() && segs_[n_].clock_ms() < horizon) {
      const RetentionSegment& s = segs_[n_];
      if (s.active) {
        // Rolled first when it holds records (R76), as Kafka does.
        if (s.end > s.base && MayGo(s)) {
          plan_.roll_active = true;
          Take(RetentionReason::kTime);
        }
        return;
      }
      if (!MayGo(s)) return;
      Take(RetentionReason::kTime);
    }
  }

  // R75: by size, oldest first, while what stays is at least
  // retention.bytes.
  void BySize(const RetentionPolicy& policy) {
    if (policy.retention_bytes < 0 || plan_.roll_active) return;
    uint64_t total = 0;
    for (size_t i = n_; i < segs_.size(); ++i) total += segs_[i].bytes;
    const auto keep = static_cast<uint64_t>(policy.retention_bytes);
    while (n_ < segs_.size() && !segs_[n_].active && total - segs_[n_].bytes >= keep &&
           total > keep) {
      if (!MayGo(segs_[n_])) return;
      total -= segs_[n_].bytes;
      Take(RetentionReason::kSize);
    }
  }

  // The log start after the segments taken (R73: never below the first
  // segment, one removed by hand).
  void SetLogStart() {
    if (n_ > 0) plan_.new_log_start = plan_.roll_active ? log_.log_end_offset : segs_[n_ - 1].end;
    plan_.new_log_start = std::max(plan_.new_log_start, log_.log_start_offset);
    if (!segs_.empty()) plan_.new_log_start = std::max(plan_.new_log_start, segs_.front().base);
  }

  // Delete-records: the log start moves to the offset asked for (not past
  // the log end nor the high watermark, R76).
  void DeleteBefore(std::optional<int64_t> offset) {
    if (!offset || *offset <= plan_.new_log_start) return;
    const int64_t to = std::min({*offset, log_.log_end_offset, limit_});
    if (to <= plan_.new_log_start) return;
    plan_.new_log_start = to;
    while (n_ < segs_.size() && !segs_[n_].active && segs_[n_].end <= to)
      Take(RetentionReason::kRecords);
  }

  RetentionPlan Finish() { return std::move(plan_); }

 private:
  void Take(RetentionReason why) {
    plan_.deletions.push_back({segs_[n_], why});
    ++n_;
  }
  // R76: nothing at or above the high watermark goes.
  bool MayGo(const RetentionSegment& s) {
    if (s.end <= limit_) return true;
    ++plan_.held_by_high_watermark;
    return false;
  }

  const RetentionLog& log_;
  const std::vector<RetentionSegment>& segs_;
  const int64_t limit_;
  RetentionPlan plan_;
  size_t n_ = 0;  // segments planned so far: segs_[0, n_)
};

}  // namespace

RetentionPlan PlanRetention(const RetentionLog& log, const RetentionPolicy& policy) {
  Planner p(log);
  p.BelowStart();
  p.ByTime(policy);
  p.BySize(policy);
  p.SetLogStart();
  p.DeleteBefore(policy.delete_before);
  return p.Finish();
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

std::optional<AppendRate> EstimateAppendRate(const RetentionLog& log, int64_t now_ms) {
  const auto& segs = log.segments;
  if (segs.size() < 2) return std::nullopt;
  const size_t last = segs.size() - 1;
  size_t ref = last > static_cast<size_t>(format::kHeadroomRateSegments)
                   ? last - static_cast<size_t>(format::kHeadroomRateSegments)
                   : 0;
  // R97: a tiered copy's mtime is its move's, not its last append.
  while (ref < last && segs[ref].tiered) ++ref;
  if (ref == last || now_ms <= segs[ref].append_time_ms) return std::nullopt;
  AppendRate r;
  r.since_ms = segs[ref].append_time_ms;
  r.segments = static_cast<int>(last - ref);
  for (size_t i = ref + 1; i <= last; ++i) r.bytes += static_cast<int64_t>(segs[i].bytes);
  return r;
}

std::optional<SizeHeadroom> RetentionSizeHeadroom(const RetentionLog& log,
                                                  const RetentionPolicy& policy,
                                                  int64_t committed) {
  if (policy.retention_bytes < 0 || committed >= log.log_end_offset) return std::nullopt;
  int64_t after = 0;  // the bytes of the segments after the one holding `committed`
  bool found = false;
  for (const RetentionSegment& s : log.segments) {
    if (found) after += static_cast<int64_t>(s.bytes);
    if (!found && s.end > committed) found = true;
  }
  if (!found) return std::nullopt;
  SizeHeadroom h;
  h.bytes_to_go = std::max<int64_t>(0, policy.retention_bytes - after);
  h.rate = EstimateAppendRate(log, policy.now_ms);
  if (h.bytes_to_go == 0) {
    h.ms = 0;
  } else if (h.rate && h.rate->bytes > 0) {
    const double ms = static_cast<double>(h.bytes_to_go) / h.rate->bytes_per_ms(policy.now_ms);
    h.ms = static_cast<int64_t>(std::ceil(ms));
  }
  return h;
}

bool RetentionGuard::Protects(const std::string& group) const {
  return all || std::find(groups.begin(), groups.end(), group) != groups.end();
}

RetentionGuard RetentionGuardFor(const TopicConfig& topic, const RetentionOverrides& run) {
  RetentionGuard g;
  if (run.protect_all || !run.protect_groups.empty()) {
    g.all = run.protect_all;
    g.groups = run.protect_groups;
  } else if (topic.retention_protect == "*") {
    g.all = true;
  } else if (!topic.retention_protect.empty()) {
    const std::string& list = topic.retention_protect;
    for (size_t from = 0; from <= list.size();) {
      const size_t comma = std::min(list.find(',', from), list.size());
      g.groups.push_back(list.substr(from, comma - from));
      from = comma + 1;
    }
  }
  g.protect_max_ms = run.protect_max_ms >= 0 ? run.protect_max_ms : topic.retention_protect_max_ms;
  g.delete_delay_ms = run.delete_delay_ms >= 0 ? run.delete_delay_ms : topic.file_delete_delay_ms;
  return g;
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
