// Append and decode throughput of a partition in the page cache.
//
//   bench-log [--bytes=256M] [--runs=5]
//
// Baselines, measured in the same run on the same file system:
//  - `cat` copying a file of 100-byte lines (in the page cache) to a new file;
//  - memcpy of as many bytes as the log holds.
// Measured: liblog appending 100-byte records in 16 KiB batches (encoding
// included, and appending pre-encoded batches), Durability::kNone; then
// reading the log back and decoding every record.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/batch.h"
#include "mq/partition.h"

namespace {

constexpr size_t kRecordBytes = 100;
constexpr size_t kBatchBytes = 16 * 1024;

void WriteLines(const std::string& path, uint64_t bytes) {
  std::string line(kRecordBytes - 1, 'x');
  line += '\n';
  std::string chunk;
  for (int i = 0; i < 10000; ++i) chunk += line;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
  if (fd < 0) bench::Die("open " + path);
  for (uint64_t done = 0; done < bytes; done += chunk.size()) {
    if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) {
      bench::Die("write " + path);
    }
  }
  ::close(fd);
}

double CatSeconds(const std::string& src, const std::string& dst, int runs) {
  const std::string cmd = "cat '" + src + "' > '" + dst + "'";
  if (std::system(cmd.c_str()) != 0) bench::Die(cmd);  // warm the page cache
  return bench::MedianSeconds(runs, [&] {
    ::unlink(dst.c_str());
    if (std::system(cmd.c_str()) != 0) bench::Die(cmd);
  });
}

std::unique_ptr<mq::PartitionWriter> OpenFresh(const std::string& dir) {
  std::filesystem::remove_all(dir);
  mq::LogConfig config;
  config.durability = mq::Durability::kNone;
  mq::RecoveryReport report;
  return bench::Take(mq::PartitionWriter::Open(dir, config, true, &report), "open partition");
}

// Encodes and appends until `records` records are in; returns seconds
// (Close, which fsyncs, is outside the timing).
double AppendEncoding(const std::string& dir, int64_t records) {
  auto writer = OpenFresh(dir);
  std::string value(kRecordBytes, 'x');
  mq::BatchBuilder builder;
  std::vector<std::byte> batch;
  const double start = bench::Now();
  int64_t ts = 1700000000000;
  for (int64_t i = 0; i < records;) {
    while (i < records && builder.size_bytes() + kRecordBytes + 16 <= kBatchBytes) {
      std::memcpy(value.data(), &i, sizeof i);
      mq::RecordInput r;
      r.timestamp = ts++;
      r.value = std::as_bytes(std::span(value.data(), value.size()));
      builder.Add(r);
      ++i;
    }
    batch.clear();
    bench::Check(builder.Finish(0, &batch), "Finish");
    bench::Take(writer->Append(batch), "Append");
  }
  const double seconds = bench::Now() - start;
  bench::Check(writer->Close(), "Close");
  return seconds;
}

// Appends one pre-encoded batch again and again (offsets are reassigned).
double AppendEncoded(const std::string& dir, int64_t records) {
  auto writer = OpenFresh(dir);
  int per_batch = 0;
  std::vector<std::byte> batch =
      bench::MakeBatch(kBatchBytes, kRecordBytes, 1700000000000, &per_batch);
  const double start = bench::Now();
  for (int64_t i = 0; i < records; i += per_batch) bench::Take(writer->Append(batch), "Append");
  const double seconds = bench::Now() - start;
  bench::Check(writer->Close(), "Close");
  return seconds;
}

// The median of `runs` values returned by `fn`.
double MedianOf(int runs, const std::function<double()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) t.push_back(fn());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Appends pre-encoded 16 KiB batches `group` at a time, one Append call per
// group (as mq-produce does): the per-call lock, publish and wake-up are paid
// once per group.
double AppendGrouped(const std::string& dir, int64_t records, int group) {
  auto writer = OpenFresh(dir);
  int per_batch = 0;
  std::vector<std::byte> one =
      bench::MakeBatch(kBatchBytes, kRecordBytes, 1700000000000, &per_batch);
  std::vector<std::byte> batches;
  for (int i = 0; i < group; ++i) batches.insert(batches.end(), one.begin(), one.end());
  const double start = bench::Now();
  for (int64_t i = 0; i < records; i += static_cast<int64_t>(per_batch) * group)
    bench::Take(writer->Append(batches), "Append");
  const double seconds = bench::Now() - start;
  bench::Check(writer->Close(), "Close");
  return seconds;
}

