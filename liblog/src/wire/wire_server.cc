// The wire protocol's server loop (format-spec/protocol.md §19.2, mq/wire.h
// Serve): the conversation's rules (R49, R50), each request answered by
// the tool's handlers.
#include <algorithm>

#include <fmt/format.h>

#include "format/format.h"
#include "mq/wire.h"
#include "wire/wire_frame.h"

namespace mq::wire {

// ---- server ---------------------------------------------------------------------------

namespace {

// A reply: its type, and its payload in two parts (a FetchReply's batches
// are written after its fields without being copied next to them).
struct Reply {
  Type type;
  std::vector<std::byte> body;
  std::vector<std::byte> owned;      // the tail when the reply holds it
  std::span<const std::byte> tail;   // sent after `body` (a fetch's batches)
  std::optional<uint32_t> tail_crc;  // its CRC-32C, when known (FetchResponse::crc)
  FileBytes file;  // the tail left in a file (FetchResponse::file), when its size is not 0
  Reply(Type t, std::vector<std::byte> b) : type(t), body(std::move(b)) {}
};

Reply Unsupported(const char* what) {
  return Reply(
      Type::kError,
      EncodeError(Status(Code::kUnsupported, fmt::format("this server does not answer {}", what))));
}

// The reply to a request of type `request`: its handler's `result`
// encoded, or the handler's error.
template <typename R>
Result<Reply> ReplyTo(Type request, R&& result) {
  if (!result) return Reply(Type::kError, EncodeError(result.error()));
  return Reply(static_cast<Type>(static_cast<uint8_t>(request) | format::kWireReplyBit),
               Encode(*result));
}

Status NotARequest(const Frame& f, const std::string& peer) {
  return Status::Corruption(
      peer, 0, "R50",
      fmt::format("request type 0x{:02x} is not a request", static_cast<uint8_t>(f.type)));
}

// Answers a Fetch or a FetchAhead: the reply's fields, then the batches
// (owned, the handler's buffer or the handler's file).
Result<Reply> AnswerFetch(const Handlers& h, const Frame& f, const std::string& peer,
                          uint16_t version) {
  const bool ahead = f.type == Type::kFetchAhead;
  if (ahead && version < format::kWireFetchAheadVersion)  // R49, R62
    return Status::Corruption(peer, 0, "R62",
                              fmt::format("FetchAhead in a conversation of version {}", version));
  auto m = ahead ? DecodeFetchAhead(f.payload, peer) : DecodeFetch(f.payload, peer);
  if (!m) return m.error();
  if (!h.fetch) return Unsupported(ahead ? "FetchAhead" : "Fetch");
  auto r = h.fetch(*m);
  if (!r) return Reply(Type::kError, EncodeError(r.error()));
  Reply out(ahead ? Type::kFetchAheadReply : Type::kFetchReply, EncodeFetchReplyHead(*r));
  out.tail_crc = r->crc;
  if (r->file.size > 0) {
    out.file = r->file;  // the handler's file: sent before its next call
  } else if (r->borrowed.empty()) {
    out.owned = std::move(r->batches);
    out.tail = out.owned;
  } else {
    out.tail = r->borrowed;  // the handler's buffer: sent before its next call
  }
  return out;
}

// Answers the cluster's requests: LoadState, AlterPartition, ProducerId.
Result<Reply> AnswerCluster(const Handlers& h, const Frame& f, const std::string& peer) {
  switch (f.type) {
    case Type::kLoadState: {
      if (!f.payload.empty())
        return Status::Corruption(peer, 0, "R51", "LoadState: the message has no fields");
      if (!h.load_state) return Unsupported("LoadState");
      auto state = h.load_state();
      if (!state) return Reply(Type::kError, EncodeError(state.error()));
      return Reply(Type::kLoadStateReply, EncodeLoadStateReply(*state));
    }
    case Type::kAlterPartition: {
      auto m = DecodeAlterPartition(f.payload, peer);
      if (!m) return m.error();
      if (!h.alter_partition) return Unsupported("AlterPartition");
      auto stored = h.alter_partition(*m);
      if (!stored) return Reply(Type::kError, EncodeError(stored.error()));
      return Reply(Type::kAlterPartitionReply, EncodeAlterPartitionReply(*stored));
    }
    case Type::kProducerId: {
      auto m = DecodeProducerId(f.payload, peer);
      if (!m) return m.error();
      if (!h.producer_id) return Unsupported("ProducerId");
      auto id = h.producer_id(*m);
      if (!id) return Reply(Type::kError, EncodeError(id.error()));
      return Reply(Type::kProducerIdReply, EncodeProducerIdReply(*id));
    }
    default:
      return NotARequest(f, peer);
  }
}

// Answers one request (after Hello) of a conversation in `version`.
Result<Reply> Answer(const Handlers& h, const Frame& f, const std::string& peer, uint16_t version) {
  switch (f.type) {
    case Type::kPing:
      return Reply(Type::kPong, {});
    case Type::kFetch:
    case Type::kFetchAhead:
      return AnswerFetch(h, f, peer, version);
    case Type::kOffsetForLeaderEpoch: {
      auto m = DecodeOffsetForLeaderEpoch(f.payload, peer);
      if (!m) return m.error();
      if (!h.offset_for_leader_epoch) return Unsupported("OffsetForLeaderEpoch");
      return ReplyTo(f.type, h.offset_for_leader_epoch(*m));
    }
    case Type::kReplicaStatus: {
      auto m = DecodePartitionRef(f.payload, peer);
      if (!m) return m.error();
      if (!h.replica_status) return Unsupported("ReplicaStatus");
      return ReplyTo(f.type, h.replica_status(*m));
    }
    case Type::kCarryState: {
      auto m = DecodePartitionRef(f.payload, peer, "CarryState");
      if (!m) return m.error();
      if (!h.carry_state) return Unsupported("CarryState");
      return ReplyTo(f.type, h.carry_state(*m));
    }
    case Type::kReadLog: {
      if (version < format::kWireReadReplicaVersion)
        return Status::Corruption(peer, 0, "R63",
                                  fmt::format("ReadLog in a conversation of version {}", version));
      auto m = DecodeReadLog(f.payload, peer);
      if (!m) return m.error();
      if (!h.read_log) return Unsupported("ReadLog");
      return ReplyTo(f.type, h.read_log(*m));
    }
    case Type::kReplicaCheck: {
      if (version < format::kWireReadReplicaVersion)
        return Status::Corruption(
            peer, 0, "R63", fmt::format("ReplicaCheck in a conversation of version {}", version));
      auto m = DecodeReplicaCheck(f.payload, peer);
      if (!m) return m.error();
      if (!h.replica_check) return Unsupported("ReplicaCheck");
      return ReplyTo(f.type, h.replica_check(*m));
    }
    case Type::kLoadState:
    case Type::kAlterPartition:
    case Type::kProducerId:
      return AnswerCluster(h, f, peer);
    default:
      return NotARequest(f, peer);
  }
}

// The conversation's version (R49) from the client's Hello `f`: the
// highest both speak.
Result<uint16_t> AgreeVersion(const Frame& f, const ServeOptions& o) {
  if (f.type != Type::kHello)
    return Status::Corruption(o.peer, 0, "R49", "the first request is not Hello");
  auto hello = DecodeHello(f.payload, o.peer);
  if (!hello) return hello.error();
  if (hello->min_version > o.max_version || hello->max_version < kMinVersion ||
      hello->min_version > hello->max_version)
    return Status(Code::kUnsupported,
                  fmt::format("client speaks versions {}-{}; this server speaks {}-{} (R49)",
                              hello->min_version, hello->max_version, kMinVersion, o.max_version));
  return std::min(hello->max_version, o.max_version);
}

}  // namespace

Status Serve(int in_fd, int out_fd, const Handlers& handlers, const ServeOptions& o) {
  SetNonBlocking(in_fd);
  SetNonBlocking(out_fd);
  FrameReader reader(o.peer);
  uint32_t expect = 0;
  uint16_t version = 0;  // the conversation's (R49)
  auto send = [&](Type type, uint32_t correlation, std::span<const std::byte> body,
                  std::span<const std::byte> tail = {},
                  std::optional<uint32_t> tail_crc = std::nullopt, const FileBytes& file = {}) {
    return WriteFrame(out_fd, type, correlation, body, tail, o.idle_timeout_ms, o.peer, o.stop,
                      tail_crc, file);
  };
  // A breach: say so when the peer can still hear it, then end (R50).
  auto breach = [&](const Status& s, uint32_t correlation) {
    send(Type::kError, correlation, EncodeError(s));
    return s;
  };
  for (;;) {
    bool clean_end = false;
    auto f = ReadFrame<Frame>(in_fd, reader, o.idle_timeout_ms, o.peer, o.stop, &clean_end,
                              [&reader] { return reader.Next(); });
    if (!f) {
      if (f.error().code() == Code::kUnavailable) {
        // End of input, the idle timeout or a stop: the conversation is over.
        return clean_end || (o.stop && o.stop->load()) || reader.pending() == 0 ? Status::Ok()
                                                                                : f.error();
      }
      return breach(f.error(), expect);
    }
    if (f->correlation != expect)
      return breach(
          Status::Corruption(o.peer, reader.position(), "R50",
                             fmt::format("request {} where {} was next", f->correlation, expect)),
          f->correlation);
    if (expect == 0) {  // R49
      auto agreed = AgreeVersion(*f, o);
      if (!agreed) return breach(agreed.error(), 0);
      version = *agreed;
      HelloReply reply;
      reply.version = version;
      reply.server = o.name;
      MQ_RETURN_IF_ERROR(send(Type::kHelloReply, 0, Encode(reply)));
      ++expect;
      continue;
    }
    auto answer = Answer(handlers, *f, o.peer, version);
    if (!answer) return breach(answer.error(), f->correlation);
    MQ_RETURN_IF_ERROR(send(answer->type, f->correlation, answer->body, answer->tail,
                            answer->tail_crc, answer->file));
    ++expect;
    if (handlers.after_reply) handlers.after_reply();
  }
}

}  // namespace mq::wire
