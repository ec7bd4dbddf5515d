#include "dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "mq/file.h"
#include "mq/group.h"
#include "mq/member_heartbeat.h"
#include "mq/member_lease.h"
#include "mq/replica_checkpoint.h"
#include "mq/segment.h"
#include "mq/topic.h"
#include "mq/verify_data_dir.h"

namespace mq::inspect {
namespace {

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::optional<int64_t> BaseOffsetOf(const std::string& path) {
  auto base = SegmentBaseOffset(BaseName(path));
  if (!base) return std::nullopt;
  return *base;
}

// Stops with a status that is not about the data (missing file, I/O).
int Stop(Printer* p, const Status& status) {
  p->out().Flush();
  return cli::Fail(status);
}

// The first of several exit codes that is not 0.
void Merge(int* rc, int code) {
  if (*rc == 0) *rc = code;
}

// Records offsets that do not follow each other (compacted logs have gaps;
// kafka-dump-log reports them on stderr in deep mode).
class OffsetGaps {
 public:
  void See(int64_t offset) {
    if (last_ >= 0 && offset != last_ + 1) {
      if (gaps_.size() < kMaxKept) gaps_.emplace_back(last_, offset);
      ++count_;
    }
    last_ = offset;
  }
  void Print(Printer* p, const std::string& file) const {
    if (count_ == 0 || p->broken()) return;
    p->out().Flush();
    cli::Eprint("Non-consecutive offsets in {}\n", file);
    for (const auto& [a, b] : gaps_) cli::Eprint("  {} is followed by {}\n", a, b);
    if (count_ > gaps_.size()) cli::Eprint("  ... and {} more\n", count_ - gaps_.size());
  }

