// What a consumer group looks like now, for `mq-consume --describe` and
// `--reset-offsets`: each partition's committed offset against its log
// (start, committed end, lag), who owns it, and the live members — read from
// the group's files (format-spec/group.md §14) without taking any lock a
// member takes (lock files are only probed, §14.5).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mq/group.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq {

// A partition's readable range now: [start, end), end the committed end
// (what consumers may read; the high watermark once there are replicas).
// A partition nobody has written to yet is [0, 0).
struct LogBounds {
  int64_t start = 0;
  int64_t end = 0;
};
Result<LogBounds> PartitionBounds(const DataDir& dir, const TopicConfig& config,
                                  std::string_view topic, int32_t partition);

// Kafka's offset-for-time lookup (ListOffsets by timestamp): the offset of
// the first record at or after the time index's entry for `timestamp_ms`
// whose timestamp is >= it — the record `mq-consume -o s@TIME` starts at —
// or the committed end when no record has such a timestamp.
Result<int64_t> OffsetForTimestamp(const DataDir& dir, const std::string& topic, int32_t partition,
                                   int64_t timestamp_ms);

// KIP-320 (Kafka validates a consumer's position against the leader's
// epoch end offsets): where the log diverged from the one `committed` was
// read from. Its leader epoch is the one of the record before the
// committed offset (group.md §14.2); the partition's leader-epoch-
// checkpoint says where that epoch ends in this log (LeaderEpochCache::
// EndOffsetFor). An end below the committed offset means a failover cut
// the records the group read from there on, and others may hold their
// offsets now: that end is returned, where the group must read again.
// nullopt when nothing says so: no epoch committed (-1), no checkpoint (an
// unreplicated partition, or none written yet), an epoch above the log's
// latest (a replica behind the one the group read), or an epoch that ends
// at or past the committed offset (the latest one never ends). A
// checkpoint that breaks R35/R36 is its kCorruption.
Result<std::optional<int64_t>> CommittedDivergence(const DataDir& dir, std::string_view topic,
                                                   int32_t partition,
                                                   const CommittedOffset& committed);

// Where a committed offset stands against its partition's log.
enum class CommittedPosition : uint8_t {
  kNone,           // nothing committed for the partition
  kInLog,          // log start <= committed <= log end
  kBelowLogStart,  // retention deleted [committed, log start) before the group read it
  kAboveLogEnd,    // the log was truncated below the committed offset
  kDiverged,       // KIP-320: the committed offset's leader epoch ends below it in the log
  kNoTopic,        // the topic is gone
  kNoPartition,    // the topic has no such partition
  kUnreadable,     // the partition's log could not be read (`error` says why)
};

// Where a member resumes from committed offset `committed` in `log`, given
// the divergence CommittedDivergence found (nullopt: none): below the log
// start, the start; where the log diverged, that offset (not below the
// start); past the end, the end; else the committed offset. Sets
// *resume_at; `committed` in the log is kInLog.
CommittedPosition PlaceCommitted(int64_t committed, const LogBounds& log,
                                 std::optional<int64_t> diverged, int64_t* resume_at);

// What a member reading `partition` of `topic` from `offset` meets first:
// Ok when its first record there reads clean (or there is none below the
// log end); the kCorruption of the batch it stops at otherwise (its
// message names the file, byte position and rule, as mq-inspect --verify
// does): a member stops the partition there (format-spec/group.md §14.7).
// Other errors are the reader's.
Status CheckReadableAt(const DataDir& dir, const std::string& topic, int32_t partition,
                       int64_t offset);
// The same with `consumer` (of the topic, stop_at_end, `partition` not
// assigned: it is assigned and unassigned again), so that one consumer
// checks every partition of a topic.
class Consumer;
Status CheckReadableAt(Consumer& consumer, int32_t partition, int64_t offset);