struct DecodeResult {
  int64_t records = 0;
  uint64_t bytes = 0;
};

DecodeResult Decode(const std::string& dir) {
  auto reader = bench::Take(mq::PartitionReader::Open(dir), "open reader");
  bench::Check(reader->Seek(0), "Seek");
  std::vector<std::byte> scratch;
  DecodeResult result;
  uint64_t checksum = 0;
  for (;;) {
    auto batch = bench::Take(reader->Next(), "Next");
    if (!batch) break;
    result.bytes += batch->bytes().size();
    auto records = bench::Take(mq::RecordReader::Open(*batch, &scratch, {}), "RecordReader");
    for (;;) {
      auto r = bench::Take(records.Next(), "record");
      if (!r) break;
      checksum += r->value ? r->value->size() : 0;
      result.records++;
    }
  }
  if (checksum != static_cast<uint64_t>(result.records) * kRecordBytes)
    bench::Die("decode mismatch");
  return result;
}

double MemcpySeconds(uint64_t bytes, int runs) {
  constexpr size_t kBuffer = 64 << 20;  // larger than any cache
  std::vector<char> src(kBuffer, 'x'), dst(kBuffer, 0);
  return bench::MedianSeconds(runs, [&] {
    for (uint64_t done = 0; done < bytes; done += kBuffer) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kBuffer, bytes - done));
      std::memcpy(dst.data(), src.data(), n);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t bytes = bench::ParseSize(bench::Flag(argc, argv, "bytes", "256M"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "5"));
  const int64_t records = static_cast<int64_t>(bytes / kRecordBytes);
  bench::ScratchDir tmp;

  WriteLines(tmp / "lines", bytes);
  const double cat = CatSeconds(tmp / "lines", tmp / "copy", runs);
  const double cat_rate = static_cast<double>(bytes) / cat;
  ::unlink((tmp / "copy").c_str());
  ::unlink((tmp / "lines").c_str());

  const std::string dir = tmp / "p-0";
  // The append functions time themselves: opening (which removes the last
  // run's log) and the fsync in Close are outside what they measure.
  const double encode =
      MedianOf(runs, [&] { return AppendEncoding(dir, records); });  // leaves the log
  const double payload = static_cast<double>(records * kRecordBytes);
  bench::Row("append 100 B records, 16 KiB batches (encode)",
             bench::Rate(static_cast<double>(records) / encode, "rec"),
             "cat " + bench::Rate(cat_rate, "B"), payload / encode / cat_rate,
             ">= 0.5 of cat, >= 10 M rec/s");
  const double encoded = MedianOf(runs, [&] { return AppendEncoded(tmp / "p-1", records); });
  bench::Row("append pre-encoded 16 KiB batches",
             bench::Rate(static_cast<double>(records) / encoded, "rec"),
             "cat " + bench::Rate(cat_rate, "B"), payload / encoded / cat_rate, ">= 0.5 of cat");
  std::filesystem::remove_all(tmp / "p-1");
  const double grouped = MedianOf(runs, [&] { return AppendGrouped(tmp / "p-2", records, 64); });
  bench::Row("append 16 KiB batches, 64 per Append call",
             bench::Rate(static_cast<double>(records) / grouped, "rec"),
             "cat " + bench::Rate(cat_rate, "B"), payload / grouped / cat_rate,
             ">= 0.5 of cat, >= 10 M rec/s");
  std::filesystem::remove_all(tmp / "p-2");

  DecodeResult decoded;
  const double decode = bench::MedianSeconds(runs, [&] { decoded = Decode(dir); });
  const double copy = MemcpySeconds(decoded.bytes, runs);
  bench::Row("decode every record (page cache)",
             bench::Rate(static_cast<double>(decoded.records) / decode, "rec"),
             "memcpy " + bench::Rate(static_cast<double>(decoded.bytes) / copy, "B"), copy / decode,
             ">= 20 M rec/s");
  return 0;
}
