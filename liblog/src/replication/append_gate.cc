// The leader's append gate (mq/append_gate.h; format-spec/replication.md
// §17.6).
#include "mq/append_gate.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace mq {

Status CheckMinIsrBeforeAppend(Acks acks, const PartitionState& p, int32_t min_isr) {
  if (acks == Acks::kAll && static_cast<int32_t>(p.isr.size()) < min_isr)
    return Status(Code::kNotEnoughReplicas,
                  fmt::format("{}-{}: NOT_ENOUGH_REPLICAS: the ISR is {{{}}}, fewer than "
                              "min.insync.replicas={}; nothing appended",
                              p.topic, p.partition, FormatReplicaList(p.isr), min_isr));
  return Status::Ok();
}

Status CheckMinIsrAfterAppend(std::string_view topic, int32_t partition, const PartitionState* p,
                              int32_t min_isr, int64_t last_offset) {
  // Kafka's checkEnoughReplicasReachOffset: the HW passed it; with fewer
  // in-sync replicas than the floor that means less than acks=all promised.
  if (!p || static_cast<int32_t>(p->isr.size()) < min_isr)
    return Status(
        Code::kNotEnoughReplicasAfterAppend,
        fmt::format("{}-{}: offset {}: NOT_ENOUGH_REPLICAS_AFTER_APPEND: the ISR fell to "
                    "{{{}}}, below min.insync.replicas={}: outcome unknown",
                    topic, partition, last_offset, p ? FormatReplicaList(p->isr) : "", min_isr));
  return Status::Ok();
}

LeaderAppendGate::LeaderAppendGate(ReplicationContext ctx, std::string dir, int32_t replica_id,
                                   LogConfig log, Acks acks, int64_t timeout_ms)
    : ctx_(std::move(ctx)),
      dir_(std::move(dir)),
      replica_id_(replica_id),
      log_config_(std::move(log)),
      acks_(acks),
      timeout_ms_(timeout_ms) {}

LeaderAppendGate::~LeaderAppendGate() = default;

std::string LeaderAppendGate::Name() const {
  return fmt::format("{}-{}", ctx_.topic, ctx_.partition);
}

Status LeaderAppendGate::Unknown(int64_t last_offset, const Status& s) const {
  return Status(s.code(), fmt::format("{}: offset {}: outcome unknown: {}", Name(), last_offset,
                                      s.message()));
}

Result<int32_t> LeaderAppendGate::BeforeAppend(const PartitionState& p, int32_t min_isr) {
  MQ_RETURN_IF_ERROR(CheckMinIsrBeforeAppend(acks_, p, min_isr));
  if (log_ && epoch_ == p.leader_epoch) return epoch_;
  // R54: appends in an epoch only on a claim of this boot; R55: after a
  // restart of the host the epoch is given up (a new one when this root is
  // the whole ISR, else no leader until mq-isr elect: kUnavailable).
  int32_t epoch = p.leader_epoch;
  for (int round = 0; round < 2; ++round) {
    LogConfig c = log_config_;
    c.leader_epoch = epoch;
    auto log = OpenReplicaLog(dir_, replica_id_, c);
    if (!log) return log.error();
    log_ = std::move(*log);
    epoch_ = epoch;
    if (round > 0) break;
    PartitionState at = p;
    auto held = ClaimLeadership(ctx_, *log_, at);
    if (!held) {
      log_.reset();
      return held.error();
    }
    if (held->leader_epoch == epoch) break;
    epoch = held->leader_epoch;
  }
  return epoch_;
}

// acks=all: waits until the high watermark passes `last_offset` or the
// timeout ends (kTimedOut); `by_reader` tells whether the HW passing it was
// seen in the file (another process moved it) rather than computed here.
Result<int64_t> LeaderAppendGate::WaitForHighWatermark(int64_t last_offset, bool* by_reader) {
  // Never waits for a follower holding the leader lock: acks=1 does not
  // depend on followers, and acks=all's wait is bounded by its timeout.
  auto hw = UpdateHighWatermark(ctx_, *log_, epoch_, false);
  if (!hw && hw.error().code() == Code::kBusy) hw = int64_t{-1};
  if (!hw) return Unknown(last_offset, hw.error());
  if (acks_ == Acks::kLeader) return hw;

  using Clk = std::chrono::steady_clock;
  const auto deadline = Clk::now() + std::chrono::milliseconds(timeout_ms_);
  auto next_shrink = Clk::now();
  while (*hw <= last_offset) {
    const auto now = Clk::now();
    if (now >= deadline)
      return Status(Code::kTimedOut,
                    fmt::format("{}: offset {}: not acknowledged by the ISR within {} ms "
                                "(high watermark {}): outcome unknown",
                                Name(), last_offset, timeout_ms_, *hw));
    // Whoever waits on a partition may apply the ISR rule (§17.5): a
    // follower gone for replica.lag.time.max.ms leaves, and the HW moves.
    if (now >= next_shrink) {
      auto shrunk = MaybeShrinkIsr(ctx_, *log_, epoch_);
      if (!shrunk) return Unknown(last_offset, shrunk.error());
      next_shrink = now + std::chrono::milliseconds(200);
    }
    if (!hw_reader_) {
      ReadOptions o;
      o.limits = log_config_.limits;
      o.offsets = log_config_.offsets;
      o.bound_by_high_watermark = true;
      auto r = PartitionReader::Open(dir_, o);
      if (!r) return Unknown(last_offset, r.error());
      hw_reader_ = std::move(*r);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clk::now()).count();
    // Woken by the HW passing the record (a follower's fetch moved it):
    // nothing to compute again. That HW is this leader's of its epoch
    // unless the epoch ended (a follower here may have cut the record and
    // raised the HW past it since): checked on the state after.
    if (hw_reader_->WaitForAppend(last_offset,
                                  static_cast<int>(std::clamp<int64_t>(left, 1, 200)))) {
      const int64_t seen = hw_reader_->end_offset();
      if (seen > last_offset) {
        hw = seen;
        *by_reader = true;
        continue;
      }
    }
    auto now_hw = UpdateHighWatermark(ctx_, *log_, epoch_, false);
    if (!now_hw && now_hw.error().code() != Code::kBusy)
      return Unknown(last_offset, now_hw.error());
    if (now_hw) hw = *now_hw;
  }
  return hw;
}

Status LeaderAppendGate::AfterAppend(int64_t last_offset) {
  if (acks_ == Acks::kNone) return Status::Ok();
  if (!log_) return Status(Code::kInternal, "AfterAppend before BeforeAppend");
  bool by_reader = false;
  auto hw = WaitForHighWatermark(last_offset, &by_reader);
  if (!hw) return hw.error();
  if (acks_ == Acks::kLeader) return Status::Ok();
  auto state = ctx_.cluster->Load();
  if (!state) return Unknown(last_offset, state.error());
  const PartitionState* ps = state->Partition(ctx_.topic, ctx_.partition);
  if (by_reader && (!ps || ps->leader != replica_id_ || ps->leader_epoch != epoch_))
    return Unknown(last_offset,
                   Status(Code::kFenced, fmt::format("replica {} no longer leads in epoch {}",
                                                     replica_id_, epoch_)));
  const ReplicatedTopic* t = state->Topic(ctx_.topic);
  return CheckMinIsrAfterAppend(ctx_.topic, ctx_.partition, ps, t ? t->min_insync_replicas : 1,
                                last_offset);
}

}  // namespace mq
