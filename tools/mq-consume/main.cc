// mq-consume: print messages of a topic from a start position, then stop or
// follow new appends like tail -f. Manual: man/man1/mq-consume.1.
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "escapes.h"
#include "consumer.h"
#include "format_string.h"
#include "mq/topic.h"

namespace {

using mq::consume::PrintOptions;

// The usage lines are the man page's SYNOPSIS, word for word (a CLI test
// compares them).
constexpr const char* kUsage =
    "Usage: mq-consume [-C DIR] -t TOPIC [-p N[,N]...] [-o POSITION]... [-c N] [-e] "
    "[-k | -K DELIM] [-D DELIM | -0 | --raw] [-f FORMAT | -J] [-Z] "
    "[--header-filter NAME[=VALUE]]... [--skip-corrupt] [--max-batch-bytes N] [-q | -v]\n"
    "       mq-consume [-C DIR] -t TOPIC [-p N[,N]...] [-o POSITION]... [-c N] [-e] "
    "[--header-filter NAME[=VALUE]]... [--skip-corrupt] [--max-batch-bytes N] [-q | -v] "
    "[--batch N] [--max-attempts N] [--retry-backoff MS] [--dlq TOPIC] --exec CMD [ARG]...\n"
    "       mq-consume -h | -V\n"
    "\n"
    "Print the messages of TOPIC, one value per line by default, from the start\n"
    "POSITION (beginning by default). Without -c, -e or an e@ end time, wait for\n"
    "new messages like tail -f. With --exec, run CMD for each message instead\n"
    "(every argument after --exec belongs to CMD).\n";

int Usage(std::string_view message) { return mq::cli::UsageError(kUsage, message); }

// SIGINT/SIGTERM: stop reading, write out what is buffered, print the -v
// summary, then die of the signal as the shell expects.
volatile std::sig_atomic_t g_signal = 0;
extern "C" void OnSignal(int sig) { g_signal = sig; }

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked wait returns early
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

struct Flags {
  std::string dir;
  std::string topic;
  std::vector<int32_t> partitions;
  std::vector<std::string> offsets;
  std::optional<uint64_t> count;
  bool exit_at_end = false;
  bool print_key = false;
  std::optional<std::string> key_delim, delim, format;
  bool null_delim = false, raw = false, json = false, null_text = false;
  std::vector<std::string> header_filters;
  bool skip_corrupt = false, quiet = false, verbose = false;
  uint32_t max_batch_bytes = 64u << 20;
  // --exec CMD [ARG]... (taken off the command line before parsing)
  std::vector<std::string> exec;
  bool exec_given = false;
  std::vector<std::string> exec_inline;  // --exec=X: refused
  std::optional<uint32_t> batch;
  std::optional<uint32_t> max_attempts;
  std::optional<uint32_t> retry_backoff_ms;
  std::optional<std::string> dlq;
};

// Decimal digits only: CLI11 would read "-1" as a huge unsigned number.
const CLI::Validator kDigits(
    [](std::string& s) -> std::string {
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return "";
      return "expected a non-negative integer, got '" + s + "'";
    },
    "N");

void AddFlags(CLI::App& app, Flags* f) {
  mq::cli::AddDirOption(app, &f->dir);
  app.add_option("-t,--topic", f->topic, "topic to read")->required();
  app.add_option("-p,--partition", f->partitions, "partitions to read, e.g. 0,2 (default all)")
      ->delimiter(',')->check(kDigits);
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
  auto* fmt_opt = app.add_option("-f,--format", f->format,
                                 "kcat format: %t %p %o %T %F %k %K %s %S %h %x %X");
  auto* json = app.add_flag("-J,--json", f->json, "JSON Lines envelope (binary-safe)");
  auto* Z = app.add_flag("-Z,--print-null", f->null_text, "print NULL for a null key or value");
  app.add_option("--header-filter", f->header_filters,
                 "only messages with header NAME (equal to VALUE); repeatable, all must match");
  app.add_flag("--skip-corrupt", f->skip_corrupt,
               "report corrupt batches on stderr and go on instead of exiting 65");
  app.add_option("--max-batch-bytes", f->max_batch_bytes,
                 "largest batch (and decompressed records) read, in bytes")
      ->check(CLI::Range(61u, 0x7FFFFFFFu))->capture_default_str();
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
      ->check(CLI::Range(0u, 3600000u));
  app.add_option("--dlq", f->dlq,
                 "--exec: append messages that fail every attempt to this dead-letter topic");
  auto* q = app.add_flag("-q,--quiet", f->quiet, "no warnings on stderr");
  app.add_flag("-v,--verbose", f->verbose, "print a summary on stderr at exit")->excludes(q);
  k->excludes(K);
  D->excludes(zero)->excludes(raw);
  zero->excludes(raw);
  for (CLI::Option* o : {k, K, D, zero, raw, Z}) json->excludes(o);
  for (CLI::Option* o : {k, K, D, zero, raw, json}) fmt_opt->excludes(o);
}

mq::Result<PrintOptions> MakePrintOptions(const Flags& f) {
  PrintOptions p;
  p.topic = f.topic;
  if (f.null_text) p.null_text = "NULL";
  if (f.null_delim) p.delimiter = std::string(1, '\0');
  if (f.raw) p.delimiter.clear();
  if (f.delim) {
    auto d = mq::cli::DecodeEscapes(*f.delim, "--delimiter");
    if (!d) return d.error();
    p.delimiter = *d;
  }
  if (f.print_key || f.key_delim) p.mode = PrintOptions::Mode::kKeyValue;
  if (f.key_delim) {
    auto d = mq::cli::DecodeEscapes(*f.key_delim, "--key-delimiter");
    if (!d) return d.error();
    p.key_delimiter = *d;
  }
  if (f.format) {
    auto fs = mq::fmtstr::FormatString::Parse(*f.format);
    if (!fs) return fs.error();
    p.format = std::move(*fs);
    p.mode = PrintOptions::Mode::kFormat;
  }
  if (f.json) p.mode = PrintOptions::Mode::kJson;
  return p;
}

std::vector<mq::consume::HeaderFilter> MakeHeaderFilters(const std::vector<std::string>& specs) {
  std::vector<mq::consume::HeaderFilter> out;
  for (const std::string& s : specs) {
    size_t eq = s.find('=');
    if (eq == std::string::npos) out.push_back({s, std::nullopt});
    else out.push_back({s.substr(0, eq), s.substr(eq + 1)});
  }
  return out;
}

// Every partition of the topic, or the ones asked for (each must exist: a
// partition the topic does not have is a usage error, as in every tool).
mq::Result<std::vector<int32_t>> ChoosePartitions(const Flags& f, const mq::TopicConfig& config,
                                                  const mq::consume::Positions& positions) {
  for (const auto& [p, start] : positions.per_partition) {
    if (p >= config.partitions)
      return mq::Status(mq::Code::kInvalidArgument,
                        fmt::format("-o {}:...: topic {} has {} partition(s), 0 to {}", p, f.topic,
                                    config.partitions, config.partitions - 1));
    if (!f.partitions.empty() &&
        std::find(f.partitions.begin(), f.partitions.end(), p) == f.partitions.end())
      return mq::Status(mq::Code::kInvalidArgument,
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
      return mq::Status(mq::Code::kInvalidArgument,
                        fmt::format("--partition {}: topic {} has {} partition(s), 0 to {}", p,
                                    f.topic, config.partitions, config.partitions - 1));
    if (std::find(chosen.begin(), chosen.end(), p) == chosen.end()) chosen.push_back(p);
  }
  return chosen;
}

// The --exec flags: checked against each other, or nullopt without --exec.
mq::Result<std::optional<mq::consume::HandlerOptions>> MakeHandlerOptions(const Flags& f) {
  using R = mq::Result<std::optional<mq::consume::HandlerOptions>>;
  auto usage = [](std::string m) -> R { return mq::Status(mq::Code::kInvalidArgument, m); };
  if (!f.exec_inline.empty())
    return usage("--exec takes the rest of the command line: --exec CMD [ARG]..., not --exec=CMD");
  if (!f.exec_given) {
    if (f.batch) return usage("--batch needs --exec");
    if (f.max_attempts) return usage("--max-attempts needs --exec");
    if (f.retry_backoff_ms) return usage("--retry-backoff needs --exec");
    if (f.dlq) return usage("--dlq needs --exec");
    return std::optional<mq::consume::HandlerOptions>();
  }
  if (f.exec.empty()) return usage("--exec: no command given (--exec CMD [ARG]...)");
  if (f.print_key || f.key_delim || f.delim || f.null_delim || f.raw || f.format || f.json ||
      f.null_text)
    return usage("--exec: the handler gets each message itself: output flags "
                 "(-k -K -D -0 --raw -f -J -Z) do not apply");
  mq::consume::HandlerOptions h;
  h.command = f.exec;
  h.batch = f.batch;
  if (f.max_attempts) h.max_attempts = *f.max_attempts;
  if (f.retry_backoff_ms) h.retry_backoff_ms = *f.retry_backoff_ms;
  h.max_backoff_ms = std::max(h.max_backoff_ms, h.retry_backoff_ms);
  if (f.dlq) {
    if (auto s = mq::ValidateName(*f.dlq, "topic"); !s.ok()) return usage("--dlq: " + s.message());
    if (*f.dlq == f.topic)
      return usage("--dlq: the dead-letter topic must differ from the topic read");
    h.dlq = f.dlq;
  }
  h.quiet = f.quiet;
  return std::optional<mq::consume::HandlerOptions>(std::move(h));
}

int Run(const Flags& f) {
  if (auto s = mq::ValidateName(f.topic, "topic"); !s.ok()) return Usage("--topic: " + s.message());
  auto handler = MakeHandlerOptions(f);
  if (!handler) return Usage(handler.error().message());
  auto print = MakePrintOptions(f);
  if (!print) return Usage(print.error().message());
  auto positions = mq::consume::ParsePositions(f.offsets);
  if (!positions) return Usage(positions.error().message());
  if (!f.header_filters.empty())
    for (const std::string& h : f.header_filters)
      if (h.empty() || h[0] == '=') return Usage(fmt::format("--header-filter: invalid value '{}': expected NAME or NAME=VALUE", h));

  auto dir = mq::DataDir::Open(f.dir, false);
  if (!dir) return mq::cli::Fail(dir.error());
  auto config = dir->ReadTopic(f.topic);
  if (!config) return mq::cli::Fail(config.error());
  auto partitions = ChoosePartitions(f, *config, *positions);
  if (!partitions) return mq::cli::Fail(partitions.error());

  mq::consume::ConsumeOptions options;
  options.topic = f.topic;
  options.partitions = std::move(*partitions);
  options.positions = std::move(*positions);
  options.count = f.count;
  options.exit_at_end = f.exit_at_end;
  options.skip_corrupt = f.skip_corrupt;
  options.quiet = f.quiet;
  options.verbose = f.verbose;
  options.header_filters = MakeHeaderFilters(f.header_filters);
  // Readers accept at least what the topic lets writers append.
  options.limits = mq::DataDir::DecodeLimitsFor(*config, {f.max_batch_bytes, f.max_batch_bytes});
  options.offsets = config->cleanup_policy == mq::CleanupPolicy::kDelete
                        ? mq::OffsetPolicy::kContiguous
                        : mq::OffsetPolicy::kGapsAllowed;

  mq::cli::Output out(1, 1 << 20);
  mq::consume::Printer printer(std::move(*print), &out);
  options.max_open = mq::cli::OpenPartitionBudget(mq::consume::kDescriptorsPerReader);
  std::optional<mq::consume::Dispatcher> dispatcher;
  if (*handler) {
    dispatcher.emplace(std::move(**handler), f.topic, &g_signal);
    if (auto s = dispatcher->Open(*dir, *config); !s.ok()) return mq::cli::Fail(s);
  }
  mq::consume::Consumer consumer(std::move(options), &printer, &out);
  if (dispatcher) consumer.set_dispatcher(&*dispatcher);
  mq::Status s = consumer.Open(*dir);
  if (s.ok()) s = consumer.Run(&g_signal);
  if (s.ok() && dispatcher && g_signal == 0) s = dispatcher->Flush();
  if (dispatcher) {
    mq::Status closed = dispatcher->Close();
    if (s.ok()) s = closed;
  }
  int rc = out.FinishExitCode();
  if (f.verbose && dispatcher)
    mq::cli::Eprint("Processed a total of {} messages ({} dead-lettered, {} retries)\n",
                    dispatcher->handled(), dispatcher->dead_lettered(), dispatcher->retries());
  else if (f.verbose)
    mq::cli::Eprint("Processed a total of {} messages\n", consumer.delivered());
  if (!s.ok() && dispatcher && dispatcher->exit_code() != 0) {
    mq::cli::Warn(s.message());
    return dispatcher->exit_code();
  }
  if (!s.ok()) return mq::cli::Fail(s);
  if (consumer.skipped_batches() > 0) {
    // Everything readable was delivered, but not everything committed.
    if (!f.quiet)
      mq::cli::Warn(fmt::format("skipped {} corrupt batch{} ({} offsets not delivered)",
                              consumer.skipped_batches(),
                              consumer.skipped_batches() == 1 ? "" : "es",
                              consumer.skipped_offsets()));
    if (rc == 0) rc = mq::cli::kExitProblems;
  }
  if (int sig = g_signal; sig != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  mq::cli::SetProgramName("mq-consume");
  mq::cli::HoldStandardDescriptors();
  mq::cli::IgnoreSigpipe();

  CLI::App app;
  app.name("mq-consume");
  mq::cli::UseUsage(app, kUsage);
  mq::cli::AddVersionFlag(app);
  Flags flags;
  AddFlags(app, &flags);
  // --exec takes the rest of the command line, as find -exec does (without
  // a terminator): those arguments are CMD's, never mq-consume's.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--exec") continue;
    flags.exec_given = true;
    flags.exec.assign(argv + i + 1, argv + argc);
    argc = i;
    break;
  }
  if (int rc = mq::cli::Parse(app, argc, argv); rc >= 0) return rc;
  CatchStopSignals();
  return mq::cli::RunGuarded([&] { return Run(flags); });
}
