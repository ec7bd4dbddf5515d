// Single segment files, for forensics: no data directory or lock needed
// (format-spec §6-§8). mq-inspect dumps and verifies files through this.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/partition.h"
#include "mq/status.h"

namespace mq {

// The base offset named by a segment file name ("00000000000000000042.log"
// -> 42); kInvalidArgument if the name breaks R12.
Result<int64_t> SegmentBaseOffset(const std::string& file_name);
// "00000000000000000042" + suffix.
std::string SegmentFileName(int64_t base_offset, const char* suffix);

struct OffsetIndexEntry {
  int64_t offset = 0;     // absolute: base offset + relative offset
  uint32_t position = 0;  // byte position in the .log
};
struct TimeIndexEntry {
  int64_t timestamp = 0;
  int64_t offset = 0;  // absolute
};

// Reads a whole .index / .timeindex file (R13/R14 size rule only; the
// cross-check against the log is VerifyFile's job). The base offset comes
// from the file name. `fs` is the seam the reads go through (nullptr: the
// real file system).
Result<std::vector<OffsetIndexEntry>> ReadOffsetIndexFile(const std::string& path);
Result<std::vector<TimeIndexEntry>> ReadTimeIndexFile(const std::string& path);
Result<std::vector<OffsetIndexEntry>> ReadOffsetIndexFile(const std::string& path, FileSystem* fs);
Result<std::vector<TimeIndexEntry>> ReadTimeIndexFile(const std::string& path, FileSystem* fs);

// Iterates the batches of one .log file from the start, reading with a
// bounded buffer. On a batch that breaks a rule, Next() returns the
// kCorruption error; the following call resumes at the next position where a
// valid batch starts (or at end of file).
class SegmentScanner {
 public:
  static Result<std::unique_ptr<SegmentScanner>> Open(const std::string& path,
                                                      const DecodeLimits& limits = {},
                                                      FileSystem* fs = nullptr);
  virtual ~SegmentScanner();
  // The next valid batch (the view lives until the next call), or nullopt at
  // the end of the file.
  Result<std::optional<BatchView>> Next();
  // Byte position of the batch last returned.
  uint64_t position() const;
  uint64_t file_size() const;
  // Bytes at the end of the file that hold no complete valid batch (torn or
  // garbage tail), known once Next() has returned nullopt.
  uint64_t trailing_bytes() const;

  struct Impl;

 private:
  explicit SegmentScanner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Verifies one file by its suffix: a .log (every rule it can check alone:
// R1-R10), a .index or .timeindex (R13/R14 against the sibling .log).
// Problems are appended; non-OK only if the file cannot be read.
Status VerifyFile(const std::string& path, const DecodeLimits& limits,
                  std::vector<Problem>* problems, VerifyStats* stats = nullptr,
                  FileSystem* fs = nullptr);

}  // namespace mq
