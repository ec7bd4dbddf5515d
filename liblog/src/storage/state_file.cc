// State file mapping, seqlock publication and futex wake-ups (§9).
#include "storage/state_file.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "mq/crc32c.h"

namespace mq {

namespace {

constexpr size_t kChecksumFrom = offsetof(StateLayout, rewrites);
constexpr size_t kChecksumTo = offsetof(StateLayout, checksum);
static_assert(kChecksumFrom == 12 && kChecksumTo == 72);

uint32_t Checksum(const StateLayout& s) {
  auto* p = reinterpret_cast<const std::byte*>(&s);
  return Crc32c(std::span<const std::byte>(p + kChecksumFrom, kChecksumTo - kChecksumFrom));
}

long Futex(const uint32_t* word, int op, uint32_t val, const struct timespec* timeout,
           uint32_t bitset) {
  return ::syscall(SYS_futex, word, op, val, timeout, nullptr, bitset);
}

// R100: whether `image` holds what `now` holds: magic, version, and the
// fields with their checksum (bytes [12, 76)), the generation aside.
bool SameFields(const StateLayout& now, const StateLayout& image) {
  auto* a = reinterpret_cast<const volatile unsigned char*>(&now);
  auto* b = reinterpret_cast<const unsigned char*>(&image);
  constexpr size_t kTo = offsetof(StateLayout, appending);
  for (size_t i = 0; i < kTo; ++i) {
    if (i == offsetof(StateLayout, generation)) i += sizeof(uint32_t);
    if (a[i] != b[i]) return false;
  }
  return true;
}

// /proc/sys/kernel/random/boot_id, read once per process.
BootId KernelBootId() {
  int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return BootId{};
  char text[64];
  ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return BootId{};
  auto id = ParseBootId(std::string(text, static_cast<size_t>(n)));
  return id ? *id : BootId{};
}

}  // namespace

std::optional<BootId> ParseBootId(const std::string& text) {
  BootId id{};
  size_t digits = 0;
  for (char c : text) {
    if (c == '-' || c == '\n') continue;
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (v < 0 || digits >= 32) return std::nullopt;
    id[digits / 2] = static_cast<uint8_t>(id[digits / 2] << 4 | v);
    ++digits;
  }
  if (digits != 32) return std::nullopt;
  return id;
}

BootId CurrentBootId() {
  if (const char* test = std::getenv("MQ_TEST_BOOT_ID")) {
    auto id = ParseBootId(test);
    return id ? *id : BootId{};
  }
  static const BootId kernel = KernelBootId();
  return kernel;
}

bool StateFields::same_boot() const { return boot_id != BootId{} && boot_id == CurrentBootId(); }

StateLayout EncodeState(const StateFields& f) {
  StateLayout s;
  std::memset(&s, 0, sizeof s);
  s.magic = kStateMagic;
  s.version = kStateVersion;
  s.rewrites = f.rewrites;
  s.log_end_offset = f.log_end_offset;
  s.end_segment_base = f.end_segment_base;
  s.end_position = f.end_position;
  s.log_start_offset = f.log_start_offset;
  s.recovery_point = f.recovery_point;
  std::memcpy(s.boot_id, f.boot_id.data(), sizeof s.boot_id);
  s.checksum = Checksum(s);
  return s;
}

Result<StateFields> DecodeState(const StateLayout& s, const std::string& file) {
  if (s.magic != kStateMagic)
    return Status::Corruption(file, offsetof(StateLayout, magic), "R15",
                              fmt::format("bad magic {:#010x}", s.magic));
  if (s.version != kStateVersion)
    return Status::Corruption(file, offsetof(StateLayout, version), "R15",
                              fmt::format("unknown version {}", s.version));
  uint32_t want = Checksum(s);
  if (s.checksum != want)
    return Status::Corruption(
        file, offsetof(StateLayout, checksum), "R15",
        fmt::format("checksum {:#010x}, computed {:#010x}", s.checksum, want));
  StateFields f;
  f.rewrites = s.rewrites;
  f.log_end_offset = s.log_end_offset;
  f.end_segment_base = s.end_segment_base;
  f.end_position = s.end_position;
  f.log_start_offset = s.log_start_offset;
  f.recovery_point = s.recovery_point;
  std::memcpy(f.boot_id.data(), s.boot_id, sizeof s.boot_id);
  if (f.log_start_offset < 0 || f.log_end_offset < f.log_start_offset || f.recovery_point < 0 ||
      f.end_segment_base < 0 || f.end_segment_base > f.log_end_offset)
    return Status::Corruption(file, offsetof(StateLayout, log_end_offset), "R15",
                              "inconsistent offsets");
  return f;
}

struct StateFile::Impl {
  FileSystem* fs = nullptr;
  Mapping region;
  StateLayout* layout = nullptr;
  uint64_t dev = 0;
  uint64_t ino = 0;
};

StateFile::StateFile() = default;
StateFile::StateFile(StateFile&&) noexcept = default;
StateFile& StateFile::operator=(StateFile&&) noexcept = default;
StateFile::~StateFile() = default;

namespace {

Result<std::unique_ptr<StateFile::Impl>> MapForRead(int dir_fd, FileSystem* fs);
Result<std::unique_ptr<StateFile::Impl>> MapOpened(File& file, FileSystem* fs, bool writable);

}  // namespace

Result<StateFile> StateFile::OpenForWrite(int dir_fd, FileSystem* fs, const StateFields& initial,
                                          bool* recreated, bool sync) {
  *recreated = false;
  if (fs == nullptr) fs = FileSystem::Default();
  // Opened once: a symlink, FIFO or device under the name is refused by the
  // open itself (kPermission), a missing file is kNotFound.
  auto file = fs->Open(dir_fd, kStateFileName, FileSystem::kReadWrite);
  if (!file && file.error().code() != Code::kNotFound) return file.error();
  bool usable = false;
  if (file) {
    auto st = (*file)->StatAtOpen();
    if (!st) return st.error();
    usable = st->size == sizeof(StateLayout);
  }
  if (!usable) {
    // Replace, never resize in place: a reader's mapping of the old file
    // must not lose its pages (SIGBUS).
    StateLayout image = EncodeState(initial);
    MQ_RETURN_IF_ERROR(WriteFileAtomic(
        dir_fd, kStateFileName,
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(&image), sizeof image), fs,
        {}, sync));
    *recreated = true;
    file = fs->Open(dir_fd, kStateFileName, FileSystem::kReadWrite);
    if (!file) return file.error();
  }
  auto impl = MapOpened(**file, fs, true);
  if (!impl) return impl.error();
  StateFile out;
  out.impl_ = std::move(*impl);
  return out;
}

