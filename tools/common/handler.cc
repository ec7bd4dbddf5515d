#include "handler.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "cli.h"
#include "envelope.h"

extern char** environ;

namespace mq::handler {
namespace {

// Longest a wait goes without looking at the interrupt flag.
constexpr int kCheckMs = 100;
// Stack of the cloned child until it execs (it runs a few system calls).
constexpr size_t kChildStackBytes = 64 * 1024;

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int64_t NowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// What the child (sharing our memory until it execs, CLONE_VFORK) needs.
// It only makes system calls: no allocation, no locks.
struct ChildArgs {
  char* const* argv;
  char* const* envp;
  int stdin_fd;   // read end of the input pipe
  int stderr_fd;  // write end of the error pipe
  int stdout_fd;  // write end of the output pipe, or -1: mq's own
  int inherit_fd;
  pid_t parent;
  sigset_t mask;         // the parent's signal mask, restored before exec
  volatile int err = 0;  // errno of the step that failed; exec did not happen
};

// Puts `fd` at `target` without FD_CLOEXEC.
bool MoveTo(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

int ChildMain(void* p) {
  auto* a = static_cast<ChildArgs*>(p);
  // Handlers set in mq would run here, in mq's memory: back to defaults. A
  // SIGPIPE mq ignores is the default again for the handler.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa;
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    if (sa.sa_handler == SIG_DFL || (sa.sa_handler == SIG_IGN && sig != SIGPIPE)) continue;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    ::sigaction(sig, &sa, nullptr);
  }
  int step_ok = ::setpgid(0, 0) == 0 && ::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0;
  if (!step_ok) {
    a->err = errno;
    ::_exit(127);
  }
  // The parent died before PDEATHSIG was armed: nobody would kill us.
  if (::getppid() != a->parent) ::_exit(127);
  if (!MoveTo(a->stdin_fd, 0) || !MoveTo(a->stderr_fd, 2) ||
      (a->stdout_fd >= 0 && !MoveTo(a->stdout_fd, 1))) {
    a->err = errno;
    ::_exit(127);
  }
  // Nothing of mq's reaches the handler but 0, 1, 2 and the named fd.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (a->inherit_fd >= 3 && ::fcntl(a->inherit_fd, F_SETFD, 0) != 0) {
    a->err = errno;
    ::_exit(127);
  }
  ::sigprocmask(SIG_SETMASK, &a->mask, nullptr);
  ::execvpe(a->argv[0], a->argv, a->envp);
  a->err = errno != 0 ? errno : ENOEXEC;
  ::_exit(127);
}

// write(2) that reports a closed pipe as EPIPE without raising SIGPIPE,
// whatever the caller's disposition of SIGPIPE: the signal is blocked
// around the write and, if the write raised it, taken off the thread again.
ssize_t WriteNoSigpipe(int fd, std::string_view data) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  ssize_t n = ::write(fd, data.data(), data.size());
  int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    timespec zero{0, 0};
    while (::sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return n;
}

}  // namespace

// ---- Outcome ----------------------------------------------------------------

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev) return fmt::format("SIG{}", abbrev);
  return fmt::format("SIG{}", sig);
}

std::string Outcome::Describe() const {
  switch (kind) {
    case Kind::kExited:
      return fmt::format("exit status {}", code);
    case Kind::kSignaled:
      return fmt::format("killed by {}", SignalName(code));
    case Kind::kExecFailed:
      return fmt::format("cannot run: {}", std::strerror(code));
    case Kind::kInterrupted:
      return "interrupted";
    case Kind::kTimedOut:
      return "still running at the deadline: killed";
    case Kind::kOutputTooLarge:
      return "standard output too large";
  }
  return "?";
}

std::string Outcome::StatusText() const {
  switch (kind) {
    case Kind::kExited:
      return std::to_string(code);
    case Kind::kSignaled:
      return SignalName(code);
    case Kind::kExecFailed:
      return code == ENOENT ? "127" : "126";  // as a shell says
    case Kind::kInterrupted:
      return "interrupted";
    case Kind::kTimedOut:
      return "timeout";
    case Kind::kOutputTooLarge:
      return "output-too-large";
  }
  return "?";
}

// ---- Tail -------------------------------------------------------------------

void Tail::Add(std::string_view chunk) {
  buf_.append(chunk);
  if (buf_.size() > 2 * kTailBytes) buf_.erase(0, buf_.size() - kTailBytes);
}

