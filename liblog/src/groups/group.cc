// Consumer-group state (format-spec/group.md §14): the offsets file, its
// atomic read-modify-write under commit.lock, and the group's lock files.
#include "mq/group.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "mq/crc32c.h"
#include "mq/member_heartbeat.h"
#include "mq/member_lease.h"
#include "mq/member_note.h"
#include "mq/topic.h"

namespace mq {

// R30's last partition is the last one a topic may have (layout.md §2).
static_assert(kMaxGroupPartition + 1 == format::kMaxTopicPartitions);

using namespace coding;
using format::kGroupCommitLock;
using format::kGroupLock;
using format::kGroupMembersDir;
using format::kGroupOffsetEntryFixedSize;
using format::kGroupOffsetsHeaderSize;
using format::kGroupOffsetsImageBytesAt;
using format::kGroupOffsetsImageReservedAt;
using format::kGroupOffsetsInPlaceHeaderSize;
using format::kGroupOffsetsInPlaceVersion;
using format::kGroupOffsetsMagic;
using format::kGroupOffsetsSlotAlign;
using format::kGroupOffsetsStaging;
using format::kGroupOffsetsVersion;
using format::kGroupPartitionsDir;
using format::kGroupsDir;
using format::kMaxGroupOffsetsBytes;
using format::kMaxGroupOffsetsFileBytes;
using format::kOwnershipSlotSize;

namespace {

// §14.5 The bytes of partition p's slot its owner and its handlers lock.
constexpr uint64_t OwnershipLockByte(int32_t p) {
  return static_cast<uint64_t>(p) * kOwnershipSlotSize + format::kOwnershipLockOffset;
}
constexpr uint64_t HandlerLockByte(int32_t p) {
  return static_cast<uint64_t>(p) * kOwnershipSlotSize + format::kHandlerLockOffset;
}

// §14.2 header field positions.
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kReservedAt = 6;
constexpr size_t kCrcAt = 8;
constexpr size_t kCountAt = 12;
constexpr size_t kGenerationAt = 16;
constexpr size_t kUpdateTimestampAt = 24;
constexpr size_t kRebalancesAt = 32;
constexpr size_t kLastRebalanceAt = 40;
constexpr size_t kCrcFrom = 12;
static_assert(kLastRebalanceAt + 8 == kGroupOffsetsHeaderSize);
static_assert(2 + 4 + 8 + 4 + 8 + 8 + 2 == kGroupOffsetEntryFixedSize);

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ms since the epoch as an ISO 8601 UTC time, for messages.
std::string IsoMs(int64_t ms) {
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

bool EntryLess(const CommittedOffset& a, const CommittedOffset& b) {
  // Topic names are ASCII (R12): std::string order is byte order.
  if (a.topic != b.topic) return a.topic < b.topic;
  return a.partition < b.partition;
}

bool ValidMemberId(std::string_view id) { return id.empty() || ValidateName(id, "member id").ok(); }

std::byte* PutString(std::byte* p, const std::string& s) {
  PutFixed16(p, static_cast<uint16_t>(s.size()));
  std::memcpy(p + 2, s.data(), s.size());
  return p + 2 + s.size();
}

// Reads an int16-length-prefixed name at `*at` (R30); advances `*at`.
Result<std::string> GetName(std::span<const std::byte> b, size_t* at, const std::string& file,
                            const char* what, bool may_be_empty) {
  const size_t start = *at;
  if (b.size() - start < 2)
    return Status::Corruption(file, start, "R29",
                              fmt::format("the file ends inside an entry's {} length", what));
  const auto len = static_cast<int16_t>(GetFixed16(b.data() + start));
  if (len < (may_be_empty ? 0 : 1) || static_cast<size_t>(len) > kMaxNameLength)
    return Status::Corruption(file, start, "R30", fmt::format("{} length {}", what, len));
  if (b.size() - start - 2 < static_cast<size_t>(len))
    return Status::Corruption(file, start, "R29",
                              fmt::format("the file ends inside an entry's {}", what));
  std::string s(reinterpret_cast<const char*>(b.data() + start + 2), static_cast<size_t>(len));
  if (len > 0) {
    Status valid = ValidateName(s, what);
    if (!valid.ok()) return Status::Corruption(file, start + 2, "R30", valid.message());
  }
  *at = start + 2 + static_cast<size_t>(len);
  return s;
}

}  // namespace

const CommittedOffset* GroupOffsets::Find(std::string_view topic, int32_t partition) const {
  for (const auto& e : offsets)
    if (e.topic == topic && e.partition == partition) return &e;
  return nullptr;
}

int64_t GroupOffsets::dead_letters() const {
  int64_t sum = 0;
  for (const auto& e : offsets) sum += e.dead_letters;
  return sum;
}

namespace {

// An image of `state` (R29, R30) whose header takes `header_size` bytes:
// version 1's 48, or a copy of version 2's 56 (R86), its imageBytes set.
std::vector<std::byte> EncodeImage(const GroupOffsets& state, int16_t version, size_t header_size) {
  size_t size = header_size;
  for (const auto& e : state.offsets)
    size += kGroupOffsetEntryFixedSize + e.topic.size() + e.member_id.size();
  std::vector<std::byte> out(size);
  std::byte* b = out.data();
  PutFixed32(b + kMagicAt, kGroupOffsetsMagic);
  PutFixed16(b + kVersionAt, static_cast<uint16_t>(version));
  PutFixed16(b + kReservedAt, 0);
  PutFixed32(b + kCountAt, static_cast<uint32_t>(state.offsets.size()));
  PutFixed64(b + kGenerationAt, static_cast<uint64_t>(state.generation));
  PutFixed64(b + kUpdateTimestampAt, static_cast<uint64_t>(state.update_timestamp));
  PutFixed64(b + kRebalancesAt, static_cast<uint64_t>(state.rebalances));
  PutFixed64(b + kLastRebalanceAt, static_cast<uint64_t>(state.last_rebalance_timestamp));
  if (header_size == kGroupOffsetsInPlaceHeaderSize) {
    // A copy's size fits: R29 bounds an image by 64 MiB.
    PutFixed32(b + kGroupOffsetsImageBytesAt,
               static_cast<uint32_t>(std::min<size_t>(size, UINT32_MAX)));
    PutFixed32(b + kGroupOffsetsImageReservedAt, 0);
  }
  std::byte* p = b + header_size;
  for (const auto& e : state.offsets) {
    p = PutString(p, e.topic);
    PutFixed32(p, static_cast<uint32_t>(e.partition));
    PutFixed64(p + 4, static_cast<uint64_t>(e.offset));
    PutFixed32(p + 12, static_cast<uint32_t>(e.leader_epoch));
    PutFixed64(p + 16, static_cast<uint64_t>(e.commit_timestamp));
    PutFixed64(p + 24, static_cast<uint64_t>(e.dead_letters));
    p = PutString(p + 32, e.member_id);
  }
  PutFixed32(b + kCrcAt, Crc32c(std::span<const std::byte>(out).subspan(kCrcFrom)));
  return out;
}

}  // namespace

std::vector<std::byte> EncodeGroupOffsets(const GroupOffsets& state) {
  return EncodeImage(state, kGroupOffsetsVersion, kGroupOffsetsHeaderSize);
}

std::vector<std::byte> EncodeGroupOffsetsCopy(const GroupOffsets& state) {
  return EncodeImage(state, kGroupOffsetsInPlaceVersion, kGroupOffsetsInPlaceHeaderSize);
}

uint64_t GroupOffsetsSlotBytes(uint64_t image_bytes) {
  // Room to grow: twice the image, in whole pages, at most R29's bound.
  uint64_t slot = kGroupOffsetsSlotAlign;
  while (slot < 2 * image_bytes && slot < kMaxGroupOffsetsBytes) slot *= 2;
  return slot;
}

std::vector<std::byte> EncodeGroupOffsetsInPlace(std::span<const std::byte> copy, uint64_t slot) {
  std::vector<std::byte> out(static_cast<size_t>(2 * slot));
  std::memcpy(out.data(), copy.data(), std::min<size_t>(copy.size(), static_cast<size_t>(slot)));
  return out;
}

namespace {

// R29's frame of an offsets file: its size, magic, version, reserved field
// and CRC.
Status CheckGroupOffsetsFrame(std::span<const std::byte> b, const std::string& file) {
  if (b.size() > kMaxGroupOffsetsBytes)
    return Status::Corruption(
        file, kMaxGroupOffsetsBytes, "R29",
        fmt::format("{} bytes, more than the {} allowed", b.size(), kMaxGroupOffsetsBytes));
  if (b.size() < kGroupOffsetsHeaderSize)
    return Status::Corruption(file, b.size(), "R29",
                              fmt::format("{} bytes, shorter than the {}-byte header (truncated)",
                                          b.size(), kGroupOffsetsHeaderSize));
  const std::byte* h = b.data();
  if (uint32_t magic = GetFixed32(h + kMagicAt); magic != kGroupOffsetsMagic)
    return Status::Corruption(file, kMagicAt, "R29", fmt::format("bad magic {:#010x}", magic));
  const auto version = static_cast<int16_t>(GetFixed16(h + kVersionAt));
  if (version > kGroupOffsetsInPlaceVersion)
    return Status(
        Code::kUnsupported,
        fmt::format("{}: position {}: R29: unsupported version {} (this mq reads {} and {})", file,
                    kVersionAt, version, kGroupOffsetsVersion, kGroupOffsetsInPlaceVersion));
  if (version < 1)
    return Status::Corruption(file, kVersionAt, "R29", fmt::format("bad version {}", version));
  if (uint16_t reserved = GetFixed16(h + kReservedAt); reserved != 0)
    return Status::Corruption(file, kReservedAt, "R29",
                              fmt::format("reserved field {} is not 0", reserved));
  const uint32_t stored = GetFixed32(h + kCrcAt);
  const uint32_t computed = Crc32c(b.subspan(kCrcFrom));
  const auto count = static_cast<int32_t>(GetFixed32(h + kCountAt));
  if (stored != computed) {
    // The likeliest cause worth naming: a copy or write cut short.
    const uint64_t least =
        static_cast<uint64_t>(std::max(count, 0)) * (kGroupOffsetEntryFixedSize + 1);
    std::string why =
        least > b.size() - kGroupOffsetsHeaderSize
            ? fmt::format(" (truncated? {} entries cannot fit in {} bytes)", count, b.size())
            : "";
    return Status::Corruption(
        file, kCrcAt, "R29",
        fmt::format("crc {:#010x} stored, {:#010x} computed{}", stored, computed, why));
  }
  return Status::Ok();
}

// The header's fields (R29) of the image at `base` of `b` (which ends
// where the image does), its entries not yet read; `count`: how many
// entries follow its `header_size` bytes.
Result<GroupOffsets> DecodeGroupOffsetsHeader(std::span<const std::byte> b, const std::string& file,
                                              int32_t* count, size_t base = 0,
                                              size_t header_size = kGroupOffsetsHeaderSize) {
  const std::byte* h = b.data() + base;
  *count = static_cast<int32_t>(GetFixed32(h + kCountAt));
  GroupOffsets s;
  s.generation = static_cast<int64_t>(GetFixed64(h + kGenerationAt));
  s.update_timestamp = static_cast<int64_t>(GetFixed64(h + kUpdateTimestampAt));
  s.rebalances = static_cast<int64_t>(GetFixed64(h + kRebalancesAt));
  s.last_rebalance_timestamp = static_cast<int64_t>(GetFixed64(h + kLastRebalanceAt));
  if (*count < 0)
    return Status::Corruption(file, base + kCountAt, "R29", fmt::format("count {}", *count));
  if (static_cast<uint64_t>(*count) * (kGroupOffsetEntryFixedSize + 1) >
      b.size() - base - header_size)
    return Status::Corruption(
        file, base + kCountAt, "R29",
        fmt::format("count {} does not fit in the file's {} bytes", *count, b.size() - base));
  if (s.generation < 1)
    return Status::Corruption(file, base + kGenerationAt, "R29",
                              fmt::format("generation {}", s.generation));
  if (s.rebalances < 0)
    return Status::Corruption(file, base + kRebalancesAt, "R29",
                              fmt::format("rebalances {}", s.rebalances));
  if (s.last_rebalance_timestamp < kNoTimestamp)
    return Status::Corruption(
        file, base + kLastRebalanceAt, "R29",
        fmt::format("last rebalance timestamp {}", s.last_rebalance_timestamp));
  return s;
}

// Entry `i` at `*at` (R30), its fields in their ranges; `*at` moves past it.
Result<CommittedOffset> DecodeGroupOffsetEntry(std::span<const std::byte> b, size_t* at_io,
                                               const std::string& file, int32_t i) {
  size_t& at = *at_io;
  CommittedOffset e;
  auto topic = GetName(b, &at, file, "topic", false);
  if (!topic) return topic.error();
  e.topic = std::move(*topic);
  if (b.size() - at < kGroupOffsetEntryFixedSize - 4)
    return Status::Corruption(file, at, "R29", fmt::format("the file ends inside entry {}", i));
  const std::byte* p = b.data() + at;
  e.partition = static_cast<int32_t>(GetFixed32(p));
  e.offset = static_cast<int64_t>(GetFixed64(p + 4));
  e.leader_epoch = static_cast<int32_t>(GetFixed32(p + 12));
  e.commit_timestamp = static_cast<int64_t>(GetFixed64(p + 16));
  e.dead_letters = static_cast<int64_t>(GetFixed64(p + 24));
  if (e.partition < 0 || e.partition > kMaxGroupPartition)
    return Status::Corruption(file, at, "R30",
                              fmt::format("entry {}: partition {}", i, e.partition));
  if (e.offset < 0)
    return Status::Corruption(file, at + 4, "R30", fmt::format("entry {}: offset {}", i, e.offset));
  if (e.leader_epoch < kNoLeaderEpoch)
    return Status::Corruption(file, at + 12, "R30",
                              fmt::format("entry {}: leader epoch {}", i, e.leader_epoch));
  if (e.dead_letters < 0)
    return Status::Corruption(file, at + 24, "R30",
                              fmt::format("entry {}: dead-letter count {}", i, e.dead_letters));
  at += 32;
  auto member = GetName(b, &at, file, "member id", true);
  if (!member) return member.error();
  e.member_id = std::move(*member);
  return e;
}

}  // namespace

namespace {

// The header at `base` and the `count` entries after its `header_size`
// bytes, which fill `b` to its end (R29, R30).
Result<GroupOffsets> DecodeImage(std::span<const std::byte> b, const std::string& file, size_t base,
                                 size_t header_size) {
  int32_t count = 0;
  auto header = DecodeGroupOffsetsHeader(b, file, &count, base, header_size);
  if (!header) return header.error();
  GroupOffsets& s = *header;
  s.offsets.reserve(static_cast<size_t>(count));
  size_t at = base + header_size;
  for (int32_t i = 0; i < count; ++i) {
    const size_t start = at;
    auto e = DecodeGroupOffsetEntry(b, &at, file, i);
    if (!e) return e.error();
    if (!s.offsets.empty() && !EntryLess(s.offsets.back(), *e))
      return Status::Corruption(file, start, "R30",
                                fmt::format("entry {} ({}-{}) does not follow {}-{}: entries are "
                                            "sorted by topic and partition, without repeats",
                                            i, e->topic, e->partition, s.offsets.back().topic,
                                            s.offsets.back().partition));
    s.offsets.push_back(std::move(*e));
  }
  if (at != b.size())
    return Status::Corruption(
        file, at, "R29",
        fmt::format("{} bytes after the last of {} entries", b.size() - at, count));
  return std::move(s);
}

constexpr const char* kNeitherWhole = "neither copy is whole";

// Copy `c` of an R86 file whose slots take `slot` bytes: nullopt when it is
// not whole (its imageBytes out of range or its crc not matching: a write
// a crash cut short, or a slot never written), else its image checked as
// R29 and R30 check version 1's.
Result<std::optional<GroupOffsets>> DecodeCopy(std::span<const std::byte> b,
                                               const std::string& file, int c, size_t slot) {
  const size_t base = static_cast<size_t>(c) * slot;
  const std::byte* h = b.data() + base;
  const uint32_t image = GetFixed32(h + kGroupOffsetsImageBytesAt);
  if (image < kGroupOffsetsInPlaceHeaderSize || image > slot) return std::optional<GroupOffsets>();
  const auto bytes = b.subspan(base, image);
  if (GetFixed32(h + kCrcAt) != Crc32c(bytes.subspan(kCrcFrom)))
    return std::optional<GroupOffsets>();
  if (uint32_t magic = GetFixed32(h + kMagicAt); magic != kGroupOffsetsMagic)
    return Status::Corruption(file, base + kMagicAt, "R86",
                              fmt::format("copy {}: bad magic {:#010x}", c, magic));
  if (auto v = static_cast<int16_t>(GetFixed16(h + kVersionAt)); v != kGroupOffsetsInPlaceVersion)
    return Status::Corruption(
        file, base + kVersionAt, "R86",
        fmt::format("copy {}: version {}, not {}", c, v, kGroupOffsetsInPlaceVersion));
  if (GetFixed16(h + kReservedAt) != 0 || GetFixed32(h + kGroupOffsetsImageReservedAt) != 0)
    return Status::Corruption(file, base + kReservedAt, "R86",
                              fmt::format("copy {}: a reserved field is not 0", c));
  auto state = DecodeImage(b.first(base + image), file, base, kGroupOffsetsInPlaceHeaderSize);
  if (!state) return state.error();
  return std::optional<GroupOffsets>(std::move(*state));
}

}  // namespace

Result<GroupOffsetsFile> DecodeGroupOffsetsFile(std::span<const std::byte> b,
                                                const std::string& file) {
  GroupOffsetsFile out;
  if (b.size() < kGroupOffsetsHeaderSize ||
      GetFixed16(b.data() + kVersionAt) != kGroupOffsetsInPlaceVersion) {
    MQ_RETURN_IF_ERROR(CheckGroupOffsetsFrame(b, file));
    auto state = DecodeImage(b, file, 0, kGroupOffsetsHeaderSize);
    if (!state) return state.error();
    out.state = std::move(*state);
    return out;
  }
  // R86: two slots of whole pages.
  if (b.size() > kMaxGroupOffsetsFileBytes || b.size() % (2 * kGroupOffsetsSlotAlign) != 0)
    return Status::Corruption(
        file, b.size(), "R86",
        fmt::format("{} bytes: not two slots of a multiple of {} bytes, "
                    "at most {} in all (truncated?)",
                    b.size(), kGroupOffsetsSlotAlign, kMaxGroupOffsetsFileBytes));
  const size_t slot = b.size() / 2;
  std::optional<GroupOffsets> copies[2];
  for (int c = 0; c < 2; ++c) {
    auto copy = DecodeCopy(b, file, c, slot);
    if (!copy) return copy.error();
    copies[c] = std::move(*copy);
  }
  if (!copies[0] && !copies[1])
    return Status::Corruption(file, kCrcAt, "R86",
                              fmt::format("{} (its crc matches)", kNeitherWhole));
  if (copies[0] && copies[1] && copies[0]->generation == copies[1]->generation)
    return Status::Corruption(file, slot + kGenerationAt, "R86",
                              fmt::format("both copies have generation {}", copies[0]->generation));
  const int current =
      !copies[1] || (copies[0] && copies[0]->generation > copies[1]->generation) ? 0 : 1;
  out.state = std::move(*copies[current]);
  out.current = current;
  out.slot_bytes = slot;
  return out;
}

Result<GroupOffsets> DecodeGroupOffsets(std::span<const std::byte> b, const std::string& file) {
  auto decoded = DecodeGroupOffsetsFile(b, file);
  if (!decoded) return decoded.error();
  return std::move(decoded->state);
}

namespace {

// Reads all of an offsets file open as `file`, bounded by R29 and R86.
Result<GroupOffsetsFile> ReadOffsets(File* file, const std::string& path) {
  auto size = file->Size();
  if (!size) return size.error();
  if (*size > kMaxGroupOffsetsFileBytes)
    return Status::Corruption(
        path, kMaxGroupOffsetsFileBytes, "R29",
        fmt::format("{} bytes, more than the {} allowed", *size, kMaxGroupOffsetsFileBytes));
  std::vector<std::byte> bytes(static_cast<size_t>(*size));
  auto got = file->ReadAt(0, bytes);
  if (!got) return got.error();
  bytes.resize(*got);
  return DecodeGroupOffsetsFile(bytes, path);
}

// R86: a reader that takes no lock reads a copy while a writer writes it
// (that copy is not whole: the other one is read). Only a reader slower
// than two commits can find both copies being written, or one being
// written and the other from before: such a read is made again, a few
// times, before it is taken for corruption.
template <typename F>
auto ReadSettled(const F& read_once) -> decltype(read_once()) {
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    auto r = read_once();
    if (r || r.error().rule() != "R86" || attempt == kAttempts ||
        r.error().message().find(kNeitherWhole) == std::string::npos)
      return r;
    ::usleep(1000 * attempt);
  }
}

}  // namespace

Result<GroupOffsets> ReadGroupOffsetsFile(const std::string& path) {
  return ReadSettled([&]() -> Result<GroupOffsets> {
    auto fd = OpenRegularFileAt(AT_FDCWD, path, O_RDONLY);
    if (!fd) return fd.error();
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) return ErrnoStatus(path + ": fstat", errno);
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size > kMaxGroupOffsetsFileBytes)
      return Status::Corruption(
          path, kMaxGroupOffsetsFileBytes, "R29",
          fmt::format("{} bytes, more than the {} allowed", size, kMaxGroupOffsetsFileBytes));
    std::vector<std::byte> bytes(static_cast<size_t>(size));
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n =
          ::pread(fd->get(), bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(path + ": read", errno);
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    bytes.resize(done);
    return DecodeGroupOffsets(bytes, path);
  });
}

