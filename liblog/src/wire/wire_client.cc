// The wire protocol's client (format-spec/protocol.md §19.2, mq/wire.h)
// and the replication seams over it: a leader on another host
// (RemoteLeaderLink), the controller's cluster state (RemoteClusterStore)
// and a replica's log read for comparison (OpenRemoteReplica, R63).
#include <algorithm>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "mq/topic.h"
#include "mq/wire.h"
#include "wire/wire_frame.h"

namespace mq::wire {

// ---- client -------------------------------------------------------------------------

Client::Client(Connect connect, std::string peer, Options options)
    : connect_(std::move(connect)), peer_(std::move(peer)), options_(std::move(options)) {}

void Client::Drop() {
  conn_.reset();
  // The last reply's payload stays valid until the next Call or Collect: a
  // Post that fails drops the connection while its caller still uses the
  // reply before it (a FetchReply's batches borrowed from this buffer, R62).
  if (reader_) spent_ = std::move(reader_);
  posted_.reset();
}

Status Client::Send(Type type, std::span<const std::byte> payload) {
  return WriteFrame(conn_->write_fd(), type, next_correlation_, payload, {}, options_.timeout_ms,
                    peer_, nullptr);
}

Result<FrameView> Client::Receive(int timeout_ms, bool* batches_checked) {
  FrameReader& r = *reader_;
  auto f = ReadFrame<FrameView>(conn_->read_fd(), r, timeout_ms, peer_, nullptr, nullptr,
                                [&r, batches_checked] { return r.NextView(batches_checked); });
  if (!f) return f.error();
  if (f->correlation != next_correlation_)  // R50
    return Status::Corruption(peer_, reader_->position(), "R50",
                              fmt::format("response to request {} while waiting for {}",
                                          f->correlation, next_correlation_));
  return f;
}

Status Client::Handshake() {
  auto conn = connect_();
  if (!conn) return conn.error();
  ++connects_;
  conn_ = std::move(*conn);
  reader_ = std::make_unique<FrameReader>(peer_);
  next_correlation_ = 0;
  Hello hello;
  hello.max_version = options_.max_version;
  hello.client = options_.name;
  auto payload = Encode(hello);
  MQ_RETURN_IF_ERROR(Send(Type::kHello, payload));
  auto reply = Receive(options_.timeout_ms);
  if (!reply) return reply.error();
  ++next_correlation_;
  if (reply->type == Type::kError) return DecodeError(reply->payload, peer_);
  if (reply->type != Type::kHelloReply)
    return Status::Corruption(peer_, 0, "R49", "the first response is not HelloReply");
  auto r = DecodeHelloReply(reply->payload, peer_);
  if (!r) return r.error();
  if (r->version < hello.min_version || r->version > hello.max_version)
    return Status(Code::kUnsupported,
                  fmt::format("{}: speaks wire protocol version {}, not {}-{} (R49)", peer_,
                              r->version, hello.min_version, hello.max_version));
  version_ = r->version;
  last_used_ms_ = MonotonicMs();
  return Status::Ok();
}

Result<std::span<const std::byte>> Client::CallLocked(Type type, std::span<const std::byte> payload,
                                                      int timeout_ms, bool* batches_checked) {
  if (!conn_) MQ_RETURN_IF_ERROR(Handshake());
  if ((type == Type::kReadLog || type == Type::kReplicaCheck) &&
      version_ < format::kWireReadReplicaVersion) {
    // Never sent: to a server of version 1 it is no request (R50, R63).
    answered_ = true;
    return Status(
        Code::kUnsupported,
        fmt::format("{}: speaks wire protocol version {}: {} needs version 2 "
                    "(an mq-replicate that reads replicas for comparison, R63)",
                    peer_, version_, type == Type::kReadLog ? "ReadLog" : "ReplicaCheck"));
  }
  if (posted_) {
    // The response to a posted request nobody collects: read and dropped
    // (R62), unless it breaches the protocol.
    const Type posted = *posted_;
    posted_.reset();
    auto dropped = AwaitLocked(posted, timeout_ms);
    if (!dropped && !answered_) return dropped.error();
    answered_ = false;
  }
  MQ_RETURN_IF_ERROR(Send(type, payload));
  return AwaitLocked(type, timeout_ms, batches_checked);
}

Result<std::span<const std::byte>> Client::AwaitLocked(Type type, int timeout_ms,
                                                       bool* batches_checked) {
  auto reply = Receive(timeout_ms, batches_checked);
  if (!reply) return reply.error();
  ++next_correlation_;
  last_used_ms_ = MonotonicMs();
  if (reply->type == Type::kError) {
    // The server answered: the conversation goes on, unless it said that
    // our request breached the protocol (then it has ended).
    Status s = DecodeError(reply->payload, peer_);
    answered_ = s.code() != Code::kCorruption;
    return s;
  }
  const auto want = static_cast<Type>(static_cast<uint8_t>(type) | format::kWireReplyBit);
  if (reply->type != want)
    return Status::Corruption(
        peer_, reader_->position(), "R50",
        fmt::format("response type 0x{:02x} to request type 0x{:02x}",
                    static_cast<uint8_t>(reply->type), static_cast<uint8_t>(type)));
  return reply->payload;
}

Result<std::span<const std::byte>> Client::Call(Type type, std::span<const std::byte> payload,
                                                int extra_wait_ms, bool* batches_checked) {
  std::lock_guard lock(mu_);
  spent_.reset();  // the previous reply is no longer used
  if (conn_ && MonotonicMs() - last_used_ms_ > kPingAfterIdleMs) {
    auto pong = CallLocked(Type::kPing, {}, options_.timeout_ms);
    if (!pong) Drop();  // found dead (or answered oddly): start again below
  }
  answered_ = false;
  auto r = CallLocked(type, payload, options_.timeout_ms + extra_wait_ms, batches_checked);
  if (!r && !answered_) return Failed(r.error());
  return r;
}

Status Client::Failed(const Status& s) {
  // A timeout, end of stream, breach or failed start leaves the
  // conversation in an unknown state: it starts again at the next call
  // (R50, R52). To the caller the peer is unavailable; a server process
  // that ended says how (a failed ssh, a missing program).
  const std::string note = conn_ ? conn_->ExitNote() : "";
  Drop();
  const std::string why = note.empty() ? "" : fmt::format(" ({})", note);
  if (s.code() != Code::kUnavailable)
    return Status(Code::kUnavailable, fmt::format("connection dropped: {}{}", s.message(), why));
  if (!why.empty()) return Status(Code::kUnavailable, s.message() + why);
  return s;
}

Result<uint64_t> Client::Post(Type type, std::span<const std::byte> payload) {
  std::lock_guard lock(mu_);
  answered_ = false;
  Status s = [&]() -> Status {
    if (!conn_) MQ_RETURN_IF_ERROR(Handshake());
    if (posted_) return Status(Code::kInternal, "a posted request is still unanswered");
    return Send(type, payload);
  }();
  if (!s.ok()) return Failed(s);
  posted_ = type;
  return ++posts_;
}

Result<std::span<const std::byte>> Client::Collect(int extra_wait_ms, bool* batches_checked) {
  std::lock_guard lock(mu_);
  spent_.reset();  // the previous reply is no longer used
  if (!posted_) return Status(Code::kInternal, "no posted request to collect");
  const Type type = *posted_;
  posted_.reset();
  answered_ = false;
  auto r = AwaitLocked(type, options_.timeout_ms + extra_wait_ms, batches_checked);
  if (!r && !answered_) return Failed(r.error());
  return r;
}

namespace {

class WireLink : public LeaderLink {
 public:
  WireLink(std::shared_ptr<Client> client, std::string topic, int32_t partition, uint32_t wait)
      : client_(std::move(client)), topic_(std::move(topic)), partition_(partition), wait_(wait) {}
  Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                              int32_t requested_epoch) override {
    OffsetForLeaderEpochMessage m{topic_, partition_, leader_epoch, requested_epoch};
    auto reply = client_->Call(Type::kOffsetForLeaderEpoch, Encode(m));
    if (!reply) return reply.error();
    return DecodeOffsetForLeaderEpochReply(*reply, client_->peer());
  }
  Result<FetchResponse> Fetch(const FetchRequest& request) override {
    // The batches' CRCs are checked in the pass that checks the frame's.
    bool checked = false;
    if (lost_) {
      // The fetch sent ahead found the connection gone: this fetch fails as
      // it would have (the next call starts a new conversation).
      Status s = std::move(*lost_);
      lost_.reset();
      return s;
    }
    Result<std::span<const std::byte>> reply = Status::Ok();
    if (ahead_ && client_->posted(ahead_serial_) && Same(*ahead_, request)) {
      // Asked for ahead while the previous batches were appended (R62).
      reply = client_->Collect(0, &checked);
    } else {
      // A posted request for anything else is read and dropped first.
      FetchMessage m{topic_, partition_, request, wait_};
      reply = client_->Call(Type::kFetch, Encode(m), static_cast<int>(wait_), &checked);
    }
    ahead_.reset();
    if (!reply) return reply.error();
    // The batches stay in the client's buffer until its next call: the
    // follower appends them before it calls again.
    auto r = DecodeFetchReply(*reply, client_->peer(), /*borrow=*/true);
    if (!r) return r;
    r->batches_checked = checked;
    Ahead(request, *r);
    return r;
  }

