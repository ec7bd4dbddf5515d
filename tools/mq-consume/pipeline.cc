#include "pipeline.h"

#include <signal.h>

#include <cstdlib>

#include <fmt/format.h>

#include "cli.h"
#include "mq/consumer.h"
#include "replica.h"

namespace mq::consume {
namespace {

// Test seam (mq(7), MQ_TEST_CRASH=pipeline-partial): die as a SIGKILL
// would once a message's first output batch is appended and more remain.
bool CrashPartial() {
  const char* crash = std::getenv("MQ_TEST_CRASH");
  return crash != nullptr && std::string_view(crash) == "pipeline-partial";
}

PipelineConfig ConfigOf(const PipelineOptions& o) {
  PipelineConfig c;
  c.group = o.group;
  c.out = o.out;
  c.key_delimiter = o.key_delimiter;
  c.durability = o.durability;
  c.max_open = o.max_open;
  if (CrashPartial()) c.between_batches = [] { ::raise(SIGKILL); };
  return c;
}

}  // namespace

size_t PipelineWriterBudget(size_t shares, int32_t source_partitions) {
  return mq::PipelineWriterBudget(shares, source_partitions, kDescriptorsPerReader,
                                  kDescriptorsPerWriter, cli::kMaxOpenPartitions);
}

Pipeline::Pipeline(PipelineOptions options, const DataDir& dir, const TopicConfig& source)
    : options_(std::move(options)), dir_(dir), source_(source), writer_(ConfigOf(options_), dir) {}

Pipeline::~Pipeline() { (void)Close(); }

Status Pipeline::Open() {
  auto config = dir_.ReadTopic(options_.out);
  if (!config && config.error().code() == Code::kNotFound) {
    MQ_RETURN_IF_ERROR(dir_.CreateTopic(options_.out, source_.LocalCopy()));
    if (!options_.quiet)
      cli::Warn(fmt::format("created output topic {} like {} ({} partition{})", options_.out,
                            options_.in, source_.partitions, source_.partitions == 1 ? "" : "s"));
    config = dir_.ReadTopic(options_.out);
  }
  if (!config) return config.error();
  MQ_RETURN_IF_ERROR(cli::RefuseReplicatedOutput(*config, "--to-topic", options_.out));
  return writer_.Open(*config);
}

std::string Pipeline::In(int32_t partition) const {
  return options_.topics ? options_.topics->TopicOf(partition) : options_.in;
}

Status Pipeline::Acquire(int32_t partition, int64_t start) {
  auto resume = writer_.Acquire(partition, {In(partition), LanePartition(partition)}, start);
  if (!resume) return resume.error();
  if (*resume >= 0 && options_.verbose)
    cli::Eprint(
        "topic {} partition {}: outputs of offsets {}..{} are in {} already; "
        "completing offset {}\n",
        In(partition), LanePartition(partition), start, *resume, options_.out, *resume);
  return Status::Ok();
}

Status Pipeline::Deliver(int32_t partition, int64_t offset, int64_t timestamp,
                         std::string_view output) {
  auto done = writer_.Deliver(partition, offset, timestamp, output);
  if (!done) return done.error();
  if (done->completed && options_.verbose && !options_.quiet)
    cli::Eprint("topic {} partition {}: offset {}: completed ({} output batch{} appended now)\n",
                In(partition), LanePartition(partition), offset, done->batches,
                done->batches == 1 ? "" : "es");
  return Status::Ok();
}

}  // namespace mq::consume
