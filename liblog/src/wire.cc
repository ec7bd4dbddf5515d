// The wire protocol (format-spec/protocol.md, mq/wire.h).
#include "mq/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "coding.h"
#include "format.h"
#include "mq/crc32c.h"
#include "mq/topic.h"

extern char** environ;

namespace mq::wire {

static_assert(kHeaderSize == 4 + 1 + 4, "§19.1: length, type, correlation");
static_assert(kMaxPayload == 67108864, "R48: 64 MiB");

namespace {

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

// ---- payload writer and reader (R51) ----------------------------------------

class Writer {
 public:
  Writer& U8(uint8_t v) {
    out_.push_back(std::byte{v});
    return *this;
  }
  Writer& U16(uint16_t v) {
    std::byte b[2];
    coding::PutFixed16(b, v);
    out_.insert(out_.end(), b, b + 2);
    return *this;
  }
  Writer& U32(uint32_t v) {
    std::byte b[4];
    coding::PutFixed32(b, v);
    out_.insert(out_.end(), b, b + 4);
    return *this;
  }
  Writer& I32(int32_t v) { return U32(static_cast<uint32_t>(v)); }
  Writer& I64(int64_t v) {
    std::byte b[8];
    coding::PutFixed64(b, static_cast<uint64_t>(v));
    out_.insert(out_.end(), b, b + 8);
    return *this;
  }
  Writer& Str(std::string_view s) {
    const size_t n = std::min<size_t>(s.size(), 0xFFFF);
    U16(static_cast<uint16_t>(n));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + n);
    return *this;
  }
  Writer& Bytes(std::span<const std::byte> b) {
    U32(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  Writer& List(const std::vector<int32_t>& ids) {
    U32(static_cast<uint32_t>(ids.size()));
    for (int32_t id : ids) I32(id);
    return *this;
  }
  std::vector<std::byte> Take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  Reader(std::span<const std::byte> p, const std::string& peer, const char* message)
      : p_(p), peer_(peer), message_(message) {}
  bool U8(uint8_t* v) {
    if (!Need(1, "a byte")) return false;
    *v = std::to_integer<uint8_t>(p_[pos_]);
    pos_ += 1;
    return true;
  }
  bool U16(uint16_t* v) {
    if (!Need(2, "a 16-bit field")) return false;
    *v = coding::GetFixed16(p_.data() + pos_);
    pos_ += 2;
    return true;
  }
  bool U32(uint32_t* v) {
    if (!Need(4, "a 32-bit field")) return false;
    *v = coding::GetFixed32(p_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool I32(int32_t* v) {
    uint32_t u;
    if (!U32(&u)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  // An i32 that must be >= `min`.
  bool I32Min(int32_t* v, int32_t min, const char* what) {
    const size_t at = pos_;
    return I32(v) && AtLeast(at, *v, min, what);
  }
  bool I64(int64_t* v) {
    if (!Need(8, "a 64-bit field")) return false;
    *v = static_cast<int64_t>(coding::GetFixed64(p_.data() + pos_));
    pos_ += 8;
    return true;
  }
  bool Str(std::string* s) {
    uint16_t n;
    if (!U16(&n)) return false;
    if (!Need(n, "a string's bytes")) return false;
    s->assign(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool Topic(std::string* s) {
    size_t at = pos_;
    if (!Str(s)) return false;
    if (Status v = ValidateName(*s, "topic"); !v.ok()) return Fail(at, v.message());
    return true;
  }
  // A u8 that is 0 or 1.
  bool Flag(bool* b, const char* what) {
    const size_t at = pos_;
    uint8_t v;
    if (!U8(&v)) return false;
    if (v > 1) return Fail(at, fmt::format("{} {} is neither 0 nor 1", what, v));
    *b = v == 1;
    return true;
  }
  // A name under the topic name rules (R12): a group, a producer id, or a
  // member id (which may also be empty).
  bool Name(std::string* s, const char* what, bool empty_ok = false) {
    size_t at = pos_;
    if (!Str(s)) return false;
    if (empty_ok && s->empty()) return true;
    if (Status v = ValidateName(*s, what); !v.ok()) return Fail(at, v.message());
    return true;
  }
  // A list's count, when each item takes at least `min_item` bytes.
  bool Count(uint32_t* n, size_t min_item, const char* what) {
    size_t at = pos_;
    if (!U32(n)) return false;
    if (*n > (p_.size() - pos_) / min_item)
      return Fail(at, fmt::format("{}: {} items do not fit", what, *n));
    return true;
  }
  // An i64 that must be >= `min`.
  bool I64Min(int64_t* v, int64_t min, const char* what) {
    const size_t at = pos_;
    return I64(v) && AtLeast(at, *v, min, what);
  }
  // The number read at `at` is >= `min`.
  bool AtLeast(size_t at, int64_t v, int64_t min, const char* what) {
    return v >= min || Fail(at, fmt::format("{} {} is below {}", what, v, min));
  }
  bool Bytes(std::vector<std::byte>* b) {
    uint32_t n;
    if (!U32(&n)) return false;
    if (!Need(n, "a byte field")) return false;
    b->assign(p_.begin() + static_cast<std::ptrdiff_t>(pos_),
              p_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return true;
  }
  // The same as Bytes without copying: a view into the payload.
  bool View(std::span<const std::byte>* b) {
    uint32_t n;
    if (!U32(&n)) return false;
    if (!Need(n, "a byte field")) return false;
    *b = p_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool List(std::vector<int32_t>* ids, const char* what) {
    uint32_t n;
    size_t at = pos_;
    if (!U32(&n)) return false;
    if (n > (p_.size() - pos_) / 4) return Fail(at, fmt::format("{}: {} ids do not fit", what, n));
    ids->clear();
    for (uint32_t i = 0; i < n; ++i) {
      int32_t id;
      if (!I32Min(&id, 0, what)) return false;
      ids->push_back(id);
    }
    return true;
  }
  // R51: nothing after the fields.
  Status Finish() {
    if (status_.ok() && pos_ != p_.size())
      Fail(pos_, fmt::format("{} bytes after the message's fields", p_.size() - pos_));
    return status_;
  }

 private:
  bool Need(size_t n, const char* what) {
    if (p_.size() - pos_ >= n) return true;
    return Fail(pos_, fmt::format("payload ends inside {}", what));
  }
  bool Fail(size_t at, std::string what) {
    if (status_.ok())
      status_ = Status::Corruption(peer_, at, "R51", fmt::format("{}: {}", message_, what));
    pos_ = p_.size();
    return false;
  }
  std::span<const std::byte> p_;
  const std::string& peer_;
  const char* message_;
  size_t pos_ = 0;
  Status status_;
};

template <typename T>
Result<T> Done(Reader& r, T value) {
  MQ_RETURN_IF_ERROR(r.Finish());
  return value;
}

// ---- descriptors with deadlines ----------------------------------------------

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Writes one frame whose payload is `body` then `tail` (R48) without
// copying them into one buffer: writev, and for a tail left in a file
// (`file`, its size not 0, in place of `tail`) sendfile(2) from there, the
// kernel moving the file's pages to `fd`; to a descriptor that takes no
// sendfile (EINVAL) the file's bytes are read and written. `tail_crc`: the
// CRC-32C of the tail when the caller has it (the frame's CRC continues
// from it; a file's bytes are read for it otherwise). `fd` is non-blocking:
// a full pipe is waited for, up to `timeout_ms` without progress.
Status WriteFrame(int fd, Type type, uint32_t correlation, std::span<const std::byte> body,
                  std::span<const std::byte> tail, int timeout_ms, const std::string& peer,
                  const std::atomic<bool>* stop, std::optional<uint32_t> tail_crc = std::nullopt,
                  FileBytes file = {}) {
  std::vector<std::byte> read_tail;
  if (file.size > 0 && !tail_crc) {
    // No CRC given: the bytes are read for it, and sent from memory.
    read_tail.resize(file.size);
    for (size_t at = 0; at < file.size;) {
      ssize_t n = pread(file.fd, read_tail.data() + at, file.size - at,
                        static_cast<off_t>(file.position + at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return Status(Code::kIoError, fmt::format("{}: reading the batches to send: {}", peer,
                                                  n < 0 ? strerror(errno) : "end of file"));
      at += static_cast<size_t>(n);
    }
    tail = read_tail;
    file = {};
  }
  const size_t tail_size = file.size > 0 ? file.size : tail.size();
  std::byte header[kHeaderSize], trailer[kTrailerSize];
  coding::PutFixed32(header, static_cast<uint32_t>(body.size() + tail_size));
  header[4] = std::byte{static_cast<uint8_t>(type)};
  coding::PutFixed32(header + 5, correlation);
  uint32_t crc = Crc32c(std::span<const std::byte>(header, kHeaderSize));
  crc = Crc32cExtend(crc, body);
  crc = tail_crc ? Crc32cCombine(crc, *tail_crc, tail_size) : Crc32cExtend(crc, tail);
  coding::PutFixed32(trailer, crc);
  const int64_t deadline = MonotonicMs() + timeout_ms;
  // After EAGAIN: waits until `fd` takes bytes, within the deadline.
  auto wait = [&]() -> Status {
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0 || (stop && stop->load()))
      return Status(Code::kUnavailable,
                    fmt::format("{}: no progress writing for {} ms (R52)", peer, timeout_ms));
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 200)));
    return Status::Ok();
  };
  auto failed = [&](const char* what) {
    return Status(Code::kUnavailable, fmt::format("{}: {}: {}", peer, what, strerror(errno)));
  };
  // Writes iov[0, count) whole.
  auto write_all = [&](iovec* iov, int count) -> Status {
    int first = 0;
    while (first < count) {
      if (iov[first].iov_len == 0) {
        ++first;
        continue;
      }
      ssize_t n = writev(fd, iov + first, count - first);
      if (n > 0) {
        auto left = static_cast<size_t>(n);
        while (first < count && left >= iov[first].iov_len) left -= iov[first++].iov_len;
        if (first < count) {
          iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + left;
          iov[first].iov_len -= left;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN) return failed("write");
      MQ_RETURN_IF_ERROR(wait());
    }
    return Status::Ok();
  };
  if (file.size == 0) {
    iovec iov[4] = {{header, kHeaderSize},
                    {const_cast<std::byte*>(body.data()), body.size()},
                    {const_cast<std::byte*>(tail.data()), tail.size()},
                    {trailer, kTrailerSize}};
    return write_all(iov, 4);
  }
  iovec head[2] = {{header, kHeaderSize}, {const_cast<std::byte*>(body.data()), body.size()}};
  MQ_RETURN_IF_ERROR(write_all(head, 2));
  off_t at = static_cast<off_t>(file.position);
  size_t left = file.size;
  std::vector<std::byte> bounce;  // without sendfile: the bytes read, then written
  while (left > 0) {
    if (bounce.empty()) {
      ssize_t n = sendfile(fd, file.fd, &at, std::min<size_t>(left, size_t{1} << 30));
      if (n > 0) {
        left -= static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        MQ_RETURN_IF_ERROR(wait());
        continue;
      }
      if (n < 0 && errno != EINVAL && errno != ENOSYS) return failed("sendfile");
      if (n == 0)  // the file was cut since its batches were read
        return Status(Code::kUnavailable,
                      fmt::format("{}: the batches being sent were cut from their file", peer));
      bounce.resize(std::min<size_t>(left, size_t{1} << 20));
    }
    ssize_t n = pread(file.fd, bounce.data(), std::min(left, bounce.size()), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("reading the batches to send");
    if (n == 0)
      return Status(Code::kUnavailable,
                    fmt::format("{}: the batches being sent were cut from their file", peer));
    iovec chunk{bounce.data(), static_cast<size_t>(n)};
    MQ_RETURN_IF_ERROR(write_all(&chunk, 1));
    at += n;
    left -= static_cast<size_t>(n);
  }
  iovec end{trailer, kTrailerSize};
  return write_all(&end, 1);
}

// Reads the next frame from the non-blocking `fd` within `timeout_ms` (-1:
// no limit), through `next` (FrameReader::Next or NextView). End of stream
// is kUnavailable ("closed"); `*clean_end` (when given) says whether it came
// between frames.
template <typename F, typename Next>
Result<F> ReadFrame(int fd, FrameReader& reader, int timeout_ms, const std::string& peer,
                    const std::atomic<bool>* stop, bool* clean_end, Next next) {
  const int64_t deadline = timeout_ms < 0 ? INT64_MAX : MonotonicMs() + timeout_ms;
  for (;;) {
    auto frame = next();
    if (!frame) return frame.error();
    if (*frame) return std::move(**frame);
    std::span<std::byte> space = reader.Space();
    ssize_t n = read(fd, space.data(), space.size());
    if (n > 0) {
      reader.Commit(static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      if (clean_end) *clean_end = reader.pending() == 0;
      return Status(Code::kUnavailable,
                    reader.pending() == 0
                        ? fmt::format("{}: connection closed", peer)
                        : fmt::format("{}: connection closed inside a frame at byte {}", peer,
                                      reader.position()));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN)
      return Status(Code::kUnavailable, fmt::format("{}: read: {}", peer, strerror(errno)));
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0)
      return Status(Code::kUnavailable,
                    fmt::format("{}: no response within {} ms (R52)", peer, timeout_ms));
    if (stop && stop->load()) return Status(Code::kUnavailable, "stopped");
    pollfd pfd{fd, POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 200)));
  }
}

}  // namespace

// ---- frames ---------------------------------------------------------------------

std::vector<std::byte> EncodeFrame(Type type, uint32_t correlation,
                                   std::span<const std::byte> payload) {
  std::vector<std::byte> out(kHeaderSize + payload.size() + kTrailerSize);
  coding::PutFixed32(out.data(), static_cast<uint32_t>(payload.size()));
  out[4] = std::byte{static_cast<uint8_t>(type)};
  coding::PutFixed32(out.data() + 5, correlation);
  std::copy(payload.begin(), payload.end(), out.begin() + kHeaderSize);
  const uint32_t crc = Crc32c(std::span<const std::byte>(out.data(), kHeaderSize + payload.size()));
  coding::PutFixed32(out.data() + kHeaderSize + payload.size(), crc);
  return out;
}

void FrameReader::Feed(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    std::span<std::byte> space = Space();
    const size_t n = std::min(space.size(), bytes.size());
    std::copy_n(bytes.begin(), n, space.begin());
    Commit(n);
    bytes = bytes.subspan(n);
  }
}

std::span<std::byte> FrameReader::Space() {
  constexpr size_t kMinRead = 64 << 10;
  if (begin_ == end_) begin_ = end_ = 0;
  if (capacity_ - end_ < kMinRead) {
    // Move what is held to the front, or grow (doubling: the buffer grows
    // with the bytes that arrived, never to a length it was only told, R48).
    const size_t held = end_ - begin_;
    if (begin_ > 0) std::memmove(buf_.get(), buf_.get() + begin_, held);
    if (capacity_ - held < kMinRead) {
      // realloc: a large buffer's pages are remapped, not copied and
      // touched again (a frame of 64 MiB grows through ten doublings).
      const size_t cap = std::max(capacity_ * 2, held + kMinRead);
      void* grown = std::realloc(buf_.get(), cap);
      if (!grown) throw std::bad_alloc();
      (void)buf_.release();
      buf_.reset(static_cast<std::byte*>(grown));
      capacity_ = cap;
    }
    begin_ = 0;
    end_ = held;
  }
  return std::span<std::byte>(buf_.get() + end_, capacity_ - end_);
}

uint32_t FetchReplyFrameCrc(std::span<const std::byte> frame, bool* batches_checked) {
  *batches_checked = false;
  // The frame's header and FetchReply's fields through the batches' length.
  constexpr size_t kHead = kHeaderSize + 4 + 8 + 8 + 8 + 4;
  if (frame.size() < kHead) return Crc32c(frame);
  const auto type = static_cast<Type>(std::to_integer<uint8_t>(frame[4]));
  if ((type != Type::kFetchReply && type != Type::kFetchAheadReply) ||
      coding::GetFixed32(frame.data() + kHead - 4) != frame.size() - kHead)
    return Crc32c(frame);
  uint32_t crc = Crc32c(frame.first(kHead));
  bool ok = true;
  size_t at = kHead;
  while (at < frame.size()) {
    const size_t rest = frame.size() - at;
    if (rest < format::kBatchHeaderSize) break;
    const auto length = static_cast<int32_t>(
        coding::GetFixed32(frame.data() + at + format::kBatchLengthOffset));
    if (length < static_cast<int32_t>(format::kBatchHeaderSize - format::kLogOverhead) ||
        static_cast<size_t>(length) > rest - format::kLogOverhead)
      break;
    const size_t size = format::kLogOverhead + static_cast<size_t>(length);
    const size_t covered = size - format::kAttributesOffset;  // what the batch's CRC covers
    crc = Crc32cExtend(crc, frame.subspan(at, format::kAttributesOffset));
    const uint32_t batch = Crc32c(frame.subspan(at + format::kAttributesOffset, covered));
    ok = ok && batch == coding::GetFixed32(frame.data() + at + format::kCrcOffset);
    crc = Crc32cExtendKnown(crc, frame.subspan(at + format::kAttributesOffset, covered), batch);
    at += size;
  }
  if (at < frame.size()) {  // not whole batches: hashed as they are
    ok = false;
    crc = Crc32cExtend(crc, frame.subspan(at));
  }
  *batches_checked = ok;
  return crc;
}

Result<std::optional<FrameView>> FrameReader::NextView(bool* batches_checked) {
  if (batches_checked) *batches_checked = false;
  const size_t have = end_ - begin_;
  if (have < 4) return std::optional<FrameView>();
  const std::byte* p = buf_.get() + begin_;
  const uint32_t n = coding::GetFixed32(p);
  if (n > kMaxPayload)
    return Status::Corruption(peer_, position_, "R48",
                              fmt::format("frame length {} is over {}", n, kMaxPayload));
  const size_t total = kHeaderSize + n + kTrailerSize;
  if (have < total) return std::optional<FrameView>();
  const uint32_t stored = coding::GetFixed32(p + kHeaderSize + n);
  const std::span<const std::byte> covered(p, kHeaderSize + n);
  bool checked = false;
  const uint32_t actual =
      batches_checked ? FetchReplyFrameCrc(covered, &checked) : Crc32c(covered);
  if (stored != actual)
    return Status::Corruption(
        peer_, position_, "R48",
        fmt::format("frame crc {:08x} but its bytes give {:08x}", stored, actual));
  if (batches_checked) *batches_checked = checked;
  FrameView f;
  f.type = static_cast<Type>(std::to_integer<uint8_t>(p[4]));
  f.correlation = coding::GetFixed32(p + 5);
  f.payload = std::span<const std::byte>(p + kHeaderSize, n);
  begin_ += total;
  position_ += total;
  return std::optional<FrameView>(f);
}

Result<std::optional<Frame>> FrameReader::Next() {
  auto view = NextView();
  if (!view) return view.error();
  if (!*view) return std::optional<Frame>();
  Frame f;
  f.type = (*view)->type;
  f.correlation = (*view)->correlation;
  f.payload.assign((*view)->payload.begin(), (*view)->payload.end());
  return std::optional<Frame>(std::move(f));
}

// ---- messages ---------------------------------------------------------------------

std::vector<std::byte> Encode(const Hello& m) {
  return Writer().U16(m.min_version).U16(m.max_version).Str(m.client).Take();
}
std::vector<std::byte> Encode(const HelloReply& m) {
  return Writer().U16(m.version).Str(m.server).Take();
}
std::vector<std::byte> Encode(const FetchMessage& m) {
  return Writer()
      .Str(m.topic)
      .I32(m.partition)
      .I32(m.request.replica)
      .I32(m.request.leader_epoch)
      .I64(m.request.fetch_offset)
      .U32(static_cast<uint32_t>(std::min<size_t>(m.request.max_bytes, kMaxPayload)))
      .U32(m.max_wait_ms)
      .Take();
}
std::vector<std::byte> EncodeFetchAhead(const FetchMessage& m) {
  std::vector<std::byte> out = Encode(m);
  std::vector<std::byte> held = Writer().I64(m.request.held_offset).Take();
  out.insert(out.end(), held.begin(), held.end());
  return out;
}
std::vector<std::byte> Encode(const FetchResponse& m) {
  std::vector<std::byte> out = EncodeFetchReplyHead(m);
  if (m.file.size > 0) {  // the batches read from their file
    const size_t head = out.size();
    out.resize(head + m.file.size);
    for (size_t at = 0; at < m.file.size;) {
      ssize_t n = pread(m.file.fd, out.data() + head + at, m.file.size - at,
                        static_cast<off_t>(m.file.position + at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // short: a payload whose length breaks R51 at its reader
        out.resize(head + at);
        break;
      }
      at += static_cast<size_t>(n);
    }
    return out;
  }
  const auto batches = m.data();
  out.insert(out.end(), batches.begin(), batches.end());
  return out;
}
std::vector<std::byte> EncodeFetchReplyHead(const FetchResponse& m) {
  return Writer()
      .I32(m.leader_epoch)
      .I64(m.high_watermark)
      .I64(m.log_start_offset)
      .I64(m.log_end_offset)
      .U32(static_cast<uint32_t>(m.file.size > 0 ? m.file.size : m.data().size()))
      .Take();
}
std::vector<std::byte> Encode(const OffsetForLeaderEpochMessage& m) {
  return Writer().Str(m.topic).I32(m.partition).I32(m.leader_epoch).I32(m.requested_epoch).Take();
}
std::vector<std::byte> Encode(const EpochEndOffset& m) {
  return Writer().I32(m.epoch).I64(m.end_offset).Take();
}
std::vector<std::byte> Encode(const PartitionRef& m) {
  return Writer().Str(m.topic).I32(m.partition).Take();
}
std::vector<std::byte> Encode(const CarryStateReply& m) {
  Writer w;
  w.U32(static_cast<uint32_t>(m.offsets.size()));
  for (const CarriedOffset& o : m.offsets) {
    w.Str(o.group)
        .I64(o.committed.offset)
        .I32(o.committed.leader_epoch)
        .I64(o.committed.commit_timestamp)
        .Str(o.committed.member_id)
        .I64(o.committed.dead_letters);
  }
  w.U32(static_cast<uint32_t>(m.producers.size()));
  for (const CarriedProducer& p : m.producers) w.Str(p.name).I64(p.id);
  return w.I64(m.next_producer_id).Take();
}
std::vector<std::byte> Encode(const ReplicaStatusReply& m) {
  return Writer()
      .I64(m.log_start_offset)
      .I64(m.log_end_offset)
      .I64(m.high_watermark)
      .I32(m.latest_epoch)
      .U8(m.restarted_since_claim ? 1 : 0)
      .Take();
}
std::vector<std::byte> Encode(const AlterPartitionMessage& m) {
  const PartitionState& p = m.proposed;
  return Writer()
      .Str(p.topic)
      .I32(p.partition)
      .I32(p.leader)
      .I32(p.leader_epoch)
      .I32(p.partition_epoch)
      .List(p.isr)
      .Str(m.reason)
      .Take();
}
std::vector<std::byte> EncodeAlterPartitionReply(const PartitionState& p) {
  return Writer()
      .I32(p.leader)
      .I32(p.leader_epoch)
      .I32(p.partition_epoch)
      .List(p.isr)
      .List(p.replicas)
      .Take();
}
std::vector<std::byte> EncodeLoadStateReply(std::string_view state) {
  return Writer()
      .Bytes(std::span<const std::byte>(reinterpret_cast<const std::byte*>(state.data()),
                                        state.size()))
      .Take();
}
std::vector<std::byte> EncodeProducerId(std::string_view name) {
  return Writer().Str(name).Take();
}
std::vector<std::byte> EncodeProducerIdReply(int64_t id) { return Writer().I64(id).Take(); }
std::vector<std::byte> Encode(const ReadLogMessage& m) {
  return Writer().Str(m.topic).I32(m.partition).I64(m.offset).U32(m.max_bytes).Take();
}
namespace {
// A corruption's "what": its message without "file: position N: rule: ".
std::string WhatOf(const Status& e) {
  const std::string prefix = fmt::format("{}: position {}: {}: ", e.file(), e.position(), e.rule());
  std::string what = e.message();
  if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
  return what;
}
// R63's corruption fields: file (a name in the partition directory),
// position, rule and what; all empty for OK.
void PutCorruption(Writer& w, const Status& e) {
  const bool none = e.ok() || e.code() != Code::kCorruption;
  const std::string file = none ? "" : e.file().substr(e.file().find_last_of('/') + 1);
  w.Str(file).I64(none ? 0 : static_cast<int64_t>(e.position())).Str(none ? "" : e.rule()).Str(
      none ? "" : WhatOf(e));
}
}  // namespace
std::vector<std::byte> Encode(const LogChunk& m) {
  Writer w;
  w.I64(m.log_start_offset).I64(m.log_end_offset).I64(m.high_watermark).Str(m.file).I64(
      static_cast<int64_t>(m.position));
  w.Bytes(m.batches);
  PutCorruption(w, m.stop);  // what the read stopped at
  return w.Take();
}
std::vector<std::byte> Encode(const ReplicaCheckMessage& m) {
  return Writer().Str(m.topic).I32(m.partition).U8(m.verify ? 1 : 0).Take();
}
std::vector<std::byte> Encode(const ReplicaCheckReply& m) {
  Writer w;
  w.I64(m.stop ? m.stop->stopped_ms : -1).I32(m.stop ? m.stop->exit_status : 0);
  PutCorruption(w, m.damage);
  w.U32(static_cast<uint32_t>(m.positions.size()));
  for (const FollowerPosition& f : m.positions)
    w.I32(f.replica)
        .I32(f.leader_epoch)
        .I64(f.log_end_offset)
        .I64(f.last_fetch_ms)
        .I64(f.last_caught_up_ms)
        .I64(f.last_fetch_leader_leo);
  return w.Take();
}
std::vector<std::byte> EncodeError(const Status& s) {
  return Writer().U8(ErrorCodeOf(s.code())).Str(s.message()).Take();
}

Result<Hello> DecodeHello(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "Hello");
  Hello m;
  r.U16(&m.min_version) && r.U16(&m.max_version) && r.Str(&m.client);
  return Done(r, std::move(m));
}
Result<HelloReply> DecodeHelloReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "HelloReply");
  HelloReply m;
  r.U16(&m.version) && r.Str(&m.server);
  return Done(r, std::move(m));
}
namespace {
bool FetchFields(Reader& r, FetchMessage* m) {
  uint32_t max_bytes = 0;
  const bool ok = r.Topic(&m->topic) && r.I32Min(&m->partition, 0, "partition") &&
                  r.I32Min(&m->request.replica, 0, "replica") &&
                  r.I32Min(&m->request.leader_epoch, 0, "leader epoch") &&
                  r.I64(&m->request.fetch_offset) && r.U32(&max_bytes) && r.U32(&m->max_wait_ms);
  m->request.max_bytes = std::min<size_t>(max_bytes, kMaxPayload - 64);
  m->max_wait_ms = std::min(m->max_wait_ms, kMaxWaitMs);
  return ok;
}
}  // namespace

Result<FetchMessage> DecodeFetch(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "Fetch");
  FetchMessage m;
  FetchFields(r, &m);
  return Done(r, std::move(m));
}
Result<FetchMessage> DecodeFetchAhead(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "FetchAhead");
  FetchMessage m;
  const size_t at = p.size() >= 8 ? p.size() - 8 : 0;  // heldOffset's position
  FetchFields(r, &m) && r.I64Min(&m.request.held_offset, 0, "held offset") &&
      r.AtLeast(at, m.request.fetch_offset, m.request.held_offset, "fetch offset");
  return Done(r, std::move(m));
}
Result<FetchResponse> DecodeFetchReply(std::span<const std::byte> p, const std::string& peer,
                                       bool borrow) {
  Reader r(p, peer, "FetchReply");
  FetchResponse m;
  r.I32(&m.leader_epoch) && r.I64(&m.high_watermark) && r.I64(&m.log_start_offset) &&
      r.I64(&m.log_end_offset) && (borrow ? r.View(&m.borrowed) : r.Bytes(&m.batches));
  return Done(r, std::move(m));
}
Result<OffsetForLeaderEpochMessage> DecodeOffsetForLeaderEpoch(std::span<const std::byte> p,
                                                               const std::string& peer) {
  Reader r(p, peer, "OffsetForLeaderEpoch");
  OffsetForLeaderEpochMessage m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition") &&
      r.I32Min(&m.leader_epoch, 0, "leader epoch") && r.I32(&m.requested_epoch);
  return Done(r, std::move(m));
}
Result<EpochEndOffset> DecodeOffsetForLeaderEpochReply(std::span<const std::byte> p,
                                                       const std::string& peer) {
  Reader r(p, peer, "OffsetForLeaderEpochReply");
  EpochEndOffset m;
  r.I32(&m.epoch) && r.I64(&m.end_offset);
  return Done(r, m);
}
Result<PartitionRef> DecodePartitionRef(std::span<const std::byte> p, const std::string& peer,
                                        const char* message) {
  Reader r(p, peer, message);
  PartitionRef m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition");
  return Done(r, std::move(m));
}
Result<CarryStateReply> DecodeCarryStateReply(std::span<const std::byte> p,
                                              const std::string& peer, const std::string& topic,
                                              int32_t partition) {
  Reader r(p, peer, "CarryStateReply");
  CarryStateReply m;
  uint32_t n = 0;
  bool ok = r.Count(&n, 2 + 8 + 4 + 8 + 2 + 8, "offsets");
  for (uint32_t i = 0; ok && i < n; ++i) {
    CarriedOffset o;
    o.committed.topic = topic;
    o.committed.partition = partition;
    ok = r.Name(&o.group, "group") && r.I64Min(&o.committed.offset, 0, "offset") &&
         r.I32(&o.committed.leader_epoch) && r.I64(&o.committed.commit_timestamp) &&
         r.Name(&o.committed.member_id, "member id", true) &&
         r.I64Min(&o.committed.dead_letters, 0, "dead letters");
    if (ok) m.offsets.push_back(std::move(o));
  }
  ok = ok && r.Count(&n, 2 + 8, "producers");
  for (uint32_t i = 0; ok && i < n; ++i) {
    CarriedProducer c;
    ok = r.Name(&c.name, "producer id") && r.I64Min(&c.id, 0, "producer id number");
    if (ok) m.producers.push_back(std::move(c));
  }
  ok && r.I64Min(&m.next_producer_id, -1, "next producer id");
  return Done(r, std::move(m));
}
Result<ReplicaStatusReply> DecodeReplicaStatusReply(std::span<const std::byte> p,
                                                    const std::string& peer) {
  Reader r(p, peer, "ReplicaStatusReply");
  ReplicaStatusReply m;
  r.I64(&m.log_start_offset) && r.I64(&m.log_end_offset) && r.I64(&m.high_watermark) &&
      r.I32(&m.latest_epoch) && r.Flag(&m.restarted_since_claim, "restartedSinceClaim");
  return Done(r, m);
}
Result<ReadLogMessage> DecodeReadLog(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ReadLog");
  ReadLogMessage m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition") && r.I64Min(&m.offset, -1, "offset") &&
      r.U32(&m.max_bytes);
  m.max_bytes = std::min<uint32_t>(m.max_bytes, kMaxPayload - 1024);
  return Done(r, std::move(m));
}
namespace {
struct CorruptionFields {
  std::string file, rule, what;
  int64_t position = 0;
  bool Read(Reader& r) {
    return r.Name(&file, "file", true) && r.I64Min(&position, 0, "position") &&
           r.Name(&rule, "rule", true) && r.Str(&what);
  }
  // `*out`: the status they give (R63), OK when empty; a file or message
  // without a rule breaks R51 (returned).
  Status Get(const std::string& peer, const char* message, Status* out) const {
    if (!rule.empty()) {
      *out = Status::Corruption(file, static_cast<uint64_t>(position), rule, what);
      return Status::Ok();
    }
    if (!what.empty() || !file.empty())
      return Status::Corruption(peer, 0, "R51",
                                fmt::format("{}: a corruption without its rule", message));
    *out = Status::Ok();
    return Status::Ok();
  }
};
}  // namespace
Result<LogChunk> DecodeReadLogReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ReadLogReply");
  LogChunk m;
  int64_t position = 0;
  CorruptionFields stop;
  r.I64Min(&m.log_start_offset, 0, "log start offset") &&
      r.I64Min(&m.log_end_offset, 0, "log end offset") &&
      r.I64Min(&m.high_watermark, -1, "high watermark") && r.Name(&m.file, "file", true) &&
      r.I64Min(&position, 0, "position") && r.Bytes(&m.batches) && stop.Read(r);
  auto done = Done(r, std::move(m));
  if (!done) return done;
  done->position = static_cast<uint64_t>(position);
  MQ_RETURN_IF_ERROR(stop.Get(peer, "ReadLogReply", &done->stop));
  return done;
}
Result<ReplicaCheckMessage> DecodeReplicaCheck(std::span<const std::byte> p,
                                               const std::string& peer) {
  Reader r(p, peer, "ReplicaCheck");
  ReplicaCheckMessage m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition") && r.Flag(&m.verify, "verify");
  return Done(r, std::move(m));
}
Result<ReplicaCheckReply> DecodeReplicaCheckReply(std::span<const std::byte> p,
                                                  const std::string& peer) {
  Reader r(p, peer, "ReplicaCheckReply");
  int64_t stopped_ms = -1;
  int32_t exit_status = 0;
  CorruptionFields damage;
  ReplicaCheckReply m;
  uint32_t n = 0;
  bool ok = r.I64Min(&stopped_ms, -1, "stoppedMs") && r.I32(&exit_status) && damage.Read(r) &&
            r.Count(&n, 4 + 4 + 8 * 4, "positions");
  // R47's entries: its ranges, a replica at most once.
  for (uint32_t i = 0; ok && i < n; ++i) {
    FollowerPosition f;
    ok = r.I32Min(&f.replica, 0, "replica") && r.I32Min(&f.leader_epoch, 0, "leader epoch") &&
         r.I64Min(&f.log_end_offset, 0, "log end offset") &&
         r.I64Min(&f.last_fetch_ms, 0, "last fetch") &&
         r.I64Min(&f.last_caught_up_ms, 0, "last caught up") &&
         r.I64Min(&f.last_fetch_leader_leo, 0, "leader log end");
    for (const FollowerPosition& seen : m.positions)
      if (ok && seen.replica == f.replica)
        return Status::Corruption(peer, 0, "R51",
                                  fmt::format("ReplicaCheckReply: replica {} appears twice "
                                              "in its positions",
                                              f.replica));
    if (ok) m.positions.push_back(f);
  }
  if (stopped_ms >= 0) m.stop = FollowerStop{stopped_ms, exit_status};
  auto done = Done(r, std::move(m));
  if (!done) return done;
  MQ_RETURN_IF_ERROR(damage.Get(peer, "ReplicaCheckReply", &done->damage));
  return done;
}
Result<AlterPartitionMessage> DecodeAlterPartition(std::span<const std::byte> p,
                                                   const std::string& peer) {
  Reader r(p, peer, "AlterPartition");
  AlterPartitionMessage m;
  PartitionState& s = m.proposed;
  r.Topic(&s.topic) && r.I32Min(&s.partition, 0, "partition") &&
      r.I32Min(&s.leader, -1, "leader") && r.I32Min(&s.leader_epoch, 0, "leader epoch") &&
      r.I32Min(&s.partition_epoch, 0, "partition epoch") && r.List(&s.isr, "isr") &&
      r.Str(&m.reason);
  return Done(r, std::move(m));
}
Result<PartitionState> DecodeAlterPartitionReply(std::span<const std::byte> p,
                                                 const std::string& peer,
                                                 const std::string& topic, int32_t partition) {
  Reader r(p, peer, "AlterPartitionReply");
  PartitionState s;
  s.topic = topic;
  s.partition = partition;
  r.I32Min(&s.leader, -1, "leader") && r.I32Min(&s.leader_epoch, 0, "leader epoch") &&
      r.I32Min(&s.partition_epoch, 0, "partition epoch") && r.List(&s.isr, "isr") &&
      r.List(&s.replicas, "replicas");
  return Done(r, std::move(s));
}
Result<std::string> DecodeLoadStateReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "LoadStateReply");
  std::vector<std::byte> b;
  r.Bytes(&b);
  return Done(r, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
}
Result<std::string> DecodeProducerId(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ProducerId");
  std::string name;
  r.Name(&name, "producer id");
  return Done(r, std::move(name));
}
Result<int64_t> DecodeProducerIdReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ProducerIdReply");
  int64_t id = -1;
  r.I64Min(&id, 0, "producer id");
  return Done(r, id);
}
Status DecodeError(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "Error");
  uint8_t code = 0;
  std::string message;
  r.U8(&code) && r.Str(&message);
  MQ_RETURN_IF_ERROR(r.Finish());
  return Status(CodeOfError(code), fmt::format("{}: {}", peer, message));
}

