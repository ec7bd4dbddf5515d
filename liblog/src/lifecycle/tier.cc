// Tiered segments (format-spec/retention.md §21, R93-R97): the plan, the
// pointer and the crash-safe move.
#include "mq/tier.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/batch.h"
#include "mq/segment.h"
#include "storage/log_segment.h"
#include "storage/segment.h"

namespace mq {

std::vector<RetentionSegment> PlanTier(const RetentionLog& log, const TierPolicy& policy) {
  std::vector<RetentionSegment> out;
  if (policy.tier_after_ms < 0) return out;
  const int64_t horizon = policy.now_ms - policy.tier_after_ms;
  const int64_t limit = log.high_watermark.value_or(std::numeric_limits<int64_t>::max());
  for (const RetentionSegment& s : log.segments) {
    if (s.active || s.tiered || s.end <= log.log_start_offset) continue;
    if (s.end > limit || s.clock_ms() >= horizon) continue;
    out.push_back(s);
  }
  return out;
}

int64_t TierAfterFor(const TopicConfig& topic, int64_t run_tier_after_ms) {
  return run_tier_after_ms >= 0 ? run_tier_after_ms : topic.tier_after_ms;
}

TierUsage UsageByTier(const RetentionLog& log) {
  TierUsage u;
  for (const RetentionSegment& s : log.segments) {
    const int t = s.tiered ? 1 : 0;
    ++u.segments[t];
    u.bytes[t] += s.bytes;
  }
  return u;
}

std::string TierPartitionDir(const std::string& tier_root, const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  std::string root = tier_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root + "/" + (slash == std::string::npos ? d : d.substr(slash + 1));
}

namespace {

// The files of segment `base`, the `.log` last (R94's publication order).
std::vector<std::string> PublishOrder(int64_t base) {
  return {SegmentFileName(base, format::kTimeIndexSuffix),
          SegmentFileName(base, format::kIndexSuffix), SegmentFileName(base, format::kLogSuffix)};
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A tier directory that already holds segments belongs to another
// partition (or another root's): R93 never shares one.
Status CheckUnclaimed(int tier_fd, const std::string& tier_dir, FileSystem* fs) {
  auto names = ListNames(tier_fd, tier_dir, fs);
  if (!names) return names.error();
  for (const std::string& n : *names)
    if (NumberedFileOffset(n, format::kLogSuffix) >= 0)
      return Status(Code::kInvalidArgument,
                    fmt::format("{}: R93: holds segments ({}) but no partition's tier pointer "
                                "names it; refusing to share it (give each data directory its "
                                "own --tier-dir)",
                                tier_dir, n));
  return Status::Ok();
}

Result<UniqueFd> OpenTierOf(int dir_fd, const std::string& dir, FileSystem* fs,
                            std::string* tier_dir) {
  auto pointer = ReadTierPointer(dir_fd, fs);
  if (!pointer) return pointer.error();
  if (!*pointer)
    return Status(Code::kNotFound, fmt::format("{}: R93: the partition has no tier pointer", dir));
  *tier_dir = **pointer;
  auto tfd = fs->OpenDir(AT_FDCWD, *tier_dir, false);
  if (!tfd)
    return Status(Code::kUnavailable, fmt::format("{}: R96: its tier directory {}: {}", dir,
                                                  *tier_dir, tfd.error().message()));
  return tfd;
}

}  // namespace

Status AttachTier(const std::string& dir, const std::string& tier_dir, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  if (tier_dir.empty() || tier_dir.front() != '/')
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: R93: the tier directory must be an absolute path", tier_dir));
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  auto pointer = ReadTierPointer(dfd->get(), fs);
  if (!pointer) return pointer.error();
  if (*pointer && **pointer == tier_dir) return Status::Ok();
  if (*pointer)
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: R93: its segments are tiered to {}, not {}; mq does not move "
                              "a tier",
                              dir, **pointer, tier_dir));
  const size_t slash = tier_dir.rfind('/');
  auto parent = fs->OpenDir(AT_FDCWD, slash == 0 ? "/" : tier_dir.substr(0, slash), false);
  if (!parent) return parent.error();
  auto tfd = OpenDirectoryAt(parent->get(), tier_dir.substr(slash + 1), true, fs);
  if (!tfd) return tfd.error();
  MQ_RETURN_IF_ERROR(CheckUnclaimed(tfd->get(), tier_dir, fs));
  MQ_RETURN_IF_ERROR(fs->SyncDir(parent->get()));
  const std::string text =
      fmt::format("# mq tier pointer (format-spec/retention.md section 21)\n{}={}\n",
                  format::kTierPointerKey, tier_dir);
  return WriteFileAtomic(dfd->get(), format::kTierPointerName, AsBytes(text), fs);
}

namespace {

// R94 step 1 for `name`: copied from `from_fd` to `<name>.tmp` in `to_fd`
// with the source's access and modification times (R97: retention by time
// judges a tiered segment as it judged the local one), and its writeback
// started (the caller fsyncs it: the flushes of a batch's copies overlap
// each other and the copies after them).
Result<std::unique_ptr<File>> CopyToTmp(int from_fd, int to_fd, const std::string& name,
                                        FileSystem* fs) {
  auto in = fs->Open(from_fd, name, FileSystem::kRead);
  if (!in) return in.error();
  auto info = (*in)->StatAtOpen();
  if (!info) return info.error();
  const std::string tmp = name + format::kTierCopySuffix;
  auto out = fs->Open(to_fd, tmp, FileSystem::kCreate);
  if (!out) return out.error();
  MQ_RETURN_IF_ERROR((*out)->Truncate(0));
  Status copied = CopyFileContents(**in, **out, info->size, fs);
  if (!copied.ok()) return Status(copied.code(), PathAt(from_fd, name) + ": " + copied.message());
  MQ_RETURN_IF_ERROR(fs->SetTimes((*out)->fd(), info->atime_ns, info->mtime_ns));
  // A hint: a failed writeback is reported by the fsync that follows.
  (void)fs->StartWriteback((*out)->fd());
  return std::move(*out);
}

}  // namespace

