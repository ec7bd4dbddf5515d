// mq-inspect: dump and verify mq (and Kafka) segment files, mq's group
// offsets files and replica checkpoints, for forensics.
// No data directory or lock is needed: it reads the files it is given.
// Manual: man/man1/mq-inspect.1.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "cli_usage.h"
#include "dump.h"
#include "printer.h"
#include "size_option.h"
#include "tool_main.h"

namespace {

// The usage lines are the man page's SYNOPSIS, word for word (a CLI test
// compares them).
constexpr const char* kUsage =
    "Usage: mq-inspect [-J] [-r] [-d] [-H] [--skip-record-metadata] [--max-batch-bytes N] FILE...\n"
    "       mq-inspect --verify [-J] [-C DIR] [--max-batch-bytes N] PATH...\n"
    "       mq-inspect -h | -V\n"
    "\n"
    "Dump segment files (.log, .index, .timeindex) in kafka-dump-log's form, group\n"
    "offsets files and replica checkpoints, or verify data directories, topics,\n"
    "partitions and files against the format's rules.\n";

class Formatter : public mq::cli::UsageFormatter {
 public:
  Formatter() : UsageFormatter(kUsage) {}
  // "--max-batch-bytes N" and "FILE...", without CLI11's type and
  // exclusion notes (OPTIONS in the man page says which exclude which).
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_positional()) return "...";
    return opt->get_items_expected_max() == 0 ? "" : " N";
  }
};

// The command line.
struct Args {
  mq::inspect::PrintOptions print;
  mq::DecodeLimits limits;
  bool json = false;
  bool verify = false;
  std::vector<std::string> paths;
  std::string data_dir;
  CLI::Option* dir_opt = nullptr;
};

void AddFlags(CLI::App& app, Args* a) {
  auto formatter = std::make_shared<Formatter>();
  formatter->column_width(28);
  app.formatter(formatter);
  auto* records = app.add_flag("-r,--records,--deep-iteration", a->print.records,
                               "one line per record after its batch");
  auto* data = app.add_flag("-d,--print-data-log", a->print.data,
                            "records with their key and payload (implies -r)");
  auto* headers = app.add_flag("-H,--headers", a->print.headers,
                               "records with their header keys and values (implies -r)");
  auto* skip = app.add_flag("--skip-record-metadata", a->print.skip_metadata,
                            "record lines without offset, timestamp and sizes (implies -r)");
  app.add_flag("-J,--json", a->json, "JSON Lines output: one object per line, on stdout");
  app.add_flag("--verify", a->verify,
               "verify data directories, topics, partitions or files: exit 0 clean, 65 corrupt, "
               "75 needs recovery")
      ->excludes(records)
      ->excludes(data)
      ->excludes(headers)
      ->excludes(skip);
  a->dir_opt = mq::cli::AddDirOption(app, &a->data_dir, false);
  app.add_option(
         "--max-batch-bytes", a->limits.max_batch_bytes,
         "largest batch read, in bytes (records may decompress to the larger of N and 64 MiB)")
      ->transform(mq::cli::SizeUnits())
      ->check(CLI::Range(61u, 0x7FFFFFFFu))
      ->capture_default_str();
  // Not ->required(): CLI11 would then report a missing FILE before an
  // unknown option, and name the wrong argument.
  app.add_option("FILE", a->paths,
                 "segment files (.log, .index, .timeindex), a group's offsets "
                 "file or a replica checkpoint; with --verify also data and partition directories, "
                 "and with -C a topic "
                 "or TOPIC-N");
}

int Inspect(Args& a) {
  if (a.paths.empty())
    return mq::cli::UsageError(kUsage, a.verify ? "no PATH given" : "no FILE given");
  mq::DecodeLimits& limits = a.limits;
  limits.max_decompressed_bytes = std::max(limits.max_decompressed_bytes, limits.max_batch_bytes);
  mq::inspect::PrintOptions& print = a.print;
  if (print.data || print.headers || print.skip_metadata) print.records = true;
  auto printer = a.json ? mq::inspect::MakeJsonPrinter(print) : mq::inspect::MakeTextPrinter(print);
  int rc = 0;
  for (const auto& path : a.paths) {
    std::optional<std::string> dir;
    if (a.dir_opt->count() > 0 || !a.data_dir.empty()) dir = a.data_dir;
    // Verification takes each partition's limits from its topic itself.
    int code = a.verify ? mq::inspect::VerifyPath(path, limits, printer.get(), dir)
                        : mq::inspect::DumpFile(
                              path, print, mq::inspect::LimitsForPath(path, limits), printer.get());
    if (rc == 0) rc = code;
    if (printer->broken()) return 0;
  }
  int out_rc = printer->out().FinishExitCode();
  if (printer->broken()) return 0;
  return rc != 0 ? rc : out_rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  return mq::cli::RunTool(argc, argv,
                          {.name = "mq-inspect",
                           .flags = [&](CLI::App& app) { AddFlags(app, &a); },
                           .run = [&] { return Inspect(a); }});
}