Result<Group> Group::Open(const std::string& data_dir, std::string_view name, bool create,
                          FileSystem* fs) {
  MQ_RETURN_IF_ERROR(ValidateName(name, "group"));
  if (fs == nullptr) fs = FileSystem::Default();
  auto data = DataDir::Open(data_dir, false, fs);  // meta.properties, modes
  if (!data) return data.error();
  auto root = OpenDirectory(data_dir, false, fs);
  if (!root) return root.error();
  MQ_RETURN_IF_ERROR(CheckLockableFileSystem(root->get(), data_dir));
  const std::string group(name);
  auto groups = OpenDirectoryAt(root->get(), kGroupsDir, false, fs);
  if (!groups && groups.error().code() == Code::kNotFound && create) {
    groups = OpenDirectoryAt(root->get(), kGroupsDir, true, fs);
    if (groups) MQ_RETURN_IF_ERROR(fs->SyncDir(root->get()));
  }
  if (!groups && groups.error().code() == Code::kNotFound)
    return Status(Code::kNotFound, fmt::format("{}: no group \"{}\"", data_dir, group));
  if (!groups) return groups.error();
  auto dir = OpenDirectoryAt(groups->get(), group, false, fs);
  if (!dir && dir.error().code() == Code::kNotFound && create) {
    dir = OpenDirectoryAt(groups->get(), group, true, fs);
    if (dir) MQ_RETURN_IF_ERROR(fs->SyncDir(groups->get()));
  }
  if (!dir && dir.error().code() == Code::kNotFound)
    return Status(Code::kNotFound, fmt::format("{}: no group \"{}\"", data_dir, group));
  if (!dir) return dir.error();
  Group g;
  g.name_ = group;
  g.data_dir_ = data_dir;
  g.path_ = fmt::format("{}/{}/{}", data_dir, kGroupsDir, group);
  g.dir_ = std::move(*dir);
  g.fs_ = fs;
  return g;
}