 private:
  static bool Same(const FetchRequest& a, const FetchRequest& b) {
    return a.replica == b.replica && a.leader_epoch == b.leader_epoch &&
           a.fetch_offset == b.fetch_offset && a.max_bytes == b.max_bytes &&
           a.held_offset == b.held_offset;
  }

  // R62: when the leader holds more than `r` brings, the next fetch is sent
  // now, before the follower appends `r`: the leader reads and sends it
  // meanwhile. Its position stays what the follower holds (`request`'s
  // fetch offset); a follower that does not ask for it next drops it.
  void Ahead(const FetchRequest& request, const FetchResponse& r) {
    if (client_->version() < format::kWireFetchAheadVersion || !r.batches_checked) return;
    const auto data = r.data();
    if (data.empty()) return;
    // The offset after the last batch (whole batches: checked above).
    size_t at = 0, last = 0;
    while (at + format::kBatchHeaderSize <= data.size()) {
      last = at;
      at +=
          format::kLogOverhead +
          static_cast<uint32_t>(coding::GetFixed32(data.data() + at + format::kBatchLengthOffset));
    }
    if (at != data.size()) return;
    const int64_t next =
        static_cast<int64_t>(coding::GetFixed64(data.data() + last + format::kBaseOffsetOffset)) +
        static_cast<int32_t>(
            coding::GetFixed32(data.data() + last + format::kLastOffsetDeltaOffset)) +
        1;
    if (next <= request.fetch_offset || next >= r.log_end_offset) return;
    FetchRequest ahead = request;
    ahead.fetch_offset = next;
    ahead.held_offset = request.fetch_offset;
    FetchMessage m{topic_, partition_, ahead, 0};
    auto serial = client_->Post(Type::kFetchAhead, EncodeFetchAhead(m));
    if (!serial) {
      lost_ = serial.error();
      return;
    }
    // What the follower's next fetch asks for once it appended `r`.
    ahead.held_offset = -1;
    ahead_ = ahead;
    ahead_serial_ = *serial;
  }

