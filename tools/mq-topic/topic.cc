// mq-topic's verbs: each parses nothing, asks liblog (mq/topic_admin.h),
// prints, and maps the Status to an exit code.
#include "topic.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli.h"
#include "json.h"
#include "mq/cluster.h"
#include "mq/file.h"
#include "mq/topic.h"
#include "mq/topic_admin.h"

namespace mq::topic {

const char* const kUsage =
    "Usage: mq-topic [-C DIR] list [--json]\n"
    "       mq-topic [-C DIR] describe TOPIC [--json]\n"
    "       mq-topic [-C DIR] create TOPIC [--partitions N] [-X KEY=VALUE]... [--if-not-exists]\n"
    "       mq-topic [-C DIR] config TOPIC [--json]\n"
    "       mq-topic [-C DIR] alter TOPIC [-X KEY=VALUE]... [--delete-config KEY]... "
    "[--partitions N [--keys N] [--dry-run]]\n"
    "       mq-topic [-C DIR] delete TOPIC [--force]\n"
    "       mq-topic -h | -V\n"
    "\n"
    "List the topics of a data directory with their partitions' offsets, sizes and segments;\n"
    "create a topic without producing into it; show and change its configuration (durations\n"
    "and sizes take units: 7d, 1GiB); raise its partition count; delete it. The data\n"
    "directory is -C or $MQ_DIR.\n";

void AddFlags(CLI::App& app, Options* o) {
  cli::AddDirOption(app, &o->dir);
  app.require_subcommand(1, 1);
  app.fallthrough();
  auto verb = [&](const char* name, const char* what, Verb v, bool topic) {
    CLI::App* s = app.add_subcommand(name, what);
    s->callback([o, v] { o->verb = v; });
    if (topic) s->add_option("TOPIC", o->topic, "the topic")->required();
    return s;
  };
  CLI::App* list = verb("list", "every topic and its partitions", Verb::kList, false);
  list->add_flag("--json", o->json, "one JSON object");
  CLI::App* describe = verb("describe", "one topic and its partitions", Verb::kDescribe, true);
  describe->add_flag("--json", o->json, "one JSON object");
  CLI::App* create = verb("create", "create a topic", Verb::kCreate, true);
  create->add_option("--partitions", o->partitions, "partitions (default 1)")
      ->check(CLI::Range(1, 10000));
  create->add_option("-X,--config", o->configs, "a topic configuration key");
  create->add_flag("--if-not-exists", o->if_not_exists, "an existing topic is no error");
  CLI::App* config = verb("config", "the effective configuration", Verb::kConfig, true);
  config->add_flag("--json", o->json, "one JSON object");
  CLI::App* alter =
      verb("alter", "change the configuration or partition count", Verb::kAlter, true);
  alter->add_option("-X,--config,--add-config", o->configs, "set a configuration key");
  alter->add_option("--delete-config", o->delete_configs, "reset a key to its default");
  alter->add_option("--partitions", o->partitions, "the new partition count")
      ->check(CLI::Range(1, 10000));
  alter->add_option("--keys", o->keys, "records read per partition for the key-move count")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  alter->add_flag("-n,--dry-run", o->dry_run, "show what --partitions would do, change nothing");
  CLI::App* del = verb("delete", "delete a topic", Verb::kDelete, true);
  del->add_flag("-f,--force", o->force, "delete it even while a producer or member holds it");
}

namespace {

// A test seam (tests/cli/topic_crash.sh): with MQ_TEST_KILL_AT=N the tool
// kills itself (SIGKILL) before its Nth file system call that can change
// the data directory; with MQ_TEST_COUNT_CALLS set it prints how many it
// made. Without either, calls go straight through.
class KillingFileSystem : public FileSystemWrapper {
 public:
  explicit KillingFileSystem(int64_t kill_at) : kill_at_(kill_at) {}
  int64_t calls() const { return calls_; }
  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    Step();
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    Step();
    return FileSystemWrapper::Rename(dir_fd, from, to);
  }
  Status Unlink(int dir_fd, const std::string& name) override {
    Step();
    return FileSystemWrapper::Unlink(dir_fd, name);
  }
  Status SyncDir(int dir_fd) override {
    Step();
    return FileSystemWrapper::SyncDir(dir_fd);
  }
  Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) override {
    if (create) Step();
    return FileSystemWrapper::OpenDir(at_fd, path, create);
  }
  Status RemoveDir(int dir_fd, const std::string& name) override {
    Step();
    return FileSystemWrapper::RemoveDir(dir_fd, name);
  }

