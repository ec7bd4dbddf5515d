#include "group_run.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dispatcher.h"
#include "group_source.h"
#include "member.h"
#include "mq/consumer.h"
#include "mq/group.h"
#include "mq/group_member.h"
#include "pipeline.h"
#include "reader_budget.h"

namespace mq::consume {
namespace {

// R69: the longest this member may go between two polls without being
// stuck by its own rules: a write to standard output is given up after
// --max-poll-interval; with --exec, a message or batch takes every attempt
// (each run killed after --max-poll-interval) and the backoffs between them.
int64_t MemberDeadlineMs(const Flags& f, const Settings& settings) {
  const int64_t interval = f.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs);
  if (!settings.handler) return interval;
  const HandlerOptions& h = *settings.handler;
  return HandlerDeadlineMs(interval, h.kill_grace_ms, h.max_attempts, h.retry_backoff_ms,
                           h.max_backoff_ms);
}

// What the consumers say of their partitions, as a member's run collects
// it: stopped partitions and truncations since the member last looked,
// and the counts the exit status comes from.
struct GroupNotices {
  std::vector<std::pair<std::string, int32_t>> stopped;      // since the member last looked
  std::vector<std::pair<std::string, ConsumerNotice>> cuts;  // likewise
  uint64_t stops = 0, skipped = 0, skipped_offsets = 0;

  // A consumer's notice, counted and said (unless -q).
  void Add(const Flags& f, bool several, const ConsumerNotice& n) {
    using K = ConsumerNotice::Kind;
    // The partition directory is <dir>/<topic>-<partition>.
    std::string topic = n.dir.substr(n.dir.rfind('/') + 1);
    topic.resize(topic.size() - std::min(topic.size(), std::to_string(n.partition).size() + 1));
    const std::string name =
        several ? fmt::format("{}-{}", topic, n.partition) : std::to_string(n.partition);
    if (n.kind == K::kStoppedPartition) {
      stopped.emplace_back(topic, n.partition);
      ++stops;
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: partition {} stopped at offset {}: {}; the member "
                        "goes on with its other partitions",
                        *f.group, name, n.first_offset, n.error.message()));
    } else if (n.kind == K::kTruncated) {
      cuts.emplace_back(topic, n);
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: partition {}: the log was truncated to offset {} below "
                        "records handed out ({}..{}): handing out what it holds there now",
                        *f.group, name, n.first_offset, n.first_offset, n.last_offset));
    } else if (n.kind == K::kSkippedBatch) {
      ++skipped;
      if (!f.quiet)
        cli::Warn(fmt::format("group {}: skipping corrupt batch: {}", *f.group, n.error.message()));
    } else if (n.kind == K::kSkippedOffsets) {
      skipped_offsets += static_cast<uint64_t>(n.last_offset - n.first_offset + 1);
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: skipped offsets {}..{} of topic {} partition {}: "
                        "committed past with the messages after them",
                        *f.group, n.first_offset, n.last_offset, topic, n.partition));
    } else if (n.kind == K::kOutOfRange) {
      if (!f.quiet)
        cli::Warn(
            fmt::format("group {}: partition {}: offsets {}..{} were deleted by retention "
                        "before they were read: going on at the log start, {}",
                        *f.group, name, n.first_offset, n.last_offset, n.last_offset + 1));
    }
  }
};

// A member's run (RunGroup), in the order it is set up: the topics'
// consumers, the group joined, the outputs (--exec's dispatcher,
// --to-topic's pipeline), then the member's loop and its end.
class GroupRun {
 public:
  GroupRun(const Flags& f, Settings settings, const volatile std::sig_atomic_t* interrupted)
      : f_(f), settings_(std::move(settings)), interrupted_(interrupted) {}

  Status Open() {
    auto dir = DataDir::Open(f_.dir, false);
    if (!dir) return dir.error();
    dir_.emplace(std::move(*dir));
    SetConsumerOptions();
    MQ_RETURN_IF_ERROR(OpenSources());
    MQ_RETURN_IF_ERROR(Join());
    MQ_RETURN_IF_ERROR(FindFirstConfig());
    return OpenOutputs();
  }

  int Run();

 private:
  void SetConsumerOptions() {
    options_.limits = {f_.max_batch_bytes, f_.max_batch_bytes};
    options_.stop_at_end = f_.exit_at_end;
    // A corrupt batch stops its partition, not the member (format-spec/
    // group.md §14.7): reported here, committed up to it by the member
    // (Member::OnStopped), and the exit status at the end is 65. With
    // --skip-corrupt it is skipped, and the offsets past it are committed
    // as the messages after it are handed over.
    options_.skip_corrupt = f_.skip_corrupt;
    options_.stop_corrupt = true;
    const bool several = ReadsSeveralTopics(f_);
    options_.on_notice = [this, several](const ConsumerNotice& n) { notices_.Add(f_, several, n); };
    if (settings_.pipeline) budget_.per_share = kDescriptorsPerReader + kDescriptorsPerWriter;
    budget_.pipeline = settings_.pipeline.has_value();
    if (settings_.handler) budget_.reserved = ReservedDescriptors(*settings_.handler);
    // The consumers' max_open is their share (budget.Share), once opened.
    options_.max_open = 1;
  }

