// mq-produce: append messages read from files or standard input to a topic.
// Manual: man/man1/mq-produce.1. Rules for producer ids: format-spec/producer.md.
#include <string>

#include "cli.h"
#include "options.h"
#include "run.h"
#include "tool_main.h"

namespace {

// The usage lines are the man page's SYNOPSIS, word for word (a CLI test
// compares them).
constexpr const char* kUsage =
    "Usage: mq-produce [-C DIR] -t TOPIC [-p N] [-k KEY | -K DELIM] [-D DELIM | -0 | -J] "
    "[-H NAME=VALUE]... [-Z] [-z CODEC] [--producer-id NAME] [--print-offsets] [OPTION]... "
    "[FILE]...\n"
    "       mq-produce [-C DIR] -t TOPIC --create [--like SRC] [--partitions N] [-X KEY=VALUE]... "
    "[OPTION]... [FILE]...\n"
    "       mq-produce [-C DIR] -t TOPIC --describe\n"
    "       mq-produce -h | -V\n"
    "\n"
    "Append messages read from FILEs (or standard input) to TOPIC: one message per\n"
    "line by default. Exit status 0 means every message is appended and durable as\n"
    "--fsync asks.\n";

}  // namespace

int main(int argc, char** argv) {
  mq::produce::Flags flags;
  return mq::cli::RunTool(argc, argv,
                          {.name = "mq-produce",
                           .usage = kUsage,
                           .flags = [&](CLI::App& app) { mq::produce::AddFlags(app, &flags); },
                           .run =
                               [&] {
                                 auto settings = mq::produce::Resolve(flags);
                                 if (!settings)
                                   return mq::cli::UsageError(kUsage, settings.error().message());
                                 return mq::produce::Run(flags, *settings);
                               }});
}
