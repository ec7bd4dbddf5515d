// Opening a partition for writing after many unsynced appends (R27).
//
//   bench-open_unsynced [--bytes=1G] [--runs=9]
//
// Writes --bytes of 64 KiB batches with durability none and no fsync at
// close, so the recovery point stays at 0: every byte is "appended since
// the last fsync". Then measures, each as the median of --runs runs, open
// a PartitionWriter + append one message + close (no fsync):
//  - on that partition, on the same boot: the committed end is
//    authoritative, nothing is re-validated (target: within 2x of the
//    baseline);
//  - on that partition after a simulated reboot (MQ_TEST_BOOT_ID changes):
//    recovery validates every byte from the recovery point (reported);
// against the baseline, same run: the same on an empty topic.

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/partition.h"

namespace {

constexpr size_t kBatchBytes = 64 * 1024;
constexpr size_t kRecordBytes = 1000;

mq::LogConfig Config() {
  mq::LogConfig config;
  config.durability = mq::Durability::kNone;
  config.sync_on_close = false;
  return config;
}

uint64_t ParseBytes(const std::string& s) {
  uint64_t v = std::stoull(s);
  switch (s.empty() ? ' ' : s.back()) {
    case 'G':
      return v << 30;
    case 'M':
      return v << 20;
    case 'K':
      return v << 10;
    default:
      return v;
  }
}

// Open + append one message + close.
double OpenAppendClose(const std::string& dir, std::vector<std::byte>& one) {
  const double t0 = bench::Now();
  mq::RecoveryReport report;
  auto writer = bench::Take(mq::PartitionWriter::Open(dir, Config(), true, &report), "open");
  bench::Take(writer->Append(one), "append one");
  bench::Check(writer->Close(), "close");
  return bench::Now() - t0;
}

double Median(int runs, const std::string& dir, std::vector<std::byte>& one) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(OpenAppendClose(dir, one));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t bytes = ParseBytes(bench::Flag(argc, argv, "bytes", "1G"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "9"));
  bench::ScratchDir tmp;
  const std::string full = tmp / "full-0";
  const std::string empty = tmp / "empty-0";
  int per_batch = 0;
  auto batch = bench::MakeBatch(kBatchBytes, kRecordBytes, 1700000000000, &per_batch);
  auto one = bench::MakeBatch(200, 100, 1700000000000, &per_batch);
  {
    auto writer = bench::Take(mq::PartitionWriter::Open(full, Config(), true, nullptr), "open");
    for (uint64_t written = 0; written < bytes; written += batch.size())
      bench::Take(writer->Append(batch), "append");
    bench::Check(writer->Close(), "close");
  }
  bench::Check(
      bench::Take(mq::PartitionWriter::Open(empty, Config(), true, nullptr), "create")->Close(),
      "close empty");

  const double base = Median(runs, empty, one);
  const double same_boot = Median(runs, full, one);
  // Reboots are simulated: every open is the first of a new boot.
  std::vector<double> reboots;
  for (int i = 0; i < std::max(1, runs / 3); ++i) {
    const std::string id = "0000beef-0000-0000-0000-" + std::to_string(100000000000 + i);
    ::setenv("MQ_TEST_BOOT_ID", id.c_str(), 1);
    reboots.push_back(OpenAppendClose(full, one));
  }
  ::unsetenv("MQ_TEST_BOOT_ID");
  std::sort(reboots.begin(), reboots.end());
  const double reboot = reboots[reboots.size() / 2];

  const std::string size = std::to_string(bytes >> 20) + " MiB";
  bench::Row("open+append 1 msg after " + size + " unsynced", bench::Fixed(same_boot * 1e3, "ms"),
             "empty topic " + bench::Fixed(base * 1e3, "ms"), same_boot / base, "< 2x");
  bench::Row("  the same after a reboot (full validation)", bench::Fixed(reboot * 1e3, "ms"),
             "empty topic " + bench::Fixed(base * 1e3, "ms"), reboot / base, "(reported)");
  return 0;
}
