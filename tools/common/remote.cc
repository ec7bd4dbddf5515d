#include "remote.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spawn.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include "cli.h"

extern char** environ;

namespace mq::cli {

std::string RemoteProgram(std::string_view name) {
  const char* dir = std::getenv("MQ_REMOTE_BINDIR");
  if (dir && *dir) return fmt::format("{}/{}", dir, name);
  return std::string(name);
}

int WireTimeoutMs() {
  const char* env = std::getenv("MQ_TIMEOUT_MS");
  if (env && *env) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end && *end == '\0' && v > 0 && v <= 3600000) return static_cast<int>(v);
  }
  return wire::kDefaultTimeoutMs;
}

Status RunRemote(std::string_view host, const std::vector<std::string>& remote_argv) {
  auto argv = RshCommand(host, remote_argv);
  if (!argv) return argv.error();
  std::vector<char*> args;
  for (const std::string& a : *argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ); rc != 0)
    return Status(Code::kUnavailable, fmt::format("{}: {}", (*argv)[0], std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return Status(Code::kUnavailable,
                fmt::format("{}: `{}` on {} failed ({})", host,
                            remote_argv.empty() ? "" : remote_argv[0], host,
                            WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                              : fmt::format("signal {}", WTERMSIG(status))));
}

namespace {

std::shared_ptr<wire::Client> ClientFor(const std::string& host, std::vector<std::string> remote,
                                        std::string peer, bool connect_once = false) {
  wire::Client::Options o;
  o.timeout_ms = WireTimeoutMs();
  o.name = ProgramName();
  auto connect = [host, remote = std::move(remote), peer, connect_once,
                  connected = false]() mutable -> Result<std::unique_ptr<wire::Connection>> {
    if (connect_once && connected)
      return Status(Code::kUnavailable,
                    fmt::format("{}: not contacted again in this run: its connection failed "
                                "earlier",
                                peer));
    connected = true;
    auto argv = RshCommand(host, remote);
    if (!argv) return argv.error();
    return wire::Connection::Start(*argv);
  };
  return std::make_shared<wire::Client>(std::move(connect), std::move(peer), o);
}

}  // namespace

std::shared_ptr<wire::Client> ReplicaClient(const Address& a, bool connect_once) {
  return ClientFor(a.host, {RemoteProgram("mq-replicate"), "--serve", "-C", a.path}, a.ToString(),
                   connect_once);
}

std::shared_ptr<wire::Client> ControllerClient(const Address& a) {
  return ClientFor(a.host, {RemoteProgram("mq-isr"), "--cluster", a.path, "--serve"}, a.ToString());
}

Result<std::unique_ptr<ClusterStore>> OpenClusterStore(const std::string& spec) {
  auto a = ParseAddress(spec, "cluster");
  if (!a) return a.error();
  if (a->host.empty()) {
    auto store = FileClusterStore::Open(a->path, false);
    if (!store) return store.error();
    return std::unique_ptr<ClusterStore>(std::move(*store));
  }
  return wire::RemoteClusterStore(ControllerClient(*a));
}

}  // namespace mq::cli
