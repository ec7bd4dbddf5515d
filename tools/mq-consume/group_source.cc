#include "group_source.h"

#include <algorithm>

#include "mq/assignment.h"

namespace mq::consume {

Result<std::vector<std::string>> MatchSubscription(const Flags& f, const DataDir& dir) {
  auto existing = dir.ListTopics();
  if (!existing) return existing.error();
  std::erase_if(*existing, [&](const std::string& t) {
    return (f.dlq && f.exec_given && t == *f.dlq) || (f.to_topic && t == *f.to_topic);
  });
  return MatchTopics(f.topics, *existing);
}

}  // namespace mq::consume
