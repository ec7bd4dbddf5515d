// Consumer groups through the tools (not a test): what a member costs
// against plain mq-consume, and how soon a killed member's partition is
// handled again.
//
//   MQ_BIN=build bench-group [--messages=2000000] [--runs=5] [--takeovers=10] [--commits=50]
//
// Throughput: --messages 100-byte lines in a 4-partition topic (keyed, in
// the page cache), read to /dev/null --runs times each, back to back in
// every round (the same messages every time):
//   plain         mq-consume -t T -e
//   group         mq-consume -t T -G gN -e                 (at least once, a new group)
//   group, warm   mq-consume -t T -G w -e                  (the group of the last run,
//                 reset to the earliest offsets before the run, untimed)
//   time only     as group, warm, with --commit-every 0 (commits by
//                 --commit-interval only: what the default 100000 costs)
//   at-most-once  mq-consume -t T -G aN -e --at-most-once  (a new group)
//   at-most-once, warm                                     (as group, warm)
// A new group pays for its directory's creation (mkdir, fsync of groups/);
// a warm one is the common case: a member that restarts.
// Reported: the median wall time of each as messages/s, and the ratio to
// plain's median of the same run (targets: group >= 0.9, at-most-once >= 0.3).
//
// Commits (liblog, Group::Commit of 4 partitions, --commits times each):
// median latency of a durable commit (at most once) and of an atomic one
// (an at-least-once member's commits), against the disk's fdatasync of a
// 4 KiB append. Both write one copy of the offsets file in place and
// fdatasync it (R87); a new file (the first commit, an upgrade from
// version 1) is the only one renamed. At most once costs a durable commit
// per 1 MiB output write; its ceiling is (messages per 1 MiB of output) /
// (durable commit latency), reported against plain's rate.
// With --bin naming an older build, the throughput rows are that build's
// tools (the commit rows are always this build's liblog).
//
// Takeover, --takeovers times (a new group each time): members a and b of
// one group run serial handlers (--exec) on a 2-partition topic with a
// backlog on each partition; every handler writes its member and partition
// to a FIFO this program reads. Once each member handles its own
// partition, b is SIGKILLed; measured is the time from the kill until the
// first line of a handler that a runs on b's partition. Reported: median and
// max, against the median time between two of b's handler runs before the
// kill (what one handler run costs on this machine). Target: < 200 ms.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench.h"
#include "mq/group.h"

