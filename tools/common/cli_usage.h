// The --help formatter of the mq-* tools. Apart from cli.h because it needs
// CLI11's full definitions, which only the sources that parse a command
// line include.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace mq::cli {

// A CLI11 formatter whose usage section is a fixed text: the man page's
// SYNOPSIS, word for word (each tool's CLI test compares them). Tools may
// derive from it to change more of --help.
class UsageFormatter : public CLI::Formatter {
 public:
  explicit UsageFormatter(const char* usage) : usage_(usage) {}
  std::string make_usage(const CLI::App*, std::string) const override { return usage_; }

 private:
  const char* usage_;
};

}  // namespace mq::cli
