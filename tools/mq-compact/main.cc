// mq-compact: retention of cleanup.policy=delete topics, run from cron
// (format-spec/retention.md): plans which whole segments go by time and by
// size (or below a delete-records offset), reports what each consumer group
// would lose unread, and with --execute deletes them.
// Manual: man/man1/mq-compact.1.
#include "compact.h"
#include "tool_main.h"

int main(int argc, char** argv) {
  mq::compact::Options o;
  return mq::cli::RunTool(argc, argv,
                          {.name = "mq-compact",
                           .usage = mq::compact::kUsage,
                           .flags = [&](CLI::App& app) { mq::compact::AddFlags(app, &o); },
                           .run = [&] { return mq::compact::Run(o); }});
}
