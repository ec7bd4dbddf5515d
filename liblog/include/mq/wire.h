// The wire protocol for replication across hosts (format-spec/protocol.md,
// section 19): frames (R48), the conversation (R49-R52) and its messages.
//
// A client starts a server process (usually `ssh HOST mq-replicate --serve
// ...`) and speaks to its standard input and output. Client gives the
// replication seams over it: RemoteLeaderLink (a follower reaching its
// leader on another host) and RemoteClusterStore (any tool reaching the
// authoritative cluster state on the controller host). Serve is the server's
// loop; the tools give it handlers.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/cluster.h"
#include "mq/group.h"
#include "mq/replica_verification.h"
#include "mq/replication.h"
#include "mq/status.h"

namespace mq::wire {

// R49: the versions this end speaks (kVersion the highest), the defaults
// of Hello and of a client's and a server's options. The frame and message
// constants are in liblog/src/format/format.h (kWire*; these equal its
// kWireVersion and kWireMinVersion).
constexpr uint16_t kVersion = 2;
constexpr uint16_t kMinVersion = 1;
constexpr int kDefaultTimeoutMs = 10000;  // R52
constexpr int kDefaultIdleTimeoutMs = 300000;
constexpr int kPingAfterIdleMs = 10000;

enum class Type : uint8_t {
  kHello = 0x01,
  kHelloReply = 0x81,
  kPing = 0x02,
  kPong = 0x82,
  kFetch = 0x10,
  kFetchReply = 0x90,
  kOffsetForLeaderEpoch = 0x11,
  kOffsetForLeaderEpochReply = 0x91,
  kReplicaStatus = 0x12,
  kReplicaStatusReply = 0x92,
  kCarryState = 0x13,
  kCarryStateReply = 0x93,
  kFetchAhead = 0x14,  // version 2 (R62)
  kFetchAheadReply = 0x94,
  kReadLog = 0x15,  // version 2 (R63)
  kReadLogReply = 0x95,
  kReplicaCheck = 0x16,  // version 2 (R63)
  kReplicaCheckReply = 0x96,
  kLoadState = 0x20,
  kLoadStateReply = 0xA0,
  kAlterPartition = 0x21,
  kAlterPartitionReply = 0xA1,
  kProducerId = 0x22,
  kProducerIdReply = 0xA2,
  kError = 0x7F,
};

struct Frame {
  Type type = Type::kError;
  uint32_t correlation = 0;
  std::vector<std::byte> payload;
};
// A frame whose payload lies in its reader's buffer: valid until the
// reader's next call.
struct FrameView {
  Type type = Type::kError;
  uint32_t correlation = 0;
  std::span<const std::byte> payload;
};

// The whole frame's bytes (R48).
std::vector<std::byte> EncodeFrame(Type type, uint32_t correlation,
                                   std::span<const std::byte> payload);

// The CRC-32C of a frame's bytes before its crc (`frame`: [0, 9+n)), always
// Crc32c(frame), in one pass that for a FetchReply also computes each of
// its batches' own CRCs (batch.md R4: over a batch's bytes from attributes
// on) and combines the frame's from them. `*batches_checked`: the frame is
// a FetchReply whose batches' bytes are whole batches, each matching the
// CRC it stores. Only meaningful once the frame's CRC is found right.
uint32_t FetchReplyFrameCrc(std::span<const std::byte> frame, bool* batches_checked);

// Frames from a byte stream (R48). The buffer grows with the bytes that
// arrive, never to a length it was only told.
class FrameReader {
 public:
  explicit FrameReader(std::string peer) : peer_(std::move(peer)) {}
  // Adds bytes read from the stream.
  void Feed(std::span<const std::byte> bytes);
  // Room for the next read from the stream (at least 64 KiB; the buffer
  // doubles when full, and is reused from frame to frame), and how many
  // bytes of it the read filled.
  std::span<std::byte> Space();
  void Commit(size_t n) { end_ += n; }
  // The next whole frame, nullopt while more bytes are needed; corruption
  // (R48) naming the peer and the frame's position in the stream.
  Result<std::optional<Frame>> Next();
  // The same without copying the payload out of the buffer. With
  // `batches_checked`, the CRC is computed by FetchReplyFrameCrc, which
  // sets it (false unless the frame is returned).
  Result<std::optional<FrameView>> NextView(bool* batches_checked = nullptr);
  // Bytes held that are not yet a whole frame.
  size_t pending() const { return end_ - begin_; }
  uint64_t position() const { return position_; }

