// Framing of mq-produce's input: a byte stream cut into messages at a
// delimiter ("\n" by default, NUL for -0, any byte string for -D). Every
// input is read into a buffer that grows with the longest message, up to
// the maximum message size, so memory stays bounded whatever the input. (A
// regular file is read, not mapped: the page faults of a mapping, one per
// few pages however it is advised, cost three times the copy of read(), and
// an input truncated under a mapping can only end the process.)
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/file.h"
#include "mq/status.h"

namespace mq::produce {

struct InputMessage {
  std::string_view bytes;  // without its delimiter; valid until the next Next()
  uint64_t position = 0;   // byte offset of its first byte in the input
  uint64_t number = 0;     // 1-based: the line number for line input
};

enum class ReadState : uint8_t {
  kMessage,     // *message holds the next message
  kEnd,         // the input is exhausted
  kWouldBlock,  // nothing complete is buffered and the input had no bytes ready in time
};

// Milliseconds of CLOCK_MONOTONIC.
int64_t MonotonicMs();

// A thread that reads a file ahead for an InputSource between its own
// work, when there is no CPU for a reading thread of its own (mq-produce's
// appending thread, on two CPUs). Only one reader is attached at a time.
class ReadHost {
 public:
  virtual ~ReadHost() = default;
  // From now on, `read` runs on the host's thread after each ReaderDue()
  // (and once first), one call at a time; it reads into the chunks there is
  // room for and returns. False when the host has no thread to run it.
  virtual bool AttachReader(std::function<void()> read) = 0;
  // There is room to read into: run `read` again.
  virtual void ReaderDue() = 0;
  // Waits until `read` is not running; it is never called again.
  virtual void DetachReader() = 0;
};

class InputSource {
 public:
  ~InputSource();
  InputSource(const InputSource&) = delete;
  InputSource& operator=(const InputSource&) = delete;

  // Opens `path` ("-" = standard input). Messages longer than
  // `max_message_bytes` are refused (see Next) after reading at most that
  // many bytes of them. With `read_ahead`, a regular file is read on a
  // thread of its own while the caller frames what was read before (for a
  // machine with a CPU to spare); the messages are the same.
  static Result<std::unique_ptr<InputSource>> Open(const std::string& path, std::string delimiter,
                                                   size_t max_message_bytes,
                                                   bool read_ahead = false);
  // Read ahead, a regular file is read on `host`'s thread rather than on
  // one of its own (call before the first Next; null: its own).
  void ReadOn(ReadHost* host) { host_ = host; }

  // The next message. A final message without a trailing delimiter is still
  // a message; an empty input has none. When no complete message is
  // buffered and the input has no bytes ready, waits for them until the
  // CLOCK_MONOTONIC time `wait_until_ms` (a time already past: only checks),
  // or forever if nullopt; a regular file is always ready. A message over
  // the limit is kTooLarge naming the input, its byte offset and number.
  Result<ReadState> Next(InputMessage* message, std::optional<int64_t> wait_until_ms);

  // Next's common case, inline: true with the next message when it is
  // complete in the bytes already buffered (and the delimiter is
  // one byte); false when Next must be called.
  bool TryNext(InputMessage* message) {
    if (!single_byte_) return false;
    const size_t limit = std::min(end_, start_ + max_message_bytes_ + 1);
    if (scan_ >= limit) return false;
    const char* hit = FindByte(limit);
    if (hit == nullptr) return false;
    const size_t len = static_cast<size_t>(static_cast<const char*>(hit) - data_) - start_;
    message->bytes = std::string_view(data_ + start_, len);
    message->position = consumed_ + start_;
    message->number = ++number_;
    start_ += len + 1;
    scan_ = start_;
    return true;
  }

  // The name used in errors ("<stdin>" or the path).
  const std::string& name() const { return name_; }
  // True for a regular file: always ready, so never a reason to flush.
  bool regular() const { return regular_; }
  // What a message is called in errors: "line" for newline framing.
  std::string_view unit() const { return delimiter_ == "\n" ? "line" : "message"; }

