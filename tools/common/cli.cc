#include "cli.h"

#include <malloc.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>

#include <CLI/CLI.hpp>

#include "cli_usage.h"
#include "exit_code.h"
#include "mq/file.h"
#include "mq/version.h"

namespace mq::cli {
namespace {
std::string& ProgramNameStorage() {
  static std::string name = "mq";
  return name;
}
}  // namespace

void SetProgramName(std::string name) { ProgramNameStorage() = std::move(name); }
const std::string& ProgramName() { return ProgramNameStorage(); }

void WriteStderr(std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

void Warn(std::string_view message) { Eprint("{}: {}\n", ProgramName(), message); }

int Fail(const Status& status) {
  Warn(status.message());
  return ExitCode(status);
}

CLI::Option* AddDirOption(CLI::App& app, std::string* dir, bool required) {
  auto* opt = app.add_option("-C,--dir", *dir, "data directory (env MQ_DIR)")->envname("MQ_DIR");
  if (required) opt->required();
  return opt;
}

void AddVersionFlag(CLI::App& app) {
  app.set_version_flag("-V,--version", fmt::format("{} {}", ProgramName(), MQ_VERSION));
}

void UseUsage(CLI::App& app, const char* usage) {
  app.formatter(std::make_shared<UsageFormatter>(usage));
}

int UsageError(const char* usage, std::string_view message) {
  Warn(message);
  std::string_view text = usage;
  Eprint("{}Run with --help for more information.\n", text.substr(0, text.find('\n') + 1));
  return kExitUsage;
}

namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The option of `app` nearest to the unknown `arg` ("--partiton" ->
// "--partitions"), if one is close enough to be what was meant.
std::string Nearest(const CLI::App& app, std::string_view arg) {
  if (arg.size() < 3 || arg.substr(0, 2) != "--") return "";
  std::string_view name = arg.substr(0, arg.find('='));
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) {
      size_t d = EditDistance(name, "--" + l);
      if (d < best_distance) {
        best_distance = d;
        best = "--" + l;
      }
    }
  }
  return best;
}

// CLI11's message, said the way the tools' other errors are.
std::string Explain(const CLI::App& app, const CLI::ParseError& e) {
  std::string what = e.what();
  if (dynamic_cast<const CLI::RequiredError*>(&e) && what.find("--dir") != std::string::npos)
    return "no data directory: give -C DIR (--dir DIR), or set MQ_DIR";
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // "The following argument(s) was/were not expected: A B"
    std::istringstream args(
        what.substr(what.find(": ") == std::string::npos ? what.size() : what.find(": ") + 2));
    for (std::string arg; args >> arg;) {
      std::string near = Nearest(app, arg);
      if (!near.empty()) return fmt::format("unknown option {} (did you mean {}?)", arg, near);
    }
  }
  return what;
}

}  // namespace

int Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      // --help or --version, printed to stdout through Output: a closed
      // pipe ends quietly, another write error is exit 74, never an abort.
      std::ostringstream text;
      app.exit(e, text, text);
      Output out;
      out.Write(text.str());
      return out.FinishExitCode();
    }
    Eprint("{}: {}\n", ProgramName(), Explain(app, e));
    Eprint("{}", app.help("", CLI::AppFormatMode::Normal).substr(0, app.help().find('\n') + 1));
    Eprint("Run with --help for more information.\n");
    return kExitUsage;
  }
  return -1;
}

Output::Output(int fd, size_t buffer_bytes) : fd_(fd), limit_(buffer_bytes) {}
Output::~Output() {
  Flush();
  if (nowait_fd_ >= 0) ::close(nowait_fd_);
}

void Output::Close() {
  if (nowait_fd_ >= 0) ::close(nowait_fd_);
  nowait_fd_ = -1;
  ::close(fd_);
  broken_ = true;
}