namespace {

std::string bin_dir;

std::string Tool(const char* name) { return bin_dir + "/" + name; }

// Starts `args` with standard input from `in` and standard output to `out`
// (paths; empty: inherited).
pid_t Start(const std::vector<std::string>& args, const std::string& in, const std::string& out) {
  pid_t pid = ::fork();
  if (pid < 0) bench::Die("fork");
  if (pid == 0) {
    if (!in.empty()) {
      int fd = ::open(in.c_str(), O_RDONLY);
      if (fd < 0) _exit(126);
      ::dup2(fd, 0);
      ::close(fd);
    }
    if (!out.empty()) {
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      ::dup2(fd, 1);
      ::close(fd);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void Wait(pid_t pid, const std::string& what) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    bench::Die(what + " failed (status " + std::to_string(status) + ")");
}

// Wall seconds of one run of `args` to /dev/null.
double TimeRun(const std::vector<std::string>& args) {
  const double start = bench::Now();
  Wait(Start(args, "", "/dev/null"), args[0]);
  return bench::Now() - start;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Resets group `group` of topic T to the earliest offsets (untimed).
void ResetGroup(const std::string& data, const std::string& group) {
  Wait(Start({Tool("mq-consume"), "-C", data, "-q", "--reset-offsets", "-G", group, "-t", "T",
              "--to-earliest", "--execute"},
             "", "/dev/null"),
       "mq-consume --reset-offsets");
}

// Median seconds of one Group::Commit of 4 partitions of topic T of `data`
// with `sync`, over `count` commits (a group of its own).
double CommitSeconds(const std::string& data, const std::string& name, mq::CommitSync sync,
                     int count) {
  auto group = bench::Take(mq::Group::Open(data, name, true), "open group " + name);
  std::vector<double> t;
  for (int i = 0; i < count; ++i) {
    std::vector<mq::OffsetCommit> commits;
    for (int32_t p = 0; p < 4; ++p) commits.push_back({"T", p, i + 1, 0});
    const double start = bench::Now();
    bench::Check(
        group.Commit(commits, "m", mq::CommitKind::kForward, mq::kNoTimestamp, nullptr, sync),
        "commit");
    t.push_back(bench::Now() - start);
  }
  return Median(t);
}

// Median seconds of a 4 KiB append and its fdatasync, `count` times.
double FdatasyncSeconds(const bench::ScratchDir& tmp, int count) {
  const std::string path = tmp / "fdatasync";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
  if (fd < 0) bench::Die("open " + path);
  std::vector<char> block(4096, 'x');
  std::vector<double> t;
  for (int i = 0; i < count; ++i) {
    const double start = bench::Now();
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size()))
      bench::Die("write");
    if (::fdatasync(fd) != 0) bench::Die("fdatasync");
    t.push_back(bench::Now() - start);
  }
  ::close(fd);
  return Median(t);
}

std::string Ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

void Throughput(const bench::ScratchDir& tmp, const std::string& data, long messages, int runs,
                int commits) {
  {
    std::ofstream in(tmp / "in");
    std::string pad;
    while (pad.size() < 89) pad += "the quick brown fox jumps over the lazy dog ";
    pad.resize(89);
    char key[32];
    for (long i = 0; i < messages; ++i) {
      std::snprintf(key, sizeof key, "k%09ld", i);
      in << key << '\t' << pad << '\n';
    }
  }
  Wait(Start({Tool("mq-produce"), "-C", data, "-q", "-t", "T", "--create", "--partitions", "4",
              "-K", "\t"},
             tmp / "in", ""),
       "mq-produce");
  const std::string consume = Tool("mq-consume");
  // The log into the page cache, and the size of its output.
  Wait(Start({consume, "-C", data, "-t", "T", "-e"}, "", tmp / "out"), "mq-consume");
  struct stat out;
  if (::stat((tmp / "out").c_str(), &out) != 0 || out.st_size == 0) bench::Die("stat out");
  ::unlink((tmp / "out").c_str());
  // The warm groups exist and have committed once.
  TimeRun({consume, "-C", data, "-t", "T", "-G", "w", "-e"});
  TimeRun({consume, "-C", data, "-t", "T", "-G", "x", "-e", "--at-most-once"});
  std::vector<double> plain, group, warm, timed, amo, amo_warm;
  for (int run = 0; run < runs; ++run) {
    const std::string n = std::to_string(run);
    plain.push_back(TimeRun({consume, "-C", data, "-t", "T", "-e"}));
    group.push_back(TimeRun({consume, "-C", data, "-t", "T", "-G", "g" + n, "-e"}));
    ResetGroup(data, "w");
    warm.push_back(TimeRun({consume, "-C", data, "-t", "T", "-G", "w", "-e"}));
    ResetGroup(data, "w");
    timed.push_back(
        TimeRun({consume, "-C", data, "-t", "T", "-G", "w", "-e", "--commit-every", "0"}));
    amo.push_back(TimeRun({consume, "-C", data, "-t", "T", "-G", "a" + n, "-e", "--at-most-once"}));
    ResetGroup(data, "x");
    amo_warm.push_back(
        TimeRun({consume, "-C", data, "-t", "T", "-G", "x", "-e", "--at-most-once"}));
  }
  const double p = Median(plain), g = Median(group), w = Median(warm), t = Median(timed),
               a = Median(amo), x = Median(amo_warm);
  const double m = static_cast<double>(messages);
  const std::string base = "plain " + bench::Rate(m / p, "msg");
  bench::Row("mq-consume -G g -e > /dev/null (new group)", bench::Rate(m / g, "msg"), base, p / g,
             ">= 0.9");
  bench::Row("mq-consume -G g -e > /dev/null (warm group)", bench::Rate(m / w, "msg"), base, p / w,
             ">= 0.9");
  bench::Row("  the same, --commit-every 0", bench::Rate(m / t, "msg"), base, p / t, "");
  bench::Row("mq-consume -G g -e --at-most-once (new)", bench::Rate(m / a, "msg"), base, p / a,
             ">= 0.3");
  bench::Row("mq-consume -G g -e --at-most-once (warm)", bench::Rate(m / x, "msg"), base, p / x,
             ">= 0.3");
  if (commits <= 0) return;
  const double sync = FdatasyncSeconds(tmp, commits);
  const double durable = CommitSeconds(data, "commit-durable", mq::CommitSync::kDurable, commits);
  const double atomic = CommitSeconds(data, "commit-atomic", mq::CommitSync::kAtomic, commits);
  const std::string fsync_base = "fdatasync " + Ms(sync);
  bench::Row("commit, durable (at most once)", Ms(durable), fsync_base, durable / sync,
             "1 fdatasync");
  bench::Row("commit, atomic (at least once)", Ms(atomic), fsync_base, atomic / sync,
             "1 fdatasync");
  // At most once: one durable commit per 1 MiB of output.
  const double per_write = static_cast<double>(1 << 20) / (static_cast<double>(out.st_size) / m);
  bench::Row("at-most-once ceiling: 1 MiB write / commit", bench::Rate(per_write / durable, "msg"),
             base, (per_write / durable) / (m / p), "");
}

// Lines from the FIFO `fd` until `deadline` (bench::Now() seconds): each
// complete line, with the time it was read, goes to `on_line`, which returns
// true to stop.
template <typename F>
bool ReadLines(int fd, std::string& buf, double deadline, F on_line) {
  while (bench::Now() < deadline) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (on_line(line, bench::Now())) return true;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    char chunk[4096];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) buf.append(chunk, static_cast<size_t>(n));
  }
  return false;
}