 private:
  static constexpr size_t kMaxKept = 1000;
  int64_t last_ = -1;
  uint64_t count_ = 0;
  std::vector<std::pair<int64_t, int64_t>> gaps_;
};

// For a batch the scanner rejected: prints its batch line with isvalid:
// false when its header can still be read (R1-R3 hold), as kafka-dump-log
// does for a batch with a bad CRC.
void ShowRejectedBatch(const std::string& path, uint64_t position, const DecodeLimits& limits,
                       Printer* p) {
  auto opened = OpenRegularFileAt(AT_FDCWD, path, O_RDONLY);
  if (!opened) return;
  UniqueFd fd = std::move(*opened);
  std::byte header[61];
  ssize_t n = ::pread(fd.get(), header, sizeof header, static_cast<off_t>(position));
  if (n != static_cast<ssize_t>(sizeof header)) return;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < position) return;
  uint64_t left = static_cast<uint64_t>(st.st_size) - position;
  BatchHeader h = DecodeBatchHeader(Bytes(header, sizeof header));
  if (h.magic != 2 || h.batch_length < 49 || h.size_bytes() > left ||
      h.size_bytes() > limits.max_batch_bytes) {
    return;
  }
  p->Batch(path, position, h, false);
}

int DumpRecords(const std::string& path, uint64_t pos, const BatchView& batch,
                const DecodeLimits& limits, std::vector<std::byte>* scratch, OffsetGaps* gaps,
                Printer* p) {
  const BatchHeader& h = batch.header();
  auto reader = RecordReader::Open(batch, scratch, limits, path, pos);
  if (!reader) {
    const Status& s = reader.error();
    if (s.code() != Code::kCorruption && s.code() != Code::kTooLarge) return Stop(p, s);
    p->Problem(ProblemFromStatus(s, path, pos));
    return cli::kExitDataErr;
  }
  int rc = 0;
  while (!p->broken()) {
    auto next = reader->Next();
    if (!next) {
      p->Problem(ProblemFromStatus(next.error(), path, pos));
      return cli::kExitDataErr;
    }
    if (!next->has_value()) break;
    const RecordView& r = **next;
    gaps->See(r.offset);
    if (!h.is_control()) {
      p->Record(path, pos, h, r, nullptr);
      continue;
    }
    auto control = DecodeControlRecord(r, path, pos);
    if (!control) {
      p->Problem(ProblemFromStatus(control.error(), path, pos));
      Merge(&rc, cli::kExitDataErr);
      continue;
    }
    p->Record(path, pos, h, r, &*control);
  }
  return rc;
}

int DumpLog(const std::string& path, const PrintOptions& o, const DecodeLimits& limits,
            Printer* p) {
  auto scanner = SegmentScanner::Open(path, limits);
  if (!scanner) return Stop(p, scanner.error());
  p->FileStart(path, FileKind::kLog, BaseOffsetOf(path));
  int rc = 0;
  std::vector<std::byte> scratch;
  OffsetGaps gaps;
  uint64_t last_error_position = UINT64_MAX;
  while (!p->broken()) {
    auto next = (*scanner)->Next();
    if (!next) {
      const Status& s = next.error();
      if (s.code() != Code::kCorruption && s.code() != Code::kTooLarge) return Stop(p, s);
      mq::Problem problem = ProblemFromStatus(s, path, (*scanner)->position());
      // The scanner moves past every error; a repeat means it did not.
      if (problem.position == last_error_position) return Stop(p, s);
      last_error_position = problem.position;
      ShowRejectedBatch(path, problem.position, limits, p);
      p->Problem(problem);
      Merge(&rc, cli::kExitDataErr);
      continue;
    }
    if (!next->has_value()) break;
    const BatchView& batch = **next;
    uint64_t pos = (*scanner)->position();
    p->Batch(path, pos, batch.header(), true);
    if (o.records) Merge(&rc, DumpRecords(path, pos, batch, limits, &scratch, &gaps, p));
  }
  if (p->broken()) return rc;
  if (uint64_t trailing = (*scanner)->trailing_bytes(); trailing > 0) {
    p->TrailingBytes(path, (*scanner)->file_size() - trailing, trailing);
    Merge(&rc, cli::kExitDataErr);
  }
  gaps.Print(p, path);
  return rc;
}

// Reads an index file; a broken size rule is a problem, anything else stops.
template <typename Entry>
int DumpIndexFile(const std::string& path, FileKind kind,
                  Result<std::vector<Entry>> (*read)(const std::string&), Printer* p,
                  void (Printer::*print)(const std::string&, const Entry&)) {
  auto entries = read(path);
  if (!entries && entries.error().code() != Code::kCorruption) return Stop(p, entries.error());
  auto base = BaseOffsetOf(path);
  p->FileStart(path, kind, base);
  if (!entries) {
    p->Problem(ProblemFromStatus(entries.error(), path, 0));
    return cli::kExitDataErr;
  }
  if (entries->empty()) p->IndexEmpty(path);
  for (size_t i = 0; i < entries->size() && !p->broken(); ++i) {
    // A preallocated index not trimmed after a crash ends in zero entries,
    // which read as the base offset; kafka-dump-log stops there too.
    if (i > 0 && base && (*entries)[i].offset == *base) break;
    (p->*print)(path, (*entries)[i]);
  }
  return 0;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A group's offsets file (format-spec/group.md §14.2) is named `offsets`.
bool IsGroupOffsets(const std::string& path) { return BaseName(path) == kGroupOffsetsFile; }

// A static member's lease (format-spec/group.md §14.5, R65) is named
// `<member>.lease`.
bool IsMemberLease(const std::string& path) {
  const std::string name = BaseName(path);
  return name.size() > kMemberLeaseSuffix.size() && name.ends_with(kMemberLeaseSuffix);
}

// A running member's heartbeat (R69) is named `<member>.alive`.
bool IsMemberHeartbeat(const std::string& path) {
  const std::string name = BaseName(path);
  return name.size() > kMemberHeartbeatSuffix.size() && name.ends_with(kMemberHeartbeatSuffix);
}

// Dumps a member's lease (R65) or heartbeat (R69) as a group offsets file
// is: one that breaks its rule (or has a newer version) is a problem of
// the data; anything else stops.
template <typename T>
int DumpMemberFile(const std::string& path, FileKind kind, Result<T> (*read)(const std::string&),
                   void (Printer::*print)(const std::string&, const T&), Printer* p) {
  auto file = read(path);
  if (!file && file.error().code() != Code::kCorruption &&
      file.error().code() != Code::kUnsupported)
    return Stop(p, file.error());
  p->FileStart(path, kind, std::nullopt);
  if (!file) {
    p->Problem(ProblemFromStatus(file.error(), path, 0));
    return cli::kExitDataErr;
  }
  (p->*print)(path, *file);
  return 0;
}

// Reads a group offsets file: a broken R29/R30 (or a newer version) is a
// problem of the data; anything else stops.
int DumpGroupOffsets(const std::string& path, Printer* p) {
  auto state = ReadGroupOffsetsFile(path);
  if (!state && state.error().code() != Code::kCorruption &&
      state.error().code() != Code::kUnsupported)
    return Stop(p, state.error());
  p->FileStart(path, FileKind::kGroupOffsets, std::nullopt);
  if (!state) {
    p->Problem(ProblemFromStatus(state.error(), path, 0));
    return cli::kExitDataErr;
  }
  p->GroupOffsetsHeader(path, *state);
  for (const auto& e : state->offsets) {
    if (p->broken()) break;
    p->GroupOffset(path, e);
  }
  return 0;
}

// Replica checkpoints (format-spec/replication.md §16) by their names.
bool IsLeaderEpochCheckpoint(const std::string& path) {
  return BaseName(path) == kLeaderEpochCheckpointFile;
}
// The high watermark: an older mq's checkpoint, or `high-watermark` (R61).
bool IsReplicationOffsetCheckpoint(const std::string& path) {
  return BaseName(path) == kReplicationOffsetCheckpointFile || BaseName(path) == kHighWatermarkFile;
}
bool IsHighWatermarkFile(const std::string& path) { return BaseName(path) == kHighWatermarkFile; }

// Either high-watermark file by path: its entry (none: an empty file).
Result<std::optional<HighWatermarkEntry>> ReadHighWatermarkByPath(const std::string& path) {
  if (!IsHighWatermarkFile(path)) return ReadReplicationOffsetCheckpointFile(path);
  auto read = ReadHighWatermarkFileByPath(path);
  if (!read) return read.error();
  return std::move(read->entry);
}

// Dumps a replica checkpoint: a broken R35-R38 is a problem of the data;
// anything else (missing, I/O, a symlink) stops.
int DumpCheckpoint(const std::string& path, Printer* p) {
  const bool epochs = IsLeaderEpochCheckpoint(path);
  const FileKind kind =
      epochs ? FileKind::kLeaderEpochCheckpoint : FileKind::kReplicationOffsetCheckpoint;
  Status error;
  std::optional<LeaderEpochCache> cache;
  std::optional<HighWatermarkEntry> hw;
  if (epochs) {
    auto c = ReadLeaderEpochCheckpointFile(path);
    if (c)
      cache = std::move(*c);
    else
      error = c.error();
  } else {
    auto h = ReadHighWatermarkByPath(path);
    if (h)
      hw = std::move(*h);
    else
      error = h.error();
  }
  if (!error.ok() && error.code() != Code::kCorruption) return Stop(p, error);
  p->FileStart(path, kind, std::nullopt);
  if (!error.ok()) {
    p->Problem(ProblemFromStatus(error, path, 0));
    return cli::kExitDataErr;
  }
  // `high-watermark` is binary (R61): its entry only, no checkpoint header.
  if (!IsHighWatermarkFile(path))
    p->CheckpointHeader(path, kind, epochs ? cache->entries().size() : hw ? 1 : 0);
  if (epochs) {
    for (const auto& e : cache->entries()) {
      if (p->broken()) break;
      p->LeaderEpochEntry(path, e);
    }
  } else if (hw) {
    p->ReplicationOffset(path, *hw);
  }
  return 0;
}

}  // namespace

int DumpFile(const std::string& path, const PrintOptions& options, const DecodeLimits& limits,
             Printer* printer) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Stop(printer, ErrnoStatus(path, errno));
  if (S_ISDIR(st.st_mode)) {
    return Stop(printer, Status(Code::kInvalidArgument,
                                fmt::format("{}: is a directory (dump names segment files; "
                                            "--verify takes a partition directory)",
                                            path)));
  }
  if (EndsWith(path, ".log")) return DumpLog(path, options, limits, printer);
  if (IsGroupOffsets(path)) return DumpGroupOffsets(path, printer);
  if (IsMemberLease(path))
    return DumpMemberFile<MemberLease>(path, FileKind::kMemberLease, &ReadMemberLeaseFile,
                                       &Printer::MemberLease, printer);
  if (IsMemberHeartbeat(path))
    return DumpMemberFile<MemberHeartbeat>(path, FileKind::kMemberHeartbeat,
                                           &ReadMemberHeartbeatFile, &Printer::MemberHeartbeat,
                                           printer);
  if (IsLeaderEpochCheckpoint(path) || IsReplicationOffsetCheckpoint(path))
    return DumpCheckpoint(path, printer);
  if (EndsWith(path, ".index")) {
    return DumpIndexFile<OffsetIndexEntry>(path, FileKind::kIndex, &ReadOffsetIndexFile, printer,
                                           &Printer::IndexEntry);
  }
  if (EndsWith(path, ".timeindex")) {
    return DumpIndexFile<TimeIndexEntry>(path, FileKind::kTimeIndex, &ReadTimeIndexFile, printer,
                                         &Printer::TimeIndexEntry);
  }
  return Stop(printer, Status(Code::kInvalidArgument,
                              fmt::format("{}: unknown file type (expected .log, .index, "
                                          ".timeindex, a group's offsets, a member's .lease or "
                                          ".alive, {}, {} or {})",
                                          path, kLeaderEpochCheckpointFile, kHighWatermarkFile,
                                          kReplicationOffsetCheckpointFile)));
}