void Output::Write(std::span<const std::byte> bytes) {
  Write(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

void Output::Write(std::string_view text) {
  buf_.append(text.data(), text.data() + text.size());
  if (buf_.size() >= limit_) Flush();
}

namespace {
int64_t MonotonicMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
}  // namespace

ssize_t Output::WriteNoWait(const char* p, size_t n) {
  if (nowait_ == NoWait::kUnknown) {
    nowait_ = NoWait::kPlain;
    struct stat st;
    if (::fstat(fd_, &st) == 0 && S_ISSOCK(st.st_mode)) {
      nowait_ = NoWait::kSend;
    } else if (::fstat(fd_, &st) == 0 && S_ISFIFO(st.st_mode)) {
      // Only a pipe or a socket waits for its reader (RWF_NOWAIT on a
      // regular file may refuse a write that merely allocates blocks).
      nowait_fd_ =
          ::open(fmt::format("/proc/self/fd/{}", fd_).c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      nowait_ = nowait_fd_ >= 0 ? NoWait::kReopened : NoWait::kRwf;
    }
  }
  switch (nowait_) {
    case NoWait::kReopened:
      return ::write(nowait_fd_, p, n);
    case NoWait::kSend:
      return ::send(fd_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    case NoWait::kRwf: {
      iovec v{const_cast<char*>(p), n};
      const ssize_t w = ::pwritev2(fd_, &v, 1, -1, RWF_NOWAIT);
      if (w >= 0 || (errno != EOPNOTSUPP && errno != EINVAL)) return w;
      nowait_ = NoWait::kPlain;  // not on this kernel: blocking writes
      return ::write(fd_, p, n);
    }
    default:
      return ::write(fd_, p, n);
  }
}

bool Output::Flush() {
  if (broken_ || failed_ || stalled_) {
    buf_.clear();
    records_pending_ = 0;
    return false;
  }
  if (buf_.size() != 0 && before_write_ && !before_write_()) {
    buf_.clear();
    records_pending_ = 0;
    return false;
  }
  const char* p = buf_.data();
  size_t left = buf_.size();
  const int64_t deadline = timeout_ms_ > 0 ? MonotonicMs() + timeout_ms_ : 0;
  while (left > 0) {
    ssize_t n = deadline > 0 ? WriteNoWait(p, left) : ::write(fd_, p, left);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && deadline > 0) {
      const int64_t wait = deadline - MonotonicMs();
      if (wait <= 0) {
        stalled_ = true;
        stalled_partway_ = left < buf_.size();
        buf_.clear();
        records_pending_ = 0;
        return false;
      }
      pollfd pf{fd_, POLLOUT, 0};
      (void)::poll(&pf, 1, static_cast<int>(std::min<int64_t>(wait, INT_MAX)));
      continue;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE)
        broken_ = true;
      else {
        failed_ = true;
        errno_ = errno;
      }
      buf_.clear();
      records_pending_ = 0;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (buf_.size() != 0) ++flushes_;
  buf_.clear();
  records_written_ += records_pending_;
  records_pending_ = 0;
  return true;
}

int Output::FinishExitCode() {
  Flush();
  if (failed_) {
    Warn(fmt::format("write error on output: {}", std::strerror(errno_)));
    return kExitIoErr;
  }
  return kExitOk;
}

void IgnoreSigpipe() { std::signal(SIGPIPE, SIG_IGN); }

bool OutputClosed(int fd) {
  pollfd p{fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

void HoldStandardDescriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free number is `fd`: the ones below it are open by now.
    int held = ::open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
    if (held >= 0 && held != fd) ::close(held);
  }
}

namespace {
// Descriptors open now (the listing's own one excluded); a guess without /proc.
size_t DescriptorsInUse() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 64;
  size_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;
}
}  // namespace

void RaiseOpenFileLimit() {
  rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
}

size_t OpenPartitionBudget(size_t per_partition, size_t reserved) {
  RaiseOpenFileLimit();
  rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1;
  reserved += DescriptorsInUse() + kSpareDescriptors;
  if (lim.rlim_cur == RLIM_INFINITY) return kMaxOpenPartitions;
  const size_t limit = static_cast<size_t>(lim.rlim_cur);
  if (limit <= reserved + per_partition) return 1;
  return std::clamp<size_t>((limit - reserved) / per_partition, 1, kMaxOpenPartitions);
}

void ReserveDescriptors(size_t n) {
  rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur != RLIM_INFINITY) n = std::min<size_t>(n, static_cast<size_t>(lim.rlim_cur));
  n = std::min<size_t>(n, INT_MAX);
  if (n <= 64) return;  // the table every process starts with
  UniqueFd any(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!any) return;
  // A duplicate at the highest number grows the table to it; closing the
  // duplicate leaves the table as grown.
  const int high = ::fcntl(any.get(), F_DUPFD_CLOEXEC, static_cast<int>(n) - 1);
  if (high >= 0) ::close(high);
}

void PrepareHeap(size_t bytes) {
  bytes = std::min(bytes, kMaxPreparedHeap);
  // Allocations below the mmap threshold come from the heap (not from
  // mappings of their own, faulted anew and unmapped at free), and the heap
  // is not given back below twice `bytes`.
  ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMaxPreparedHeap + (1 << 20)));
  ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * bytes));
  void* grow = std::malloc(bytes);
  asm volatile("" : : "g"(grow) : "memory");  // not elided with the free
  std::free(grow);
}

int RunGuarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    Warn("out of memory (see MEMORY in the manual)");
    return kExitOsErr;
  }
}

}  // namespace mq::cli
