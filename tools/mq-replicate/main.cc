// mq-replicate: a follower root pulls the partitions it follows from their
// leaders, once (cron: catch up and exit) or continuously (--follow).
// Manual: man/man1/mq-replicate.1.
#include <string>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "replicate.h"
#include "size_option.h"
#include "tool_main.h"

namespace {

// The usage lines are the man page's SYNOPSIS, word for word.
constexpr const char* kUsage =
    "Usage: mq-replicate -C DIR [-t TOPIC] [-p N] [--follow] [--max-bytes-per-second N]\n"
    "                    [--fetch-max-bytes N] [--fsync none|batch] [--repair] [-q] [-v]\n"
    "       mq-replicate -C DIR --serve [--fsync none|batch] [-q]\n"
    "       mq-replicate -h | -V\n"
    "\n"
    "Fetch the partitions the log root DIR follows from their leaders and append\n"
    "the leaders' batches as they are; or, with --serve, answer followers on other\n"
    "hosts on standard input and output.\n";

void AddFlags(CLI::App& app, mq::replicate::Options* o, std::string* fsync) {
  mq::cli::AddDirOption(app, &o->dir);
  app.add_option("-t,--topic", o->topic, "only this replicated topic");
  app.add_option("-p,--partition", o->partition, "only this partition")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--follow", o->follow, "keep following the leaders until SIGINT or SIGTERM");
  app.add_option("--max-bytes-per-second", o->max_bytes_per_second,
                 "fetch at most this many bytes a second (0: no limit)")
      ->transform(mq::cli::SizeUnits());
  app.add_option("--fetch-max-bytes", o->fetch_max_bytes, "bytes one fetch returns at most")
      ->transform(mq::cli::SizeUnits())
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  app.add_option("--fsync", *fsync, "none (page cache) or batch (each fetched append fsynced)")
      ->check(CLI::IsMember({"none", "batch"}))
      ->capture_default_str();
  app.add_flag("--serve", o->serve,
               "answer the wire protocol on stdin/stdout (started by followers on other hosts)");
  app.add_flag("--repair", o->repair,
               "first cut each followed partition's log where it fails verification, then fetch "
               "the rest again");
  app.add_flag("-q,--quiet", o->quiet, "no notes on stderr");
  app.add_flag("-v,--verbose", o->verbose, "a line per partition caught up");
}

}  // namespace

int main(int argc, char** argv) {
  mq::replicate::Options o;
  std::string fsync = "none";
  return mq::cli::RunTool(
      argc, argv,
      {.name = "mq-replicate",
       .usage = kUsage,
       .flags = [&](CLI::App& app) { AddFlags(app, &o, &fsync); },
       .run =
           [&] {
             o.fsync = fsync == "batch";
             if (o.serve &&
                 (o.follow || o.topic || o.partition || o.verbose || o.max_bytes_per_second))
               return mq::cli::UsageError(kUsage,
                                          "--serve answers for the whole root: it takes no -t, "
                                          "-p, --follow, -v or --max-bytes-per-second");
             return o.serve ? mq::replicate::Serve(o) : mq::replicate::Run(o);
           }});
}
