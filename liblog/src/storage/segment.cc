// Partition file names (R12) and the directory listing.
#include "storage/segment.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>

#include <fcntl.h>

#include <fmt/format.h>

#include "format/format.h"
#include "io/properties.h"
#include "mq/segment.h"

namespace mq {

int64_t NumberedFileOffset(const std::string& name, const char* suffix) {
  const size_t n = std::strlen(suffix);
  if (name.size() != format::kSegmentNameDigits + n ||
      name.compare(format::kSegmentNameDigits, std::string::npos, suffix) != 0)
    return -1;
  int64_t v = 0;
  for (int i = 0; i < format::kSegmentNameDigits; ++i) {
    const char c = name[static_cast<size_t>(i)];
    if (c < '0' || c > '9') return -1;
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

Result<int64_t> SegmentBaseOffset(const std::string& file_name) {
  // Only the last path component counts: mq-inspect passes paths.
  size_t slash = file_name.rfind('/');
  std::string name = slash == std::string::npos ? file_name : file_name.substr(slash + 1);
  auto bad = [&] {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: R12: not a segment file name (20 digits + .log, .index "
                              "or .timeindex)",
                              file_name));
  };
  if (name.size() < format::kSegmentNameDigits + 1) return bad();
  std::string suffix = name.substr(format::kSegmentNameDigits);
  if (suffix != format::kLogSuffix && suffix != format::kIndexSuffix &&
      suffix != format::kTimeIndexSuffix)
    return bad();
  uint64_t v = 0;
  for (int i = 0; i < format::kSegmentNameDigits; ++i) {
    char c = name[static_cast<size_t>(i)];
    if (c < '0' || c > '9') return bad();
    uint64_t next = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - 9) / 10 || next > static_cast<uint64_t>(INT64_MAX)) return bad();
    v = next;
  }
  return static_cast<int64_t>(v);
}

std::string SegmentFileName(int64_t base_offset, const char* suffix) {
  return fmt::format("{:020d}{}", base_offset, suffix);
}

bool IsTempName(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
}

bool PartitionListing::is_tiered(int64_t base) const {
  return std::binary_search(tiered.begin(), tiered.end(), base);
}

int PartitionListing::DirOf(int64_t base, int local_fd) const {
  return tier_fd.get() >= 0 && is_tiered(base) ? tier_fd.get() : local_fd;
}

namespace {

// The base offset of a `<20 digits>.log` name, or -1.
int64_t LogNameBase(const std::string& name) {
  return NumberedFileOffset(name, format::kLogSuffix);
}

Status BadPointer(int dir_fd, uint64_t position, const std::string& detail) {
  return Status::Corruption(PathAt(dir_fd, format::kTierPointerName), position, "R93", detail);
}

// R96: adds the segments of the tier directory that `dir_fd` does not hold
// to `bases` (kept sorted) and to `listing->tiered`.
Status ListTiered(int dir_fd, FileSystem* fs, std::vector<int64_t>* bases,
                  PartitionListing* listing) {
  auto pointer = ReadTierPointer(dir_fd, fs);
  if (!pointer) return pointer.error();
  if (!*pointer) return Status::Ok();
  auto tfd = fs->OpenDir(AT_FDCWD, **pointer, false);
  if (!tfd)
    return Status(Code::kUnavailable,
                  fmt::format("{}: R96: the tier directory it names cannot be opened (is the "
                              "tier's disk or mount there?): {}",
                              PathAt(dir_fd, format::kTierPointerName), tfd.error().message()));
  auto names = ListNames(tfd->get(), **pointer, fs);
  if (!names) return names.error();
  std::vector<int64_t> local = *bases;
  for (const std::string& name : *names) {
    const int64_t base = LogNameBase(name);
    if (base < 0 || std::binary_search(local.begin(), local.end(), base)) continue;
    listing->tiered.push_back(base);
    bases->push_back(base);
  }
  std::sort(listing->tiered.begin(), listing->tiered.end());
  std::sort(bases->begin(), bases->end());
  listing->tier_dir = **pointer;
  listing->tier_fd = std::move(*tfd);
  return Status::Ok();
}

}  // namespace

Result<std::optional<std::string>> ReadTierPointer(int dir_fd, FileSystem* fs) {
  auto bytes = ReadFileAt(dir_fd, format::kTierPointerName, format::kMaxTierPointerBytes, fs);
  if (!bytes) {
    if (bytes.error().code() == Code::kNotFound) return std::optional<std::string>();
    return bytes.error();
  }
  std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  std::optional<std::string> dir;
  MQ_RETURN_IF_ERROR(ForEachProperty(
      text, PathAt(dir_fd, format::kTierPointerName), "R93", [&](const PropertyLine& l) {
        if (l.key != format::kTierPointerKey || dir)
          return BadPointer(dir_fd, l.position,
                            fmt::format("line {}: unexpected key '{}'", l.line, l.key));
        if (l.value.empty() || l.value.front() != '/')
          return BadPointer(
              dir_fd, l.position,
              fmt::format("line {}: the tier directory must be an absolute path", l.line));
        dir = std::string(l.value);
        return Status::Ok();
      }));
  if (!dir) return BadPointer(dir_fd, 0, "no dir= line");
  return dir;
}

Result<std::vector<int64_t>> ListSegments(int dir_fd, FileSystem* fs,
                                          std::vector<int64_t>* snapshots,
                                          PartitionListing* listing) {
  if (fs == nullptr) fs = FileSystem::Default();
  if (snapshots) snapshots->clear();
  PartitionListing own;
  if (listing == nullptr) listing = &own;
  *listing = PartitionListing{};
  auto names = ListNames(dir_fd, {}, fs);
  if (!names) return names.error();
  std::vector<int64_t> bases;
  bool pointer = false;
  for (const std::string& name : *names) {
    if (name == format::kTruncateIntentName) listing->truncate_intent = true;
    if (name == format::kLeaderEpochCheckpointName) listing->epoch_checkpoint = true;
    if (name == format::kTierPointerName) pointer = true;
    if (snapshots) {
      const int64_t off = NumberedFileOffset(name, format::kSnapshotSuffix);
      if (off >= 0) snapshots->push_back(off);
    }
    const int64_t base = LogNameBase(name);
    if (base >= 0) bases.push_back(base);
  }
  std::sort(bases.begin(), bases.end());
  if (snapshots) std::sort(snapshots->begin(), snapshots->end());
  if (pointer) MQ_RETURN_IF_ERROR(ListTiered(dir_fd, fs, &bases, listing));
  return bases;
}

}  // namespace mq
