// Kafka's text checkpoint layout (format-spec/replication.md §16.1, R35).
#include "io/checkpoint_file.h"

#include <fcntl.h>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "mq/crc32c.h"

namespace mq {
namespace {

constexpr const char* kRule = "R35";

// Printable for a message: the byte itself or its code.
std::string Shown(char c) {
  if (c >= 0x21 && c <= 0x7E) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
}

// Reads lines of `bytes` one at a time; positions are byte offsets.
class LineReader {
 public:
  LineReader(std::string_view bytes, const std::string& file) : b_(bytes), file_(file) {}
  uint64_t position() const { return pos_; }
  bool done() const { return pos_ == b_.size(); }

  // The next line without its '\n'. A line without one (the file ends
  // first) breaks R35 where the file ends.
  Result<std::string_view> Next(const char* what) {
    size_t nl = b_.find(format::kCheckpointLineEnd, pos_);
    if (nl == std::string_view::npos)
      return Status::Corruption(
          file_, b_.size(), kRule,
          fmt::format("the file ends inside the {} (no '\\n'; truncated)", what));
    std::string_view line = b_.substr(pos_, nl - pos_);
    line_start_ = pos_;
    pos_ = nl + 1;
    return line;
  }
  uint64_t line_start() const { return line_start_; }

 private:
  std::string_view b_;
  const std::string& file_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
};

// Splits `line` (starting at byte `at`) at single spaces into exactly
// `n` non-empty fields.
Status SplitFields(std::string_view line, uint64_t at, size_t n, const std::string& file,
                   std::vector<CheckpointField>* out) {
  out->clear();
  size_t start = 0;
  for (size_t i = 0;; ++i) {
    size_t sp = line.find(format::kCheckpointSeparator, start);
    std::string_view f = line.substr(start, sp == std::string_view::npos ? sp : sp - start);
    if (f.empty())
      return Status::Corruption(file, at + start, kRule,
                                fmt::format("empty field {} (fields are separated by exactly one "
                                            "space, with none at either end of a line)",
                                            i + 1));
    if (i + 1 > n)
      return Status::Corruption(file, at + start - 1, kRule,
                                fmt::format("more than {} fields in an entry line", n));
    out->push_back({f, at + start});
    if (sp == std::string_view::npos) break;
    start = sp + 1;
  }
  if (out->size() != n)
    return Status::Corruption(file, at + line.size(), kRule,
                              fmt::format("{} field(s) in an entry line, not {}", out->size(), n));
  return Status::Ok();
}

}  // namespace

Result<int64_t> CheckpointNumber(const CheckpointField& field, int64_t max, const std::string& file,
                                 const char* rule, const char* what) {
  std::string_view t = field.text;
  if (t.empty())
    return Status::Corruption(file, field.position, kRule, fmt::format("{}: empty number", what));
  int64_t v = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c < '0' || c > '9')
      return Status::Corruption(
          file, field.position + i, kRule,
          fmt::format("{}: {} in a number (decimal digits only)", what, Shown(c)));
    if (i == 1 && t[0] == '0')
      return Status::Corruption(file, field.position, kRule,
                                fmt::format("{}: leading zero in \"{}\"", what, t));
    const int d = c - '0';
    if (v > (INT64_MAX - d) / 10)
      return Status::Corruption(file, field.position, kRule,
                                fmt::format("{}: \"{}\" overflows a 64-bit integer", what, t));
    v = v * 10 + d;
  }
  if (v > max)
    return Status::Corruption(file, field.position, rule,
                              fmt::format("{} {} is above the largest allowed, {}", what, v, max));
  return v;
}

