// Retention of a cleanup.policy=delete partition (format-spec/retention.md,
// R73-R79): which whole segments go, by time and by size, oldest first
// (PlanRetention, a pure function of what ListRetentionSegments reads
// without opening a segment's log), what that costs each consumer group
// (RetentionLosses), and the two-phase deletion (PartitionWriter::
// DeleteSegmentsBefore renames the files `.deleted` after the new log start
// is durable; PurgeDeletedFiles unlinks them on a later run).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

struct TopicConfig;

// One segment as retention sees it: the names, sizes and index tails only.
struct RetentionSegment {
  int64_t base = 0;
  // One past its last offset: the next segment's base, or the log end for
  // the active (last) segment.
  int64_t end = 0;
  uint64_t bytes = 0;  // its .log file
  // R74: its largest record timestamp (the time index's last entry; -1
  // when the index has none) and its last append time (the .log file's
  // mtime, ms since the epoch).
  int64_t max_timestamp = -1;
  int64_t append_time_ms = 0;
  bool active = false;
  bool tiered = false;  // R96: its files are in the tier directory
  // R74: the time retention judges it by: min(max_timestamp,
  // append_time_ms), the append time alone when there is no timestamp.
  int64_t clock_ms() const;
};

// A partition's segments as published now (the state file's log start and
// end; the segment list), for planning. Reads each segment's time index
// tail and stats its .log; no log is opened. `high_watermark`: the
// partition's replication-offset-checkpoint value when it has one.
struct RetentionLog {
  std::string dir;
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  std::optional<int64_t> high_watermark;
  std::vector<RetentionSegment> segments;  // ascending
  std::string tier_dir;                    // R93: the tier pointer's directory, or ""
};
Result<RetentionLog> ListRetentionSegments(const std::string& dir, FileSystem* fs = nullptr);

struct RetentionPolicy {
  int64_t retention_ms = -1;     // -1: no limit by time
  int64_t retention_bytes = -1;  // -1: no limit by size
  int64_t now_ms = 0;
  // Delete-records: the log start moves to this offset (not past the end,
  // nor the high watermark of a replicated partition); whole segments below
  // it go.
  std::optional<int64_t> delete_before;
};

enum class RetentionReason : uint8_t { kBelowStart, kTime, kSize, kRecords };
const char* RetentionReasonName(RetentionReason r);

struct PlannedDeletion {
  RetentionSegment segment;
  RetentionReason reason = RetentionReason::kTime;
};

struct RetentionPlan {
  std::vector<PlannedDeletion> deletions;  // oldest first
  // The log start offset after the plan (R73): the base of the first
  // segment kept, or the delete-records offset, or the log end when the
  // active segment is rolled.
  int64_t new_log_start = 0;
  int64_t old_log_start = 0;
  // R76: the active segment qualified by time: it is rolled, then deleted.
  bool roll_active = false;
  // R76: segments that qualified but hold offsets at or above the high
  // watermark, kept.
  int64_t held_by_high_watermark = 0;
  uint64_t bytes() const;
  bool empty() const { return new_log_start <= old_log_start && deletions.empty(); }
};

// R74-R76: the plan for `log` under `policy`: first any segment wholly
// below the log start (left by a run that stopped after publishing it),
// then by time (segments whose clock is older than now - retention.ms, a
// run of the oldest: the first that is young enough ends it), then by size
// (oldest first while what remains stays at or above retention.bytes),
// then delete-records. Never the active segment, unless it qualifies by
// time and holds records (roll_active); never a segment with an offset at
// or above the high watermark.
RetentionPlan PlanRetention(const RetentionLog& log, const RetentionPolicy& policy);

// R78: what a plan costs a consumer group on one partition: the messages
// in [committed, new log start) it has not read.
struct GroupLoss {
  std::string group;
  int64_t committed = 0;
  int64_t messages = 0;
  // The retention clock of the oldest unread segment that goes (ms since
  // the epoch), -1 when unknown.
  int64_t oldest_ms = -1;
  // The group's last commit time for the partition (ms since the epoch).
  int64_t commit_timestamp = 0;
  // R78: past retention.protect.max.ms since its last commit: it no longer
  // protects its unread data.
  bool expired = false;
};
struct GroupPosition {
  std::string group;
  int64_t committed = 0;
  int64_t commit_timestamp = 0;
};
// Every group whose committed offset is below the plan's new log start
// (and not below the old one: those messages were gone already).
// `protect_max_ms` < 0: no bound.
std::vector<GroupLoss> RetentionLosses(const RetentionPlan& plan,
                                       const std::vector<GroupPosition>& groups, int64_t now_ms,
                                       int64_t protect_max_ms);
