// mq-isr's command line (see options.h; manual: man/man1/mq-isr.1).
#include "options.h"

#include <charconv>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "mq/units.h"

namespace mq::isr {
namespace {

// The usage lines are the man page's SYNOPSIS, word for word (a CLI test
// compares them).
constexpr const char* kUsage =
    "Usage: mq-isr [--cluster DIR] create -t TOPIC --partitions N --replicas DIR,DIR... "
    "[--min-insync-replicas M] [--controller HOST] [-X KEY=VALUE]...\n"
    "       mq-isr [--cluster DIR] describe [-t TOPIC] [--under-replicated] [--under-min-isr] "
    "[--at-min-isr] [--unavailable] [--json]\n"
    "       mq-isr [--cluster DIR] --check [-t TOPIC] [--no-verify]\n"
    "       mq-isr [--cluster DIR] --verify-replicas [-t TOPIC] [--json]\n"
    "       mq-isr [--cluster DIR] elect [-t TOPIC [-p N]] [--unclean | --preferred]\n"
    "       mq-isr --cluster DIR --serve\n"
    "       mq-isr --cluster HOST:DIR attach -t TOPIC --partitions N --replica-id ID -C ROOT "
    "[-X KEY=VALUE]...\n"
    "       mq-isr -h | -V\n"
    "\n"
    "Create replicated topics over several log roots, describe their leaders and in-sync\n"
    "replicas, check them (exit 1 when a partition is unavailable, under-replicated or\n"
    "under min.insync.replicas) and elect leaders. The cluster directory is --cluster or\n"
    "$MQ_CLUSTER; HOST:DIR reaches one on another host through $MQ_RSH (ssh).\n";

// -X KEY=VALUE of create: the cluster state's keys, or a root's topic config.
int ApplyOverrides(const std::vector<std::string>& overrides, CreateOptions& o) {
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return cli::UsageError(kUsage, "-X " + kv + ": not KEY=VALUE");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "replica.lag.time.max.ms") {
      // A duration, with units as every .ms key (mq/units.h): 30s, 500ms.
      auto ms = ParseDurationMs(value, "-X " + key, 1, INT64_MAX);
      if (!ms) return cli::UsageError(kUsage, ms.error().message());
      o.replica_lag_time_max_ms = *ms;
    } else if (key == "min.insync.replicas") {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || end != value.data() + value.size() || value[0] == '0' || v < 1 ||
          v > 32767)
        return cli::UsageError(kUsage, fmt::format("-X {}: not a positive integer", kv));
      o.min_insync_replicas = static_cast<int32_t>(v);
    } else if (key == "replication.factor" || key == "partitions" || key == "cluster" ||
               key == "replica.id") {
      return cli::UsageError(kUsage,
                             fmt::format("-X {}: set by mq-isr ({})", key,
                                         key == "partitions"           ? "--partitions"
                                         : key == "replication.factor" ? "the number of --replicas"
                                                                       : "from the cluster state"));
    } else if (Status s = o.config.Set(key, value); !s.ok()) {
      return cli::UsageError(kUsage, "-X " + s.message());
    } else {
      o.config_overrides.push_back(kv);
    }
  }
  return -1;
}

// The flags outside the subcommands.
struct TopFlags {
  bool check = false;
  bool no_verify = false;
  bool verify_replicas = false;
  bool serve = false;
  CLI::Option* verify_json = nullptr;
};

void AddTopFlags(CLI::App& app, Options* o, TopFlags* top) {
  app.add_option("--cluster", o->cluster, "cluster directory (env MQ_CLUSTER)")
      ->envname("MQ_CLUSTER");
  app.add_flag("--check", top->check,
               "exit 1 listing every partition that is unavailable, "
               "under-replicated or under min.insync.replicas; 0 with a summary otherwise");
  app.add_option("-t,--topic", o->check_topic,
                 "with --check or --verify-replicas: only this topic");
  app.add_flag("--no-verify", top->no_verify,
               "with --check: verify no replica's log (the ISR rule and stopped followers only)");
  app.add_flag("--verify-replicas", top->verify_replicas,
               "compare every replica with its leader batch by batch up to the high "
               "watermark: exit 65 on a divergence");
  top->verify_json = app.add_flag("--json", o->verify_json,
                                  "with --verify-replicas: one JSON object per partition");
  app.add_flag("--serve", top->serve,
               "answer the wire protocol on stdin/stdout for tools on other hosts");
}

CLI::App* AddCreate(CLI::App& app, Options* o, std::vector<std::string>* overrides) {
  auto* create_cmd = app.add_subcommand("create", "create a replicated topic");
  create_cmd->add_option("-t,--topic", o->create.topic, "topic name")->required();
  create_cmd->add_option("--partitions", o->create.partitions, "partitions")
      ->required()
      ->check(CLI::Range(1, 10000));
  create_cmd->add_option("--replicas", o->create.replica_dirs, "replica roots (log directories)")
      ->required()
      ->delimiter(',')
      ->expected(1, 32767);
  create_cmd
      ->add_option("--min-insync-replicas", o->create.min_insync_replicas,
                   "in-sync replicas an acks=all append needs")
      ->check(CLI::Range(1, 32767));
  create_cmd->add_option("-X", *overrides, "replica.lag.time.max.ms=MS, or a topic config key");
  create_cmd->add_option("--controller", o->create.controller,
                         "the host name other hosts reach this cluster directory on");
  return create_cmd;
}