Result<GroupOffsets> Group::Read() const {
  return ReadSettled([&]() -> Result<GroupOffsets> {
    auto file = fs_->Open(dir_.get(), kGroupOffsetsFile, FileSystem::kRead);
    if (!file && file.error().code() == Code::kNotFound) return GroupOffsets{};
    if (!file) return file.error();
    auto read = ReadOffsets(file->get(), path_ + "/" + kGroupOffsetsFile);
    if (!read) return read.error();
    return std::move(read->state);
  });
}

namespace {

// The file system of a CommitSync::kAtomic write: every call goes to the
// group's, except the fsync of the directory, which is left to the file
// system (or to the group's next durable write).
class NoDirSync : public FileSystemWrapper {
 public:
  explicit NoDirSync(FileSystem* target) : FileSystemWrapper(target) {}
  Status SyncDir(int) override { return Status::Ok(); }
};

}  // namespace

Result<FileLock> Group::LockCommit(const CommitWait& wait) const {
  if (!wait)
    return FileLock::Acquire(dir_.get(), kGroupCommitLock, LockMode::kExclusive, LockWait::kBlock,
                             fs_);
  // Most waits are one commit of another member (a few ms): tried again
  // soon, then at most every 20 ms.
  constexpr long kFirstSleepUs = 200;
  constexpr long kMaxSleepUs = 20000;
  long sleep_us = kFirstSleepUs;
  int64_t next_call = MonotonicNowMs() + kCommitWaitCallMs;
  for (;;) {
    auto lock =
        FileLock::Acquire(dir_.get(), kGroupCommitLock, LockMode::kExclusive, LockWait::kTry, fs_);
    if (lock || lock.error().code() != Code::kBusy) return lock;
    if (const int64_t now = MonotonicNowMs(); now >= next_call) {
      MQ_RETURN_IF_ERROR(wait());
      next_call = now + kCommitWaitCallMs;
    }
    timespec ts{0, sleep_us * 1000};
    ::nanosleep(&ts, nullptr);
    sleep_us = std::min(sleep_us * 2, kMaxSleepUs);
  }
}