 private:
  void Step() {
    if (++calls_ == kill_at_) ::kill(::getpid(), SIGKILL);
  }
  int64_t kill_at_;
  int64_t calls_ = 0;
};

FileSystem* TestFileSystem() {
  const char* kill_at = std::getenv("MQ_TEST_KILL_AT");
  if (kill_at == nullptr && std::getenv("MQ_TEST_COUNT_CALLS") == nullptr) return nullptr;
  static KillingFileSystem fs(kill_at ? std::atoll(kill_at) : -1);
  return &fs;
}

void ReportTestCalls(FileSystem* fs) {
  if (fs != nullptr && std::getenv("MQ_TEST_COUNT_CALLS") != nullptr)
    cli::Eprint("mq-topic: test: {} calls\n", static_cast<KillingFileSystem*>(fs)->calls());
}

std::string EndText(const PartitionSummary& p) {
  return p.log_end_offset ? fmt::format("{}", *p.log_end_offset) : "-";
}

// The TIER column: "-" for a partition without a tier directory, else the
// segments and bytes in it and where it is (retention.md §21).
std::string TierText(const PartitionSummary& p) {
  if (p.tier_dir.empty()) return "-";
  return fmt::format("{} segments {} bytes in {}", p.tier_segments, p.tier_bytes, p.tier_dir);
}

// The partition table of `topics` (kafka-get-offsets and kafka-log-dirs
// in one), columns aligned.
void PrintTable(cli::Output& out, const std::vector<TopicSummary>& topics) {
  size_t w[6] = {5, 9, 16, 14, 4, 8};  // the headers' lengths (TIER is last: not padded)
  for (const TopicSummary& t : topics) {
    w[0] = std::max(w[0], t.topic.size());
    for (const PartitionSummary& p : t.partitions) {
      w[2] = std::max(w[2], fmt::formatted_size("{}", p.log_start_offset));
      w[3] = std::max(w[3], EndText(p).size());
      w[4] = std::max(w[4], fmt::formatted_size("{}", p.bytes));
      w[5] = std::max(w[5], fmt::formatted_size("{}", p.segments));
    }
  }
  out.Print("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", "TOPIC", w[0], "PARTITION",
            w[1], "LOG-START-OFFSET", w[2], "LOG-END-OFFSET", w[3], "SIZE", w[4], "SEGMENTS", w[5],
            "TIER");
  for (const TopicSummary& t : topics) {
    for (const PartitionSummary& p : t.partitions) {
      out.Print("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", t.topic, w[0], p.partition,
                w[1], p.log_start_offset, w[2], EndText(p), w[3], p.bytes, w[4], p.segments, w[5],
                TierText(p));
    }
  }
}

// The replicated topic's replication settings from its cluster state, when
// it can be read.
std::optional<std::pair<int32_t, int32_t>> ClusterSettings(const TopicConfig& c,
                                                           const std::string& topic) {
  if (c.cluster.empty()) return std::nullopt;
  auto store = FileClusterStore::Open(c.cluster, false);
  if (!store) return std::nullopt;
  auto state = (*store)->Load();
  if (!state) return std::nullopt;
  const ReplicatedTopic* t = state->Topic(topic);
  if (t == nullptr) return std::nullopt;
  return std::pair(t->replication_factor, t->min_insync_replicas);
}