  std::shared_ptr<Client> client_;
  std::string topic_;
  int32_t partition_;
  uint32_t wait_;
  std::optional<Status> lost_;         // a fetch sent ahead that could not be sent
  std::optional<FetchRequest> ahead_;  // what a posted FetchAhead answers
  uint64_t ahead_serial_ = 0;          // its Client::Post serial
};

// The threads of one process share it (mq-replicate --follow: a topic's
// partitions, each on a thread of its own, reach the controller through
// one store): a reply's payload is the client's buffer, valid only until
// the client's next call, so each call is decoded before another thread
// calls (mu_).
class WireStore : public ClusterStore {
 public:
  explicit WireStore(std::shared_ptr<Client> client) : client_(std::move(client)) {}
  Result<ClusterState> Load() override {
    std::lock_guard lock(mu_);
    auto reply = client_->Call(Type::kLoadState, {});
    if (!reply) return reply.error();
    auto text = DecodeLoadStateReply(*reply, client_->peer());
    if (!text) return text.error();
    return ClusterState::Parse(*text, client_->peer() + ": cluster-state");
  }
  Result<PartitionState> AlterPartition(const PartitionState& proposed,
                                        std::string_view reason) override {
    AlterPartitionMessage m{proposed, std::string(reason)};
    std::lock_guard lock(mu_);
    auto reply = client_->Call(Type::kAlterPartition, Encode(m));
    if (!reply) return reply.error();
    return DecodeAlterPartitionReply(*reply, client_->peer(), proposed.topic, proposed.partition);
  }
  Result<int64_t> ProducerId(std::string_view name) override {
    // Refused here, as the file store refuses it: sent, it would be an R51
    // breach that ends the conversation.
    MQ_RETURN_IF_ERROR(ValidateName(name, "producer id"));
    std::lock_guard lock(mu_);
    auto reply = client_->Call(Type::kProducerId, EncodeProducerId(name));
    if (!reply) return reply.error();
    return DecodeProducerIdReply(*reply, client_->peer());
  }

