// PartitionReader property tests: for random workloads (batch and segment
// sizes down to one batch per segment, appends spanning rolls, several
// writers, readers starting anywhere and interleaved with the appends at
// every point the file seam offers), every reader hands out exactly the
// committed sequence: no gap, no skip, no repeat.
//
// Seeds: MQ_TEST_SEED=<n> repeats one seed; MQ_READER_SEEDS=<n> sets how many
// seeds each property runs (default 10). Each seed is printed.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "mq/file.h"
#include "mq/partition.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

std::vector<uint64_t> Seeds() {
  if (const char* s = std::getenv("MQ_TEST_SEED")) return {std::strtoull(s, nullptr, 10)};
  int n = 10;
  if (const char* s = std::getenv("MQ_READER_SEEDS")) n = std::atoi(s);
  std::random_device rd;
  std::vector<uint64_t> seeds;
  for (int i = 0; i < n; ++i) seeds.push_back((uint64_t{rd()} << 32) | rd());
  return seeds;
}

// A file system whose reads may first run `hook`: the test appends from
// there, between a reader's look at the committed end and its next read.
class HookFs : public FileSystemWrapper {
 public:
  std::function<void()> hook;

  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    auto f = FileSystem::Default()->Open(dir_fd, name, mode);
    if (!f) return f.error();
    return std::unique_ptr<File>(new HookFile(std::move(*f), this));
  }
  Status Rename(int d, const std::string& a, const std::string& b) override {
    return FileSystem::Default()->Rename(d, a, b);
  }
  Status Unlink(int d, const std::string& n) override {
    return FileSystem::Default()->Unlink(d, n);
  }
  Status SyncDir(int d) override { return FileSystem::Default()->SyncDir(d); }

 private:
  class HookFile : public File {
   public:
    HookFile(std::unique_ptr<File> f, HookFs* fs) : f_(std::move(f)), fs_(fs) {}
    Status WriteAt(uint64_t o, std::span<const std::byte> d) override { return f_->WriteAt(o, d); }
    Result<size_t> ReadAt(uint64_t o, std::span<std::byte> d) override {
      if (fs_->hook) fs_->hook();
      return f_->ReadAt(o, d);
    }
    Result<uint64_t> Size() override {
      if (fs_->hook) fs_->hook();
      return f_->Size();
    }
    Status Truncate(uint64_t s) override { return f_->Truncate(s); }
    Result<FileInfo> Stat() override { return f_->Stat(); }
    Status Sync() override { return f_->Sync(); }
    int fd() const override { return f_->fd(); }

   private:
    std::unique_ptr<File> f_;
    HookFs* fs_;
  };
};

// What the writers committed: the CRC of the batch at each base offset (the
// CRC does not cover baseOffset, so it is the builder's), and its size.
struct Committed {
  std::map<int64_t, std::pair<uint32_t, int64_t>> batches;  // base -> (crc, last)
};

// Appends `n` random batches in one Append call (so one call can span
// several rolls) and records them. No Catch macros: writer threads call it.
Status AppendRandomTo(PartitionWriter& w, std::mt19937_64& rng, int n, Committed* c, int64_t* ts) {
  std::vector<std::byte> all;
  std::vector<std::pair<uint32_t, int>> built;  // (crc, count)
  for (int i = 0; i < n; ++i) {
    int count = std::uniform_int_distribution<int>(1, 12)(rng);
    size_t value = std::uniform_int_distribution<size_t>(1, 300)(rng);
    auto b = MakeBatch(count, (*ts)++, value);
    BatchHeader h;
    if (!ProbeBatch(b, &h, {}, "built", 0)) return Status(Code::kInternal, "built a bad batch");
    built.emplace_back(h.crc, count);
    all.insert(all.end(), b.begin(), b.end());
  }
  auto r = w.Append(all);
  if (!r) return r.error();
  int64_t base = r->base_offset;
  for (auto [crc, count] : built) {
    c->batches[base] = {crc, base + count - 1};
    base += count;
  }
  return Status::Ok();
}

void AppendRandom(PartitionWriter& w, std::mt19937_64& rng, int n, Committed* c, int64_t* ts) {
  Status s = AppendRandomTo(w, rng, n, c, ts);
  INFO(s.message());
  REQUIRE(s.ok());
}

