// The partition state file (format-spec/segment.md §9, R15).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "mq/file.h"
#include "mq/partition.h"
#include "storage/state_file.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

StateFields Example() {
  StateFields f;
  f.rewrites = 1;
  f.log_end_offset = 300;
  f.end_segment_base = 200;
  f.end_position = 5000;
  f.log_start_offset = 0;
  f.recovery_point = 100;
  f.boot_id = *ParseBootId("00112233-4455-6677-8899-aabbccddeeff");
  return f;
}

std::string Hex(const void* p, size_t n) {
  std::string s;
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", b[i]);
  return s;
}

}  // namespace

TEST_CASE("R15 state file: worked example (little-endian machine)") {
  StateLayout s = EncodeState(Example());
  // The bytes of format-spec/segment.md §9.3, as an x86-64 or arm64 writes them.
  CHECK(Hex(&s, sizeof s) ==
        "5453514d0200000000000000010000002c01000000000000c800000000000000"
        "8813000000000000000000000000000064000000000000000011223344556677"
        "8899aabbccddeeff105d5b5200000000");
  CHECK(s.checksum == 0x525b5d10u);  // CRC-32C of bytes 12..71, checked independently
  auto back = DecodeState(s, "state");
  REQUIRE(back);
  CHECK(*back == Example());
}

TEST_CASE("R15 state file: magic, version and checksum are checked, naming the field") {
  StateLayout s = EncodeState(Example());
  StateLayout bad = s;
  bad.magic ^= 1;
  auto r = DecodeState(bad, "state");
  REQUIRE(!r);
  CHECK(r.error().rule() == "R15");
  CHECK(r.error().position() == 0);
  bad = s;
  bad.version = 1;  // the 64-byte layout without a boot id: rebuilt
  r = DecodeState(bad, "state");
  REQUIRE(!r);
  CHECK(r.error().position() == 4);
  bad = s;
  bad.log_end_offset++;
  r = DecodeState(bad, "state");
  REQUIRE(!r);
  CHECK(r.error().position() == 72);
  CHECK(r.error().message().find("checksum") != std::string::npos);
  bad = s;
  bad.boot_id[1] ^= 1;  // the boot id is covered by the checksum
  r = DecodeState(bad, "state");
  REQUIRE(!r);
  CHECK(r.error().position() == 72);
}

TEST_CASE("R27 boot id: the kernel's, a test override, and same_boot") {
  {
    ScopedBootId unset(nullptr);
    // The kernel's id is read from /proc; a Linux kernel always has one.
    auto text = ReadFile("/proc/sys/kernel/random/boot_id");
    REQUIRE(!text.empty());
    auto kernel = ParseBootId(std::string(reinterpret_cast<const char*>(text.data()), text.size()));
    REQUIRE(kernel);
    CHECK(CurrentBootId() == *kernel);
    CHECK(*kernel != BootId{});
  }
  CHECK(!ParseBootId("0011"));
  CHECK(!ParseBootId("00112233-4455-6677-8899-aabbccddeeffaa"));
  CHECK(!ParseBootId("0011223x-4455-6677-8899-aabbccddeeff"));
  StateFields f = Example();
  {
    ScopedBootId boot("00112233-4455-6677-8899-aabbccddeeff");
    CHECK(f.same_boot());
  }
  {
    ScopedBootId reboot("ffeeddcc-4455-6677-8899-aabbccddeeff");
    CHECK(!f.same_boot());
  }
  {
    ScopedBootId unknown("not a uuid");  // unknown: nothing is trusted
    CHECK(CurrentBootId() == BootId{});
    StateFields zero;
    CHECK(!zero.same_boot());
  }
  // A writer publishes the boot id it runs on; a reader sees it.
  TempDir tmp;
  auto dir = tmp / "p-0";
  {
    ScopedBootId boot("11111111-2222-3333-4444-555555555555");
    auto w = PartitionWriter::Open(dir, LogConfig{}, true, nullptr);
    REQUIRE(w);
    auto one = MakeBatch(1);
    REQUIRE((*w)->Append(one));
    auto dfd = OpenDirectory(dir, false);
    REQUIRE(dfd);
    auto r = StateFile::OpenForRead(dfd->get());
    REQUIRE(r);
    auto fields = r->Read();
    REQUIRE(fields);
    CHECK(fields->boot_id == *ParseBootId("11111111222233334444555555555555"));
    CHECK(fields->same_boot());
    ScopedBootId reboot("11111111-2222-3333-4444-555555555556");
    CHECK(!r->Read()->same_boot());
  }
}