Result<StateFile> StateFile::OpenForRead(int dir_fd, FileSystem* fs) {
  auto impl = MapForRead(dir_fd, fs ? fs : FileSystem::Default());
  if (!impl) return impl.error();
  StateFile out;
  out.impl_ = std::move(*impl);
  return out;
}

namespace {

// A reader's mapping (the writer's opens the file itself: OpenForWrite).
Result<std::unique_ptr<StateFile::Impl>> MapForRead(int dir_fd, FileSystem* fs) {
  auto file = fs->Open(dir_fd, kStateFileName, FileSystem::kRead);
  if (!file) return file.error();
  return MapOpened(**file, fs, false);
}

// The mapping outlives `file` (the caller closes it).
Result<std::unique_ptr<StateFile::Impl>> MapOpened(File& file, FileSystem* fs, bool writable) {
  // Just opened; the file is replaced, never resized (OpenForWrite).
  auto st = file.StatAtOpen();
  if (!st) return st.error();
  auto impl = std::make_unique<StateFile::Impl>();
  impl->fs = fs;
  if (st->size != sizeof(StateLayout))
    return Status::Corruption(kStateFileName, 0, "R15",
                              fmt::format("size {} (want {})", st->size, sizeof(StateLayout)));
  impl->dev = st->dev;
  impl->ino = st->ino;
  // The mapping outlives the descriptor (closed on return).
  auto m = fs->Map(file.fd(), sizeof(StateLayout), writable);
  if (!m) return Status(m.error().code(), std::string(kStateFileName) + ": " + m.error().message());
  impl->region = std::move(*m);
  impl->layout = reinterpret_cast<StateLayout*>(impl->region.data);
  return impl;
}

// Fields are read and written through atomic_ref so concurrent access from
// another process is not a data race; ordering comes from the generation.
template <typename T>
T LoadRelaxed(T& field) {
  return std::atomic_ref<T>(field).load(std::memory_order_relaxed);
}
template <typename T>
void StoreRelaxed(T& field, T v) {
  std::atomic_ref<T>(field).store(v, std::memory_order_relaxed);
}

}  // namespace

uint32_t StateFile::generation() const {
  return std::atomic_ref<uint32_t>(impl_->layout->generation).load(std::memory_order_acquire);
}