 private:
  std::string peer_;
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> buf_;  // malloc'd, not zeroed: only [begin_, end_) is read
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
  uint64_t position_ = 0;  // stream position of buf_[begin_]
};

// ---- messages (§19.3) -------------------------------------------------------

struct Hello {
  uint16_t min_version = kMinVersion;
  uint16_t max_version = kVersion;
  std::string client;
};
struct HelloReply {
  uint16_t version = kVersion;
  std::string server;
};
// Fetch, and FetchAhead (R62): then `request.held_offset` is its heldOffset.
struct FetchMessage {
  std::string topic;
  int32_t partition = 0;
  FetchRequest request;
  uint32_t max_wait_ms = 0;
};
struct OffsetForLeaderEpochMessage {
  std::string topic;
  int32_t partition = 0;
  int32_t leader_epoch = -1;
  int32_t requested_epoch = -1;
};
struct PartitionRef {
  std::string topic;
  int32_t partition = 0;
};
struct ReplicaStatusReply {
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int64_t high_watermark = -1;
  int32_t latest_epoch = -1;
  // R55: its leader-claim is of another boot (its host restarted since it
  // last claimed an epoch).
  bool restarted_since_claim = false;
};
// What follows a partition's leader besides its log (replication.md
// §17.6): the groups' committed offsets of the partition and the root's
// producer-id registry. CarryState's request is a PartitionRef.
struct CarriedOffset {
  std::string group;
  CommittedOffset committed;  // topic and partition: the request's
};
struct CarriedProducer {
  std::string name;
  int64_t id = 0;
};
struct CarryStateReply {
  std::vector<CarriedOffset> offsets;
  std::vector<CarriedProducer> producers;
  int64_t next_producer_id = -1;  // -1: the root has allocated none
};
// R63: a read-only read of a replica's log (version 2): from `offset`
// (-1: no batches, only the log's bounds and high watermark) at most
// `max_bytes` of whole batches of one segment file. Its reply is a LogChunk.
struct ReadLogMessage {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = -1;
  uint32_t max_bytes = 0;
};
// R63 (version 2): what a replica's partition directory records of itself,
// read only: a follower that stopped there (R58), and with `verify` whether
// its log verifies as a leader's must (VerifyForLeadership).
struct ReplicaCheckMessage {
  std::string topic;
  int32_t partition = 0;
  bool verify = false;
};
struct ReplicaCheckReply {
  std::optional<FollowerStop> stop;
  Status damage;  // OK, or the corruption verification found (file, position, rule)
  // Its followers' positions (R47), as a leader records their fetches in
  // its fetch-positions (R60): their times are its host's clock. Empty when
  // it has none.
  std::vector<FollowerPosition> positions;
};
struct AlterPartitionMessage {
  PartitionState proposed;  // topic, partition, leader, epochs, ISR
  std::string reason;
};

std::vector<std::byte> Encode(const Hello& m);
std::vector<std::byte> Encode(const HelloReply& m);
std::vector<std::byte> Encode(const FetchMessage& m);
std::vector<std::byte> Encode(const FetchResponse& m);
// FetchAhead (R62): Fetch's fields, then `i64 heldOffset`
// (m.request.held_offset). Its reply is a FetchReply's fields.
std::vector<std::byte> EncodeFetchAhead(const FetchMessage& m);
// FetchReply's fields before its batches' bytes (a server writes the
// batches after them without copying them into one buffer).
std::vector<std::byte> EncodeFetchReplyHead(const FetchResponse& m);
std::vector<std::byte> Encode(const OffsetForLeaderEpochMessage& m);
std::vector<std::byte> Encode(const EpochEndOffset& m);
std::vector<std::byte> Encode(const PartitionRef& m);
std::vector<std::byte> Encode(const ReplicaStatusReply& m);
std::vector<std::byte> Encode(const AlterPartitionMessage& m);
std::vector<std::byte> Encode(const CarryStateReply& m);
std::vector<std::byte> Encode(const ReadLogMessage& m);
std::vector<std::byte> Encode(const LogChunk& m);
std::vector<std::byte> Encode(const ReplicaCheckMessage& m);
std::vector<std::byte> Encode(const ReplicaCheckReply& m);
// AlterPartitionReply: the partition's state as stored.
std::vector<std::byte> EncodeAlterPartitionReply(const PartitionState& p);
std::vector<std::byte> EncodeLoadStateReply(std::string_view state);
// ProducerId asks the controller for a name's producer id (cluster.md
// §18.6): `string name`; its reply is `i64 id`.
std::vector<std::byte> EncodeProducerId(std::string_view name);
std::vector<std::byte> EncodeProducerIdReply(int64_t id);
std::vector<std::byte> EncodeError(const Status& s);

// Decoders: corruption (R51) naming `peer` for a payload that is not
// exactly the message.
Result<Hello> DecodeHello(std::span<const std::byte> p, const std::string& peer);
Result<HelloReply> DecodeHelloReply(std::span<const std::byte> p, const std::string& peer);
Result<FetchMessage> DecodeFetch(std::span<const std::byte> p, const std::string& peer);
// heldOffset ≥ 0 and ≤ fetchOffset, else corruption (R51).
Result<FetchMessage> DecodeFetchAhead(std::span<const std::byte> p, const std::string& peer);
// With `borrow`, the batches are a view into `p` (FetchResponse::borrowed).
Result<FetchResponse> DecodeFetchReply(std::span<const std::byte> p, const std::string& peer,
                                       bool borrow = false);
Result<OffsetForLeaderEpochMessage> DecodeOffsetForLeaderEpoch(std::span<const std::byte> p,
                                                               const std::string& peer);
Result<EpochEndOffset> DecodeOffsetForLeaderEpochReply(std::span<const std::byte> p,
                                                       const std::string& peer);
Result<PartitionRef> DecodePartitionRef(std::span<const std::byte> p, const std::string& peer,
                                        const char* message = "ReplicaStatus");
Result<ReplicaStatusReply> DecodeReplicaStatusReply(std::span<const std::byte> p,
                                                    const std::string& peer);
Result<ReadLogMessage> DecodeReadLog(std::span<const std::byte> p, const std::string& peer);
// A file or rule that is not a name, a stop message without its rule:
// corruption (R51).
Result<LogChunk> DecodeReadLogReply(std::span<const std::byte> p, const std::string& peer);
Result<ReplicaCheckMessage> DecodeReplicaCheck(std::span<const std::byte> p,
                                               const std::string& peer);
Result<ReplicaCheckReply> DecodeReplicaCheckReply(std::span<const std::byte> p,
                                                  const std::string& peer);
Result<AlterPartitionMessage> DecodeAlterPartition(std::span<const std::byte> p,
                                                   const std::string& peer);
// `topic` and `partition` come from the request.
// `topic` and `partition`: the request's, filled into each offset.
Result<CarryStateReply> DecodeCarryStateReply(std::span<const std::byte> p, const std::string& peer,
                                              const std::string& topic, int32_t partition);
Result<PartitionState> DecodeAlterPartitionReply(std::span<const std::byte> p,
                                                 const std::string& peer, const std::string& topic,
                                                 int32_t partition);
Result<std::string> DecodeLoadStateReply(std::span<const std::byte> p, const std::string& peer);
// A name that breaks R12, an id below 0: corruption (R51).
Result<std::string> DecodeProducerId(std::span<const std::byte> p, const std::string& peer);
Result<int64_t> DecodeProducerIdReply(std::span<const std::byte> p, const std::string& peer);
// The status an Error frame carries (its code and message); a frame that is
// not one is corruption.
Status DecodeError(std::span<const std::byte> p, const std::string& peer);

// ---- transport ----------------------------------------------------------------

// One end of a conversation: descriptors to write requests to and read
// responses from, and the server process behind them when this end started
// it (the process is ended and reaped with the connection).
class Connection {
 public:
  // Starts `argv` (argv[0] looked up in PATH) with pipes on its standard
  // input and output; its standard error is ours.
  static Result<std::unique_ptr<Connection>> Start(const std::vector<std::string>& argv);
  // Descriptors owned by the caller (tests: a socketpair, a pipe pair).
  static std::unique_ptr<Connection> Adopt(int write_fd, int read_fd);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  int write_fd() const { return write_fd_; }
  int read_fd() const { return read_fd_; }
  // How the server process ended, when it has (waited for briefly: a pipe
  // found closed is usually its exit): "`CMD` exited with status N" or
  // "... was killed by signal N"; empty while it runs or for Adopt().
  std::string ExitNote();