// "tier": null, or the tier directory and its share of the partition.
void JsonTier(json::Writer& j, const PartitionSummary& p) {
  if (p.tier_dir.empty()) {
    j.Null("tier");
    return;
  }
  j.Key("tier").BeginObject().Str("dir", p.tier_dir).Uint("size", p.tier_bytes);
  j.Uint("segments", p.tier_segments).EndObject();
}

void JsonTopic(json::Writer& j, const TopicSummary& t) {
  j.BeginObject().Str("topic", t.topic).Int("partition_count", t.config.partitions);
  const auto cluster = ClusterSettings(t.config, t.topic);
  j.Int("replication_factor", cluster ? cluster->first : t.config.replication_factor);
  if (t.config.cluster.empty()) {
    j.Null("cluster");
  } else {
    j.Str("cluster", t.config.cluster);
  }
  j.Key("partitions").BeginArray();
  for (const PartitionSummary& p : t.partitions) {
    j.BeginObject().Int("partition", p.partition).Bool("present", p.present);
    j.Int("log_start_offset", p.log_start_offset).Key("log_end_offset").IntOrNull(p.log_end_offset);
    j.Uint("size", p.bytes).Uint("segments", p.segments);
    JsonTier(j, p);
    j.EndObject();
  }
  j.EndArray().EndObject();
}

// Finishes the deletions a crash interrupted (R83), saying so. A failure is
// reported; the verb goes on.
void FinishInterrupted(const DataDir& dir) {
  auto finished = FinishDeletions(dir);
  if (!finished) {
    cli::Warn("finishing an interrupted deletion: " + finished.error().message());
    return;
  }
  for (const std::string& t : *finished)
    cli::Warn(fmt::format("finished deleting topic \"{}\" (a deletion interrupted earlier)", t));
}

int List(const DataDir& dir, const Options& o) {
  auto names = dir.ListTopics();
  if (!names) return cli::Fail(names.error());
  std::vector<TopicSummary> topics;
  int rc = 0;
  for (const std::string& name : *names) {
    auto t = SummarizeTopic(dir, name);
    if (!t) {
      rc = std::max(rc, cli::Fail(t.error()));
      continue;
    }
    topics.push_back(std::move(*t));
  }
  cli::Output out;
  if (o.json) {
    json::Writer j;
    j.BeginObject().Key("topics").BeginArray();
    for (const TopicSummary& t : topics) JsonTopic(j, t);
    j.EndArray();
    out.Write(j.Finish());
  } else {
    PrintTable(out, topics);
  }
  const int out_rc = out.FinishExitCode();
  return out_rc != 0 ? out_rc : rc;
}

int Describe(const DataDir& dir, const Options& o) {
  auto t = SummarizeTopic(dir, o.topic);
  if (!t) return cli::Fail(t.error());
  cli::Output out;
  if (o.json) {
    json::Writer j;
    JsonTopic(j, *t);
    j.buffer().push_back('\n');
    out.Write(j.view());
    return out.FinishExitCode();
  }
  const auto cluster = ClusterSettings(t->config, t->topic);
  std::string configs;
  for (const ConfigEntry& e : EffectiveConfig(t->config, cluster)) {
    if (e.source == "default" || e.key == "partitions") continue;
    configs += fmt::format("{}{}={}", configs.empty() ? "" : ",", e.key, e.value);
  }
  out.Print("Topic: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}\n", t->topic,
            t->config.partitions, cluster ? cluster->first : t->config.replication_factor, configs);
  PrintTable(out, {*t});
  return out.FinishExitCode();
}

// -X KEY=VALUE pairs; a pair without '=' is a usage error.
Result<std::vector<std::pair<std::string, std::string>>> Pairs(
    const std::vector<std::string>& kvs) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& kv : kvs) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status(Code::kInvalidArgument, fmt::format("-X {}: not KEY=VALUE", kv));
    out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