// One reader's view: every batch it hands out must be the next committed
// one after the last it handed out.
struct Follower {
  std::unique_ptr<PartitionReader> reader;
  int64_t next = -1;  // offset the next batch must start at; -1 before the first
  int64_t start = 0;
  uint64_t batches = 0;

  // Reads until the committed end as the reader sees it (or `max` batches).
  void Drain(const Committed& c, uint64_t seed, int max = 1 << 30) {
    for (int i = 0; i < max; ++i) {
      auto b = reader->Next();
      INFO("seed " << seed << ": " << (b ? "" : b.error().message()));
      REQUIRE(b);
      if (!*b) return;
      const BatchHeader& h = (*b)->header();
      if (next < 0) {
        // The first batch holds the start offset (Seek's promise).
        INFO("seed " << seed << ": first batch " << h.base_offset << ".." << h.last_offset()
                     << " for start " << start);
        REQUIRE(h.base_offset <= std::max(start, int64_t{0}));
        REQUIRE(h.last_offset() >= start);
      } else {
        INFO("seed " << seed << ": after offset " << next - 1 << " came batch " << h.base_offset);
        REQUIRE(h.base_offset == next);
      }
      auto it = c.batches.find(h.base_offset);
      INFO("seed " << seed << ": batch at " << h.base_offset << " was never committed");
      REQUIRE(it != c.batches.end());
      REQUIRE(it->second.first == h.crc);
      REQUIRE(it->second.second == h.last_offset());
      next = h.last_offset() + 1;
      ++batches;
    }
  }
};

// A new reader of `dir` through `fs`, from the beginning or from a random
// offset below `end`.
Follower NewReader(const std::string& dir, FileSystem* fs, std::mt19937_64& rng, int64_t end) {
  ReadOptions options;
  options.fs = fs;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(r);
  Follower f{std::move(*r)};
  if (end > 0 && std::uniform_int_distribution<int>(0, 1)(rng)) {
    f.start = std::uniform_int_distribution<int64_t>(0, end - 1)(rng);
    REQUIRE(f.reader->Seek(f.start).ok());
  }
  return f;
}

}  // namespace

// F1 as a rule: a reader that has seen the committed end, then learns of a
// later one (end_offset, WaitForAppend), finishes its segment before it
// moves to the next. Deterministic: no timing involved.
TEST_CASE("reader: an append spanning a roll after the reader reached the end loses nothing") {
  TempDir tmp;
  std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 4096;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  Committed c;
  int64_t ts = 1000;
  std::mt19937_64 rng(1);
  AppendRandom(**w, rng, 1, &c, &ts);
  auto r = PartitionReader::Open(dir);
  REQUIRE(r);
  Follower f{std::move(*r)};
  f.Drain(c, 0);
  // One call appends the rest of segment 0 and goes on into later ones.
  AppendRandom(**w, rng, 40, &c, &ts);
  REQUIRE((*w)->log_end_offset() > f.next);
  (void)f.reader->end_offset();  // what a follower does before Next()
  f.Drain(c, 0);
  CHECK(f.next == (*w)->log_end_offset());
  // The same through WaitForAppend.
  AppendRandom(**w, rng, 40, &c, &ts);
  REQUIRE(f.reader->WaitForAppend(f.next, 0));
  f.Drain(c, 0);
  CHECK(f.next == (*w)->log_end_offset());
}

