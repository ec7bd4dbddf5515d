// The wire protocol (format-spec/protocol.md, mq/wire.h): one test per rule
// (R48-R52), a randomized property test of the frame reader under damage
// (seed printed; MQ_TEST_SEED=<n> repeats one), and a follower replicating
// through Client and Serve over pipes, damaged ones included.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "format/coding.h"
#include "format/format.h"
#include "model.h"  // tests/sim: the cluster store and clock in memory
#include "mq/cluster.h"
#include "mq/crc32c.h"
#include "mq/replication.h"
#include "mq/wire.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;
using namespace mq::wire;

namespace {

std::vector<std::byte> Raw(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(std::byte(b));
  return out;
}

std::vector<std::byte> Text(std::string_view s) {
  return std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                reinterpret_cast<const std::byte*>(s.data()) + s.size());
}

uint64_t Seed() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// Everything a reader yields from `bytes` fed in one piece: the frames, and
// the error that stopped it (OK when it only ran out of bytes).
struct Drained {
  std::vector<Frame> frames;
  Status error;
};
Drained Drain(std::span<const std::byte> bytes, size_t chunk = SIZE_MAX) {
  FrameReader r("peer");
  Drained d;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    r.Feed(bytes.subspan(at, std::min(chunk, bytes.size() - at)));
    for (;;) {
      auto f = r.Next();
      if (!f) {
        d.error = f.error();
        return d;
      }
      if (!*f) break;
      d.frames.push_back(std::move(**f));
    }
  }
  return d;
}

// A server thread answering on pipes, and the client's ends.
struct Pipes {
  int client_write = -1, client_read = -1, server_read = -1, server_write = -1;
  Pipes() {
    int a[2], b[2];
    REQUIRE(pipe2(a, O_CLOEXEC) == 0);
    REQUIRE(pipe2(b, O_CLOEXEC) == 0);
    server_read = a[0];
    client_write = a[1];
    client_read = b[0];
    server_write = b[1];
  }
};

class Servers {
 public:
  ~Servers() {
    for (auto& t : threads_) t.join();
  }
  // A Connect that starts a server thread running `serve` on fresh pipes.
  Client::Connect Connect(std::function<void(int in, int out)> serve) {
    return [this, serve]() -> Result<std::unique_ptr<Connection>> {
      Pipes p;
      threads_.emplace_back([serve, in = p.server_read, out = p.server_write] {
        serve(in, out);
        close(in);
        close(out);
      });
      return Connection::Adopt(p.client_write, p.client_read);
    };
  }

 private:
  std::vector<std::thread> threads_;
};

Status Write(int fd, const std::vector<std::byte>& b) {
  return write(fd, b.data(), b.size()) == static_cast<ssize_t>(b.size())
             ? Status::Ok()
             : Status(Code::kIoError, "write");
}

// Reads frames from a blocking descriptor until one is whole.
Result<Frame> ReadOne(int fd, FrameReader& r) {
  for (;;) {
    auto f = r.Next();
    if (!f) return f.error();
    if (*f) return std::move(**f);
    std::byte buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return Status(Code::kUnavailable, "closed");
    r.Feed(std::span<const std::byte>(buf, static_cast<size_t>(n)));
  }
}

// Servers write to clients that hang up.
const bool kIgnoreSigpipe = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

}  // namespace

TEST_CASE("R48 frame: length, type, correlation, payload, then the CRC-32C of all before it") {
  // Known bytes (the CRC computed independently, bit by bit).
  CHECK(EncodeFrame(Type::kPing, 1, {}) ==
        Raw({0, 0, 0, 0, 0x02, 0, 0, 0, 1, 0x39, 0xac, 0x34, 0xf8}));
  CHECK(EncodeFrame(Type::kFetch, 7, Text("abc")) ==
        Raw({0, 0, 0, 3, 0x10, 0, 0, 0, 7, 'a', 'b', 'c', 0xf9, 0x96, 0x94, 0xc7}));
  // Round trip, fed a byte at a time.
  auto frame = EncodeFrame(Type::kFetch, 7, Text("abc"));
  auto d = Drain(frame, 1);
  REQUIRE(d.error.ok());
  REQUIRE(d.frames.size() == 1);
  CHECK(d.frames[0].type == Type::kFetch);
  CHECK(d.frames[0].correlation == 7);
  CHECK(d.frames[0].payload == Text("abc"));
}

TEST_CASE("R48 frame: a flipped bit anywhere, the length included, never yields a frame") {
  auto good = EncodeFrame(Type::kFetchReply, 3, Text("some batches"));
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    auto bad = good;
    bad[bit / 8] ^= std::byte(1 << (bit % 8));
    auto d = Drain(bad);
    INFO("bit " << bit);
    CHECK(d.frames.empty());
    // A longer length waits for bytes (a timeout ends it), any other flip
    // is the CRC's.
    if (!d.error.ok()) {
      CHECK(d.error.rule() == "R48");
      CHECK(d.error.position() == 0);
    } else {
      CHECK(bit < 32);
    }
  }
}

TEST_CASE("R48 frame: a length over 64 MiB is refused from its 4 bytes, before any allocation") {
  FrameReader r("peer");
  auto first = EncodeFrame(Type::kPong, 0, {});
  r.Feed(first);
  REQUIRE(r.Next().value().has_value());
  r.Feed(Raw({0x04, 0x00, 0x00, 0x01}));  // 64 MiB + 1
  auto next = r.Next();
  REQUIRE_FALSE(next.has_value());
  CHECK(next.error().rule() == "R48");
  CHECK(next.error().position() == first.size());
  CHECK_THAT(next.error().message(), Catch::Contains("peer"));
  // Exactly 64 MiB is a length a frame may have: it waits for the bytes.
  FrameReader max("peer");
  max.Feed(Raw({0x04, 0x00, 0x00, 0x00}));
  auto waiting = max.Next();
  REQUIRE(waiting.has_value());
  CHECK_FALSE(waiting->has_value());
}

TEST_CASE(
    "R48 frame reader property: damaged streams yield only the frames that were sent, in order") {
  const uint64_t seed = Seed();
  INFO("seed " << seed << " (MQ_TEST_SEED to repeat)");
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::vector<std::byte>> sent;
    std::vector<std::byte> stream;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) {
      std::vector<std::byte> payload(rng() % 3000);
      for (auto& b : payload) b = std::byte(rng());
      sent.push_back(payload);
      auto f = EncodeFrame(Type::kFetchReply, static_cast<uint32_t>(i), payload);
      stream.insert(stream.end(), f.begin(), f.end());
    }
    const int damage = static_cast<int>(rng() % 4);  // 0 none, 1 flip, 2 cut, 3 duplicate bytes
    size_t at = stream.size() ? rng() % stream.size() : 0;
    if (damage == 1) stream[at] ^= std::byte(1 << (rng() % 8));
    if (damage == 2) stream.resize(at);
    if (damage == 3)
      stream.insert(stream.begin() + static_cast<std::ptrdiff_t>(at), std::byte(rng()));
    auto d = Drain(stream, 1 + rng() % 5000);
    REQUIRE(d.frames.size() <= sent.size());
    for (size_t i = 0; i < d.frames.size(); ++i) {
      CHECK(d.frames[i].correlation == i);
      CHECK(d.frames[i].payload == sent[i]);
    }
    if (damage == 0) {
      CHECK(d.error.ok());
      CHECK(d.frames.size() == sent.size());
    }
    if (!d.error.ok()) CHECK(d.error.rule() == "R48");
  }
}