 private:
  std::shared_ptr<Client> client_;
  std::mutex mu_;  // from a call to its reply decoded
};

}  // namespace

std::unique_ptr<LeaderLink> RemoteLeaderLink(std::shared_ptr<Client> client, std::string topic,
                                             int32_t partition, uint32_t max_wait_ms) {
  return std::make_unique<WireLink>(std::move(client), std::move(topic), partition,
                                    std::min(max_wait_ms, format::kWireMaxWaitMs));
}

std::unique_ptr<ClusterStore> RemoteClusterStore(std::shared_ptr<Client> client) {
  return std::make_unique<WireStore>(std::move(client));
}

Result<ReplicaStatusReply> QueryReplicaStatus(Client& client, const std::string& topic,
                                              int32_t partition) {
  auto reply = client.Call(Type::kReplicaStatus, Encode(PartitionRef{topic, partition}));
  if (!reply) return reply.error();
  return DecodeReplicaStatusReply(*reply, client.peer());
}

Result<CarryStateReply> QueryCarryState(Client& client, const std::string& topic,
                                        int32_t partition) {
  auto reply = client.Call(Type::kCarryState, Encode(PartitionRef{topic, partition}));
  if (!reply) return reply.error();
  return DecodeCarryStateReply(*reply, client.peer(), topic, partition);
}

namespace {

// A replica's corruption, named as the replica is (`name`: HOST:PATH): its
// file is a name in the partition directory there.
Status OnReplica(const Status& e, const std::string& name) {
  return Status::Corruption(e.file().empty() ? name : name + "/" + e.file(), e.position(), e.rule(),
                            WhatOf(e));
}

// R63: a replica's log read through ReadLog, a chunk at a time.
class WireReplica : public ReplicaLogSource {
 public:
  WireReplica(std::shared_ptr<Client> client, std::string topic, int32_t partition,
              std::string name, const DecodeLimits& limits)
      : client_(std::move(client)),
        topic_(std::move(topic)),
        partition_(partition),
        name_(std::move(name)),
        limits_(limits) {}

