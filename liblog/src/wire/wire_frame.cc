// The wire protocol's frames (format-spec/protocol.md §19.1, R48): encoded,
// read from a byte stream, and written to a non-blocking descriptor.
#include "wire/wire_frame.h"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/uio.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "format/coding.h"
#include "format/format.h"
#include "mq/crc32c.h"

namespace mq::wire {

// ---- frames ---------------------------------------------------------------------

std::vector<std::byte> EncodeFrame(Type type, uint32_t correlation,
                                   std::span<const std::byte> payload) {
  std::vector<std::byte> out(format::kWireHeaderSize + payload.size() + format::kWireTrailerSize);
  coding::PutFixed32(out.data(), static_cast<uint32_t>(payload.size()));
  out[4] = std::byte{static_cast<uint8_t>(type)};
  coding::PutFixed32(out.data() + 5, correlation);
  std::copy(payload.begin(), payload.end(), out.begin() + format::kWireHeaderSize);
  const uint32_t crc =
      Crc32c(std::span<const std::byte>(out.data(), format::kWireHeaderSize + payload.size()));
  coding::PutFixed32(out.data() + format::kWireHeaderSize + payload.size(), crc);
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
  constexpr size_t kHead = format::kWireHeaderSize + 4 + 8 + 8 + 8 + 4;
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
    const auto length =
        static_cast<int32_t>(coding::GetFixed32(frame.data() + at + format::kBatchLengthOffset));
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
  if (n > format::kWireMaxPayload)
    return Status::Corruption(
        peer_, position_, "R48",
        fmt::format("frame length {} is over {}", n, format::kWireMaxPayload));
  const size_t total = format::kWireHeaderSize + n + format::kWireTrailerSize;
  if (have < total) return std::optional<FrameView>();
  const uint32_t stored = coding::GetFixed32(p + format::kWireHeaderSize + n);
  const std::span<const std::byte> covered(p, format::kWireHeaderSize + n);
  bool checked = false;
  const uint32_t actual = batches_checked ? FetchReplyFrameCrc(covered, &checked) : Crc32c(covered);
  if (stored != actual)
    return Status::Corruption(
        peer_, position_, "R48",
        fmt::format("frame crc {:08x} but its bytes give {:08x}", stored, actual));
  if (batches_checked) *batches_checked = checked;
  FrameView f;
  f.type = static_cast<Type>(std::to_integer<uint8_t>(p[4]));
  f.correlation = coding::GetFixed32(p + 5);
  f.payload = std::span<const std::byte>(p + format::kWireHeaderSize, n);
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

// ---- descriptors with deadlines ----------------------------------------------

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

namespace {

// The `file` bytes read into `out`, for a frame sent without their CRC.
Status ReadFileBytes(FileBytes file, const std::string& peer, std::vector<std::byte>* out) {
  out->resize(file.size);
  for (size_t at = 0; at < file.size;) {
    ssize_t n =
        pread(file.fd, out->data() + at, file.size - at, static_cast<off_t>(file.position + at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status(Code::kIoError, fmt::format("{}: reading the batches to send: {}", peer,
                                                n < 0 ? strerror(errno) : "end of file"));
    at += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Writes to a non-blocking descriptor, each wait for it to take bytes
// within one deadline (R52) and given up when `stop` is set.
class DeadlineWriter {
 public:
  DeadlineWriter(int fd, int timeout_ms, const std::string& peer, const std::atomic<bool>* stop)
      : fd_(fd),
        timeout_ms_(timeout_ms),
        deadline_(MonotonicMs() + timeout_ms),
        peer_(peer),
        stop_(stop) {}

  // Writes iov[0, count) whole.
  Status WriteAll(iovec* iov, int count) {
    int first = 0;
    while (first < count) {
      if (iov[first].iov_len == 0) {
        ++first;
        continue;
      }
      ssize_t n = writev(fd_, iov + first, count - first);
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
      if (n < 0 && errno != EAGAIN) return Failed("write");
      MQ_RETURN_IF_ERROR(Wait());
    }
    return Status::Ok();
  }

  // Sends the `file` bytes: by sendfile, or read and written where the
  // descriptors do not support it.
  Status SendFile(FileBytes file) {
    off_t at = static_cast<off_t>(file.position);
    size_t left = file.size;
    std::vector<std::byte> bounce;  // without sendfile: the bytes read, then written
    while (left > 0) {
      if (bounce.empty()) {
        ssize_t n = sendfile(fd_, file.fd, &at, std::min<size_t>(left, size_t{1} << 30));
        if (n > 0) {
          left -= static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
          MQ_RETURN_IF_ERROR(Wait());
          continue;
        }
        if (n < 0 && errno != EINVAL && errno != ENOSYS) return Failed("sendfile");
        if (n == 0) return Cut();  // the file was cut since its batches were read
        bounce.resize(std::min<size_t>(left, size_t{1} << 20));
      }
      ssize_t n = pread(file.fd, bounce.data(), std::min(left, bounce.size()), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Failed("reading the batches to send");
      if (n == 0) return Cut();
      iovec chunk{bounce.data(), static_cast<size_t>(n)};
      MQ_RETURN_IF_ERROR(WriteAll(&chunk, 1));
      at += n;
      left -= static_cast<size_t>(n);
    }
    return Status::Ok();
  }

 private:
  // After EAGAIN: waits until the descriptor takes bytes, within the deadline.
  Status Wait() {
    const int64_t left = deadline_ - MonotonicMs();
    if (left <= 0 || (stop_ && stop_->load()))
      return Status(Code::kUnavailable,
                    fmt::format("{}: no progress writing for {} ms (R52)", peer_, timeout_ms_));
    pollfd pfd{fd_, POLLOUT, 0};
    poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 200)));
    return Status::Ok();
  }

  Status Failed(const char* what) const {
    return Status(Code::kUnavailable, fmt::format("{}: {}: {}", peer_, what, strerror(errno)));
  }

  Status Cut() const {
    return Status(Code::kUnavailable,
                  fmt::format("{}: the batches being sent were cut from their file", peer_));
  }

  const int fd_;
  const int timeout_ms_;
  const int64_t deadline_;
  const std::string& peer_;
  const std::atomic<bool>* const stop_;
};

}  // namespace

Status WriteFrame(int fd, Type type, uint32_t correlation, std::span<const std::byte> body,
                  std::span<const std::byte> tail, int timeout_ms, const std::string& peer,
                  const std::atomic<bool>* stop, std::optional<uint32_t> tail_crc, FileBytes file) {
  std::vector<std::byte> read_tail;
  if (file.size > 0 && !tail_crc) {
    // No CRC given: the bytes are read for it, and sent from memory.
    MQ_RETURN_IF_ERROR(ReadFileBytes(file, peer, &read_tail));
    tail = read_tail;
    file = {};
  }
  const size_t tail_size = file.size > 0 ? file.size : tail.size();
  std::byte header[format::kWireHeaderSize], trailer[format::kWireTrailerSize];
  coding::PutFixed32(header, static_cast<uint32_t>(body.size() + tail_size));
  header[4] = std::byte{static_cast<uint8_t>(type)};
  coding::PutFixed32(header + 5, correlation);
  uint32_t crc = Crc32c(std::span<const std::byte>(header, format::kWireHeaderSize));
  crc = Crc32cExtend(crc, body);
  crc = tail_crc ? Crc32cCombine(crc, *tail_crc, tail_size) : Crc32cExtend(crc, tail);
  coding::PutFixed32(trailer, crc);
  DeadlineWriter out(fd, timeout_ms, peer, stop);
  if (file.size == 0) {
    iovec iov[4] = {{header, format::kWireHeaderSize},
                    {const_cast<std::byte*>(body.data()), body.size()},
                    {const_cast<std::byte*>(tail.data()), tail.size()},
                    {trailer, format::kWireTrailerSize}};
    return out.WriteAll(iov, 4);
  }
  iovec head[2] = {{header, format::kWireHeaderSize},
                   {const_cast<std::byte*>(body.data()), body.size()}};
  MQ_RETURN_IF_ERROR(out.WriteAll(head, 2));
  MQ_RETURN_IF_ERROR(out.SendFile(file));
  iovec end{trailer, format::kWireTrailerSize};
  return out.WriteAll(&end, 1);
}

}  // namespace mq::wire
