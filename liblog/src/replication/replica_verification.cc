// Cross-replica verification (mq/replica_verification.h, R57).
#include "mq/replica_verification.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"

namespace mq {
namespace {

std::string RootOf(const std::string& partition_dir) {
  const size_t slash = partition_dir.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? partition_dir : partition_dir.substr(0, slash);
}

// The reader's position with its file as a path (a reader names the
// segment's file within the partition directory).
LogPosition InDir(const std::string& dir, LogPosition p) {
  if (!p.file.empty() && p.file[0] != '/') p.file = dir + "/" + p.file;
  return p;
}

// A reader's corruption status with its file as a path, as the
// comparison's own statuses name theirs.
Status InDir(const std::string& dir, const Status& s) {
  if (s.code() != Code::kCorruption || s.file().empty() || s.file()[0] == '/') return s;
  const std::string prefix = fmt::format("{}: position {}: {}: ", s.file(), s.position(), s.rule());
  std::string what = s.message();
  if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
  return Status::Corruption(dir + "/" + s.file(), s.position(), s.rule(), what);
}

std::string Describe(const BatchHeader& h) {
  return fmt::format("batch {}-{} of leader epoch {} ({} bytes, CRC {:08x})", h.base_offset,
                     h.last_offset(), h.partition_leader_epoch, h.size_bytes(), h.crc);
}

// The first of R57's fields in which batch `f` differs from `r`; nullptr
// when the two are the same bytes.
const char* Difference(const BatchView& r, const BatchView& f) {
  const BatchHeader &a = r.header(), &b = f.header();
  if (a.base_offset != b.base_offset) return "base offset";
  if (a.last_offset() != b.last_offset()) return "last offset";
  if (a.partition_leader_epoch != b.partition_leader_epoch) return "partition leader epoch";
  if (a.crc != b.crc) return "CRC";
  if (r.bytes().size() != f.bytes().size() ||
      std::memcmp(r.bytes().data(), f.bytes().data(), r.bytes().size()) != 0)
    return "bytes";
  return nullptr;
}

struct Follower {
  ReplicaAgreement* out = nullptr;
  ReplicaLogSource* reader = nullptr;
  int64_t start = 0;  // the greater log start of it and the reference
  bool done = false;
  // Where its next batch would be: after the last one it returned.
  LogPosition next;
};

class LocalReplica : public ReplicaLogSource {
 public:
  LocalReplica(std::string dir, std::unique_ptr<PartitionReader> reader)
      : dir_(std::move(dir)), reader_(std::move(reader)) {}
  int64_t log_start_offset() override { return reader_->log_start_offset(); }
  int64_t log_end_offset() override { return reader_->end_offset(); }
  Result<int64_t> HighWatermark() override {
    auto names = PartitionOfDirectory(dir_);
    if (!names)
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: not a partition directory (<topic>-<partition>)", dir_));
    auto dfd = OpenDirectory(dir_, false);
    if (!dfd) return dfd.error();
    return LoadHighWatermarkWithin(dfd->get(), names->first, names->second, log_end_offset());
  }
  Status Seek(int64_t offset) override { return reader_->Seek(offset); }
  Result<std::optional<BatchView>> Next() override {
    auto b = reader_->Next();
    if (!b) return InDir(dir_, b.error());
    return b;
  }
  LogPosition position() const override { return InDir(dir_, reader_->position()); }

