// Many writer processes on one partition, and writers killed mid-append
// (format-spec/segment.md §9: the flock writer lock and the committed end).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <set>

#include "mq/partition.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

// Batches carry their writer in the producer id field... not an idempotent
// producer: the writer id goes in the timestamp instead (id * 1e6 + seq).
std::vector<std::byte> Tagged(int writer, int seq) {
  return MakeBatch(1 + seq % 3, int64_t{writer} * 1000000 + seq, 16);
}

}  // namespace

TEST_CASE("procs: 8 processes appending to one partition get gap-free offsets, each batch once") {
  TempDir tmp;
  std::string dir = tmp / "p-0";
  { REQUIRE(PartitionWriter::Open(dir, {}, true, nullptr)); }
  const int kProcs = 8, kEach = 60;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      LogConfig config;
      config.segment_bytes = 4000;  // rolls while others append
      config.sync_on_close = false;
      auto w = PartitionWriter::Open(dir, config, false, nullptr);
      if (!w) _exit(2);
      for (int i = 0; i < kEach; ++i) {
        auto b = Tagged(p + 1, i);
        if (!(*w)->Append(b)) _exit(3);
      }
      _exit((*w)->Close().ok() ? 0 : 4);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  int64_t next = 0;
  std::set<int64_t> seen;
  std::vector<int> last_seq(kProcs + 1, -1);
  for (;;) {
    auto b = (*r)->Next();
    REQUIRE(b);
    if (!*b) break;
    const auto& h = (*b)->header();
    CHECK(h.base_offset == next);  // gap-free
    next = h.last_offset() + 1;
    CHECK(seen.insert(h.base_timestamp).second);  // exactly once
    int writer = static_cast<int>(h.base_timestamp / 1000000);
    int seq = static_cast<int>(h.base_timestamp % 1000000);
    CHECK(seq == last_seq[static_cast<size_t>(writer)] + 1);  // each writer's order kept
    last_seq[static_cast<size_t>(writer)] = seq;
  }
  CHECK(seen.size() == kProcs * kEach);
  std::vector<Problem> problems;
  REQUIRE(VerifyPartition(dir, {}, &problems).ok());
  CHECK(problems.empty());
}

TEST_CASE("procs: a writer killed with SIGKILL mid-loop leaves a partition that reopens clean") {
  TempDir tmp;
  std::string dir = tmp / "k-0";
  { REQUIRE(PartitionWriter::Open(dir, {}, true, nullptr)); }
  for (int round = 0; round < 3; ++round) {
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(pipefd[0]);
      LogConfig config;
      config.segment_bytes = 20000;
      config.index_interval_bytes = 300;
      auto w = PartitionWriter::Open(dir, config, false, nullptr);
      if (!w) _exit(2);
      for (int i = 0;; ++i) {
        auto b = Tagged(round + 1, i);
        auto res = (*w)->Append(b);
        if (!res) _exit(3);
        int64_t acked = res->last_offset;  // acknowledged: report it
        if (write(pipefd[1], &acked, sizeof acked) != sizeof acked) _exit(4);
      }
    }
    close(pipefd[1]);
    int64_t acked = -1, v;
    int reports = 0;
    while (reports < 200 + round * 150 && read(pipefd[0], &v, sizeof v) == sizeof v) {
      acked = v;
      ++reports;
    }
    kill(pid, SIGKILL);
    while (read(pipefd[0], &v, sizeof v) == sizeof v) acked = v;
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    RecoveryReport report;
    auto w = PartitionWriter::Open(dir, {}, false, &report);
    REQUIRE(w);
    CHECK((*w)->log_end_offset() > acked);  // every acknowledged append is there
    auto all = ReadAll(dir);
    int64_t next = 0;
    for (auto& [base, last] : all) {
      CHECK(base == next);
      next = last + 1;
    }
    std::vector<Problem> problems;
    REQUIRE(VerifyPartition(dir, {}, &problems).ok());
    CHECK(problems.empty());
  }
}

TEST_CASE("procs: the lock holder dying releases the lock (flock), and another process appends") {
  TempDir tmp;
  std::string dir = tmp / "l-0";
  { REQUIRE(PartitionWriter::Open(dir, {}, true, nullptr)); }
  int fd = ::open((dir + "/writer.lock").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  pid_t pid = fork();
  if (pid == 0) {
    // Hold the lock and die holding it.
    if (flock(fd, LOCK_EX) != 0) _exit(1);
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(fd);
  auto w = PartitionWriter::Open(dir, {}, false, nullptr);
  REQUIRE(w);
  auto b = MakeBatch(1);
  CHECK((*w)->Append(b));
}
