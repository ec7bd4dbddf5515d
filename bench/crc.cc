// CRC-32C throughput on 16 KiB buffers (the size of a typical batch).
//
//   bench-crc [--bytes=2G] [--runs=5]
//
// Baselines, same run: memcpy of 16 KiB buffers, and the portable CRC.

#include <cstring>
#include <vector>

#include "bench.h"
#include "mq/crc32c.h"

int main(int argc, char** argv) {
  const uint64_t bytes = bench::ParseSize(bench::Flag(argc, argv, "bytes", "2G"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "5"));
  constexpr size_t kBuffer = 16 * 1024;
  const uint64_t rounds = bytes / kBuffer;
  std::vector<std::byte> buf(kBuffer), dst(kBuffer);
  for (size_t i = 0; i < kBuffer; ++i) buf[i] = static_cast<std::byte>(i * 131 + 7);

  uint32_t sink = 0;
  const double hw = bench::MedianSeconds(runs, [&] {
    for (uint64_t i = 0; i < rounds; ++i) {
      buf[0] = static_cast<std::byte>(i);  // a different buffer each round
      sink ^= mq::Crc32c(buf);
    }
  });
  const double copy = bench::MedianSeconds(runs, [&] {
    for (uint64_t i = 0; i < rounds; ++i) {
      buf[0] = static_cast<std::byte>(i);
      std::memcpy(dst.data(), buf.data(), kBuffer);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
  });
  const uint64_t portable_rounds = rounds / 16 + 1;  // it is much slower
  const double portable = bench::MedianSeconds(runs, [&] {
    for (uint64_t i = 0; i < portable_rounds; ++i) {
      buf[0] = static_cast<std::byte>(i);
      sink ^= mq::Crc32cPortable(0, buf);
    }
  });
  if (sink == 0x12345678) std::puts("");  // keep `sink` alive

  const double total = static_cast<double>(rounds * kBuffer);
  const double hw_rate = total / hw;
  const double portable_rate = static_cast<double>(portable_rounds * kBuffer) / portable;
  const char* path =
      mq::Crc32cHardware() ? "CRC-32C SSE4.2, 16 KiB buffers" : "CRC-32C (no SSE4.2!)";
  bench::Row(path, bench::Rate(hw_rate, "B"), "memcpy " + bench::Rate(total / copy, "B"),
             hw_rate / (total / copy), ">= 8 GB/s");
  bench::Row("CRC-32C SSE4.2 vs portable", bench::Rate(hw_rate, "B"),
             "portable " + bench::Rate(portable_rate, "B"), hw_rate / portable_rate, "");
  return 0;
}
