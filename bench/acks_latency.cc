// acks=all latency with a follower running `mq-replicate --follow`,
// against acks=1 and against the floor an acks=all acknowledgement cannot go
// under on this machine, all in the same run (not a test).
//
//   MQ_BIN=build bench-acks_latency [--messages=2000] [--followers=2] [--block=1]
//
// A replicated topic of one partition on 1 + --followers log roots, every
// replica in min.insync.replicas, --fsync none. A synchronous producer appends one 100-byte record
// at a time to the leader and waits for its acknowledgement before the next, as mq-produce does
// (tools/mq-produce/ack.cc): with acks=1 the append and one high watermark update; with acks=all
// until the high watermark passes the record, waking on the HW-bounded reader's futex. Each
// follower is the real `mq-replicate -C rN --follow` process.
//
// Rows (p50, p99, max per row; every row's samples interleaved message by message):
//   acks=1     the append and the high watermark update of an acks=1 acknowledgement.
//   acks=all   the same append, then the wait until the high watermark passes the record.
//   wake rtt   the cross-process wake-ups an acks=all acknowledgement needs at least, measured:
//              this process wakes --followers processes forked for it (one FUTEX_WAKE on a word
//              in a shared mapping, as an append wakes the followers on the state file), and each
//              wakes it back (a FUTEX_WAKE per process, as each follower's report wakes the
//              producer), until all have answered. No file, no log, no lock: wake-ups alone.
//   floor      acks=1 + wake rtt of the same iteration: an acks=all acknowledgement cannot be
//              cheaper than the append plus the wake-ups it needs to reach every follower and
//              come back. What acks=all costs above it is the followers' fetch, append and
//              report, and the high watermark's moves.
// Then the acks=all p50 against the acks=1 p50 (target: at most 3x with two followers) and
// against the floor's p50.
//
// --block=1 (the default) alternates the modes message by message: an acks=all message then
// follows an acks=1 message the followers may not have fetched yet, so its time includes that
// one's replication too. --block=N measures N messages of one mode, then N of the other, and
// before each acks=all block waits (not timed) until the high watermark passes every message:
// each acks=all message is then one message at a time, as in a stream of acks=all messages.
#include <linux/futex.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/cluster.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/replication.h"
#include "mq/topic.h"

extern char** environ;

namespace {

double Ms(double s) { return s * 1000.0; }

struct Stats {
  double p50, p99, max;
};

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
  return {at(0.5), at(0.99), v.back()};
}

void Die(const mq::Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  std::exit(1);
}