  Status Open() {
    auto c = Read(-1, 0);
    if (!c) return c.error();
    start_ = c->log_start_offset;
    end_ = c->log_end_offset;
    if (!c->stop.ok())
      hw_ = c->stop;
    else if (c->high_watermark < 0)
      hw_ = Status(Code::kNotFound, name_ + ": no high watermark");
    else
      hw_ = c->high_watermark;
    return Status::Ok();
  }
  int64_t log_start_offset() override { return start_; }
  int64_t log_end_offset() override { return end_; }
  Result<int64_t> HighWatermark() override { return hw_; }
  Status Seek(int64_t offset) override {
    next_ = std::max<int64_t>(offset, 0);
    chunk_ = LogChunk{};
    at_ = 0;
    stopped_ = false;
    return Status::Ok();
  }
  Result<std::optional<BatchView>> Next() override {
    if (at_ >= chunk_.batches.size()) {
      if (!chunk_.stop.ok()) {
        stopped_ = true;
        return chunk_.stop;
      }
      if (stopped_) return std::optional<BatchView>();
      auto c = Read(next_, kChunkBytes);
      if (!c) return c.error();
      chunk_ = std::move(*c);
      at_ = 0;
      if (chunk_.batches.empty()) {
        if (!chunk_.stop.ok()) return chunk_.stop;
        stopped_ = true;  // its log end
        return std::optional<BatchView>();
      }
    }
    const std::string file = name_ + "/" + chunk_.file;
    const uint64_t position = chunk_.position + at_;
    auto b = BatchView::Parse(std::span<const std::byte>(chunk_.batches).subspan(at_), limits_,
                              file, position);
    if (!b) return b.error();
    at_ += b->header().size_bytes();
    position_ = {file, position};
    next_ = b->header().last_offset() + 1;
    return std::optional<BatchView>(*b);
  }
  LogPosition position() const override { return position_; }

 private:
  static constexpr uint32_t kChunkBytes = 1u << 20;

  Result<LogChunk> Read(int64_t offset, uint32_t max_bytes) {
    auto reply = client_->Call(Type::kReadLog,
                               Encode(ReadLogMessage{topic_, partition_, offset, max_bytes}));
    if (!reply) return reply.error();
    auto c = DecodeReadLogReply(*reply, client_->peer());
    if (!c) return c.error();
    // The stop's file is a name in the partition directory: named as the
    // replica is.
    if (!c->stop.ok()) c->stop = OnReplica(c->stop, name_);
    return c;
  }

  std::shared_ptr<Client> client_;
  std::string topic_;
  int32_t partition_;
  std::string name_;
  DecodeLimits limits_;
  int64_t start_ = 0;
  int64_t end_ = 0;
  Result<int64_t> hw_ = Status(Code::kNotFound, "");
  int64_t next_ = 0;
  LogChunk chunk_;
  size_t at_ = 0;
  bool stopped_ = false;
  LogPosition position_;
};

}  // namespace

Result<ReplicaCheckReply> QueryReplicaCheck(Client& client, const std::string& topic,
                                            int32_t partition, bool verify,
                                            const std::string& name) {
  auto reply =
      client.Call(Type::kReplicaCheck, Encode(ReplicaCheckMessage{topic, partition, verify}));
  if (!reply) return reply.error();
  auto r = DecodeReplicaCheckReply(*reply, client.peer());
  if (!r) return r.error();
  if (!r->damage.ok()) r->damage = OnReplica(r->damage, name);
  return r;
}

Result<ReplicaCheckReply> CheckReplica(const std::string& dir, bool verify) {
  ReplicaCheckReply r;
  auto stop = ReadFollowerStop(dir);
  // A record that cannot be read counts as none (mq-inspect --verify
  // reports a damaged one), as on the replica's own host.
  if (stop) r.stop = *stop;
  // A leader's record of its followers' fetches (R47, its fetch-positions,
  // R60), for describe's times; one that cannot be read counts as none, as
  // on its host.
  if (auto positions = ReadReplicaPositions(dir)) r.positions = std::move(*positions);
  if (verify) {
    Status s = VerifyForLeadership(dir);
    if (s.code() == Code::kCorruption)
      r.damage = s;
    else if (!s.ok())
      return s;
  }
  return r;
}

Result<std::unique_ptr<ReplicaLogSource>> OpenRemoteReplica(std::shared_ptr<Client> client,
                                                            const std::string& topic,
                                                            int32_t partition, std::string name,
                                                            const DecodeLimits& limits) {
  auto r =
      std::make_unique<WireReplica>(std::move(client), topic, partition, std::move(name), limits);
  MQ_RETURN_IF_ERROR(r->Open());
  return std::unique_ptr<ReplicaLogSource>(std::move(r));
}

}  // namespace mq::wire