std::string Tail::Take() {
  std::string s = std::move(buf_);
  buf_.clear();
  if (s.size() > kTailBytes) s.erase(0, s.size() - kTailBytes);
  // The last kTailLines lines; a final newline ends the last line.
  size_t end = s.size();
  if (end > 0 && s[end - 1] == '\n') --end;
  size_t lines = 0, pos = end;
  while (pos > 0) {
    size_t nl = s.rfind('\n', pos - 1);
    if (nl == std::string::npos) break;
    if (++lines == kTailLines) {
      s.erase(0, nl + 1);
      break;
    }
    pos = nl;
  }
  return s;
}

// ---- Process ----------------------------------------------------------------

Process::Process(Process&& o) noexcept { *this = std::move(o); }

Process& Process::operator=(Process&& o) noexcept {
  if (this == &o) return *this;
  Close();
  pid_ = std::exchange(o.pid_, -1);
  stdin_fd_ = std::exchange(o.stdin_fd_, -1);
  stderr_fd_ = std::exchange(o.stderr_fd_, -1);
  stdout_fd_ = std::exchange(o.stdout_fd_, -1);
  max_output_ = o.max_output_;
  pidfd_ = std::exchange(o.pidfd_, -1);
  exec_errno_ = o.exec_errno_;
  exited_ = o.exited_;
  wait_status_ = o.wait_status_;
  return *this;
}

Process::~Process() { Close(); }

void Process::Close() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    Reap();
  }
  CloseFd(stdin_fd_);
  CloseFd(stderr_fd_);
  CloseFd(stdout_fd_);
  CloseFd(pidfd_);
}

namespace {

// The handler's input and error pipes, and with `capture_stdout` its
// output pipe (else out stays {-1, -1}); none left open on a failure.
Status MakePipes(bool capture_stdout, int in[2], int err[2], int out[2]) {
  if (::pipe2(in, O_CLOEXEC) != 0) return ErrnoStatus("handler: pipe", errno);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(in[0]);
    ::close(in[1]);
    return ErrnoStatus("handler: pipe", e);
  }
  if (capture_stdout && ::pipe2(out, O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : {in[0], in[1], err[0], err[1]}) ::close(fd);
    return ErrnoStatus("handler: pipe", e);
  }
  return Status::Ok();
}

}  // namespace

Result<Process> Process::Spawn(const Spec& spec) {
  if (spec.argv.empty()) return Status(Code::kInvalidArgument, "handler: empty command");
  if (spec.inherit_fd >= 0 && spec.inherit_fd < 3)
    return Status(Code::kInvalidArgument, "handler: the inherited descriptor must be 3 or above");
  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in[2], err[2], out[2] = {-1, -1};
  MQ_RETURN_IF_ERROR(MakePipes(spec.capture_stdout, in, err, out));
  Process p;
  p.stdin_fd_ = in[1];
  p.stderr_fd_ = err[0];
  p.stdout_fd_ = out[0];
  p.max_output_ = spec.max_output_bytes;
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  if (out[0] >= 0) ::fcntl(out[0], F_SETFL, O_NONBLOCK);

  auto args = std::make_unique<ChildArgs>();
  args->argv = argv.data();
  args->envp = envp.data();
  args->stdin_fd = in[0];
  args->stderr_fd = err[1];
  args->stdout_fd = out[1];
  args->inherit_fd = spec.inherit_fd;
  args->parent = ::getpid();
  std::unique_ptr<char[]> stack(new char[kChildStackBytes]);

  // No signal handler of ours may run in the child before it resets them.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &args->mask);
  pid_t pid = ::clone(ChildMain, stack.get() + kChildStackBytes, CLONE_VM | CLONE_VFORK | SIGCHLD,
                      args.get());
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &args->mask, nullptr);
  ::close(in[0]);
  ::close(err[1]);
  if (out[1] >= 0) ::close(out[1]);
  if (pid < 0) return ErrnoStatus("handler: clone", clone_errno);
  p.pid_ = pid;
  p.exec_errno_ = args->err;
  // Set here too, in case the child has not (it has: CLONE_VFORK waits for
  // its exec), harmless when already done (EACCES after exec).
  ::setpgid(pid, pid);
  p.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (p.exec_errno_ != 0) {
    // The child exited without running the command: nothing to feed.
    CloseFd(p.stdin_fd_);
  }
  return p;
}

