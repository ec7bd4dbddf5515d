// Kafka's text checkpoint layout (format-spec/replication.md §16.1, R35):
// one strict reader and one atomic writer, shared by the leader-epoch and
// replication-offset checkpoints. The reader never allocates more than the
// file (at most format::kMaxCheckpointBytes), and every breach is a
// kCorruption naming the file, the byte position and the rule.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// One field of an entry line and the byte position where it starts.
struct CheckpointField {
  std::string_view text;
  uint64_t position = 0;
};

// Parses `bytes` (the whole file `file`) as R35: version line "0", count
// line N, exactly N lines of `fields` fields each, nothing after. Calls
// `entry` with each entry's fields in order; a non-OK status it returns
// stops the parse and is returned. A zero-byte file has no entries (Kafka
// creates one before its first write).
Status ParseCheckpoint(std::string_view bytes, const std::string& file, size_t fields,
                       const std::function<Status(std::span<const CheckpointField>)>& entry);

// A field as a decimal in [0, max] (R35: digits only, no sign, no leading
// zero, R35); one above `max` breaks `rule`. `what` names the field.
Result<int64_t> CheckpointNumber(const CheckpointField& field, int64_t max, const std::string& file,
                                 const char* rule, const char* what);

// The file's bytes: "0\n", the count, then each line of `lines` (fields
// already joined by single spaces) with its '\n'.
std::string FormatCheckpoint(const std::vector<std::string>& lines);

// Reads all of the small text file `name` in `dir_fd` (named `path` in
// errors) through `fs`: a file over `max_bytes` is corruption of `rule`
// (at byte `max_bytes`) before anything is read, so a hostile file costs no
// more memory than that. A missing file is kNotFound. With `keep`, the
// file read is handed to the caller, still open (FileClusterStore keeps
// it to tell later whether the name still names it).
Result<std::string> ReadBoundedTextFile(FileSystem* fs, int dir_fd, const std::string& name,
                                        const std::string& path, uint64_t max_bytes,
                                        const char* rule, std::unique_ptr<File>* keep = nullptr);

// Reads all of `name` in `dir_fd` (named `path` in errors) through `fs`,
// refusing more than format::kMaxCheckpointBytes as R35 before reading.
// A missing file is kNotFound.
Result<std::string> ReadCheckpointFile(FileSystem* fs, int dir_fd, const std::string& name,
                                       const std::string& path);

// Replaces `name` in `dir_fd` with `lines` atomically (layout.md §1.5, R39);
// with `sync` false, without fsync (state a crash may lose).
Status WriteCheckpointFile(FileSystem* fs, int dir_fd, const std::string& name,
                           const std::vector<std::string>& lines, bool sync = true);

// The in-place files of two copies (R60 fetch-positions, R61
// high-watermark): the file is empty or `file_bytes`; each copy of
// `copy_bytes` starts with the magic, the version and (at
// `sequence_offset`) a sequence from 1 to 2^63-1, and ends with the
// CRC-32C of what precedes it at `checksum_offset`.
struct InPlaceLayout {
  const char* rule;
  size_t file_bytes;
  size_t copy_bytes;
  size_t checksum_offset;
  uint32_t magic;
  uint32_t version;
  size_t sequence_offset;
};
// A breach of the layout's rule at byte `at` of the copy being decoded.
using CopyBreach = std::function<Status(size_t at, const std::string& what)>;
// Decodes the `bytes` (not empty) of `file`: the size, then each copy whose
// checksum matches (a copy whose does not is a write not finished): its
// header, then `payload(copy, its bytes, its sequence, bad)`. Of the whole
// copies the one with the higher sequence is current; neither whole, or
// both with one sequence, is a breach (at the first copy's checksum, or at
// the second copy's sequence). Returns the current copy, 0 or 1.
Result<int> DecodeInPlaceCopies(
    std::span<const std::byte> bytes, const std::string& file, const InPlaceLayout& layout,
    const std::function<Status(int copy, const std::byte* p, uint64_t sequence,
                               const CopyBreach& bad)>& payload);

// A file of a partition directory written in place (R60 fetch-positions,
// R61 high-watermark), kept open from one use to the next instead of
// opened at each: while the name still names the kept file (one fstatat:
// the same device and inode) it is that file. The kept file's inode cannot
// be reused while it is open, so a file removed, or created again (R39),
// since it was opened is never taken for it: it is opened again.
class NamedFile {
 public:
  // `mode` kRead for a reader that never writes it (a partition reader
  // bounded by the high watermark may not be allowed to).
  explicit NamedFile(const char* name, FileSystem::OpenMode mode = FileSystem::kReadWrite)
      : name_(name), mode_(mode) {}
  // The file the name names now, open in the mode given (for reading and
  // writing unless told), and its size now; kNotFound when there is none.
  Result<File*> Get(FileSystem* fs, int dir_fd, uint64_t* size);
  void Reset() { file_.reset(); }

 private:
  const char* name_;
  FileSystem::OpenMode mode_;
  std::unique_ptr<File> file_;
  FileInfo info_;
};

// The bytes of the in-place file `name` (R60, R61) of `dir_fd`: of the
// file `held` keeps open, or (null) opened for this read; nullopt when
// there is none. `file` is the kept file (null without `held`). A file
// longer than `max_bytes` breaks `rule`, reported at `path`, or at the
// path of `name` in `dir_fd` when `path` is empty (a readlink, made only
// for the error: these reads are on every acknowledgement's path).
struct InPlaceBytes {
  std::vector<std::byte> data;
  File* file = nullptr;
};
Result<std::optional<InPlaceBytes>> ReadInPlaceFile(FileSystem* fs, int dir_fd, const char* name,
                                                    uint64_t max_bytes, const char* rule,
                                                    const std::string& path, NamedFile* held);

// LoadHighWatermark and RaiseHighWatermark (mq/replica_checkpoint.h) on the
// `high-watermark` file `held` keeps open (null: opened at each call), as a
// partition's writer and a replica's log keep it.
Result<int64_t> LoadHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                  FileSystem* fs, NamedFile* held);
Result<bool> RaiseHighWatermark(int dir_fd, std::string_view topic, int32_t partition,
                                int64_t offset, FileSystem* fs, bool sync, NamedFile* held);
// CheckStoredHighWatermark and CheckHighWatermarkWithin
// (mq/replica_checkpoint.h), reading through `fs` (verify's reads).
Status CheckStoredHighWatermark(int dir_fd,
                                const std::optional<std::pair<std::string, int32_t>>& partition,
                                FileSystem* fs);
Status CheckHighWatermarkWithin(int dir_fd, std::string_view topic, int32_t partition, int64_t hw,
                                int64_t log_end_offset, FileSystem* fs);

}  // namespace mq
