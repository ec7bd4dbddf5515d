// mq-compact's run: for each partition of the topics asked for, the plan
// (liblog's PlanRetention), the losses of consumer groups
// (RetentionLosses, ProtectGroups), printed; with --execute, the deletion
// (PartitionWriter::DeleteSegmentsBefore) and the purge of `.deleted` files.
#include "compact.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "mq/file.h"
#include "mq/group.h"
#include "mq/lock.h"
#include "mq/partition.h"
#include "mq/retention.h"
#include "mq/segment.h"
#include "mq/tier.h"
#include "mq/topic.h"
#include "mq/units.h"
#include "size_option.h"

namespace mq::compact {

// The usage lines are the man page's SYNOPSIS, word for word.
const char* const kUsage =
    "Usage: mq-compact [-C DIR] [-t TOPIC]... [-p N] [--execute] [--delete-before OFFSET] "
    "[--protect] [--protect-group GROUP]... [--protect-max-ms MS] [--delete-delay-ms MS] "
    "[--wait] [-q] [--tier-dir DIR [--tier-after DURATION]]\n"
    "       mq-compact -h | -V\n"
    "\n"
    "Plan the retention of cleanup.policy=delete topics (whole segments past retention.ms\n"
    "or retention.bytes, or below --delete-before), report the consumer groups that would\n"
    "lose unread messages, and with --execute delete them. With --tier-dir, sealed segments\n"
    "older than --tier-after (or the topic's tier.after.ms) move to DIR (plan, then\n"
    "--execute). Without --execute nothing changes.\n";

void AddFlags(CLI::App& app, Options* o) {
  cli::AddDirOption(app, &o->dir);
  app.add_option("-t,--topic", o->topics, "topic (repeatable; default: every topic)");
  app.add_option("-p,--partition", o->partition, "only this partition")->check(CLI::Range(0, 9999));
  app.add_flag("--execute", o->execute, "delete what the plan says (default: print it only)");
  app.add_option("--delete-before", o->delete_before,
                 "delete-records: move the log start to OFFSET (one topic)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--protect", o->protect_all,
               "keep what any group has not read (exit 3; default: the topic's "
               "retention.protect)");
  app.add_option("--protect-group", o->protect_groups,
                 "keep what GROUP has not read (repeatable; exit 3)");
  app.add_option("--protect-max-ms", o->protect_max_ms,
                 "a group with no commit for MS ms protects nothing (default: the topic's "
                 "retention.protect.max.ms)")
      ->transform(cli::DurationUnits())
      ->check(CLI::NonNegativeNumber);
  app.add_option("--delete-delay-ms", o->delete_delay_ms,
                 "unlink .deleted files renamed at least MS ms ago (default: the topic's "
                 "file.delete.delay.ms, 60000)")
      ->transform(cli::DurationUnits())
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--wait", o->wait, "wait for another mq-compact run (default: exit 75)");
  app.add_flag("-q,--quiet", o->quiet, "print the plan's summary lines only");
  app.add_option("--tier-dir", o->tier_dir,
                 "move old sealed segments to DIR/<topic>-<partition> (by --tier-after, or "
                 "the topic's tier.after.ms)");
  app.add_option("--tier-after", o->tier_after,
                 "move segments older than DURATION (7d, 12h, 0: every sealed one; default: "
                 "the topic's tier.after.ms; needs --tier-dir)");
}

namespace {

int64_t NowMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// ISO 8601 UTC with milliseconds; "-" when unknown.
std::string Time(int64_t ms) {
  if (ms < 0) return "-";
  const time_t s = static_cast<time_t>(ms / 1000);
  tm t{};
  ::gmtime_r(&s, &t);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", t.tm_year + 1900, t.tm_mon + 1,
                     t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ms % 1000);
}

// "1h2m" style ages for the loss report.
std::string Age(int64_t ms) {
  if (ms < 0) return "-";
  const int64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{}h", s / 86400, s % 86400 / 3600);
}

// R110: the end of a "headroom ... retention.bytes" line: when, at what
// rate, or why not known.
std::string SizeHeadroomText(const SizeHeadroom& h, int64_t now) {
  if (h.ms)
    return fmt::format("in {} ({} more bytes at {:.0f} B/s over the last {} segments)", Age(*h.ms),
                       h.bytes_to_go, h.rate ? h.rate->bytes_per_ms(now) * 1000 : 0.0,
                       h.rate ? h.rate->segments : 0);
  if (h.rate)
    return fmt::format("after {} more bytes (no appends for {})", h.bytes_to_go,
                       Age(now - h.rate->since_ms));
  return fmt::format("after {} more bytes (append rate not known: no earlier local segment)",
                     h.bytes_to_go);
}

// Every group's committed offsets, read once.
using GroupTable = std::vector<std::pair<std::string, GroupOffsets>>;

Result<GroupTable> ReadGroups(const std::string& dir) {
  GroupTable out;
  auto names = ListGroups(dir);
  if (!names) return names.error();
  for (const std::string& name : *names) {
    auto g = Group::Open(dir, name, false);
    if (!g) {
      if (g.error().code() == Code::kNotFound) continue;  // deleted meanwhile
      return g.error();
    }
    auto offsets = g->Read();
    if (!offsets) return offsets.error();
    out.emplace_back(name, std::move(*offsets));
  }
  return out;
}

struct Totals {
  int segments = 0;
  uint64_t bytes = 0;
  bool protected_kept = false;
  int tier_segments = 0;  // planned (or made) tier moves
  uint64_t tier_bytes = 0;
};

// One partition's plan: what retention would delete, and what it costs
// the consumer groups, before and after protection (R78, R90).
struct PartitionPlan {
  std::string dir;
  std::string name;  // <topic>-<p>
  RetentionLog log;
  RetentionPolicy policy;
  RetentionPlan plan;  // as retention.ms, retention.bytes, --delete-before say
  RetentionPlan kept;  // cut back for the protected groups
  std::vector<GroupPosition> positions;
  std::vector<GroupLoss> losses;
};

class Run1 {
 public:
  Run1(const Options& o, const DataDir& data, const GroupTable& groups, cli::Output& out)
      : o_(o), data_(data), groups_(groups), out_(out), now_(NowMs()) {
    overrides_.protect_all = o.protect_all;
    overrides_.protect_groups = o.protect_groups;
    overrides_.protect_max_ms = o.protect_max_ms;
    overrides_.delete_delay_ms = o.delete_delay_ms;
  }

