// mq-test-gappy-append DIR TOPIC PARTITION FIRST COUNT [KEYS]: appends COUNT
// one-record batches (value "v<FIRST+i>", key "k<(FIRST+i) mod KEYS>" when
// KEYS > 0) to an existing topic's partition, each claiming one to three
// offsets (lastOffsetDelta 0..2, as compaction leaves batches), so that the
// records' offsets have gaps. For tests of consumers over offset gaps.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mq/batch.h"
#include "mq/crc32c.h"
#include "mq/partition.h"
#include "mq/topic.h"

namespace {
mq::Bytes AsB(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }
int Die(const mq::Status& s) {
  std::fprintf(stderr, "mq-test-gappy-append: %s\n", s.message().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: mq-test-gappy-append DIR TOPIC PARTITION FIRST COUNT [KEYS]\n");
    return 64;
  }
  const std::string topic = argv[2];
  const int32_t partition = std::atoi(argv[3]);
  const long first = std::atol(argv[4]), count = std::atol(argv[5]);
  const long keys = argc > 6 ? std::atol(argv[6]) : 0;
  auto dir = mq::DataDir::Open(argv[1], false);
  if (!dir) return Die(dir.error());
  auto config = dir->ReadTopic(topic);
  if (!config) return Die(config.error());
  mq::RecoveryReport report;
  auto w = mq::PartitionWriter::Open(dir->PartitionDir(topic, partition),
                                     mq::DataDir::LogConfigFor(*config), true, &report);
  if (!w) return Die(w.error());
  for (long i = first; i < first + count; ++i) {
    const std::string value = "v" + std::to_string(i),
                      key = "k" + std::to_string(i % (keys ? keys : 1));
    mq::BatchBuilder b;
    mq::RecordInput r;
    r.timestamp = 1700000000000 + i;
    if (keys > 0) r.key = AsB(key);
    r.value = AsB(value);
    b.Add(r);
    std::vector<std::byte> bytes;
    if (auto s = b.Finish(0, &bytes); !s.ok()) return Die(s);
    // lastOffsetDelta (bytes 23-26, big-endian), then the CRC (17-20) of 21..end.
    const uint32_t delta = static_cast<uint32_t>(i % 3);
    for (int k = 0; k < 4; ++k) bytes[23 + k] = std::byte((delta >> (24 - 8 * k)) & 0xff);
    const uint32_t crc = mq::Crc32c(std::span<const std::byte>(bytes).subspan(21));
    for (int k = 0; k < 4; ++k) bytes[17 + k] = std::byte((crc >> (24 - 8 * k)) & 0xff);
    auto a = (*w)->Append(bytes);
    if (!a) return Die(a.error());
  }
  if (auto s = (*w)->Close(); !s.ok()) return Die(s);
  return 0;
}
