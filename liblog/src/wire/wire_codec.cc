// The wire protocol's messages (format-spec/protocol.md §19.3, mq/wire.h):
// their payloads encoded and decoded (R51), and its error codes.
#include <errno.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "mq/topic.h"
#include "mq/wire.h"
#include "wire/wire_frame.h"

namespace mq::wire {

// The versions mq/wire.h gives its callers are format.h's.
static_assert(kVersion == format::kWireVersion && kMinVersion == format::kWireMinVersion);

namespace {

// ---- payload writer and reader (R51) ----------------------------------------

class Writer {
 public:
  Writer& U8(uint8_t v) {
    out_.push_back(std::byte{v});
    return *this;
  }
  Writer& U16(uint16_t v) {
    std::byte b[2];
    coding::PutFixed16(b, v);
    out_.insert(out_.end(), b, b + 2);
    return *this;
  }
  Writer& U32(uint32_t v) {
    std::byte b[4];
    coding::PutFixed32(b, v);
    out_.insert(out_.end(), b, b + 4);
    return *this;
  }
  Writer& I32(int32_t v) { return U32(static_cast<uint32_t>(v)); }
  Writer& I64(int64_t v) {
    std::byte b[8];
    coding::PutFixed64(b, static_cast<uint64_t>(v));
    out_.insert(out_.end(), b, b + 8);
    return *this;
  }
  Writer& Str(std::string_view s) {
    const size_t n = std::min<size_t>(s.size(), 0xFFFF);
    U16(static_cast<uint16_t>(n));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + n);
    return *this;
  }
  Writer& Bytes(std::span<const std::byte> b) {
    U32(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  Writer& List(const std::vector<int32_t>& ids) {
    U32(static_cast<uint32_t>(ids.size()));
    for (int32_t id : ids) I32(id);
    return *this;
  }
  std::vector<std::byte> Take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  Reader(std::span<const std::byte> p, const std::string& peer, const char* message)
      : p_(p), peer_(peer), message_(message) {}
  bool U8(uint8_t* v) {
    if (!Need(1, "a byte")) return false;
    *v = std::to_integer<uint8_t>(p_[pos_]);
    pos_ += 1;
    return true;
  }
  bool U16(uint16_t* v) {
    if (!Need(2, "a 16-bit field")) return false;
    *v = coding::GetFixed16(p_.data() + pos_);
    pos_ += 2;
    return true;
  }
  bool U32(uint32_t* v) {
    if (!Need(4, "a 32-bit field")) return false;
    *v = coding::GetFixed32(p_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool I32(int32_t* v) {
    uint32_t u;
    if (!U32(&u)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  // An i32 that must be >= `min`.
  bool I32Min(int32_t* v, int32_t min, const char* what) {
    const size_t at = pos_;
    return I32(v) && AtLeast(at, *v, min, what);
  }
  bool I64(int64_t* v) {
    if (!Need(8, "a 64-bit field")) return false;
    *v = static_cast<int64_t>(coding::GetFixed64(p_.data() + pos_));
    pos_ += 8;
    return true;
  }
  bool Str(std::string* s) {
    uint16_t n;
    if (!U16(&n)) return false;
    if (!Need(n, "a string's bytes")) return false;
    s->assign(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool Topic(std::string* s) {
    size_t at = pos_;
    if (!Str(s)) return false;
    if (Status v = ValidateName(*s, "topic"); !v.ok()) return Fail(at, v.message());
    return true;
  }
  // A u8 that is 0 or 1.
  bool Flag(bool* b, const char* what) {
    const size_t at = pos_;
    uint8_t v;
    if (!U8(&v)) return false;
    if (v > 1) return Fail(at, fmt::format("{} {} is neither 0 nor 1", what, v));
    *b = v == 1;
    return true;
  }
  // A name under the topic name rules (R12): a group, a producer id, or a
  // member id (which may also be empty).
  bool Name(std::string* s, const char* what, bool empty_ok = false) {
    size_t at = pos_;
    if (!Str(s)) return false;
    if (empty_ok && s->empty()) return true;
    if (Status v = ValidateName(*s, what); !v.ok()) return Fail(at, v.message());
    return true;
  }
  // A list's count, when each item takes at least `min_item` bytes.
  bool Count(uint32_t* n, size_t min_item, const char* what) {
    size_t at = pos_;
    if (!U32(n)) return false;
    if (*n > (p_.size() - pos_) / min_item)
      return Fail(at, fmt::format("{}: {} items do not fit", what, *n));
    return true;
  }
  // An i64 that must be >= `min`.
  bool I64Min(int64_t* v, int64_t min, const char* what) {
    const size_t at = pos_;
    return I64(v) && AtLeast(at, *v, min, what);
  }
  // The number read at `at` is >= `min`.
  bool AtLeast(size_t at, int64_t v, int64_t min, const char* what) {
    return v >= min || Fail(at, fmt::format("{} {} is below {}", what, v, min));
  }
  bool Bytes(std::vector<std::byte>* b) {
    uint32_t n;
    if (!U32(&n)) return false;
    if (!Need(n, "a byte field")) return false;
    b->assign(p_.begin() + static_cast<std::ptrdiff_t>(pos_),
              p_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return true;
  }
  // The same as Bytes without copying: a view into the payload.
  bool View(std::span<const std::byte>* b) {
    uint32_t n;
    if (!U32(&n)) return false;
    if (!Need(n, "a byte field")) return false;
    *b = p_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool List(std::vector<int32_t>* ids, const char* what) {
    uint32_t n;
    size_t at = pos_;
    if (!U32(&n)) return false;
    if (n > (p_.size() - pos_) / 4) return Fail(at, fmt::format("{}: {} ids do not fit", what, n));
    ids->clear();
    for (uint32_t i = 0; i < n; ++i) {
      int32_t id;
      if (!I32Min(&id, 0, what)) return false;
      ids->push_back(id);
    }
    return true;
  }
  // R51: nothing after the fields.
  Status Finish() {
    if (status_.ok() && pos_ != p_.size())
      Fail(pos_, fmt::format("{} bytes after the message's fields", p_.size() - pos_));
    return status_;
  }

 private:
  bool Need(size_t n, const char* what) {
    if (p_.size() - pos_ >= n) return true;
    return Fail(pos_, fmt::format("payload ends inside {}", what));
  }
  bool Fail(size_t at, std::string what) {
    if (status_.ok())
      status_ = Status::Corruption(peer_, at, "R51", fmt::format("{}: {}", message_, what));
    pos_ = p_.size();
    return false;
  }
  std::span<const std::byte> p_;
  const std::string& peer_;
  const char* message_;
  size_t pos_ = 0;
  Status status_;
};

template <typename T>
Result<T> Done(Reader& r, T value) {
  MQ_RETURN_IF_ERROR(r.Finish());
  return value;
}

}  // namespace

// ---- messages ---------------------------------------------------------------------

std::vector<std::byte> Encode(const Hello& m) {
  return Writer().U16(m.min_version).U16(m.max_version).Str(m.client).Take();
}
std::vector<std::byte> Encode(const HelloReply& m) {
  return Writer().U16(m.version).Str(m.server).Take();
}
std::vector<std::byte> Encode(const FetchMessage& m) {
  return Writer()
      .Str(m.topic)
      .I32(m.partition)
      .I32(m.request.replica)
      .I32(m.request.leader_epoch)
      .I64(m.request.fetch_offset)
      .U32(static_cast<uint32_t>(std::min<size_t>(m.request.max_bytes, format::kWireMaxPayload)))
      .U32(m.max_wait_ms)
      .Take();
}
std::vector<std::byte> EncodeFetchAhead(const FetchMessage& m) {
  std::vector<std::byte> out = Encode(m);
  std::vector<std::byte> held = Writer().I64(m.request.held_offset).Take();
  out.insert(out.end(), held.begin(), held.end());
  return out;
}
std::vector<std::byte> Encode(const FetchResponse& m) {
  std::vector<std::byte> out = EncodeFetchReplyHead(m);
  if (m.file.size > 0) {  // the batches read from their file
    const size_t head = out.size();
    out.resize(head + m.file.size);
    for (size_t at = 0; at < m.file.size;) {
      ssize_t n = pread(m.file.fd, out.data() + head + at, m.file.size - at,
                        static_cast<off_t>(m.file.position + at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // short: a payload whose length breaks R51 at its reader
        out.resize(head + at);
        break;
      }
      at += static_cast<size_t>(n);
    }
    return out;
  }
  const auto batches = m.data();
  out.insert(out.end(), batches.begin(), batches.end());
  return out;
}
std::vector<std::byte> EncodeFetchReplyHead(const FetchResponse& m) {
  return Writer()
      .I32(m.leader_epoch)
      .I64(m.high_watermark)
      .I64(m.log_start_offset)
      .I64(m.log_end_offset)
      .U32(static_cast<uint32_t>(m.file.size > 0 ? m.file.size : m.data().size()))
      .Take();
}
std::vector<std::byte> Encode(const OffsetForLeaderEpochMessage& m) {
  return Writer().Str(m.topic).I32(m.partition).I32(m.leader_epoch).I32(m.requested_epoch).Take();
}
std::vector<std::byte> Encode(const EpochEndOffset& m) {
  return Writer().I32(m.epoch).I64(m.end_offset).Take();
}
std::vector<std::byte> Encode(const PartitionRef& m) {
  return Writer().Str(m.topic).I32(m.partition).Take();
}
std::vector<std::byte> Encode(const CarryStateReply& m) {
  Writer w;
  w.U32(static_cast<uint32_t>(m.offsets.size()));
  for (const CarriedOffset& o : m.offsets) {
    w.Str(o.group)
        .I64(o.committed.offset)
        .I32(o.committed.leader_epoch)
        .I64(o.committed.commit_timestamp)
        .Str(o.committed.member_id)
        .I64(o.committed.dead_letters);
  }
  w.U32(static_cast<uint32_t>(m.producers.size()));
  for (const CarriedProducer& p : m.producers) w.Str(p.name).I64(p.id);
  return w.I64(m.next_producer_id).Take();
}
std::vector<std::byte> Encode(const ReplicaStatusReply& m) {
  return Writer()
      .I64(m.log_start_offset)
      .I64(m.log_end_offset)
      .I64(m.high_watermark)
      .I32(m.latest_epoch)
      .U8(m.restarted_since_claim ? 1 : 0)
      .Take();
}
std::vector<std::byte> Encode(const AlterPartitionMessage& m) {
  const PartitionState& p = m.proposed;
  return Writer()
      .Str(p.topic)
      .I32(p.partition)
      .I32(p.leader)
      .I32(p.leader_epoch)
      .I32(p.partition_epoch)
      .List(p.isr)
      .Str(m.reason)
      .Take();
}
std::vector<std::byte> EncodeAlterPartitionReply(const PartitionState& p) {
  return Writer()
      .I32(p.leader)
      .I32(p.leader_epoch)
      .I32(p.partition_epoch)
      .List(p.isr)
      .List(p.replicas)
      .Take();
}
std::vector<std::byte> EncodeLoadStateReply(std::string_view state) {
  return Writer()
      .Bytes(std::span<const std::byte>(reinterpret_cast<const std::byte*>(state.data()),
                                        state.size()))
      .Take();
}
std::vector<std::byte> EncodeProducerId(std::string_view name) { return Writer().Str(name).Take(); }
std::vector<std::byte> EncodeProducerIdReply(int64_t id) { return Writer().I64(id).Take(); }
std::vector<std::byte> Encode(const ReadLogMessage& m) {
  return Writer().Str(m.topic).I32(m.partition).I64(m.offset).U32(m.max_bytes).Take();
}
std::string WhatOf(const Status& e) {
  const std::string prefix = fmt::format("{}: position {}: {}: ", e.file(), e.position(), e.rule());
  std::string what = e.message();
  if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
  return what;
}
namespace {
// R63's corruption fields: file (a name in the partition directory),
// position, rule and what; all empty for OK.
void PutCorruption(Writer& w, const Status& e) {
  const bool none = e.ok() || e.code() != Code::kCorruption;
  const std::string file = none ? "" : e.file().substr(e.file().find_last_of('/') + 1);
  w.Str(file)
      .I64(none ? 0 : static_cast<int64_t>(e.position()))
      .Str(none ? "" : e.rule())
      .Str(none ? "" : WhatOf(e));
}
}  // namespace
std::vector<std::byte> Encode(const LogChunk& m) {
  Writer w;
  w.I64(m.log_start_offset)
      .I64(m.log_end_offset)
      .I64(m.high_watermark)
      .Str(m.file)
      .I64(static_cast<int64_t>(m.position));
  w.Bytes(m.batches);
  PutCorruption(w, m.stop);  // what the read stopped at
  return w.Take();
}
std::vector<std::byte> Encode(const ReplicaCheckMessage& m) {
  return Writer().Str(m.topic).I32(m.partition).U8(m.verify ? 1 : 0).Take();
}
std::vector<std::byte> Encode(const ReplicaCheckReply& m) {
  Writer w;
  w.I64(m.stop ? m.stop->stopped_ms : -1).I32(m.stop ? m.stop->exit_status : 0);
  PutCorruption(w, m.damage);
  w.U32(static_cast<uint32_t>(m.positions.size()));
  for (const FollowerPosition& f : m.positions)
    w.I32(f.replica)
        .I32(f.leader_epoch)
        .I64(f.log_end_offset)
        .I64(f.last_fetch_ms)
        .I64(f.last_caught_up_ms)
        .I64(f.last_fetch_leader_leo);
  return w.Take();
}
std::vector<std::byte> EncodeError(const Status& s) {
  return Writer().U8(ErrorCodeOf(s.code())).Str(s.message()).Take();
}

Result<Hello> DecodeHello(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "Hello");
  Hello m;
  r.U16(&m.min_version) && r.U16(&m.max_version) && r.Str(&m.client);
  return Done(r, std::move(m));
}
Result<HelloReply> DecodeHelloReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "HelloReply");
  HelloReply m;
  r.U16(&m.version) && r.Str(&m.server);
  return Done(r, std::move(m));
}
namespace {
bool FetchFields(Reader& r, FetchMessage* m) {
  uint32_t max_bytes = 0;
  const bool ok = r.Topic(&m->topic) && r.I32Min(&m->partition, 0, "partition") &&
                  r.I32Min(&m->request.replica, 0, "replica") &&
                  r.I32Min(&m->request.leader_epoch, 0, "leader epoch") &&
                  r.I64(&m->request.fetch_offset) && r.U32(&max_bytes) && r.U32(&m->max_wait_ms);
  m->request.max_bytes = std::min<size_t>(max_bytes, format::kWireMaxPayload - 64);
  m->max_wait_ms = std::min(m->max_wait_ms, format::kWireMaxWaitMs);
  return ok;
}
}  // namespace

Result<FetchMessage> DecodeFetch(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "Fetch");
  FetchMessage m;
  FetchFields(r, &m);
  return Done(r, std::move(m));
}
Result<FetchMessage> DecodeFetchAhead(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "FetchAhead");
  FetchMessage m;
  const size_t at = p.size() >= 8 ? p.size() - 8 : 0;  // heldOffset's position
  FetchFields(r, &m) && r.I64Min(&m.request.held_offset, 0, "held offset") &&
      r.AtLeast(at, m.request.fetch_offset, m.request.held_offset, "fetch offset");
  return Done(r, std::move(m));
}
Result<FetchResponse> DecodeFetchReply(std::span<const std::byte> p, const std::string& peer,
                                       bool borrow) {
  Reader r(p, peer, "FetchReply");
  FetchResponse m;
  r.I32(&m.leader_epoch) && r.I64(&m.high_watermark) && r.I64(&m.log_start_offset) &&
      r.I64(&m.log_end_offset) && (borrow ? r.View(&m.borrowed) : r.Bytes(&m.batches));
  return Done(r, std::move(m));
}
Result<OffsetForLeaderEpochMessage> DecodeOffsetForLeaderEpoch(std::span<const std::byte> p,
                                                               const std::string& peer) {
  Reader r(p, peer, "OffsetForLeaderEpoch");
  OffsetForLeaderEpochMessage m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition") &&
      r.I32Min(&m.leader_epoch, 0, "leader epoch") && r.I32(&m.requested_epoch);
  return Done(r, std::move(m));
}
Result<EpochEndOffset> DecodeOffsetForLeaderEpochReply(std::span<const std::byte> p,
                                                       const std::string& peer) {
  Reader r(p, peer, "OffsetForLeaderEpochReply");
  EpochEndOffset m;
  r.I32(&m.epoch) && r.I64(&m.end_offset);
  return Done(r, m);
}
Result<PartitionRef> DecodePartitionRef(std::span<const std::byte> p, const std::string& peer,
                                        const char* message) {
  Reader r(p, peer, message);
  PartitionRef m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition");
  return Done(r, std::move(m));
}
Result<CarryStateReply> DecodeCarryStateReply(std::span<const std::byte> p, const std::string& peer,
                                              const std::string& topic, int32_t partition) {
  Reader r(p, peer, "CarryStateReply");
  CarryStateReply m;
  uint32_t n = 0;
  bool ok = r.Count(&n, 2 + 8 + 4 + 8 + 2 + 8, "offsets");
  for (uint32_t i = 0; ok && i < n; ++i) {
    CarriedOffset o;
    o.committed.topic = topic;
    o.committed.partition = partition;
    ok = r.Name(&o.group, "group") && r.I64Min(&o.committed.offset, 0, "offset") &&
         r.I32(&o.committed.leader_epoch) && r.I64(&o.committed.commit_timestamp) &&
         r.Name(&o.committed.member_id, "member id", true) &&
         r.I64Min(&o.committed.dead_letters, 0, "dead letters");
    if (ok) m.offsets.push_back(std::move(o));
  }
  ok = ok && r.Count(&n, 2 + 8, "producers");
  for (uint32_t i = 0; ok && i < n; ++i) {
    CarriedProducer c;
    ok = r.Name(&c.name, "producer id") && r.I64Min(&c.id, 0, "producer id number");
    if (ok) m.producers.push_back(std::move(c));
  }
  ok&& r.I64Min(&m.next_producer_id, -1, "next producer id");
  return Done(r, std::move(m));
}
Result<ReplicaStatusReply> DecodeReplicaStatusReply(std::span<const std::byte> p,
                                                    const std::string& peer) {
  Reader r(p, peer, "ReplicaStatusReply");
  ReplicaStatusReply m;
  r.I64(&m.log_start_offset) && r.I64(&m.log_end_offset) && r.I64(&m.high_watermark) &&
      r.I32(&m.latest_epoch) && r.Flag(&m.restarted_since_claim, "restartedSinceClaim");
  return Done(r, m);
}
Result<ReadLogMessage> DecodeReadLog(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ReadLog");
  ReadLogMessage m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition") &&
      r.I64Min(&m.offset, -1, "offset") && r.U32(&m.max_bytes);
  m.max_bytes = std::min<uint32_t>(m.max_bytes, format::kWireMaxPayload - 1024);
  return Done(r, std::move(m));
}
namespace {
struct CorruptionFields {
  std::string file, rule, what;
  int64_t position = 0;
  bool Read(Reader& r) {
    return r.Name(&file, "file", true) && r.I64Min(&position, 0, "position") &&
           r.Name(&rule, "rule", true) && r.Str(&what);
  }
  // `*out`: the status they give (R63), OK when empty; a file or message
  // without a rule breaks R51 (returned).
  Status Get(const std::string& peer, const char* message, Status* out) const {
    if (!rule.empty()) {
      *out = Status::Corruption(file, static_cast<uint64_t>(position), rule, what);
      return Status::Ok();
    }
    if (!what.empty() || !file.empty())
      return Status::Corruption(peer, 0, "R51",
                                fmt::format("{}: a corruption without its rule", message));
    *out = Status::Ok();
    return Status::Ok();
  }
};
}  // namespace
Result<LogChunk> DecodeReadLogReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ReadLogReply");
  LogChunk m;
  int64_t position = 0;
  CorruptionFields stop;
  r.I64Min(&m.log_start_offset, 0, "log start offset") &&
      r.I64Min(&m.log_end_offset, 0, "log end offset") &&
      r.I64Min(&m.high_watermark, -1, "high watermark") && r.Name(&m.file, "file", true) &&
      r.I64Min(&position, 0, "position") && r.Bytes(&m.batches) && stop.Read(r);
  auto done = Done(r, std::move(m));
  if (!done) return done;
  done->position = static_cast<uint64_t>(position);
  MQ_RETURN_IF_ERROR(stop.Get(peer, "ReadLogReply", &done->stop));
  return done;
}
Result<ReplicaCheckMessage> DecodeReplicaCheck(std::span<const std::byte> p,
                                               const std::string& peer) {
  Reader r(p, peer, "ReplicaCheck");
  ReplicaCheckMessage m;
  r.Topic(&m.topic) && r.I32Min(&m.partition, 0, "partition") && r.Flag(&m.verify, "verify");
  return Done(r, std::move(m));
}
Result<ReplicaCheckReply> DecodeReplicaCheckReply(std::span<const std::byte> p,
                                                  const std::string& peer) {
  Reader r(p, peer, "ReplicaCheckReply");
  int64_t stopped_ms = -1;
  int32_t exit_status = 0;
  CorruptionFields damage;
  ReplicaCheckReply m;
  uint32_t n = 0;
  bool ok = r.I64Min(&stopped_ms, -1, "stoppedMs") && r.I32(&exit_status) && damage.Read(r) &&
            r.Count(&n, 4 + 4 + 8 * 4, "positions");
  // R47's entries: its ranges, a replica at most once.
  for (uint32_t i = 0; ok && i < n; ++i) {
    FollowerPosition f;
    ok = r.I32Min(&f.replica, 0, "replica") && r.I32Min(&f.leader_epoch, 0, "leader epoch") &&
         r.I64Min(&f.log_end_offset, 0, "log end offset") &&
         r.I64Min(&f.last_fetch_ms, 0, "last fetch") &&
         r.I64Min(&f.last_caught_up_ms, 0, "last caught up") &&
         r.I64Min(&f.last_fetch_leader_leo, 0, "leader log end");
    for (const FollowerPosition& seen : m.positions)
      if (ok && seen.replica == f.replica)
        return Status::Corruption(peer, 0, "R51",
                                  fmt::format("ReplicaCheckReply: replica {} appears twice "
                                              "in its positions",
                                              f.replica));
    if (ok) m.positions.push_back(f);
  }
  if (stopped_ms >= 0) m.stop = FollowerStop{stopped_ms, exit_status};
  auto done = Done(r, std::move(m));
  if (!done) return done;
  MQ_RETURN_IF_ERROR(damage.Get(peer, "ReplicaCheckReply", &done->damage));
  return done;
}
Result<AlterPartitionMessage> DecodeAlterPartition(std::span<const std::byte> p,
                                                   const std::string& peer) {
  Reader r(p, peer, "AlterPartition");
  AlterPartitionMessage m;
  PartitionState& s = m.proposed;
  r.Topic(&s.topic) && r.I32Min(&s.partition, 0, "partition") &&
      r.I32Min(&s.leader, -1, "leader") && r.I32Min(&s.leader_epoch, 0, "leader epoch") &&
      r.I32Min(&s.partition_epoch, 0, "partition epoch") && r.List(&s.isr, "isr") &&
      r.Str(&m.reason);
  return Done(r, std::move(m));
}
Result<PartitionState> DecodeAlterPartitionReply(std::span<const std::byte> p,
                                                 const std::string& peer, const std::string& topic,
                                                 int32_t partition) {
  Reader r(p, peer, "AlterPartitionReply");
  PartitionState s;
  s.topic = topic;
  s.partition = partition;
  r.I32Min(&s.leader, -1, "leader") && r.I32Min(&s.leader_epoch, 0, "leader epoch") &&
      r.I32Min(&s.partition_epoch, 0, "partition epoch") && r.List(&s.isr, "isr") &&
      r.List(&s.replicas, "replicas");
  return Done(r, std::move(s));
}
Result<std::string> DecodeLoadStateReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "LoadStateReply");
  std::vector<std::byte> b;
  r.Bytes(&b);
  return Done(r, std::string(reinterpret_cast<const char*>(b.data()), b.size()));
}
Result<std::string> DecodeProducerId(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ProducerId");
  std::string name;
  r.Name(&name, "producer id");
  return Done(r, std::move(name));
}
Result<int64_t> DecodeProducerIdReply(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "ProducerIdReply");
  int64_t id = -1;
  r.I64Min(&id, 0, "producer id");
  return Done(r, id);
}
Status DecodeError(std::span<const std::byte> p, const std::string& peer) {
  Reader r(p, peer, "Error");
  uint8_t code = 0;
  std::string message;
  r.U8(&code) && r.Str(&message);
  MQ_RETURN_IF_ERROR(r.Finish());
  return Status(CodeOfError(code), fmt::format("{}: {}", peer, message));
}

namespace {
constexpr std::pair<uint8_t, Code> kErrorCodes[] = {
    {1, Code::kInvalidArgument}, {2, Code::kNotFound},  {3, Code::kCorruption},
    {4, Code::kUnsupported},     {5, Code::kIoError},   {6, Code::kBusy},
    {7, Code::kOutOfOrder},      {8, Code::kFenced},    {9, Code::kUnavailable},
    {10, Code::kTimedOut},       {11, Code::kInternal},
};
}  // namespace

uint8_t ErrorCodeOf(Code code) {
  for (auto [wire, c] : kErrorCodes)
    if (c == code) return wire;
  return 11;
}
Code CodeOfError(uint8_t code) {
  for (auto [wire, c] : kErrorCodes)
    if (wire == code) return c;
  return Code::kInternal;
}

}  // namespace mq::wire
