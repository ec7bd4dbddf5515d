// mq-test-truncate DIR TOPIC PARTITION BACK: cuts the last BACK offsets of
// an existing topic's partition with a writer (PartitionWriter::TruncateTo
// the log end minus BACK, not below 0): a live truncation, recorded in the
// partition's truncation history (format-spec/segment.md §6.4-§6.6), while
// readers may be reading. Prints the log end left. For tests of consumers
// of a log cut under them.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mq/partition.h"
#include "mq/topic.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: mq-test-truncate DIR TOPIC PARTITION BACK\n");
    return 64;
  }
  auto die = [](const mq::Status& s) {
    std::fprintf(stderr, "mq-test-truncate: %s\n", s.message().c_str());
    return s.code() == mq::Code::kBusy ? 75 : 1;
  };
  const std::string topic = argv[2];
  auto dir = mq::DataDir::Open(argv[1], false);
  if (!dir) return die(dir.error());
  auto config = dir->ReadTopic(topic);
  if (!config) return die(config.error());
  mq::RecoveryReport report;
  auto w = mq::PartitionWriter::Open(dir->PartitionDir(topic, std::atoi(argv[3])),
                                     mq::DataDir::LogConfigFor(*config), true, &report);
  if (!w) return die(w.error());
  const int64_t to = std::max<int64_t>(0, (*w)->log_end_offset() - std::atol(argv[4]));
  if (auto s = (*w)->TruncateTo(to); !s.ok()) return die(s);
  std::printf("%lld\n", static_cast<long long>((*w)->log_end_offset()));
  if (auto s = (*w)->Close(); !s.ok()) return die(s);
  return 0;
}
