#include "options.h"

#include <fcntl.h>

#include <algorithm>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "escapes.h"
#include "format_string.h"
#include "mq/assignment.h"
#include "size_option.h"

namespace mq::consume {
namespace {

// Decimal digits only: CLI11 would read "-1" as a huge unsigned number.
const CLI::Validator kDigits(
    [](std::string& s) -> std::string {
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return "";
      return "expected a non-negative integer, got '" + s + "'";
    },
    "N");

Result<PrintOptions> MakePrintOptions(const Flags& f) {
  PrintOptions p;
  p.topic = f.topic;
  if (f.null_text) p.null_text = "NULL";
  if (f.null_delim) p.delimiter = std::string(1, '\0');
  if (f.raw) p.delimiter.clear();
  if (f.delim) {
    auto d = cli::DecodeEscapes(*f.delim, "--delimiter");
    if (!d) return d.error();
    p.delimiter = *d;
  }
  if (f.print_key || f.key_delim) p.mode = PrintOptions::Mode::kKeyValue;
  if (f.key_delim) {
    auto d = cli::DecodeEscapes(*f.key_delim, "--key-delimiter");
    if (!d) return d.error();
    p.key_delimiter = *d;
  }
  if (f.format) {
    auto fs = fmtstr::FormatString::Parse(*f.format);
    if (!fs) return fs.error();
    p.format = std::move(*fs);
    p.mode = PrintOptions::Mode::kFormat;
  }
  if (f.json) p.mode = PrintOptions::Mode::kJson;
  return p;
}

Result<std::vector<HeaderFilter>> MakeHeaderFilters(const std::vector<std::string>& specs) {
  std::vector<HeaderFilter> out;
  for (const std::string& s : specs) {
    if (s.empty() || s[0] == '=')
      return Status(
          Code::kInvalidArgument,
          fmt::format("--header-filter: invalid value '{}': expected NAME or NAME=VALUE", s));
    size_t eq = s.find('=');
    if (eq == std::string::npos)
      out.push_back({s, std::nullopt});
    else
      out.push_back({s.substr(0, eq), s.substr(eq + 1)});
  }
  return out;
}

// -G's flags: the group, the member, where it starts, when it commits.
void AddGroupFlags(CLI::App& app, Flags* f) {
  app.add_option("-G,--group", f->group,
                 "read as a member of consumer group GROUP, from its committed offsets");
  app.add_option("--member-id", f->member_id,
                 "this member's id in the group (static membership; default host-pid-random)");
  app.add_option("--session-timeout", f->session_timeout_ms,
                 "--member-id: once this member stops, its partitions wait MS ms for it to "
                 "come back before they are reassigned")
      ->transform(mq::cli::DurationUnits())
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  app.add_option("--reset", f->reset,
                 "where a partition without a committed offset starts: earliest|latest")
      ->check(CLI::IsMember({"earliest", "latest"}))
      ->capture_default_str();
  app.add_flag("--at-most-once", f->at_most_once,
               "commit each batch's offsets before printing it (default: at-least-once, "
               "commit after output)");
  app.add_option("--commit-interval", f->commit_interval_ms, "commit at least every MS ms")
      ->transform(mq::cli::DurationUnits())
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option("--commit-every", f->commit_every,
                 "commit at least every N messages (0: by time only)")
      ->check(kDigits)
      ->capture_default_str();
  app.add_option("--ack-fd", f->ack_fd,
                 "commit only offsets acknowledged as 'PARTITION OFFSET' lines on descriptor N")
      ->check(CLI::Range(0, 1 << 20));
}

// --exec's flags: the handler, its retries and dead letters, --parallel,
// --to-topic.
void AddExecFlags(CLI::App& app, Flags* f) {
  app.add_option("--exec", f->exec_inline,
                 "run CMD for each message, the value on stdin (must come last: every "
                 "argument after it is CMD's)")
      ->type_name("CMD [ARG]...");
  app.add_option("--batch", f->batch,
                 "--exec: up to N messages of one partition per run, as -J lines on stdin")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--max-attempts", f->max_attempts,
                 "--exec: runs of a failing handler per message (default 3)")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--retry-backoff", f->retry_backoff_ms,
                 "--exec: ms before the first retry, doubled each time up to 10 s (default 100)")
      ->transform(mq::cli::DurationUnits())
      ->check(CLI::Range(0u, 3600000u));
  app.add_option("--dlq", f->dlq,
                 "--exec: append messages that fail every attempt to this dead-letter topic");
  app.add_option("--max-poll-interval", f->max_poll_interval_ms,
                 "-G: a handler run, or a write to standard output, longer than MS ms is "
                 "stuck: the member gives up (default 300000)")
      ->transform(mq::cli::DurationUnits())
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}));
  app.add_option("--parallel", f->parallel,
                 "-G --exec: run handlers of up to N partitions at once, one per partition "
                 "(default 1)")
      ->check(CLI::Range(1u, kMaxParallel));
  app.add_option("--to-topic", f->to_topic,
                 "-G --exec: a pipeline: append each line the handler prints to topic OUT, "
                 "effectively once (-K SEP: KEY SEP VALUE lines)")
      ->type_name("OUT");
  app.add_option("--fsync", f->fsync,
                 "--to-topic: none (default) or batch (fsync each append before the commit)")
      ->check(CLI::IsMember({"none", "batch"}));
}

}  // namespace