// True once the handler has exited; it stays unreaped (a zombie keeps its
// pid and so its process group id from being reused).
bool Process::WaitExit(int timeout_ms) {
  if (exited_) return true;
  if (pid_ <= 0) return true;
  if (pidfd_ >= 0 && timeout_ms > 0) {
    pollfd p{pidfd_, POLLIN, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r <= 0) return false;
  }
  siginfo_t info{};
  int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  if (r == 0 && info.si_pid == pid_) {
    exited_ = true;
    return true;
  }
  if (r != 0 && errno == ECHILD) {  // reaped by someone else: nothing left to wait for
    exited_ = true;
    return true;
  }
  if (pidfd_ < 0 && timeout_ms > 0)
    ::usleep(static_cast<useconds_t>(std::min(timeout_ms, 10)) * 1000);
  return false;
}

void Process::Reap() {
  if (pid_ <= 0) return;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  wait_status_ = status;
  pid_ = -1;
}

void Process::KillGroup(int grace_ms) {
  if (pid_ <= 0) return;
  if (!WaitExit(0)) {
    ::kill(-pid_, SIGTERM);
    int64_t deadline = NowMs() + grace_ms;
    char buf[4096];
    while (!WaitExit(0)) {
      int64_t left = deadline - NowMs();
      if (left <= 0) break;
      // Keep its standard error flowing: a handler blocked writing to it
      // could not exit.
      pollfd fds[2];
      nfds_t n = 0;
      if (pidfd_ >= 0) fds[n++] = {pidfd_, POLLIN, 0};
      if (stderr_fd_ >= 0) fds[n++] = {stderr_fd_, POLLIN, 0};
      int slice = pidfd_ >= 0 ? kCheckMs : 10;
      int r = ::poll(fds, n, static_cast<int>(std::min<int64_t>(left, slice)));
      if (r > 0 && stderr_fd_ >= 0) {
        ssize_t got = ::read(stderr_fd_, buf, sizeof buf);
        if (got > 0)
          cli::WriteStderr(std::string_view(buf, static_cast<size_t>(got)));
        else if (got == 0)
          CloseFd(stderr_fd_);
      }
    }
  }
  ::kill(-pid_, SIGKILL);
  Reap();
  CloseFd(stdin_fd_);
}

namespace {

// A handler's pipes as Communicate works them: the input fed to its
// standard input, its standard error copied to ours (its tail kept), its
// standard output collected up to a limit. A pipe at its end is closed
// (its descriptor set to -1).
class Pipes {
 public:
  Pipes(std::string_view input, int& stdin_fd, int& stderr_fd, int& stdout_fd, size_t max_output,
        std::string* output)
      : input_(input),
        stdin_fd_(stdin_fd),
        stderr_fd_(stderr_fd),
        stdout_fd_(stdout_fd),
        max_output_(max_output),
        output_(output) {}