struct GroupPartitionStatus {
  std::string topic;
  int32_t partition = 0;
  std::optional<CommittedOffset> committed;
  CommittedPosition position = CommittedPosition::kNone;
  LogBounds log;  // meaningful unless kNoTopic, kNoPartition or kUnreadable
  // kDiverged: where the log diverged (CommittedDivergence).
  std::optional<int64_t> diverged_at;
  // Where a member would resume: the committed offset raised to the log
  // start, lowered to where the log diverged or to the log end
  // (PlaceCommitted: what mq-consume -G does, saying so).
  // nullopt without a committed offset or a partition.
  std::optional<int64_t> resume_at;
  // log.end - resume_at: offsets the group has still to read. With
  // `unread`, the whole log. nullopt otherwise when resume_at is.
  std::optional<int64_t> lag;
  // Nothing committed and no owner: no member has read the partition (or
  // none reads it now), and `lag` is its backlog, log.end - log.start —
  // what a member starting at the log start (mq-consume --reset earliest,
  // the default) has to read.
  bool unread = false;
  // kBelowLogStart: log.start - committed, offsets deleted unread.
  int64_t lost = 0;
  // The member holding the partition's ownership lock; nullopt when nobody
  // does. An empty id: held, but its owner has not written its id yet.
  std::optional<std::string> owner;
  // No owner, and assigned to an absent static member in its session
  // (GroupMemberStatus::absent): the partition waits for that member.
  std::optional<std::string> held_for;
  // kUnreadable: why the log's bounds could not be read (a damaged state
  // file, a directory that cannot be opened: the error names the file).
  Status error;
  // The batch at resume_at breaks a rule (CheckReadableAt, when resume_at
  // is below the log end): a member stops the partition there (its owner,
  // if any, has); the kCorruption naming file, position and rule.
  Status corrupt;
};

struct GroupMemberStatus {
  std::string id;
  std::string host;            // from members/<id>.lock; empty if unknown
  std::optional<int64_t> pid;  // likewise
  // The topics it reads (its note's subscription, mq/group_member.h);
  // nullopt when its note names none (an earlier mq) or is not written yet.
  std::optional<std::vector<std::string>> topics;
  std::vector<std::pair<std::string, int32_t>> owned;  // (topic, partition), sorted
  // A static member (it has a lease, R65): its session timeout in ms;
  // nullopt for a member without one.
  std::optional<int64_t> session_timeout_ms;
  // Not running, yet a member while its session holds (group.md §14.6,
  // Group::AbsentMembers), until `session_end` (ms since the epoch). Its
  // host and subscription are its note's; `held` lists the partitions
  // assigned to it (as the running members assign them), which wait for
  // it unowned: no other member takes them before its session ends.
  bool absent = false;
  int64_t session_end = 0;
  std::vector<std::pair<std::string, int32_t>> held;  // (topic, partition), sorted
};

struct GroupDescription {
  std::string group;
  GroupOffsets state;  // the offsets file (rebalances, dead letters, generation)
  // Every partition of the group's topics — with a topic, that one; else
  // each topic the group has committed, that has an ownership file (a
  // member has read it) or that a live member reads — plus any committed
  // entry or owned partition beyond a topic's partition count. Sorted by
  // (topic, partition).
  std::vector<GroupPartitionStatus> partitions;
  // Live members, running and absent static members in their session,
  // sorted by id.
  std::vector<GroupMemberStatus> members;
  int64_t total_lag = 0;  // sum of the known lags (backlogs of unread partitions included)
};

// Describes `group`, limited to `topic` when given (which must exist:
// kNotFound otherwise, saying when the group has offsets of it left
// over; without `topic`, a removed topic's offsets are no-topic rows). A
// corrupt offsets file is its kCorruption (file, position, rule). A
// partition whose log cannot be read is a row of its own (kUnreadable,
// with the error); the other rows are complete. Members and owners are a
// snapshot: one may come or go while the files are read.
// `now_ms` (kNoTimestamp: the clock's) decides which sessions hold.
Result<GroupDescription> DescribeGroup(const DataDir& dir, const Group& group,
                                       std::optional<std::string_view> topic = std::nullopt,
                                       int64_t now_ms = kNoTimestamp);

// True when some member holds group.lock (shared): a reset or delete would
// be refused (kBusy) now.
Result<bool> HasLiveMembers(const Group& group);

// One line of an offset plan as kafka-consumer-groups writes it
// (--reset-offsets --export) and reads it (--from-file): CSV lines
// "TOPIC,PARTITION,OFFSET", or "GROUP,TOPIC,PARTITION,OFFSET" for a plan of
// several groups.
struct PlannedOffset {
  std::string group;  // empty in a three-column plan
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  bool operator==(const PlannedOffset&) const = default;
};
// The CSV text of `plan`, one line each, with the group column when
// `with_group`.
std::string FormatOffsetPlan(std::span<const PlannedOffset> plan, bool with_group);
// Parses a plan: every line three or four comma-separated fields, all
// lines alike (a last line without a newline, a '\r' before a newline and
// empty lines are accepted); names obey R12, the partition is 0-9999 and
// the offset >= 0, both decimal; no (group, topic, partition) twice. Else
// kCorruption (exit 65) naming `source` and the line.
Result<std::vector<PlannedOffset>> ParseOffsetPlan(std::string_view text,
                                                   const std::string& source);

}  // namespace mq
