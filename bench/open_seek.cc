// Opening a partition of many segments and reading an offset near its end.
//
//   bench-open_seek [--segments=1000] [--runs=9]
//
// Builds a partition of --segments segments (a few batches each), then
// measures, each as the median of --runs fresh opens:
//  - PartitionReader::Open;
//  - after Open: Seek to an offset 5 records before the end + Next().
// Baseline, same run: a single pread of 16 KiB from the last segment (what
// the read needs at least). Target: under 1 ms after open.

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/partition.h"

namespace {

constexpr size_t kBatchBytes = 4096;
constexpr size_t kRecordBytes = 100;
constexpr int kBatchesPerSegment = 4;

int64_t Build(const std::string& dir, int segments) {
  mq::LogConfig config;
  config.segment_bytes = kBatchBytes * kBatchesPerSegment;  // the next batch rolls
  config.index_interval_bytes = kBatchBytes;
  mq::RecoveryReport report;
  auto writer = bench::Take(mq::PartitionWriter::Open(dir, config, true, &report), "open");
  int per_batch = 0;
  auto batch = bench::MakeBatch(kBatchBytes - 64, kRecordBytes, 1700000000000, &per_batch);
  for (int i = 0; i < segments * kBatchesPerSegment; ++i) {
    bench::Take(writer->Append(batch), "append");
  }
  bench::Check(writer->Close(), "close");
  return writer->log_end_offset();
}

}  // namespace

int main(int argc, char** argv) {
  const int segments = std::stoi(bench::Flag(argc, argv, "segments", "1000"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "9"));
  bench::ScratchDir tmp;
  const std::string dir = tmp / "p-0";
  const int64_t end = Build(dir, segments);
  size_t logs = 0;
  std::string last;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".log") {
      ++logs;
      last = std::max(last, e.path().string());
    }
  }

  std::vector<double> opens, seeks;
  for (int i = 0; i < runs; ++i) {
    double t0 = bench::Now();
    auto reader = bench::Take(mq::PartitionReader::Open(dir), "open reader");
    double t1 = bench::Now();
    bench::Check(reader->Seek(end - 5), "seek");
    auto batch = bench::Take(reader->Next(), "next");
    double t2 = bench::Now();
    if (!batch || batch->header().last_offset() < end - 5) bench::Die("seek landed wrong");
    opens.push_back(t1 - t0);
    seeks.push_back(t2 - t1);
  }
  std::sort(opens.begin(), opens.end());
  std::sort(seeks.begin(), seeks.end());

  const int fd = ::open(last.c_str(), O_RDONLY);
  std::vector<char> buf(16 * 1024);
  const double pread = bench::MedianSeconds(runs, [&] {
    if (::pread(fd, buf.data(), buf.size(), 0) < 0) bench::Die("pread");
  });
  ::close(fd);

  const double open_ms = opens[opens.size() / 2] * 1e3;
  const double seek_ms = seeks[seeks.size() / 2] * 1e3;
  bench::Row("open partition of " + std::to_string(logs) + " segments", bench::Fixed(open_ms, "ms"),
             "", 0, "(reported)");
  bench::Row("seek near the end + read, after open", bench::Fixed(seek_ms, "ms"),
             "pread 16 KiB " + bench::Fixed(pread * 1e3, "ms"), seek_ms / (pread * 1e3), "< 1 ms");
  return 0;
}
