// ShellQuote, ShellJoin and RshCommand (tools/common/shell_quote.h): words
// quoted for the remote shell that ssh hands its command string to. The
// round trips run the real /bin/sh (popen) and check it gives back exactly
// the words; the randomized one prints its seed, MQ_TEST_SEED=<n> repeats it.
#include <catch2/catch.hpp>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "shell_quote.h"

using mq::Code;
using mq::cli::RshCommand;
using mq::cli::RshCommandWith;
using mq::cli::ShellJoin;
using mq::cli::ShellQuote;

namespace {

uint64_t Seed() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// A scratch directory the shell runs in, so that a word that escaped its
// quotes (`a b;touch x`, a glob) shows up as a file or a match there.
class ShellDir {
 public:
  ShellDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/mq-quote-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~ShellDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  bool empty() const { return std::filesystem::is_empty(path_); }

 private:
  std::string path_;
};

// Runs `sh -c "cd DIR && printf '%s\0' " + ShellJoin(words)` and returns the
// words sh passed to printf (NUL cannot be in a word, so it separates them).
std::vector<std::string> ThroughSh(const ShellDir& dir, const std::vector<std::string>& words) {
  const std::string command =
      "cd " + ShellQuote(dir.path()) + " && printf '%s\\0' " + ShellJoin(words);
  FILE* f = ::popen(command.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = ::pclose(f);
  INFO("command: " << command);
  REQUIRE(status == 0);
  std::vector<std::string> got;
  size_t start = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\0') {
      got.push_back(out.substr(start, i - start));
      start = i + 1;
    }
  }
  REQUIRE(start == out.size());
  return got;
}

void CheckRoundTrip(const ShellDir& dir, const std::vector<std::string>& words) {
  const std::vector<std::string> got = ThroughSh(dir, words);
  INFO("joined: " << ShellJoin(words));
  CHECK(got == words);
  CHECK(dir.empty());
}

}  // namespace

TEST_CASE("ShellQuote leaves safe words bare and single-quotes the rest") {
  CHECK(ShellQuote("mq-replicate") == "mq-replicate");
  CHECK(ShellQuote("/var/lib/mq/data.0") == "/var/lib/mq/data.0");
  CHECK(ShellQuote("--cluster=a,b:c+d@e%f_g") == "--cluster=a,b:c+d@e%f_g");
  CHECK(ShellQuote("") == "''");
  CHECK(ShellQuote("a b") == "'a b'");
  CHECK(ShellQuote("it's") == "'it'\\''s'");
  CHECK(ShellQuote("'") == "''\\'''");
  CHECK(ShellQuote("$HOME") == "'$HOME'");
  CHECK(ShellQuote("~") == "'~'");
  CHECK(ShellQuote("a*") == "'a*'");
  CHECK(ShellQuote("\xc3\xa9") == "'\xc3\xa9'");
  CHECK(ShellJoin({"mq-replicate", "--serve", "-C", "a b;touch x"}) ==
        "mq-replicate --serve -C 'a b;touch x'");
  CHECK(ShellJoin({}) == "");
}

TEST_CASE("ShellJoin round trips hostile words through sh") {
  ShellDir dir;
  std::string every_byte;
  for (int b = 1; b < 0x80; ++b) every_byte += static_cast<char>(b);
  const std::vector<std::string> hostile = {"a b;touch x",
                                            "'",
                                            "\"",
                                            "''",
                                            "it's",
                                            "$HOME",
                                            "${PATH}",
                                            "$(touch y)",
                                            "`touch z`",
                                            ";",
                                            "&&",
                                            "|",
                                            ">out",
                                            "<in",
                                            "a\nb",
                                            "\n",
                                            " ",
                                            "\t",
                                            "",
                                            "*",
                                            "?",
                                            "[a-z]",
                                            "~",
                                            "~root",
                                            "-n",
                                            "-e",
                                            "--",
                                            "-",
                                            "#comment",
                                            "!",
                                            "\\",
                                            "\\n",
                                            "%s",
                                            "a=b",
                                            "{a,b}",
                                            "\xc3\xa9t\xc3\xa9 \xe2\x82\xac",
                                            "\xf0\x9f\x93\xa6",
                                            every_byte,
                                            "\xff\xfe"};
  for (const std::string& word : hostile) {
    INFO("word: " << ShellQuote(word));
    CheckRoundTrip(dir, {word});
  }
  CheckRoundTrip(dir, hostile);
  // A word starting with '-' in front reaches printf as an argument, not an option.
  CheckRoundTrip(dir, {"-v", "--help", "-"});
}