  Status Partition(const std::string& topic, const TopicConfig& config, int32_t p, Totals* t);
  // Tiered segments (retention.md §21): finishes interrupted moves, plans
  // and (with --execute) makes the moves, and reports each tier's share.
  Status Tier(const std::string& topic, const TopicConfig& config, int32_t p, Totals* t);
  Status FinishTier(const std::string& topic, const TopicConfig& config, int32_t p);

 private:
  Result<PartitionPlan> Plan(const std::string& topic, const TopicConfig& config, int32_t p,
                             const RetentionGuard& guard) const;
  void ReportLosses(const PartitionPlan& pp, const RetentionGuard& guard);
  void ReportPlan(const PartitionPlan& pp);
  Status Execute(const PartitionPlan& pp, const TopicConfig& config) const;

  const Options& o_;
  const DataDir& data_;
  const GroupTable& groups_;
  cli::Output& out_;
  int64_t now_;
  RetentionOverrides overrides_;
};

Result<PartitionPlan> Run1::Plan(const std::string& topic, const TopicConfig& config, int32_t p,
                                 const RetentionGuard& guard) const {
  PartitionPlan pp;
  pp.dir = data_.PartitionDir(topic, p);
  pp.name = fmt::format("{}-{}", topic, p);
  auto log = ListRetentionSegments(pp.dir);
  if (!log) return log.error();
  pp.log = std::move(*log);
  pp.policy.now_ms = now_;
  if (config.cleanup_policy == CleanupPolicy::kDelete) {
    pp.policy.retention_ms = config.retention_ms;
    pp.policy.retention_bytes = config.retention_bytes;
  }
  if (o_.delete_before >= 0) pp.policy.delete_before = o_.delete_before;
  pp.plan = PlanRetention(pp.log, pp.policy);
  for (const auto& [group, offsets] : groups_)
    if (const CommittedOffset* c = offsets.Find(topic, p))
      pp.positions.push_back({group, c->offset, c->commit_timestamp});
  pp.losses = RetentionLosses(pp.plan, pp.positions, now_, guard.protect_max_ms);
  std::vector<GroupLoss> guarded;
  for (const GroupLoss& l : pp.losses)
    if (guard.Protects(l.group)) guarded.push_back(l);
  pp.kept = ProtectGroups(pp.plan, guarded);
  return pp;
}

void Run1::ReportLosses(const PartitionPlan& pp, const RetentionGuard& guard) {
  for (const GroupLoss& l : pp.losses) {
    const bool keeps = guard.Protects(l.group) && !l.expired;
    out_.Print(
        "{} group {} partition {} loses {} unread messages (committed {}, oldest {}, age "
        "{}){}\n",
        keeps ? "protected" : "loss", l.group, pp.name, l.messages, l.committed, Time(l.oldest_ms),
        Age(l.oldest_ms < 0 ? -1 : now_ - l.oldest_ms),
        l.expired ? fmt::format(", no commit for {}: not protected", Age(now_ - l.commit_timestamp))
                  : "");
  }
  // Groups that lose nothing now: how long until retention by time, and
  // by size at the current rate of appends (R110), reaches their unread
  // messages.
  for (const GroupPosition& g : pp.positions) {
    if (g.committed < pp.kept.new_log_start) continue;
    auto headroom = RetentionHeadroomMs(pp.log, pp.policy, g.committed);
    if (headroom)
      out_.Print(
          "headroom group {} partition {} committed {}: retention.ms reaches its unread "
          "messages in {}\n",
          g.group, pp.name, g.committed, Age(*headroom));
    if (auto by_size = RetentionSizeHeadroom(pp.log, pp.policy, g.committed))
      out_.Print(
          "headroom group {} partition {} committed {}: retention.bytes reaches its unread "
          "messages {}\n",
          g.group, pp.name, g.committed, SizeHeadroomText(*by_size, now_));
  }
}

void Run1::ReportPlan(const PartitionPlan& pp) {
  const RetentionPlan& kept = pp.kept;
  if (!o_.quiet)
    for (const auto& d : kept.deletions)
      out_.Print("delete {} {} offsets {}-{} bytes {} oldest {} ({})\n", pp.name,
                 SegmentFileName(d.segment.base, ".log"), d.segment.base, d.segment.end,
                 d.segment.bytes, Time(d.segment.clock_ms()), RetentionReasonName(d.reason));
  const bool cut = kept.new_log_start < pp.plan.new_log_start;
  out_.Print("{} log start {} -> {}: {} segments, {} bytes{}{}\n", pp.name, kept.old_log_start,
             kept.new_log_start, kept.deletions.size(), kept.bytes(),
             kept.roll_active ? ", active segment rolled" : "",
             cut ? fmt::format(", {} kept for protected groups",
                               pp.plan.new_log_start - kept.new_log_start)
                 : "");
}

Status Run1::Execute(const PartitionPlan& pp, const TopicConfig& config) const {
  LogConfig lc = DataDir::LogConfigFor(config);
  auto w = PartitionWriter::Open(pp.dir, lc, false, nullptr);
  if (!w) return w.error();
  SegmentDeletion how;
  how.exact_start = o_.delete_before >= 0;
  how.roll_active = pp.kept.roll_active;
  // Offsets, not segments, are what the plan fixes: appends since it was
  // made only add segments after those it names.
  MQ_RETURN_IF_ERROR((*w)->DeleteSegmentsBefore(pp.kept.new_log_start, how));
  return (*w)->Close();
}

Status Run1::Partition(const std::string& topic, const TopicConfig& config, int32_t p, Totals* t) {
  const RetentionGuard guard = RetentionGuardFor(config, overrides_);
  if (o_.execute) {
    auto purged = PurgeDeletedFiles(data_.PartitionDir(topic, p), now_, guard.delete_delay_ms);
    if (!purged) return purged.error();
  }
  auto pp = Plan(topic, config, p, guard);
  if (!pp) return pp.error();
  if (pp->kept.new_log_start < pp->plan.new_log_start) t->protected_kept = true;
  ReportLosses(*pp, guard);
  ReportPlan(*pp);
  t->segments += static_cast<int>(pp->kept.deletions.size());
  t->bytes += pp->kept.bytes();
  if (!o_.execute || pp->kept.empty()) return Status::Ok();
  return Execute(*pp, config);
}

// R94, R97: before retention, with --execute, what interrupted moves left
// is finished and the tier's `.deleted` files past their delay are unlinked
// (as the partition directory's are, before retention renames more).
Status Run1::FinishTier(const std::string& topic, const TopicConfig& config, int32_t p) {
  if (!o_.execute) return Status::Ok();
  const std::string dir = data_.PartitionDir(topic, p);
  auto has = HasTierPointer(dir);
  if (!has) return has.error();
  if (!*has) return Status::Ok();  // nothing tiered, no move under way
  auto finished = FinishTierMoves(dir);
  if (!finished) return finished.error();
  auto log = ListRetentionSegments(dir);
  if (!log) return log.error();
  if (log->tier_dir.empty()) return Status::Ok();
  const RetentionGuard guard = RetentionGuardFor(config, overrides_);
  return PurgeDeletedFiles(log->tier_dir, now_, guard.delete_delay_ms).status();
}

// R94-R96: the tier step of one partition, after its retention.
Status Run1::Tier(const std::string& topic, const TopicConfig& config, int32_t p, Totals* t) {
  const std::string dir = data_.PartitionDir(topic, p);
  if (o_.tier_dir.empty()) {
    // Without --tier-dir only a tiered partition has a line to report.
    auto has = HasTierPointer(dir);
    if (!has) return has.error();
    if (!*has) return Status::Ok();
  }
  const std::string name = fmt::format("{}-{}", topic, p);
  auto log = ListRetentionSegments(dir);
  if (!log) return log.error();
  std::vector<RetentionSegment> moves;
  if (!o_.tier_dir.empty()) moves = PlanTier(*log, {TierAfterFor(config, o_.tier_after_ms), now_});
  const std::string tier_dir =
      log->tier_dir.empty() ? TierPartitionDir(o_.tier_dir, dir) : log->tier_dir;
  TierUsage usage = UsageByTier(*log);
  for (const RetentionSegment& s : moves) {
    if (!o_.quiet)
      out_.Print("tier {} {} offsets {}-{} bytes {} oldest {} -> {}\n", name,
                 SegmentFileName(s.base, ".log"), s.base, s.end, s.bytes, Time(s.clock_ms()),
                 tier_dir);
    t->tier_segments += 1;
    t->tier_bytes += s.bytes;
    --usage.segments[0];
    usage.bytes[0] -= s.bytes;
    ++usage.segments[1];
    usage.bytes[1] += s.bytes;
  }
  if (o_.execute && !moves.empty()) {
    MQ_RETURN_IF_ERROR(AttachTier(dir, tier_dir));
    std::vector<int64_t> bases;
    for (const RetentionSegment& s : moves) bases.push_back(s.base);
    MQ_RETURN_IF_ERROR(MoveToTier(dir, bases));
  }
  if (!moves.empty() || !log->tier_dir.empty())
    out_.Print("{} tiers: local {} segments {} bytes, tier {} segments {} bytes ({}){}\n", name,
               usage.segments[0], usage.bytes[0], usage.segments[1], usage.bytes[1], tier_dir,
               o_.execute || moves.empty() ? "" : " after the plan");
  return Status::Ok();
}

// Without --execute: what the plan would have done, on standard error.
void WarnPlanOnly(const Totals& t) {
  if (t.segments > 0)
    cli::Warn(
        fmt::format("plan only: nothing deleted (add --execute to delete {} segments, {} "
                    "bytes)",
                    t.segments, t.bytes));
  if (t.tier_segments > 0)
    cli::Warn(
        fmt::format("plan only: nothing moved (add --execute to move {} segments, {} bytes "
                    "to the tier)",
                    t.tier_segments, t.tier_bytes));
}

// --tier-after needs --tier-dir (R108: without it, each topic's
// tier.after.ms); the directory made absolute.
int CheckTierFlags(Options* o) {
  if (o->tier_dir.empty() && !o->tier_after.empty())
    return cli::UsageError(kUsage, "--tier-after needs --tier-dir");
  if (o->tier_dir.empty()) return cli::kExitOk;
  if (!o->tier_after.empty()) {
    auto ms = ParseDurationMs(o->tier_after, "--tier-after", 0, INT64_MAX);
    if (!ms) return cli::UsageError(kUsage, ms.error().message());
    o->tier_after_ms = *ms;
  }
  if (o->tier_dir.front() != '/') {
    std::error_code ec;
    auto abs = std::filesystem::absolute(o->tier_dir, ec);
    if (ec) return cli::UsageError(kUsage, "--tier-dir: " + ec.message());
    o->tier_dir = abs.lexically_normal().string();
  }
  return cli::kExitOk;
}

}  // namespace

