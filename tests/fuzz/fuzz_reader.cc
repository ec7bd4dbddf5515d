// Fuzzes the reader path: PartitionReader over a partition directory that a
// writer built and the input then damaged. The input chooses the workload
// (segment size, batches, records) and a list of edits: byte overwrites and
// truncations of any file of the directory (segments, indexes, state). The
// reader must never crash, and everything it hands out must be what the
// writer committed, in order, with no gap: after edits to indexes alone it
// must hand out everything; otherwise it may stop early, but only with an
// error.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "mq/batch.h"
#include "mq/partition.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint32_t U16() { return uint32_t{Byte()} << 8 | Byte(); }
};

void Check(bool ok);
std::vector<std::byte> Batch(int count, int64_t ts, size_t value) {
  mq::BatchBuilder b;
  std::string v(value, 'x');
  for (int i = 0; i < count; ++i) {
    mq::RecordInput r;
    r.timestamp = ts + i;
    r.value = mq::Bytes(reinterpret_cast<const std::byte*>(v.data()), v.size());
    b.Add(r);
  }
  std::vector<std::byte> out;
  Check(b.Finish(0, &out).ok());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  // Memory-backed when there is /dev/shm: the target writes a directory per input.
  static const bool shm = ::access("/dev/shm", W_OK) == 0;
  char tmpl[64];
  std::snprintf(tmpl, sizeof tmpl, "%s/mq-fuzz-reader-XXXXXX", shm ? "/dev/shm" : "/tmp");
  if (::mkdtemp(tmpl) == nullptr) return 0;
  std::string dir = std::string(tmpl) + "/t-0";
  std::map<int64_t, std::pair<uint32_t, int64_t>> committed;  // base -> (crc, last)
  {
    mq::LogConfig config;
    config.segment_bytes = 100 + in.U16() * 4;
    config.index_interval_bytes = 1 + in.U16();
    config.sync_on_close = false;  // nothing here needs to survive a crash
    auto w = mq::PartitionWriter::Open(dir, config, true, nullptr);
    Check(w.has_value());
    int appends = 1 + in.Byte() % 8;
    int64_t ts = 1000;
    for (int a = 0; a < appends; ++a) {
      std::vector<std::byte> all;
      std::vector<std::pair<uint32_t, int>> built;
      int n = 1 + in.Byte() % 6;
      for (int i = 0; i < n; ++i) {
        int count = 1 + in.Byte() % 10;
        auto b = Batch(count, ts, in.Byte() % 200);
        ts += count;
        mq::BatchHeader h;
        Check(mq::ProbeBatch(b, &h, {}, "built", 0).has_value());
        built.emplace_back(h.crc, count);
        all.insert(all.end(), b.begin(), b.end());
      }
      auto r = (*w)->Append(all);
      Check(r.has_value());
      int64_t base = r->base_offset;
      for (auto [crc, count] : built) {
        committed[base] = {crc, base + count - 1};
        base += count;
      }
    }
    Check((*w)->Close().ok());
  }
  // The edits: (file index, kind, position, byte).
  std::vector<std::string> files;
  for (auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  bool only_indexes = true;
  int edits = in.Byte() % 6;
  for (int i = 0; i < edits && !files.empty(); ++i) {
    const std::string& name = files[in.Byte() % files.size()];
    std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || st.st_size == 0) continue;
    uint64_t at = (uint64_t{in.U16()} << 8 | in.Byte()) % static_cast<uint64_t>(st.st_size);
    uint8_t kind = in.Byte() % 4, value = in.Byte();
    bool index = name.ends_with(".index") || name.ends_with(".timeindex");
    if (!index) only_indexes = false;
    int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0) continue;
    if (kind == 0) {
      Check(::ftruncate(fd, static_cast<off_t>(at)) == 0);
    } else {
      Check(::pwrite(fd, &value, 1, static_cast<off_t>(at)) == 1);
    }
    ::close(fd);
  }
  {
    mq::DecodeLimits limits{1 << 20, 4 << 20};
    mq::ReadOptions options;
    options.limits = limits;
    auto r = mq::PartitionReader::Open(dir, options);
    if (r) {
      int64_t next = 0;
      bool error = false;
      size_t handed = 0;
      int64_t seek_to = in.Byte() == 0 ? 0 : in.Byte();
      if (seek_to > 0 && (*r)->Seek(seek_to).ok()) next = -1;
      for (int guard = 0; guard < 100000; ++guard) {
        auto b = (*r)->Next();
        if (!b) {
          error = true;
          break;
        }
        if (!*b) break;
        const mq::BatchHeader& h = (**b).header();
        if (next >= 0) Check(h.base_offset == next);
        auto it = committed.find(h.base_offset);
        Check(it != committed.end());
        Check(it->second.first == h.crc && it->second.second == h.last_offset());
        next = h.last_offset() + 1;
        ++handed;
      }
      if (only_indexes && seek_to == 0) {
        Check(!error);
        Check(handed == committed.size());
      }
      (void)(*r)->TakeWarnings();
    }
  }
  std::filesystem::remove_all(tmpl);
  return 0;
}
