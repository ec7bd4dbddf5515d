// mq-topic's command line and verbs (manual: man/man1/mq-topic.1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mq::topic {

// The man page's SYNOPSIS, word for word.
extern const char* const kUsage;

enum class Verb { kNone, kList, kDescribe, kCreate, kConfig, kAlter, kDelete };

struct Options {
  std::string dir;
  Verb verb = Verb::kNone;
  std::string topic;
  bool json = false;
  std::optional<int32_t> partitions;
  std::vector<std::string> configs;         // -X KEY=VALUE
  std::vector<std::string> delete_configs;  // --delete-config KEY
  bool if_not_exists = false;
  bool force = false;
  bool dry_run = false;
  int64_t keys = 1000;  // records per partition read for the key-move count
};

void AddFlags(CLI::App& app, Options* o);
int Run(const Options& o);

}  // namespace mq::topic