int Run(const Options& given) {
  Options o = given;
  if (int rc = CheckTierFlags(&o); rc != cli::kExitOk) return rc;
  if (o.delete_before >= 0 && o.topics.size() != 1)
    return cli::UsageError(kUsage, "--delete-before needs exactly one -t TOPIC");
  auto data = DataDir::Open(o.dir, false);
  if (!data) return cli::Fail(data.error());
  // R79: one run at a time per data directory.
  auto root = OpenDirectory(o.dir, false);
  if (!root) return cli::Fail(root.error());
  auto lock = FileLock::Acquire(root->get(), ".mq-compact.lock", LockMode::kExclusive,
                                o.wait ? LockWait::kBlock : LockWait::kTry);
  if (!lock) {
    if (lock.error().code() == Code::kBusy) {
      cli::Warn(
          fmt::format("{}: another mq-compact is running (its lock {}/.mq-compact.lock is "
                      "held); try again later or use --wait",
                      o.dir, o.dir));
      return cli::kExitTempFail;
    }
    return cli::Fail(lock.error());
  }
  std::vector<std::string> topics = o.topics;
  if (topics.empty()) {
    auto all = data->ListTopics();
    if (!all) return cli::Fail(all.error());
    topics = *all;
  }
  auto groups = ReadGroups(o.dir);
  if (!groups) return cli::Fail(groups.error());
  cli::Output out;
  Run1 run(o, *data, *groups, out);
  Totals t;
  for (const std::string& topic : topics) {
    auto config = data->ReadTopic(topic);
    if (!config) return cli::Fail(config.error());
    if (o.partition >= config->partitions)
      return cli::Fail(Status(Code::kNotFound, fmt::format("{}: no partition {} (it has {})", topic,
                                                           o.partition, config->partitions)));
    for (int32_t p = 0; p < config->partitions; ++p) {
      if (o.partition >= 0 && p != o.partition) continue;
      Status s = run.FinishTier(topic, *config, p);
      if (s.ok()) s = run.Partition(topic, *config, p, &t);
      if (s.ok()) s = run.Tier(topic, *config, p, &t);
      if (!s.ok()) {
        out.Flush();
        return cli::Fail(s);
      }
    }
  }
  if (!o.execute) WarnPlanOnly(t);
  if (int rc = out.FinishExitCode(); rc != 0) return rc;
  out.Flush();
  if (t.protected_kept) {
    cli::Warn("unread messages of protected groups kept: retention did not complete (exit 3)");
    return kExitProtected;
  }
  return cli::kExitOk;
}

}  // namespace mq::compact