  // The topics read (R64): those named (each must exist) and those a
  // pattern matches now; a pattern's later matches are added at each poll
  // (Member::Resubscribe).
  Status OpenSources() {
    std::vector<std::string> names{f_.topic};
    if (ReadsSeveralTopics(f_)) {
      auto matched = MatchSubscription(f_, *dir_);
      if (!matched) return matched.error();
      names = std::move(*matched);
    }
    for (const std::string& t : names) {
      auto consumer = Consumer::Open(*dir_, t, options_);
      if (!consumer) return consumer.error();
      auto src = std::make_unique<Source>();
      src->topic = t;
      src->consumer = std::move(*consumer);
      subscription_.push_back({t, src->consumer->config().partitions});
      sources_.push_back(std::move(src));
    }
    shares_ = budget_.Share(sources_);
    // A topic read keeps a reader at least (ReaderBudget::Room): more topics
    // than the open-file limit has room for are refused.
    if (sources_.size() > shares_)
      return Status(Code::kUnavailable,
                    fmt::format("group {}: {} topics to read, but the open-file limit "
                                "leaves room for {} readers, one a topic at least: raise "
                                "ulimit -n or read fewer topics",
                                *f_.group, sources_.size(), shares_));
    return Status::Ok();
  }

  Status Join() {
    auto group = Group::Open(dir_->path(), *f_.group, true);
    if (!group) return group.error();
    group_.emplace(std::move(*group));
    // The group must be readable before anything is consumed: a corrupt
    // offsets file stops here (R29, R30), never resets to earliest/latest.
    if (auto state = group_->Read(); !state) return state.error();
    const std::string id = f_.member_id ? *f_.member_id : DefaultMemberId();
    auto member = GroupMember::Join(&*group_, id, subscription_);
    if (!member) return member.error();
    member_.emplace(std::move(*member));
    // A signal ends a wait for commit.lock (SIGTERM must end a member whose
    // commit waits for a stuck holder).
    member_->InterruptWaitsOn(interrupted_);
    if (f_.session_timeout_ms) MQ_RETURN_IF_ERROR(member_->KeepSession(*f_.session_timeout_ms));
    // Its heartbeat (R69): how long it may go between two polls before the
    // other members of this host take it for stuck and fence it.
    return member_->KeepHeartbeat(MemberDeadlineMs(f_, settings_));
  }

  // --exec, --dlq and --to-topic with several topics: the topics created
  // like the first one read; none matched yet, they must exist already.
  Status FindFirstConfig() {
    first_ = sources_.empty() ? nullptr : &sources_.front()->consumer->config();
    if (first_ != nullptr) return Status::Ok();
    for (const std::optional<std::string>& t :
         {settings_.handler ? settings_.handler->dlq : std::nullopt, f_.to_topic}) {
      if (!t) continue;
      if (auto c = dir_->ReadTopic(*t); !c && c.error().code() == Code::kNotFound)
        return Status(Code::kNotFound,
                      fmt::format("topic {} does not exist, and no topic matches {} "
                                  "yet to create it like: create it first",
                                  *t, fmt::join(f_.topics, " ")));
    }
    first_ = &none_;
    return Status::Ok();
  }

  Status OpenOutputs() {
    if (settings_.handler) {
      // Lanes (dispatcher.h): the topics read so far, in order.
      dispatcher_.emplace(std::move(*settings_.handler),
                          sources_.empty() ? "" : sources_.front()->topic, interrupted_);
      for (auto& src : sources_) {
        auto number = dispatcher_->AddTopic(src->topic);
        if (!number) return number.error();
        src->number = *number;
      }
    }
    if (settings_.pipeline) {
      settings_.pipeline->max_open = PipelineWriterBudget(shares_, first_->partitions);
      settings_.pipeline->topics = &dispatcher_->topics();
      pipeline_.emplace(std::move(*settings_.pipeline), *dir_, *first_);
      MQ_RETURN_IF_ERROR(pipeline_->Open());
      budget_.writers = &*pipeline_;
      budget_.Share(sources_);
      dispatcher_->set_sink(&*pipeline_);
    }
    if (!settings_.handler) return Status::Ok();
    // A handler holds a lock of its partition too: the partition is free
    // only once the member and every handler of it are gone.
    GroupMember* owner = &*member_;
    // Run on this thread (not --parallel), each message or batch starts a
    // wait of the member's deadline between two polls: its heartbeat says
    // so first (R69), so that a member retrying one message after another
    // is never taken for stuck.
    const bool serial = !dispatcher_->parallel();
    const TopicTable* topics = &dispatcher_->topics();
    std::mutex* subscribe_mu = &subscribe_mu_;
    dispatcher_->set_handler_lock(
        [owner, topics, serial, subscribe_mu](int32_t lane) -> Result<FileLock> {
          std::lock_guard<std::mutex> lk(*subscribe_mu);
          if (serial) MQ_RETURN_IF_ERROR(owner->Beat());
          return owner->LockForHandler(topics->TopicOf(lane), LanePartition(lane));
        });
    return dispatcher_->Open(*dir_, *first_);
  }