int Create(const DataDir& dir, const Options& o) {
  auto pairs = Pairs(o.configs);
  if (!pairs) return cli::Fail(pairs.error());
  TopicConfig config;
  if (o.partitions) config.partitions = *o.partitions;
  for (const auto& [key, value] : *pairs) {
    if (key == "partitions" && o.partitions && value != fmt::format("{}", *o.partitions)) {
      return cli::Fail(Status(
          Code::kInvalidArgument,
          fmt::format("-X partitions={} contradicts --partitions {}", value, *o.partitions)));
    }
    if (key == "cluster" || key == "replica.id") {
      return cli::Fail(
          Status(Code::kInvalidArgument,
                 fmt::format("-X {}: replicated topics are created by mq-isr create", key)));
    }
    if (Status s = config.Set(key, value); !s.ok()) return cli::Fail(s);
  }
  if (Status s = config.Validate(); !s.ok()) return cli::Fail(s);
  auto existing = dir.ReadTopic(o.topic);
  if (existing) {
    if (o.if_not_exists) return 0;
    cli::Warn(fmt::format("topic \"{}\" exists already (mq-topic alter changes it)", o.topic));
    return cli::kExitCantCreate;
  }
  if (existing.error().code() != Code::kNotFound) return cli::Fail(existing.error());
  if (Status s = dir.CreateTopic(o.topic, config); !s.ok()) return cli::Fail(s);
  cli::Output out;
  out.Print("Created topic {} ({} partition{}).\n", o.topic, config.partitions,
            config.partitions == 1 ? "" : "s");
  return out.FinishExitCode();
}

int Config(const DataDir& dir, const Options& o) {
  auto config = dir.ReadTopic(o.topic);
  if (!config) return cli::Fail(config.error());
  auto entries = EffectiveConfig(*config, ClusterSettings(*config, o.topic));
  cli::Output out;
  if (o.json) {
    json::Writer j;
    j.BeginObject().Str("topic", o.topic).Key("configs").BeginArray();
    for (const ConfigEntry& e : entries) {
      j.BeginObject().Str("key", e.key).Str("value", e.value).Str("source", e.source);
      if (!e.meaning.empty()) j.Str("meaning", e.meaning);
      j.EndObject();
    }
    j.EndArray();
    out.Write(j.Finish());
    return out.FinishExitCode();
  }
  // An empty value shows as "", and a value whose text does not say what
  // it means is followed by that, as --json's "meaning".
  std::vector<std::string> shown;
  size_t kw = 3, vw = 5;
  for (const ConfigEntry& e : entries) {
    shown.push_back(e.value.empty() ? "\"\"" : e.value);
    if (!e.meaning.empty()) shown.back() += fmt::format(" ({})", e.meaning);
    kw = std::max(kw, e.key.size());
    vw = std::max(vw, shown.back().size());
  }
  out.Print("{:<{}}  {:<{}}  {}\n", "KEY", kw, "VALUE", vw, "SOURCE");
  for (size_t i = 0; i < entries.size(); ++i)
    out.Print("{:<{}}  {:<{}}  {}\n", entries[i].key, kw, shown[i], vw, entries[i].source);
  return out.FinishExitCode();
}

int Grow(const DataDir& dir, const Options& o, cli::Output& out) {
  auto config = dir.ReadTopic(o.topic);
  if (!config) return cli::Fail(config.error());
  const int32_t to = *o.partitions;
  if (to > config->partitions && config->cluster.empty()) {
    auto moves = CountMovingKeys(dir, o.topic, *config, to, o.keys);
    if (!moves) return cli::Fail(moves.error());
    cli::Eprint(
        "mq-topic: WARNING: from {} to {} partitions, keys map to other partitions: of the {} "
        "distinct keys in the last {} records of each partition, {} move to another partition "
        "(murmur2); records of one key written before and after the change are in two "
        "partitions, and their order across the two is lost\n",
        config->partitions, to, moves->keys, o.keys, moves->moved);
  }
  if (o.dry_run) {
    out.Print("Dry run: topic {} keeps {} partitions.\n", o.topic, config->partitions);
    return 0;
  }
  if (Status s = IncreasePartitions(dir, o.topic, to); !s.ok()) return cli::Fail(s);
  if (to == config->partitions) {
    out.Print("Topic {} has {} partitions already.\n", o.topic, to);
  } else {
    out.Print("Topic {}: {} partitions, were {}.\n", o.topic, to, config->partitions);
  }
  return 0;
}