Result<StateFields> StateFile::Read(uint32_t* generation_out) const {
  StateLayout* m = impl_->layout;
  std::atomic_ref<uint32_t> gen(m->generation);
  StateLayout copy;
  // A writer that died inside Publish leaves the generation odd forever:
  // once it has stayed at one odd value for kStuckLooks looks (about a
  // second, yielding, then sleeping), the checksum decides. A generation
  // that moves is a live writer, however often it does: look again, never
  // give up on it (a reader that gave up on a live writer would report a
  // torn copy as corruption).
  constexpr int kStuckLooks = 2000;
  uint32_t stuck_at = 0;
  int stuck = 0;
  for (int attempt = 0;; ++attempt) {
    uint32_t g1 = gen.load(std::memory_order_acquire);
    copy.magic = LoadRelaxed(m->magic);
    copy.version = LoadRelaxed(m->version);
    copy.generation = g1;
    copy.rewrites = LoadRelaxed(m->rewrites);
    copy.log_end_offset = LoadRelaxed(m->log_end_offset);
    copy.end_segment_base = LoadRelaxed(m->end_segment_base);
    copy.end_position = LoadRelaxed(m->end_position);
    copy.log_start_offset = LoadRelaxed(m->log_start_offset);
    copy.recovery_point = LoadRelaxed(m->recovery_point);
    copy.boot_id[0] = LoadRelaxed(m->boot_id[0]);
    copy.boot_id[1] = LoadRelaxed(m->boot_id[1]);
    copy.checksum = LoadRelaxed(m->checksum);
    copy.appending = 0;
    std::atomic_thread_fence(std::memory_order_acquire);
    uint32_t g2 = gen.load(std::memory_order_relaxed);
    if (g1 == g2 && (g1 & 1) == 0) {
      if (generation_out) *generation_out = g2;
      return DecodeState(copy, kStateFileName);
    }
    if (g1 == g2 && (stuck == 0 || g1 == stuck_at)) {
      stuck_at = g1;
      if (++stuck >= kStuckLooks) {
        if (generation_out) *generation_out = g2;
        return DecodeState(copy, kStateFileName);
      }
    } else {
      stuck = 0;
    }
    if (stuck > 1000) {
      struct timespec ms = {0, 1000000};
      ::nanosleep(&ms, nullptr);
    } else if (attempt > 10) {
      sched_yield();
    }
  }
}

uint32_t StateFile::Publish(const StateFields& f, int* woken) {
  StateLayout* m = impl_->layout;
  std::atomic_ref<uint32_t> gen(m->generation);
  uint32_t g = gen.load(std::memory_order_relaxed);
  const StateLayout image = EncodeState(f);
  // R100: the same fields again (read before a store: this writer holds
  // the lock) leave the waiters for a field change asleep. A generation
  // left odd (a writer died mid-publish) changes what readers saw.
  const bool unchanged = (g & 1) == 0 && SameFields(*m, image);
  if (g & 1) ++g;  // a writer died mid-publish; we hold the lock now
  gen.store(g + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  StoreRelaxed(m->magic, image.magic);
  StoreRelaxed(m->version, image.version);
  StoreRelaxed(m->rewrites, image.rewrites);
  StoreRelaxed(m->log_end_offset, image.log_end_offset);
  StoreRelaxed(m->end_segment_base, image.end_segment_base);
  StoreRelaxed(m->end_position, image.end_position);
  StoreRelaxed(m->log_start_offset, image.log_start_offset);
  StoreRelaxed(m->recovery_point, image.recovery_point);
  StoreRelaxed(m->boot_id[0], image.boot_id[0]);
  StoreRelaxed(m->boot_id[1], image.boot_id[1]);
  StoreRelaxed(m->checksum, image.checksum);
  gen.store(g + 2, std::memory_order_seq_cst);
  // Shared (not FUTEX_PRIVATE) wake: the waiters are other processes.
  const long n = Futex(&m->generation, FUTEX_WAKE_BITSET, INT_MAX, nullptr,
                       unchanged ? kStateWakeGenerationOnly : kStateWakeAll);
  if (woken) *woken = n > 0 ? static_cast<int>(n) : 0;
  return g + 2;
}

void StateFile::SetAppending(bool on) {
  std::atomic_ref<uint32_t>(impl_->layout->appending).store(on ? 1 : 0, std::memory_order_release);
}

bool StateFile::appending() const {
  return std::atomic_ref<uint32_t>(impl_->layout->appending).load(std::memory_order_acquire) != 0;
}

void StateFile::Wait(uint32_t generation, int timeout_ms, WaitFor what) const {
  if (timeout_ms < 0) timeout_ms = 0;
  // FUTEX_WAIT_BITSET's timeout is absolute, on CLOCK_MONOTONIC.
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += static_cast<long>(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  const uint32_t mask = what == WaitFor::kFieldChange ? kStateWakeFieldChange : kStateWakeAll;
  // EAGAIN (already changed), EINTR and ETIMEDOUT all mean: look again.
  Futex(&impl_->layout->generation, FUTEX_WAIT_BITSET, generation, &ts, mask);
}

bool StateFile::Replaced(int dir_fd) const {
  auto st = impl_->fs->StatAt(dir_fd, kStateFileName);
  if (!st) return true;
  return st->dev != impl_->dev || st->ino != impl_->ino;
}

}  // namespace mq