  // The run's outputs closed (--exec's, --to-topic's) after the member's
  // loop ended with `s`: the first error.
  Status CloseOutputs(Status s) {
    if (dispatcher_) {
      Status closed = dispatcher_->Close();
      if (s.ok()) s = closed;
    }
    if (pipeline_) {
      Status closed = pipeline_->Close();
      if (s.ok()) s = closed;
    }
    return s;
  }

  // -v: what the run processed.
  void PrintTotals(const cli::Output& out) {
    if (f_.verbose && pipeline_)
      cli::Eprint(
          "Processed a total of {} messages ({} outputs appended to {}, {} dead-lettered, "
          "{} retries)\n",
          dispatcher_->handled(), pipeline_->appended(), *f_.to_topic, dispatcher_->dead_lettered(),
          dispatcher_->retries());
    else if (f_.verbose && dispatcher_)
      cli::Eprint("Processed a total of {} messages ({} dead-lettered, {} retries)\n",
                  dispatcher_->handled(), dispatcher_->dead_lettered(), dispatcher_->retries());
    else if (f_.verbose)
      cli::Eprint("Processed a total of {} messages\n", out.records_written());
  }

  const Flags& f_;
  Settings settings_;
  const volatile std::sig_atomic_t* interrupted_;
  std::optional<DataDir> dir_;
  ConsumerOptions options_;
  GroupNotices notices_;
  ReaderBudget budget_;
  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<TopicPartitions> subscription_;
  size_t shares_ = 0;
  std::optional<Group> group_;
  std::optional<GroupMember> member_;
  std::optional<Pipeline> pipeline_;
  std::optional<Dispatcher> dispatcher_;
  std::mutex subscribe_mu_;  // the member's subscription, changed by Member::Resubscribe
  const TopicConfig* first_ = nullptr;
  const TopicConfig none_{};
};

int GroupRun::Run() {
  cli::Output out(1, 1 << 20);
  // Printing, a write its reader does not take holds up the member's polls
  // as a handler run does: the same bound (Kafka's max.poll.interval.ms).
  if (!dispatcher_)
    out.set_write_timeout(f_.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs));
  Member m(f_, settings_, &*dir_, std::move(sources_), options_, &*group_, &*member_, &out,
           dispatcher_ ? &*dispatcher_ : nullptr, &notices_.stopped, &subscribe_mu_, budget_,
           &notices_.cuts);
  Status s = m.Run(interrupted_);
  Status fin = m.Finish(s.ok());
  if (s.ok()) s = fin;
  s = CloseOutputs(std::move(s));
  int rc = out.FinishExitCode();
  member_->Leave();
  PrintTotals(out);
  if (!s.ok() && dispatcher_ && dispatcher_->exit_code() != 0) {
    cli::Warn(fmt::format("group {}: {}", group_->name(), s.message()));
    return dispatcher_->exit_code();
  }
  if (!s.ok()) return cli::Fail(s);
  if (rc != cli::kExitOk) return rc;
  // Everything readable was handed over; what stderr named was not.
  if (notices_.stops > 0) return cli::kExitDataErr;
  if (notices_.skipped > 0) {
    if (!f_.quiet)
      cli::Warn(fmt::format("skipped {} corrupt batch{} ({} offsets not delivered)",
                            notices_.skipped, notices_.skipped == 1 ? "" : "es",
                            notices_.skipped_offsets));
    return cli::kExitProblems;
  }
  return rc;
}

}  // namespace

int RunGroup(const Flags& f, Settings settings, const volatile std::sig_atomic_t* interrupted) {
  GroupRun run(f, std::move(settings), interrupted);
  if (Status s = run.Open(); !s.ok()) return cli::Fail(s);
  return run.Run();
}

}  // namespace mq::consume