Status Group::Update(const std::function<Status(GroupOffsets*)>& change, CommitSync sync,
                     const CommitWait& wait) {
  // R32: one writer at a time reads, changes and writes the file.
  auto lock = LockCommit(wait);
  if (!lock) return lock.error();
  const std::string path = path_ + "/" + kGroupOffsetsFile;
  GroupOffsetsFile now;
  auto file = fs_->Open(dir_.get(), kGroupOffsetsFile, FileSystem::kReadWrite);
  if (!file && file.error().code() != Code::kNotFound) return file.error();
  if (file) {
    auto read = ReadOffsets(file->get(), path);
    if (!read) return read.error();
    now = std::move(*read);
  }
  GroupOffsets next = now.state;
  MQ_RETURN_IF_ERROR(change(&next));
  if (now.state.generation == INT64_MAX)
    return Status(Code::kTooLarge, path_ + ": generation counter exhausted");
  next.generation = now.state.generation + 1;
  const std::vector<std::byte> copy = EncodeGroupOffsetsCopy(next);
  if (copy.size() > kMaxGroupOffsetsBytes)
    return Status(Code::kTooLarge, fmt::format("{}: the offsets would take {} bytes, more than the "
                                               "{} allowed (R29)",
                                               path_, copy.size(), kMaxGroupOffsetsBytes));
  // R87: the copy that is not current, in place, then one fdatasync.
  if (now.current >= 0 && copy.size() <= now.slot_bytes) {
    const uint64_t at = static_cast<uint64_t>(1 - now.current) * now.slot_bytes;
    MQ_RETURN_IF_ERROR((*file)->WriteAt(at, copy));
    return (*file)->Sync();
  }
  // R87: no file yet, version 1's, or slots too small: a new file by R32's
  // replacement, its copy 0 this image.
  const std::vector<std::byte> bytes =
      EncodeGroupOffsetsInPlace(copy, GroupOffsetsSlotBytes(copy.size()));
  if (sync == CommitSync::kAtomic) {
    NoDirSync fs(fs_);
    return WriteFileAtomic(dir_.get(), kGroupOffsetsFile, bytes, &fs, kGroupOffsetsStaging);
  }
  return WriteFileAtomic(dir_.get(), kGroupOffsetsFile, bytes, fs_, kGroupOffsetsStaging);
}