namespace {
constexpr std::pair<uint8_t, Code> kErrorCodes[] = {
    {1, Code::kInvalidArgument}, {2, Code::kNotFound},    {3, Code::kCorruption},
    {4, Code::kUnsupported},     {5, Code::kIoError},     {6, Code::kBusy},
    {7, Code::kOutOfOrder},      {8, Code::kFenced},      {9, Code::kUnavailable},
    {10, Code::kTimedOut},       {11, Code::kInternal},
};
}  // namespace

uint8_t ErrorCodeOf(Code code) {
  for (auto [wire, c] : kErrorCodes)
    if (c == code) return wire;
  return 11;
}
Code CodeOfError(uint8_t code) {
  for (auto [wire, c] : kErrorCodes)
    if (wire == code) return c;
  return Code::kInternal;
}

// ---- connections ---------------------------------------------------------------

Result<std::unique_ptr<Connection>> Connection::Start(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status(Code::kInvalidArgument, "no command to start");
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0)
    return Status(Code::kIoError, fmt::format("pipe: {}", strerror(errno)));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    int e = errno;
    close(to_child[0]);
    close(to_child[1]);
    return Status(Code::kIoError, fmt::format("pipe: {}", strerror(e)));
  }
  // 1 MiB pipes where allowed: fewer wakeups for fetched batches.
  fcntl(from_child[1], F_SETPIPE_SZ, 1 << 20);
  fcntl(to_child[1], F_SETPIPE_SZ, 1 << 16);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(to_child[0]);
  close(from_child[1]);
  if (rc != 0) {
    close(to_child[1]);
    close(from_child[0]);
    return Status(Code::kUnavailable, fmt::format("{}: {}", argv[0], strerror(rc)));
  }
  auto c = std::unique_ptr<Connection>(new Connection());
  c->write_fd_ = to_child[1];
  c->read_fd_ = from_child[0];
  c->pid_ = pid;
  c->command_ = argv[0];
  SetNonBlocking(c->write_fd_);
  SetNonBlocking(c->read_fd_);
  return c;
}

