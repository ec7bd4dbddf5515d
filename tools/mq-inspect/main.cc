// mq-inspect: dump and verify mq (and Kafka) segment files, mq's group
// offsets files and replica checkpoints, for forensics.
// No data directory or lock is needed: it reads the files it is given.
// Manual: man/man1/mq-inspect.1.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli.h"
#include "cli_usage.h"
#include "dump.h"
#include "printer.h"

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

}  // namespace

int main(int argc, char** argv) {
  mq::cli::SetProgramName("mq-inspect");
  mq::cli::HoldStandardDescriptors();
  mq::cli::IgnoreSigpipe();

  CLI::App app;
  app.name("mq-inspect");
  auto formatter = std::make_shared<Formatter>();
  formatter->column_width(28);
  app.formatter(formatter);
  mq::cli::AddVersionFlag(app);

  mq::inspect::PrintOptions print;
  mq::DecodeLimits limits;
  bool json = false;
  bool verify = false;
  std::vector<std::string> paths;
  auto* records = app.add_flag("-r,--records,--deep-iteration", print.records,
                               "one line per record after its batch");
  auto* data = app.add_flag("-d,--print-data-log", print.data,
                            "records with their key and payload (implies -r)");
  auto* headers = app.add_flag("-H,--headers", print.headers,
                               "records with their header keys and values (implies -r)");
  auto* skip = app.add_flag("--skip-record-metadata", print.skip_metadata,
                            "record lines without offset, timestamp and sizes (implies -r)");
  app.add_flag("-J,--json", json, "JSON Lines output: one object per line, on stdout");
  app.add_flag("--verify", verify,
               "verify data directories, topics, partitions or files: exit 0 clean, 65 corrupt, "
               "75 needs recovery")
      ->excludes(records)->excludes(data)->excludes(headers)->excludes(skip);
  std::string data_dir;
  auto* dir_opt = mq::cli::AddDirOption(app, &data_dir, false);
  app.add_option("--max-batch-bytes", limits.max_batch_bytes,
                 "largest batch read, in bytes (records may decompress to the larger of N and 64 MiB)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(61u, 0x7FFFFFFFu))
      ->capture_default_str();
  // Not ->required(): CLI11 would then report a missing FILE before an
  // unknown option, and name the wrong argument.
  app.add_option("FILE", paths, "segment files (.log, .index, .timeindex), a group's offsets "
                 "file or a replica checkpoint; with --verify also data and partition directories, and with -C a topic "
                 "or TOPIC-N");

  if (int rc = mq::cli::Parse(app, argc, argv); rc >= 0) return rc;
  if (paths.empty()) return mq::cli::UsageError(kUsage, verify ? "no PATH given" : "no FILE given");
  limits.max_decompressed_bytes = std::max(limits.max_decompressed_bytes, limits.max_batch_bytes);
  if (print.data || print.headers || print.skip_metadata) print.records = true;

  return mq::cli::RunGuarded([&] {
    auto printer = json ? mq::inspect::MakeJsonPrinter(print) : mq::inspect::MakeTextPrinter(print);
    int rc = 0;
    for (const auto& path : paths) {
      std::optional<std::string> dir;
      if (dir_opt->count() > 0 || !data_dir.empty()) dir = data_dir;
      // Verification takes each partition's limits from its topic itself.
      int code = verify ? mq::inspect::VerifyPath(path, limits, printer.get(), dir)
                        : mq::inspect::DumpFile(path, print, mq::inspect::LimitsForPath(path, limits),
                                                printer.get());
      if (rc == 0) rc = code;
      if (printer->broken()) return 0;
    }
    int out_rc = printer->out().FinishExitCode();
    if (printer->broken()) return 0;
    return rc != 0 ? rc : out_rc;
  });
}