namespace {

// A FetchReply frame carrying `batches` (its bytes before the crc, and the
// whole frame).
std::vector<std::byte> FetchReplyFrame(std::span<const std::byte> batches) {
  FetchResponse m;
  m.leader_epoch = 3;
  m.high_watermark = 9;
  m.log_end_offset = 9;
  m.batches.assign(batches.begin(), batches.end());
  return EncodeFrame(Type::kFetchReply, 5, Encode(m));
}

std::span<const std::byte> Covered(const std::vector<std::byte>& frame) {
  return std::span<const std::byte>(frame).first(frame.size() - format::kWireTrailerSize);
}

// Feeds `frame` to a FrameReader, which must yield it whole; whether the
// reader found its batches' CRCs checked.
bool BatchesCheckedByReader(const std::vector<std::byte>& frame) {
  FrameReader r("peer");
  r.Feed(frame);
  bool checked = false;
  auto f = r.NextView(&checked);
  REQUIRE(f);
  REQUIRE(f->has_value());
  return checked;
}

// Topic t, partition 0, replicas 0 (the leader, holding `batches` batches
// of 3 records in epoch 0) and 1 (empty), both in the ISR.
struct TwoReplicas {
  explicit TwoReplicas(int batches, LogConfig leader_log = ReplicaTestLog()) {
    ReplicatedTopic t;
    t.name = "t";
    t.replication_factor = 2;
    t.min_insync_replicas = 2;
    store.state().topics.push_back(t);
    PartitionState p{"t", 0, {0, 1}, 0, 0, 0, {0, 1}};
    store.state().partitions.push_back(p);
    for (int32_t i = 0; i < 2; ++i) {
      dirs.push_back(tmp / ("root" + std::to_string(i)) + "/t-0");
      std::filesystem::create_directories(dirs.back());
      store.state().replicas.push_back({i, tmp / ("root" + std::to_string(i))});
    }
    ctx.cluster = &store;
    ctx.clock = &clock;
    ctx.topic = "t";
    auto l = OpenReplicaLog(dirs[0], 0, ReplicaTestLog());
    REQUIRE(l);
    leader.emplace(std::move(*l));
    auto f = OpenReplicaLog(dirs[1], 1, ReplicaTestLog());
    REQUIRE(f);
    follower.emplace(std::move(*f));
    LogConfig c = leader_log;
    c.leader_epoch = 0;
    auto w = PartitionWriter::Open(dirs[0], c, false, nullptr);
    REQUIRE(w);
    for (int i = 0; i < batches; ++i) {
      auto b = MakeBatch(3, 1000 + i, 40);
      REQUIRE((*w)->Append(b));
    }
  }
  TempDir tmp;
  sim::MemClusterStore store{ClusterState{}};
  std::vector<std::string> dirs;
  sim::VirtualClock clock;
  ReplicationContext ctx;
  // As OpenReplicaLog's results are used: **leader is the log.
  std::optional<std::unique_ptr<ReplicaLog>> leader;
  std::optional<std::unique_ptr<ReplicaLog>> follower;
};

}  // namespace

TEST_CASE("R48 frame: a FetchReply's CRC made from its batches' CRCs is the CRC of its bytes") {
  std::vector<std::byte> batches;
  for (int i = 0; i < 3; ++i) {
    auto b = MakeBatch(2 + i, 1000 + i, 20 + static_cast<size_t>(i) * 7);
    batches.insert(batches.end(), b.begin(), b.end());
  }
  const auto frame = FetchReplyFrame(batches);
  bool checked = false;
  CHECK(FetchReplyFrameCrc(Covered(frame), &checked) == Crc32c(Covered(frame)));
  CHECK(checked);
  // Through the reader: the frame, and its batches checked.
  CHECK(BatchesCheckedByReader(frame));

  SECTION("a batch whose bytes differ from its CRC: the frame's CRC is still its bytes'") {
    auto bad = batches;
    bad[bad.size() - 3] ^= std::byte{0x10};     // the last batch's last record
    const auto carried = FetchReplyFrame(bad);  // a frame CRC made over the damage
    CHECK(FetchReplyFrameCrc(Covered(carried), &checked) == Crc32c(Covered(carried)));
    CHECK_FALSE(checked);  // the append computes and checks the CRC (R4)
    CHECK_FALSE(BatchesCheckedByReader(carried));
  }

  SECTION("a flipped bit anywhere, the length included, never yields a frame") {
    for (size_t bit = 0; bit < frame.size() * 8; ++bit) {
      auto bad = frame;
      bad[bit / 8] ^= std::byte(1 << (bit % 8));
      FrameReader reader("peer");
      reader.Feed(bad);
      auto got = reader.NextView(&checked);
      INFO("bit " << bit);
      if (got) {
        CHECK_FALSE(got->has_value());  // a longer length waits for bytes
        CHECK(bit < 32);
      } else {
        CHECK(got.error().rule() == "R48");
      }
    }
  }

  SECTION("any bytes: the same CRC as one pass over them") {
    const uint64_t seed = Seed();
    INFO("seed " << seed << " (MQ_TEST_SEED to repeat)");
    std::mt19937_64 rng(seed);
    for (int round = 0; round < 300; ++round) {
      auto f2 = frame;
      // Damage that keeps the type and the batches' length: batch lengths,
      // CRCs and bytes anywhere, or a cut with the length field fixed.
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        const size_t at = 41 + rng() % (f2.size() - format::kWireTrailerSize - 41);
        f2[at] ^= std::byte(1 << (rng() % 8));
      }
      if (rng() % 3 == 0) {
        const size_t keep = 41 + rng() % (f2.size() - format::kWireTrailerSize - 41);
        f2.resize(keep + format::kWireTrailerSize);
        coding::PutFixed32(f2.data() + 37, static_cast<uint32_t>(keep - 41));
      }
      INFO("round " << round);
      CHECK(FetchReplyFrameCrc(Covered(f2), &checked) == Crc32c(Covered(f2)));
    }
  }
}

