// Durable appends against the disk's own fsync rate.
//
//   bench-fsync [--count=200] [--runs=3]
//
// Baseline, same run and file system: append 4 KiB to a file + fdatasync,
// --count times. Measured: PartitionWriter with Durability::kEveryBatch
// appending a one-record batch --count times (each Append returns only after
// its fsync). Ratio: durable appends per second / fsyncs per second (1.0
// means one fsync per append and nothing else).

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "bench.h"
#include "mq/partition.h"

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
  const double append_rate = count / durable;
  bench::Row("append, Durability::kEveryBatch", bench::Rate(append_rate, "app"),
             "fdatasync " + bench::Rate(fsync_rate, "op") + " (" +
                 bench::Fixed(1e3 / fsync_rate, "ms") + ")",
             append_rate / fsync_rate, "close to 1");
  return 0;
}