 private:
  Connection() = default;
  std::string command_;  // argv[0], for ExitNote
  int write_fd_ = -1;
  int read_fd_ = -1;
  pid_t pid_ = -1;
};

// A client: one request at a time (R50), the connection made on first use
// and made again after any failure (R52).
class Client {
 public:
  using Connect = std::function<Result<std::unique_ptr<Connection>>()>;
  struct Options {
    int timeout_ms = kDefaultTimeoutMs;
    std::string name = "mq";          // Hello's client
    uint16_t max_version = kVersion;  // Hello's maxVersion (tests: an earlier client)
  };
  Client(Connect connect, std::string peer, Options options);
  Client(Connect connect, std::string peer)
      : Client(std::move(connect), std::move(peer), Options{}) {}
  // Sends a request and returns the reply's payload, valid until the next
  // Call or Collect (a Post, even one that fails, leaves it). An Error
  // reply is its status (the connection stays); a timeout (kUnavailable),
  // end of stream, R48-R51 breach or a failure to connect drops the
  // connection. `batches_checked`: as FrameReader::NextView's,
  // for the reply.
  Result<std::span<const std::byte>> Call(Type type, std::span<const std::byte> payload,
                                          int extra_wait_ms = 0, bool* batches_checked = nullptr);
  // A request sent now whose response Collect reads later (R62: a
  // FetchAhead, sent before the previous response is used). Until then any
  // Call first reads that response and drops it. A failure drops the
  // connection, not the payload of the reply before. Connects first when
  // there is no connection.
  // Returns its serial number (for posted()).
  Result<uint64_t> Post(Type type, std::span<const std::byte> payload);
  // Whether the request of the last Post, which returned `serial`, awaits
  // its response (not collected, not dropped since).
  bool posted(uint64_t serial) {
    std::lock_guard lock(mu_);
    return posted_.has_value() && serial == posts_;
  }
  // The posted request's response, as Call returns it.
  Result<std::span<const std::byte>> Collect(int extra_wait_ms = 0,
                                             bool* batches_checked = nullptr);
  // The version this conversation speaks (R49), 0 before the first call.
  uint16_t version() {
    std::lock_guard lock(mu_);
    return conn_ ? version_ : 0;
  }
  const std::string& peer() const { return peer_; }
  // Connections made so far (tests).
  int connects() const { return connects_; }