int Alter(const DataDir& dir, const Options& o) {
  if (o.configs.empty() && o.delete_configs.empty() && !o.partitions) {
    return cli::UsageError(kUsage, "alter: nothing to change (-X, --delete-config, --partitions)");
  }
  if (o.dry_run && !o.partitions)
    return cli::UsageError(kUsage, "--dry-run goes with --partitions");
  cli::Output out;
  if (!o.configs.empty() || !o.delete_configs.empty()) {
    if (o.dry_run) return cli::UsageError(kUsage, "--dry-run changes only --partitions");
    auto pairs = Pairs(o.configs);
    if (!pairs) return cli::Fail(pairs.error());
    auto old = dir.ReadTopic(o.topic);
    if (!old) return cli::Fail(old.error());
    bool changed = false;
    auto next = AlterTopicConfig(dir, o.topic, *pairs, o.delete_configs, &changed);
    if (!next) return cli::Fail(next.error());
    for (std::string_view key : TopicConfig::KeyNames()) {
      const auto was = old->Get(key), now = next->Get(key);
      if (was != now) out.Print("Topic {}: {}={} (was {}).\n", o.topic, key, *now, *was);
    }
    if (!changed) out.Print("Topic {}: configuration unchanged.\n", o.topic);
  }
  if (o.partitions) {
    if (int rc = Grow(dir, o, out); rc != 0) return rc;
  }
  return out.FinishExitCode();
}

int Delete(const DataDir& dir, const Options& o) {
  if (o.force) {
    auto holders = FindTopicHolders(dir, o.topic);
    if (!holders) return cli::Fail(holders.error());
    for (int32_t p : holders->written)
      cli::Warn(
          fmt::format("--force: a producer has partition {} open: what it appends is lost", p));
    for (const std::string& g : holders->groups)
      cli::Warn(fmt::format("--force: group \"{}\" has a live member reading the topic", g));
  }
  if (Status s = DeleteTopic(dir, o.topic, o.force); !s.ok()) return cli::Fail(s);
  cli::Output out;
  out.Print("Deleted topic {}.\n", o.topic);
  return out.FinishExitCode();
}

}  // namespace

int Run(const Options& o) {
  FileSystem* fs = TestFileSystem();
  auto dir = DataDir::Open(o.dir, o.verb == Verb::kCreate, fs);  // create makes the root too
  if (!dir) return cli::Fail(dir.error());
  if (!o.topic.empty()) {
    if (Status s = ValidateName(o.topic, "topic"); !s.ok()) return cli::Fail(s);
  }
  FinishInterrupted(*dir);
  int rc = 0;
  switch (o.verb) {
    case Verb::kList:
      rc = List(*dir, o);
      break;
    case Verb::kDescribe:
      rc = Describe(*dir, o);
      break;
    case Verb::kCreate:
      rc = Create(*dir, o);
      break;
    case Verb::kConfig:
      rc = Config(*dir, o);
      break;
    case Verb::kAlter:
      rc = Alter(*dir, o);
      break;
    case Verb::kDelete:
      rc = Delete(*dir, o);
      break;
    case Verb::kNone:
      rc = cli::UsageError(kUsage, "no command");
      break;
  }
  ReportTestCalls(fs);
  return rc;
}

}  // namespace mq::topic
