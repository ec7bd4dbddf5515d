// A fetch answered below the replica's HW before its server has the
// cluster state (mq/committed_fetch.h, format-spec/protocol.md R102).
#include "mq/committed_fetch.h"

#include <algorithm>

#include "format/format.h"
#include "mq/batch.h"

namespace mq {

Result<std::optional<FetchResponse>> HandleCommittedFetch(ReplicaLog& log,
                                                          const FetchRequest& request,
                                                          std::vector<std::byte>* buffer) {
  auto start = log.LogStartOffset();
  if (!start) return start.error();
  auto leo = log.LogEndOffset();
  if (!leo) return leo.error();
  auto hw = log.HighWatermark();
  if (!hw) return hw.error();
  const int64_t committed = std::min(*hw, *leo);
  const int64_t from = std::max(request.fetch_offset, *start);
  if (request.fetch_offset > *leo || from >= committed) return std::optional<FetchResponse>();
  // This log is the one the follower's state names leader in its epoch:
  // it claimed that epoch (R54), on the running boot (R55).
  auto claim = log.LoadLeaderClaim();
  if (!claim) return claim.error();
  const BootId boot = log.RunningBoot();
  if (claim->epoch != request.leader_epoch || boot == BootId{} || claim->boot != boot)
    return std::optional<FetchResponse>();
  FetchResponse response;
  std::vector<std::byte>* out = buffer ? buffer : &response.batches;
  uint32_t crc = 0;
  MQ_RETURN_IF_ERROR(log.Read(from, request.max_bytes, out, &crc));
  size_t keep = 0;
  while (keep + format::kBatchHeaderSize <= out->size()) {
    const BatchHeader h = DecodeBatchHeader(Bytes(*out).subspan(keep));
    if (h.last_offset() >= committed) break;
    keep += static_cast<size_t>(h.size_bytes());
  }
  if (keep == 0) return std::optional<FetchResponse>();
  if (keep == out->size()) response.crc = crc;  // else the server computes it
  out->resize(keep);
  if (buffer) response.borrowed = *buffer;
  response.high_watermark = committed;
  response.log_start_offset = *start;
  response.log_end_offset = *leo;
  response.leader_epoch = request.leader_epoch;
  return std::optional<FetchResponse>(std::move(response));
}

}  // namespace mq