TEST_CASE("R49 hello: the first request is Hello, and the versions must meet") {
  SECTION("another first request: an Error, and the server ends") {
    Pipes p;
    REQUIRE(Write(p.client_write, EncodeFrame(Type::kPing, 0, {})).ok());
    Status s = Serve(p.server_read, p.server_write, Handlers{}, ServeOptions{});
    CHECK(s.rule() == "R49");
    FrameReader r("server");
    auto reply = ReadOne(p.client_read, r);
    REQUIRE(reply);
    CHECK(reply->type == Type::kError);
    CHECK(DecodeError(reply->payload, "server").code() == Code::kCorruption);
  }
  SECTION("no common version: unsupported") {
    Pipes p;
    Hello h;
    h.min_version = kVersion + 1;
    h.max_version = kVersion + 4;
    REQUIRE(Write(p.client_write, EncodeFrame(Type::kHello, 0, Encode(h))).ok());
    Status s = Serve(p.server_read, p.server_write, Handlers{}, ServeOptions{});
    CHECK(s.code() == Code::kUnsupported);
    FrameReader r("server");
    auto reply = ReadOne(p.client_read, r);
    REQUIRE(reply);
    CHECK(DecodeError(reply->payload, "server").code() == Code::kUnsupported);
  }
  SECTION("a common version: HelloReply, then requests") {
    Servers servers;
    Client c(servers.Connect([](int in, int out) {
      Handlers h;
      h.load_state = []() -> Result<std::string> { return std::string("state"); };
      Serve(in, out, h, ServeOptions{});
    }),
             "server");
    auto reply = c.Call(Type::kLoadState, {});
    REQUIRE(reply);
    CHECK(DecodeLoadStateReply(*reply, "server").value() == "state");
    // A request the server has no handler for: an Error; the conversation goes on.
    auto fetch = c.Call(Type::kFetch, Encode(FetchMessage{"t", 0, FetchRequest{1, 0, 0, 1024}, 0}));
    CHECK(fetch.error().code() == Code::kUnsupported);
    CHECK(c.Call(Type::kLoadState, {}).has_value());
    CHECK(c.connects() == 1);
  }
}

TEST_CASE("R50 one request at a time: a response of another correlation drops the connection") {
  std::atomic<int> conversations{0};  // before the servers, whose threads use it
  Servers servers;
  // A server that answers its second conversation's first request with a
  // stale correlation (a duplicated or reordered frame).
  Client c(servers.Connect([&](int in, int out) {
    const int n = ++conversations;
    FrameReader r("client");
    for (uint32_t i = 0;; ++i) {
      auto f = ReadOne(in, r);
      if (!f) return;
      if (f->type == Type::kHello) {
        (void)Write(out, EncodeFrame(Type::kHelloReply, f->correlation, Encode(HelloReply{})));
        continue;
      }
      const uint32_t corr = (n == 1 && i == 1) ? f->correlation - 1 : f->correlation;
      (void)Write(out, EncodeFrame(Type::kPong, corr, {}));
    }
  }),
           "server");
  auto first = c.Call(Type::kPing, {});
  REQUIRE_FALSE(first.has_value());
  CHECK(first.error().code() == Code::kUnavailable);
  CHECK_THAT(first.error().message(), Catch::Contains("R50"));
  auto second = c.Call(Type::kPing, {});
  CHECK(second.has_value());
  CHECK(c.connects() == 2);
  SECTION("the server ends a conversation whose request skips a number") {
    Pipes p;
    REQUIRE(Write(p.client_write, EncodeFrame(Type::kHello, 0, Encode(Hello{}))).ok());
    REQUIRE(Write(p.client_write, EncodeFrame(Type::kPing, 5, {})).ok());
    Status s = Serve(p.server_read, p.server_write, Handlers{}, ServeOptions{});
    CHECK(s.rule() == "R50");
  }
}

TEST_CASE("R51 messages: exactly their fields, lengths within the payload, valid names") {
  FetchMessage fetch{"orders", 3, FetchRequest{2, 7, 12345, 1 << 20}, 500};
  auto f = DecodeFetch(Encode(fetch), "p");
  REQUIRE(f);
  CHECK(f->topic == "orders");
  CHECK(f->partition == 3);
  CHECK(f->request.replica == 2);
  CHECK(f->request.leader_epoch == 7);
  CHECK(f->request.fetch_offset == 12345);
  CHECK(f->request.max_bytes == size_t{1} << 20);
  CHECK(f->max_wait_ms == 500);
  FetchResponse resp;
  resp.batches = Text("batches");
  resp.high_watermark = 5;
  resp.log_start_offset = 1;
  resp.log_end_offset = 9;
  resp.leader_epoch = 4;
  auto r = DecodeFetchReply(Encode(resp), "p");
  REQUIRE(r);
  CHECK(r->batches == resp.batches);
  CHECK(r->leader_epoch == 4);
  CHECK(r->high_watermark == 5);
  AlterPartitionMessage alter;
  alter.proposed = PartitionState{"orders", 1, {0, 1, 2}, 1, 3, 8, {1, 2}};
  alter.reason = "shrink";
  auto a = DecodeAlterPartition(Encode(alter), "p");
  REQUIRE(a);
  CHECK(a->proposed.isr == std::vector<int32_t>{1, 2});
  CHECK(a->reason == "shrink");
  auto reply =
      DecodeAlterPartitionReply(EncodeAlterPartitionReply(alter.proposed), "p", "orders", 1);
  REQUIRE(reply);
  CHECK(*reply == alter.proposed);
  CHECK(DecodeOffsetForLeaderEpochReply(Encode(EpochEndOffset{3, 77}), "p").value() ==
        EpochEndOffset{3, 77});

  auto breach = [](auto result) {
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().rule() == "R51");
  };
  auto bytes = Encode(fetch);
  auto longer = bytes;
  longer.push_back(std::byte{0});
  breach(DecodeFetch(longer, "p"));                                    // a byte after
  breach(DecodeFetch(std::span(bytes).first(bytes.size() - 1), "p"));  // one short
  breach(DecodeFetch(Encode(FetchMessage{"a/b", 0, {}, 0}), "p"));     // not a name
  breach(DecodeFetch(Encode(FetchMessage{"t", -1, {}, 0}), "p"));      // partition
  breach(DecodeFetchReply(Raw({0, 0, 0, 1}), "p"));                    // short
  auto huge = Encode(resp);
  huge[28] = std::byte{0x7f};  // the batches' length: past the payload
  breach(DecodeFetchReply(huge, "p"));
  auto many = Encode(alter);
  many[24] = std::byte{0x40};  // the ISR's count: more ids than bytes
  breach(DecodeAlterPartition(many, "p"));
  CHECK(DecodeError(EncodeError(Status(Code::kFenced, "moved")), "p").code() == Code::kFenced);
  // Every status a server can answer keeps its code (§19.3's table).
  for (Code code : {Code::kInvalidArgument, Code::kNotFound, Code::kCorruption, Code::kUnsupported,
                    Code::kIoError, Code::kBusy, Code::kOutOfOrder, Code::kFenced,
                    Code::kUnavailable, Code::kTimedOut, Code::kInternal})
    CHECK(CodeOfError(ErrorCodeOf(code)) == code);
  CHECK(CodeOfError(200) == Code::kInternal);
}