  // Writes what the input pipe takes now; closes it after the last byte.
  void Feed() {
    while (stdin_fd_ >= 0 && written_ < input_.size()) {
      ssize_t n = WriteNoSigpipe(stdin_fd_, input_.substr(written_));
      if (n > 0) {
        written_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      CloseFd(stdin_fd_);  // EPIPE: the handler does not read (more); not a failure
      return;
    }
    if (written_ >= input_.size()) CloseFd(stdin_fd_);
  }

  // Copies its standard error: one read, or until there is nothing more.
  void Drain(bool until_eagain) {
    while (stderr_fd_ >= 0) {
      ssize_t got = ::read(stderr_fd_, buf_, sizeof buf_);
      if (got > 0) {
        std::string_view chunk(buf_, static_cast<size_t>(got));
        cli::WriteStderr(chunk);
        tail_.Add(chunk);
        if (!until_eagain) return;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) CloseFd(stderr_fd_);
      return;  // EAGAIN: nothing more now
    }
  }

  // Collects its standard output: one read, or until there is nothing more.
  void TakeOutput(bool until_eagain) {
    while (stdout_fd_ >= 0) {
      ssize_t got = ::read(stdout_fd_, buf_, sizeof buf_);
      if (got > 0) {
        // Past the limit it is still read (a handler blocked writing could
        // not exit), and dropped.
        if (output_->size() + static_cast<size_t>(got) > max_output_)
          overflow_ = true;
        else
          output_->append(buf_, static_cast<size_t>(got));
        if (!until_eagain) return;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) CloseFd(stdout_fd_);
      return;
    }
  }

  // Waits (a slice) for a pipe to be ready or the handler (`pidfd`, or -1)
  // to exit, and works the ready pipes.
  Status Poll(int pidfd) {
    pollfd fds[4];
    nfds_t n = 0;
    int in_i = -1, err_i = -1, out_i = -1;
    if (stdin_fd_ >= 0) {
      in_i = static_cast<int>(n);
      fds[n++] = {stdin_fd_, POLLOUT, 0};
    }
    if (stderr_fd_ >= 0) {
      err_i = static_cast<int>(n);
      fds[n++] = {stderr_fd_, POLLIN, 0};
    }
    if (stdout_fd_ >= 0) {
      out_i = static_cast<int>(n);
      fds[n++] = {stdout_fd_, POLLIN, 0};
    }
    if (pidfd >= 0) fds[n++] = {pidfd, POLLIN, 0};
    int r = ::poll(fds, n, pidfd >= 0 ? kCheckMs : 10);
    if (r < 0 && errno != EINTR) return ErrnoStatus("handler: poll", errno);
    if (r <= 0) return Status::Ok();
    if (in_i >= 0 && fds[in_i].revents) {
      if (fds[in_i].revents & (POLLERR | POLLHUP))
        CloseFd(stdin_fd_);
      else
        Feed();
    }
    if (err_i >= 0 && fds[err_i].revents) Drain(false);
    if (out_i >= 0 && fds[out_i].revents) TakeOutput(true);
    return Status::Ok();
  }

  std::string TakeTail() { return tail_.Take(); }
  bool overflow() const { return overflow_; }

 private:
  std::string_view input_;
  size_t written_ = 0;
  int& stdin_fd_;
  int& stderr_fd_;
  int& stdout_fd_;
  size_t max_output_;
  std::string* output_;
  bool overflow_ = false;
  Tail tail_;
  char buf_[16384];
};

// How a handler that exited ended: it could not be run (`exec_errno`),
// a signal, or its exit code (0 with too much output: kOutputTooLarge).
void SetExit(int exec_errno, int wait_status, bool output_overflow, Outcome* out) {
  if (exec_errno != 0) {
    out->kind = Outcome::Kind::kExecFailed;
    out->code = exec_errno;
  } else if (WIFSIGNALED(wait_status)) {
    out->kind = Outcome::Kind::kSignaled;
    out->code = WTERMSIG(wait_status);
  } else {
    out->kind = Outcome::Kind::kExited;
    out->code = WEXITSTATUS(wait_status);
    if (out->code == 0 && output_overflow) out->kind = Outcome::Kind::kOutputTooLarge;
  }
}

}  // namespace

Result<Outcome> Process::Communicate(std::string_view input,
                                     const volatile std::sig_atomic_t* interrupted, int grace_ms,
                                     int64_t timeout_ms, const std::atomic<bool>* cancel) {
  Outcome out;
  const int64_t deadline = timeout_ms > 0 ? NowMs() + timeout_ms : 0;
  Pipes pipes(input, stdin_fd_, stderr_fd_, stdout_fd_, max_output_, &out.output);
  if (input.size() > (64u << 10) && stdin_fd_ >= 0) {
    ::fcntl(stdin_fd_, F_SETPIPE_SZ, 1 << 20);  // fewer wake-ups; best effort
  }
  pipes.Feed();
  bool interrupted_now = false, timed_out = false;
  while (true) {
    // An exit is looked at first: a handler that ended by itself ran to its
    // end, and its outcome stands even when an interrupt, a cancel or its
    // deadline came meanwhile (its message is not handed out again).
    if (WaitExit(0)) break;
    if ((interrupted && *interrupted) || (cancel && cancel->load())) {
      interrupted_now = true;
      break;
    }
    if (deadline != 0 && NowMs() >= deadline) {
      timed_out = true;
      break;
    }
    MQ_RETURN_IF_ERROR(pipes.Poll(pidfd_));
  }
  if (interrupted_now || timed_out) {
    KillGroup(grace_ms);
    // Interrupted, a handler that then exited 0 by itself within the grace
    // (one that finishes its work when asked to stop) ran to its end too:
    // its outcome stands, and its message is not handed out again.
    const bool finished = interrupted_now && exec_errno_ == 0 && WIFEXITED(wait_status_) &&
                          WEXITSTATUS(wait_status_) == 0;
    if (!finished) {
      pipes.Drain(true);
      out.kind = timed_out ? Outcome::Kind::kTimedOut : Outcome::Kind::kInterrupted;
      out.stderr_tail = pipes.TakeTail();
      out.output.clear();
      CloseFd(stderr_fd_);
      CloseFd(stdout_fd_);
      return out;
    }
  }
  // Exited: take what it wrote, then kill what it left behind in its group
  // while it is still a zombie, then reap it (KillGroup did both already).
  pipes.Drain(true);
  pipes.TakeOutput(true);
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    Reap();
  }
  CloseFd(stdin_fd_);
  CloseFd(stderr_fd_);
  CloseFd(stdout_fd_);
  out.stderr_tail = pipes.TakeTail();
  SetExit(exec_errno_, wait_status_, pipes.overflow(), &out);
  return out;
}

