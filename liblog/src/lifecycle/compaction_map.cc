// Key compaction's offset map (R116) and plan (R114, R115):
// format-spec/compaction.md §22.1-§22.2.
#include <algorithm>
#include <cstring>
#include <limits>

#include "mq/compaction.h"

namespace mq {

namespace {

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

inline uint64_t Load64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);  // little-endian
  return v;
}

constexpr uint64_t kC1 = 0x87c37b91114253d5ULL;
constexpr uint64_t kC2 = 0x4cf5ad432745937fULL;

inline uint64_t MixK1(uint64_t k) { return Rotl(k * kC1, 31) * kC2; }
inline uint64_t MixK2(uint64_t k) { return Rotl(k * kC2, 33) * kC1; }

}  // namespace

// MurmurHash3 x64-128 with seed 0 (R116).
void KeyHash128(Bytes key, uint64_t* out1, uint64_t* out2) {
  const size_t n = key.size();
  const std::byte* p = key.data();
  uint64_t h1 = 0, h2 = 0;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    h1 ^= MixK1(Load64(p + i));
    h1 = (Rotl(h1, 27) + h2) * 5 + 0x52dce729;
    h2 ^= MixK2(Load64(p + i + 8));
    h2 = (Rotl(h2, 31) + h1) * 5 + 0x38495ab5;
  }
  const std::byte* tail = p + (n & ~size_t{15});
  const size_t rest = n & 15;
  uint64_t k1 = 0, k2 = 0;
  for (size_t i = rest; i > 8; --i) k2 = (k2 << 8) | static_cast<uint64_t>(tail[i - 1]);
  for (size_t i = std::min<size_t>(rest, 8); i > 0; --i)
    k1 = (k1 << 8) | static_cast<uint64_t>(tail[i - 1]);
  if (rest > 8) h2 ^= MixK2(k2);
  if (rest > 0) h1 ^= MixK1(k1);
  h1 ^= n;
  h2 ^= n;
  h1 += h2;
  h2 += h1;
  h1 = Mix(h1);
  h2 = Mix(h2);
  h1 += h2;
  h2 += h1;
  *out1 = h1;
  *out2 = h2;
}

OffsetMap::OffsetMap(size_t memory_bytes)
    : slots_(std::max<size_t>(1, memory_bytes / kBytesPerSlot)),
      limit_(static_cast<size_t>(static_cast<double>(slots_.size()) * kLoadFactor)) {
  // One slot stays empty whatever the budget, so that a probe always ends.
  limit_ = std::min(limit_, slots_.size() - 1);
}

size_t OffsetMap::Find(uint64_t h1, uint64_t h2) const {
  const size_t n = slots_.size();
  size_t i = static_cast<size_t>(h1 % n);
  while (slots_[i].offset >= 0 && (slots_[i].h1 != h1 || slots_[i].h2 != h2)) i = (i + 1) % n;
  return i;
}

bool OffsetMap::Put(Bytes key, int64_t offset) {
  uint64_t h1 = 0, h2 = 0;
  KeyHash128(key, &h1, &h2);
  Slot& s = slots_[Find(h1, h2)];
  if (s.offset < 0) {
    if (size_ >= limit_) return false;
    ++size_;
    s.h1 = h1;
    s.h2 = h2;
  }
  s.offset = offset;
  return true;
}

std::optional<int64_t> OffsetMap::Get(Bytes key) const {
  if (size_ == 0) return std::nullopt;
  uint64_t h1 = 0, h2 = 0;
  KeyHash128(key, &h1, &h2);
  const Slot& s = slots_[Find(h1, h2)];
  if (s.offset < 0) return std::nullopt;
  return s.offset;
}

void OffsetMap::Clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  size_ = 0;
}

namespace {

// R114: the sealed, local segments from the log start up, below the high
// watermark and older than min.compaction.lag.ms.
std::vector<RetentionSegment> CleanableSegments(const RetentionLog& log,
                                                const CompactionPolicy& policy) {
  std::vector<RetentionSegment> out;
  const int64_t hw = log.high_watermark.value_or(std::numeric_limits<int64_t>::max());
  for (const RetentionSegment& s : log.segments) {
    if (s.active) break;
    if (s.tiered) {
      if (!out.empty()) break;
      continue;
    }
    if (s.end <= log.log_start_offset) continue;
    if (s.end > hw) break;
    if (policy.min_compaction_lag_ms > 0 &&
        s.clock_ms() > policy.now_ms - policy.min_compaction_lag_ms)
      break;
    out.push_back(s);
  }
  return out;
}

}  // namespace

CompactionPlan PlanCompaction(const RetentionLog& log, const CompactionCheckpoint& checkpoint,
                              const CompactionPolicy& policy) {
  CompactionPlan plan;
  plan.segments = CleanableSegments(log, policy);
  plan.first_dirty = std::max(checkpoint.offset, log.log_start_offset);
  plan.cleanable_end = plan.segments.empty() ? plan.first_dirty : plan.segments.back().end;
  const RetentionSegment* first_dirty_segment = nullptr;
  for (const RetentionSegment& s : plan.segments) {
    if (s.end <= plan.first_dirty) {
      plan.clean_bytes += s.bytes;
    } else {
      plan.dirty_bytes += s.bytes;
      if (first_dirty_segment == nullptr) first_dirty_segment = &s;
    }
  }
  const uint64_t total = plan.clean_bytes + plan.dirty_bytes;
  plan.dirty_ratio =
      total == 0 ? 0 : static_cast<double>(plan.dirty_bytes) / static_cast<double>(total);
  const bool horizon_passed =
      checkpoint.delete_horizon >= 0 && policy.now_ms >= checkpoint.delete_horizon;
  if (first_dirty_segment == nullptr && horizon_passed && !plan.segments.empty()) {
    plan.due = true;  // R121: tombstones to remove, nothing new to map
    plan.why = "delete horizon";
  } else if (first_dirty_segment == nullptr) {
    plan.why = "no dirty segment";
  } else if (policy.force) {
    plan.due = true;
    plan.why = "forced";
  } else if (plan.dirty_ratio >= policy.min_cleanable_dirty_ratio) {
    plan.due = true;
    plan.why = "dirty ratio";
  } else if (policy.max_compaction_lag_ms >= 0 &&
             first_dirty_segment->clock_ms() < policy.now_ms - policy.max_compaction_lag_ms) {
    plan.due = true;
    plan.why = "max.compaction.lag.ms";
  } else {
    plan.why = "dirty ratio below min.cleanable.dirty.ratio";
  }
  return plan;
}

}  // namespace mq