Status ParseCheckpoint(std::string_view bytes, const std::string& file, size_t fields,
                       const std::function<Status(std::span<const CheckpointField>)>& entry) {
  if (bytes.size() > format::kMaxCheckpointBytes)
    return Status::Corruption(file, format::kMaxCheckpointBytes, kRule,
                              fmt::format("{} bytes, more than the {} allowed", bytes.size(),
                                          format::kMaxCheckpointBytes));
  if (bytes.empty()) return Status::Ok();  // created, never written (Kafka)
  LineReader lines(bytes, file);
  auto version_line = lines.Next("version line");
  if (!version_line) return version_line.error();
  auto version = CheckpointNumber({*version_line, 0}, INT64_MAX, file, kRule, "version");
  if (!version) return version.error();
  if (*version != format::kCheckpointVersion)
    return Status::Corruption(file, 0, kRule,
                              fmt::format("version {}: only {} is defined (unsupported)", *version,
                                          format::kCheckpointVersion));
  auto count_line = lines.Next("entry count line");
  if (!count_line) return count_line.error();
  const uint64_t count_at = lines.line_start();
  auto count =
      CheckpointNumber({*count_line, count_at}, static_cast<int64_t>(format::kMaxCheckpointEntries),
                       file, kRule, "entry count");
  if (!count) return count.error();
  std::vector<CheckpointField> f;
  f.reserve(fields);
  for (int64_t i = 0; i < *count; ++i) {
    if (lines.done())
      return Status::Corruption(
          file, bytes.size(), kRule,
          fmt::format("the file ends after {} of {} entries (truncated)", i, *count));
    auto line = lines.Next("entry line");
    if (!line) return line.error();
    MQ_RETURN_IF_ERROR(SplitFields(*line, lines.line_start(), fields, file, &f));
    MQ_RETURN_IF_ERROR(entry(f));
  }
  if (!lines.done())
    return Status::Corruption(file, lines.position(), kRule,
                              fmt::format("{} bytes after the last of {} entries",
                                          bytes.size() - lines.position(), *count));
  return Status::Ok();
}

std::string FormatCheckpoint(const std::vector<std::string>& lines) {
  std::string out = fmt::format("{}\n{}\n", format::kCheckpointVersion, lines.size());
  for (const auto& l : lines) {
    out += l;
    out += format::kCheckpointLineEnd;
  }
  return out;
}

Result<std::string> ReadBoundedTextFile(FileSystem* fs, int dir_fd, const std::string& name,
                                        const std::string& path, uint64_t max_bytes,
                                        const char* rule, std::unique_ptr<File>* keep) {
  // Any size is opened: the limit is corruption, reported with the size.
  auto opened = OpenBounded(dir_fd, name, UINT64_MAX, fs);
  if (!opened) return opened.error();
  if (opened->size > max_bytes)
    return Status::Corruption(
        path, max_bytes, rule,
        fmt::format("{} bytes, more than the {} allowed", opened->size, max_bytes));
  // One byte more than the size: a file that grew since is seen as too
  // long by its parser rather than read in part.
  std::string text(static_cast<size_t>(opened->size) + 1, '\0');
  auto got = opened->file->ReadAt(0, std::as_writable_bytes(std::span<char>(text)));
  if (!got) return got.error();
  text.resize(*got);
  if (keep != nullptr) *keep = std::move(opened->file);
  return text;
}

Result<std::string> ReadCheckpointFile(FileSystem* fs, int dir_fd, const std::string& name,
                                       const std::string& path) {
  return ReadBoundedTextFile(fs, dir_fd, name, path, format::kMaxCheckpointBytes, kRule);
}

Status WriteCheckpointFile(FileSystem* fs, int dir_fd, const std::string& name,
                           const std::vector<std::string>& lines, bool sync) {
  const std::string text = FormatCheckpoint(lines);
  if (text.size() > format::kMaxCheckpointBytes)
    return Status(Code::kTooLarge,
                  fmt::format("{}: {} bytes, more than the {} a checkpoint may hold (R35)",
                              PathAt(dir_fd, name), text.size(), format::kMaxCheckpointBytes));
  return WriteFileAtomic(dir_fd, name, std::as_bytes(std::span<const char>(text)), fs, {}, sync);
}

