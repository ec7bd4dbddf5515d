// mq-consume -G: what a member reads (format-spec/group.md §14): each
// topic's consumer and, per owned partition, how far its messages were
// handed over and committed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mq/consumer.h"
#include "mq/partition.h"
#include "mq/status.h"
#include "options.h"

namespace mq::consume {

// The topics of the directory the member's -t arguments match (R64). A
// pattern never matches the member's own --dlq or --to-topic topic (named
// outright, they are refused: options.cc): it would read what it writes.
Result<std::vector<std::string>> MatchSubscription(const Flags& f, const DataDir& dir);

// Per owned partition: how far messages were handed over, and committed.
struct Progress {
  int64_t committed = -1;  // the group's committed offset (-1: none)
  int64_t handed = -1;     // position whose messages all reached stdout (or were
                           // acknowledged, or with --exec: were handled)
  int32_t epoch = -1;      // leader epoch of the batch holding handed - 1
  int64_t ahead = -1;      // at-most-once: offset committed ahead of output
  int32_t ahead_epoch = -1;
  int64_t dead_letters = 0;  // dead letters below `handed`, not committed yet
  // The committed offset was past the log end (a truncation): this is it,
  // and `committed` is the log end until the next commit lowers it there
  // or beyond (R31's exception). -1: nothing to lower.
  int64_t lower_from = -1;
  // With --exec: cuts of the log applied (OnCuts), which the handler
  // units given since carry (Dispatcher::Add); and the lowest cut since
  // the oldest unit that may still end (-1: none). A unit given before a
  // cut holds messages cut from the log: it hands over nothing past the
  // cut, where the messages read since are other records (R59).
  uint32_t generation = 0;
  int64_t stale_cut = -1;
};

// How far a handler unit given at `generation` that ended handled up to
// `end` hands over partition `pr`'s messages.
inline int64_t UnitHandOver(const Progress& pr, uint32_t generation, int64_t end) {
  if (generation == pr.generation || pr.stale_cut < 0) return end;
  return std::min(end, pr.stale_cut);
}

// One topic the member reads: its consumer and its owned partitions.
struct Source {
  std::string topic;
  int32_t number = 0;  // with --exec: the topic's number in the dispatcher's lanes (LaneOf)
  std::unique_ptr<Consumer> consumer;
  std::map<int32_t, Progress> progress;
  std::vector<int32_t> last_epoch;  // by partition: leader epoch of the last record handed out
};

}  // namespace mq::consume
