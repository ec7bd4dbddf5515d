// One message at a time with a durable acknowledgement per message, against
// `dd oflag=dsync` of 100-byte writes in the same run (not a test).
//
//   MQ_BIN=build bench-durable_ack [--messages=2000] [--runs=5]
//
// Measured: `mq-produce -t T --fsync batch --print-offsets` reading a pipe;
// the bench writes one 100-byte line (99 + newline), waits for its
// "partition offset" line (printed after the append and its fdatasync),
// then writes the next. Baseline: `dd if=/dev/zero of=FILE bs=100
// count=MESSAGES oflag=dsync` into the same file system (one synchronous
// 100-byte write per message, nothing else). The two alternate, --runs
// times each; printed: the median rate of each, p50 and p99 of mq's
// per-message latency, and the ratio of the medians (target >= 0.9).
// Also measured in each run, to say what the path costs besides the flush:
// mq-produce --fsync none --print-offsets the same way (no flush), and a
// 100-byte round trip through `cat` over two pipes (the least a producer
// behind a pipe pays per message); the ceiling printed is dd's write time
// plus that round trip, as a fraction of dd.
// Scratch files go under $MQ_BENCH_DIR (default $TMPDIR or /tmp): put it on
// the disk to measure.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench.h"

extern char** environ;

namespace {

pid_t Spawn(std::vector<std::string> args, posix_spawn_file_actions_t* actions) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], actions, nullptr, argv.data(), environ) != 0)
    bench::Die("spawn " + args[0]);
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Seconds for `dd ... oflag=dsync` of `count` 100-byte blocks into `file`.
double Dd(const std::string& file, int count) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const double t0 = bench::Now();
  pid_t pid = Spawn({"/bin/dd", "if=/dev/zero", "of=" + file, "bs=100",
                     "count=" + std::to_string(count), "oflag=dsync", "status=none"},
                    &fa);
  if (Wait(pid) != 0) bench::Die("dd failed");
  const double t = bench::Now() - t0;
  posix_spawn_file_actions_destroy(&fa);
  ::unlink(file.c_str());
  return t;
}

// Seconds for `count` messages through mq-produce, one at a time; each
// message's latency appended to `lat` (seconds).
double Produce(const std::string& bin, const std::string& root, int count, std::vector<double>* lat,
               const char* fsync = "batch") {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) bench::Die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  const double t0 = bench::Now();
  pid_t pid = Spawn(
      {bin + "/mq-produce", "-C", root, "-t", "T", "-q", "--fsync", fsync, "--print-offsets"}, &fa);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  std::string line(99, 'x');
  line += '\n';
  char buf[256];
  for (int i = 0; i < count; ++i) {
    const double s = bench::Now();
    if (::write(in[1], line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      bench::Die("write to mq-produce");
    // One "partition offset" line back.
    for (;;) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) bench::Die("mq-produce stopped");
      if (buf[n - 1] == '\n') break;
    }
    lat->push_back(bench::Now() - s);
  }
  ::close(in[1]);
  while (::read(out[0], buf, sizeof buf) > 0) {
  }
  ::close(out[0]);
  if (Wait(pid) != 0) bench::Die("mq-produce failed");
  return bench::Now() - t0;
}

// Median seconds of a 100-byte round trip through `cat` over two pipes,
// one at a time, `count` times: what any producer behind a pipe pays per
// message besides its flush (two pipe writes, two reads, two wake-ups).
double CatRoundTrip(int count) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) bench::Die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  pid_t pid = Spawn({"/bin/cat"}, &fa);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  std::string line(99, 'x');
  line += '\n';
  char buf[256];
  std::vector<double> lat;
  for (int i = 0; i < count; ++i) {
    const double s = bench::Now();
    if (::write(in[1], line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      bench::Die("write to cat");
    for (size_t got = 0; got < line.size();) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) bench::Die("cat stopped");
      got += static_cast<size_t>(n);
    }
    lat.push_back(bench::Now() - s);
  }
  ::close(in[1]);
  ::close(out[0]);
  Wait(pid);
  std::sort(lat.begin(), lat.end());
  return lat[lat.size() / 2];
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int count = std::stoi(bench::Flag(argc, argv, "messages", "2000"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "5"));
  const char* bin = std::getenv("MQ_BIN");
  if (!bin) {
    std::fprintf(stderr, "set MQ_BIN to the build directory (for mq-produce)\n");
    return 1;
  }
  bench::ScratchDir tmp;
  {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (Wait(Spawn(
            {std::string(bin) + "/mq-produce", "-C", tmp / "data", "-t", "T", "--create", "-q"},
            &fa)) != 0)
      bench::Die("mq-produce --create failed");
    posix_spawn_file_actions_destroy(&fa);
  }
  std::vector<double> dd, mq, lat, unsynced, unsynced_lat, cat;
  for (int r = 0; r < runs; ++r) {
    dd.push_back(Dd(tmp / "dd.out", count));
    mq.push_back(Produce(bin, tmp / "data", count, &lat));
    unsynced.push_back(Produce(bin, tmp / "data", count, &unsynced_lat, "none"));
    cat.push_back(CatRoundTrip(count));
  }
  const double dd_rate = count / Median(dd), mq_rate = count / Median(mq);
  std::sort(lat.begin(), lat.end());
  std::printf("%d messages x %d runs, one at a time, alternating with dd; scratch %s\n", count,
              runs, tmp.path().c_str());
  std::printf("dd bs=100 oflag=dsync            %9.0f writes/s (median)\n", dd_rate);
  std::printf(
      "mq-produce --fsync batch --print-offsets %9.0f msgs/s (median); p50 %.0f us, "
      "p99 %.0f us\n",
      mq_rate, lat[lat.size() / 2] * 1e6, lat[lat.size() * 99 / 100] * 1e6);
  std::printf("ratio mq / dd: %.2f; target >= 0.9: %s\n", mq_rate / dd_rate,
              mq_rate >= 0.9 * dd_rate ? "met" : "NOT met");
  // What the path costs besides the flush, and the ceiling it leaves: dd
  // writes from its own memory, a producer behind a pipe also pays a round
  // trip per message (cat's is the least any program pays).
  std::sort(unsynced_lat.begin(), unsynced_lat.end());
  const double rtt = Median(cat), dd_op = Median(dd) / count;
  std::printf(
      "without the flush (--fsync none --print-offsets): p50 %.0f us; cat round trip p50 "
      "%.0f us\n",
      unsynced_lat[unsynced_lat.size() / 2] * 1e6, rtt * 1e6);
  std::printf("ceiling behind a pipe: dd write + cat round trip = %.0f us, %.2f x dd\n",
              (dd_op + rtt) * 1e6, dd_op / (dd_op + rtt));
  return 0;
}
