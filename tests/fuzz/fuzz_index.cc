// libFuzzer target: index files, SegmentScanner and VerifyFile over
// arbitrary bytes written to real files (format-spec/segment.md §6-§8).
// Input: byte 0 picks what the rest becomes; for the index modes, bytes 1-2
// split the rest into the index and its sibling .log.
#include <fcntl.h>
#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "mq/partition.h"
#include "mq/segment.h"

namespace {

const std::string& Dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/mq-fuzz-index-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    return std::string(tmpl);
  }();
  return dir;
}

void Put(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = Dir() + "/" + name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n <= 0) std::abort();
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const std::string log = "00000000000000000064.log";
  const std::string index = "00000000000000000064.index";
  const std::string tindex = "00000000000000000064.timeindex";
  mq::DecodeLimits limits;
  limits.max_batch_bytes = 1 << 20;
  limits.max_decompressed_bytes = 1 << 20;
  uint8_t mode = data[0] % 3;
  size_t split = std::min<size_t>(size - 3, (size_t{data[1]} << 8) | data[2]);
  const uint8_t* rest = data + 3;
  size_t n = size - 3;
  std::vector<mq::Problem> problems;
  if (mode == 0) {
    Put(log, rest, n);
    auto scanner = mq::SegmentScanner::Open(Dir() + "/" + log, limits);
    if (!scanner) return 0;
    for (int i = 0; i < 100000; ++i) {
      auto b = (*scanner)->Next();
      if (b && !*b) break;
    }
    (void)mq::VerifyFile(Dir() + "/" + log, limits, &problems);
  } else {
    const std::string& name = mode == 1 ? index : tindex;
    Put(name, rest, split);
    Put(log, rest + split, n - split);
    if (mode == 1)
      (void)mq::ReadOffsetIndexFile(Dir() + "/" + name);
    else
      (void)mq::ReadTimeIndexFile(Dir() + "/" + name);
    (void)mq::VerifyFile(Dir() + "/" + name, limits, &problems);
  }
  return 0;
}
