// The throughput of a pipe, the baseline replication over a pipe (or over
// ssh) is measured against.
//
//   bench-pipe [--bytes=1G] [--runs=5] [--through=CMD] [--raw]
//
// A writer process writes --bytes in 1 MiB blocks from memory into a pipe
// whose capacity is set to 1 MiB (F_SETPIPE_SZ); this process reads them in
// 1 MiB blocks and discards them. With --through=CMD the bytes go through
// `sh -c CMD` instead (e.g. "ssh localhost-mq cat"): the writer feeds CMD's
// standard input and this process reads its standard output, both pipes of
// 1 MiB; every byte must come back. Prints the median over --runs of
// bytes per second as a table row, or with --raw as a bare integer.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "bench.h"

namespace {

constexpr size_t kBlock = 1 << 20;
constexpr int kPipeSize = 1 << 20;

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) bench::Die(std::string("pipe2: ") + std::strerror(errno));
  for (int fd : fds) {
    if (::fcntl(fd, F_SETPIPE_SZ, kPipeSize) < kPipeSize) {
      bench::Die(std::string("F_SETPIPE_SZ 1 MiB: ") + std::strerror(errno) +
                 " (see /proc/sys/fs/pipe-max-size)");
    }
  }
  return {fds[0], fds[1]};
}

// Forks a process that writes `bytes` to `fd` in 1 MiB blocks and exits.
pid_t SpawnWriter(int fd, uint64_t bytes, const std::vector<char>& block) {
  const pid_t pid = ::fork();
  if (pid < 0) bench::Die(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) return pid;
  uint64_t left = bytes;
  while (left > 0) {
    const size_t n = left < block.size() ? static_cast<size_t>(left) : block.size();
    size_t done = 0;
    while (done < n) {
      const ssize_t w = ::write(fd, block.data() + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ::_exit(1);
      done += static_cast<size_t>(w);
    }
    left -= n;
  }
  ::_exit(0);
}

// Forks `sh -c command` with stdin and stdout on the given pipe ends.
pid_t SpawnCommand(const std::string& command, int in, int out) {
  const pid_t pid = ::fork();
  if (pid < 0) bench::Die(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) return pid;
  if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0) ::_exit(127);
  ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

uint64_t Drain(int fd) {
  std::vector<char> buf(kBlock);
  uint64_t total = 0;
  while (true) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) bench::Die(std::string("read: ") + std::strerror(errno));
    if (r == 0) return total;
    total += static_cast<uint64_t>(r);
  }
}

void Reap(pid_t pid, const std::string& what) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) bench::Die("waitpid " + what);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bench::Die(what + " failed");
}

// One run: `bytes` from a writer process to this one, straight through one
// pipe or through `command`.
void OneRun(uint64_t bytes, const std::string& command, const std::vector<char>& block) {
  if (command.empty()) {
    Pipe p = MakePipe();
    const pid_t writer = SpawnWriter(p.write, bytes, block);
    ::close(p.write);
    const uint64_t got = Drain(p.read);
    ::close(p.read);
    Reap(writer, "writer");
    if (got != bytes) bench::Die("pipe: short read");
    return;
  }
  Pipe to = MakePipe();
  Pipe from = MakePipe();
  const pid_t child = SpawnCommand(command, to.read, from.write);
  ::close(to.read);
  ::close(from.write);
  const pid_t writer = SpawnWriter(to.write, bytes, block);
  ::close(to.write);
  const uint64_t got = Drain(from.read);
  ::close(from.read);
  Reap(writer, "writer");
  Reap(child, "'" + command + "'");
  if (got != bytes) {
    bench::Die("'" + command + "': " + std::to_string(got) + " bytes back of " +
               std::to_string(bytes));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t bytes = bench::ParseSize(bench::Flag(argc, argv, "bytes", "1G"));
  const int runs = std::stoi(bench::Flag(argc, argv, "runs", "5"));
  const std::string command = bench::Flag(argc, argv, "through", "");
  bool raw = false;
  for (int i = 1; i < argc; ++i) raw = raw || std::string(argv[i]) == "--raw";
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<char> block(kBlock);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + 7);
  const double seconds = bench::MedianSeconds(runs, [&] { OneRun(bytes, command, block); });
  const double rate = static_cast<double>(bytes) / seconds;
  if (raw) {
    std::printf("%.0f\n", rate);
    return 0;
  }
  bench::Row(command.empty() ? "pipe, F_SETPIPE_SZ 1 MiB, 1 MiB blocks" : command,
             bench::Rate(rate, "B"),
             bench::Fixed(seconds, "s") + " median of " + std::to_string(runs), 1.0, "baseline");
  return 0;
}
