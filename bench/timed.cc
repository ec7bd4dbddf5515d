// bench-timed FILE CMD...: runs CMD and appends "wall_s cpu_s maxrss_kb" to
// FILE, then exits with CMD's status. The shell benchmarks' timer
// (run_timed in bench/lib.bash): the wall time is taken here, from the
// spawn to the exit, to the microsecond and with no wrapper process in the
// interval (a shell timing /usr/bin/time counts its start too, some 6 ms a
// run on the machines mq is measured on, which pulls every ratio towards
// 1); the CPU time (user + system) and the peak RSS come from wait4(2).
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench-timed FILE CMD...\n");
    return 64;
  }
  timespec t0{}, t1{};
  ::clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[2], nullptr, nullptr, argv + 2, environ);
  if (rc != 0) {
    std::fprintf(stderr, "bench-timed: %s: %s\n", argv[2], std::strerror(rc));
    return 127;
  }
  int status = 0;
  rusage ru{};
  while (::wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      std::perror("bench-timed: wait4");
      return 71;
    }
  }
  ::clock_gettime(CLOCK_MONOTONIC, &t1);
  const double wall = static_cast<double>(t1.tv_sec - t0.tv_sec) +
                      static_cast<double>(t1.tv_nsec - t0.tv_nsec) / 1e9;
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::FILE* f = std::fopen(argv[1], "a");
  if (f == nullptr || std::fprintf(f, "%.4f %.3f %ld\n", wall, cpu, ru.ru_maxrss) < 0 ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "bench-timed: %s: %s\n", argv[1], std::strerror(errno));
    return 74;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