TEST_CASE("R51 messages: CarryState's names are names, its numbers in range, its counts fit") {
  CarryStateReply carry;
  CarriedOffset o;
  o.group = "billing";
  o.committed.offset = 42;
  o.committed.leader_epoch = 3;
  o.committed.commit_timestamp = 1700000000000;
  o.committed.member_id = "m-1";
  o.committed.dead_letters = 2;
  carry.offsets.push_back(o);
  o.group = "reset";
  o.committed.member_id = "";  // a reset has no member
  carry.offsets.push_back(o);
  carry.producers.push_back({"ingest-7", 5});
  carry.next_producer_id = 6;
  auto r = DecodeCarryStateReply(Encode(carry), "p", "orders", 2);
  REQUIRE(r);
  REQUIRE(r->offsets.size() == 2);
  CHECK(r->offsets[0].group == "billing");
  CHECK(r->offsets[0].committed.topic == "orders");
  CHECK(r->offsets[0].committed.partition == 2);
  CHECK(r->offsets[0].committed.offset == 42);
  CHECK(r->offsets[0].committed.leader_epoch == 3);
  CHECK(r->offsets[0].committed.commit_timestamp == 1700000000000);
  CHECK(r->offsets[0].committed.member_id == "m-1");
  CHECK(r->offsets[0].committed.dead_letters == 2);
  CHECK(r->offsets[1].committed.member_id.empty());
  REQUIRE(r->producers.size() == 1);
  CHECK(r->producers[0].name == "ingest-7");
  CHECK(r->producers[0].id == 5);
  CHECK(r->next_producer_id == 6);

  auto breach = [](auto result) {
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().rule() == "R51");
  };
  auto with = [&](auto change) {
    CarryStateReply m = carry;
    change(m);
    return DecodeCarryStateReply(Encode(m), "p", "orders", 2);
  };
  // A group or producer name a follower would turn into a path.
  breach(with([](CarryStateReply& m) { m.offsets[0].group = "../../etc"; }));
  breach(with([](CarryStateReply& m) { m.offsets[0].group = ""; }));
  breach(with([](CarryStateReply& m) { m.producers[0].name = "a/b"; }));
  breach(with([](CarryStateReply& m) { m.offsets[0].committed.member_id = "x y"; }));
  breach(with([](CarryStateReply& m) { m.offsets[0].committed.offset = -1; }));
  breach(with([](CarryStateReply& m) { m.offsets[0].committed.dead_letters = -1; }));
  breach(with([](CarryStateReply& m) { m.producers[0].id = -5; }));
  breach(with([](CarryStateReply& m) { m.next_producer_id = -2; }));
  auto bytes = Encode(carry);
  auto longer = bytes;
  longer.push_back(std::byte{0});
  breach(DecodeCarryStateReply(longer, "p", "orders", 2));
  breach(DecodeCarryStateReply(std::span(bytes).first(bytes.size() - 1), "p", "orders", 2));
  auto many = bytes;
  many[0] = std::byte{0x40};  // the offsets' count: more than the bytes hold
  breach(DecodeCarryStateReply(many, "p", "orders", 2));
  CHECK(DecodeCarryStateReply(Encode(CarryStateReply{}), "p", "orders", 2).value().offsets.empty());
}