std::unique_ptr<Connection> Connection::Adopt(int write_fd, int read_fd) {
  auto c = std::unique_ptr<Connection>(new Connection());
  c->write_fd_ = write_fd;
  c->read_fd_ = read_fd;
  SetNonBlocking(write_fd);
  SetNonBlocking(read_fd);
  return c;
}

Connection::~Connection() {
  if (write_fd_ >= 0) close(write_fd_);
  if (read_fd_ >= 0 && read_fd_ != write_fd_) close(read_fd_);
  if (pid_ > 0) {
    // The server ends at end of input; one that does not (a stalled relay,
    // a hung ssh) is ended.
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string Connection::ExitNote() {
  if (pid_ <= 0) return "";
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;  // reaped: the destructor has nobody to end
      if (WIFEXITED(status))
        return fmt::format("`{}` exited with status {}", command_, WEXITSTATUS(status));
      return fmt::format("`{}` was killed by signal {}", command_, WTERMSIG(status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return "";
}

// ---- client -------------------------------------------------------------------------

Client::Client(Connect connect, std::string peer, Options options)
    : connect_(std::move(connect)), peer_(std::move(peer)), options_(std::move(options)) {}

void Client::Drop() {
  conn_.reset();
  // The last reply's payload stays valid until the next Call or Collect: a
  // Post that fails drops the connection while its caller still uses the
  // reply before it (a FetchReply's batches borrowed from this buffer, R62).
  if (reader_) spent_ = std::move(reader_);
  posted_.reset();
}

Status Client::Send(Type type, std::span<const std::byte> payload) {
  return WriteFrame(conn_->write_fd(), type, next_correlation_, payload, {}, options_.timeout_ms,
                    peer_, nullptr);
}

Result<FrameView> Client::Receive(int timeout_ms, bool* batches_checked) {
  FrameReader& r = *reader_;
  auto f = ReadFrame<FrameView>(conn_->read_fd(), r, timeout_ms, peer_, nullptr, nullptr,
                                [&r, batches_checked] { return r.NextView(batches_checked); });
  if (!f) return f.error();
  if (f->correlation != next_correlation_)  // R50
    return Status::Corruption(peer_, reader_->position(), "R50",
                              fmt::format("response to request {} while waiting for {}",
                                          f->correlation, next_correlation_));
  return f;
}

Status Client::Handshake() {
  auto conn = connect_();
  if (!conn) return conn.error();
  ++connects_;
  conn_ = std::move(*conn);
  reader_ = std::make_unique<FrameReader>(peer_);
  next_correlation_ = 0;
  Hello hello;
  hello.max_version = options_.max_version;
  hello.client = options_.name;
  auto payload = Encode(hello);
  MQ_RETURN_IF_ERROR(Send(Type::kHello, payload));
  auto reply = Receive(options_.timeout_ms);
  if (!reply) return reply.error();
  ++next_correlation_;
  if (reply->type == Type::kError) return DecodeError(reply->payload, peer_);
  if (reply->type != Type::kHelloReply)
    return Status::Corruption(peer_, 0, "R49", "the first response is not HelloReply");
  auto r = DecodeHelloReply(reply->payload, peer_);
  if (!r) return r.error();
  if (r->version < hello.min_version || r->version > hello.max_version)
    return Status(Code::kUnsupported,
                  fmt::format("{}: speaks wire protocol version {}, not {}-{} (R49)", peer_,
                              r->version, hello.min_version, hello.max_version));
  version_ = r->version;
  last_used_ms_ = MonotonicMs();
  return Status::Ok();
}

Result<std::span<const std::byte>> Client::CallLocked(Type type,
                                                      std::span<const std::byte> payload,
                                                      int timeout_ms, bool* batches_checked) {
  if (!conn_) MQ_RETURN_IF_ERROR(Handshake());
  if ((type == Type::kReadLog || type == Type::kReplicaCheck) &&
      version_ < kReadReplicaVersion) {
    // Never sent: to a server of version 1 it is no request (R50, R63).
    answered_ = true;
    return Status(Code::kUnsupported,
                  fmt::format("{}: speaks wire protocol version {}: {} needs version 2 "
                              "(an mq-replicate that reads replicas for comparison, R63)",
                              peer_, version_,
                              type == Type::kReadLog ? "ReadLog" : "ReplicaCheck"));
  }
  if (posted_) {
    // The response to a posted request nobody collects: read and dropped
    // (R62), unless it breaches the protocol.
    const Type posted = *posted_;
    posted_.reset();
    auto dropped = AwaitLocked(posted, timeout_ms);
    if (!dropped && !answered_) return dropped.error();
    answered_ = false;
  }
  MQ_RETURN_IF_ERROR(Send(type, payload));
  return AwaitLocked(type, timeout_ms, batches_checked);
}

Result<std::span<const std::byte>> Client::AwaitLocked(Type type, int timeout_ms,
                                                       bool* batches_checked) {
  auto reply = Receive(timeout_ms, batches_checked);
  if (!reply) return reply.error();
  ++next_correlation_;
  last_used_ms_ = MonotonicMs();
  if (reply->type == Type::kError) {
    // The server answered: the conversation goes on, unless it said that
    // our request breached the protocol (then it has ended).
    Status s = DecodeError(reply->payload, peer_);
    answered_ = s.code() != Code::kCorruption;
    return s;
  }
  const auto want = static_cast<Type>(static_cast<uint8_t>(type) | kReplyBit);
  if (reply->type != want)
    return Status::Corruption(peer_, reader_->position(), "R50",
                              fmt::format("response type 0x{:02x} to request type 0x{:02x}",
                                          static_cast<uint8_t>(reply->type),
                                          static_cast<uint8_t>(type)));
  return reply->payload;
}

Result<std::span<const std::byte>> Client::Call(Type type, std::span<const std::byte> payload,
                                                int extra_wait_ms, bool* batches_checked) {
  std::lock_guard lock(mu_);
  spent_.reset();  // the previous reply is no longer used
  if (conn_ && MonotonicMs() - last_used_ms_ > kPingAfterIdleMs) {
    auto pong = CallLocked(Type::kPing, {}, options_.timeout_ms);
    if (!pong) Drop();  // found dead (or answered oddly): start again below
  }
  answered_ = false;
  auto r = CallLocked(type, payload, options_.timeout_ms + extra_wait_ms, batches_checked);
  if (!r && !answered_) return Failed(r.error());
  return r;
}

Status Client::Failed(const Status& s) {
  // A timeout, end of stream, breach or failed start leaves the
  // conversation in an unknown state: it starts again at the next call
  // (R50, R52). To the caller the peer is unavailable; a server process
  // that ended says how (a failed ssh, a missing program).
  const std::string note = conn_ ? conn_->ExitNote() : "";
  Drop();
  const std::string why = note.empty() ? "" : fmt::format(" ({})", note);
  if (s.code() != Code::kUnavailable)
    return Status(Code::kUnavailable, fmt::format("connection dropped: {}{}", s.message(), why));
  if (!why.empty()) return Status(Code::kUnavailable, s.message() + why);
  return s;
}

Result<uint64_t> Client::Post(Type type, std::span<const std::byte> payload) {
  std::lock_guard lock(mu_);
  answered_ = false;
  Status s = [&]() -> Status {
    if (!conn_) MQ_RETURN_IF_ERROR(Handshake());
    if (posted_) return Status(Code::kInternal, "a posted request is still unanswered");
    return Send(type, payload);
  }();
  if (!s.ok()) return Failed(s);
  posted_ = type;
  return ++posts_;
}

Result<std::span<const std::byte>> Client::Collect(int extra_wait_ms, bool* batches_checked) {
  std::lock_guard lock(mu_);
  spent_.reset();  // the previous reply is no longer used
  if (!posted_) return Status(Code::kInternal, "no posted request to collect");
  const Type type = *posted_;
  posted_.reset();
  answered_ = false;
  auto r = AwaitLocked(type, options_.timeout_ms + extra_wait_ms, batches_checked);
  if (!r && !answered_) return Failed(r.error());
  return r;
}

namespace {

class WireLink : public LeaderLink {
 public:
  WireLink(std::shared_ptr<Client> client, std::string topic, int32_t partition, uint32_t wait)
      : client_(std::move(client)), topic_(std::move(topic)), partition_(partition), wait_(wait) {}
  Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                              int32_t requested_epoch) override {
    OffsetForLeaderEpochMessage m{topic_, partition_, leader_epoch, requested_epoch};
    auto reply = client_->Call(Type::kOffsetForLeaderEpoch, Encode(m));
    if (!reply) return reply.error();
    return DecodeOffsetForLeaderEpochReply(*reply, client_->peer());
  }
  Result<FetchResponse> Fetch(const FetchRequest& request) override {
    // The batches' CRCs are checked in the pass that checks the frame's.
    bool checked = false;
    if (lost_) {
      // The fetch sent ahead found the connection gone: this fetch fails as
      // it would have (the next call starts a new conversation).
      Status s = std::move(*lost_);
      lost_.reset();
      return s;
    }
    Result<std::span<const std::byte>> reply = Status::Ok();
    if (ahead_ && client_->posted(ahead_serial_) && Same(*ahead_, request)) {
      // Asked for ahead while the previous batches were appended (R62).
      reply = client_->Collect(0, &checked);
    } else {
      // A posted request for anything else is read and dropped first.
      FetchMessage m{topic_, partition_, request, wait_};
      reply = client_->Call(Type::kFetch, Encode(m), static_cast<int>(wait_), &checked);
    }
    ahead_.reset();
    if (!reply) return reply.error();
    // The batches stay in the client's buffer until its next call: the
    // follower appends them before it calls again.
    auto r = DecodeFetchReply(*reply, client_->peer(), /*borrow=*/true);
    if (!r) return r;
    r->batches_checked = checked;
    Ahead(request, *r);
    return r;
  }

 private:
  static bool Same(const FetchRequest& a, const FetchRequest& b) {
    return a.replica == b.replica && a.leader_epoch == b.leader_epoch &&
           a.fetch_offset == b.fetch_offset && a.max_bytes == b.max_bytes &&
           a.held_offset == b.held_offset;
  }

  // R62: when the leader holds more than `r` brings, the next fetch is sent
  // now, before the follower appends `r`: the leader reads and sends it
  // meanwhile. Its position stays what the follower holds (`request`'s
  // fetch offset); a follower that does not ask for it next drops it.
  void Ahead(const FetchRequest& request, const FetchResponse& r) {
    if (client_->version() < kFetchAheadVersion || !r.batches_checked) return;
    const auto data = r.data();
    if (data.empty()) return;
    // The offset after the last batch (whole batches: checked above).
    size_t at = 0, last = 0;
    while (at + format::kBatchHeaderSize <= data.size()) {
      last = at;
      at += format::kLogOverhead +
            static_cast<uint32_t>(coding::GetFixed32(data.data() + at + format::kBatchLengthOffset));
    }
    if (at != data.size()) return;
    const int64_t next =
        static_cast<int64_t>(coding::GetFixed64(data.data() + last + format::kBaseOffsetOffset)) +
        static_cast<int32_t>(coding::GetFixed32(data.data() + last + format::kLastOffsetDeltaOffset)) +
        1;
    if (next <= request.fetch_offset || next >= r.log_end_offset) return;
    FetchRequest ahead = request;
    ahead.fetch_offset = next;
    ahead.held_offset = request.fetch_offset;
    FetchMessage m{topic_, partition_, ahead, 0};
    auto serial = client_->Post(Type::kFetchAhead, EncodeFetchAhead(m));
    if (!serial) {
      lost_ = serial.error();
      return;
    }
    // What the follower's next fetch asks for once it appended `r`.
    ahead.held_offset = -1;
    ahead_ = ahead;
    ahead_serial_ = *serial;
  }

  std::shared_ptr<Client> client_;
  std::string topic_;
  int32_t partition_;
  uint32_t wait_;
  std::optional<Status> lost_;  // a fetch sent ahead that could not be sent
  std::optional<FetchRequest> ahead_;  // what a posted FetchAhead answers
  uint64_t ahead_serial_ = 0;          // its Client::Post serial
};

// The threads of one process share it (mq-replicate --follow: a topic's
// partitions, each on a thread of its own, reach the controller through
// one store): a reply's payload is the client's buffer, valid only until
// the client's next call, so each call is decoded before another thread
// calls (mu_).
class WireStore : public ClusterStore {
 public:
  explicit WireStore(std::shared_ptr<Client> client) : client_(std::move(client)) {}
  Result<ClusterState> Load() override {
    std::lock_guard lock(mu_);
    auto reply = client_->Call(Type::kLoadState, {});
    if (!reply) return reply.error();
    auto text = DecodeLoadStateReply(*reply, client_->peer());
    if (!text) return text.error();
    return ClusterState::Parse(*text, client_->peer() + ": cluster-state");
  }
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override {
    AlterPartitionMessage m{proposed, std::string(reason)};
    std::lock_guard lock(mu_);
    auto reply = client_->Call(Type::kAlterPartition, Encode(m));
    if (!reply) return reply.error();
    return DecodeAlterPartitionReply(*reply, client_->peer(), proposed.topic, proposed.partition);
  }
  Result<int64_t> ProducerId(std::string_view name) override {
    // Refused here, as the file store refuses it: sent, it would be an R51
    // breach that ends the conversation.
    MQ_RETURN_IF_ERROR(ValidateName(name, "producer id"));
    std::lock_guard lock(mu_);
    auto reply = client_->Call(Type::kProducerId, EncodeProducerId(name));
    if (!reply) return reply.error();
    return DecodeProducerIdReply(*reply, client_->peer());
  }

 private:
  std::shared_ptr<Client> client_;
  std::mutex mu_;  // from a call to its reply decoded
};

}  // namespace

std::unique_ptr<LeaderLink> RemoteLeaderLink(std::shared_ptr<Client> client, std::string topic,
                                             int32_t partition, uint32_t max_wait_ms) {
  return std::make_unique<WireLink>(std::move(client), std::move(topic), partition,
                                    std::min(max_wait_ms, kMaxWaitMs));
}

std::unique_ptr<ClusterStore> RemoteClusterStore(std::shared_ptr<Client> client) {
  return std::make_unique<WireStore>(std::move(client));
}

Result<ReplicaStatusReply> QueryReplicaStatus(Client& client, const std::string& topic,
                                              int32_t partition) {
  auto reply = client.Call(Type::kReplicaStatus, Encode(PartitionRef{topic, partition}));
  if (!reply) return reply.error();
  return DecodeReplicaStatusReply(*reply, client.peer());
}

Result<CarryStateReply> QueryCarryState(Client& client, const std::string& topic,
                                        int32_t partition) {
  auto reply = client.Call(Type::kCarryState, Encode(PartitionRef{topic, partition}));
  if (!reply) return reply.error();
  return DecodeCarryStateReply(*reply, client.peer(), topic, partition);
}

namespace {

// A replica's corruption, named as the replica is (`name`: HOST:PATH): its
// file is a name in the partition directory there.
Status OnReplica(const Status& e, const std::string& name) {
  return Status::Corruption(e.file().empty() ? name : name + "/" + e.file(), e.position(),
                            e.rule(), WhatOf(e));
}

// R63: a replica's log read through ReadLog, a chunk at a time.
class WireReplica : public ReplicaLogSource {
 public:
  WireReplica(std::shared_ptr<Client> client, std::string topic, int32_t partition,
              std::string name, const DecodeLimits& limits)
      : client_(std::move(client)),
        topic_(std::move(topic)),
        partition_(partition),
        name_(std::move(name)),
        limits_(limits) {}

  Status Open() {
    auto c = Read(-1, 0);
    if (!c) return c.error();
    start_ = c->log_start_offset;
    end_ = c->log_end_offset;
    if (!c->stop.ok()) hw_ = c->stop;
    else if (c->high_watermark < 0) hw_ = Status(Code::kNotFound, name_ + ": no high watermark");
    else hw_ = c->high_watermark;
    return Status::Ok();
  }
  int64_t log_start_offset() override { return start_; }
  int64_t log_end_offset() override { return end_; }
  Result<int64_t> HighWatermark() override { return hw_; }
  Status Seek(int64_t offset) override {
    next_ = std::max<int64_t>(offset, 0);
    chunk_ = LogChunk{};
    at_ = 0;
    stopped_ = false;
    return Status::Ok();
  }
  Result<std::optional<BatchView>> Next() override {
    if (at_ >= chunk_.batches.size()) {
      if (!chunk_.stop.ok()) {
        stopped_ = true;
        return chunk_.stop;
      }
      if (stopped_) return std::optional<BatchView>();
      auto c = Read(next_, kChunkBytes);
      if (!c) return c.error();
      chunk_ = std::move(*c);
      at_ = 0;
      if (chunk_.batches.empty()) {
        if (!chunk_.stop.ok()) return chunk_.stop;
        stopped_ = true;  // its log end
        return std::optional<BatchView>();
      }
    }
    const std::string file = name_ + "/" + chunk_.file;
    const uint64_t position = chunk_.position + at_;
    auto b = BatchView::Parse(std::span<const std::byte>(chunk_.batches).subspan(at_), limits_,
                              file, position);
    if (!b) return b.error();
    at_ += b->header().size_bytes();
    position_ = {file, position};
    next_ = b->header().last_offset() + 1;
    return std::optional<BatchView>(*b);
  }
  LogPosition position() const override { return position_; }

 private:
  static constexpr uint32_t kChunkBytes = 1u << 20;

  Result<LogChunk> Read(int64_t offset, uint32_t max_bytes) {
    auto reply = client_->Call(Type::kReadLog, Encode(ReadLogMessage{topic_, partition_, offset,
                                                                     max_bytes}));
    if (!reply) return reply.error();
    auto c = DecodeReadLogReply(*reply, client_->peer());
    if (!c) return c.error();
    // The stop's file is a name in the partition directory: named as the
    // replica is.
    if (!c->stop.ok()) c->stop = OnReplica(c->stop, name_);
    return c;
  }

  std::shared_ptr<Client> client_;
  std::string topic_;
  int32_t partition_;
  std::string name_;
  DecodeLimits limits_;
  int64_t start_ = 0;
  int64_t end_ = 0;
  Result<int64_t> hw_ = Status(Code::kNotFound, "");
  int64_t next_ = 0;
  LogChunk chunk_;
  size_t at_ = 0;
  bool stopped_ = false;
  LogPosition position_;
};

}  // namespace

Result<ReplicaCheckReply> QueryReplicaCheck(Client& client, const std::string& topic,
                                            int32_t partition, bool verify,
                                            const std::string& name) {
  auto reply = client.Call(Type::kReplicaCheck, Encode(ReplicaCheckMessage{topic, partition, verify}));
  if (!reply) return reply.error();
  auto r = DecodeReplicaCheckReply(*reply, client.peer());
  if (!r) return r.error();
  if (!r->damage.ok()) r->damage = OnReplica(r->damage, name);
  return r;
}

Result<ReplicaCheckReply> CheckReplica(const std::string& dir, bool verify) {
  ReplicaCheckReply r;
  auto stop = ReadFollowerStop(dir);
  // A record that cannot be read counts as none (mq-inspect --verify
  // reports a damaged one), as on the replica's own host.
  if (stop) r.stop = *stop;
  // A leader's record of its followers' fetches (R47, its fetch-positions,
  // R60), for describe's times; one that cannot be read counts as none, as
  // on its host.
  if (auto positions = ReadReplicaPositions(dir)) r.positions = std::move(*positions);
  if (verify) {
    Status s = VerifyForLeadership(dir);
    if (s.code() == Code::kCorruption) r.damage = s;
    else if (!s.ok()) return s;
  }
  return r;
}

Result<std::unique_ptr<ReplicaLogSource>> OpenRemoteReplica(std::shared_ptr<Client> client,
                                                            const std::string& topic,
                                                            int32_t partition, std::string name,
                                                            const DecodeLimits& limits) {
  auto r = std::make_unique<WireReplica>(std::move(client), topic, partition, std::move(name),
                                         limits);
  MQ_RETURN_IF_ERROR(r->Open());
  return std::unique_ptr<ReplicaLogSource>(std::move(r));
}

// ---- server ---------------------------------------------------------------------------

namespace {

// A reply: its type, and its payload in two parts (a FetchReply's batches
// are written after its fields without being copied next to them).
struct Reply {
  Type type;
  std::vector<std::byte> body;
  std::vector<std::byte> owned;     // the tail when the reply holds it
  std::span<const std::byte> tail;  // sent after `body` (a fetch's batches)
  std::optional<uint32_t> tail_crc;  // its CRC-32C, when known (FetchResponse::crc)
  FileBytes file;  // the tail left in a file (FetchResponse::file), when its size is not 0
  Reply(Type t, std::vector<std::byte> b) : type(t), body(std::move(b)) {}
};

// Answers one request (after Hello) of a conversation in `version`.
Result<Reply> Answer(const Handlers& h, const Frame& f, const std::string& peer,
                     uint16_t version) {
  auto reply = [&](auto&& result) -> Result<Reply> {
    if (!result) return Reply(Type::kError, EncodeError(result.error()));
    return Reply(static_cast<Type>(static_cast<uint8_t>(f.type) | kReplyBit), Encode(*result));
  };
  auto unsupported = [&](const char* what) {
    return Reply(Type::kError, EncodeError(Status(
                                   Code::kUnsupported,
                                   fmt::format("this server does not answer {}", what))));
  };
  switch (f.type) {
    case Type::kPing:
      return Reply(Type::kPong, {});
    case Type::kFetch:
    case Type::kFetchAhead: {
      const bool ahead = f.type == Type::kFetchAhead;
      if (ahead && version < kFetchAheadVersion)  // R49, R62
        return Status::Corruption(peer, 0, "R62",
                                  fmt::format("FetchAhead in a conversation of version {}",
                                              version));
      auto m = ahead ? DecodeFetchAhead(f.payload, peer) : DecodeFetch(f.payload, peer);
      if (!m) return m.error();
      if (!h.fetch) return unsupported(ahead ? "FetchAhead" : "Fetch");
      auto r = h.fetch(*m);
      if (!r) return Reply(Type::kError, EncodeError(r.error()));
      Reply out(ahead ? Type::kFetchAheadReply : Type::kFetchReply, EncodeFetchReplyHead(*r));
      out.tail_crc = r->crc;
      if (r->file.size > 0) {
        out.file = r->file;  // the handler's file: sent before its next call
      } else if (r->borrowed.empty()) {
        out.owned = std::move(r->batches);
        out.tail = out.owned;
      } else {
        out.tail = r->borrowed;  // the handler's buffer: sent before its next call
      }
      return out;
    }
    case Type::kOffsetForLeaderEpoch: {
      auto m = DecodeOffsetForLeaderEpoch(f.payload, peer);
      if (!m) return m.error();
      if (!h.offset_for_leader_epoch) return unsupported("OffsetForLeaderEpoch");
      return reply(h.offset_for_leader_epoch(*m));
    }
    case Type::kReplicaStatus: {
      auto m = DecodePartitionRef(f.payload, peer);
      if (!m) return m.error();
      if (!h.replica_status) return unsupported("ReplicaStatus");
      return reply(h.replica_status(*m));
    }
    case Type::kCarryState: {
      auto m = DecodePartitionRef(f.payload, peer, "CarryState");
      if (!m) return m.error();
      if (!h.carry_state) return unsupported("CarryState");
      return reply(h.carry_state(*m));
    }
    case Type::kReadLog: {
      if (version < kReadReplicaVersion)
        return Status::Corruption(peer, 0, "R63",
                                  fmt::format("ReadLog in a conversation of version {}", version));
      auto m = DecodeReadLog(f.payload, peer);
      if (!m) return m.error();
      if (!h.read_log) return unsupported("ReadLog");
      return reply(h.read_log(*m));
    }
    case Type::kReplicaCheck: {
      if (version < kReadReplicaVersion)
        return Status::Corruption(
            peer, 0, "R63", fmt::format("ReplicaCheck in a conversation of version {}", version));
      auto m = DecodeReplicaCheck(f.payload, peer);
      if (!m) return m.error();
      if (!h.replica_check) return unsupported("ReplicaCheck");
      return reply(h.replica_check(*m));
    }
    case Type::kLoadState: {
      if (!f.payload.empty())
        return Status::Corruption(peer, 0, "R51", "LoadState: the message has no fields");
      if (!h.load_state) return unsupported("LoadState");
      auto state = h.load_state();
      if (!state) return Reply(Type::kError, EncodeError(state.error()));
      return Reply(Type::kLoadStateReply, EncodeLoadStateReply(*state));
    }
    case Type::kAlterPartition: {
      auto m = DecodeAlterPartition(f.payload, peer);
      if (!m) return m.error();
      if (!h.alter_partition) return unsupported("AlterPartition");
      auto stored = h.alter_partition(*m);
      if (!stored) return Reply(Type::kError, EncodeError(stored.error()));
      return Reply(Type::kAlterPartitionReply, EncodeAlterPartitionReply(*stored));
    }
    case Type::kProducerId: {
      auto m = DecodeProducerId(f.payload, peer);
      if (!m) return m.error();
      if (!h.producer_id) return unsupported("ProducerId");
      auto id = h.producer_id(*m);
      if (!id) return Reply(Type::kError, EncodeError(id.error()));
      return Reply(Type::kProducerIdReply, EncodeProducerIdReply(*id));
    }
    default:
      return Status::Corruption(peer, 0, "R50",
                                fmt::format("request type 0x{:02x} is not a request",
                                            static_cast<uint8_t>(f.type)));
  }
}

}  // namespace

Status Serve(int in_fd, int out_fd, const Handlers& handlers, const ServeOptions& o) {
  SetNonBlocking(in_fd);
  SetNonBlocking(out_fd);
  FrameReader reader(o.peer);
  uint32_t expect = 0;
  uint16_t version = 0;  // the conversation's (R49)
  auto send = [&](Type type, uint32_t correlation, std::span<const std::byte> body,
                  std::span<const std::byte> tail = {},
                  std::optional<uint32_t> tail_crc = std::nullopt, const FileBytes& file = {}) {
    return WriteFrame(out_fd, type, correlation, body, tail, o.idle_timeout_ms, o.peer, o.stop,
                      tail_crc, file);
  };
  // A breach: say so when the peer can still hear it, then end (R50).
  auto breach = [&](const Status& s, uint32_t correlation) {
    send(Type::kError, correlation, EncodeError(s));
    return s;
  };
  for (;;) {
    bool clean_end = false;
    auto f = ReadFrame<Frame>(in_fd, reader, o.idle_timeout_ms, o.peer, o.stop, &clean_end,
                       [&reader] { return reader.Next(); });
    if (!f) {
      if (f.error().code() == Code::kUnavailable) {
        // End of input, the idle timeout or a stop: the conversation is over.
        return clean_end || (o.stop && o.stop->load()) || reader.pending() == 0
                   ? Status::Ok()
                   : f.error();
      }
      return breach(f.error(), expect);
    }
    if (f->correlation != expect)
      return breach(Status::Corruption(o.peer, reader.position(), "R50",
                                       fmt::format("request {} where {} was next", f->correlation,
                                                   expect)),
                    f->correlation);
    if (expect == 0) {  // R49
      if (f->type != Type::kHello)
        return breach(Status::Corruption(o.peer, 0, "R49", "the first request is not Hello"), 0);
      auto hello = DecodeHello(f->payload, o.peer);
      if (!hello) return breach(hello.error(), 0);
      if (hello->min_version > o.max_version || hello->max_version < kMinVersion ||
          hello->min_version > hello->max_version)
        return breach(Status(Code::kUnsupported,
                             fmt::format("client speaks versions {}-{}; this server speaks {}-{} "
                                         "(R49)",
                                         hello->min_version, hello->max_version, kMinVersion,
                                         o.max_version)),
                      0);
      // The highest version both speak.
      version = std::min(hello->max_version, o.max_version);
      HelloReply reply;
      reply.version = version;
      reply.server = o.name;
      MQ_RETURN_IF_ERROR(send(Type::kHelloReply, 0, Encode(reply)));
      ++expect;
      continue;
    }
    auto answer = Answer(handlers, *f, o.peer, version);
    if (!answer) return breach(answer.error(), f->correlation);
    MQ_RETURN_IF_ERROR(
        send(answer->type, f->correlation, answer->body, answer->tail, answer->tail_crc,
             answer->file));
    ++expect;
    if (handlers.after_reply) handlers.after_reply();
  }
}

}  // namespace mq::wire
