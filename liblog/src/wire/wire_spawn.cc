// A wire connection (mq/wire.h): the server process a client starts, its
// standard input and output the client's pipes, or descriptors adopted.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "mq/wire.h"
#include "wire/wire_frame.h"

extern char** environ;

namespace mq::wire {

// ---- connections ---------------------------------------------------------------

Result<std::unique_ptr<Connection>> Connection::Start(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status(Code::kInvalidArgument, "no command to start");
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0)
    return Status(Code::kIoError, fmt::format("pipe: {}", strerror(errno)));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    int e = errno;
    close(to_child[0]);
    close(to_child[1]);
    return Status(Code::kIoError, fmt::format("pipe: {}", strerror(e)));
  }
  // 1 MiB pipes where allowed: fewer wakeups for fetched batches.
  fcntl(from_child[1], F_SETPIPE_SZ, 1 << 20);
  fcntl(to_child[1], F_SETPIPE_SZ, 1 << 16);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(to_child[0]);
  close(from_child[1]);
  if (rc != 0) {
    close(to_child[1]);
    close(from_child[0]);
    return Status(Code::kUnavailable, fmt::format("{}: {}", argv[0], strerror(rc)));
  }
  auto c = std::unique_ptr<Connection>(new Connection());
  c->write_fd_ = to_child[1];
  c->read_fd_ = from_child[0];
  c->pid_ = pid;
  c->command_ = argv[0];
  SetNonBlocking(c->write_fd_);
  SetNonBlocking(c->read_fd_);
  return c;
}

std::unique_ptr<Connection> Connection::Adopt(int write_fd, int read_fd) {
  auto c = std::unique_ptr<Connection>(new Connection());
  c->write_fd_ = write_fd;
  c->read_fd_ = read_fd;
  SetNonBlocking(write_fd);
  SetNonBlocking(read_fd);
  return c;
}

Connection::~Connection() {
  if (write_fd_ >= 0) close(write_fd_);
  if (read_fd_ >= 0 && read_fd_ != write_fd_) close(read_fd_);
  if (pid_ > 0) {
    // The server ends at end of input; one that does not (a stalled relay,
    // a hung ssh) is ended.
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string Connection::ExitNote() {
  if (pid_ <= 0) return "";
  int status = 0;
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;  // reaped: the destructor has nobody to end
      if (WIFEXITED(status))
        return fmt::format("`{}` exited with status {}", command_, WEXITSTATUS(status));
      return fmt::format("`{}` was killed by signal {}", command_, WTERMSIG(status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return "";
}

}  // namespace mq::wire
