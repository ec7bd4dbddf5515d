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

std::string ShellQuote(std::string_view word) {
  auto safe = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./=:,+@%-").find(c) !=
                                                              std::string_view::npos;
  };
  if (!word.empty() && std::all_of(word.begin(), word.end(), safe)) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

Result<std::vector<std::string>> RshCommand(std::string_view host,
                                            const std::vector<std::string>& remote_argv) {
  MQ_RETURN_IF_ERROR(CheckHost(host, "remote"));
  const char* env = std::getenv("MQ_RSH");
  const std::string rsh = env && *env ? env : "ssh";
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < rsh.size()) {
    size_t space = rsh.find(' ', start);
    if (space == std::string::npos) space = rsh.size();
    if (space > start) argv.push_back(rsh.substr(start, space - start));
    start = space + 1;
  }
  if (argv.empty()) return Status(Code::kInvalidArgument, "MQ_RSH names no command");
  argv.emplace_back(host);
  std::string joined;
  for (const std::string& w : remote_argv) {
    if (!joined.empty()) joined += ' ';
    joined += ShellQuote(w);
  }
  argv.push_back(std::move(joined));
  return argv;
}

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
                fmt::format("{}: `{}` on {} failed ({})", host, remote_argv.empty() ? "" : remote_argv[0],
                            host,
                            WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                              : fmt::format("signal {}", WTERMSIG(status))));
}

namespace {

std::shared_ptr<wire::Client> ClientFor(const std::string& host, std::vector<std::string> remote,
                                        std::string peer) {
  wire::Client::Options o;
  o.timeout_ms = WireTimeoutMs();
  o.name = ProgramName();
  auto connect = [host, remote = std::move(remote)]() -> Result<std::unique_ptr<wire::Connection>> {
    auto argv = RshCommand(host, remote);
    if (!argv) return argv.error();
    return wire::Connection::Start(*argv);
  };
  return std::make_shared<wire::Client>(std::move(connect), std::move(peer), o);
}

}  // namespace

std::shared_ptr<wire::Client> ReplicaClient(const Address& a) {
  return ClientFor(a.host, {RemoteProgram("mq-replicate"), "--serve", "-C", a.path},
                   a.ToString());
}

std::shared_ptr<wire::Client> ControllerClient(const Address& a) {
  return ClientFor(a.host, {RemoteProgram("mq-isr"), "--cluster", a.path, "--serve"},
                   a.ToString());
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
