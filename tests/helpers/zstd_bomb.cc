// mq-test-zstd-bomb: writes one zstd batch whose frame (built from RLE
// blocks, a few bytes per 128 KiB) yields ACTUAL bytes under a header that
// states CLAIMED, for the memory-bound tests of the readers.
//
//   mq-test-zstd-bomb CLAIMED ACTUAL --file OUT.log   a bare segment file
//   mq-test-zstd-bomb CLAIMED ACTUAL --append DIR     appended to a partition
//                                                     directory by its writer
#include <cstdio>
#include <cstdlib>
#include <string>

#include "batch_test_util.h"
#include "exit_code.h"  // tools/common: a status's exit status
#include "mq/file.h"
#include "mq/partition.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s CLAIMED ACTUAL (--file OUT.log | --append DIR)\n", argv[0]);
    return 64;
  }
  const uint64_t claimed = std::strtoull(argv[1], nullptr, 10);
  const uint64_t actual = std::strtoull(argv[2], nullptr, 10);
  const std::string mode = argv[3], path = argv[4];
  std::vector<std::byte> batch = mq::test::ZstdFrameBatch(mq::test::ZstdRleFrame(claimed, actual));
  if (mode == "--file") {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(batch.data(), 1, batch.size(), f) != batch.size() ||
        std::fclose(f) != 0) {
      std::perror(path.c_str());
      return 74;
    }
    return 0;
  }
  if (mode != "--append") return 64;
  mq::RecoveryReport report;
  auto writer = mq::PartitionWriter::Open(path, mq::LogConfig{}, false, &report);
  if (!writer) {
    std::fprintf(stderr, "%s\n", writer.error().message().c_str());
    return mq::cli::ExitCode(writer.error());
  }
  auto appended = (*writer)->Append(batch);
  if (!appended) {
    std::fprintf(stderr, "%s\n", appended.error().message().c_str());
    return mq::cli::ExitCode(appended.error());
  }
  mq::Status closed = (*writer)->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "%s\n", closed.message().c_str());
    return mq::cli::ExitCode(closed);
  }
  return 0;
}
