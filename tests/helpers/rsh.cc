// mq-test-rsh [--print] HOST WORD...: runs WORD... on HOST the way the tools
// reach another host (tools/common/shell_quote.h: $MQ_RSH, default ssh, then
// HOST, then the words quoted for the remote shell as one argument).
// --print writes that argv instead, one argument per line (tests check the
// quoting). Exit 64 with the reason when RshCommand refuses.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "shell_quote.h"

int main(int argc, char** argv) {
  int first = 1;
  const bool print = argc > 1 && std::string_view(argv[1]) == "--print";
  if (print) ++first;
  if (argc - first < 2) {
    std::fprintf(stderr, "usage: mq-test-rsh [--print] HOST WORD...\n");
    return 64;
  }
  const std::vector<std::string> words(argv + first + 1, argv + argc);
  auto command = mq::cli::RshCommand(argv[first], words);
  if (!command.has_value()) {
    std::fprintf(stderr, "mq-test-rsh: %s\n", command.error().message().c_str());
    return 64;
  }
  if (print) {
    for (const std::string& arg : *command) std::printf("%s\n", arg.c_str());
    return 0;
  }
  std::vector<char*> args;
  for (std::string& arg : *command) args.push_back(arg.data());
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "mq-test-rsh: %s: %s\n", args[0], std::strerror(errno));
  return 127;
}