bool AbsentMember::Reads(std::string_view topic) const {
  return !topics || std::find(topics->begin(), topics->end(), topic) != topics->end();
}

Result<FileLock> Group::LockForReset(std::optional<std::string_view> topic) const {
  auto held = LockGroup(LockMode::kExclusive, LockWait::kTry);
  if (!held && held.error().code() == Code::kBusy)
    return Status(Code::kBusy, fmt::format("group \"{}\" has live members ({}/{} is locked); "
                                           "a reset needs every member stopped",
                                           name_, path_, kGroupLock));
  if (!held) return held;
  MQ_RETURN_IF_ERROR(CheckNoAbsentMembers(kNoTimestamp, topic));
  return held;
}

namespace {

// Each commit names a valid topic, a partition once, and values in range.
Status ValidateCommits(std::span<const OffsetCommit> commits) {
  for (size_t i = 0; i < commits.size(); ++i) {
    const OffsetCommit& c = commits[i];
    MQ_RETURN_IF_ERROR(ValidateName(c.topic, "topic"));
    if (c.partition < 0 || c.partition > kMaxGroupPartition || c.offset < 0 ||
        c.leader_epoch < kNoLeaderEpoch || c.dead_letters_added < 0) {
      return Status(
          Code::kInvalidArgument,
          fmt::format("commit of {}-{}: partition, offset {}, leader epoch {} or "
                      "dead-letter count {} out of range",
                      c.topic, c.partition, c.offset, c.leader_epoch, c.dead_letters_added));
    }
    for (size_t j = 0; j < i; ++j)
      if (commits[j].topic == c.topic && commits[j].partition == c.partition)
        return Status(Code::kInvalidArgument,
                      fmt::format("commit names {}-{} twice", c.topic, c.partition));
  }
  return Status::Ok();
}

// Commit `c` applied to the offsets `s` (R31, group.md §14.3), by `member`
// at `now_ms`; `path` names the group in errors.
Status ApplyCommit(GroupOffsets* s, const OffsetCommit& c, CommitKind kind, int64_t now_ms,
                   const std::string& member, const std::string& path) {
  auto it = std::find_if(s->offsets.begin(), s->offsets.end(), [&](const CommittedOffset& e) {
    return e.topic == c.topic && e.partition == c.partition;
  });
  // The follower is there already: above, or at the same offset after a
  // record of the same or a later leader epoch (group.md §14.3).
  if (kind == CommitKind::kCarry && it != s->offsets.end() &&
      (c.offset < it->offset || (c.offset == it->offset && c.leader_epoch <= it->leader_epoch)))
    return Status::Ok();
  const bool lowers = c.lower_from >= 0 && it != s->offsets.end() &&
                      it->offset == c.lower_from;  // R31's exceptions (truncation, hand-back)
  if (it != s->offsets.end() && c.offset < it->offset && kind != CommitKind::kReset && !lowers) {
    return Status(Code::kInvalidArgument,
                  fmt::format("{}: R31: commit of offset {} for {}-{} is below the committed "
                              "offset {}; only a reset moves a group backwards",
                              path, c.offset, c.topic, c.partition, it->offset));
  }
  if (it == s->offsets.end()) {
    s->offsets.push_back(CommittedOffset{c.topic, c.partition, 0, kNoLeaderEpoch, 0, {}, 0});
    it = s->offsets.end() - 1;
  }
  if (it->dead_letters > INT64_MAX - c.dead_letters_added)
    return Status(Code::kTooLarge,
                  fmt::format("{}-{}: dead-letter count overflows", c.topic, c.partition));
  it->offset = c.offset;
  it->leader_epoch = c.leader_epoch;
  it->commit_timestamp = now_ms;
  it->member_id = member;
  if (kind == CommitKind::kCarry)
    it->dead_letters = std::max(it->dead_letters, c.dead_letters);
  else
    it->dead_letters += c.dead_letters_added;
  return Status::Ok();
}

}  // namespace

