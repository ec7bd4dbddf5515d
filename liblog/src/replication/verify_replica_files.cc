// --verify of a partition directory's replication files (format-spec/
// replication.md §16, §17): each checkpoint and replication file on its own,
// then the checkpoints against the log (verify_replica_files.h).
#include "replication/verify_replica_files.h"

#include <fmt/format.h>

#include "format/format.h"
#include "io/checkpoint_file.h"
#include "mq/replication.h"

namespace mq {

namespace {

// Decodes the text of checkpoint file `name` by its kind (§16, §17).
Status DecodeCheckpointText(std::string_view name, const std::string& text, const std::string& path,
                            const std::optional<std::pair<std::string, int32_t>>& partition) {
  return name == format::kLeaderEpochCheckpointName
             ? DecodeLeaderEpochCheckpoint(text, path).status()
         : name == format::kReplicationOffsetCheckpointName
             ? DecodeReplicationOffsetCheckpoint(text, path, partition).status()
         : name == format::kReplicaPositionsName
             ? DecodeReplicaPositions(text, path).status()  // §17.2, R47
         : name == format::kLeaderEpochFenceName
             ? DecodeLeaderEpochFence(text, path).status()  // §17.3, R56
         : name == format::kFollowerStoppedName
             ? DecodeFollowerStop(text, path).status()  // §17.7, R58
             : DecodeLeaderClaim(text, path).status();  // §17.9, R53
}

}  // namespace

Status VerifyReplicaCheckpoints(int dir_fd, const std::string& dir, std::vector<Problem>* problems,
                                VerifyStats* stats, FileSystem* fs) {
  const auto partition = PartitionOfDirectory(dir);
  for (const char* name :
       {format::kLeaderEpochCheckpointName, format::kReplicationOffsetCheckpointName,
        format::kReplicaPositionsName, format::kLeaderClaimName, format::kLeaderEpochFenceName,
        format::kFollowerStoppedName}) {
    const std::string path = dir + "/" + name;
    auto text = ReadCheckpointFile(fs, dir_fd, name, path);
    if (!text && text.error().code() == Code::kNotFound) continue;  // optional (§16)
    Status s = text.status();
    if (text) {
      if (stats != nullptr) {
        ++stats->files;
        stats->bytes += text->size();
      }
      s = DecodeCheckpointText(name, *text, path, partition);
    }
    if (s.code() == Code::kCorruption)
      problems->push_back({s.file(), s.position(), s.rule(), s.message()});
    else if (!s.ok())
      return s;  // a symlink, FIFO or device is refused (exit 77), I/O errors stop
  }
  // §16.3, R61: the high watermark (binary, two copies), read as a writer
  // reads it (a breach is read again before it is reported).
  if (auto info = fs->StatAt(dir_fd, format::kHighWatermarkName)) {
    if (stats != nullptr) {
      ++stats->files;
      stats->bytes += info->size;
    }
    Status read = CheckStoredHighWatermark(dir_fd, partition, fs);
    if (read.code() == Code::kCorruption)
      problems->push_back({read.file(), read.position(), read.rule(), read.message()});
    else if (!read.ok())
      return read;
  }
  // §17.2, R60: the leader's fetch positions (binary, two copies).
  if (auto info = fs->StatAt(dir_fd, format::kFetchPositionsName)) {
    if (stats != nullptr) {
      ++stats->files;
      stats->bytes += info->size;
    }
    auto read = ReadReplicaPositions(dir, fs);
    if (!read && read.error().code() == Code::kCorruption)
      problems->push_back({read.error().file(), read.error().position(), read.error().rule(),
                           read.error().message()});
    else if (!read)
      return read.status();
  }
  return Status::Ok();
}

Status VerifyReplicaCheckpointsAgainstLog(int dir_fd, const std::string& dir, const LogFacts& log,
                                          std::vector<Problem>* problems, FileSystem* fs) {
  const Problem::Kind kind =
      log.trusted ? Problem::Kind::kCorruption : Problem::Kind::kNeedsRecovery;
  auto add = [&](const Status& s) {
    problems->push_back({s.file(), s.position(), s.rule(), s.message(), kind});
  };
  if (const auto partition = PartitionOfDirectory(dir)) {
    // A file that does not decode was reported by VerifyReplicaCheckpoints.
    auto hw = LoadHighWatermark(dir_fd, partition->first, partition->second, fs);
    if (hw) {
      Status s = CheckHighWatermarkWithin(dir_fd, partition->first, partition->second, *hw,
                                          log.log_end_offset, fs);
      if (!s.ok()) add(s);
    }
  }
  auto epochs = LeaderEpochCache::Load(dir_fd, fs);
  if (!epochs) return Status::Ok();  // missing, or reported by VerifyReplicaCheckpoints
  const std::vector<EpochEntry>& held = epochs->entries();
  const std::vector<EpochEntry>& want = log.implied_epochs;
  const std::string path = dir + "/" + format::kLeaderEpochCheckpointName;
  size_t i = 0;
  for (; i < held.size() && held[i].start_offset < log.log_end_offset; ++i) {
    if (i >= want.size()) {
      add(EpochEntryMismatch(
          *epochs, i, path,
          fmt::format("epoch {} from offset {}, but the log holds no batch of "
                      "an epoch above {} there",
                      held[i].epoch, held[i].start_offset, want.empty() ? -1 : want.back().epoch)));
      return Status::Ok();
    }
    // The first entry may start later than its epoch's first batch: the
    // log start moved into it (before the next epoch starts).
    const bool start_moved = i == 0 && held[i].start_offset > want[i].start_offset &&
                             (want.size() == 1 || held[i].start_offset < want[1].start_offset);
    if (held[i].epoch != want[i].epoch ||
        (held[i].start_offset != want[i].start_offset && !start_moved)) {
      add(EpochEntryMismatch(
          *epochs, i, path,
          fmt::format("epoch {} from offset {}, but the log's epoch {} starts "
                      "at offset {}",
                      held[i].epoch, held[i].start_offset, want[i].epoch, want[i].start_offset)));
      return Status::Ok();
    }
  }
  if (i < want.size())
    add(EpochEntryMismatch(*epochs, held.size(), path,
                           fmt::format("the log's epoch {} from offset {} has no entry",
                                       want[i].epoch, want[i].start_offset)));
  return Status::Ok();
}

}  // namespace mq
