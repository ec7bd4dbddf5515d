// What the parts of the wire protocol (format-spec/protocol.md, mq/wire.h)
// share inside liblog: frames written to and read from non-blocking
// descriptors within deadlines (wire_frame.cc; the client, wire_client.cc,
// and the server, wire_server.cc, speak through them), and a corruption's
// text as R63 carries it (wire_codec.cc).
#pragma once

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "mq/status.h"
#include "mq/wire.h"

namespace mq::wire {

inline int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

void SetNonBlocking(int fd);

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
                  FileBytes file = {});

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

// A corruption's "what": its message without "file: position N: rule: ".
std::string WhatOf(const Status& e);

}  // namespace mq::wire