TEST_CASE("ShellJoin round trips random words through sh (property)") {
  const uint64_t seed = Seed();
  std::printf("shell quote property: seed %llu (MQ_TEST_SEED to repeat)\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  ShellDir dir;
  // Alphabets: the shell's special characters, the bare-safe ones, every
  // ASCII byte but NUL, and UTF-8 sequences (also cut ones: any byte goes).
  const std::string specials = " \t\n'\"\\$`;&|<>()*?[]{}~#!=%^,:@+-./";
  const std::vector<std::string> utf8 = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x93\xa6",
                                         "\xe2\x82", "\x80",         "\xff"};
  for (int iteration = 0; iteration < 300; ++iteration) {
    std::vector<std::string> words(rng() % 6 + 1);
    for (std::string& word : words) {
      const size_t length = rng() % 12;
      for (size_t i = 0; i < length; ++i) {
        switch (rng() % 4) {
          case 0:
            word += specials[rng() % specials.size()];
            break;
          case 1:
            word += static_cast<char>('a' + rng() % 26);
            break;
          case 2:
            word += static_cast<char>(1 + rng() % 0x7f);
            break;
          default:
            word += utf8[rng() % utf8.size()];
            break;
        }
      }
    }
    INFO("seed " << seed << " iteration " << iteration);
    CheckRoundTrip(dir, words);
  }
}

TEST_CASE("RshCommand splits MQ_RSH and passes the remote command as one quoted word") {
  auto argv = RshCommandWith("ssh -F /tmp/c  -o\tBatchMode=yes", "user@host-1.example:22",
                             {"mq-replicate", "--serve", "-C", "a b;touch x"});
  REQUIRE(argv.has_value());
  CHECK(*argv == std::vector<std::string>{"ssh", "-F", "/tmp/c", "-o", "BatchMode=yes",
                                          "user@host-1.example:22",
                                          "mq-replicate --serve -C 'a b;touch x'"});

  const char* old = std::getenv("MQ_RSH");
  const std::string saved = old ? old : "";
  ::unsetenv("MQ_RSH");
  auto plain = RshCommand("h", {"echo", "ok"});
  ::setenv("MQ_RSH", "  ", 1);
  auto blank = RshCommand("h", {"echo", "ok"});
  ::setenv("MQ_RSH", "relay.py --faults-dir /f", 1);
  auto relay = RshCommand("h", {"echo", "ok"});
  if (old)
    ::setenv("MQ_RSH", saved.c_str(), 1);
  else
    ::unsetenv("MQ_RSH");
  REQUIRE(plain.has_value());
  CHECK(*plain == std::vector<std::string>{"ssh", "h", "echo ok"});
  REQUIRE(blank.has_value());
  CHECK(*blank == std::vector<std::string>{"ssh", "h", "echo ok"});
  REQUIRE(relay.has_value());
  CHECK(*relay == std::vector<std::string>{"relay.py", "--faults-dir", "/f", "h", "echo ok"});
}

TEST_CASE("RshCommand refuses hosts ssh would read as options, and other bad input") {
  for (const char* host : {"", "-oProxyCommand=touch x", "-p", "user@-oProxyCommand=x", "a b",
                           "host;touch x", "h$(x)", "h`x`", "h\n", "h/x", "[::1]", "h\xc3\xa9"}) {
    INFO("host: " << host);
    auto argv = RshCommandWith("ssh", host, {"echo", "ok"});
    REQUIRE_FALSE(argv.has_value());
    CHECK(argv.error().code() == Code::kInvalidArgument);
  }
  for (const char* host : {"h", "user@h", "10.0.0.1", "fe80::1", "a-b_c.d@e-f"}) {
    INFO("host: " << host);
    CHECK(RshCommandWith("ssh", host, {"echo"}).has_value());
  }
  CHECK(RshCommandWith("ssh", "h", {}).error().code() == Code::kInvalidArgument);
  CHECK(RshCommandWith("ssh", "h", {std::string("a\0b", 3)}).error().code() ==
        Code::kInvalidArgument);
  CHECK(RshCommandWith(" ", "h", {"echo"}).error().code() == Code::kInvalidArgument);
}