CLI::App* AddAttach(CLI::App& app, Options* o, std::vector<std::string>* overrides) {
  auto* attach_cmd = app.add_subcommand("attach", "link a root on this host to a replicated topic");
  attach_cmd->add_option("-t,--topic", o->attach.create.topic, "topic name")->required();
  attach_cmd->add_option("--partitions", o->attach.create.partitions, "partitions")
      ->required()
      ->check(CLI::Range(1, 10000));
  attach_cmd->add_option("--replica-id", o->attach.replica_id, "this root's id in the cluster")
      ->required()
      ->check(CLI::NonNegativeNumber);
  attach_cmd->add_option("-C,--dir", o->attach.dir, "the log root")->required();
  attach_cmd->add_option("-X", *overrides, "a topic config key");
  return attach_cmd;
}

CLI::App* AddDescribe(CLI::App& app, Options* o) {
  auto* describe_cmd = app.add_subcommand("describe", "describe leaders and ISRs");
  describe_cmd->add_option("-t,--topic", o->describe.topic, "only this topic");
  describe_cmd->add_flag("--under-replicated", o->describe.under_replicated,
                         "partitions whose ISR is smaller than their replicas");
  describe_cmd->add_flag("--under-min-isr", o->describe.under_min_isr,
                         "partitions without a leader or with fewer in-sync replicas than "
                         "min.insync.replicas");
  describe_cmd->add_flag("--at-min-isr", o->describe.at_min_isr,
                         "partitions with exactly min.insync.replicas in-sync replicas");
  describe_cmd->add_flag("--unavailable", o->describe.unavailable,
                         "partitions whose leader is none or unavailable");
  describe_cmd->add_flag("--json", o->describe.json, "JSON Lines: one object per line");
  return describe_cmd;
}

CLI::App* AddElect(CLI::App& app, Options* o, bool* unclean, bool* preferred) {
  auto* elect_cmd = app.add_subcommand("elect", "elect leaders of unavailable partitions");
  auto* elect_topic = elect_cmd->add_option("-t,--topic", o->elect.topic, "only this topic");
  elect_cmd->add_option("-p,--partition", o->elect.partition, "only this partition")
      ->needs(elect_topic)
      ->check(CLI::NonNegativeNumber);
  auto* unclean_opt = elect_cmd->add_flag("--unclean", *unclean,
                                          "elect outside the ISR when no in-sync replica is live");
  elect_cmd
      ->add_flag("--preferred", *preferred, "move leadership to each partition's first replica")
      ->excludes(unclean_opt);
  return elect_cmd;
}

}  // namespace

int ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app;
  app.name("mq-isr");
  cli::UseUsage(app, kUsage);
  cli::AddVersionFlag(app);
  app.require_subcommand(0, 1);
  app.fallthrough();

  TopFlags top;
  AddTopFlags(app, o, &top);

  std::vector<std::string> overrides;
  auto* create_cmd = AddCreate(app, o, &overrides);

  std::vector<std::string> attach_overrides;
  auto* attach_cmd = AddAttach(app, o, &attach_overrides);

  auto* describe_cmd = AddDescribe(app, o);

  bool unclean = false, preferred = false;
  auto* elect_cmd = AddElect(app, o, &unclean, &preferred);

  if (int rc = cli::Parse(app, argc, argv); rc >= 0) return rc;
  const bool any =
      create_cmd->parsed() || describe_cmd->parsed() || elect_cmd->parsed() || attach_cmd->parsed();
  if (int(top.check) + int(any) + int(top.serve) + int(top.verify_replicas) != 1)
    return cli::UsageError(
        kUsage, "give one of create, describe, --check, --verify-replicas, elect, attach, --serve");
  if (top.no_verify && !top.check) return cli::UsageError(kUsage, "--no-verify goes with --check");
  o->check_verify = !top.no_verify;
  if (top.verify_json->count() > 0 && !top.verify_replicas)
    return cli::UsageError(kUsage, "--json goes with describe or --verify-replicas");
  if (o->cluster.empty())
    return cli::UsageError(kUsage, "no cluster directory (--cluster or MQ_CLUSTER)");
  if (create_cmd->parsed()) {
    if (int rc = ApplyOverrides(overrides, o->create); rc >= 0) return rc;
    for (auto& d : o->create.replica_dirs) d = AbsoluteAddress(d);
  }
  if (attach_cmd->parsed()) {
    if (int rc = ApplyOverrides(attach_overrides, o->attach.create); rc >= 0) return rc;
    o->attach.dir = AbsolutePath(o->attach.dir);
  }
  o->elect.mode = unclean     ? ElectMode::kUnclean
                  : preferred ? ElectMode::kPreferred
                              : ElectMode::kUnavailableOnly;
  o->command = create_cmd->parsed()     ? Command::kCreate
               : describe_cmd->parsed() ? Command::kDescribe
               : elect_cmd->parsed()    ? Command::kElect
               : attach_cmd->parsed()   ? Command::kAttach
               : top.serve              ? Command::kServe
               : top.verify_replicas    ? Command::kVerifyReplicas
                                        : Command::kCheck;
  return -1;
}

}  // namespace mq::isr
