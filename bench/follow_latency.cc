// Follow-mode latency: the time from an append returning to the message
// being delivered to a follower that was waiting for it.
//
//   bench-follow_latency [--messages=2000] [--gap-us=1000] [--consume=PATH]
//
// In-process (always): one thread appends one record at a time with
// PartitionWriter::Append (linger 0: one record per batch), another waits in
// PartitionReader::WaitForAppend, reads the batch and decodes the record;
// the latency is from just before Append() to the record decoded. Between
// messages the writer waits --gap-us after the reader has the message, so
// the reader is always asleep in the futex when the next append comes.
//
// Through the tools (with --consume=PATH to mq-consume, or MQ_BIN set): the
// same appends into a topic followed by `mq-consume -o end -f '%s\n'`
// reading into a pipe; the latency is from before Append() to the line read
// from the pipe (one process wake-up and a pipe more).
//
// Baseline: a one-byte pipe ping between two threads (the cheapest
// cross-thread wake-up), measured in the same run. Reported: p50, p99, max.

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "mq/partition.h"
#include "mq/topic.h"

namespace {

int64_t NowNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Percentiles {
  double p50_us, p99_us, max_us;
};

Percentiles Summarize(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  auto at = [&](size_t per_mille) {
    return static_cast<double>(ns[std::min(ns.size() - 1, ns.size() * per_mille / 1000)]) / 1e3;
  };
  return {at(500), at(990), static_cast<double>(ns.back()) / 1e3};
}

std::string Us(const Percentiles& p) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f/%.0f/%.0f us", p.p50_us, p.p99_us, p.max_us);
  return buf;
}

// One record whose value is the append time in ns, as one batch.
std::vector<std::byte> OneRecordBatch(int64_t now_ns) {
  mq::BatchBuilder builder;
  std::string value = std::to_string(now_ns);
  mq::RecordInput r;
  r.timestamp = now_ns / 1000000;
  r.value = mq::AsBytes(value);
  builder.Add(r);
  std::vector<std::byte> out;
  bench::Check(builder.Finish(0, &out), "Finish");
  return out;
}

Percentiles PipePing(int messages, int gap_us) {
  int fds[2];
  if (::pipe(fds) != 0) bench::Die("pipe");
  std::vector<int64_t> lat;
  std::atomic<int64_t> sent{0};
  std::thread reader([&] {
    char c;
    for (int i = 0; i < messages; ++i) {
      if (::read(fds[0], &c, 1) != 1) bench::Die("read");
      lat.push_back(NowNs() - sent.load());
    }
  });
  for (int i = 0; i < messages; ++i) {
    while (static_cast<int>(lat.size()) < i) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    sent = NowNs();
    if (::write(fds[1], "x", 1) != 1) bench::Die("write");
  }
  reader.join();
  ::close(fds[0]);
  ::close(fds[1]);
  return Summarize(lat);
}

Percentiles InProcess(const std::string& dir, int messages, int gap_us) {
  mq::RecoveryReport report;
  auto writer = bench::Take(mq::PartitionWriter::Open(dir, mq::LogConfig{}, true, &report), "open");
  auto reader = bench::Take(mq::PartitionReader::Open(dir), "open reader");
  std::vector<int64_t> lat;
  std::atomic<int> delivered{0};
  std::thread follower([&] {
    int64_t next = 0;
    std::vector<std::byte> scratch;
    while (delivered < messages) {
      auto batch = bench::Take(reader->Next(), "Next");
      if (!batch) {
        reader->WaitForAppend(next, 1000);
        continue;
      }
      auto records = bench::Take(mq::RecordReader::Open(*batch, &scratch, {}), "records");
      mq::RecordView r;
      while (records.Read(&r)) {
        int64_t sent = std::stoll(std::string(mq::AsText(*r.value)));
        lat.push_back(NowNs() - sent);
        next = r.offset + 1;
        ++delivered;
      }
    }
  });
  for (int i = 0; i < messages; ++i) {
    while (delivered < i) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    auto batch = OneRecordBatch(NowNs());
    bench::Take(writer->Append(batch), "Append");
  }
  follower.join();
  return Summarize(lat);
}

// Appends into topic `t` of `data_dir` while `consume` follows it.
Percentiles ThroughTool(const std::string& consume, const std::string& data_dir, int messages,
                        int gap_us) {
  auto dd = bench::Take(mq::DataDir::Open(data_dir, true), "data dir");
  bench::Check(dd.CreateTopic("t", mq::TopicConfig{}), "create topic");
  mq::RecoveryReport report;
  auto writer = bench::Take(
      mq::PartitionWriter::Open(dd.PartitionDir("t", 0), mq::LogConfig{}, true, &report), "open");
  int fds[2];
  if (::pipe(fds) != 0) bench::Die("pipe");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(consume.c_str(), consume.c_str(), "-C", data_dir.c_str(), "-t", "t", "-f", "%s\n",
            static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(fds[1]);
  FILE* in = ::fdopen(fds[0], "r");
  std::vector<int64_t> lat;
  char line[64];
  // A first message makes sure the consumer is up and waiting.
  auto first = OneRecordBatch(NowNs());
  bench::Take(writer->Append(first), "Append");
  if (!std::fgets(line, sizeof line, in)) bench::Die("mq-consume printed nothing");
  for (int i = 0; i < messages; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    int64_t sent = NowNs();
    auto batch = OneRecordBatch(sent);
    bench::Take(writer->Append(batch), "Append");
    if (!std::fgets(line, sizeof line, in)) bench::Die("mq-consume stopped");
    lat.push_back(NowNs() - sent);
  }
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  std::fclose(in);
  return Summarize(lat);
}

}  // namespace

int main(int argc, char** argv) {
  const int messages = std::stoi(bench::Flag(argc, argv, "messages", "2000"));
  const int gap_us = std::stoi(bench::Flag(argc, argv, "gap-us", "1000"));
  std::string consume = bench::Flag(argc, argv, "consume", "");
  if (consume.empty() && std::getenv("MQ_BIN"))
    consume = std::string(std::getenv("MQ_BIN")) + "/mq-consume";
  bench::ScratchDir tmp;

  Percentiles pipe = PipePing(messages, gap_us);
  Percentiles mine = InProcess(tmp / "p-0", messages, gap_us);
  bench::Row("follow latency p50/p99/max, in-process", Us(mine), "pipe ping " + Us(pipe),
             mine.p50_us / pipe.p50_us, "p99 < a few ms");
  if (!consume.empty() && ::access(consume.c_str(), X_OK) == 0) {
    Percentiles tool = ThroughTool(consume, tmp / "data", messages, gap_us);
    bench::Row("follow latency p50/p99/max, mq-consume", Us(tool), "pipe ping " + Us(pipe),
               tool.p50_us / pipe.p50_us, "p99 < a few ms");
  }
  return 0;
}