Status Group::Commit(std::span<const OffsetCommit> commits, std::string_view member_id,
                     CommitKind kind, int64_t now_ms, const FileLock* reset_lock, CommitSync sync,
                     const CommitWait& wait) {
  if (!ValidMemberId(member_id)) return ValidateName(member_id, "member id");
  // A reset or a carried commit is no member's progress: what a machine
  // crash would undo is not delivered again, it is simply undone.
  if (kind != CommitKind::kForward) sync = CommitSync::kDurable;
  if (now_ms == kNoTimestamp) now_ms = NowMs();
  MQ_RETURN_IF_ERROR(ValidateCommits(commits));
  FileLock group_lock;
  if (kind == CommitKind::kReset && reset_lock != nullptr) {
    if (!reset_lock->is_open())
      return Status(Code::kInvalidArgument, "reset: the group lock passed is not held");
  } else if (kind == CommitKind::kReset) {
    auto held = LockForReset();
    if (!held) return held.error();
    group_lock = std::move(*held);
  }
  // A reset is nobody's commit: its entries carry no member id (§14.2).
  const std::string member(kind == CommitKind::kReset ? std::string_view() : member_id);
  return Update(
      [&](GroupOffsets* s) -> Status {
        for (const OffsetCommit& c : commits)
          MQ_RETURN_IF_ERROR(ApplyCommit(s, c, kind, now_ms, member, path_));
        std::sort(s->offsets.begin(), s->offsets.end(), EntryLess);
        s->update_timestamp = now_ms;
        return Status::Ok();
      },
      sync, wait);
}