 private:
  Result<std::span<const std::byte>> CallLocked(Type type, std::span<const std::byte> payload,
                                                int timeout_ms, bool* batches_checked = nullptr);
  // The response to the request of type `type` sent last (its correlation
  // next_correlation_).
  Result<std::span<const std::byte>> AwaitLocked(Type type, int timeout_ms,
                                                 bool* batches_checked = nullptr);
  // Drops what a call that failed leaves (see Call).
  Status Failed(const Status& s);
  Status Handshake();
  Status Send(Type type, std::span<const std::byte> payload);
  Result<FrameView> Receive(int timeout_ms, bool* batches_checked = nullptr);
  void Drop();

  Connect connect_;
  std::string peer_;
  Options options_;
  std::mutex mu_;
  std::unique_ptr<Connection> conn_;
  std::unique_ptr<FrameReader> reader_;
  // A dropped connection's reader: the last reply's payload, until the
  // next Call or Collect.
  std::unique_ptr<FrameReader> spent_;
  uint32_t next_correlation_ = 0;
  int64_t last_used_ms_ = 0;  // CLOCK_MONOTONIC
  bool answered_ = false;     // the last call got an Error reply
  int connects_ = 0;
  uint16_t version_ = 0;        // HelloReply's
  std::optional<Type> posted_;  // a request sent by Post, its response unread
  uint64_t posts_ = 0;          // Post calls so far
};

// A follower's link to a leader reached through `client`.
std::unique_ptr<LeaderLink> RemoteLeaderLink(std::shared_ptr<Client> client, std::string topic,
                                             int32_t partition, uint32_t max_wait_ms);
// The cluster state held by the controller reached through `client`.
std::unique_ptr<ClusterStore> RemoteClusterStore(std::shared_ptr<Client> client);
// What a replica reached through `client` holds of a partition.
Result<ReplicaStatusReply> QueryReplicaStatus(Client& client, const std::string& topic,
                                              int32_t partition);

// What follows the leader of a partition reached through `client`.
Result<CarryStateReply> QueryCarryState(Client& client, const std::string& topic,
                                        int32_t partition);

// R63: the log of a partition of the replica root reached through
// `client` (its `mq-replicate --serve`), read only, for CompareReplicaLogs;
// `name` is how reports name its partition directory (host:path/<topic>-<partition>).
// A peer that speaks only version 1 is kUnsupported, naming R63.
Result<std::unique_ptr<ReplicaLogSource>> OpenRemoteReplica(std::shared_ptr<Client> client,
                                                            const std::string& topic,
                                                            int32_t partition, std::string name,
                                                            const DecodeLimits& limits = {});

// R63: ReplicaCheck of a partition of the replica root reached through
// `client`; `name` is how its partition directory is named (host:path/
// <topic>-<partition>), the damage's file named in it. A peer that speaks
// only version 1 is kUnsupported.
Result<ReplicaCheckReply> QueryReplicaCheck(Client& client, const std::string& topic,
                                            int32_t partition, bool verify,
                                            const std::string& name);
// The server's side: what the partition directory `dir` records.
Result<ReplicaCheckReply> CheckReplica(const std::string& dir, bool verify);

// ---- server -----------------------------------------------------------------

// What a server answers; a missing handler answers Error unsupported.
struct Handlers {
  std::function<Result<FetchResponse>(const FetchMessage&)> fetch;
  std::function<Result<EpochEndOffset>(const OffsetForLeaderEpochMessage&)> offset_for_leader_epoch;
  std::function<Result<ReplicaStatusReply>(const PartitionRef&)> replica_status;
  std::function<Result<CarryStateReply>(const PartitionRef&)> carry_state;
  std::function<Result<LogChunk>(const ReadLogMessage&)> read_log;                     // version 2
  std::function<Result<ReplicaCheckReply>(const ReplicaCheckMessage&)> replica_check;  // version 2
  std::function<Result<std::string>()> load_state;
  std::function<Result<PartitionState>(const AlterPartitionMessage&)> alter_partition;
  std::function<Result<int64_t>(const std::string&)> producer_id;
  // Called after each response is sent, before the next request is read
  // (while the client works on the response): work that readies the next
  // answer (ReplicaLog::ReadAhead), never changing what any answer is.
  std::function<void()> after_reply;
};
struct ServeOptions {
  int idle_timeout_ms = kDefaultIdleTimeoutMs;
  std::string name = "mq";  // HelloReply's server
  std::string peer = "client";
  const std::atomic<bool>* stop = nullptr;  // checked at least every 200 ms
  uint16_t max_version = kVersion;  // the highest version it speaks (tests: an earlier server)
};
// Answers requests read from `in_fd` on `out_fd` until end of input (OK),
// the idle timeout (OK), `stop` (OK) or a breach (its status, after an
// Error frame when one can be sent).
Status Serve(int in_fd, int out_fd, const Handlers& handlers, const ServeOptions& options);

// The status an Error code stands for (§19.3's table), and back.
uint8_t ErrorCodeOf(Code code);
Code CodeOfError(uint8_t code);

}  // namespace mq::wire
