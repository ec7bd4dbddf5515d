// mq-example-write: writes a small topic through liblog, the way a program
// embedding mq would. Used by examples/demo.sh.
//
//   mq-example-write DATA_DIR TOPIC RECORDS
//
// Creates DATA_DIR (if needed) and TOPIC with 2 partitions and small
// segments, then appends RECORDS keyed records ("user-<n>" -> "event <i>"),
// placed by Kafka's key partitioner, in batches of 10; every third batch is
// zstd-compressed.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "exit_code.h"  // tools/common: a status's exit status (sysexits)
#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/topic.h"

namespace {

constexpr int kPartitions = 2;
constexpr int kBatchRecords = 10;
constexpr int64_t kStartTimeMs = 1700000000000;  // fixed, so runs are comparable

mq::Bytes AsBytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

int Fail(const mq::Status& s) {
  std::fprintf(stderr, "mq-example-write: %s\n", s.message().c_str());
  return mq::cli::ExitCode(s);
}

struct Pending {
  std::unique_ptr<mq::PartitionWriter> writer;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::vector<int64_t> timestamps;
  int batches = 0;
};

// Encodes the pending records of one partition as one batch and appends it.
mq::Status Flush(Pending& p) {
  if (p.keys.empty()) return mq::Status::Ok();
  mq::BatchOptions options;
  if (p.batches % 3 == 2) options.compression = mq::Compression::kZstd;
  mq::BatchBuilder builder(options);
  const mq::Header header{"source", AsBytes("demo")};
  for (size_t i = 0; i < p.keys.size(); ++i) {
    mq::RecordInput r;
    r.timestamp = p.timestamps[i];
    r.key = AsBytes(p.keys[i]);
    r.value = AsBytes(p.values[i]);
    r.headers = std::span(&header, 1);
    builder.Add(r);
  }
  std::vector<std::byte> batch;
  MQ_RETURN_IF_ERROR(builder.Finish(0, &batch));
  auto appended = p.writer->Append(batch);
  if (!appended) return appended.error();
  p.batches++;
  p.keys.clear();
  p.values.clear();
  p.timestamps.clear();
  return mq::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: mq-example-write DATA_DIR TOPIC RECORDS\n");
    return 64;
  }
  const std::string topic = argv[2];
  const int records = std::atoi(argv[3]);
  auto dir = mq::DataDir::Open(argv[1], true);
  if (!dir) return Fail(dir.error());
  mq::TopicConfig config;
  config.partitions = kPartitions;
  config.segment_bytes = 4096;         // several segments even for a small demo
  config.index_interval_bytes = 1024;  // and a few index entries per segment
  if (mq::Status s = dir->CreateTopic(topic, config); !s.ok()) return Fail(s);

  std::vector<Pending> parts(kPartitions);
  for (int p = 0; p < kPartitions; ++p) {
    mq::RecoveryReport report;
    auto w = mq::PartitionWriter::Open(dir->PartitionDir(topic, p),
                                       mq::DataDir::LogConfigFor(config), true, &report);
    if (!w) return Fail(w.error());
    parts[p].writer = std::move(*w);
  }
  for (int i = 0; i < records; ++i) {
    std::string key = fmt::format("user-{}", i % 7);
    const int32_t p = mq::PartitionForKey(AsBytes(key), kPartitions);
    parts[p].keys.push_back(std::move(key));
    parts[p].values.push_back(fmt::format("event {} of the demo", i));
    parts[p].timestamps.push_back(kStartTimeMs + i);
    if (parts[p].keys.size() == kBatchRecords) {
      if (mq::Status s = Flush(parts[p]); !s.ok()) return Fail(s);
    }
  }
  for (int p = 0; p < kPartitions; ++p) {
    if (mq::Status s = Flush(parts[p]); !s.ok()) return Fail(s);
    if (mq::Status s = parts[p].writer->Close(); !s.ok()) return Fail(s);
    std::printf("%s-%d: %d batches, log end offset %lld\n", topic.c_str(), p, parts[p].batches,
                static_cast<long long>(parts[p].writer->log_end_offset()));
  }
  return 0;
}
