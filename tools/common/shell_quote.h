// Quoting for a remote shell, and the command line that reaches another
// host. ssh (like rsh) joins its arguments into ONE string that the remote
// user's shell parses again, so passing an argv is not enough: every word of
// the remote command is quoted for a POSIX shell here, once, for every tool
// that runs something on another host.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mq/status.h"

namespace mq::cli {

// `word` quoted for a POSIX sh: a non-empty word of only
// [A-Za-z0-9_./=:,+@%-] stays bare; anything else is put in single quotes,
// each ' written as '\'' ; the empty word is ''. A NUL byte cannot be part of
// an argument at all: RshCommand refuses it, ShellQuote copies it.
std::string ShellQuote(std::string_view word);

// The words quoted with ShellQuote, joined by single spaces: `sh -c` on the
// result runs argv[0] with exactly the arguments argv[1..].
std::string ShellJoin(const std::vector<std::string>& argv);

// The argv that runs `remote_argv` on `host`: the remote-shell command
// `rsh` split on spaces and tabs (no shell, no quotes: like rsync's
// RSYNC_RSH), then `host`, then ShellJoin(remote_argv) as one argument.
// kInvalidArgument for an empty host, a host starting with '-' or with '-'
// right after '@' (ssh would read it as an option), a host with a byte
// outside [A-Za-z0-9._@:-], an empty `rsh`, an empty remote_argv, or a NUL
// byte in a remote word.
Result<std::vector<std::string>> RshCommandWith(std::string_view rsh, std::string_view host,
                                                const std::vector<std::string>& remote_argv);

// RshCommandWith($MQ_RSH, ...), "ssh" when MQ_RSH is unset or blank.
Result<std::vector<std::string>> RshCommand(std::string_view host,
                                            const std::vector<std::string>& remote_argv);

}  // namespace mq::cli
