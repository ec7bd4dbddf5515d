// mq-consume -G: the open-file budget a member's readers (and a
// pipeline's output writers) share (mq-consume(1), OPEN FILES).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cli.h"
#include "group_source.h"
#include "pipeline.h"

namespace mq::consume {

// The open-file budget of a member's readers (and a pipeline's output
// writers: a reader and a writer per share): what the open-file limit
// leaves once a pipeline's producer locks of every source partition (the
// most this member can own), the handler runs that may go at once and the
// dead-letter writers are counted out.
struct ReaderBudget {
  size_t per_share = kDescriptorsPerReader;
  size_t reserved = 0;    // handler runs and dead-letter writers
  bool pipeline = false;  // a producer lock per source partition more
  // What the readers and the producer locks may hold, measured at the first
  // Share (later, the descriptors in use include the readers' own).
  size_t descriptors = 0;

  // A pipeline's output writers (a share holds a writer too): their limit
  // follows the shares (PipelineWriterBudget) once the pipeline is open.
  Pipeline* writers = nullptr;

  // The shares for `sources` (with `more_partitions` of a topic about to
  // be added), without changing anything.
  size_t Count(const std::vector<std::unique_ptr<Source>>& sources, int32_t more_partitions = 0) {
    size_t locks = 0;
    if (pipeline) {
      for (const auto& s : sources)
        locks += kLocksPerSourcePartition * static_cast<size_t>(s->consumer->config().partitions);
      locks += kLocksPerSourcePartition * static_cast<size_t>(more_partitions);
    }
    if (descriptors == 0) {
      const size_t shares = cli::OpenPartitionBudget(per_share, reserved + locks);
      descriptors = shares * per_share + locks;
      return shares;
    }
    return descriptors > locks + per_share ? (descriptors - locks) / per_share : 1;
  }
  // Whether a topic of `partitions` more has room for its reader: each
  // topic read keeps one at least, so a member reads at most as many
  // topics as it has shares.
  bool Room(const std::vector<std::unique_ptr<Source>>& sources, int32_t partitions) {
    return Count(sources, partitions) >= sources.size() + 1;
  }
  // The shares for `sources`; the topics read share them (one reader each
  // at least, Room): each consumer's max_open is set to its share, and a
  // pipeline's writer limit to what the shares leave, lowered as a
  // pattern adds topics, so that the total stays within the budget.
  size_t Share(const std::vector<std::unique_ptr<Source>>& sources) {
    const size_t shares = Count(sources);
    int32_t partitions = 0;
    for (const auto& s : sources) {
      s->consumer->set_max_open(std::max<size_t>(1, shares / sources.size()));
      partitions = static_cast<int32_t>(
          std::min<int64_t>(INT32_MAX, int64_t{partitions} + s->consumer->config().partitions));
    }
    if (writers != nullptr) writers->set_max_open(PipelineWriterBudget(shares, partitions));
    return shares;
  }
};

}  // namespace mq::consume
