// Handler processes (tools/common/handler.h): environment, input, standard
// error, exit status and signals, process groups, PDEATHSIG and the
// descriptors a handler inherits.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "handler.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;
using handler::Outcome;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Sends fd 2 to a file for its lifetime (handlers' standard error is passed
// through to it).
class CaptureStderr {
 public:
  explicit CaptureStderr(const std::string& path) {
    saved_ = ::dup(2);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CaptureStderr() {
    ::dup2(saved_, 2);
    ::close(saved_);
  }

 private:
  int saved_ = -1;
};

handler::Spec Sh(const std::string& script, std::vector<std::string> args = {}) {
  handler::Spec s;
  s.argv = {"/bin/sh", "-c", script, "sh"};
  for (auto& a : args) s.argv.push_back(a);
  s.env = handler::BaseEnvironment();
  return s;
}

Outcome MustRun(const handler::Spec& spec, std::string_view input = {},
                const volatile std::sig_atomic_t* interrupted = nullptr, int grace_ms = 5000) {
  auto r = handler::Run(spec, input, interrupted, grace_ms);
  REQUIRE(r);
  return *r;
}

// NAME=value lines of `env -0` output.
std::map<std::string, std::string> ParseEnv0(const std::string& text) {
  std::map<std::string, std::string> m;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\0', pos);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(pos, end - pos);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) m[entry.substr(0, eq)] = entry.substr(eq + 1);
    pos = end + 1;
  }
  return m;
}

// A process is gone once it is no longer there or a zombie (its parent,
// perhaps init in a container, may not have reaped it yet).
bool Gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// Waits (at most 20 s: never a timing assertion, only a bound on a hang).
bool EventuallyGone(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    if (Gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

pid_t ReadPid(const std::string& path) {
  for (int i = 0; i < 2000; ++i) {
    std::string s = Slurp(path);
    if (!s.empty() && s.back() == '\n') return static_cast<pid_t>(std::stol(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("no pid in " << path);
  return -1;
}

}  // namespace

TEST_CASE("handler: message environment: topic, partition, offset, id, time, headers, text key",
          "[handler]") {
  TempDir tmp;
  std::vector<Header> headers = {{"h1", AsBytes("v\"1")}, {"h2", std::nullopt}};
  handler::Spec spec = Sh("env -0 > \"$1\"", {tmp / "env"});
  handler::MessageInfo m{"orders", 3, 42, 1700000000123, AsBytes("k\xc3\xa9y"), false, headers};
  handler::AppendMessageEnv(&spec.env, m);
  REQUIRE(MustRun(spec).ok());
  auto env = ParseEnv0(Slurp(tmp / "env"));
  CHECK(env["MQ_TOPIC"] == "orders");
  CHECK(env["MQ_PARTITION"] == "3");
  CHECK(env["MQ_OFFSET"] == "42");
  CHECK(env["MQ_MESSAGE_ID"] == "orders/3/42");
  CHECK(env["MQ_TIMESTAMP"] == "1700000000123");
  CHECK(env["MQ_KEY"] == "k\xc3\xa9y");
  CHECK(env.count("MQ_KEY_B64") == 0);
  CHECK(env["MQ_HEADERS"] == R"([{"key":"h1","value":"v\"1"},{"key":"h2","value":null}])");
  CHECK(env.count("MQ_VALUE_NULL") == 0);
  CHECK(env.count("MQ_LAST_OFFSET") == 0);
}

TEST_CASE("handler: a key that is not text (NUL, invalid UTF-8) comes as MQ_KEY_B64", "[handler]") {
  TempDir tmp;
  const std::string key("a\0\xff", 3);
  handler::Spec spec = Sh("env -0 > \"$1\"", {tmp / "env"});
  std::vector<Header> headers = {{"bin", AsBytes(key)}};
  handler::AppendMessageEnv(&spec.env, {"t", 0, 0, 0, AsBytes(key), true, headers});
  REQUIRE(MustRun(spec).ok());
  auto env = ParseEnv0(Slurp(tmp / "env"));
  CHECK(env.count("MQ_KEY") == 0);
  CHECK(env["MQ_KEY_B64"] == "YQD/");
  CHECK(env["MQ_HEADERS"] == R"([{"key":"bin","value_b64":"YQD/"}])");
  CHECK(env["MQ_VALUE_NULL"] == "1");
}

TEST_CASE("handler: a null key sets neither MQ_KEY nor MQ_KEY_B64, even if mq's environment does",
          "[handler]") {
  TempDir tmp;
  ::setenv("MQ_KEY", "stale", 1);
  ::setenv("MQ_LAST_OFFSET", "99", 1);
  handler::Spec spec = Sh("env -0 > \"$1\"", {tmp / "env"});
  ::unsetenv("MQ_KEY");
  ::unsetenv("MQ_LAST_OFFSET");
  handler::AppendMessageEnv(&spec.env, {"t", 0, 7, 0, std::nullopt, false, {}});
  REQUIRE(MustRun(spec).ok());
  auto env = ParseEnv0(Slurp(tmp / "env"));
  CHECK(env.count("MQ_KEY") == 0);
  CHECK(env.count("MQ_KEY_B64") == 0);
  CHECK(env.count("MQ_LAST_OFFSET") == 0);
  CHECK(env["MQ_HEADERS"] == "[]");
  CHECK(env.count("PATH") == 1);  // the rest of the environment is passed on
}

TEST_CASE("handler: batch environment names the first and last offsets and the count",
          "[handler]") {
  TempDir tmp;
  handler::Spec spec = Sh("env -0 > \"$1\"", {tmp / "env"});
  handler::AppendBatchEnv(&spec.env, "t", 1, 10, 19, 10);
  REQUIRE(MustRun(spec).ok());
  auto env = ParseEnv0(Slurp(tmp / "env"));
  CHECK(env["MQ_OFFSET"] == "10");
  CHECK(env["MQ_LAST_OFFSET"] == "19");
  CHECK(env["MQ_COUNT"] == "10");
  CHECK(env["MQ_MESSAGE_ID"] == "t/1/10");
}

TEST_CASE("handler: the value reaches stdin byte for byte", "[handler]") {
  TempDir tmp;
  std::string value("bin\0ary\xff\n", 9);
  value += std::string(300000, 'x');  // more than a pipe holds
  REQUIRE(MustRun(Sh("cat > \"$1\"", {tmp / "in"}), value).ok());
  CHECK(Slurp(tmp / "in") == value);
}

TEST_CASE("handler: a handler that never reads a large input is not a failure and does not hang",
          "[handler]") {
  std::string big(8u << 20, 'v');
  CHECK(MustRun(Sh("exit 0"), big).ok());
  Outcome o = MustRun(Sh("exit 3"), big);
  CHECK(o.kind == Outcome::Kind::kExited);
  CHECK(o.code == 3);
  CHECK(o.Describe() == "exit status 3");
  // Closes its input at once, then works and succeeds.
  CHECK(MustRun(Sh("exec 0<&-; sleep 0.1; exit 0"), big).ok());
}

TEST_CASE("handler: a handler killed by a signal reports it", "[handler]") {
  Outcome o = MustRun(Sh("kill -SEGV $$"));
  CHECK(o.kind == Outcome::Kind::kSignaled);
  CHECK(o.code == SIGSEGV);
  CHECK(o.Describe() == "killed by SIGSEGV");
  CHECK(o.StatusText() == "SIGSEGV");
  CHECK_FALSE(o.ok());
}

TEST_CASE("handler: a handler gets SIGPIPE's default action although mq ignores it", "[handler]") {
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  // `yes` dies of SIGPIPE once head exits; ignored, it would loop on EPIPE.
  Outcome o = MustRun(Sh("yes | head -c 10 >/dev/null; exit 0"));
  ::sigaction(SIGPIPE, &old, nullptr);
  CHECK(o.ok());
}

TEST_CASE("handler: a command that cannot be run is kExecFailed with its errno", "[handler]") {
  handler::Spec spec;
  spec.argv = {"/nonexistent/mq-no-such-command"};
  Outcome o = MustRun(spec, "input");
  CHECK(o.kind == Outcome::Kind::kExecFailed);
  CHECK(o.code == ENOENT);
  CHECK(o.StatusText() == "127");
  spec.argv = {"/dev/null"};  // not executable
  o = MustRun(spec);
  CHECK(o.kind == Outcome::Kind::kExecFailed);
  CHECK(o.code == EACCES);
  CHECK(o.StatusText() == "126");
}

TEST_CASE("handler: stderr is passed through and its last 20 lines kept", "[handler]") {
  TempDir tmp;
  Outcome o;
  {
    CaptureStderr capture(tmp / "stderr");
    o = MustRun(Sh("i=1; while [ $i -le 50 ]; do echo line$i >&2; i=$((i+1)); done; exit 1"));
  }
  CHECK(o.code == 1);
  std::string passed = Slurp(tmp / "stderr");
  CHECK(passed.starts_with("line1\nline2\n"));
  CHECK(passed.ends_with("line50\n"));
  CHECK(o.stderr_tail.starts_with("line31\n"));
  CHECK(o.stderr_tail.ends_with("line50\n"));
  CHECK(std::count(o.stderr_tail.begin(), o.stderr_tail.end(), '\n') == 20);
}

TEST_CASE("handler: the stderr tail is at most 4 KiB", "[handler]") {
  handler::Tail t;
  t.Add(std::string(100000, 'a'));
  t.Add("end");
  std::string s = t.Take();
  CHECK(s.size() == handler::kTailBytes);
  CHECK(s.ends_with("aend"));
}

TEST_CASE("handler: lots of stderr while lots of stdin is written does not deadlock", "[handler]") {
  TempDir tmp;
  std::string big(4u << 20, 'i');
  Outcome o;
  {
    CaptureStderr capture(tmp / "stderr");
    o = MustRun(Sh("head -c 2000000 /dev/zero | tr '\\0' e >&2; cat > /dev/null; exit 0"), big);
  }
  CHECK(o.ok());
  CHECK(std::filesystem::file_size(tmp / "stderr") == 2000000);
}

TEST_CASE("handler: what a handler leaves running in its process group is killed when it exits",
          "[handler]") {
  TempDir tmp;
  Outcome o = MustRun(Sh("sleep 1000 & echo $! > \"$1\"; exit 0", {tmp / "pid"}));
  CHECK(o.ok());
  pid_t grandchild = ReadPid(tmp / "pid");
  CHECK(EventuallyGone(grandchild));
}

TEST_CASE("handler: an interrupt kills the whole group: TERM, then KILL after the grace period",
          "[handler]") {
  TempDir tmp;
  volatile std::sig_atomic_t flag = 0;
  std::thread interrupter([&] {
    ReadPid(tmp / "pid");
    flag = SIGTERM;
  });
  // The handler ignores SIGTERM: only SIGKILL ends it.
  Outcome o =
      MustRun(Sh("trap '' TERM; sleep 1000 & echo $! > \"$1\"; wait; wait; exit 0", {tmp / "pid"}),
              {}, &flag, 200);
  interrupter.join();
  CHECK(o.kind == Outcome::Kind::kInterrupted);
  CHECK(EventuallyGone(ReadPid(tmp / "pid")));
}

TEST_CASE("handler: KillGroup kills a running handler and its children", "[handler]") {
  TempDir tmp;
  auto p = handler::Process::Spawn(Sh("sleep 1000 & echo $! > \"$1\"; wait", {tmp / "pid"}));
  REQUIRE(p);
  pid_t grandchild = ReadPid(tmp / "pid");
  pid_t child = p->pid();
  CHECK(::getpgid(child) == child);  // a group of its own
  CHECK(::getpgid(grandchild) == child);
  p->KillGroup(5000);
  CHECK(Gone(child));
  CHECK(EventuallyGone(grandchild));
}

TEST_CASE("handler: a handler dies with its parent (PR_SET_PDEATHSIG)", "[handler]") {
  TempDir tmp;
  int report[2];
  REQUIRE(::pipe(report) == 0);
  pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    // The parent spawns a handler that would sleep for ever, tells the
    // test its pid, then waits to be killed.
    ::close(report[0]);
    handler::Spec spec;
    spec.argv = {"sleep", "1000"};
    auto p = handler::Process::Spawn(spec);
    pid_t pid = p ? p->pid() : -1;
    if (::write(report[1], &pid, sizeof pid) != sizeof pid) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(report[1]);
  pid_t handler_pid = -1;
  REQUIRE(::read(report[0], &handler_pid, sizeof handler_pid) == sizeof handler_pid);
  ::close(report[0]);
  REQUIRE(handler_pid > 0);
  // The handler has exec'd sleep by now (CLONE_VFORK returns after exec).
  CHECK_FALSE(Gone(handler_pid));
  ::kill(parent, SIGKILL);
  ::waitpid(parent, nullptr, 0);
  CHECK(EventuallyGone(handler_pid));
}

TEST_CASE("handler: only 0, 1, 2 and the named descriptor reach the handler", "[handler]") {
  TempDir tmp;
  int keep = ::open((tmp / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  int leak = ::open((tmp / "other").c_str(), O_RDWR | O_CREAT, 0600);  // no O_CLOEXEC
  REQUIRE(keep >= 3);
  REQUIRE(leak >= 3);
  handler::Spec spec = Sh("exec ls -l /proc/self/fd > \"$1\"", {tmp / "fds"});
  spec.inherit_fd = keep;
  REQUIRE(MustRun(spec).ok());
  ::close(leak);
  // "... 3 -> /path" lines; ls's own directory descriptor is left out.
  std::map<int, std::string> fds;
  std::istringstream lines(Slurp(tmp / "fds"));
  std::string line;
  while (std::getline(lines, line)) {
    size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    size_t sp = line.rfind(' ', arrow - 1);
    int fd = std::stoi(line.substr(sp + 1, arrow - sp - 1));
    std::string target = line.substr(arrow + 4);
    if (target.starts_with("/proc/") && target.ends_with("/fd")) continue;
    fds[fd] = target;
  }
  std::set<int> numbers;
  for (auto& [fd, target] : fds) numbers.insert(fd);
  CHECK(numbers == std::set<int>{0, 1, 2, keep});
  CHECK(fds[keep] == tmp / "lock");
  CHECK(fds[0].starts_with("pipe:"));
  CHECK(fds[2].starts_with("pipe:"));
  ::close(keep);
}

TEST_CASE("handler: a descriptor below 3 cannot be named for inheritance", "[handler]") {
  handler::Spec spec = Sh("exit 0");
  spec.inherit_fd = 1;
  auto r = handler::Run(spec, {}, nullptr);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Code::kInvalidArgument);
}

TEST_CASE("handler: a run still going at its deadline is killed with its group (kTimedOut)",
          "[handler]") {
  TempDir tmp;
  auto r = handler::Run(Sh("sleep 1000 & echo $! > \"$1\"; wait", {tmp / "pid"}), {}, nullptr, 200,
                        /*timeout_ms=*/2000);
  REQUIRE(r);
  CHECK(r->kind == Outcome::Kind::kTimedOut);
  CHECK(r->StatusText() == "timeout");
  CHECK(EventuallyGone(ReadPid(tmp / "pid")));
  // A run that ends before its deadline is not affected by it.
  auto quick = handler::Run(Sh("exit 3"), {}, nullptr, 200, 60000);
  REQUIRE(quick);
  CHECK(quick->kind == Outcome::Kind::kExited);
  CHECK(quick->code == 3);
}

TEST_CASE("handler: a cancel from another thread kills the run with its group (kInterrupted)",
          "[handler]") {
  TempDir tmp;
  std::atomic<bool> cancel{false};
  // Spawned from a thread of its own, as --parallel's workers do; the
  // group (a child it left running included) is gone once Run returns.
  Result<Outcome> r = Status(Code::kInternal, "not run");
  std::thread worker([&] {
    r = handler::Run(Sh("sleep 1000 & echo $! > \"$1\"; wait", {tmp / "pid"}), {}, nullptr, 200, 0,
                     &cancel);
  });
  for (int i = 0; i < 600 && Slurp(tmp / "pid").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_FALSE(Slurp(tmp / "pid").empty());
  cancel = true;
  worker.join();
  REQUIRE(r);
  CHECK(r->kind == Outcome::Kind::kInterrupted);
  CHECK(EventuallyGone(ReadPid(tmp / "pid")));
}

TEST_CASE(
    "handler: a handler that exited before a cancel or an interrupt is seen has its exit "
    "as outcome",
    "[handler]") {
  // --parallel revokes a partition by cancelling its run: a handler that
  // had already finished its message must count as handled (exit 0), not
  // as stopped, or its message is handed out again.
  for (int code : {0, 3}) {
    for (bool by_cancel : {true, false}) {
      auto p = handler::Process::Spawn(Sh("exit " + std::to_string(code)));
      REQUIRE(p);
      // Exited, not reaped (WNOWAIT): the state Communicate finds it in when
      // the cancel and the exit come together.
      siginfo_t info{};
      for (int i = 0; i < 6000; ++i) {
        info = {};
        REQUIRE(::waitid(P_PID, static_cast<id_t>(p->pid()), &info, WEXITED | WNOHANG | WNOWAIT) ==
                0);
        if (info.si_pid == p->pid()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      REQUIRE(info.si_pid == p->pid());
      std::atomic<bool> cancel{by_cancel};
      volatile std::sig_atomic_t interrupted = by_cancel ? 0 : 1;
      auto r = p->Communicate({}, &interrupted, 200, 0, &cancel);
      REQUIRE(r);
      INFO("exit " << code << (by_cancel ? ", cancelled" : ", interrupted"));
      CHECK(r->kind == Outcome::Kind::kExited);
      CHECK(r->code == code);
    }
  }
}

TEST_CASE("handler: capture_stdout keeps all of a transform's output, bounded", "[handler]") {
  // Through the pipe while the input is still being written (both larger
  // than a pipe holds), then what is left at exit.
  std::string value(300000, 'x');
  handler::Spec s = Sh("cat; printf 'last line without newline'");
  s.capture_stdout = true;
  Outcome o = MustRun(s, value);
  REQUIRE(o.ok());
  CHECK(o.output == value + "last line without newline");
  // Nothing printed: empty.
  s = Sh("cat >/dev/null");
  s.capture_stdout = true;
  o = MustRun(s, value);
  CHECK(o.ok());
  CHECK(o.output.empty());
  // Past the limit: read to the end (the handler exits), then a failure.
  s = Sh("cat; cat /dev/null");
  s.capture_stdout = true;
  s.max_output_bytes = 1000;
  o = MustRun(s, value);
  CHECK(o.kind == Outcome::Kind::kOutputTooLarge);
  CHECK_FALSE(o.ok());
  CHECK(o.StatusText() == "output-too-large");
}

TEST_CASE("handler: a handler that exits 0 by itself after an interrupt's SIGTERM ran to its end",
          "[handler]") {
  TempDir tmp;
  volatile std::sig_atomic_t flag = 0;
  std::thread interrupter([&] {
    ReadPid(tmp / "pid");
    flag = SIGTERM;
  });
  // It finishes its work when asked to stop (the trap), then exits 0.
  Outcome o = MustRun(Sh("trap 'echo finished > \"$1.done\"; exit 0' TERM; echo $$ > \"$1\"; "
                         "sleep 1000 & wait",
                         {tmp / "pid"}),
                      {}, &flag, 5000);
  interrupter.join();
  CHECK(o.kind == Outcome::Kind::kExited);
  CHECK(o.code == 0);
  CHECK(o.ok());
  CHECK(Slurp(tmp / "pid.done") == "finished\n");
}
