#include "io/multi_waiter.h"

namespace mq {
namespace {
// How long a thread blocks in the futex before it looks for a new round or
// a stop request. Bounds the exit delay, not the wake-up latency.
constexpr int kSliceMs = 100;
}  // namespace

Result<std::unique_ptr<MultiWaiter>> MultiWaiter::Start(const std::vector<std::string>& dirs,
                                                        const ReadOptions& options) {
  std::unique_ptr<MultiWaiter> w(new MultiWaiter(options));
  w->slots_.resize(dirs.size());
  for (size_t i = 0; i < dirs.size(); ++i) w->slots_[i].dir = dirs[i];
  for (size_t i = 0; i < dirs.size(); ++i)
    w->threads_.emplace_back([p = w.get(), i] { p->Run(i); });
  return w;
}

MultiWaiter::~MultiWaiter() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_threads_.notify_all();
  for (auto& t : threads_) t.join();
}

// Waits up to one slice for partition i to move past `known`. Only thread i
// touches slots_[i].reader.
bool MultiWaiter::WaitSlice(size_t i, int64_t known, std::optional<uint32_t> rewrites,
                            uint64_t round) {
  Slot& slot = slots_[i];
  if (!slot.reader) {
    auto r = PartitionReader::Open(slot.dir, options_);
    if (r) {
      slot.reader = std::move(*r);
      return slot.reader->WaitForAppend(known, 0, rewrites);
    }
    std::unique_lock lk(mu_);
    wake_threads_.wait_for(lk, std::chrono::milliseconds(kUnbornPollMs),
                           [&] { return stop_ || round_ != round || fired_; });
    return false;
  }
  return slot.reader->WaitForAppend(known, kSliceMs, rewrites);
}

void MultiWaiter::Run(size_t i) {
  uint64_t my_round = 0;
  for (;;) {
    int64_t known;
    std::optional<uint32_t> rewrites;
    {
      std::unique_lock lk(mu_);
      wake_threads_.wait(lk, [&] { return stop_ || (round_ != my_round && !fired_); });
      if (stop_) return;
      my_round = round_;
      known = slots_[i].known;
      rewrites = slots_[i].rewrites;
    }
    if (known < 0) continue;  // not watched this round
    for (;;) {
      bool moved = WaitSlice(i, known, rewrites, my_round);
      std::lock_guard lk(mu_);
      if (stop_) return;
      if (round_ != my_round || fired_) break;  // stale round: pick up the new ends
      if (moved) {
        fired_ = true;
        wake_consumer_.notify_one();
        break;
      }
    }
  }
}

bool MultiWaiter::Wait(std::span<const int64_t> known,
                       std::span<const std::optional<uint32_t>> rewrites, int timeout_ms) {
  std::unique_lock lk(mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].known = known[i];
    slots_[i].rewrites = rewrites[i];
  }
  fired_ = false;
  ++round_;
  wake_threads_.notify_all();
  return wake_consumer_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return fired_; });
}

}  // namespace mq
