#include "run.h"

#include <memory>
#include <optional>

#include <fmt/format.h>

#include "mq/consumer.h"
#include "mq/topic_admin.h"

namespace mq::consume {
namespace {

// Longest a follower blocks before it checks its output and signals again.
constexpr int kWaitSliceMs = 250;

void Report(const ConsumerNotice& n, const std::string& topic) {
  using K = ConsumerNotice::Kind;
  switch (n.kind) {
    case K::kIndexWarning:
      cli::Warn(fmt::format("{}/{}: position {}: {}: {}", n.dir, n.problem.file, n.problem.position,
                            n.problem.rule, n.problem.detail));
      return;
    case K::kSkippedBatch:
      cli::Warn(fmt::format("skipping corrupt batch: {}", n.error.message()));
      return;
    case K::kSkippedOffsets:
      cli::Warn(fmt::format("skipped offsets {}..{} of topic {} partition {}", n.first_offset,
                            n.last_offset, topic, n.partition));
      return;
    case K::kTruncated:
      cli::Warn(
          fmt::format("topic {} partition {}: offsets {}..{}, printed already, were cut from "
                      "the log (a failover): reading them again from {}",
                      topic, n.partition, n.first_offset, n.last_offset, n.first_offset));
      return;
    case K::kStoppedPartition:  // stop_corrupt: group members only
      cli::Warn(n.error.message());
      return;
    case K::kOutOfRange:
      cli::Warn(
          fmt::format("topic {} partition {}: offsets {}..{} were deleted by retention "
                      "before they were read: reading from the log start, {}",
                      topic, n.partition, n.first_offset, n.last_offset, n.last_offset + 1));
      return;
  }
}

struct Loop {
  Consumer* consumer;
  Printer* printer;
  cli::Output* out;
  const std::vector<HeaderFilter>* filters;
  std::optional<uint64_t> count;
  Dispatcher* dispatcher = nullptr;  // --exec: messages go to handlers, not the printer
  uint64_t delivered = 0;
  const DataDir* dir = nullptr;           // a follower stops when the topic is deleted (R83)
  std::optional<TopicIdentity> identity;  // ... or deleted and created again
};

// Prints messages until a stop condition (-c, -e, e@), a closed output, an
// error, or an interrupt; follows new appends otherwise.
Status Consume(Loop& loop, const volatile std::sig_atomic_t* interrupted) {
  if (loop.count && *loop.count == 0) return Status::Ok();
  const bool need_headers =
      loop.printer->needs_headers() || loop.dispatcher || !loop.filters->empty();
  std::vector<Header> headers;
  while (!*interrupted) {
    auto next = loop.consumer->Next();
    if (!next) return next.error();
    if (const ConsumedRecord* m = *next) {
      if (need_headers) headers = m->record.headers();
      if (!loop.filters->empty() && !MatchesAll(headers, *loop.filters)) continue;
      if (loop.dispatcher)
        MQ_RETURN_IF_ERROR(
            loop.dispatcher->Add(m->partition, m->log_append_time, m->record, headers));
      else
        loop.printer->Print(m->partition, m->log_append_time, m->record, headers);
      if (++loop.delivered == loop.count || loop.out->broken()) return Status::Ok();
      continue;
    }
    if (loop.consumer->finished()) return Status::Ok();
    // Every partition is at its committed end: show what we have, then wait.
    if (loop.dispatcher) MQ_RETURN_IF_ERROR(loop.dispatcher->Flush());
    if (!loop.out->Flush() && loop.out->broken()) return Status::Ok();
    while (!loop.consumer->WaitForAppend(kWaitSliceMs)) {
      if (*interrupted || cli::OutputClosed()) return Status::Ok();
      if (loop.dir)
        MQ_RETURN_IF_ERROR(CheckTopicExists(*loop.dir, loop.consumer->topic(), loop.identity));
    }
  }
  return Status::Ok();
}

Status AssignAll(Consumer* consumer, const std::vector<int32_t>& partitions,
                 const Positions& positions) {
  for (int32_t p : partitions) {
    MQ_RETURN_IF_ERROR(
        consumer->Assign(p, positions.StartFor(p, {StartPosition::Kind::kBeginning, 0})));
  }
  return Status::Ok();
}

// Which topic of its name the follower reads (R83), taken once its readers
// hold the partitions' directories open.
std::optional<TopicIdentity> OpenedTopic(const DataDir& dir, const std::string& topic,
                                         const std::vector<int32_t>& partitions) {
  if (partitions.empty()) return std::nullopt;
  auto identity = ReadTopicIdentity(dir, topic, partitions.front());
  if (!identity) return std::nullopt;
  return *identity;
}

}  // namespace

int Run(const Flags& f, Settings settings, const volatile std::sig_atomic_t* interrupted) {
  auto dir = DataDir::Open(f.dir, false);
  if (!dir) return cli::Fail(dir.error());

  ConsumerOptions options;
  options.limits = {f.max_batch_bytes, f.max_batch_bytes};
  options.stop_at_end = f.exit_at_end;
  options.stop_timestamp = settings.positions.end_timestamp;
  options.skip_corrupt = f.skip_corrupt;
  if (!f.quiet) options.on_notice = [&](const ConsumerNotice& n) { Report(n, f.topic); };
  options.max_open = cli::OpenPartitionBudget(
      kDescriptorsPerReader, settings.handler ? ReservedDescriptors(*settings.handler) : 0);
  auto consumer = Consumer::Open(*dir, f.topic, std::move(options));
  if (!consumer) return cli::Fail(consumer.error());
  auto partitions = ChoosePartitions(f, (*consumer)->config(), settings.positions);
  if (!partitions) return cli::Fail(partitions.error());

  cli::Output out(1, 1 << 20);
  Printer printer(std::move(settings.print), &out);
  std::optional<Dispatcher> dispatcher;
  if (settings.handler) {
    dispatcher.emplace(std::move(*settings.handler), f.topic, interrupted);
    if (Status s = dispatcher->Open(*dir, (*consumer)->config()); !s.ok()) return cli::Fail(s);
  }
  Loop loop{consumer->get(),          &printer, &out,
            &settings.header_filters, f.count,  dispatcher ? &*dispatcher : nullptr};
  loop.dir = &*dir;
  Status s = AssignAll(consumer->get(), *partitions, settings.positions);
  if (s.ok()) loop.identity = OpenedTopic(*dir, f.topic, *partitions);
  if (s.ok()) s = Consume(loop, interrupted);
  if (s.ok() && dispatcher && !*interrupted) s = dispatcher->Flush();
  if (dispatcher) {
    Status closed = dispatcher->Close();
    if (s.ok()) s = closed;
  }
  int rc = out.FinishExitCode();
  if (f.verbose && dispatcher)
    cli::Eprint("Processed a total of {} messages ({} dead-lettered, {} retries)\n",
                dispatcher->handled(), dispatcher->dead_lettered(), dispatcher->retries());
  else if (f.verbose)
    cli::Eprint("Processed a total of {} messages\n", out.records_written());
  if (!s.ok() && dispatcher && dispatcher->exit_code() != 0) {
    cli::Warn(s.message());
    return dispatcher->exit_code();
  }
  if (!s.ok()) return cli::Fail(s);
  uint64_t skipped = (*consumer)->skipped_batches();
  if (skipped > 0) {
    // Everything readable was printed, but not everything committed.
    if (!f.quiet)
      cli::Warn(fmt::format("skipped {} corrupt batch{} ({} offsets not delivered)", skipped,
                            skipped == 1 ? "" : "es", (*consumer)->skipped_offsets()));
    if (rc == 0) rc = cli::kExitProblems;
  }
  return rc;
}

}  // namespace mq::consume