TEST_CASE("R52 liveness: a silent server costs the timeout, and the next call starts again") {
  // Before the servers: their threads, joined when `servers` goes, read them.
  std::atomic<int> conversations{0};
  std::atomic<bool> release{false};
  Servers servers;
  Client::Options o;
  o.timeout_ms = 200;
  Client c(servers.Connect([&](int in, int out) {
    if (++conversations == 1) {  // reads, never answers
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    Serve(in, out, Handlers{}, ServeOptions{});
  }),
           "server", o);
  auto first = c.Call(Type::kPing, {});
  release.store(true);
  REQUIRE_FALSE(first.has_value());
  CHECK(first.error().code() == Code::kUnavailable);
  CHECK_THAT(first.error().message(), Catch::Contains("R52"));
  CHECK(c.Call(Type::kPing, {}).has_value());
  CHECK(c.connects() == 2);
  SECTION("a server ends at end of input, and after its idle timeout") {
    Pipes p;
    close(p.client_write);
    CHECK(Serve(p.server_read, p.server_write, Handlers{}, ServeOptions{}).ok());
    Pipes q;
    ServeOptions idle;
    idle.idle_timeout_ms = 50;
    CHECK(Serve(q.server_read, q.server_write, Handlers{}, idle).ok());
  }
  SECTION("a server that cannot be started is unavailable") {
    auto conn = Connection::Start({"/nonexistent/mq-replicate", "--serve"});
    REQUIRE_FALSE(conn.has_value());
    CHECK(conn.error().code() == Code::kUnavailable);
  }
}

TEST_CASE("wire: a follower replicates through Client and Serve, damaged streams included") {
  const uint64_t seed = Seed();
  INFO("seed " << seed << " (MQ_TEST_SEED to repeat)");
  TwoReplicas r(40);
  auto& dirs = r.dirs;
  auto& ctx = r.ctx;
  auto& leader = r.leader;
  auto& follower = r.follower;
  std::mutex leader_mu;  // the server threads share the leader's log
  Handlers h;
  h.fetch = [&](const FetchMessage& m) {
    std::lock_guard lock(leader_mu);
    return HandleFetch(ctx, **leader, m.request);
  };
  h.offset_for_leader_epoch = [&](const OffsetForLeaderEpochMessage& m) {
    std::lock_guard lock(leader_mu);
    return HandleOffsetForLeaderEpoch(ctx, **leader, m.leader_epoch, m.requested_epoch);
  };
  // Each conversation's server damages one of its frames at random: a
  // flipped bit, a cut, or a stale response.
  std::mt19937_64 rng(seed);
  std::mutex rng_mu;
  int conversations = 0;
  auto damaging = [&](int in, int out) {
    int pipes[2];
    REQUIRE(pipe2(pipes, O_CLOEXEC) == 0);
    std::thread serve([&, in, w = pipes[1]] {
      Serve(in, w, h, ServeOptions{});
      close(w);
    });
    uint64_t damage_at, kind;
    {
      std::lock_guard lock(rng_mu);
      // The first conversation is always damaged early, later ones at
      // random (kind 0: not at all).
      const bool first = ++conversations == 1;
      damage_at = first ? 1 + rng() % 2 : rng() % 6;
      kind = first ? 1 + rng() % 3 : rng() % 4;
    }
    FrameReader frames("server");
    for (uint64_t i = 0;; ++i) {
      auto f = ReadOne(pipes[0], frames);
      if (!f) break;
      auto bytes = EncodeFrame(f->type, f->correlation, f->payload);
      if (i == damage_at && kind == 1) bytes[bytes.size() / 2] ^= std::byte{0x10};
      if (i == damage_at && kind == 2) {
        // Half a frame, then the end of the stream.
        (void)write(out, bytes.data(), bytes.size() / 2);
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        dup2(null, out);
        close(null);
        break;
      }
      if (i == damage_at && kind == 3) bytes = EncodeFrame(f->type, f->correlation - 1, f->payload);
      if (write(out, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) break;
    }
    // Until the client hangs up and the server ends.
    std::byte sink[4096];
    while (read(pipes[0], sink, sizeof sink) > 0) {
    }
    close(pipes[0]);
    serve.join();
  };
  Servers servers;
  Client::Options o;
  o.timeout_ms = 1000;  // a stalled conversation ends sooner
  auto client = std::make_shared<Client>(servers.Connect(damaging), "leader", o);
  auto link = RemoteLeaderLink(client, "t", 0, 0);
  FollowerState state;
  int64_t leader_end = (*leader)->LogEndOffset().value();
  for (int i = 0; i < 2000 && (*follower)->LogEndOffset().value() < leader_end; ++i) {
    auto step = FollowerStep(ctx, **follower, *link, state, 300);
    if (!step) CHECK(step.error().code() == Code::kUnavailable);
  }
  CHECK((*follower)->LogEndOffset().value() == leader_end);
  CHECK(RawBatches(dirs[1]) == RawBatches(dirs[0]));
  CHECK(client->connects() > 1);
}

TEST_CASE("wire: a leader's root moved away is retried by its follower, across hosts as on one") {
  TwoReplicas r(3);
  // One host: the follower meets the leader's root gone where it opens it.
  const std::string root0 = std::filesystem::path(r.dirs[0]).parent_path().string();
  std::filesystem::rename(root0, root0 + ".moved");
  auto local = OpenReplicaLog(r.dirs[0], 0, ReplicaTestLog());
  REQUIRE_FALSE(local);
  CHECK(local.error().code() == Code::kNotFound);
  CHECK(FollowerRetries(local.error()));
  // Across hosts: the leader's server meets it and answers it (Error); the
  // follower's fetch and its CarryState get the same status, and the same
  // rule retries them.
  Handlers h;
  h.fetch = [&](const FetchMessage&) -> Result<FetchResponse> { return local.error(); };
  h.carry_state = [&](const PartitionRef&) -> Result<CarryStateReply> { return local.error(); };
  Servers servers;
  auto client = std::make_shared<Client>(
      servers.Connect([&](int in, int out) { Serve(in, out, h, ServeOptions{}); }), "h0:root0");
  auto link = RemoteLeaderLink(client, "t", 0, 0);
  FollowerState state;
  auto step = FollowerStep(r.ctx, **r.follower, *link, state);
  REQUIRE_FALSE(step);
  CHECK(step.error().code() == Code::kNotFound);
  CHECK(FollowerRetries(step.error()));
  auto carried = QueryCarryState(*client, "t", 0);
  REQUIRE_FALSE(carried);
  CHECK(carried.error().code() == Code::kNotFound);
  CHECK(FollowerRetries(carried.error()));
  CHECK(client->connects() == 1);  // answered: the conversation goes on
  // The leadership moving, a leader away, a position outside its log are
  // waited out; what is wrong with the follower or the data is not.
  for (Code c : {Code::kFenced, Code::kUnavailable, Code::kOutOfOrder})
    CHECK(FollowerRetries(Status(c, "x")));
  for (Code c : {Code::kCorruption, Code::kIoError, Code::kPermission, Code::kBusy,
                 Code::kInvalidArgument, Code::kInternal, Code::kNoMemory, Code::kUnsupported})
    CHECK_FALSE(FollowerRetries(Status(c, "x")));
  CHECK_FALSE(FollowerRetries(Status::Ok()));
}

TEST_CASE("wire: bytes that differ from what the leader read are never appended") {
  TwoReplicas r(5);
  auto& dirs = r.dirs;
  auto& ctx = r.ctx;
  auto& leader = r.leader;
  auto& follower = r.follower;
  // The leader's reply: its bytes with one flipped in the last batch,
  // after the read computed their CRC (a frame CRC made from the read's
  // batch CRCs then disagrees with the bytes: R48), or before (the frame
  // is whole, the batch is not: R4).
  bool crc_from_read = false;
  Handlers h;
  h.fetch = [&](const FetchMessage& m) -> Result<FetchResponse> {
    auto read = HandleFetch(ctx, **leader, m.request);
    if (read && !read->batches.empty()) {
      if (!read->crc) return Status(Code::kInternal, "the read gave no CRC");
      read->batches[read->batches.size() - 5] ^= std::byte{0x10};
      if (!crc_from_read) read->crc.reset();
    }
    return read;
  };
  h.offset_for_leader_epoch = [&](const OffsetForLeaderEpochMessage& m) {
    return HandleOffsetForLeaderEpoch(ctx, **leader, m.leader_epoch, m.requested_epoch);
  };
  Servers servers;
  auto client = std::make_shared<Client>(
      servers.Connect([&](int in, int out) { Serve(in, out, h, ServeOptions{}); }), "leader");
  auto link = RemoteLeaderLink(client, "t", 0, 0);
  FollowerState state;

  SECTION("the frame's CRC made from the read's: R48, the connection dropped") {
    crc_from_read = true;
    auto step = FollowerStep(ctx, **follower, *link, state, 1 << 20);
    REQUIRE_FALSE(step);
    CHECK(step.error().code() == Code::kUnavailable);
    CHECK_THAT(step.error().message(), Catch::Contains("R48"));
  }
  SECTION("the frame whole, a batch not matching its CRC: R4 at the append") {
    auto step = FollowerStep(ctx, **follower, *link, state, 1 << 20);
    REQUIRE_FALSE(step);
    CHECK(step.error().code() == Code::kCorruption);
    CHECK(step.error().rule() == "R4");
  }
  CHECK((*follower)->LogEndOffset().value() == 0);
  CHECK(RawBatches(dirs[1]).empty());
}

// ---- batches sent from their segment file (sendfile) ----

namespace {

// `n` bytes of a pattern, in a file of `dir`, and its descriptor (open for
// reading).
struct PatternFile {
  PatternFile(const std::string& dir, size_t n) {
    for (size_t i = 0; i < n; ++i)
      bytes.push_back(std::byte(static_cast<uint8_t>(i * 7 + i / 251)));
    const std::string path = dir + "/batches";
    int w = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(w >= 0);
    REQUIRE(write(w, bytes.data(), n) == static_cast<ssize_t>(n));
    close(w);
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
  }
  ~PatternFile() { close(fd); }
  std::vector<std::byte> bytes;
  int fd = -1;
};

// A conversation's first two requests, Hello and Fetch, as a client sends them.
std::vector<std::byte> HelloAndFetch() {
  auto out = EncodeFrame(Type::kHello, 0, Encode(Hello{}));
  FetchRequest request;
  request.replica = 1;
  request.leader_epoch = 0;
  FetchMessage m{"t", 0, request, 0};
  auto fetch = EncodeFrame(Type::kFetch, 1, Encode(m));
  out.insert(out.end(), fetch.begin(), fetch.end());
  return out;
}

}  // namespace

TEST_CASE(
    "wire: a leader's server sends batches from their segment file through a full pipe, and its "
    "follower appends the same bytes") {
  LogConfig big = ReplicaTestLog();
  big.segment_bytes = 64 << 10;  // a fetch of 16 KiB: whole in a segment, or cut at its end
  TwoReplicas r(600, big);
  std::vector<std::byte> buffer;
  std::atomic<int> in_place{0};
  Handlers h;
  h.fetch = [&](const FetchMessage& m) {
    auto out = HandleFetch(r.ctx, **r.leader, m.request, &buffer, /*in_place=*/true);
    if (out && out->file.size > 0) ++in_place;
    return out;
  };
  h.offset_for_leader_epoch = [&](const OffsetForLeaderEpochMessage& m) {
    return HandleOffsetForLeaderEpoch(r.ctx, **r.leader, m.leader_epoch, m.requested_epoch);
  };
  h.after_reply = [&] { (*r.leader)->ReadAhead(&buffer); };
  std::vector<std::thread> threads;
  {
    // The server's pipe holds one page: every reply meets a full pipe
    // (EAGAIN), and sendfile moves part of it at a time.
    auto connect = [&]() -> Result<std::unique_ptr<Connection>> {
      Pipes p;
      REQUIRE(fcntl(p.server_write, F_SETPIPE_SZ, 4096) >= 0);
      threads.emplace_back([&h, in = p.server_read, out = p.server_write] {
        Serve(in, out, h, ServeOptions{});
        close(in);
        close(out);
      });
      return Connection::Adopt(p.client_write, p.client_read);
    };
    auto client = std::make_shared<Client>(connect, "leader");
    auto link = RemoteLeaderLink(client, "t", 0, 0);
    FollowerState state;
    const int64_t end = (*r.leader)->LogEndOffset().value();
    for (int i = 0; i < 1000 && (*r.follower)->LogEndOffset().value() < end; ++i) {
      auto step = FollowerStep(r.ctx, **r.follower, *link, state, 16 << 10);
      REQUIRE(step);
    }
    CHECK((*r.follower)->LogEndOffset().value() == end);
    CHECK(client->connects() == 1);
  }
  for (auto& t : threads) t.join();
  CHECK(RawBatches(r.dirs[1]) == RawBatches(r.dirs[0]));
  CHECK(in_place > 1);
}

TEST_CASE(
    "wire: a peer that closes while batches are sent from their file ends the conversation, "
    "unavailable") {
  TempDir tmp;
  PatternFile file(tmp.path(), 1 << 20);
  Handlers h;
  h.fetch = [&](const FetchMessage&) -> Result<FetchResponse> {
    FetchResponse r;
    r.file = FileBytes{file.fd, 0, file.bytes.size()};
    r.crc = Crc32c(file.bytes);
    return r;
  };
  Pipes p;
  REQUIRE(fcntl(p.server_write, F_SETPIPE_SZ, 4096) >= 0);
  Status served;
  std::thread server([&] { served = Serve(p.server_read, p.server_write, h, ServeOptions{}); });
  REQUIRE(Write(p.client_write, HelloAndFetch()).ok());
  // The HelloReply, then part of the FetchReply, then the client goes.
  std::vector<std::byte> got(64 << 10);
  size_t n = 0;
  while (n < got.size()) {
    ssize_t k = read(p.client_read, got.data() + n, got.size() - n);
    REQUIRE(k > 0);
    n += static_cast<size_t>(k);
  }
  close(p.client_read);
  server.join();
  close(p.client_write);
  close(p.server_read);
  close(p.server_write);
  CHECK(served.code() == Code::kUnavailable);
  CHECK_THAT(served.message(), Catch::Contains("Broken pipe"));
}

TEST_CASE(
    "wire: batches in a file go to an output that takes no sendfile as read and written, the same "
    "frame") {
  TempDir tmp;
  PatternFile file(tmp.path(), (1 << 20) + 12345);  // more than one read of the copy
  Handlers h;
  h.fetch = [&](const FetchMessage&) -> Result<FetchResponse> {
    FetchResponse r;
    r.file = FileBytes{file.fd, 100, file.bytes.size() - 100};
    r.crc = Crc32c(std::span<const std::byte>(file.bytes).subspan(100));
    r.high_watermark = 7;
    return r;
  };
  // A file opened for appending: sendfile(2) refuses it (EINVAL).
  const std::string path = tmp / "out";
  int out = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(out >= 0);
  Pipes p;
  REQUIRE(Write(p.client_write, HelloAndFetch()).ok());
  close(p.client_write);
  CHECK(Serve(p.server_read, out, h, ServeOptions{}).ok());
  close(out);
  close(p.server_read);
  close(p.client_read);
  close(p.server_write);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto d = Drain(Text(text));
  REQUIRE(d.error.ok());
  REQUIRE(d.frames.size() == 2);
  CHECK(d.frames[1].type == Type::kFetchReply);
  auto reply = DecodeFetchReply(d.frames[1].payload, "server");
  REQUIRE(reply);
  CHECK(reply->high_watermark == 7);
  CHECK(reply->batches == std::vector<std::byte>(file.bytes.begin() + 100, file.bytes.end()));
}

// The position the leader holds for replica 1 (-1: none).
int64_t PositionOfFollower(ReplicaLog& leader) {
  auto all = leader.Followers();
  REQUIRE(all);
  for (const FollowerPosition& f : *all)
    if (f.replica == 1) return f.log_end_offset;
  return -1;
}

// Fetch handlers over TwoReplicas' leader that count Fetch and FetchAhead
// requests (a FetchAhead: held_offset set).
struct CountingLeader {
  explicit CountingLeader(TwoReplicas& replicas) : r(replicas) {
    h.fetch = [this](const FetchMessage& m) {
      std::lock_guard lock(mu);
      auto out = HandleFetch(this->r.ctx, **this->r.leader, m.request);
      ++(m.request.held_offset >= 0 ? aheads : fetches);
      return out;
    };
    h.offset_for_leader_epoch = [this](const OffsetForLeaderEpochMessage& m) {
      std::lock_guard lock(mu);
      return HandleOffsetForLeaderEpoch(this->r.ctx, **this->r.leader, m.leader_epoch,
                                        m.requested_epoch);
    };
  }
  TwoReplicas& r;
  Handlers h;
  std::mutex mu;  // the server thread and the test share the leader's log
  std::atomic<int> fetches{0}, aheads{0};
};

TEST_CASE(
    "R62 fetch ahead: the next batches are asked for before the append, and the leader counts only "
    "what the follower holds") {
  TwoReplicas r(12);
  CountingLeader leader(r);
  Servers servers;
  auto client = std::make_shared<Client>(
      servers.Connect([&](int in, int out) { Serve(in, out, leader.h, ServeOptions{}); }),
      "leader");
  auto link = RemoteLeaderLink(client, "t", 0, 0);
  FetchRequest request;
  request.replica = 1;
  request.leader_epoch = 0;
  request.fetch_offset = 0;
  request.max_bytes = 600;  // a few batches of the 12
  auto first = link->Fetch(request);
  REQUIRE(first);
  REQUIRE_FALSE(first->data().empty());
  CHECK(client->version() == kVersion);
  // The next fetch is on its way before this one is appended: the leader
  // answers it meanwhile, and counts the follower at offset 0, where its log
  // ends, not where the fetch ahead starts.
  for (int i = 0; i < 2000 && leader.aheads.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(leader.aheads.load() == 1);
  {
    std::lock_guard lock(leader.mu);
    CHECK(PositionOfFollower(**r.leader) == 0);
    // The ISR is {0, 1}: the HW stays at what both hold.
    CHECK((*r.leader)->HighWatermark().value() <= 0);
  }
  auto appended = (*r.follower)->AppendReplicated(first->data(), CrcCheck::kVerify);
  REQUIRE(appended);
  request.fetch_offset = (*r.follower)->LogEndOffset().value();
  auto second = link->Fetch(request);  // the answer to the fetch ahead
  REQUIRE(second);
  CHECK(leader.fetches.load() == 1);
  REQUIRE_FALSE(second->data().empty());
  CHECK(static_cast<int64_t>(DecodeBatchHeader(second->data()).base_offset) ==
        request.fetch_offset);
  REQUIRE((*r.follower)->AppendReplicated(second->data(), CrcCheck::kVerify));

  SECTION("the follower catches up, one fetch ahead at a time") {
    FollowerState state;
    const int64_t end = (*r.leader)->LogEndOffset().value();
    for (int i = 0; i < 100 && (*r.follower)->LogEndOffset().value() < end; ++i)
      REQUIRE(FollowerStep(r.ctx, **r.follower, *link, state, 600));
    CHECK((*r.follower)->LogEndOffset().value() == end);
    CHECK(RawBatches(r.dirs[1]) == RawBatches(r.dirs[0]));
    CHECK(leader.aheads.load() > 2);
    CHECK(client->connects() == 1);
  }
  SECTION("a follower that asks for something else drops the answer ahead") {
    // Its log was cut meanwhile (the follower's choice): it fetches again
    // from its own end, and the answer ahead is read and dropped.
    request.fetch_offset = 0;
    REQUIRE((*r.follower)->TruncateTo(0).ok());
    auto again = link->Fetch(request);
    REQUIRE(again);
    CHECK(leader.fetches.load() == 2);
    CHECK(static_cast<int64_t>(DecodeBatchHeader(again->data()).base_offset) == 0);
    CHECK(client->connects() == 1);
  }
}

TEST_CASE(
    "R62 fetch ahead: an earlier peer (version 1) meets at version 1 and is never sent "
    "FetchAhead") {
  TwoReplicas r(12);
  CountingLeader leader(r);
  // Before the servers: their threads, joined when `servers` goes, read them.
  ServeOptions so;
  Client::Options co;
  Servers servers;
  SECTION("an earlier server") { so.max_version = 1; }
  SECTION("an earlier client") { co.max_version = 1; }
  auto client = std::make_shared<Client>(
      servers.Connect([&](int in, int out) { Serve(in, out, leader.h, so); }), "leader", co);
  auto link = RemoteLeaderLink(client, "t", 0, 0);
  FollowerState state;
  const int64_t end = (*r.leader)->LogEndOffset().value();
  for (int i = 0; i < 100 && (*r.follower)->LogEndOffset().value() < end; ++i)
    REQUIRE(FollowerStep(r.ctx, **r.follower, *link, state, 600));
  CHECK(client->version() == 1);
  CHECK(RawBatches(r.dirs[1]) == RawBatches(r.dirs[0]));
  CHECK(leader.fetches.load() > 2);
  CHECK(leader.aheads.load() == 0);
  CHECK(client->connects() == 1);
}

TEST_CASE(
    "R62 fetch ahead: FetchAhead in a version 1 conversation is a breach, and its fields are "
    "checked (R51)") {
  SECTION("version 1: the server ends") {
    Pipes p;
    Hello h;
    h.max_version = 1;
    FetchMessage m{"t", 0, FetchRequest{1, 0, 10, 1024}, 0};
    m.request.held_offset = 5;
    REQUIRE(Write(p.client_write, EncodeFrame(Type::kHello, 0, Encode(h))).ok());
    REQUIRE(Write(p.client_write, EncodeFrame(Type::kFetchAhead, 1, EncodeFetchAhead(m))).ok());
    Handlers handlers;
    handlers.fetch = [](const FetchMessage&) -> Result<FetchResponse> { return FetchResponse{}; };
    Status s = Serve(p.server_read, p.server_write, handlers, ServeOptions{});
    CHECK(s.rule() == "R62");
    FrameReader reader("server");
    auto hello = ReadOne(p.client_read, reader);
    REQUIRE(hello);
    CHECK(DecodeHelloReply(hello->payload, "server").value().version == 1);
    auto error = ReadOne(p.client_read, reader);
    REQUIRE(error);
    CHECK(error->type == Type::kError);
  }
  SECTION("fields") {
    FetchMessage m{"t", 2, FetchRequest{1, 4, 10, 1024}, 0};
    m.request.held_offset = 7;
    auto d = DecodeFetchAhead(EncodeFetchAhead(m), "p");
    REQUIRE(d);
    CHECK(d->request.fetch_offset == 10);
    CHECK(d->request.held_offset == 7);
    CHECK(d->request.held() == 7);
    CHECK(d->partition == 2);
    m.request.held_offset = 11;  // past the fetch offset
    CHECK(DecodeFetchAhead(EncodeFetchAhead(m), "p").error().rule() == "R51");
    m.request.held_offset = -1;
    CHECK(DecodeFetchAhead(EncodeFetchAhead(m), "p").error().rule() == "R51");
    // A Fetch is not a FetchAhead: its heldOffset is missing.
    CHECK(DecodeFetchAhead(Encode(m), "p").error().rule() == "R51");
  }
}

TEST_CASE(
    "R62 fetch ahead: a fetch ahead that finds the connection gone leaves the batches of the reply "
    "before it whole") {
  // The leader's server answers a Fetch and dies before the FetchAhead the
  // follower sends next (it closed its input first: the post meets EPIPE,
  // deterministically). The reply's batches are the client's receive
  // buffer, borrowed until the next fetch: dropping the connection must not
  // free them under the follower, which appends them next (else it appends
  // whatever reuses that memory). The reply is over 32 MiB, so that the
  // buffer is a mapping of its own that a free unmaps: a use after it
  // faults or reads other bytes, never the batches.
  const auto batch = MakeBatch(1, 1000, (32 << 20) + 4096);
  Servers servers;
  auto client = std::make_shared<Client>(servers.Connect([&](int in, int out) {
    FrameReader r("client");
    auto hello = ReadOne(in, r);
    if (!hello) return;
    (void)Write(out, EncodeFrame(Type::kHelloReply, hello->correlation, Encode(HelloReply{})));
    auto fetch = ReadOne(in, r);
    if (!fetch || fetch->type != Type::kFetch) return;
    // Gone for reading: `in` now reads /dev/null (the Servers close it).
    const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, in) < 0) return;
    close(null);
    FetchResponse reply;
    reply.batches = batch;
    reply.leader_epoch = 0;
    reply.high_watermark = 0;
    reply.log_end_offset = 100;  // more than the reply brings: the follower asks ahead
    (void)Write(out, EncodeFrame(Type::kFetchReply, fetch->correlation, Encode(reply)));
  }),
                                         "leader");
  auto link = RemoteLeaderLink(client, "t", 0, 0);
  FetchRequest request{1, 0, 0, 64 << 20};
  auto first = link->Fetch(request);
  REQUIRE(first);
  CHECK(first->batches_checked);
  // The fetch ahead was sent and failed: the connection is dropped...
  CHECK(client->version() == 0);
  // ...and the batches are still those the leader sent.
  REQUIRE(first->data().size() == batch.size());
  CHECK(std::memcmp(first->data().data(), batch.data(), batch.size()) == 0);
  // The next fetch fails as the lost fetch ahead would have (R52).
  request.fetch_offset = 1;
  auto second = link->Fetch(request);
  REQUIRE_FALSE(second);
  CHECK(second.error().code() == Code::kUnavailable);
  CHECK(client->connects() == 1);
}

TEST_CASE("R51 messages: ReplicaStatusReply's restartedSinceClaim is 0 or 1") {
  ReplicaStatusReply status{3, 10, 9, 2, true};
  auto r = DecodeReplicaStatusReply(Encode(status), "p");
  REQUIRE(r);
  CHECK(r->log_start_offset == 3);
  CHECK(r->log_end_offset == 10);
  CHECK(r->high_watermark == 9);
  CHECK(r->latest_epoch == 2);
  CHECK(r->restarted_since_claim);
  status.restarted_since_claim = false;
  CHECK_FALSE(DecodeReplicaStatusReply(Encode(status), "p").value().restarted_since_claim);
  auto bytes = Encode(status);
  bytes.back() = std::byte{2};
  auto bad = DecodeReplicaStatusReply(bytes, "p");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().rule() == "R51");
  bytes.pop_back();  // a reply without the flag
  REQUIRE_FALSE(DecodeReplicaStatusReply(bytes, "p"));
}