 private:
  std::string dir_;
  std::unique_ptr<PartitionReader> reader_;
};

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A corruption status with its file as a name in the partition directory
// (what ReadLog carries, R63).
Status WithFileName(const Status& s) {
  if (s.code() != Code::kCorruption || s.file().empty()) return s;
  const std::string prefix = fmt::format("{}: position {}: {}: ", s.file(), s.position(), s.rule());
  std::string what = s.message();
  if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
  return Status::Corruption(BaseName(s.file()), s.position(), s.rule(), what);
}

}  // namespace

Result<std::unique_ptr<ReplicaLogSource>> OpenLocalReplica(const std::string& dir,
                                                           const DecodeLimits& limits) {
  ReadOptions o;
  o.limits = limits;
  o.offsets = OffsetPolicy::kGapsAllowed;  // R10, R11; comparison finds any other gap
  auto reader = PartitionReader::Open(dir, o);
  if (!reader) return reader.error();
  return std::unique_ptr<ReplicaLogSource>(std::make_unique<LocalReplica>(dir, std::move(*reader)));
}

Result<LogChunk> LogChunkReader::Read(int64_t offset, uint32_t max_bytes) {
  ReplicaLogSource& src = *source_;
  LogChunk c;
  c.log_start_offset = src.log_start_offset();
  c.log_end_offset = src.log_end_offset();
  if (offset < 0) {
    auto hw = src.HighWatermark();
    if (hw)
      c.high_watermark = *hw;
    else if (hw.error().code() == Code::kCorruption)
      c.stop = WithFileName(hw.error());
    else if (hw.error().code() != Code::kNotFound)
      return hw.error();
    return c;
  }
  if (offset != next_) {
    held_.clear();
    next_ = -1;
    MQ_RETURN_IF_ERROR(src.Seek(offset));
  }
  for (;;) {
    if (held_.empty()) {
      auto b = src.Next();
      if (!b) {
        if (b.error().code() != Code::kCorruption) return b.error();
        c.stop = WithFileName(b.error());
        next_ = -1;  // a read after it seeks again
        return c;
      }
      if (!*b) break;
      held_.assign((*b)->bytes().begin(), (*b)->bytes().end());
      held_at_ = src.position();
      held_next_ = (*b)->header().last_offset() + 1;
    }
    const std::string file = BaseName(held_at_.file);
    if (!c.batches.empty() &&
        (file != c.file || c.batches.size() + held_.size() > static_cast<size_t>(max_bytes)))
      break;
    if (c.batches.empty()) {
      c.file = file;
      c.position = held_at_.position;
    }
    c.batches.insert(c.batches.end(), held_.begin(), held_.end());
    held_.clear();
    next_ = held_next_;
    if (c.batches.size() >= max_bytes) break;
  }
  return c;
}

Result<ReplicaComparison> CompareReplicas(const std::vector<ReplicaDir>& replicas,
                                          size_t reference_index, const DecodeLimits& limits) {
  if (reference_index >= replicas.size())
    return Status(Code::kInvalidArgument, "no reference replica to compare with");
  const ReplicaDir& ref = replicas[reference_index];
  if (!PartitionOfDirectory(ref.dir))
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: not a partition directory (<topic>-<partition>)", ref.dir));
  std::vector<ReplicaToCompare> logs(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    logs[i].id = replicas[i].id;
    logs[i].dir = replicas[i].dir;
    auto source = OpenLocalReplica(replicas[i].dir, limits);
    if (!source && i == reference_index) return source.error();
    if (source)
      logs[i].source = std::move(*source);
    else
      logs[i].open_error = source.error();
  }
  return CompareReplicaLogs(logs, reference_index);
}

namespace {

// A follower's agreement row with its offsets, and its reader placed at the
// first offset both it and the reference hold; nullopt when it cannot be
// compared (its status then says why).
std::optional<Follower> StartFollower(ReplicaAgreement& a, ReplicaToCompare& r, int64_t hw,
                                      int64_t ref_start) {
  if (!r.source) {
    a.status = r.open_error;
    return std::nullopt;
  }
  Follower f;
  f.out = &a;
  f.reader = r.source.get();
  a.log_start_offset = f.reader->log_start_offset();
  a.log_end_offset = f.reader->log_end_offset();
  a.compared_to = std::min(hw, a.log_end_offset);
  a.behind = a.log_end_offset < hw;
  f.start = std::max(ref_start, a.log_start_offset);
  f.next = {a.dir, 0};
  f.done = f.start >= a.compared_to;
  if (!f.done) {
    if (Status s = f.reader->Seek(f.start); !s.ok()) {
      a.status = s;
      return std::nullopt;
    }
  }
  return f;
}

// The rows of the comparison, the reference's first, and the followers to
// read beside it.
std::vector<Follower> StartComparison(ReplicaComparison& c, std::vector<ReplicaToCompare>& replicas,
                                      size_t reference_index, int64_t hw, int64_t ref_start) {
  const ReplicaToCompare& ref = replicas[reference_index];
  ReplicaAgreement self;
  self.id = ref.id;
  self.dir = ref.dir;
  self.log_start_offset = ref_start;
  self.log_end_offset = c.reference_log_end;
  self.compared_to = std::min(hw, c.reference_log_end);
  c.replicas.reserve(replicas.size());
  c.replicas.push_back(self);
  std::vector<ReplicaToCompare*> others;
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (i == reference_index) continue;
    ReplicaAgreement a;
    a.id = replicas[i].id;
    a.dir = replicas[i].dir;
    c.replicas.push_back(std::move(a));
    others.push_back(&replicas[i]);
  }
  std::vector<Follower> followers;
  followers.reserve(replicas.size());
  for (size_t i = 1; i < c.replicas.size(); ++i) {
    auto f = StartFollower(c.replicas[i], *others[i - 1], hw, ref_start);
    if (f) followers.push_back(std::move(*f));
  }
  return followers;
}

// Reads the follower's batch beside the reference's batch `rb` (at `rp`)
// and compares the two (R57); a difference, or a batch missing, ends its
// comparison with that status.
void CompareFollowerBatch(Follower& f, const BatchView& rb, const LogPosition& rp,
                          const ReplicaToCompare& ref, const std::string& ref_root, int64_t hw) {
  if (f.done || rb.header().last_offset() < f.start) return;
  ReplicaAgreement& a = *f.out;
  if (rb.header().base_offset >= a.compared_to) {
    f.done = true;
    return;
  }
  auto fb = f.reader->Next();
  if (!fb) {
    a.status = fb.error();  // corruption in its own log, that rule
    f.done = true;
    return;
  }
  const std::string head = fmt::format(
      "replica {} (root {}) diverges from replica {} (root {}) below the high watermark {} "
      "at offset {}",
      a.id, RootOf(a.dir), ref.id, ref_root, hw, rb.header().base_offset);
  if (!*fb) {
    a.status = Status::Corruption(
        f.next.file, f.next.position, "R57",
        fmt::format("{}: it holds no batch there (its log ends at {}); replica {} holds {} "
                    "at {}: position {}",
                    head, a.log_end_offset, ref.id, Describe(rb.header()), rp.file, rp.position));
    f.done = true;
    return;
  }
  const BatchView& fv = **fb;
  const LogPosition fp = f.reader->position();
  if (const char* field = Difference(rb, fv)) {
    a.status = Status::Corruption(
        fp.file, fp.position, "R57",
        fmt::format("{}: the {} differs: it holds {}; replica {} holds {} at {}: position {}", head,
                    field, Describe(fv.header()), ref.id, Describe(rb.header()), rp.file,
                    rp.position));
    f.done = true;
    return;
  }
  ++a.batches;
  f.next = {fp.file, fp.position + fv.header().size_bytes()};
}

}  // namespace

