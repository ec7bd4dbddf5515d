// Idempotent producer state of one partition (format-spec §10): for each
// producer id, its epoch and the last batches it appended, so a retried batch
// is recognised and not appended twice. Kafka's rules (kafka-format.md §9).
//
// A partition writer holds one table, in its ProducerStateManager
// (producer_state_manager.h): CheckAppend() (through AppendCheck) before
// writing a batch with producerId >= 0, Update() after the batch has its
// offsets, and Replay() for every batch read back during recovery or when
// catching up with other writers' appends. The table is persisted as
// `<offset>.snapshot`.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "format/format.h"
#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

// P7 (format.h): a close writes no snapshot when the batches after the
// newest one take less than this much of the active segment.
using format::kSnapshotReplayBytes;

struct ProducerBatchInfo {
  int32_t first_sequence = 0;
  int32_t last_sequence = 0;
  int64_t last_offset = 0;
  int32_t offset_delta = 0;  // last_offset - base offset
  int64_t timestamp = 0;     // max timestamp
};

struct ProducerEntry {
  int16_t epoch = -1;
  std::deque<ProducerBatchInfo> batches;  // the last 5, oldest first
};

class ProducerStateTable {
 public:
  // For a client batch (offsets not yet assigned): OK(nullopt) to append;
  // OK(result) when it duplicates a cached batch (result = the original
  // offsets, duplicate = true; nothing must be appended); kOutOfOrder for a
  // sequence gap or an old epoch.
  Result<std::optional<AppendResult>> CheckAppend(const BatchHeader& header) const;
  // Records a batch that is now in the log (offsets assigned).
  void Update(const BatchHeader& header);
  // Same as Update, for batches read back from the log (no checks).
  void Replay(const BatchHeader& header) { Update(header); }
  // The last sequence appended by `producer_id` in `epoch`, or nullopt.
  std::optional<int32_t> LastSequence(int64_t producer_id) const;
  const std::unordered_map<int64_t, ProducerEntry>& entries() const { return entries_; }

  // Loads the newest `<offset>.snapshot` in the directory `dir_fd` whose
  // offset is <= `log_end`; returns that offset (0 if none), from which the
  // caller replays. A snapshot that fails its CRC or layout (P7) is ignored
  // and the next older one tried (rebuilt by replay). Snapshots with an
  // offset > `log_end` describe a truncated log and are deleted (pass
  // INT64_MAX to only read).
  // `listed`: the snapshot offsets of a listing of the directory just made
  // (under the writer lock), ascending; null: listed here.
  // Files are read, listed and removed through `fs` (null: the real one).
  Result<int64_t> LoadSnapshot(int dir_fd, int64_t log_end,
                               const std::vector<int64_t>* listed = nullptr,
                               FileSystem* fs = nullptr);
  // LoadSnapshot's deletion alone: removes the snapshots of `listed`
  // (ascending) with an offset > `log_end`; returns the newest of the
  // others (-1 if none), the one LoadSnapshot would try first.
  // The removals are best effort (a snapshot left past the log end is
  // never read, and the next open removes it).
  static int64_t DropSnapshotsPast(int dir_fd, int64_t log_end, const std::vector<int64_t>& listed,
                                   FileSystem* fs = nullptr);
  // Writes `<next_offset>.snapshot` atomically and removes older ones beyond
  // the newest two.
  // With `sync` false the file is neither fsynced nor is the directory (for
  // page-cache durability: a crash may lose it or leave it invalid, P7).
  // Written with WriteFileAtomic through `fs` (null: the real one); removing
  // the older ones is best effort.
  Status WriteSnapshot(int dir_fd, int64_t next_offset, bool sync = true,
                       FileSystem* fs = nullptr) const;

 private:
  std::unordered_map<int64_t, ProducerEntry> entries_;
};

}  // namespace mq
