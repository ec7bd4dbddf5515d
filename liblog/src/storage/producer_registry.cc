// A producer-id registry's files (producer_registry.h, producer.md P8).
#include "storage/producer_registry.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/batch.h"

namespace mq {
namespace {

// Reads a registry file: nullopt if absent, kCorruption if not a number.
Result<std::optional<int64_t>> ReadId(FileSystem* fs, int dir_fd, const std::string& name,
                                      const std::string& label) {
  auto opened = fs->Open(dir_fd, name, FileSystem::kRead);
  if (!opened && opened.error().code() == Code::kNotFound) return std::optional<int64_t>();
  if (!opened) return opened.error();
  // One byte past the limit: a longer file is told from one at the limit.
  char buf[format::kMaxProducerIdFileBytes + 1];
  auto got = (*opened)->ReadAt(0, std::as_writable_bytes(std::span<char>(buf)));
  if (!got) return got.error();
  const size_t n = *got;
  std::string_view text(buf, n);
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  int64_t id = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || id < 0 ||
      n > format::kMaxProducerIdFileBytes) {
    return Status::Corruption(label, 0, "P8", "not a producer id (one decimal number >= 0)");
  }
  return std::optional<int64_t>(id);
}

Status WriteId(FileSystem* fs, int dir_fd, const std::string& name, int64_t id) {
  std::string text = fmt::format("{}\n", id);
  return WriteFileAtomic(dir_fd, name, AsBytes(text), fs, format::kProducerIdStaging);
}

}  // namespace

Result<int64_t> LookUpProducerId(FileSystem* fs, int dir_fd, const std::string& registry,
                                 std::string_view name, int64_t first) {
  const std::string id_file = std::string(name) + format::kProducerIdSuffix;
  auto existing = ReadId(fs, dir_fd, id_file, registry + "/" + id_file);
  if (!existing) return existing.error();
  if (existing->has_value()) return **existing;

  auto next =
      ReadId(fs, dir_fd, format::kNextProducerIdName, registry + "/" + format::kNextProducerIdName);
  if (!next) return next.error();
  const int64_t id = std::max(next->value_or(first), first);
  if (id == INT64_MAX) return Status(Code::kTooLarge, registry + ": producer ids exhausted");
  // The counter first: a crash between the two writes wastes an id, never
  // gives one to two names.
  MQ_RETURN_IF_ERROR(WriteId(fs, dir_fd, format::kNextProducerIdName, id + 1));
  MQ_RETURN_IF_ERROR(WriteId(fs, dir_fd, id_file, id));
  return id;
}

}  // namespace mq