TEST_CASE("reader property: interleaved appends, rolls and reads hand out the committed sequence") {
  for (uint64_t seed : Seeds()) {
    std::printf("reader property (interleaved) seed %llu\n", static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    TempDir tmp;
    std::string dir = tmp / "t-0";
    LogConfig config;
    // From one batch per segment to a few dozen.
    config.segment_bytes = std::uniform_int_distribution<uint64_t>(100, 20000)(rng);
    config.index_interval_bytes = std::uniform_int_distribution<uint32_t>(1, 4096)(rng);
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w);
    Committed c;
    int64_t ts = 1000;
    HookFs fs;
    bool in_hook = false;
    double hook_p = std::uniform_real_distribution<double>(0, 0.3)(rng);
    int hook_budget = 60;  // appends from inside reads, so readers catch up
    fs.hook = [&] {
      if (in_hook || hook_budget == 0 ||
          std::uniform_real_distribution<double>(0, 1)(rng) >= hook_p)
        return;
      --hook_budget;
      in_hook = true;
      AppendRandom(**w, rng, std::uniform_int_distribution<int>(1, 8)(rng), &c, &ts);
      in_hook = false;
    };
    std::vector<Follower> followers;
    int steps = std::uniform_int_distribution<int>(50, 300)(rng);
    for (int step = 0; step < steps; ++step) {
      int action = std::uniform_int_distribution<int>(0, 9)(rng);
      if (action <= 2 || followers.empty()) {
        AppendRandom(**w, rng, std::uniform_int_distribution<int>(1, 10)(rng), &c, &ts);
      }
      if (action == 3 && followers.size() < 4) {
        // A new reader, from the beginning or from a random committed offset.
        followers.push_back(NewReader(dir, &fs, rng, (*w)->log_end_offset()));
      }
      if (followers.empty()) continue;
      Follower& f = followers[std::uniform_int_distribution<size_t>(0, followers.size() - 1)(rng)];
      switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
        case 0:
          f.Drain(c, seed, std::uniform_int_distribution<int>(1, 5)(rng));
          break;
        case 1:
          f.Drain(c, seed);
          break;
        case 2:
          (void)f.reader->end_offset();
          break;
        case 3:
          (void)f.reader->WaitForAppend(std::max<int64_t>(f.next, 0), 0);
          break;
      }
    }
    // Every reader reaches the end having missed nothing.
    fs.hook = nullptr;
    for (auto& f : followers) {
      f.Drain(c, seed);
      INFO("seed " << seed);
      CHECK(f.next == (*w)->log_end_offset());
    }
  }
}