void Takeover(const bench::ScratchDir& tmp, const std::string& data, int takeovers) {
  const std::string fifo = tmp / "handled";
  if (::mkfifo(fifo.c_str(), 0600) != 0) bench::Die("mkfifo");
  // Read-write: never an end of file, and opening does not wait for a writer.
  const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) bench::Die("open " + fifo);
  {
    std::ofstream in(tmp / "backlog");
    for (int i = 0; i < 20000; ++i) in << "k" << i << "\tv" << i << '\n';
  }
  Wait(Start({Tool("mq-produce"), "-C", data, "-q", "-t", "F", "--create", "--partitions", "2",
              "-K", "\t"},
             tmp / "backlog", ""),
       "mq-produce");
  std::vector<double> took, gaps;
  for (int run = 0; run < takeovers; ++run) {
    const std::string group = "t" + std::to_string(run);
    auto member = [&](const std::string& id) {
      return Start({Tool("mq-consume"), "-C", data, "-t", "F", "-G", group, "--member-id", id, "-q",
                    "--exec", "sh", "-c", "echo \"" + id + " $MQ_PARTITION\" >" + fifo},
                   "", "/dev/null");
    };
    const pid_t a = member("a");
    const pid_t b = member("b");
    // Each member at work on a partition of its own: the last 3 runs of
    // each on one partition, and not the same one.
    std::string buf;
    std::vector<std::string> last_a, last_b;
    std::vector<double> b_times;
    auto settled = [&](const std::vector<std::string>& v) {
      return v.size() >= 3 && v[v.size() - 1] == v[v.size() - 2] &&
             v[v.size() - 2] == v[v.size() - 3];
    };
    std::string pb;
    bool ok = ReadLines(fd, buf, bench::Now() + 30, [&](const std::string& line, double at) {
      if (line.size() < 3) return false;
      (line[0] == 'a' ? last_a : last_b).push_back(line.substr(2));
      if (line[0] == 'b') b_times.push_back(at);
      if (settled(last_a) && settled(last_b) && last_a.back() != last_b.back() &&
          b_times.size() >= 6) {
        pb = last_b.back();
        return true;
      }
      return false;
    });
    if (!ok) bench::Die("the members did not share the partitions within 30 s");
    for (size_t i = b_times.size() - 3; i < b_times.size(); ++i)
      gaps.push_back(b_times[i] - b_times[i - 1]);
    ::kill(b, SIGKILL);
    const double killed = bench::Now();
    ::waitpid(b, nullptr, 0);
    double handled = 0;
    ok = ReadLines(fd, buf, killed + 30, [&](const std::string& line, double at) {
      if (line == "a " + pb) {
        handled = at;
        return true;
      }
      return false;
    });
    if (!ok) bench::Die("a did not handle b's partition within 30 s of the kill");
    took.push_back(handled - killed);
    ::kill(a, SIGTERM);
    ::waitpid(a, nullptr, 0);
    // What a's last handler wrote goes with this run.
    ReadLines(fd, buf, bench::Now() + 0.05, [](const std::string&, double) { return false; });
    buf.clear();
  }
  ::close(fd);
  const double median = Median(took);
  char measured[64];
  std::snprintf(measured, sizeof measured, "%.0f ms (max %.0f)", median * 1e3,
                *std::max_element(took.begin(), took.end()) * 1e3);
  char base[64];
  std::snprintf(base, sizeof base, "handler run %.1f ms", Median(gaps) * 1e3);
  bench::Row("takeover: SIGKILL to survivor's handler", measured, base, median / Median(gaps),
             "< 200 ms");
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("MQ_BIN");
  bin_dir = bench::Flag(argc, argv, "bin", env ? env : "build");
  if (::access(Tool("mq-consume").c_str(), X_OK) != 0 ||
      ::access(Tool("mq-produce").c_str(), X_OK) != 0)
    bench::Die("no " + Tool("mq-consume") + " or mq-produce (set MQ_BIN or --bin)");
  const long messages = std::stol(bench::Flag(argc, argv, "messages", "2000000"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "5"));
  const int takeovers = std::stoi(bench::Flag(argc, argv, "takeovers", "10"));
  const int commits = std::stoi(bench::Flag(argc, argv, "commits", "50"));
  ::signal(SIGPIPE, SIG_IGN);
  bench::ScratchDir tmp;
  const std::string data = tmp / "data";
  if (messages > 0 && runs > 0) Throughput(tmp, data, messages, runs, commits);
  if (takeovers > 0) Takeover(tmp, data, takeovers);
  return 0;
}
