#include "producer_id.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "mq/batch.h"
#include "mq/topic.h"

namespace mq {
namespace {

constexpr const char* kRegistryDir = "producers";
// Holds the next id to allocate. Its name has no ".id"/".lock" suffix, so
// no producer name can collide with it.
constexpr const char* kNextIdFile = "next-producer-id";
// A registry file is one decimal number and a newline.
constexpr size_t kMaxIdFileBytes = 32;
// Registry files are written through this one staging name, under the
// registry lock: `<name>.id.tmp` would be 256 bytes for a 249-byte name, one
// over NAME_MAX. It ends in neither ".id" nor ".lock", so no name collides.
constexpr const char* kStagingFile = "id.tmp";

// Reads a registry file: nullopt if absent, kCorruption if not a number.
Result<std::optional<int64_t>> ReadId(int dir_fd, const std::string& name,
                                      const std::string& label) {
  auto opened = OpenRegularFileAt(dir_fd, name, O_RDONLY);
  if (!opened && opened.error().code() == Code::kNotFound) return std::optional<int64_t>();
  if (!opened) return opened.error();
  UniqueFd fd = std::move(*opened);
  char buf[kMaxIdFileBytes + 1];
  ssize_t n;
  do {
    n = ::read(fd.get(), buf, sizeof buf);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus(label, errno);
  std::string_view text(buf, static_cast<size_t>(n));
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  int64_t id = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || id < 0 ||
      static_cast<size_t>(n) > kMaxIdFileBytes) {
    return Status::Corruption(label, 0, "P8", "not a producer id (one decimal number >= 0)");
  }
  return std::optional<int64_t>(id);
}

// The registry directory's own lock (flock on its descriptor), exclusive,
// released when this goes out of scope.
class RegistryLock {
 public:
  RegistryLock() = default;
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
  ~RegistryLock() {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }
  Status Take(int dir_fd, const std::string& registry) {
    if (::flock(dir_fd, LOCK_EX) != 0) return ErrnoStatus(registry + ": lock", errno);
    fd_ = dir_fd;
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

Status WriteId(int dir_fd, const std::string& name, int64_t id) {
  std::string text = fmt::format("{}\n", id);
  return WriteFileAtomic(dir_fd, name, AsBytes(text), nullptr, kStagingFile);
}

// Allocates or looks up the id of `name` under the registry directory lock.
Result<int64_t> LookUp(int dir_fd, const std::string& name, const std::string& registry) {
  RegistryLock lock;
  MQ_RETURN_IF_ERROR(lock.Take(dir_fd, registry));

  std::string id_file = name + ".id";
  auto existing = ReadId(dir_fd, id_file, registry + "/" + id_file);
  if (!existing) return existing.error();
  if (existing->has_value()) return **existing;

  auto next = ReadId(dir_fd, kNextIdFile, registry + "/" + kNextIdFile);
  if (!next) return next.error();
  int64_t id = next->value_or(0);
  if (id == INT64_MAX) return Status(Code::kTooLarge, registry + ": producer ids exhausted");
  // The counter first: a crash between the two writes wastes an id, never
  // gives one to two names.
  MQ_RETURN_IF_ERROR(WriteId(dir_fd, kNextIdFile, id + 1));
  MQ_RETURN_IF_ERROR(WriteId(dir_fd, id_file, id));
  return id;
}

}  // namespace

Result<ProducerRegistry> ReadProducerRegistry(const std::string& root) {
  ProducerRegistry out;
  auto root_fd = OpenDirectory(root, false);
  if (!root_fd) return root_fd.error();
  auto dir = OpenDirectoryAt(root_fd->get(), kRegistryDir, false);
  if (!dir && dir.error().code() == Code::kNotFound) return out;
  if (!dir) return dir.error();
  const std::string registry = root + "/" + kRegistryDir;
  auto names = FileSystem::Default()->ListDir(dir->get());
  if (!names) return names.error();
  for (const std::string& n : *names) {
    if (n.size() <= 3 || n.compare(n.size() - 3, 3, ".id") != 0) continue;
    auto id = ReadId(dir->get(), n, registry + "/" + n);
    if (!id) return id.error();
    if (*id) out.ids.push_back({n.substr(0, n.size() - 3), **id});
  }
  auto next = ReadId(dir->get(), kNextIdFile, registry + "/" + kNextIdFile);
  if (!next) return next.error();
  out.next = *next;
  return out;
}

Status ApplyProducerRegistry(const std::string& to, const ProducerRegistry& from,
                             const std::string& from_label) {
  if (from.ids.empty() && !from.next) return Status::Ok();
  for (const wire::CarriedProducer& p : from.ids)
    MQ_RETURN_IF_ERROR(ValidateName(p.name, "producer id"));
  auto to_root = OpenDirectory(to, false);
  if (!to_root) return to_root.error();
  auto to_dir = OpenDirectoryAt(to_root->get(), kRegistryDir, true);
  if (!to_dir) return to_dir.error();
  const std::string to_registry = to + "/" + kRegistryDir;
  RegistryLock lock;
  MQ_RETURN_IF_ERROR(lock.Take(to_dir->get(), to_registry));
  std::vector<std::pair<std::string, int64_t>> missing;
  for (const wire::CarriedProducer& p : from.ids) {
    const std::string n = p.name + ".id";
    auto have = ReadId(to_dir->get(), n, to_registry + "/" + n);
    if (!have) return have.error();
    if (!*have) {
      missing.emplace_back(n, p.id);
    } else if (**have != p.id) {
      return Status::Corruption(to_registry + "/" + n, 0, "P8",
                                fmt::format("producer id {} here, {} in {}/{}: the registries "
                                            "diverged",
                                            **have, p.id, from_label, n));
    }
  }
  auto to_next = ReadId(to_dir->get(), kNextIdFile, to_registry + "/" + kNextIdFile);
  if (!to_next) return to_next.error();
  int64_t want = std::max(from.next.value_or(0), to_next->value_or(0));
  // Never below an id the registry holds (a damaged or hostile peer's next
  // id must not hand out an id twice).
  for (const auto& [n, id] : missing) want = std::max(want, id + 1);
  // The counter first, as LookUp: a crash in between wastes ids, never
  // gives one to two names.
  if (!*to_next || **to_next < want) MQ_RETURN_IF_ERROR(WriteId(to_dir->get(), kNextIdFile, want));
  for (const auto& [n, id] : missing) MQ_RETURN_IF_ERROR(WriteId(to_dir->get(), n, id));
  return Status::Ok();
}

Status CarryProducerRegistry(const std::string& from, const std::string& to) {
  auto registry = ReadProducerRegistry(from);
  if (!registry) return registry.error();
  return ApplyProducerRegistry(to, *registry, from + "/" + kRegistryDir);
}

Result<ProducerIdentity> ProducerIdentity::Acquire(const std::string& data_dir,
                                                   std::string_view name) {
  MQ_RETURN_IF_ERROR(ValidateName(name, "producer id"));
  auto root = OpenDirectory(data_dir, false);
  if (!root) return root.error();
  auto dir = OpenDirectoryAt(root->get(), kRegistryDir, true);
  if (!dir) return dir.error();
  const std::string registry = data_dir + "/" + kRegistryDir;
  const std::string lock_name = std::string(name) + ".lock";

  auto lock = FileLock::Acquire(dir->get(), lock_name, LockMode::kExclusive, LockWait::kTry);
  if (!lock && lock.error().code() == Code::kBusy) {
    return Status(Code::kBusy,
                  fmt::format("producer id '{}' is in use by another run ({}/{} is locked)", name,
                              registry, lock_name));
  }
  if (!lock) return lock.error();
  auto id = LookUp(dir->get(), std::string(name), registry);
  if (!id) return id.error();
  return ProducerIdentity(std::move(*lock), *id);
}

}  // namespace mq