Result<int> DecodeInPlaceCopies(
    std::span<const std::byte> bytes, const std::string& file, const InPlaceLayout& layout,
    const std::function<Status(int copy, const std::byte* p, uint64_t sequence,
                               const CopyBreach& bad)>& payload) {
  if (bytes.size() != layout.file_bytes)
    return Status::Corruption(
        file, bytes.size(), layout.rule,
        fmt::format("{} bytes, not {} (or 0)", bytes.size(), layout.file_bytes));
  bool whole[2] = {false, false};
  uint64_t sequence[2] = {0, 0};
  for (int c = 0; c < 2; ++c) {
    const size_t base = static_cast<size_t>(c) * layout.copy_bytes;
    const std::byte* p = bytes.data() + base;
    if (coding::GetFixed32(p + layout.checksum_offset) !=
        Crc32c(bytes.subspan(base, layout.checksum_offset)))
      continue;  // a write not finished: the other copy is current
    const CopyBreach bad = [&](size_t at, const std::string& what) {
      return Status::Corruption(file, base + at, layout.rule, fmt::format("copy {}: {}", c, what));
    };
    if (coding::GetFixed32(p) != layout.magic)
      return bad(0, fmt::format("magic {:#010x}", coding::GetFixed32(p)));
    if (coding::GetFixed32(p + 4) != layout.version)
      return bad(4, fmt::format("unknown version {}", coding::GetFixed32(p + 4)));
    sequence[c] = coding::GetFixed64(p + layout.sequence_offset);
    if (sequence[c] == 0 || sequence[c] > static_cast<uint64_t>(INT64_MAX))
      return bad(layout.sequence_offset, fmt::format("sequence {}", sequence[c]));
    MQ_RETURN_IF_ERROR(payload(c, p, sequence[c], bad));
    whole[c] = true;
  }
  if (!whole[0] && !whole[1])
    return Status::Corruption(file, layout.checksum_offset, layout.rule,
                              "neither copy's checksum matches its bytes");
  if (whole[0] && whole[1] && sequence[0] == sequence[1])
    return Status::Corruption(file, layout.copy_bytes + layout.sequence_offset, layout.rule,
                              fmt::format("both copies have sequence {}", sequence[0]));
  return !whole[1] || (whole[0] && sequence[0] > sequence[1]) ? 0 : 1;
}

Result<File*> NamedFile::Get(FileSystem* fs, int dir_fd, uint64_t* size) {
  auto now = fs->StatAt(dir_fd, name_);
  if (!now) {
    file_.reset();
    return now.error();
  }
  if (file_ && now->dev == info_.dev && now->ino == info_.ino) {
    *size = now->size;
    return file_.get();
  }
  file_.reset();
  auto opened = fs->Open(dir_fd, name_, mode_);
  if (!opened) return opened.error();
  auto info = (*opened)->StatAtOpen();
  if (!info) return info.error();
  file_ = std::move(*opened);
  info_ = *info;
  *size = info->size;
  return file_.get();
}

Result<std::optional<InPlaceBytes>> ReadInPlaceFile(FileSystem* fs, int dir_fd, const char* name,
                                                    uint64_t max_bytes, const char* rule,
                                                    const std::string& path, NamedFile* held) {
  if (fs == nullptr) fs = FileSystem::Default();
  Result<BoundedFile> opened = Status(Code::kNotFound, "");
  InPlaceBytes out;
  uint64_t size = 0;
  File* file = nullptr;
  if (held != nullptr) {
    auto got = held->Get(fs, dir_fd, &size);
    if (!got && got.error().code() == Code::kNotFound) return std::optional<InPlaceBytes>();
    if (!got) return got.error();
    file = *got;
    out.file = file;
  } else {
    opened = OpenBounded(dir_fd, name, max_bytes, fs);
    if (!opened && opened.error().code() == Code::kNotFound) return std::optional<InPlaceBytes>();
    if (!opened && opened.error().code() != Code::kTooLarge) return opened.error();
    if (opened) {
      file = opened->file.get();
      size = opened->size;
    } else {
      size = max_bytes + 1;
    }
  }
  if (size > max_bytes)
    return Status::Corruption(path.empty() ? PathAt(dir_fd, name) : path, max_bytes, rule,
                              fmt::format("more than {} bytes", max_bytes));
  out.data.resize(static_cast<size_t>(size));
  auto got = file->ReadAt(0, out.data);
  if (!got) return got.error();
  out.data.resize(*got);
  return std::optional<InPlaceBytes>(std::move(out));
}

}  // namespace mq