// The wake-ups alone: `peers` forked processes, each woken by one FUTEX_WAKE
// on a shared word and waking this process back, until all have answered.
class WakeRoundTrip {
 public:
  explicit WakeRoundTrip(int peers) : peers_(peers) {
    void* m =
        ::mmap(nullptr, sizeof(Words), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) bench::Die("mmap");
    w_ = new (m) Words;
    for (int i = 0; i < peers; ++i) {
      const pid_t pid = ::fork();
      if (pid < 0) bench::Die("fork");
      if (pid == 0) Peer();
      pids_.push_back(pid);
    }
  }
  ~WakeRoundTrip() {
    w_->go.store(UINT32_MAX);
    Wake(&w_->go);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  // Seconds from waking every peer to the last one's answer.
  double Once() {
    w_->done.store(0);
    const double t0 = bench::Now();
    w_->go.fetch_add(1);
    Wake(&w_->go);
    for (uint32_t d; (d = w_->done.load()) < static_cast<uint32_t>(peers_);) Wait(&w_->done, d);
    return bench::Now() - t0;
  }

 private:
  struct Words {
    std::atomic<uint32_t> go{0}, done{0};
  };
  static uint32_t* Word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }
  // Shared (not FUTEX_PRIVATE): the waiters are other processes.
  static void Wake(std::atomic<uint32_t>* a) {
    ::syscall(SYS_futex, Word(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  static void Wait(std::atomic<uint32_t>* a, uint32_t seen) {
    ::syscall(SYS_futex, Word(a), FUTEX_WAIT, seen, nullptr, nullptr, 0);
  }
  [[noreturn]] void Peer() {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the bench may exit on an error
    for (uint32_t seen = 0;;) {
      uint32_t g;
      while ((g = w_->go.load()) == seen) Wait(&w_->go, seen);
      if (g == UINT32_MAX) ::_exit(0);
      seen = g;
      w_->done.fetch_add(1);
      Wake(&w_->done);
    }
  }
  int peers_;
  Words* w_ = nullptr;
  std::vector<pid_t> pids_;
};

}  // namespace

int main(int argc, char** argv) {
  int messages = 2000;
  int followers = 2;
  int block = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--messages=", 0) == 0) messages = std::atoi(a.c_str() + 11);
    if (a.rfind("--followers=", 0) == 0) followers = std::atoi(a.c_str() + 12);
    if (a.rfind("--block=", 0) == 0) block = std::max(1, std::atoi(a.c_str() + 8));
  }
  if (followers < 1) followers = 1;
  const char* bin = std::getenv("MQ_BIN");
  if (!bin) {
    std::fprintf(stderr, "set MQ_BIN to the build directory (for mq-replicate)\n");
    return 1;
  }
  // Forked before anything else is open: the peers only touch their words.
  WakeRoundTrip rtt(followers);
  bench::ScratchDir tmp;
  const std::string cluster = tmp.path() + "/cl", r0 = tmp.path() + "/r0";
  std::vector<std::string> roots;
  for (int id = 0; id <= followers; ++id) roots.push_back(tmp.path() + "/r" + std::to_string(id));
  auto store = mq::FileClusterStore::Open(cluster, true);
  if (!store) Die(store.error(), "cluster");
  mq::ReplicatedTopic topic;
  topic.name = "t";
  topic.partitions = 1;
  topic.replication_factor = followers + 1;
  topic.min_insync_replicas = followers + 1;
  if (auto s = (*store)->CreateTopic(topic, roots); !s.ok()) Die(s, "create");
  for (int id = 0; id <= followers; ++id) {
    auto dir = mq::DataDir::Open(roots[static_cast<size_t>(id)], true);
    if (!dir) Die(dir.error(), "root");
    mq::TopicConfig c;
    c.partitions = 1;
    c.cluster = cluster;
    c.replica_id = id;
    if (auto s = dir->CreateTopic("t", c); !s.ok()) Die(s, "topic");
  }

  // The followers.
  const std::string rep = std::string(bin) + "/mq-replicate";
  std::vector<pid_t> pids;
  for (int id = 1; id <= followers; ++id) {
    std::vector<std::string> args = {rep, "-C", roots[static_cast<size_t>(id)], "--follow", "-q"};
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    pid_t follower = 0;
    if (posix_spawn(&follower, rep.c_str(), nullptr, nullptr, cargs.data(), environ) != 0) {
      std::perror("spawn mq-replicate");
      return 1;
    }
    pids.push_back(follower);
  }

  mq::LogConfig config;
  config.leader_epoch = 0;
  config.sync_on_close = false;  // --fsync none: page cache only
  const std::string pdir = r0 + "/t-0";
  auto writer = mq::PartitionWriter::Open(pdir, config, false, nullptr);
  if (!writer) Die(writer.error(), "writer");
  auto log = mq::OpenReplicaLog(pdir, 0, config);
  if (!log) Die(log.error(), "replica log");
  mq::ReadOptions ro;
  ro.bound_by_high_watermark = true;
  auto hw_reader = mq::PartitionReader::Open(pdir, ro);
  if (!hw_reader) Die(hw_reader.error(), "reader");
  mq::ReplicationContext ctx;
  ctx.cluster = store->get();
  ctx.clock = mq::Clock::Real();
  ctx.topic = "t";
  ctx.partition = 0;

  auto one = [&](bool all) {
    int count = 0;
    // One 100-byte record (a batch of at most 61 + 100 + 16 bytes).
    auto bytes = bench::MakeBatch(61 + 100 + 16, 100, 1000, &count);
    const double t0 = bench::Now();
    auto r = (*writer)->Append(bytes);
    if (!r) Die(r.error(), "append");
    auto hw = mq::UpdateHighWatermark(ctx, **log, 0, false);
    while (all) {
      if (hw && *hw > r->last_offset) break;
      if ((*hw_reader)->WaitForAppend(r->last_offset, 100) &&
          (*hw_reader)->end_offset() > r->last_offset)
        break;
      hw = mq::UpdateHighWatermark(ctx, **log, 0, false);
    }
    return bench::Now() - t0;
  };
  // Until the high watermark passes everything appended (not timed).
  auto settle = [&] {
    const int64_t end = (*writer)->log_end_offset();
    for (;;) {
      auto hw = mq::UpdateHighWatermark(ctx, **log, 0, false);
      if (hw && *hw >= end) return;
      (*hw_reader)->WaitForAppend(end - 1, 100);
      if ((*hw_reader)->end_offset() >= end) return;
    }
  };
  // Warm up: the follower joins and catches up.
  for (int i = 0; i < 50; ++i) one(true);
  std::vector<double> acks1, acks_all, wake, floor;
  for (int i = 0; i < messages; i += block) {
    const int n = std::min(block, messages - i);
    if (block > 1) settle();
    // Each wake-up round trip right after an acks=all message, when the
    // followers went back to waiting, as they wait for the next message.
    for (int k = 0; k < n; ++k) {
      acks_all.push_back(Ms(one(true)));
      wake.push_back(Ms(rtt.Once()));
    }
    for (int k = 0; k < n; ++k) acks1.push_back(Ms(one(false)));
  }
  for (size_t k = 0; k < acks1.size(); ++k) floor.push_back(acks1[k] + wake[k]);
  for (pid_t follower : pids) kill(follower, SIGTERM);
  for (pid_t follower : pids) {
    int status = 0;
    waitpid(follower, &status, 0);
  }

  // What an acks=all message costs here beyond acks=1: with N followers,
  // N fetches (each follower's fetch that brings the record) and N reports
  // of the new log ends (R98: no second fetch), each under the leader's
  // leader.lock writing the leader's fetch-positions in place (R60), and
  // the HW moves, each stored in place (R61: one write over the copy that
  // is not current, no file replace, no fsync with --fsync none) at the
  // leader before the producer wakes and at each follower after its
  // report. The files stay open from message to message (their names
  // checked with one fstatat), and the cluster state is read again only
  // once a change renamed a new file over it (R46).
  const Stats a1 = Summarize(acks1), aa = Summarize(acks_all), rt = Summarize(wake),
              fl = Summarize(floor);
  std::printf(
      "%d synchronous messages per mode, alternating in blocks of %d%s; %d followers: "
      "mq-replicate --follow\n",
      messages, block, block > 1 ? " (replicated before each acks=all block)" : "", followers);
  std::printf("%-9s %9s %9s %9s\n", "acks", "p50 ms", "p99 ms", "max ms");
  std::printf("%-9s %9.3f %9.3f %9.3f\n", "1", a1.p50, a1.p99, a1.max);
  std::printf("%-9s %9.3f %9.3f %9.3f\n", "all", aa.p50, aa.p99, aa.max);
  std::printf("%-9s %9.3f %9.3f %9.3f  (%d processes woken and waking back, futex)\n", "wake rtt",
              rt.p50, rt.p99, rt.max, followers);
  std::printf("%-9s %9.3f %9.3f %9.3f  (acks=1 + wake rtt, per iteration)\n", "floor", fl.p50,
              fl.p99, fl.max);
  std::printf("acks=all p50 / acks=1 p50: %.1fx; target <= 3x: %s\n", aa.p50 / a1.p50,
              aa.p50 <= 3.0 * a1.p50 ? "met" : "NOT met");
  std::printf(
      "acks=all p50 / floor p50: %.1fx (floor p50 / acks=1 p50: %.1fx; above the floor: "
      "%.3f ms)\n",
      aa.p50 / fl.p50, fl.p50 / a1.p50, aa.p50 - fl.p50);
  return 0;
}