namespace {

// The data directory, topic and partition a path names, when it is (or is
// inside) `<data>/<topic>-<n>` of a data directory holding that topic.
struct PartitionOf {
  std::string data;
  std::string topic;
  TopicConfig config;
};

std::optional<PartitionOf> FindPartitionOf(const std::string& path) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  if (!S_ISDIR(st.st_mode)) {
    size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
  }
  if (dir == ".") {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return std::nullopt;
    dir = cwd;
  }
  const size_t slash = dir.find_last_of('/');
  const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : dir.substr(0, slash);
  const size_t dash = name.find_last_of('-');
  if (dash == std::string::npos || dash + 1 == name.size() ||
      name.find_first_not_of("0123456789", dash + 1) != std::string::npos) {
    return std::nullopt;
  }
  const std::string topic = name.substr(0, dash);
  if (!ValidateName(topic, "topic").ok()) return std::nullopt;
  auto data = DataDir::Open(parent, false);
  if (!data) return std::nullopt;
  auto config = data->ReadTopic(topic);
  if (!config) return std::nullopt;
  return PartitionOf{parent, topic, *config};
}

OffsetPolicy PolicyOf(const TopicConfig& config) {
  return config.cleanup_policy == CleanupPolicy::kDelete ? OffsetPolicy::kContiguous
                                                         : OffsetPolicy::kGapsAllowed;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Collects problems and evidence over every part a path names.
class Verification final : public DataDirVisitor {
 public:
  Verification(const DecodeLimits& limits, Printer* printer) : limits_(limits), printer_(printer) {}

  // A partition directory: the rules of its topic when known.
  Status Partition(const std::string& dir, const std::optional<TopicConfig>& config) {
    summary_.directory = true;
    ++summary_.partitions;
    if (!HasSegments(dir) && !Exists(dir + "/" + "state") &&
        !Exists(dir + "/" + kLeaderEpochCheckpointFile) &&
        !Exists(dir + "/" + kReplicationOffsetCheckpointFile) &&
        !Exists(dir + "/" + kHighWatermarkFile)) {
      ++summary_.empty_partitions;  // counted, and said in the summary
      return Status::Ok();
    }
    DecodeLimits limits = config ? DataDir::DecodeLimitsFor(*config, limits_) : limits_;
    OffsetPolicy policy = config ? PolicyOf(*config) : OffsetPolicy::kGapsAllowed;
    std::vector<mq::Problem> problems;
    Status s = VerifyPartition(dir, limits, &problems, policy, &summary_.stats);
    for (auto& p : problems) Report(std::move(p));
    return s;
  }

  // A data directory: meta.properties, every topic's configuration and
  // every partition of every topic; directories no topic owns are noted
  // (VerifyDataDir walks it).
  Status Data(const std::string& path) {
    summary_.directory = true;
    return VerifyDataDir(path, this);
  }

  // What VerifyDataDir hands over.
  void Corrupt(const Status& status, const std::string& file) override {
    Report(ProblemFromStatus(status, file, 0));
  }
  void MetaProperties() override { summary_.stats.files += 1; }  // read by DataDir::Open
  void Topic(const std::string&, const TopicConfig* config) override {
    ++summary_.topics;
    if (config) summary_.stats.files += 1;
  }
  Status Partition(const std::string& dir, const TopicConfig& config) override {
    return Partition(dir, std::optional<TopicConfig>(config));
  }
  void AbsentPartition(const std::string&) override {
    ++summary_.partitions;
    ++summary_.empty_partitions;
  }
  Status MemberLease(const std::string& path) override { return LeaseFile(path); }
  Status MemberHeartbeat(const std::string& path) override { return HeartbeatFile(path); }
  Status GroupOffsets(const std::string& path) override { return GroupFile(path); }
  void GroupWithoutOffsets(const std::string&) override { ++summary_.groups; }
  void Note(const mq::Problem& note) override { Report(note); }

  // A replica checkpoint file (R35-R38).
  Status CheckpointFile(const std::string& path) {
    Status s = IsLeaderEpochCheckpoint(path) ? ReadLeaderEpochCheckpointFile(path).status()
                                             : ReadHighWatermarkByPath(path).status();
    if (!s.ok() && s.code() != Code::kCorruption) return s;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      ++summary_.stats.files;
      summary_.stats.bytes += static_cast<uint64_t>(st.st_size);
    }
    if (!s.ok()) Report(ProblemFromStatus(s, path, 0));
    return Status::Ok();
  }

  // A group's offsets file (R29, R30).
  Status GroupFile(const std::string& path) {
    ++summary_.groups;
    auto state = ReadGroupOffsetsFile(path);
    if (!state && state.error().code() != Code::kCorruption &&
        state.error().code() != Code::kUnsupported)
      return state.error();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      ++summary_.stats.files;
      summary_.stats.bytes += static_cast<uint64_t>(st.st_size);
    }
    if (!state) Report(ProblemFromStatus(state.error(), path, 0));
    return Status::Ok();
  }

  // A static member's lease (R65).
  Status LeaseFile(const std::string& path) {
    auto lease = ReadMemberLeaseFile(path);
    if (!lease && lease.error().code() != Code::kCorruption &&
        lease.error().code() != Code::kUnsupported)
      return lease.error();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      ++summary_.stats.files;
      summary_.stats.bytes += static_cast<uint64_t>(st.st_size);
    }
    if (!lease) Report(ProblemFromStatus(lease.error(), path, 0));
    return Status::Ok();
  }

  // A running member's heartbeat (R69). One that is gone (its member left
  // since the directory was listed) is passed over.
  Status HeartbeatFile(const std::string& path) {
    auto hb = ReadMemberHeartbeatFile(path);
    if (!hb && hb.error().code() == Code::kNotFound) return Status::Ok();
    if (!hb && hb.error().code() != Code::kCorruption && hb.error().code() != Code::kUnsupported)
      return hb.error();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      ++summary_.stats.files;
      summary_.stats.bytes += static_cast<uint64_t>(st.st_size);
    }
    if (!hb) Report(ProblemFromStatus(hb.error(), path, 0));
    return Status::Ok();
  }

  Status File(const std::string& path) {
    std::vector<mq::Problem> problems;
    Status s = VerifyFile(path, LimitsForPath(path, limits_), &problems, &summary_.stats);
    for (auto& p : problems) Report(std::move(p));
    return s;
  }

  int Finish(const std::string& path, const Status& s) {
    if (!s.ok()) return Stop(printer_, s);
    if (corrupt_) return cli::kExitDataErr;
    // R28: a legal crash state that the next writer repairs.
    if (needs_recovery_) return cli::kExitTempFail;
    printer_->Clean(path, summary_);  // notes (R27) do not make a partition unclean
    return 0;
  }

 private:
  void Report(mq::Problem p) {
    corrupt_ |= p.kind == mq::Problem::Kind::kCorruption;
    needs_recovery_ |= p.kind == mq::Problem::Kind::kNeedsRecovery;
    TrimDetail(&p);
    printer_->Problem(p);
  }

  DecodeLimits limits_;
  Printer* printer_;
  VerifySummary summary_;
  bool corrupt_ = false, needs_recovery_ = false;
};

}  // namespace

