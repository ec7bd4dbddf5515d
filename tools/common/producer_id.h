// The producer-id registry (format-spec/producer.md §10.3): a stable name
// (mq-produce --producer-id NAME, or a pipeline's, format-spec/pipeline.md)
// maps to a numeric producerId kept in the data directory, and a lock held for the whole run keeps two runs with one name
// from interleaving their sequences.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

#include "mq/file.h"
#include "mq/lock.h"
#include "mq/status.h"
#include "mq/wire.h"

namespace mq {

class ProducerIdentity {
 public:
  // Validates `name` like a topic name, takes `producers/<name>.lock`
  // (kBusy, exit 75, if another run holds it) and returns the numeric id of
  // `name`, allocating the next free one on first use.
  static Result<ProducerIdentity> Acquire(const std::string& data_dir, std::string_view name);

  int64_t id() const { return id_; }

 private:
  ProducerIdentity(FileLock lock, int64_t id) : lock_(std::move(lock)), id_(id) {}
  FileLock lock_;  // exclusive on producers/<name>.lock, held until exit
  int64_t id_ = -1;
};

// Replication (format-spec/producer.md §10.3): makes the registry of the
// root `to` hold every name of the root `from` with the same id, and its
// next id at least `from`'s, so that a resumed --producer-id run after a
// failover keeps its id. A name both hold with different ids is kCorruption
// (P8) naming both files, and nothing is changed.
Status CarryProducerRegistry(const std::string& from, const std::string& to);

// The same in two steps, for a root on another host (the CarryState
// message, format-spec/protocol.md): what a root's registry holds, and
// making `to`'s hold it too (`from_label` names the source in errors).
struct ProducerRegistry {
  std::vector<wire::CarriedProducer> ids;  // names without ".id"
  std::optional<int64_t> next;
};
Result<ProducerRegistry> ReadProducerRegistry(const std::string& root);
Status ApplyProducerRegistry(const std::string& to, const ProducerRegistry& from,
                             const std::string& from_label);

}  // namespace mq