 private:
  class ReadAhead;
  InputSource(UniqueFd fd, std::string name, std::string delimiter, size_t max_message_bytes,
              bool regular, bool read_ahead);
  // Looks for the delimiter in the unscanned buffered bytes.
  const char* FindDelimiter();
  // TryNext's search for a one-byte delimiter in [scan_, limit): 64 bytes
  // at a time into a bit mask of delimiter positions, kept for the next
  // messages of the block (a memchr per short line costs more than the
  // line). Null when there is none before `limit`; scan_ moves on over the
  // blocks without one, never past `limit`.
  const char* FindByte(size_t limit) {
    for (;;) {
      if (mask_valid_ && scan_ >= mask_pos_ && scan_ < mask_pos_ + 64) {
        const uint64_t m = mask_ & (~uint64_t{0} << (scan_ - mask_pos_));
        if (m != 0) {
          const size_t at = mask_pos_ + static_cast<size_t>(__builtin_ctzll(m));
          return at < limit ? data_ + at : nullptr;
        }
        scan_ = std::min(mask_pos_ + 64, limit);
        if (scan_ >= limit) return nullptr;
        continue;
      }
      if (end_ - scan_ < 64) {
        const void* hit = std::memchr(data_ + scan_, delimiter_[0], limit - scan_);
        return static_cast<const char*>(hit);
      }
      mask_pos_ = scan_;
      mask_ = DelimiterMask(data_ + scan_);
      mask_valid_ = true;
    }
  }
  // Bit i set: byte i of the 64 at `p` is the delimiter.
  // Inline: it runs once per 64 bytes of input.
  uint64_t DelimiterMask(const char* p) const {
#if defined(__SSE2__)
    const __m128i d = _mm_set1_epi8(delimiter_[0]);
    uint64_t m = 0;
    for (int i = 0; i < 4; ++i) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
      m |= static_cast<uint64_t>(static_cast<uint16_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, d))))
           << (16 * i);
    }
    return m;
#else
    uint64_t m = 0;
    for (int i = 0; i < 64; ++i) m |= static_cast<uint64_t>(p[i] == delimiter_[0]) << i;
    return m;
#endif
  }
  // Reads more bytes (after moving the current message to the buffer start).
  // At the end of a regular file, kIoError if the file is now shorter than
  // what was read of it (truncated by another process while it was read).
  Status Fill();
  // Fill with the read-ahead thread: the next chunk it read, with the
  // current message's bytes so far copied in front of it (into the chunk's
  // headroom, or for a longer one both into buffer_).
  Status FillAhead();
  // kIoError naming the input when it is a regular file now shorter than
  // the offset read up to (`read` bytes of it were read).
  static Status CheckNotShrunk(int fd, const std::string& name, uint64_t read);
  Status TooLarge() const;
  // The most the buffer grows to: the longest message, its delimiter and a read.
  size_t BufferLimit() const;

  UniqueFd fd_;
  std::string name_;
  std::string delimiter_;
  bool single_byte_;
  size_t max_message_bytes_;
  bool regular_;
  bool eof_ = false;
  std::vector<char> buffer_;
  // The read-ahead thread (started by the first Fill) and the chunk of it
  // data_ points into (-1: none, data_ is buffer_'s).
  bool read_ahead_;
  ReadHost* host_ = nullptr;
  std::unique_ptr<ReadAhead> ahead_;
  int chunk_ = -1;
  // The bytes start_, scan_ and end_ index: buffer_'s.
  const char* data_ = nullptr;
  // FindByte's mask: delimiter positions in the 64 bytes at mask_pos_ of
  // data_ (valid until the bytes move: Fill).
  bool mask_valid_ = false;
  size_t mask_pos_ = 0;
  uint64_t mask_ = 0;
  size_t start_ = 0;       // first byte of the current message
  size_t scan_ = 0;        // delimiter search resumes here
  size_t end_ = 0;         // end of buffered bytes
  uint64_t consumed_ = 0;  // input offset of buffer_[0]
  uint64_t number_ = 0;
};

}  // namespace mq::produce
