// The producer-id registry (format-spec/producer.md §10.3): a stable name
// (mq-produce --producer-id NAME, or a pipeline's, format-spec/pipeline.md)
// maps to a numeric producerId kept in the data directory, and a lock held
// for the whole run keeps two runs with one name from interleaving their
// sequences. Every file it opens, reads, writes, renames and locks goes
// through the FileSystem seam (mq/file.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/file.h"
#include "mq/lock.h"
#include "mq/status.h"
#include "mq/wire.h"

namespace mq {

class ClusterStore;

class ProducerIdentity {
 public:
  // Validates `name` like a topic name, takes `producers/<name>.lock`
  // (kBusy, exit 75, if another run holds it) and returns the numeric id of
  // `name`, allocating the next free one on first use: from the root's
  // registry (P8), or, for a replicated topic (`cluster` set), from the
  // cluster's (P10), which gives the name the same id on every root.
  // Through `fs` (null: the real file system).
  static Result<ProducerIdentity> Acquire(const std::string& data_dir, std::string_view name,
                                          ClusterStore* cluster = nullptr,
                                          FileSystem* fs = nullptr);

  int64_t id() const { return id_; }

 private:
  ProducerIdentity(FileLock lock, int64_t id) : lock_(std::move(lock)), id_(id) {}
  // Exclusive on producers/<name>.lock, held until this identity is
  // destroyed, which releases it explicitly (FileLock: a handler another
  // thread is forking would otherwise hold it until it execs).
  FileLock lock_;
  int64_t id_ = -1;
};

}  // namespace mq