Result<ReplicaComparison> CompareReplicaLogs(std::vector<ReplicaToCompare>& replicas,
                                             size_t reference_index) {
  if (reference_index >= replicas.size())
    return Status(Code::kInvalidArgument, "no reference replica to compare with");
  ReplicaToCompare& ref = replicas[reference_index];
  if (!ref.source) return ref.open_error;
  ReplicaLogSource& rr = *ref.source;
  ReplicaComparison c;
  c.reference = ref.id;
  c.reference_log_end = rr.log_end_offset();
  {
    auto hw = rr.HighWatermark();
    if (hw)
      c.high_watermark = *hw;
    else if (hw.error().code() != Code::kNotFound)
      return hw.error();
  }
  const int64_t hw = std::max<int64_t>(c.high_watermark, 0);
  const int64_t ref_start = rr.log_start_offset();
  std::vector<Follower> followers = StartComparison(c, replicas, reference_index, hw, ref_start);

  MQ_RETURN_IF_ERROR(rr.Seek(ref_start));
  const std::string ref_root = RootOf(ref.dir);
  // The reference is read up to the high watermark whatever the others
  // hold: corruption of its own there fails the comparison.
  for (;;) {
    auto batch = rr.Next();
    if (!batch) return batch.error();
    if (!*batch || (*batch)->header().base_offset >= hw) break;
    const BatchView& rb = **batch;
    const LogPosition rp = rr.position();
    ++c.replicas[0].batches;
    for (Follower& f : followers) CompareFollowerBatch(f, rb, rp, ref, ref_root, hw);
  }
  return c;
}

Result<PartitionState> ShrinkIsrOfDamaged(ClusterStore& store, const PartitionState& p,
                                          const std::map<int32_t, Status>& damaged) {
  PartitionState proposed = p;
  proposed.isr.clear();
  std::string reason;
  for (int32_t r : p.isr) {
    auto it = damaged.find(r);
    if (r == p.leader || it == damaged.end() || it->second.ok()) {
      proposed.isr.push_back(r);
      continue;
    }
    reason += fmt::format("{}replica {} fails verification ({})",
                          reason.empty() ? "shrink: " : "; ", r, it->second.message());
  }
  if (reason.empty()) return p;
  return store.AlterPartition(proposed, reason);
}

Status FirstDivergence(const ReplicaComparison& comparison) {
  for (const ReplicaAgreement& a : comparison.replicas)
    if (a.status.code() == Code::kCorruption) return a.status;
  return Status::Ok();
}

}  // namespace mq
