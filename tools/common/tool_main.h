// The start and end every tool's main shares: the program name for
// diagnostics, the standard descriptors held (HoldStandardDescriptors),
// SIGPIPE ignored, a CLI11 app with the tool's usage and -V/--version,
// argv parsed (--help, --version and a parse error end there with their
// exit status), then the tool's work under RunGuarded.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace mq::cli {

struct Tool {
  const char* name;  // "mq-produce": the app's name and every diagnostic's prefix
  // The man page's SYNOPSIS and summary, shown by --help and usage errors
  // (UseUsage); nullptr when `flags` installs a formatter of its own.
  const char* usage = nullptr;
  // Adds the tool's flags to the app.
  std::function<void(CLI::App& app)> flags = nullptr;
  // In place of the app and `flags`: parses argv itself, returning -1 to
  // go on, else the exit status (mq-isr, whose subcommands its options
  // build).
  std::function<int(int argc, char** argv)> parse = nullptr;
  // After the parse: the tool's work (usage errors found then included),
  // returning the exit status.
  std::function<int()> run = nullptr;
};

// Runs `tool` as described above; returns main's exit status.
int RunTool(int argc, char** argv, const Tool& tool);

}  // namespace mq::cli