Result<std::vector<int32_t>> Group::DeleteOffsets(std::string_view topic,
                                                  std::span<const int32_t> partitions,
                                                  const FileLock* reset_lock) {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  FileLock group_lock;
  if (reset_lock != nullptr) {
    if (!reset_lock->is_open())
      return Status(Code::kInvalidArgument, "delete offsets: the group lock passed is not held");
  } else {
    auto held = LockForReset(topic);
    if (!held) return held.error();
    group_lock = std::move(*held);
  }
  auto named = [&](const CommittedOffset& e) {
    return e.topic == topic &&
           (partitions.empty() ||
            std::find(partitions.begin(), partitions.end(), e.partition) != partitions.end());
  };
  // Nothing to remove: no write (the generation stays).
  auto state = Read();
  if (!state) return state.error();
  if (std::none_of(state->offsets.begin(), state->offsets.end(), named))
    return std::vector<int32_t>{};
  std::vector<int32_t> removed;
  Status s = Update([&](GroupOffsets* g) -> Status {
    removed.clear();
    for (const CommittedOffset& e : g->offsets)
      if (named(e)) removed.push_back(e.partition);
    std::erase_if(g->offsets, named);
    g->update_timestamp = NowMs();
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return removed;
}

Status Group::RecordRebalance(int64_t now_ms, const CommitWait& wait) {
  if (now_ms == kNoTimestamp) now_ms = NowMs();
  return Update(
      [&](GroupOffsets* s) -> Status {
        if (s->rebalances == INT64_MAX)
          return Status(Code::kTooLarge, "rebalance counter exhausted");
        ++s->rebalances;
        s->last_rebalance_timestamp = now_ms;
        s->update_timestamp = now_ms;
        return Status::Ok();
      },
      CommitSync::kAtomic, wait);
}

Result<FileLock> Group::LockGroup(LockMode mode, LockWait wait) const {
  return FileLock::Acquire(dir_.get(), kGroupLock, mode, wait, fs_);
}

Result<FileLock> Group::LockMember(std::string_view member_id, LockWait wait) const {
  MQ_RETURN_IF_ERROR(ValidateName(member_id, "member id"));
  auto members = OpenDirectoryAt(dir_.get(), kGroupMembersDir, true, fs_);
  if (!members) return members.error();
  return FileLock::Acquire(members->get(), fmt::format("{}.lock", member_id), LockMode::kExclusive,
                           wait, fs_);
}

Result<bool> Group::IsMemberAlive(std::string_view member_id) const {
  MQ_RETURN_IF_ERROR(ValidateName(member_id, "member id"));
  auto members = OpenDirectoryAt(dir_.get(), kGroupMembersDir, false, fs_);
  if (!members && members.error().code() == Code::kNotFound) return false;
  if (!members) return members.error();
  return IsLocked(members->get(), fmt::format("{}.lock", member_id), LockMode::kShared, fs_);
}

namespace {

// Removes `name` in `parent_fd` and everything below it (never following a
// symlink: one is removed as the name it is).
Status RemoveTree(FileSystem* fs, int parent_fd, const std::string& name, const std::string& path,
                  int depth) {
  if (depth > 8) return Status(Code::kInvalidArgument, path + ": nested too deep to remove");
  auto dir = OpenDirectoryAt(parent_fd, name, false, fs);
  if (!dir) return dir.error();
  auto entries = ListDirectory(dir->get(), path, fs);
  if (!entries) return entries.error();
  for (const auto& [n, is_dir] : *entries) {
    if (is_dir) {
      MQ_RETURN_IF_ERROR(RemoveTree(fs, dir->get(), n, path + "/" + n, depth + 1));
    } else if (Status s = fs->Unlink(dir->get(), n); !s.ok() && s.code() != Code::kNotFound) {
      return s;  // naming the file's path
    }
  }
  if (Status s = fs->RemoveDir(parent_fd, name); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace

Result<FileLock> Group::OpenOwnership(std::string_view topic, bool create) const {
  MQ_RETURN_IF_ERROR(ValidateName(topic, "topic"));
  auto partitions = OpenDirectoryAt(dir_.get(), kGroupPartitionsDir, create, fs_);
  if (!partitions) return partitions.error();
  const std::string name(topic);
  const std::string path = path_ + "/" + kGroupPartitionsDir + "/" + name;
  if (!create) return FileLock::Open(partitions->get(), name, false, path, fs_);
  // An earlier mq kept a directory of flock files here, <p>.lock each: it
  // goes once none of them is held (their holders would not see this
  // file's locks), and a member of that mq started after it finds a file
  // where it wants a directory and fails.
  for (int attempt = 0;; ++attempt) {
    auto st = fs_->StatAt(partitions->get(), name);
    if (!st && st.error().code() != Code::kNotFound) return st.error();
    if (!st || !st->is_dir()) break;
    if (attempt == 3) return Status(Code::kBusy, path + ": keeps coming back as a directory");
    auto old = OpenDirectoryAt(partitions->get(), name, false, fs_);
    if (!old && old.error().code() == Code::kNotFound) continue;
    if (!old) return old.error();
    auto entries = ListDirectory(old->get(), path, fs_);
    if (!entries) return entries.error();
    for (const auto& [n, is_dir] : *entries) {
      if (is_dir) continue;
      auto held = IsLocked(old->get(), n, LockMode::kShared, fs_);
      if (!held && held.error().code() == Code::kNotFound) continue;
      if (!held) return held.error();
      if (*held)
        return Status(Code::kBusy,
                      fmt::format("{}/{}: held by a member of an earlier mq, which keeps a "
                                  "lock file per partition; stop it first",
                                  path, n));
    }
    Status removed = RemoveTree(fs_, partitions->get(), name, path, 0);
    if (!removed.ok() && removed.code() != Code::kNotFound) return removed;
  }
  return FileLock::Open(partitions->get(), name, true, path, fs_);
}

Result<Ownership> Ownership::Open(const Group& group, std::string_view topic) {
  auto file = group.OpenOwnership(topic, true);
  if (!file) return file.error();
  auto st = file->Stat();
  if (!st) return st.error();
  auto partitions = OpenDirectoryAt(group.dir_fd(), kGroupPartitionsDir, false, group.fs());
  if (!partitions) return partitions.error();
  Ownership o;
  o.topic_ = std::string(topic);
  o.fs_ = group.fs();
  o.partitions_ = std::move(*partitions);
  o.file_ = std::move(*file);
  o.dev_ = st->dev;
  o.ino_ = st->ino;
  return o;
}

namespace {

Status CheckPartition(int32_t p) {
  if (p < 0 || p > kMaxGroupPartition)
    return Status(Code::kInvalidArgument, fmt::format("partition {} out of range", p));
  return Status::Ok();
}

}  // namespace

Result<bool> Ownership::TryOwn(int32_t p, std::string_view member_id) {
  MQ_RETURN_IF_ERROR(CheckPartition(p));
  if (owned_.count(p)) return true;
  Status s = file_.LockRange(OwnershipLockByte(p), 1, LockMode::kExclusive, LockWait::kTry);
  if (s.code() == Code::kBusy) return false;
  MQ_RETURN_IF_ERROR(s);
  // A handler of an earlier owner that died may still be handling: the
  // partition is free once it is gone too (its run was not committed, so
  // the next owner hands its messages out again).
  auto handling = file_.IsRangeLocked(HandlerLockByte(p), 1);
  if (!handling || *handling) {
    MQ_RETURN_IF_ERROR(file_.UnlockRange(OwnershipLockByte(p), 1));
    if (!handling) return handling.error();
    return false;
  }
  owned_.insert(p);
  // For --describe only (no rule depends on it): best effort.
  char slot[kOwnershipSlotSize] = {};
  const size_t n = std::min(member_id.size(), sizeof slot - 1);
  std::memcpy(slot, member_id.data(), n);
  slot[n] = '\n';
  (void)!::pwrite(file_.fd(), slot, sizeof slot,
                  static_cast<off_t>(static_cast<uint64_t>(p) * kOwnershipSlotSize));
  return true;
}

Status Ownership::Disown(int32_t p) {
  if (!owned_.count(p)) return Status::Ok();
  MQ_RETURN_IF_ERROR(file_.UnlockRange(OwnershipLockByte(p), 1));
  owned_.erase(p);
  return Status::Ok();
}

bool Ownership::owns(int32_t p) const { return owned_.count(p) != 0; }

std::vector<int32_t> Ownership::owned() const { return {owned_.begin(), owned_.end()}; }

Result<FileLock> Ownership::LockForHandler(int32_t p) const {
  MQ_RETURN_IF_ERROR(CheckPartition(p));
  // Read-only: a shared lock needs no more.
  auto file = FileLock::Open(partitions_.get(), topic_, false, file_.path(), fs_);
  if (!file) return file.error();
  auto st = file->Stat();
  if (!st) return st.error();
  if (st->dev != dev_ || st->ino != ino_)
    return Status(Code::kBusy, file->path() + ": replaced while its partitions are owned");
  // Shared: runs of one partition never refuse each other (a handler's
  // own children may hold an earlier run's lock a little longer).
  MQ_RETURN_IF_ERROR(file->LockRange(HandlerLockByte(p), 1, LockMode::kShared, LockWait::kTry));
  // The handler inherits it: closing this process's copy must not release it.
  file->ShareWithChildren();
  return file;
}

Result<std::vector<std::string>> Group::ListMemberFiles() const {
  std::vector<std::string> ids;
  auto members = OpenDirectoryAt(dir_.get(), kGroupMembersDir, false, fs_);
  if (!members && members.error().code() == Code::kNotFound) return ids;
  if (!members) return members.error();
  auto entries = ListDirectory(members->get(), path_ + "/" + kGroupMembersDir, fs_);
  if (!entries) return entries.error();
  constexpr std::string_view kSuffix = ".lock";
  for (const auto& [n, is_dir] : *entries) {
    if (is_dir || n.size() <= kSuffix.size() || !n.ends_with(kSuffix)) continue;
    std::string id = n.substr(0, n.size() - kSuffix.size());
    if (ValidateName(id, "member id").ok()) ids.push_back(std::move(id));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<bool> Group::RemoveDeadMember(std::string_view member_id) const {
  MQ_RETURN_IF_ERROR(ValidateName(member_id, "member id"));
  auto members = OpenDirectoryAt(dir_.get(), kGroupMembersDir, false, fs_);
  if (!members && members.error().code() == Code::kNotFound) return false;
  if (!members) return members.error();
  const std::string name = fmt::format("{}.lock", member_id);
  auto lock = FileLock::Open(members->get(), name, false, fs_);
  if (!lock && lock.error().code() == Code::kNotFound) return false;
  if (!lock) return lock.error();
  Status st = lock->Lock(LockMode::kExclusive, LockWait::kTry);
  if (st.code() == Code::kBusy) return false;
  MQ_RETURN_IF_ERROR(st);
  auto named = fs_->StatAt(members->get(), name);
  if (!named && named.error().code() == Code::kNotFound) return false;  // removed meanwhile
  if (!named) return named.error();
  auto held = lock->Stat();
  if (!held) return held.error();
  if (named->ino != held->ino || named->dev != held->dev)
    return false;  // replaced by someone else meanwhile
  // Its session (R65) and heartbeat (R69) first: neither is read without
  // its lock file.
  MQ_RETURN_IF_ERROR(RemoveMemberLease(members->get(), member_id, fs_));
  MQ_RETURN_IF_ERROR(RemoveMemberHeartbeat(members->get(), member_id, fs_));
  Status removed = fs_->Unlink(members->get(), name);
  if (removed.code() == Code::kNotFound) return false;
  if (!removed.ok()) return removed;  // naming the file's path
  return true;
}

Result<std::vector<AbsentMember>> Group::AbsentMembers(int64_t now_ms) const {
  if (now_ms == kNoTimestamp) now_ms = NowMs();
  std::vector<AbsentMember> out;
  auto ids = ListMemberFiles();
  if (!ids) return ids.error();
  if (ids->empty()) return out;
  auto members = OpenDirectoryAt(dir_.get(), kGroupMembersDir, false, fs_);
  if (!members && members.error().code() == Code::kNotFound) return out;
  if (!members) return members.error();
  for (const std::string& id : *ids) {
    auto running = IsLocked(members->get(), fmt::format("{}.lock", id), LockMode::kShared, fs_);
    if (!running) return running.error();
    if (*running) continue;
    auto lease = ReadSessionLease(members->get(), id, fs_);
    if (!lease) return lease.error();
    if (!LeaseHolds(*lease, now_ms)) continue;
    std::optional<MemberNote> note = ReadMemberNote(members->get(), id);
    out.push_back({id, **lease, note && note->id == id ? note->topics : std::nullopt});
  }
  return out;
}

Status Group::CheckNoAbsentMembers(int64_t now_ms, std::optional<std::string_view> topic) const {
  if (now_ms == kNoTimestamp) now_ms = NowMs();
  auto absent = AbsentMembers(now_ms);
  if (!absent) return absent.error();
  if (topic && !absent->empty()) {
    // A removed topic is read by none of them (§14.4).
    auto data = DataDir::Open(data_dir_, false, fs_);
    if (!data) return data.error();
    auto config = data->ReadTopic(*topic);
    if (!config && config.error().code() == Code::kNotFound) absent->clear();
    std::erase_if(*absent, [&](const AbsentMember& m) { return !m.Reads(*topic); });
  }
  if (absent->empty()) return Status::Ok();
  std::string who;
  for (const AbsentMember& m : *absent)
    who += fmt::format(
        "{}static member {} is not running and its session holds until {} "
        "({}/{}/{}{})",
        who.empty() ? "" : "; ", m.id, IsoMs(m.session_end()), path_, kGroupMembersDir, m.id,
        kMemberLeaseSuffix);
  return Status(Code::kBusy,
                fmt::format("group \"{}\" has live members: {}; wait for the session to end or "
                            "remove the member (mq-consume -G {} --remove-member {})",
                            name_, who, name_, absent->front().id));
}

Status Group::RemoveMember(std::string_view member_id) const {
  MQ_RETURN_IF_ERROR(ValidateName(member_id, "member id"));
  // A probe of the file by a member's poll refuses the removal for an
  // instant: tried again a few times.
  for (int attempt = 0;; ++attempt) {
    auto removed = RemoveDeadMember(member_id);
    if (!removed) return removed.error();
    if (*removed) return Status::Ok();
    auto files = ListMemberFiles();
    if (!files) return files.error();
    if (!std::binary_search(files->begin(), files->end(), member_id))
      return Status(Code::kNotFound,
                    fmt::format("group \"{}\" has no member \"{}\" ({}/{}/{}.lock does not exist)",
                                name_, member_id, path_, kGroupMembersDir, member_id));
    auto running = IsMemberAlive(member_id);
    if (!running) return running.error();
    if (*running || attempt >= 100)
      return Status(Code::kBusy,
                    fmt::format("member \"{}\" of group \"{}\" is running ({}/{}/{}.lock is "
                                "locked); stop it first",
                                member_id, name_, path_, kGroupMembersDir, member_id));
    ::usleep(10000);
  }
}

Result<std::vector<std::string>> ListGroups(const std::string& data_dir) {
  auto data = DataDir::Open(data_dir, false);
  if (!data) return data.error();
  auto root = OpenDirectory(data_dir, false);
  if (!root) return root.error();
  std::vector<std::string> names;
  auto groups = OpenDirectoryAt(root->get(), kGroupsDir, false);
  if (!groups && groups.error().code() == Code::kNotFound) return names;
  if (!groups) return groups.error();
  auto entries = ListDirectory(groups->get(), data_dir + "/" + kGroupsDir);
  if (!entries) return entries.error();
  for (const auto& [n, is_dir] : *entries)
    if (is_dir && ValidateName(n, "group").ok()) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

Status DeleteGroup(const std::string& data_dir, std::string_view name) {
  auto group = Group::Open(data_dir, name, false);
  if (!group) return group.error();
  auto lock = group->LockGroup(LockMode::kExclusive, LockWait::kTry);
  if (!lock && lock.error().code() == Code::kBusy)
    return Status(Code::kBusy, fmt::format("group \"{}\" has live members ({}/{} is locked); "
                                           "stop them first",
                                           name, group->path(), kGroupLock));
  if (!lock) return lock.error();
  MQ_RETURN_IF_ERROR(group->CheckNoAbsentMembers());
  auto root = OpenDirectory(data_dir, false);
  if (!root) return root.error();
  auto groups = OpenDirectoryAt(root->get(), kGroupsDir, false);
  if (!groups) return groups.error();
  // Out of the namespace first: the group is gone at once, and a crash
  // while removing its files leaves a name no listing shows (§14.4).
  static std::atomic<uint64_t> counter{0};
  const std::string tomb = fmt::format("~deleted-{}-{}", ::getpid(), counter++);
  const std::string group_name(name);
  if (Status s = FileSystem::Default()->Rename(groups->get(), group_name, tomb); !s.ok())
    return s;  // naming both paths
  MQ_RETURN_IF_ERROR(FileSystem::Default()->SyncDir(groups->get()));
  MQ_RETURN_IF_ERROR(RemoveTree(FileSystem::Default(), groups->get(), tomb,
                                data_dir + "/" + kGroupsDir + "/" + tomb, 0));
  return FileSystem::Default()->SyncDir(groups->get());
}

}  // namespace mq
