// mq-consume: print messages of a topic from a start position, then stop or
// follow new appends like tail -f. Manual: man/man1/mq-consume.1. The
// reading itself is liblog's mq::Consumer (mq/consumer.h).
#include <signal.h>

#include <csignal>
#include <string_view>

#include <CLI/CLI.hpp>

#include "cli.h"
#include "group_run.h"
#include "options.h"
#include "run.h"
#include "tool_main.h"

namespace {

// The usage lines are the man page's SYNOPSIS, word for word (a CLI test
// compares them).
constexpr const char* kUsage =
    "Usage: mq-consume [-C DIR] -t TOPIC [-p N[,N]...] [-o POSITION]... [-c N] [-e] "
    "[-k | -K DELIM] [-D DELIM | -0 | --raw] [-f FORMAT | -J] [-Z] "
    "[--header-filter NAME[=VALUE]]... [--skip-corrupt] [--max-batch-bytes N] [-q | -v]\n"
    "       mq-consume [-C DIR] (-t TOPIC | -t ^REGEX)... -G GROUP [--member-id ID "
    "[--session-timeout MS]] [--reset earliest|latest] "
    "[--at-most-once | --ack-fd N] [--commit-interval MS] [--commit-every N] "
    "[--max-poll-interval MS] [-c N] [-e] "
    "[output options] [-q | -v]\n"
    "       mq-consume [-C DIR] -t TOPIC [-p N[,N]...] [-o POSITION]... [-c N] [-e] "
    "[--header-filter NAME[=VALUE]]... [--skip-corrupt] [--max-batch-bytes N] [-q | -v] "
    "[--batch N] [--max-attempts N] [--retry-backoff MS] [--dlq TOPIC] --exec CMD [ARG]...\n"
    "       mq-consume [-C DIR] -t TOPIC -G GROUP [group options] [--max-poll-interval MS] "
    "[--parallel N] [--batch N] [--max-attempts N] [--retry-backoff MS] [--dlq TOPIC] --exec CMD "
    "[ARG]...\n"
    "       mq-consume [-C DIR] -t TOPIC -G GROUP [group options] --to-topic OUT [-K SEP] "
    "[--fsync none|batch] [--parallel N] [--max-attempts N] [--retry-backoff MS] [--dlq TOPIC] "
    "--exec CMD [ARG]...\n"
    "       mq-consume [-C DIR] --list [-J]\n"
    "       mq-consume [-C DIR] --describe (-G GROUP | --all-groups) [-t TOPIC] [-J]\n"
    "       mq-consume [-C DIR] --reset-offsets (-G GROUP | --all-groups) "
    "(-t TOPIC [-p N[,N]...] | --all-topics) "
    "(--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime TIME) "
    "[--execute] [--export | -J] [-q]\n"
    "       mq-consume [-C DIR] --reset-offsets (-G GROUP | --all-groups) --from-file FILE "
    "[--execute] [--export | -J] [-q]\n"
    "       mq-consume [-C DIR] --delete -G GROUP\n"
    "       mq-consume [-C DIR] --remove-member ID -G GROUP [-q]\n"
    "       mq-consume [-C DIR] --delete-offsets -G GROUP -t TOPIC [-p N[,N]...] [-J]\n"
    "       mq-consume -h | -V\n"
    "\n"
    "Print the messages of TOPIC, one value per line by default, from the start\n"
    "POSITION (beginning by default). Without -c, -e or an e@ end time, wait for\n"
    "new messages like tail -f. With --exec, run CMD for each message instead\n"
    "(every argument after --exec belongs to CMD).\n";

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

}  // namespace

int main(int argc, char** argv) {
  mq::consume::Flags flags;
  mq::consume::TakeExec(&argc, argv, &flags);  // the command after --exec is not parsed
  int rc = mq::cli::RunTool(
      argc, argv,
      {.name = "mq-consume",
       .usage = kUsage,
       .flags = [&](CLI::App& app) { mq::consume::AddFlags(app, &flags); },
       .run =
           [&] {
             if (flags.admin.any()) return mq::consume::RunAdmin(flags, kUsage);
             auto settings = mq::consume::Resolve(flags);
             if (!settings) return mq::cli::UsageError(kUsage, settings.error().message());
             CatchStopSignals();
             return flags.group ? mq::consume::RunGroup(flags, std::move(*settings), &g_signal)
                                : mq::consume::Run(flags, std::move(*settings), &g_signal);
           }});
  if (int sig = g_signal; sig != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  return rc;
}