void AddFlags(CLI::App& app, Flags* f) {
  cli::AddDirOption(app, &f->dir);
  // Required unless a group mode; repeated, or a ^pattern, with -G (R64).
  app.add_option("-t,--topic", f->topics,
                 "topic to read; with -G repeatable, and ^REGEX reads the topics it matches")
      ->each([f](const std::string& t) {
        if (f->topics.empty() && f->topic.empty()) f->topic = t;
      });
  app.add_option("-p,--partition", f->partitions, "partitions to read, e.g. 0,2 (default all)")
      ->delimiter(',')
      ->check(kDigits);
  app.add_option("-o,--offset", f->offsets,
                 "start: beginning|end|N|-N|s@MS|ISO-TIME, per partition as P:START; "
                 "stop: e@MS|e@ISO-TIME (repeatable)");
  app.add_option("-c,--count", f->count, "exit after N messages")->check(kDigits);
  app.add_flag("-e,--exit-at-end", f->exit_at_end,
               "exit at the end offsets captured at start instead of waiting");
  auto* k = app.add_flag("-k,--print-key", f->print_key, "print the key, a tab, then the value");
  auto* K = app.add_option("-K,--key-delimiter", f->key_delim,
                           "print the key, DELIM, then the value (escapes \\n \\t \\0 \\xNN)");
  auto* D = app.add_option("-D,--delimiter", f->delim, "message delimiter (default \\n)");
  auto* zero = app.add_flag("-0,--null", f->null_delim, "NUL-terminated messages (-D '\\0')");
  auto* raw = app.add_flag("--raw", f->raw, "no delimiter after messages");
  auto* fmt_opt =
      app.add_option("-f,--format", f->format, "kcat format: %t %p %o %T %F %k %K %s %S %h %x %X");
  auto* json = app.add_flag("-J,--json", f->json, "JSON Lines envelope (binary-safe)");
  auto* Z = app.add_flag("-Z,--print-null", f->null_text, "print NULL for a null key or value");
  app.add_option("--header-filter", f->header_filters,
                 "only messages with header NAME (equal to VALUE); repeatable, all must match");
  app.add_flag("--skip-corrupt", f->skip_corrupt,
               "report corrupt batches on stderr and go on instead of exiting 65");
  app.add_option("--max-batch-bytes", f->max_batch_bytes,
                 "largest batch (and decompressed records) read, in bytes")
      ->transform(mq::cli::SizeUnits())
      ->check(CLI::Range(61u, 0x7FFFFFFFu))
      ->capture_default_str();
  AddGroupFlags(app, f);
  AddExecFlags(app, f);
  auto* q = app.add_flag("-q,--quiet", f->quiet, "no warnings on stderr");
  app.add_flag("-v,--verbose", f->verbose, "print a summary on stderr at exit")->excludes(q);
  k->excludes(K);
  D->excludes(zero)->excludes(raw);
  zero->excludes(raw);
  for (CLI::Option* o : {k, K, D, zero, raw, Z}) json->excludes(o);
  for (CLI::Option* o : {k, K, D, zero, raw, json}) fmt_opt->excludes(o);
  AddAdminFlags(app, &f->admin);
}