// --verify of `path` naming a topic or TOPIC-N of data directory
// `data_dir`: each partition (or partition N).
int VerifyTopic(const std::string& path, const std::string& data_dir, Verification& v,
                Printer* printer) {
  auto data = DataDir::Open(data_dir, false);
  if (!data) return Stop(printer, data.error());
  std::string topic = path;
  std::optional<int32_t> only;
  auto config = data->ReadTopic(topic);
  size_t dash = path.find_last_of('-');
  if (!config && config.error().code() == Code::kNotFound && dash != std::string::npos &&
      dash + 1 < path.size() &&
      path.find_first_not_of("0123456789", dash + 1) == std::string::npos &&
      path.size() - dash <= 6) {
    topic = path.substr(0, dash);
    only = std::stoi(path.substr(dash + 1));
    config = data->ReadTopic(topic);
  }
  if (!config) return Stop(printer, config.error());
  if (only && *only >= config->partitions) {
    return Stop(printer,
                Status(Code::kInvalidArgument, fmt::format("{}: topic {} has {} partition(s)", path,
                                                           topic, config->partitions)));
  }
  Status s;
  for (int32_t p = only.value_or(0); s.ok() && p < (only ? *only + 1 : config->partitions); ++p)
    s = v.Partition(data->PartitionDir(topic, p), *config);
  return v.Finish(path, s);
}

