// Partition file names (R12) and the directory listing.
#include "storage/segment.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "format/format.h"
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

Result<std::vector<int64_t>> ListSegments(int dir_fd, FileSystem* fs,
                                          std::vector<int64_t>* snapshots,
                                          PartitionListing* listing) {
  if (snapshots) snapshots->clear();
  if (listing) *listing = PartitionListing{};
  auto names = ListNames(dir_fd, {}, fs);
  if (!names) return names.error();
  std::vector<int64_t> bases;
  for (const std::string& name : *names) {
    if (listing) {
      if (name == format::kTruncateIntentName) listing->truncate_intent = true;
      if (name == format::kLeaderEpochCheckpointName) listing->epoch_checkpoint = true;
    }
    if (snapshots) {
      const int64_t off = NumberedFileOffset(name, format::kSnapshotSuffix);
      if (off >= 0) snapshots->push_back(off);
    }
    if (name.size() != format::kSegmentNameDigits + std::strlen(format::kLogSuffix)) continue;
    if (name.compare(format::kSegmentNameDigits, std::string::npos, format::kLogSuffix) != 0)
      continue;
    auto base = SegmentBaseOffset(name);
    if (base) bases.push_back(*base);
  }
  std::sort(bases.begin(), bases.end());
  if (snapshots) std::sort(snapshots->begin(), snapshots->end());
  return bases;
}

}  // namespace mq
