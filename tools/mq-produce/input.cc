#include "input.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace mq::produce {
namespace {

// Bytes asked of each read(): large enough that a file is read in few
// system calls, small enough to keep the whole buffer far below 64 MB.
constexpr size_t kReadChunk = 1 << 20;

}  // namespace

// Reads a regular file ahead of the framing, on a thread of its own or on
// a host's (ReadHost), into kChunks chunks of kChunkBytes (after kHeadroom
// bytes, where the caller copies the unfinished message of the chunk
// before). A chunk of no bytes is the end of the file, or of reading it
// (status()).
class InputSource::ReadAhead {
 public:
  static constexpr size_t kHeadroom = 64 << 10;
  static constexpr size_t kChunkBytes = 256 << 10;
  static constexpr int kChunks = 4;
  // Once every chunk is full the thread of its own sleeps until this many
  // are free again: waking it for each one cost more than reading it (a
  // futex wake and a context switch per 256 KiB).
  static constexpr size_t kResume = kChunks / 2;

  ReadAhead(int fd, const std::string& name, ReadHost* host) : fd_(fd), name_(name), host_(host) {
    for (int i = 0; i < kChunks; ++i) free_.push_back(i);
  }
  ~ReadAhead() {
    if (attached_) {
      host_->DetachReader();
      return;
    }
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    free_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Allocates the chunks and starts reading (on the host's thread, or on a
  // thread of its own); false when either fails (then the caller reads for
  // itself).
  bool Start() {
    try {
      for (auto& c : chunks_) c.bytes.reset(new char[kHeadroom + kChunkBytes]);
    } catch (const std::bad_alloc&) {
      return false;
    }
    if (host_ != nullptr) {
      attached_ = host_->AttachReader([this] { ReadFree(); });
      return attached_;
    }
    // The thread takes no signal: they stay the caller's.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    bool started = true;
    try {
      thread_ = std::thread([this] { Loop(); });
    } catch (const std::system_error&) {
      started = false;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return started;
  }

  // Waits for the next chunk read.
  int Take() {
    std::unique_lock lock(mu_);
    full_cv_.wait(lock, [&] { return !full_.empty(); });
    const int i = full_.front();
    full_.pop_front();
    return i;
  }
  // Gives chunk i back to be read into.
  void Give(int i) {
    bool wake;
    {
      std::lock_guard lock(mu_);
      free_.push_back(i);
      wake = waiting_ && free_.size() == kResume;
    }
    if (attached_) {
      host_->ReaderDue();
    } else if (wake) {
      free_cv_.notify_one();
    }
  }
  char* data(int i) { return chunks_[i].bytes.get() + kHeadroom; }
  size_t size(int i) const { return chunks_[i].size; }
  // Why reading ended (after a chunk of no bytes): OK at the end of the file.
  const Status& status() const { return status_; }

 private:
  struct Chunk {
    std::unique_ptr<char[]> bytes;
    size_t size = 0;
  };
  // The thread of its own: reads until the end, sleeping while every chunk
  // is full.
  void Loop() {
    for (;;) {
      int i;
      {
        std::unique_lock lock(mu_);
        if (free_.empty()) {
          waiting_ = true;
          free_cv_.wait(lock, [&] { return stop_ || free_.size() >= kResume; });
          waiting_ = false;
        }
        if (stop_) return;
        i = free_.front();
        free_.pop_front();
      }
      if (!Read(i)) return;
    }
  }
  // The host's turn: reads into every free chunk, then returns.
  void ReadFree() {
    while (!ended_) {
      int i;
      {
        std::lock_guard lock(mu_);
        if (free_.empty()) return;
        i = free_.front();
        free_.pop_front();
      }
      if (!Read(i)) ended_ = true;
    }
  }
  // Reads chunk i and queues it for Take; false after the last chunk (the
  // end of the file, or a failure: status()).
  bool Read(int i) {
    ssize_t n;
    do {
      n = ::read(fd_, data(i), kChunkBytes);
    } while (n < 0 && errno == EINTR);
    Status st;
    if (n < 0) st = ErrnoStatus(name_ + ": read", errno);
    if (n == 0) st = CheckNotShrunk(fd_, name_, read_);
    chunks_[i].size = n > 0 ? static_cast<size_t>(n) : 0;
    read_ += chunks_[i].size;
    {
      std::lock_guard lock(mu_);
      if (n <= 0) status_ = st;
      full_.push_back(i);
    }
    full_cv_.notify_one();
    return n > 0;
  }

  const int fd_;
  const std::string& name_;
  ReadHost* const host_;
  bool attached_ = false;  // reading on host_'s thread
  // The reading thread's (its own, or the host's: one call at a time).
  uint64_t read_ = 0;   // bytes read so far
  bool ended_ = false;  // the last chunk is queued
  Chunk chunks_[kChunks];
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable free_cv_;  // a chunk to read into, or stop
  std::condition_variable full_cv_;  // a chunk read
  std::deque<int> free_;
  std::deque<int> full_;
  bool stop_ = false;
  bool waiting_ = false;  // the thread waits for kResume free chunks
  Status status_;         // set before the last chunk is queued; read after it is taken
};

Result<std::unique_ptr<InputSource>> InputSource::Open(const std::string& path,
                                                       std::string delimiter,
                                                       size_t max_message_bytes, bool read_ahead) {
  UniqueFd fd;
  std::string name = path;
  if (path == "-") {
    fd = UniqueFd(::dup(STDIN_FILENO));
    name = "<stdin>";
    if (!fd) return ErrnoStatus("<stdin>", errno);
  } else {
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus(path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(name, errno);
  if (S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, name + ": is a directory");
  if (delimiter.empty()) return Status(Code::kInvalidArgument, "empty delimiter");
  return std::unique_ptr<InputSource>(
      new InputSource(std::move(fd), std::move(name), std::move(delimiter), max_message_bytes,
                      S_ISREG(st.st_mode), read_ahead && S_ISREG(st.st_mode)));
}

InputSource::InputSource(UniqueFd fd, std::string name, std::string delimiter,
                         size_t max_message_bytes, bool regular, bool read_ahead)
    : fd_(std::move(fd)),
      name_(std::move(name)),
      delimiter_(std::move(delimiter)),
      single_byte_(delimiter_.size() == 1),
      max_message_bytes_(max_message_bytes),
      regular_(regular),
      read_ahead_(read_ahead) {
  // The buffer starts at one read and grows with the longest message seen
  // (Fill), up to a whole message plus its delimiter with room for a read.
  // Read ahead, it holds only messages longer than a chunk's headroom
  // (FillAhead), and grows when there is one.
  if (!read_ahead_) buffer_.resize(std::min(BufferLimit(), kReadChunk + delimiter_.size()));
  data_ = buffer_.data();
  if (regular_) ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
}

InputSource::~InputSource() = default;

const char* InputSource::FindDelimiter() {
  const char* base = data_;
  const size_t dlen = delimiter_.size();
  if (end_ - scan_ >= dlen) {
    const void* hit = dlen == 1 ? std::memchr(base + scan_, delimiter_[0], end_ - scan_)
                                : ::memmem(base + scan_, end_ - scan_, delimiter_.data(), dlen);
    if (hit != nullptr) return static_cast<const char*>(hit);
  }
  // Not found: the last dlen-1 bytes may start a delimiter still being read.
  size_t keep = dlen - 1;
  scan_ = end_ - start_ > keep ? end_ - keep : start_;
  return nullptr;
}

Status InputSource::TooLarge() const {
  return Status(Code::kTooLarge,
                fmt::format("{}: {} {} at byte offset {} is larger than the maximum message size "
                            "({} bytes; max.message.bytes or --max-message-bytes)",
                            name_, unit(), number_ + 1, consumed_ + start_, max_message_bytes_));
}

size_t InputSource::BufferLimit() const {
  return max_message_bytes_ + delimiter_.size() + kReadChunk;
}

Status InputSource::Fill() {
  mask_valid_ = false;
  if (read_ahead_ && !ahead_) {
    ahead_ = std::make_unique<ReadAhead>(fd_.get(), name_, host_);
    if (!ahead_->Start()) {
      ahead_.reset();
      read_ahead_ = false;
    }
  }
  if (ahead_) return FillAhead();
  if (start_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + start_, end_ - start_);
    consumed_ += start_;
    scan_ -= start_;
    end_ -= start_;
    start_ = 0;
  }
  // A message longer than the buffer so far: double it, never past the limit.
  if (buffer_.size() - end_ < kReadChunk && buffer_.size() < BufferLimit()) {
    const size_t grown = std::min(BufferLimit(), std::max(buffer_.size() * 2, end_ + kReadChunk));
    try {
      buffer_.resize(grown);
    } catch (const std::bad_alloc&) {
      return Status(Code::kNoMemory,
                    fmt::format("{}: out of memory for {} {} at byte offset {} ({} bytes buffered)",
                                name_, unit(), number_ + 1, consumed_, end_));
    }
    data_ = buffer_.data();
  }
  for (;;) {
    ssize_t n = ::read(fd_.get(), buffer_.data() + end_, buffer_.size() - end_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(name_ + ": read", errno);
    if (n == 0 && regular_) MQ_RETURN_IF_ERROR(CheckNotShrunk(fd_.get(), name_, consumed_ + end_));
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
    return Status::Ok();
  }
}

Status InputSource::CheckNotShrunk(int fd, const std::string& name, uint64_t read) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(name, errno);
  const off_t offset = ::lseek(fd, 0, SEEK_CUR);
  if (offset < 0) return ErrnoStatus(name + ": seek", errno);
  if (st.st_size >= offset) return Status::Ok();
  return Status(Code::kIoError,
                fmt::format("{}: the file shrank while it was read (truncated by another "
                            "process?): {} bytes read, the file now ends {} bytes before",
                            name, read, offset - st.st_size));
}

Status InputSource::FillAhead() {
  const int next = ahead_->Take();
  const size_t got = ahead_->size(next);
  if (got == 0) {
    ahead_->Give(next);
    MQ_RETURN_IF_ERROR(ahead_->status());
    eof_ = true;
    return Status::Ok();
  }
  // The current message's bytes so far (Next keeps them within the limit).
  const size_t partial = end_ - start_;
  if (partial <= ReadAhead::kHeadroom) {
    char* at = ahead_->data(next) - partial;
    if (partial > 0) std::memcpy(at, data_ + start_, partial);
    if (chunk_ >= 0) ahead_->Give(chunk_);
    chunk_ = next;
    data_ = at;
  } else {
    // A long message: it and the chunk are joined in buffer_.
    if (chunk_ < 0) std::memmove(buffer_.data(), data_ + start_, partial);
    if (buffer_.size() < partial + got) {
      const size_t grown =
          std::min(BufferLimit(), std::max(buffer_.size() * 2, partial + kReadChunk));
      try {
        buffer_.resize(grown);
      } catch (const std::bad_alloc&) {
        ahead_->Give(next);
        return Status(Code::kNoMemory,
                      fmt::format("{}: out of memory for {} {} at byte offset {} ({} bytes "
                                  "buffered)",
                                  name_, unit(), number_ + 1, consumed_ + start_, partial));
      }
    }
    if (chunk_ >= 0) {
      std::memcpy(buffer_.data(), data_ + start_, partial);
      ahead_->Give(chunk_);
      chunk_ = -1;
    }
    std::memcpy(buffer_.data() + partial, ahead_->data(next), got);
    ahead_->Give(next);
    data_ = buffer_.data();
  }
  consumed_ += start_;
  scan_ -= start_;
  start_ = 0;
  end_ = partial + got;
  return Status::Ok();
}

int64_t MonotonicMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

Result<ReadState> InputSource::Next(InputMessage* message, std::optional<int64_t> wait_until_ms) {
  if (TryNext(message)) return ReadState::kMessage;
  for (;;) {
    if (const char* hit = FindDelimiter()) {
      size_t len = static_cast<size_t>(hit - data_) - start_;
      if (len > max_message_bytes_) return TooLarge();
      message->bytes = std::string_view(data_ + start_, len);
      message->position = consumed_ + start_;
      message->number = ++number_;
      start_ += len + delimiter_.size();
      scan_ = start_;
      return ReadState::kMessage;
    }
    // The bytes of the current message so far, less a possible partial delimiter.
    size_t partial = end_ - start_;
    size_t least = partial > delimiter_.size() - 1 ? partial - (delimiter_.size() - 1) : 0;
    if (least > max_message_bytes_) return TooLarge();
    if (eof_) {
      if (start_ == end_) return ReadState::kEnd;
      if (partial > max_message_bytes_) return TooLarge();
      message->bytes = std::string_view(data_ + start_, partial);
      message->position = consumed_ + start_;
      message->number = ++number_;
      start_ = scan_ = end_;
      return ReadState::kMessage;
    }
    if (wait_until_ms && !regular_) {
      pollfd p{fd_.get(), POLLIN, 0};
      int r;
      do {
        int64_t left = std::max<int64_t>(0, *wait_until_ms - MonotonicMs());
        r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT32_MAX)));
      } while (r < 0 && errno == EINTR);
      if (r < 0) return ErrnoStatus(name_ + ": poll", errno);
      if (r == 0) return ReadState::kWouldBlock;
    }
    MQ_RETURN_IF_ERROR(Fill());
  }
}

}  // namespace mq::produce