Result<Outcome> Run(const Spec& spec, std::string_view input,
                    const volatile std::sig_atomic_t* interrupted, int grace_ms, int64_t timeout_ms,
                    const std::atomic<bool>* cancel) {
  auto p = Process::Spawn(spec);
  if (!p) return p.error();
  return p->Communicate(input, interrupted, grace_ms, timeout_ms, cancel);
}

// ---- environment ------------------------------------------------------------

const std::vector<std::string_view> kMessageVariables = {
    "MQ_TOPIC",     "MQ_PARTITION", "MQ_OFFSET",  "MQ_LAST_OFFSET", "MQ_COUNT",     "MQ_MESSAGE_ID",
    "MQ_TIMESTAMP", "MQ_KEY",       "MQ_KEY_B64", "MQ_HEADERS",     "MQ_VALUE_NULL"};

std::vector<std::string> BaseEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    if (std::find(kMessageVariables.begin(), kMessageVariables.end(), name) !=
        kMessageVariables.end())
      continue;
    env.emplace_back(entry);
  }
  return env;
}

std::string MessageId(std::string_view topic, int32_t partition, int64_t offset) {
  return fmt::format("{}/{}/{}", topic, partition, offset);
}

void AppendMessageEnv(std::vector<std::string>* env, const MessageInfo& m) {
  env->push_back(fmt::format("MQ_TOPIC={}", m.topic));
  env->push_back(fmt::format("MQ_PARTITION={}", m.partition));
  env->push_back(fmt::format("MQ_OFFSET={}", m.offset));
  env->push_back(fmt::format("MQ_MESSAGE_ID={}", MessageId(m.topic, m.partition, m.offset)));
  env->push_back(fmt::format("MQ_TIMESTAMP={}", m.timestamp));
  if (m.key) {
    std::string_view text = AsText(*m.key);
    if (text.find('\0') == std::string_view::npos && envelope::IsUtf8(text)) {
      env->push_back(fmt::format("MQ_KEY={}", text));
    } else {
      fmt::memory_buffer b;
      fmt::format_to(std::back_inserter(b), "MQ_KEY_B64=");
      envelope::AppendBase64(b, *m.key);
      env->emplace_back(b.data(), b.size());
    }
  }
  fmt::memory_buffer h;
  fmt::format_to(std::back_inserter(h), "MQ_HEADERS=");
  envelope::AppendHeadersJson(h, m.headers);
  env->emplace_back(h.data(), h.size());
  if (m.null_value) env->push_back("MQ_VALUE_NULL=1");
}

void AppendBatchEnv(std::vector<std::string>* env, std::string_view topic, int32_t partition,
                    int64_t first_offset, int64_t last_offset, size_t count) {
  env->push_back(fmt::format("MQ_TOPIC={}", topic));
  env->push_back(fmt::format("MQ_PARTITION={}", partition));
  env->push_back(fmt::format("MQ_OFFSET={}", first_offset));
  env->push_back(fmt::format("MQ_LAST_OFFSET={}", last_offset));
  env->push_back(fmt::format("MQ_COUNT={}", count));
  env->push_back(fmt::format("MQ_MESSAGE_ID={}", MessageId(topic, partition, first_offset)));
}

}  // namespace mq::handler