TEST_CASE("state: seqlock readers never see a torn publication") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  bool recreated = false;
  auto w = StateFile::OpenForWrite(dir->get(), nullptr, StateFields{}, &recreated);
  REQUIRE(w);
  CHECK(recreated);
  auto r = StateFile::OpenForRead(dir->get());
  REQUIRE(r);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, reads{0};
  std::thread reader([&] {
    while (!stop.load()) {
      auto f = r->Read();
      if (!f || f->end_position != static_cast<uint64_t>(f->log_end_offset) * 3 ||
          f->recovery_point != f->log_end_offset)
        bad++;
      reads++;
    }
  });
  for (int64_t i = 1; i <= 200000; ++i) {
    StateFields f;
    f.log_end_offset = i;
    f.end_position = static_cast<uint64_t>(i) * 3;
    f.recovery_point = i;
    w->Publish(f);
  }
  stop = true;
  reader.join();
  CHECK(bad.load() == 0);
  CHECK(reads.load() > 0);
  auto last = r->Read();
  REQUIRE(last);
  CHECK(last->log_end_offset == 200000);
}

TEST_CASE("state: a generation left odd by a dead writer is taken after a bounded wait") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  bool recreated = false;
  auto w = StateFile::OpenForWrite(dir->get(), nullptr, StateFields{}, &recreated);
  REQUIRE(w);
  StateFields f;
  f.log_end_offset = 7;
  f.end_position = 21;
  f.recovery_point = 7;
  const uint32_t g = w->Publish(f);
  auto r = StateFile::OpenForRead(dir->get());
  REQUIRE(r);
  // A writer that died inside Publish: the generation stays odd.
  const std::string path = tmp.path() + "/state";
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  const uint32_t odd = g + 1;
  REQUIRE(::pwrite(fd, &odd, sizeof odd, offsetof(StateLayout, generation)) == sizeof odd);
  // Its fields are whole: the checksum takes them.
  auto read = r->Read();
  REQUIRE(read);
  CHECK(read->log_end_offset == 7);
  // Torn fields under the odd generation: corruption, not a wrong answer.
  const int64_t torn = 8;
  REQUIRE(::pwrite(fd, &torn, sizeof torn, offsetof(StateLayout, log_end_offset)) == sizeof torn);
  ::close(fd);
  auto bad = r->Read();
  CHECK(!bad.has_value());
}

TEST_CASE("state: Wait returns when the generation moves") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  bool recreated = false;
  auto w = StateFile::OpenForWrite(dir->get(), nullptr, StateFields{}, &recreated);
  REQUIRE(w);
  auto r = StateFile::OpenForRead(dir->get());
  REQUIRE(r);
  uint32_t g = r->generation();
  std::thread t([&] {
    StateFields f;
    f.log_end_offset = 1;
    f.end_position = 1;
    w->Publish(f);
  });
  // Without the wake this would block for the full 10 s timeout, and the
  // generation check below would still hold; it is the value that matters.
  r->Wait(g, 10000);
  t.join();
  CHECK(r->generation() != g);
}

namespace {

// Whether thread `tid` of this process is blocked in futex(2) now (its
// /proc syscall file names the call it sleeps in).
bool InFutex(pid_t tid) {
  const std::string path = fmt::format("/proc/self/task/{}/syscall", tid);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[64] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 && std::string(buf).rfind(fmt::format("{} ", SYS_futex), 0) == 0;
}

// Starts a thread waiting on `r` for a publication of kind `what`, and
// returns once it sleeps in the futex.
std::thread Waiter(const StateFile& r, StateFile::WaitFor what, std::atomic<bool>* woke) {
  auto tid = std::make_shared<std::atomic<pid_t>>(0);
  const uint32_t g = r.generation();
  std::thread t([&r, what, woke, g, tid] {
    *tid = static_cast<pid_t>(::syscall(SYS_gettid));
    r.Wait(g, 10000, what);
    *woke = true;
  });
  for (int i = 0; i < 100000 && (tid->load() == 0 || !InFutex(tid->load())); ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  return t;
}

}  // namespace

TEST_CASE("R100 state file: the same fields again wake the waiters for any publication only") {
  TempDir tmp;
  auto dir = OpenDirectory(tmp.path(), false);
  REQUIRE(dir);
  bool recreated = false;
  auto w = StateFile::OpenForWrite(dir->get(), nullptr, StateFields{}, &recreated);
  REQUIRE(w);
  StateFields f;
  f.log_end_offset = 5;
  f.end_position = 15;
  w->Publish(f);
  auto r = StateFile::OpenForRead(dir->get());
  REQUIRE(r);
  std::atomic<bool> field_woke{false}, any_woke{false};
  std::thread field = Waiter(*r, StateFile::WaitFor::kFieldChange, &field_woke);
  std::thread any = Waiter(*r, StateFile::WaitFor::kAnyPublication, &any_woke);
  // The same fields (a high watermark raised): the generation moves, and
  // only the waiter for any publication wakes.
  int woken = -1;
  const uint32_t g = w->Publish(f, &woken);
  CHECK(woken == 1);
  any.join();
  CHECK(any_woke.load());
  CHECK(!field_woke.load());
  CHECK(r->generation() == g);
  // A field changes (an append): the waiter for a field change wakes.
  f.log_end_offset = 6;
  f.end_position = 18;
  w->Publish(f, &woken);
  CHECK(woken == 1);
  field.join();
  CHECK(field_woke.load());
  auto read = r->Read();
  REQUIRE(read);
  CHECK(read->log_end_offset == 6);
}