namespace {

// Segments moved together: the writeback of each copy starts when it is
// made, so the fsyncs of the batch's copies, one after another, wait for
// flushes that overlap; each directory is fsynced once for them all; a
// bound on the files held open.
constexpr size_t kMoveBatch = 16;

// R94 for `bases` (at most kMoveBatch): every copy written and fsynced,
// then every segment published (the tier directory fsynced once), then
// every local file unlinked (the partition directory fsynced once).
Status MoveBatch(int dfd, int tfd, std::span<const int64_t> bases, FileSystem* fs) {
  std::vector<std::string> names;
  for (int64_t base : bases)
    for (std::string& n : PublishOrder(base)) names.push_back(std::move(n));
  std::vector<std::unique_ptr<File>> copies;
  for (const std::string& n : names) {
    auto copy = CopyToTmp(dfd, tfd, n, fs);
    if (!copy) return copy.error();
    copies.push_back(std::move(*copy));
  }
  for (auto& c : copies) MQ_RETURN_IF_ERROR(c->Sync());
  copies.clear();
  for (const std::string& n : names)
    MQ_RETURN_IF_ERROR(fs->Rename(tfd, n + format::kTierCopySuffix, n));
  MQ_RETURN_IF_ERROR(fs->SyncDir(tfd));
  // From here the tier's copy is each segment once its local .log is gone.
  for (int64_t base : bases)
    for (const std::string& n : LogSegment::FileNames(base)) {  // the .log first
      Status st = fs->Unlink(dfd, n);
      if (!st.ok() && st.code() != Code::kNotFound) return st;
    }
  return fs->SyncDir(dfd);
}

}  // namespace

Status MoveToTier(const std::string& dir, std::span<const int64_t> bases, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  std::string tier_dir;
  auto tfd = OpenTierOf(dfd->get(), dir, fs, &tier_dir);
  if (!tfd) return tfd.error();
  for (size_t i = 0; i < bases.size(); i += kMoveBatch)
    MQ_RETURN_IF_ERROR(MoveBatch(dfd->get(), tfd->get(),
                                 bases.subspan(i, std::min(kMoveBatch, bases.size() - i)), fs));
  return Status::Ok();
}

Status MoveToTier(const std::string& dir, int64_t base, FileSystem* fs) {
  return MoveToTier(dir, std::span<const int64_t>(&base, 1), fs);
}

namespace {

// R94: `<segment file>.tmp` names in the tier directory: copies not
// published.
bool IsTierCopy(const std::string& name) {
  if (!EndsWith(name, format::kTierCopySuffix)) return false;
  const std::string file =
      name.substr(0, name.size() - std::string(format::kTierCopySuffix).size());
  return SegmentBaseOffset(file).has_value();
}

}  // namespace

Result<int> FinishTierMoves(const std::string& dir, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  auto pointer = ReadTierPointer(dfd->get(), fs);
  if (!pointer) return pointer.error();
  if (!*pointer) return 0;
  std::string tier_dir;
  auto tfd = OpenTierOf(dfd->get(), dir, fs, &tier_dir);
  if (!tfd) return tfd.error();
  auto tier_names = ListNames(tfd->get(), tier_dir, fs);
  if (!tier_names) return tier_names.error();
  auto local_names = ListNames(dfd->get(), dir, fs);
  if (!local_names) return local_names.error();
  std::sort(local_names->begin(), local_names->end());
  int removed[2] = {0, 0};  // [0] local, [1] tier
  for (const std::string& n : *tier_names) {
    if (IsTierCopy(n)) {
      MQ_RETURN_IF_ERROR(fs->Unlink(tfd->get(), n));
      ++removed[1];
      continue;
    }
    const int64_t base = NumberedFileOffset(n, format::kLogSuffix);
    if (base < 0) continue;
    // Published in the tier: the local files are leftovers (the .log first).
    for (const std::string& local : LogSegment::FileNames(base)) {
      if (!std::binary_search(local_names->begin(), local_names->end(), local)) continue;
      Status s = fs->Unlink(dfd->get(), local);
      if (!s.ok() && s.code() != Code::kNotFound) return s;
      ++removed[0];
    }
  }
  if (removed[1] > 0) MQ_RETURN_IF_ERROR(fs->SyncDir(tfd->get()));
  if (removed[0] > 0) MQ_RETURN_IF_ERROR(fs->SyncDir(dfd->get()));
  return removed[0] + removed[1];
}

Result<bool> HasTierPointer(const std::string& dir, FileSystem* fs) {
  if (fs == nullptr) fs = FileSystem::Default();
  auto dfd = OpenDirectory(dir, false, fs);
  if (!dfd) return dfd.error();
  auto f = fs->Open(dfd->get(), format::kTierPointerName, FileSystem::kRead);
  if (f) return true;
  if (f.error().code() == Code::kNotFound) return false;
  return f.error();
}

}  // namespace mq