void TakeExec(int* argc, char** argv, Flags* f) {
  for (int i = 1; i < *argc; ++i) {
    if (std::string_view(argv[i]) != "--exec") continue;
    f->exec_given = true;
    f->exec.assign(argv + i + 1, argv + *argc);
    *argc = i;
    return;
  }
}

namespace {

Status Usage(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

// The --exec flags: checked against each other, or nullopt without --exec.
Result<std::optional<HandlerOptions>> MakeHandlerOptions(const Flags& f) {
  if (!f.exec_inline.empty())
    return Usage("--exec takes the rest of the command line: --exec CMD [ARG]..., not --exec=CMD");
  if (!f.exec_given) {
    if (f.batch) return Usage("--batch needs --exec");
    if (f.max_attempts) return Usage("--max-attempts needs --exec");
    if (f.retry_backoff_ms) return Usage("--retry-backoff needs --exec");
    if (f.dlq) return Usage("--dlq needs --exec");
    if (f.parallel) return Usage("--parallel needs -G GROUP and --exec");
    return std::optional<HandlerOptions>();
  }
  if (f.exec.empty()) return Usage("--exec: no command given (--exec CMD [ARG]...)");
  if (f.print_key || (f.key_delim && !f.to_topic) || f.delim || f.null_delim || f.raw || f.format ||
      f.json || f.null_text)
    return Usage(
        "--exec: the handler gets each message itself: output flags "
        "(-k -K -D -0 --raw -f -J -Z) do not apply");
  if (f.parallel && !f.group) return Usage("--parallel needs a consumer group (-G GROUP)");
  if (f.ack_fd)
    return Usage("--ack-fd: with --exec a message is handed over when its handler succeeds");
  HandlerOptions h;
  h.command = f.exec;
  h.batch = f.batch;
  if (f.max_attempts) h.max_attempts = *f.max_attempts;
  if (f.retry_backoff_ms) h.retry_backoff_ms = *f.retry_backoff_ms;
  h.max_backoff_ms = std::max(h.max_backoff_ms, h.retry_backoff_ms);
  if (f.dlq) {
    if (auto s = ValidateName(*f.dlq, "topic"); !s.ok()) return Usage("--dlq: " + s.message());
    for (const std::string& t : f.topics)
      if (*f.dlq == t || *f.dlq == f.topic)
        return Usage("--dlq: the dead-letter topic must differ from the topics read");
    h.dlq = f.dlq;
  }
  h.group = f.group;
  if (f.group) h.max_run_ms = f.max_poll_interval_ms.value_or(kDefaultMaxPollIntervalMs);
  h.at_most_once = f.at_most_once;
  h.parallel = f.parallel.value_or(1);
  h.quiet = f.quiet;
  return std::optional<HandlerOptions>(std::move(h));
}

// -G decides where each partition starts and which partitions are read;
// the group flags mean nothing without it.
Status CheckGroupFlags(const Flags& f) {
  if (!f.group) {
    if (f.member_id) return Usage("--member-id needs a consumer group (-G GROUP)");
    if (f.session_timeout_ms) return Usage("--session-timeout needs a consumer group (-G GROUP)");
    if (f.max_poll_interval_ms)
      return Usage("--max-poll-interval needs a consumer group (-G GROUP)");
    if (f.at_most_once) return Usage("--at-most-once needs a consumer group (-G GROUP)");
    if (f.ack_fd) return Usage("--ack-fd needs a consumer group (-G GROUP)");
    return Status::Ok();
  }
  if (Status s = ValidateName(*f.group, "group"); !s.ok()) return Usage("--group: " + s.message());
  if (f.member_id)
    if (Status s = ValidateName(*f.member_id, "member id"); !s.ok())
      return Usage("--member-id: " + s.message());
  if (f.session_timeout_ms && !f.member_id)
    return Usage(
        "--session-timeout needs --member-id: a session keeps the partitions of a "
        "member that comes back under its id");
  for (const std::string& o : f.offsets)
    if (o != "stored")
      return Usage(
          fmt::format("-o {}: a group member starts at the group's committed offsets "
                      "(-o stored); move them with --reset-offsets",
                      o));
  if (!f.partitions.empty())
    return Usage("--partition: a group assigns the partitions to its members");
  if (f.at_most_once && f.ack_fd)
    return Usage("--at-most-once commits before output: not with --ack-fd");
  if (f.ack_fd) {
    if (*f.ack_fd <= 2)
      return Usage(fmt::format("--ack-fd {}: use a descriptor above 2", *f.ack_fd));
    if (::fcntl(*f.ack_fd, F_GETFD) < 0)
      return Usage(fmt::format("--ack-fd {}: not an open descriptor (open it with {}<FILE)",
                               *f.ack_fd, *f.ack_fd));
  }
  return Status::Ok();
}

}  // namespace

// --to-topic: a pipeline (format-spec/pipeline.md); nullopt without it.
Result<std::optional<PipelineOptions>> MakePipelineOptions(const Flags& f) {
  if (!f.to_topic) {
    if (f.fsync) return Usage("--fsync needs --to-topic");
    return std::optional<PipelineOptions>();
  }
  if (auto s = ValidateName(*f.to_topic, "topic"); !s.ok())
    return Usage("--to-topic: " + s.message());
  if (!f.group)
    return Usage(
        "--to-topic needs a consumer group (-G GROUP): its offsets say where a rerun "
        "resumes");
  if (!f.exec_given) return Usage("--to-topic needs a transform: --exec CMD [ARG]...");
  for (const std::string& t : f.topics)
    if (*f.to_topic == t || *f.to_topic == f.topic)
      return Usage("--to-topic: the output topic must differ from the topics read");
  if (f.dlq && *f.dlq == *f.to_topic)
    return Usage("--to-topic: the output topic must differ from the dead-letter topic");
  // By design, not for now: an output names its source message (E2) and a
  // restart completes a message at a time (E6, E7), but a batch
  // transform's lines cannot be told apart by message, and batch
  // boundaries depend on what each run read.
  if (f.batch)
    return Usage(
        "--to-topic: not with --batch: each output names its source message "
        "(format-spec/pipeline.md E2) and a restart completes one message at a time "
        "(E6, E7), but the lines a batch transform prints cannot be told apart by "
        "message, and batches differ from run to run; a transform runs once per "
        "message");
  if (f.at_most_once) return Usage("--to-topic is effectively-once: not with --at-most-once");
  PipelineOptions p;
  p.group = *f.group;
  p.in = f.topic;
  p.out = *f.to_topic;
  if (f.key_delim) {
    auto d = cli::ParseEscapes(*f.key_delim, "-K/--key-delimiter");
    if (!d) return d.error();
    if (d->find('\n') != std::string::npos)
      return Usage("-K/--key-delimiter: must not hold a newline (outputs are lines)");
    p.key_delimiter = *d;
  }
  p.durability = f.fsync && *f.fsync == "batch" ? Durability::kEveryBatch : Durability::kNone;
  // The registry name must be a valid name (R12) for every partition of
  // every topic named (one a pattern matches is checked as its partitions
  // are taken: the member stops there).
  for (const std::string& in : f.topics) {
    if (IsTopicPattern(in)) continue;
    if (auto s = ValidateName(PipelineProducerName(p.group, in, p.out, kLanesPerTopic - 1),
                              "producer id");
        !s.ok())
      return Usage(
          "--to-topic: group and topic names too long for the pipeline's producer "
          "name (" +
          s.message() + ")");
  }
  p.quiet = f.quiet;
  p.verbose = f.verbose;
  return std::optional<PipelineOptions>(std::move(p));
}

bool ReadsSeveralTopics(const Flags& f) {
  return f.topics.size() > 1 || (!f.topic.empty() && IsTopicPattern(f.topic));
}

namespace {

// -t repeated or a pattern (R64): a group member's subscription.
Status CheckSeveralTopics(const Flags& f) {
  if (!f.group)
    return Usage(
        "several topics (-t T1 -t T2) or a topic pattern (-t '^REGEX') need a consumer "
        "group (-G GROUP): without one, mq-consume reads one topic");
  if (Status s = ValidateTopicArgs(f.topics); !s.ok()) return Usage("--topic: " + s.message());
  return Status::Ok();
}

}  // namespace

Result<Settings> Resolve(const Flags& f) {
  if (f.topic.empty()) return Status(Code::kInvalidArgument, "--topic is required");
  if (ReadsSeveralTopics(f)) {
    MQ_RETURN_IF_ERROR(CheckSeveralTopics(f));
  } else if (Status s = ValidateName(f.topic, "topic"); !s.ok()) {
    return Status(Code::kInvalidArgument, "--topic: " + s.message());
  }
  Settings out;
  auto print = MakePrintOptions(f);
  if (!print) return print.error();
  out.print = std::move(*print);
  std::vector<std::string> offsets;
  for (const std::string& o : f.offsets)
    if (!(f.group && o == "stored")) offsets.push_back(o);
  auto positions = ParsePositions(offsets);
  if (!positions) return positions.error();
  out.positions = std::move(*positions);
  auto filters = MakeHeaderFilters(f.header_filters);
  if (!filters) return filters.error();
  out.header_filters = std::move(*filters);
  MQ_RETURN_IF_ERROR(CheckGroupFlags(f));
  auto handler = MakeHandlerOptions(f);
  if (!handler) return handler.error();
  out.handler = std::move(*handler);
  auto pipeline = MakePipelineOptions(f);
  if (!pipeline) return pipeline.error();
  out.pipeline = std::move(*pipeline);
  return out;
}

Result<std::vector<int32_t>> ChoosePartitions(const Flags& f, const TopicConfig& config,
                                              const Positions& positions) {
  for (const auto& [p, start] : positions.per_partition) {
    if (p >= config.partitions)
      return Status(Code::kInvalidArgument,
                    fmt::format("-o {}:...: topic {} has {} partition(s), 0 to {}", p, f.topic,
                                config.partitions, config.partitions - 1));
    if (!f.partitions.empty() &&
        std::find(f.partitions.begin(), f.partitions.end(), p) == f.partitions.end())
      return Status(Code::kInvalidArgument,
                    fmt::format("-o {}:...: partition {} is not among those read (-p)", p, p));
  }
  if (f.partitions.empty()) {
    std::vector<int32_t> all;
    for (int32_t p = 0; p < config.partitions; ++p) all.push_back(p);
    return all;
  }
  std::vector<int32_t> chosen;
  for (int32_t p : f.partitions) {
    if (p >= config.partitions)
      return Status(Code::kInvalidArgument,
                    fmt::format("--partition {}: topic {} has {} partition(s), 0 to {}", p, f.topic,
                                config.partitions, config.partitions - 1));
    if (std::find(chosen.begin(), chosen.end(), p) == chosen.end()) chosen.push_back(p);
  }
  return chosen;
}

}  // namespace mq::consume
