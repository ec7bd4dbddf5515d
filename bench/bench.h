// Shared helpers for the benchmarks: a monotonic clock, medians over
// repeated runs, a scratch directory, batch building, and the table rows
// bench/run.sh prints. Every figure is a ratio against a baseline measured
// in the same run, on the same machine, so numbers travel between machines.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mq/batch.h"
#include "mq/status.h"

namespace bench {

inline double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Seconds per run of `fn`, the median of `runs` runs.
inline double MedianSeconds(int runs, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const double start = Now();
    fn();
    t.push_back(Now() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::exit(70);
}

inline void Check(const mq::Status& s, std::string_view what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.message());
}

template <typename T>
T Take(mq::Result<T> r, std::string_view what) {
  if (!r.has_value()) Die(std::string(what) + ": " + r.error().message());
  return std::move(r).value();
}

// A fresh directory under $MQ_BENCH_DIR (default $TMPDIR or /tmp), removed
// when this goes out of scope.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("MQ_BENCH_DIR");
    if (base == nullptr) base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/mq-bench-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One batch of about `batch_bytes` (as encoded, before compression) of
// records with `value_bytes`-byte values and no key; `*count` receives the
// number of records.
inline std::vector<std::byte> MakeBatch(size_t batch_bytes, size_t value_bytes, int64_t timestamp,
                                        int* count,
                                        mq::Compression compression = mq::Compression::kNone) {
  mq::BatchOptions options;
  options.compression = compression;
  mq::BatchBuilder builder(options);
  std::string value(value_bytes, 'x');
  constexpr size_t kRecordOverhead = 16;  // length, attributes, deltas, lengths, headers
  for (int i = 0; builder.size_bytes() + value_bytes + kRecordOverhead <= batch_bytes; ++i) {
    const std::string n = std::to_string(i);
    std::memcpy(value.data(), n.data(), std::min(n.size(), value.size()));
    mq::RecordInput r;
    r.timestamp = timestamp + i;
    r.value = std::as_bytes(std::span(value.data(), value.size()));
    builder.Add(r);
  }
  *count = builder.count();
  std::vector<std::byte> out;
  Check(builder.Finish(0, &out), "BatchBuilder::Finish");
  return out;
}

inline long PeakRssKiB() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// Parses "--name=value" style flags: returns the value of --name, or `fallback`.
inline std::string Flag(int argc, char** argv, std::string_view name, std::string fallback) {
  const std::string prefix = "--" + std::string(name) + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).starts_with(prefix)) return argv[i] + prefix.size();
  }
  return fallback;
}

// Sizes like 256M, 10G, 4096.
inline uint64_t ParseSize(const std::string& s) {
  char* end = nullptr;
  uint64_t v = std::strtoull(s.c_str(), &end, 10);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      v <<= 10;
      break;
    case 'M':
    case 'm':
      v <<= 20;
      break;
    case 'G':
    case 'g':
      v <<= 30;
      break;
    default:
      break;
  }
  return v;
}

// One row of the results table:
//   what | measured | baseline | ratio | target
inline void Row(std::string_view what, std::string_view measured, std::string_view baseline,
                double ratio, std::string_view target) {
  std::printf("%-46s %-18s %-22s %8.2f  %s\n", std::string(what).c_str(),
              std::string(measured).c_str(), std::string(baseline).c_str(), ratio,
              std::string(target).c_str());
  std::fflush(stdout);
}

inline std::string Rate(double per_second, std::string_view unit) {
  char buf[64];
  if (per_second >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f G%s/s", per_second / 1e9, std::string(unit).c_str());
  } else if (per_second >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2f M%s/s", per_second / 1e6, std::string(unit).c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%.0f %s/s", per_second, std::string(unit).c_str());
  }
  return buf;
}

inline std::string Fixed(double v, std::string_view unit, int decimals = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, std::string(unit).c_str());
  return buf;
}

}  // namespace bench