TEST_CASE("P10 ProducerId: a cluster on another host allocates, and a name must be a name") {
  CHECK(DecodeProducerId(EncodeProducerId("ingest-7"), "p").value() == "ingest-7");
  CHECK(DecodeProducerIdReply(EncodeProducerIdReply(int64_t{1} << 32), "p").value() == int64_t{1}
                                                                                           << 32);
  for (auto bad : {DecodeProducerId(EncodeProducerId("../x"), "p"),
                   DecodeProducerId(EncodeProducerId(""), "p")}) {
    REQUIRE_FALSE(bad);
    CHECK(bad.error().rule() == "R51");
  }
  auto negative = DecodeProducerIdReply(EncodeProducerIdReply(-1), "p");
  REQUIRE_FALSE(negative);
  CHECK(negative.error().rule() == "R51");

  // Through a server: the remote store's ids are the server's store's.
  TempDir tmp;
  auto served = FileClusterStore::Open(tmp / "cluster", true);
  REQUIRE(served);
  Servers servers;
  auto client = std::make_shared<Client>(servers.Connect([&](int in, int out) {
    Handlers h;
    h.producer_id = [&](const std::string& name) { return (*served)->ProducerId(name); };
    Serve(in, out, h, ServeOptions{});
  }),
                                         "controller");
  auto remote = RemoteClusterStore(client);
  CHECK(remote->ProducerId("ingestA").value() == kFirstClusterProducerId);
  CHECK((*served)->ProducerId("ingestB").value() == kFirstClusterProducerId + 1);
  CHECK(remote->ProducerId("ingestB").value() == kFirstClusterProducerId + 1);
  CHECK(remote->ProducerId("ingestA").value() == kFirstClusterProducerId);
  // A name that is none is refused before it is sent, as on this host.
  CHECK(remote->ProducerId("a/b").error().code() == Code::kInvalidArgument);
  CHECK(client->connects() == 1);
  // A damaged registry file on the controller is no id: its message names
  // the file and the rule. (An Error of code corruption also ends the
  // conversation, as a breach would: the client reports it unavailable.)
  WriteFile(tmp / "cluster/producers/ingestA.id", Text("x\n"));
  auto damaged = remote->ProducerId("ingestA");
  REQUIRE_FALSE(damaged);
  CHECK_THAT(damaged.error().message(),
             Catch::Contains(tmp / "cluster/producers/ingestA.id") && Catch::Contains("P8"));
  // A server without the handler: unsupported, the conversation goes on.
  Servers old;
  auto old_client = std::make_shared<Client>(
      old.Connect([](int in, int out) { Serve(in, out, Handlers{}, ServeOptions{}); }),
      "old controller");
  CHECK(RemoteClusterStore(old_client)->ProducerId("ingestA").error().code() == Code::kUnsupported);
}

