// mq-replicate's work: a follower root pulls each partition it follows from
// the partition's leader root (format-spec/replication.md §17).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mq::replicate {

struct Options {
  std::string dir;                    // -C: the follower's root
  std::optional<std::string> topic;   // -t: only this topic
  std::optional<int32_t> partition;   // -p: only this partition
  bool follow = false;                // keep following until signalled
  uint64_t max_bytes_per_second = 0;  // 0: no throttle
  // Bytes per fetch: 4 MiB, where a catch-up is fastest (bench/
  // replication_wire.sh): below it each fetch's round trips and file replaces
  // weigh, above it the follower's passes over a reply (read, CRC, append)
  // no longer find it in the cache.
  uint64_t fetch_max_bytes = uint64_t{4} << 20;
  bool fsync = false;   // --fsync batch: each append fsynced
  bool repair = false;  // --repair: cut damaged records, fetch them again
  bool verbose = false;
  bool quiet = false;
  bool serve = false;       // --serve: answer the wire protocol on stdin/stdout
  int idle_timeout_ms = 0;  // --serve: 0 is the protocol's default (R52)
};

// Returns the exit status.
int Run(const Options& options);
// --serve (format-spec/protocol.md): returns the exit status.
int Serve(const Options& options);

}  // namespace mq::replicate
