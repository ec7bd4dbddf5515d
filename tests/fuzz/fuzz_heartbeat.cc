// libFuzzer target: a member's heartbeat (format-spec/group.md §14.5, R69)
// and a static member's lease (R65) over arbitrary bytes. Every input is
// either refused as corruption naming the file, a position inside it and
// the rule (or as a newer version, kUnsupported), or accepted; what is
// accepted obeys the rule's ranges and is canonical (the writer writes
// exactly those bytes for it), and what a member does with it (R69's
// overdue and fencing checks, R65's session) is defined for every value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mq/member_heartbeat.h"
#include "mq/member_lease.h"

namespace {

void Check(const mq::Status& s, size_t size, const char* rule) {
  if (s.code() == mq::Code::kUnsupported && size >= 6) return;
  if (s.code() != mq::Code::kCorruption || s.file() != "f" || s.position() > size ||
      s.rule() != rule)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  // The clock a reader judges by: any value, from the input's tail.
  int64_t now = 0;
  if (size >= 8) std::memcpy(&now, data + size - 8, 8);

  auto hb = mq::DecodeMemberHeartbeat(bytes, "f");
  if (!hb) {
    Check(hb.error(), size, "R69");
  } else {
    if (hb->pid < 1 || hb->start_time < 0 || hb->deadline_ms < 1 ||
        hb->deadline_ms > mq::kMaxHeartbeatDeadlineMs || hb->last_poll < 0)
      std::abort();
    const std::vector<std::byte> again = mq::EncodeMemberHeartbeat(*hb);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
    // A monotonic clock is never negative.
    const int64_t mono = now < 0 ? -(now + 1) : now;
    const bool overdue = mq::HeartbeatOverdue(*hb, mono);
    mq::HeartbeatWatch watch;
    const bool stuck = mq::WatchHeartbeat(&watch, *hb, mono);
    // Fenced only once overdue, and never at the first read.
    if (stuck || (watch.overdue_since >= 0) != overdue) std::abort();
  }

  auto lease = mq::DecodeMemberLease(bytes, "f");
  if (!lease) {
    Check(lease.error(), size, "R65");
  } else {
    if (lease->session_timeout_ms < 1 || lease->session_timeout_ms > mq::kMaxSessionTimeoutMs ||
        lease->last_seen < 0)
      std::abort();
    const std::vector<std::byte> again = mq::EncodeMemberLease(*lease);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
    // The session's end saturates: it is never before the member was seen.
    if (mq::SessionEnd(*lease) < lease->last_seen ||
        mq::LeaseHolds(*lease, now) != (mq::SessionEnd(*lease) > now))
      std::abort();
  }
  return 0;
}