TEST_CASE("reader property: concurrent writers and following readers") {
  for (uint64_t seed : Seeds()) {
    std::printf("reader property (concurrent) seed %llu\n", static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    TempDir tmp;
    std::string dir = tmp / "t-0";
    LogConfig config;
    config.segment_bytes = std::uniform_int_distribution<uint64_t>(100, 20000)(rng);
    int writers = std::uniform_int_distribution<int>(1, 8)(rng);
    int readers = std::uniform_int_distribution<int>(1, 3)(rng);
    int appends = std::uniform_int_distribution<int>(20, 80)(rng);
    {
      auto w = PartitionWriter::Open(dir, config, true, nullptr);
      REQUIRE(w);
    }
    // Writers record what they committed; merged afterwards.
    std::vector<Committed> committed(static_cast<size_t>(writers));
    std::vector<std::string> errors(static_cast<size_t>(writers + readers));
    std::atomic<int> writing{writers};
    std::vector<std::thread> threads;
    for (int i = 0; i < writers; ++i) {
      threads.emplace_back([&, i] {
        std::mt19937_64 wrng(seed + 1 + static_cast<uint64_t>(i));
        auto w = PartitionWriter::Open(dir, config, true, nullptr);
        if (!w) {
          errors[static_cast<size_t>(i)] = w.error().message();
        } else {
          int64_t ts = 1000;
          for (int k = 0; k < appends; ++k) {
            Status st = AppendRandomTo(**w, wrng, std::uniform_int_distribution<int>(1, 6)(wrng),
                                       &committed[static_cast<size_t>(i)], &ts);
            if (!st.ok()) {
              errors[static_cast<size_t>(i)] = st.message();
              break;
            }
          }
        }
        --writing;
      });
    }
    // Followers: wait for appends, read what is committed, check order and
    // continuity as they go; CRCs are checked against the writers' records
    // once everything is written.
    std::vector<std::vector<std::tuple<int64_t, int64_t, uint32_t>>> seen(
        static_cast<size_t>(readers));
    for (int i = 0; i < readers; ++i) {
      threads.emplace_back([&, i] {
        auto& err = errors[static_cast<size_t>(writers + i)];
        auto r = PartitionReader::Open(dir);
        if (!r) {
          err = r.error().message();
          return;
        }
        int64_t next = 0;
        for (;;) {
          bool done = writing.load() == 0;
          for (;;) {
            auto b = (*r)->Next();
            if (!b) {
              err = b.error().message();
              return;
            }
            if (!*b) break;
            const BatchHeader& h = (*b)->header();
            if (h.base_offset != next) {
              err = fmt::format("after offset {} came batch {}", next - 1, h.base_offset);
              return;
            }
            seen[static_cast<size_t>(i)].emplace_back(h.base_offset, h.last_offset(), h.crc);
            next = h.last_offset() + 1;
          }
          if (done && next >= (*r)->end_offset()) return;
          (*r)->WaitForAppend(next, 5);
        }
      });
    }
    for (auto& t : threads) t.join();
    INFO("seed " << seed);
    for (const auto& e : errors) CHECK(e == "");
    Committed all;
    for (const auto& c : committed) all.batches.insert(c.batches.begin(), c.batches.end());
    int64_t end = all.batches.empty() ? 0 : all.batches.rbegin()->second.second + 1;
    for (const auto& s : seen) {
      REQUIRE(s.size() == all.batches.size());
      for (auto [base, last, crc] : s) {
        auto it = all.batches.find(base);
        REQUIRE(it != all.batches.end());
        CHECK(it->second == std::make_pair(crc, last));
      }
      CHECK((s.empty() ? 0 : std::get<1>(s.back()) + 1) == end);
    }
  }
}

// A follower's log (PartitionWriter::AppendReplicated): the leader's batches
// arrive in fetches of random sizes, into segments of a random size that
// need not match the leader's, some of them from inside a reader's reads;
// every reader hands out the leader's sequence.
TEST_CASE("reader property: readers of a follower's log hand out the leader's sequence") {
  for (uint64_t seed : Seeds()) {
    std::printf("reader property (follower) seed %llu\n", static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    TempDir tmp;
    Committed c;
    int64_t ts = 1000;
    std::vector<std::vector<std::byte>> fetched;  // the leader's batches, in order
    {
      auto leader = PartitionWriter::Open(tmp / "leader-0", LogConfig{}, true, nullptr);
      REQUIRE(leader);
      for (int i = 0; i < 30; ++i)
        AppendRandom(**leader, rng, std::uniform_int_distribution<int>(1, 6)(rng), &c, &ts);
      auto r = PartitionReader::Open(tmp / "leader-0");
      REQUIRE(r);
      for (;;) {
        auto b = (*r)->Next();
        REQUIRE(b);
        if (!*b) break;
        fetched.emplace_back((*b)->bytes().begin(), (*b)->bytes().end());
      }
    }
    LogConfig config;
    config.segment_bytes = std::uniform_int_distribution<uint64_t>(100, 20000)(rng);
    config.index_interval_bytes = std::uniform_int_distribution<uint32_t>(1, 4096)(rng);
    const std::string dir = tmp / "follower-0";
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    REQUIRE(w);
    size_t sent = 0;
    auto fetch = [&] {
      if (sent == fetched.size()) return;
      size_t n = std::min(fetched.size() - sent, std::uniform_int_distribution<size_t>(1, 8)(rng));
      std::vector<std::byte> bytes;
      for (size_t i = sent; i < sent + n; ++i)
        bytes.insert(bytes.end(), fetched[i].begin(), fetched[i].end());
      auto r = (*w)->AppendReplicated(bytes);
      INFO("seed " << seed << ": " << (r ? "" : r.error().message()));
      REQUIRE(r);
      sent += n;
    };
    HookFs fs;
    bool in_hook = false;
    double hook_p = std::uniform_real_distribution<double>(0, 0.3)(rng);
    fs.hook = [&] {
      if (in_hook || std::uniform_real_distribution<double>(0, 1)(rng) >= hook_p) return;
      in_hook = true;
      fetch();
      in_hook = false;
    };
    std::vector<Follower> readers;
    while (sent < fetched.size() || readers.size() < 2) {
      int action = std::uniform_int_distribution<int>(0, 5)(rng);
      if (action <= 1) fetch();
      if (action == 2 && readers.size() < 4) {
        readers.push_back(NewReader(dir, &fs, rng, (*w)->log_end_offset()));
      }
      if (readers.empty()) continue;
      Follower& f = readers[std::uniform_int_distribution<size_t>(0, readers.size() - 1)(rng)];
      if (std::uniform_int_distribution<int>(0, 1)(rng))
        f.Drain(c, seed, std::uniform_int_distribution<int>(1, 5)(rng));
      else
        f.Drain(c, seed);
    }
    fs.hook = nullptr;
    for (auto& f : readers) {
      f.Drain(c, seed);
      INFO("seed " << seed);
      CHECK(f.next == (*w)->log_end_offset());
    }
    CHECK((*w)->log_end_offset() == c.batches.rbegin()->second.second + 1);
  }
}