// R78: the plan cut back so that no protected group loses unread data: the
// new log start at most the lowest committed offset of a loss that is not
// expired, rounded down to a segment base (whole segments only; a
// delete-records offset is lowered to it).
RetentionPlan ProtectGroups(const RetentionPlan& plan, const std::vector<GroupLoss>& losses);

// R78's warning before a loss: how long until retention by time reaches
// the oldest message a group has not read (its committed offset), as the
// log is now: the retention clock of the segment holding it, plus
// retention.ms, minus now (the active segment's clock moves with each
// append, so the figure is a lower bound for it). 0 when it is due now;
// nullopt without retention by time or when the group has read everything.
// Retention by size: RetentionSizeHeadroom.
std::optional<int64_t> RetentionHeadroomMs(const RetentionLog& log, const RetentionPolicy& policy,
                                           int64_t committed);

// R110: the rate of appends to a partition, from its own segments: the
// bytes of the segments after a reference segment (the newest local
// segment at most kHeadroomRateSegments before the active one) over the
// time from that segment's last append (its .log's mtime) to now, idle
// time since the last append included. nullopt when it cannot be told: the
// partition has only its active segment (nothing says when its bytes
// began), or no local segment before it, or the clock is not past the
// reference.
struct AppendRate {
  int64_t bytes = 0;     // appended since the reference
  int64_t since_ms = 0;  // the reference's last append (ms since the epoch)
  int segments = 0;      // the segments those bytes are in
  double bytes_per_ms(int64_t now_ms) const {
    return static_cast<double>(bytes) / static_cast<double>(now_ms - since_ms);
  }
};
std::optional<AppendRate> EstimateAppendRate(const RetentionLog& log, int64_t now_ms);

// R110: headroom by size: how many more bytes of appends bring retention
// by size (R75) to the segment holding a group's committed offset (it goes
// once the segments after it hold retention.bytes; for the active
// segment, a lower bound: it must roll first), and how long that takes at
// the rate EstimateAppendRate gives (nullopt when the rate is not known or
// is zero). nullopt without retention by size or when the group has read
// everything.
struct SizeHeadroom {
  int64_t bytes_to_go = 0;  // 0: due now
  std::optional<AppendRate> rate;
  std::optional<int64_t> ms;
};
std::optional<SizeHeadroom> RetentionSizeHeadroom(const RetentionLog& log,
                                                  const RetentionPolicy& policy, int64_t committed);

// R90: whom retention protects on a topic and how long its `.deleted`
// files wait: the topic's retention.protect, retention.protect.max.ms and
// file.delete.delay.ms, each replaced by the run's own setting when it has
// one (mq-compact's --protect or --protect-group, --protect-max-ms,
// --delete-delay-ms).
struct RetentionOverrides {
  bool protect_all = false;                 // --protect
  std::vector<std::string> protect_groups;  // --protect-group
  int64_t protect_max_ms = -1;              // -1: the topic's
  int64_t delete_delay_ms = -1;             // -1: the topic's
};
struct RetentionGuard {
  bool all = false;                 // every group is protected
  std::vector<std::string> groups;  // else these
  int64_t protect_max_ms = -1;      // -1: no bound
  int64_t delete_delay_ms = 60000;
  bool Protects(const std::string& group) const;
};
RetentionGuard RetentionGuardFor(const TopicConfig& topic, const RetentionOverrides& run);

// R77: unlinks the `.deleted` files of the partition at `dir` renamed at
// least `delay_ms` ago (their ctime); returns how many went.
Result<int> PurgeDeletedFiles(const std::string& dir, int64_t now_ms, int64_t delay_ms,
                              FileSystem* fs = nullptr);

}  // namespace mq
