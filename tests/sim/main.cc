// mq-sim: the deterministic replication simulator (tests/sim/README.md).
//
//   mq-sim --seed S [--trace]                 one schedule, replayed exactly
//   mq-sim --schedules N [--start-seed S]     N schedules, seeds S, S+1, ...
//   mq-sim --plant BUG ...                    with a planted bug; with
//          --expect-violation, exits 0 only when a violation is found
//   mq-sim --model-log ...                    every replica's log the model
//          alone (by default the log that ships, the model its oracle)
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "simulation.h"

namespace {

constexpr const char* kUsage =
    "usage: mq-sim [--seed S | --schedules N [--start-seed S]] [--plant BUG]...\n"
    "              [--acks all|1] [--expect-violation] [--independent-files]\n"
    "              [--ordered-metadata] [--model-log | --real-log [--strict-oracle]\n"
    "              [--state-kept]]\n"
    "              [--lenient-empty-epochs] [--verify-replay] [--keep-going]\n"
    "              [--no-partitions] [--no-follower-kills] [--no-unclean] [--trace]\n"
    "              [--quiet]\n"
    "  BUG: hw_at_log_end | no_epoch_truncation | isr_shrink_without_cas |\n"
    "       hw_without_controller | no_reboot_fence | no_epoch_fence |\n"
    "       position_at_response_end | stale_reader | reader_ignores_epoch\n";

bool ParseU64(const char* s, uint64_t* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || *s == '-') return false;
  *out = v;
  return true;
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "mq-sim: %s\n%s", why.c_str(), kUsage);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  mq::sim::SimOptions base;
  base.real_log = true;  // the log that ships; --model-log: the model alone
  uint64_t seed = 0, schedules = 1, start = 1;
  bool one_seed = false, expect_violation = false, quiet = false, verify_replay = false,
       keep_going = false;
  std::string plants;
  // The flags, parsed by CLI11; --plant BUG and --acks are checked below,
  // where each flag is also applied in the order given (the replay line
  // names the planted bugs and modes in that order).
  CLI::App app("mq-sim");
  app.set_help_flag();  // -h/--help prints kUsage
  bool help = false;
  std::vector<std::string> bugs;
  std::string acks = "all";
  bool flag = false;  // the flags applied in the order given below
  app.add_flag("-h,--help", help);
  const auto last = CLI::MultiOptionPolicy::TakeLast;  // a flag given twice: the last one
  std::string seed_text, schedules_text, start_text;   // numbers, checked below
  app.add_option("--seed", seed_text)->multi_option_policy(last);
  app.add_option("--schedules", schedules_text)->multi_option_policy(last);
  app.add_option("--start-seed", start_text)->multi_option_policy(last);
  app.add_option("--plant", bugs);
  app.add_option("--acks", acks)->multi_option_policy(last);
  app.add_flag("--expect-violation", expect_violation);
  app.add_flag("--keep-going", keep_going);
  app.add_flag("--verify-replay", verify_replay);
  app.add_flag("--trace", base.trace);
  app.add_flag("--quiet", quiet);
  for (const char* f : {"--independent-files", "--ordered-metadata", "--real-log", "--model-log",
                        "--strict-oracle", "--state-kept", "--lenient-empty-epochs",
                        "--no-follower-kills", "--no-unclean", "--no-partitions"})
    app.add_flag(f, flag);
  app.allow_extras();  // reported below, as mq-sim words it
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return Usage(e.what());
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!app.remaining().empty()) return Usage("unknown argument '" + app.remaining()[0] + "'");
  one_seed = app.count("--seed") > 0;
  if (one_seed && !ParseU64(seed_text.c_str(), &seed)) return Usage("--seed needs a number");
  if (app.count("--schedules") > 0 &&
      (!ParseU64(schedules_text.c_str(), &schedules) || schedules == 0))
    return Usage("--schedules needs a number > 0");
  if (app.count("--start-seed") > 0 && !ParseU64(start_text.c_str(), &start))
    return Usage("--start-seed needs a number");
  size_t next_bug = 0;
  for (const CLI::Option* opt : app.parse_order()) {
    const std::string a = opt->get_name();
    if (a == "--plant") {
      std::string_view bug = bugs[next_bug++];
      if (bug == "hw_at_log_end") {
        base.bugs.hw_at_log_end = true;
      } else if (bug == "no_epoch_truncation") {
        base.bugs.no_epoch_truncation = true;
      } else if (bug == "isr_shrink_without_cas") {
        base.bugs.isr_shrink_without_cas = true;
      } else if (bug == "hw_without_controller") {
        base.bugs.hw_without_controller = true;
      } else if (bug == "no_reboot_fence") {
        base.bugs.no_reboot_fence = true;
      } else if (bug == "no_epoch_fence") {
        base.bugs.no_epoch_fence = true;
      } else if (bug == "position_at_response_end") {
        base.bugs.position_at_response_end = true;
      } else if (bug == "stale_reader") {
        base.stale_reader = true;
      } else if (bug == "reader_ignores_epoch") {
        base.reader_ignores_epoch = true;
      } else {
        return Usage("unknown planted bug '" + std::string(bug) + "'");
      }
      plants += " --plant " + std::string(bug);
    } else if (a == "--independent-files") {
      base.independent_files = true;
      plants += " --independent-files";
    } else if (a == "--ordered-metadata") {
      base.ordered_metadata = true;
      plants += " --ordered-metadata";
    } else if (a == "--real-log" || a == "--model-log") {
      base.real_log = a == "--real-log";  // the last one given
    } else if (a == "--state-kept") {
      base.state_kept = true;
      plants += " --state-kept";
    } else if (a == "--strict-oracle") {
      base.strict_oracle = true;
      plants += " --strict-oracle";
    } else if (a == "--acks") {
      if (acks != "all" && acks != "1") {
        return Usage("--acks is all or 1");
      }
      base.acks_one = acks == "1";
      if (base.acks_one) plants += " --acks 1";
    } else if (a == "--lenient-empty-epochs") {
      base.lenient_empty_epochs = true;
      plants += " --lenient-empty-epochs";
    } else if (a == "--no-follower-kills") {
      base.follower_kills = false;
      plants += " --no-follower-kills";
    } else if (a == "--no-unclean") {
      base.unclean = false;
      plants += " --no-unclean";
    } else if (a == "--no-partitions") {
      base.partitions = false;
      plants += " --no-partitions";
    }
  }
  if (!base.real_log) plants += " --model-log";
  if (one_seed) {
    start = seed;
    schedules = 1;
  }

  auto t0 = std::chrono::steady_clock::now();
  mq::sim::SimStats total;
  uint64_t run = 0;
  int status = 0;
  const bool planted = base.bugs.hw_at_log_end || base.bugs.no_epoch_truncation ||
                       base.bugs.isr_shrink_without_cas || base.bugs.hw_without_controller ||
                       base.bugs.no_reboot_fence || base.bugs.no_epoch_fence ||
                       base.bugs.position_at_response_end || base.stale_reader ||
                       base.reader_ignores_epoch;
  uint64_t not_planted = 0;  // violations that were not the planted bug's
  uint64_t failures = 0;     // with --keep-going
  for (uint64_t i = 0; i < schedules; ++i) {
    mq::sim::SimOptions o = base;
    o.seed = start + i;
    mq::sim::SimOutcome out = mq::sim::RunSchedule(o);
    total.Add(out.stats);
    ++run;
    if (verify_replay) {
      mq::sim::SimOutcome again = mq::sim::RunSchedule(o);
      if (again.fingerprint != out.fingerprint || again.ok != out.ok || again.step != out.step) {
        std::printf(
            "mq-sim: schedule seed=%llu did not replay identically (fingerprint %016llx, "
            "then %016llx)\n",
            static_cast<unsigned long long>(o.seed),
            static_cast<unsigned long long>(out.fingerprint),
            static_cast<unsigned long long>(again.fingerprint));
        return 1;
      }
      // Only the replay is under test here: a violation replays too.
      if (!out.ok) ++failures;
      continue;
    }
    if (one_seed && !quiet)
      std::printf("seed %llu: %s\n", static_cast<unsigned long long>(o.seed), out.summary.c_str());
    if (!out.ok && expect_violation && planted) {
      // The violation must be the planted bug's: the same schedule without
      // it passes. Otherwise it is another failure; look further.
      mq::sim::SimOptions clean = o;
      clean.bugs = mq::PlantedBugs{};
      clean.stale_reader = false;
      clean.reader_ignores_epoch = false;
      if (!mq::sim::RunSchedule(clean).ok) {
        ++not_planted;
        std::printf("mq-sim: seed=%llu fails without the planted bug too (%s); looking further\n",
                    static_cast<unsigned long long>(o.seed),
                    out.violation.substr(0, out.violation.find('\n')).c_str());
        continue;
      }
    }
    if (!out.ok && keep_going) {
      ++failures;
      status = 1;
      std::printf("mq-sim: seed=%llu step %lld: %s\n", static_cast<unsigned long long>(o.seed),
                  static_cast<long long>(out.step),
                  out.violation.substr(0, out.violation.find('\n')).c_str());
      continue;
    }
    if (!out.ok) {
      std::printf(
          "mq-sim: VIOLATION in schedule seed=%llu at step %lld (after %llu schedules)\n"
          "  %s\n  %s\n  replay: mq-sim --seed %llu%s --trace\n",
          static_cast<unsigned long long>(o.seed), static_cast<long long>(out.step),
          static_cast<unsigned long long>(run), out.summary.c_str(), out.violation.c_str(),
          static_cast<unsigned long long>(o.seed), plants.c_str());
      status = 1;
      break;
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "mq-sim: %llu schedules (seeds %llu..%llu)%s: %lld steps, %lld crashes (%lld power "
      "losses), %lld I/O faults, %lld elections, %lld ISR changes, %lld link faults, %lld "
      "clock jumps, %lld produced, %lld acked, %lld refused; %.2f s, %.0f schedules/s\n",
      static_cast<unsigned long long>(run), static_cast<unsigned long long>(start),
      static_cast<unsigned long long>(start + run - 1), plants.c_str(),
      static_cast<long long>(total.steps), static_cast<long long>(total.crashes),
      static_cast<long long>(total.power_losses), static_cast<long long>(total.io_faults),
      static_cast<long long>(total.elections), static_cast<long long>(total.isr_changes),
      static_cast<long long>(total.link_faults), static_cast<long long>(total.clock_jumps),
      static_cast<long long>(total.produced), static_cast<long long>(total.acked),
      static_cast<long long>(total.refused), secs,
      secs > 0 ? static_cast<double>(run) / secs : 0.0);
  std::printf(
      "mq-sim: network: %lld partitions, %lld heals, %lld elections of a leader the controller "
      "lost, %lld cluster-state calls refused by a cut, %lld lost otherwise (%lld AlterPartition "
      "replies lost after the change), %lld messages lost to cut links; %lld ISR shrinks by a "
      "leader with a cut link, %lld ISR expansions\n",
      static_cast<long long>(total.partitions), static_cast<long long>(total.heals),
      static_cast<long long>(total.cut_elections), static_cast<long long>(total.controller_refused),
      static_cast<long long>(total.controller_faults), static_cast<long long>(total.replies_lost),
      static_cast<long long>(total.cut_messages), static_cast<long long>(total.cut_shrinks),
      static_cast<long long>(total.isr_expands));
  std::printf(
      "mq-sim: restarts: %lld leader power losses back at once, %lld cluster-state "
      "changes by a restarted replica (R55); %lld writers paused between check and "
      "write, %lld leader appends fenced (R56); %lld followers killed within a step\n"
      "mq-sim: stale readers: %lld opened, %lld batches handed out, %lld held batches "
      "dropped at a rewrite of their log, %lld sent back below what they handed out\n"
      "mq-sim: unclean elections: %lld schedules allow them, %lld outages of every "
      "in-sync replica, %lld unclean elections\n",
      static_cast<long long>(total.leader_reboots), static_cast<long long>(total.epochs_given_up),
      static_cast<long long>(total.paused_writes), static_cast<long long>(total.fenced_writes),
      static_cast<long long>(total.follower_kills), static_cast<long long>(total.readers),
      static_cast<long long>(total.reader_batches), static_cast<long long>(total.reader_drops),
      static_cast<long long>(total.reader_cuts), static_cast<long long>(total.unclean_schedules),
      static_cast<long long>(total.isr_outages), static_cast<long long>(total.unclean_elections));
  if (base.real_log) {
    int64_t n = 0;
    for (const auto& [kind, count] : total.disagreements) n += count;
    std::printf(
        "mq-sim: real reader: %lld batches handed out, %lld sent back below what they handed "
        "out\n",
        static_cast<long long>(total.real_reader_batches),
        static_cast<long long>(total.real_reader_cuts));
    std::printf("mq-sim: real log: %lld disagreements with the model%s\n",
                static_cast<long long>(n), n ? ":" : "");
    for (const auto& [kind, count] : total.disagreements)
      std::printf("mq-sim:   %lld %s\n", static_cast<long long>(count), kind.c_str());
  }
  if (verify_replay) {
    std::printf(
        "mq-sim: every schedule replayed identically (%llu with a violation, replayed "
        "the same)\n",
        static_cast<unsigned long long>(failures));
  }
  if (keep_going && failures > 0) {
    std::printf("mq-sim: %llu of %llu schedules failed\n",
                static_cast<unsigned long long>(failures), static_cast<unsigned long long>(run));
  }
  if (expect_violation) {
    if (status == 0) {
      std::printf("mq-sim: expected a violation, found none in %llu schedules\n",
                  static_cast<unsigned long long>(run));
      return 1;
    }
    if (planted) {
      std::printf(
          "mq-sim: the planted bug was found (the same seed passes without it; %llu "
          "other failures skipped)\n",
          static_cast<unsigned long long>(not_planted));
    } else {
      std::printf("mq-sim: a violation was found, as expected\n");
    }
    return 0;
  }
  return status;
}