int VerifyPath(const std::string& path, const DecodeLimits& limits, Printer* printer,
               const std::optional<std::string>& data_dir) {
  Verification v(limits, printer);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    // Not a path: a topic or topic-N of the data directory (-C, MQ_DIR).
    if (err == ENOENT && data_dir && path.find('/') == std::string::npos) {
      return VerifyTopic(path, *data_dir, v, printer);
    }
    return Stop(printer, ErrnoStatus(path, err));
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    return Stop(printer,
                Status(Code::kPermission, path + ": not a directory or a regular file; refused"));
  }
  auto usage = [&] {
    return Stop(printer, Status(Code::kInvalidArgument,
                                fmt::format("{}: --verify takes a data directory, a partition "
                                            "directory, a segment file (.log, .index, "
                                            ".timeindex), a group's offsets file, a static "
                                            "member's lease, a member's heartbeat, a replica "
                                            "checkpoint, or with -C "
                                            "DIR a topic or TOPIC-N",
                                            path)));
  };
  if (S_ISREG(st.st_mode)) {
    if (IsGroupOffsets(path)) return v.Finish(path, v.GroupFile(path));
    if (IsMemberLease(path)) return v.Finish(path, v.LeaseFile(path));
    if (IsMemberHeartbeat(path)) return v.Finish(path, v.HeartbeatFile(path));
    if (IsLeaderEpochCheckpoint(path) || IsReplicationOffsetCheckpoint(path))
      return v.Finish(path, v.CheckpointFile(path));
    if (!EndsWith(path, ".log") && !EndsWith(path, ".index") && !EndsWith(path, ".timeindex"))
      return usage();
    return v.Finish(path, v.File(path));
  }
  if (Exists(path + "/meta.properties")) return v.Finish(path, v.Data(path));
  auto owner = FindPartitionOf(path);
  if (owner) return v.Finish(path, v.Partition(path, owner->config));
  // A partition directory outside a data directory (copied off a host, or
  // Kafka's): checked by the rules that hold for every log.
  if (HasSegments(path) || Exists(path + "/state"))
    return v.Finish(path, v.Partition(path, std::nullopt));
  return usage();
}

DecodeLimits LimitsForPath(const std::string& path, const DecodeLimits& limits) {
  auto owner = FindPartitionOf(path);
  return owner ? DataDir::DecodeLimitsFor(owner->config, limits) : limits;
}

}  // namespace mq::inspect
