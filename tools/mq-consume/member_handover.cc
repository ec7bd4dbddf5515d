#include "member.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

namespace mq::consume {

void Member::MarkFlushed() {
  seen_flushes_ = out_->flushes();
  if (f_.ack_fd) return;  // only acknowledgements hand messages over
  for (auto& src : sources_)
    for (auto& [p, pr] : src->progress) HandOver(*src, p, pr);
}

void Member::HandOver(Source& src, int32_t p, Progress& pr) {
  auto pos = src.consumer->position(p);
  if (pos && *pos > pr.handed) {
    pr.handed = *pos;
    pr.epoch = src.last_epoch[static_cast<size_t>(p)];
  }
}

void Member::Collect(int timeout_ms) {
  for (const Dispatcher::Done& d : dispatcher_->TakeDone(timeout_ms)) {
    if (!d.status.ok() && stop_.ok()) stop_ = d.status;
    // Handled whole, or (a split batch cut short) in part: R72.
    if (d.handled_end < 0) continue;
    Source* src = nullptr;
    for (auto& s : sources_)
      if (s->number == LaneTopic(d.partition)) src = s.get();
    if (src == nullptr) continue;
    auto it = src->progress.find(LanePartition(d.partition));
    if (it == src->progress.end()) continue;
    Progress& pr = it->second;
    since_commit_ += d.messages;
    // Units end in the order given: once one given since the last cut
    // ended, none given before it is left.
    const int64_t end = UnitHandOver(pr, d.generation, d.handled_end);
    if (d.generation == pr.generation) pr.stale_cut = -1;
    if (end > pr.handed) {
      pr.handed = end;
      pr.epoch = end == d.next_offset ? d.leader_epoch : kNoLeaderEpoch;
    }
    pr.dead_letters += d.dead_letters;
  }
}

void Member::MarkHandled(const Source* only_src, std::optional<int32_t> only) {
  if (!dispatcher_) return;
  const bool healthy = dispatcher_->healthy();
  // --parallel reports each unit that ended (Collect).
  if (!healthy && dispatcher_->parallel()) return;
  for (auto& s : sources_) {
    Source& src = *s;
    if (only_src && &src != only_src) continue;
    for (auto& [p, pr] : src.progress) {
      if (only && p != *only) continue;
      const int32_t lane = Lane(src, p);
      if (healthy) {
        if (dispatcher_->has_pending(lane)) continue;
        pr.dead_letters += dispatcher_->TakeDeadLetters(lane);
        HandOver(src, p, pr);
        continue;
      }
      // Serially, once a run stopped: up to the last unit handled, which
      // every earlier message was, and nothing past it.
      auto h = dispatcher_->handled_through(lane);
      const int64_t end = h ? UnitHandOver(pr, h->generation, h->end) : -1;
      if (end > pr.handed) {
        pr.handed = end;
        pr.epoch = end == h->end ? h->leader_epoch : kNoLeaderEpoch;
      }
      pr.dead_letters += dispatcher_->TakeDeadLetters(lane);
    }
  }
}

// Every message handed out was acknowledged.
bool Member::AllAcknowledged() const {
  for (const auto& src : sources_)
    for (const auto& [p, pr] : src->progress) {
      auto last = src->consumer->last_handed_out(p);
      if (last && pr.handed <= *last) return false;
    }
  return true;
}

// Acknowledgements on --ack-fd: lines "PARTITION OFFSET" or the message id
// "TOPIC/PARTITION/OFFSET"; each hands over its offset and every earlier
// one of its partition (cumulative, like a Kafka commit).
void Member::Acknowledge(std::string line) {
  std::string_view v = line;
  Source* src = several_ ? nullptr : sources_.front().get();
  if (auto slash = v.rfind('/'); slash != std::string_view::npos) {
    auto first = v.find('/');
    src = first == slash ? nullptr : FindSource(v.substr(0, first));
    if (src == nullptr) {
      if (!f_.quiet)
        cli::Warn(fmt::format("--ack-fd: ignored '{}': not a message of {}", line,
                              several_ ? "a topic this member reads" : f_.topic));
      return;
    }
    line = std::string(v.substr(first + 1, slash - first - 1)) + " " +
           std::string(v.substr(slash + 1));
  } else if (src == nullptr) {
    // With several topics a partition number alone names no message.
    if (!f_.quiet)
      cli::Warn(
          fmt::format("--ack-fd: ignored '{}': this member reads several topics: "
                      "acknowledge TOPIC/PARTITION/OFFSET",
                      line));
    return;
  }
  auto& progress = src->progress;
  int32_t p = -1;
  int64_t o = -1;
  auto sp = line.find(' ');
  bool ok = sp != std::string::npos &&
            std::from_chars(line.data(), line.data() + sp, p).ec == std::errc() &&
            std::from_chars(line.data() + sp + 1, line.data() + line.size(), o).ec == std::errc();
  auto it = progress.find(p);
  if (!ok || it == progress.end()) {
    if (!f_.quiet)
      cli::Warn(
          fmt::format("--ack-fd: ignored '{}': expected PARTITION OFFSET of a partition "
                      "this member owns",
                      line));
    return;
  }
  auto last = src->consumer->last_handed_out(p);
  if (!last || o > *last) {
    if (!f_.quiet)
      cli::Warn(
          fmt::format("--ack-fd: ignored '{}': offset {} of partition {} was not handed "
                      "out",
                      line, o, p));
    return;
  }
  if (o + 1 > it->second.handed) it->second.handed = o + 1;
}

void Member::ReadAcks(bool until_eof) {
  if (!f_.ack_fd || ack_eof_) return;
  const int fd = *f_.ack_fd;
  char buf[4096];
  for (;;) {
    if (until_eof && AllAcknowledged()) return;
    // At exit, each acknowledgement may take up to kAckWaitMs, with no poll
    // in between: the heartbeat says the member is not stuck (R69).
    if (until_eof) (void)member_->Beat();
    pollfd pfd{fd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, until_eof ? kAckWaitMs : 0);
    if (ready == 0) {
      if (until_eof && !f_.quiet)
        cli::Warn(
            fmt::format("--ack-fd: no acknowledgement for {} s: committing what was "
                        "acknowledged",
                        kAckWaitMs / 1000));
      return;
    }
    if (ready < 0) {
      if (errno == EINTR && !until_eof) continue;
      return;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      if (until_eof) return;  // a signal ends the wait
      continue;
    }
    if (n <= 0) {
      ack_eof_ = true;
      return;
    }
    ack_buf_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = ack_buf_.find('\n')) != std::string::npos) {
      std::string line = ack_buf_.substr(0, nl);
      ack_buf_.erase(0, nl + 1);
      Acknowledge(std::move(line));
    }
  }
}

}  // namespace mq::consume