// A reply's payload is the client's receive buffer, valid until the
// client's next call: a remote cluster store shared by threads (mq-replicate
// --follow's partitions of one topic) decodes each reply before another
// thread's call reads the next one into that buffer. Replies of two states
// of one size that differ in every replica's address: a reply decoded from
// a buffer that another reply overwrote is neither, and fails its CRC
// (R41). Every third answer is a corruption, which ends the conversation:
// the client drops the buffer at its next call, freed under a decode of
// another thread's (ASan: heap-use-after-free).
TEST_CASE("a remote cluster store shared by threads decodes each reply before the next call") {
  auto state = [](char tag) {
    ClusterState s;
    for (int32_t i = 0; i < 2000; ++i)
      s.replicas.push_back({i, fmt::format("/roots/{}{:04}/some/longer/path", tag, i)});
    return s.Serialize();
  };
  const std::string a = state('a'), b = state('b');
  REQUIRE(a.size() == b.size());
  std::atomic<int> served{0};
  Servers servers;
  auto client = std::make_shared<Client>(servers.Connect([&](int in, int out) {
    Handlers h;
    h.load_state = [&]() -> Result<std::string> {
      const int n = served++;
      if (n % 3 == 2) return Status::Corruption("cluster-state", 0, "R41", "planted");
      return n % 2 ? a : b;
    };
    Serve(in, out, h, ServeOptions{});
  }),
                                         "controller");
  auto store = RemoteClusterStore(client);
  std::atomic<int> loads{0}, wrong{0};
  std::string first_error;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        auto s = store->Load();
        ++loads;
        if (s && s->replicas.size() == 2000) continue;
        if (!s && s.error().code() == Code::kUnavailable) continue;  // a planted one
        ++wrong;
        std::lock_guard lock(mu);
        if (first_error.empty()) first_error = s ? "a state of another size" : s.error().message();
      }
    });
  for (auto& t : threads) t.join();
  INFO(first_error);
  CHECK(wrong == 0);
  CHECK(loads == 1000);
  CHECK(client->connects() > 1);  // the planted answers ended conversations
}
