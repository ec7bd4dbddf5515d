// Peak resident memory while appending and then reading a large log.
//
//   bench-memory [--bytes=1G]      (the figure: --bytes=10G)
//
// Appends --bytes of 100-byte records in 16 KiB batches (Durability::kNone,
// 1 GiB segments), closes, then reads every record back. Reports peak RSS
// (getrusage ru_maxrss) against the RSS before the log was touched.
// Target: under 64 MB.

#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/partition.h"

int main(int argc, char** argv) {
  const uint64_t bytes = bench::ParseSize(bench::Flag(argc, argv, "bytes", "1G"));
  constexpr size_t kRecordBytes = 100;
  constexpr size_t kBatchBytes = 16 * 1024;
  bench::ScratchDir tmp;
  const std::string dir = tmp / "p-0";
  int per_batch = 0;
  auto batch = bench::MakeBatch(kBatchBytes, kRecordBytes, 1700000000000, &per_batch);
  const long base_kib = bench::PeakRssKiB();

  const double start = bench::Now();
  {
    mq::RecoveryReport report;
    auto writer =
        bench::Take(mq::PartitionWriter::Open(dir, mq::LogConfig{}, true, &report), "open");
    for (uint64_t done = 0; done < bytes; done += batch.size()) {
      bench::Take(writer->Append(batch), "append");
    }
    bench::Check(writer->Close(), "close");
  }
  const long after_append_kib = bench::PeakRssKiB();
  int64_t records = 0;
  {
    auto reader = bench::Take(mq::PartitionReader::Open(dir), "open reader");
    bench::Check(reader->Seek(0), "seek");
    std::vector<std::byte> scratch;
    for (;;) {
      auto b = bench::Take(reader->Next(), "next");
      if (!b) break;
      auto rr = bench::Take(mq::RecordReader::Open(*b, &scratch, {}), "records");
      while (bench::Take(rr.Next(), "record")) ++records;
    }
  }
  const double seconds = bench::Now() - start;
  const long peak_kib = bench::PeakRssKiB();
  const double expected = static_cast<double>(bytes / batch.size() + 1) * per_batch;
  if (static_cast<double>(records) < expected - per_batch) bench::Die("records missing on read");

  const std::string label = "peak RSS, append+read " + std::to_string(bytes >> 20) + " MiB";
  bench::Row(label, bench::Fixed(static_cast<double>(peak_kib) / 1024, "MiB", 1),
             "start " + bench::Fixed(static_cast<double>(base_kib) / 1024, "MiB", 1),
             static_cast<double>(peak_kib) / 1024 / 64, "< 64 MiB (ratio: of 64)");
  std::fprintf(stderr,
               "memory: peak after append %.1f MiB, after read %.1f MiB, %lld records, %.1f s\n",
               static_cast<double>(after_append_kib) / 1024, static_cast<double>(peak_kib) / 1024,
               static_cast<long long>(records), seconds);
  return 0;
}
