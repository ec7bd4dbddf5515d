// Durable appends against the disk's own fsync rate.
//
//   bench-fsync [--count=200] [--runs=3]
//
// Baseline, same run and file system: append 4 KiB to a file + fdatasync,
// --count times. Measured: PartitionWriter with Durability::kEveryBatch
// appending a one-record batch --count times (each Append returns only after
// its fsync). Ratio: durable appends per second / fsyncs per second (1.0
// means one fsync per append and nothing else).
// Then the ways to make one 100-byte append durable, each against
// pwrite + fdatasync (what the writer does) on a growing file: write on an
// O_DSYNC descriptor (dd oflag=dsync), pwritev2 with RWF_DSYNC (the same
// in one call on a plain descriptor), and pwrite + fdatasync into a file
// preallocated with fallocate (the flush then changes no file size).

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/partition.h"

namespace {

enum class Way { kPwriteFdatasync, kODsync, kRwfDsync, kPreallocated };

// Seconds for `count` durable 100-byte appends to a new file, `way`.
double SmallAppendSeconds(const std::string& path, int count, Way way) {
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | (way == Way::kODsync ? O_DSYNC : 0), 0640);
  if (fd < 0) bench::Die("open " + path);
  if (way == Way::kPreallocated && ::fallocate(fd, 0, 0, static_cast<off_t>(count) * 100) != 0)
    bench::Die("fallocate");
  char block[100] = {};
  const double t0 = bench::Now();
  for (int i = 0; i < count; ++i) {
    const off_t at = static_cast<off_t>(i) * 100;
    if (way == Way::kRwfDsync) {
      iovec v{block, sizeof block};
      if (::pwritev2(fd, &v, 1, at, RWF_DSYNC) != 100) bench::Die("pwritev2");
      continue;
    }
    if (::pwrite(fd, block, sizeof block, at) != 100) bench::Die("pwrite");
    if (way != Way::kODsync && ::fdatasync(fd) != 0) bench::Die("fdatasync");
  }
  const double t = bench::Now() - t0;
  ::close(fd);
  ::unlink(path.c_str());
  return t;
}

// The rows for the ways against pwrite + fdatasync, alternating runs.
void SmallAppends(const bench::ScratchDir& tmp, int count, int runs) {
  const Way ways[] = {Way::kPwriteFdatasync, Way::kODsync, Way::kRwfDsync, Way::kPreallocated};
  const char* names[] = {"pwrite + fdatasync, 100 B", "write O_DSYNC, 100 B",
                         "pwritev2 RWF_DSYNC, 100 B", "pwrite + fdatasync, preallocated"};
  std::vector<std::vector<double>> t(4);
  for (int r = 0; r < runs; ++r)
    for (int w = 0; w < 4; ++w) t[w].push_back(SmallAppendSeconds(tmp / "small", count, ways[w]));
  for (auto& v : t) std::sort(v.begin(), v.end());
  const double base = t[0][t[0].size() / 2] / count;
  for (int w = 1; w < 4; ++w) {
    const double op = t[w][t[w].size() / 2] / count;
    bench::Row(names[w], bench::Fixed(op * 1e6, "us", 0),
               std::string(names[0]) + " " + bench::Fixed(base * 1e6, "us", 0), base / op,
               "> 1: faster");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int count = std::stoi(bench::Flag(argc, argv, "count", "200"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "3"));
  bench::ScratchDir tmp;

  std::vector<char> block(4096, 'x');
  const double raw = bench::MedianSeconds(runs, [&] {
    const std::string path = tmp / "raw";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd < 0) bench::Die("open " + path);
    for (int i = 0; i < count; ++i) {
      if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
        bench::Die("write");
      }
      if (::fdatasync(fd) != 0) bench::Die("fdatasync");
    }
    ::close(fd);
  });

  int per_batch = 0;
  auto batch = bench::MakeBatch(200, 100, 1700000000000, &per_batch);
  int run = 0;
  const double durable = bench::MedianSeconds(runs, [&] {
    mq::LogConfig config;
    config.durability = mq::Durability::kEveryBatch;
    mq::RecoveryReport report;
    auto writer = bench::Take(
        mq::PartitionWriter::Open(tmp / ("p-" + std::to_string(run++)), config, true, &report),
        "open");
    for (int i = 0; i < count; ++i) bench::Take(writer->Append(batch), "append");
    bench::Check(writer->Close(), "close");
  });

  const double fsync_rate = count / raw;
  SmallAppends(tmp, count, runs);
  const double append_rate = count / durable;
  bench::Row("append, Durability::kEveryBatch", bench::Rate(append_rate, "app"),
             "fdatasync " + bench::Rate(fsync_rate, "op") + " (" +
                 bench::Fixed(1e3 / fsync_rate, "ms") + ")",
             append_rate / fsync_rate, "close to 1");
  return 0;
}
