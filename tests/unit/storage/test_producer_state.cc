// ProducerStateTable: the idempotent producer rules of format-spec/producer.md
// (P1-P7) and the snapshot file.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "exit_code.h"  // tools/common: a status's exit status
#include "mq/file.h"
#include "storage/producer_state.h"

namespace mq {
namespace {

BatchHeader Batch(int64_t pid, int16_t epoch, int32_t base_seq, int32_t count,
                  int64_t base_offset = 0) {
  BatchHeader h;
  h.producer_id = pid;
  h.producer_epoch = epoch;
  h.base_sequence = base_seq;
  h.last_offset_delta = count - 1;
  h.records_count = count;
  h.base_offset = base_offset;
  h.max_timestamp = 1700000000000 + base_offset;
  return h;
}

// Appends through the table as a writer would: check, then update.
Result<std::optional<AppendResult>> Append(ProducerStateTable& t, BatchHeader h,
                                           int64_t* next_offset) {
  auto r = t.CheckAppend(h);
  if (r && !r->has_value()) {
    h.base_offset = *next_offset;
    *next_offset += h.last_offset_delta + 1;
    t.Update(h);
  }
  return r;
}

struct TempDir {
  std::string path;
  UniqueFd fd;
  TempDir() {
    char tmpl[] = "/tmp/mq-pstate-XXXXXX";
    path = ::mkdtemp(tmpl);
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    DIR* d = ::opendir(path.c_str());
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
};

std::string SnapshotPath(const TempDir& d, int64_t offset) {
  char name[64];
  std::snprintf(name, sizeof name, "%020lld.snapshot", static_cast<long long>(offset));
  return d.path + "/" + name;
}

}  // namespace

TEST_CASE("R7 producer: an idempotent batch without epoch or sequence is refused") {
  ProducerStateTable t;
  auto r = t.CheckAppend(Batch(7, 0, -1, 1));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Code::kInvalidArgument);
  CHECK_THAT(r.error().message(), Catch::Contains("R7"));
  CHECK_FALSE(t.CheckAppend(Batch(7, -1, 0, 1)).has_value());
}

TEST_CASE("P1 no producer: batches without a producer id are never checked") {
  ProducerStateTable t;
  BatchHeader h = Batch(-1, -1, -1, 3);
  auto r = t.CheckAppend(h);
  REQUIRE(r.has_value());
  CHECK_FALSE(r->has_value());
  t.Update(h);
  CHECK(t.entries().empty());
}

TEST_CASE("P5 unknown producer: its first batch may start at any sequence") {
  ProducerStateTable t;
  int64_t next = 0;
  auto r = Append(t, Batch(3, 0, 41, 2), &next);
  REQUIRE(r.has_value());
  CHECK_FALSE(r->has_value());
  REQUIRE(t.LastSequence(3).has_value());
  CHECK(*t.LastSequence(3) == 42);
  CHECK_FALSE(t.LastSequence(4).has_value());
}

TEST_CASE("P2 duplicate: any of the last 5 batches is recognised with its offsets") {
  ProducerStateTable t;
  int64_t next = 100;
  std::vector<int64_t> bases;
  for (int i = 0; i < 7; ++i) {
    bases.push_back(next);
    auto r = Append(t, Batch(9, 0, i * 3, 3), &next);
    REQUIRE(r.has_value());
    REQUIRE_FALSE(r->has_value());
  }
  // Batches 2..6 are cached; each resend is a duplicate with its offsets.
  for (int i = 2; i < 7; ++i) {
    auto r = t.CheckAppend(Batch(9, 0, i * 3, 3));
    REQUIRE(r.has_value());
    REQUIRE(r->has_value());
    CHECK((*r)->duplicate);
    CHECK((*r)->base_offset == bases[i]);
    CHECK((*r)->last_offset == bases[i] + 2);
  }
  // Batch 1 fell out of the cache: it is no longer provably a duplicate.
  auto old = t.CheckAppend(Batch(9, 0, 3, 3));
  REQUIRE_FALSE(old.has_value());
  CHECK(old.error().code() == Code::kOutOfOrder);
  // Same first sequence but a different length is not a duplicate.
  CHECK_FALSE(t.CheckAppend(Batch(9, 0, 18, 2)).has_value());
}

TEST_CASE("P3 sequence: a gap or a replayed sequence is out of order") {
  ProducerStateTable t;
  int64_t next = 0;
  REQUIRE(Append(t, Batch(1, 0, 0, 5), &next).has_value());
  auto gap = t.CheckAppend(Batch(1, 0, 6, 1));
  REQUIRE_FALSE(gap.has_value());
  CHECK(gap.error().code() == Code::kOutOfOrder);
  CHECK(cli::ExitCode(gap.error()) == 65);
  CHECK_THAT(gap.error().message(), Catch::Contains("expected 5"));
  auto back = t.CheckAppend(Batch(1, 0, 2, 1));
  REQUIRE_FALSE(back.has_value());
  CHECK(back.error().code() == Code::kOutOfOrder);
  auto ok = t.CheckAppend(Batch(1, 0, 5, 1));
  REQUIRE(ok.has_value());
  CHECK_FALSE(ok->has_value());
}

TEST_CASE("P4 epoch: an older epoch is fenced, a newer one restarts at 0") {
  ProducerStateTable t;
  int64_t next = 0;
  REQUIRE(Append(t, Batch(5, 2, 0, 4), &next).has_value());
  auto fenced = t.CheckAppend(Batch(5, 1, 4, 1));
  REQUIRE_FALSE(fenced.has_value());
  CHECK(fenced.error().code() == Code::kOutOfOrder);
  CHECK_THAT(fenced.error().message(), Catch::Contains("older"));

  auto bad_start = t.CheckAppend(Batch(5, 3, 4, 1));
  REQUIRE_FALSE(bad_start.has_value());
  CHECK(bad_start.error().code() == Code::kOutOfOrder);

  auto fresh = Append(t, Batch(5, 3, 0, 2), &next);
  REQUIRE(fresh.has_value());
  CHECK_FALSE(fresh->has_value());
  CHECK(t.entries().at(5).epoch == 3);
  CHECK(t.entries().at(5).batches.size() == 1);  // the old epoch's cache is gone
  // Resending the old epoch's first batch is now fenced, not a duplicate.
  CHECK_FALSE(t.CheckAppend(Batch(5, 2, 0, 4)).has_value());
}

TEST_CASE("P6 wrap: the sequence after INT32_MAX is 0") {
  ProducerStateTable t;
  int64_t next = 0;
  REQUIRE(Append(t, Batch(2, 0, INT32_MAX - 1, 2), &next).has_value());
  REQUIRE(t.LastSequence(2).has_value());
  CHECK(*t.LastSequence(2) == INT32_MAX);
  auto r = Append(t, Batch(2, 0, 0, 3), &next);
  REQUIRE(r.has_value());
  CHECK_FALSE(r->has_value());
  CHECK(*t.LastSequence(2) == 2);
  // A batch that itself crosses the wrap.
  ProducerStateTable u;
  REQUIRE(Append(u, Batch(2, 0, INT32_MAX, 3), &next).has_value());
  CHECK(*u.LastSequence(2) == 1);
  auto dup = u.CheckAppend(Batch(2, 0, INT32_MAX, 3));
  REQUIRE(dup.has_value());
  REQUIRE(dup->has_value());
  CHECK((*dup)->duplicate);
  CHECK(u.CheckAppend(Batch(2, 0, 2, 1)).has_value());
}

TEST_CASE("P7 snapshot: a round trip keeps every producer and its cached batches") {
  TempDir d;
  ProducerStateTable t;
  int64_t next = 0;
  for (int i = 0; i < 7; ++i) REQUIRE(Append(t, Batch(11, 1, i * 2, 2), &next).has_value());
  REQUIRE(Append(t, Batch(0, 0, 5, 1), &next).has_value());  // producer id 0 is real
  BatchHeader epoch_only = Batch(12, 4, -1, 1);
  epoch_only.attributes = 0x30;  // a control batch: epoch without sequence
  t.Update(epoch_only);
  REQUIRE(t.WriteSnapshot(d.fd.get(), next).ok());

  // Kafka's layout: 10-byte header, 46 bytes per entry.
  size_t entries = 5 + 1 + 1;
  auto files = d.Files();
  REQUIRE(files.size() == 1);
  FILE* f = std::fopen(SnapshotPath(d, next).c_str(), "rb");
  REQUIRE(f != nullptr);
  std::fseek(f, 0, SEEK_END);
  CHECK(static_cast<size_t>(std::ftell(f)) == 10 + 46 * entries);
  std::fclose(f);

  ProducerStateTable u;
  auto loaded = u.LoadSnapshot(d.fd.get(), next);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == next);
  REQUIRE(u.entries().size() == t.entries().size());
  for (const auto& [pid, e] : t.entries()) {
    const ProducerEntry& v = u.entries().at(pid);
    CHECK(v.epoch == e.epoch);
    REQUIRE(v.batches.size() == e.batches.size());
    for (size_t i = 0; i < e.batches.size(); ++i) {
      CHECK(v.batches[i].first_sequence == e.batches[i].first_sequence);
      CHECK(v.batches[i].last_sequence == e.batches[i].last_sequence);
      CHECK(v.batches[i].last_offset == e.batches[i].last_offset);
      CHECK(v.batches[i].offset_delta == e.batches[i].offset_delta);
      CHECK(v.batches[i].timestamp == e.batches[i].timestamp);
    }
  }
  // The reloaded table still recognises duplicates and gaps.
  auto dup = u.CheckAppend(Batch(11, 1, 8, 2));
  REQUIRE(dup.has_value());
  REQUIRE(dup->has_value());
  CHECK((*dup)->duplicate);
  CHECK_FALSE(u.CheckAppend(Batch(11, 1, 15, 1)).has_value());
}

TEST_CASE("P7 snapshot: a corrupt newest snapshot is ignored for an older one") {
  TempDir d;
  ProducerStateTable t;
  int64_t next = 0;
  REQUIRE(Append(t, Batch(1, 0, 0, 3), &next).has_value());
  REQUIRE(t.WriteSnapshot(d.fd.get(), next).ok());
  const int64_t first = next;
  REQUIRE(Append(t, Batch(1, 0, 3, 3), &next).has_value());
  REQUIRE(t.WriteSnapshot(d.fd.get(), next).ok());

  // Flip one byte inside an entry of the newest: its CRC no longer matches.
  int fd = ::open(SnapshotPath(d, next).c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  unsigned char byte = 0;
  REQUIRE(::pread(fd, &byte, 1, 20) == 1);
  byte ^= 0x40;
  REQUIRE(::pwrite(fd, &byte, 1, 20) == 1);
  ::close(fd);

  ProducerStateTable u;
  auto loaded = u.LoadSnapshot(d.fd.get(), next);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == first);
  CHECK(*u.LastSequence(1) == 2);

  // With every snapshot unreadable the caller replays from offset 0.
  REQUIRE(::truncate(SnapshotPath(d, first).c_str(), 7) == 0);
  ProducerStateTable w;
  auto none = w.LoadSnapshot(d.fd.get(), next);
  REQUIRE(none.has_value());
  CHECK(*none == 0);
  CHECK(w.entries().empty());
}

TEST_CASE("P7 snapshot: snapshots past the log end are removed, two are kept") {
  TempDir d;
  ProducerStateTable t;
  int64_t next = 0;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(Append(t, Batch(1, 0, i, 1), &next).has_value());
    REQUIRE(t.WriteSnapshot(d.fd.get(), next).ok());
  }
  auto files = d.Files();
  REQUIRE(files.size() == 2);
  CHECK(files[0] == "00000000000000000003.snapshot");
  CHECK(files[1] == "00000000000000000004.snapshot");

  // The log was truncated to offset 3: the snapshot at 4 is stale.
  ProducerStateTable u;
  auto loaded = u.LoadSnapshot(d.fd.get(), 3);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == 3);
  CHECK(*u.LastSequence(1) == 2);
  CHECK(d.Files() == std::vector<std::string>{"00000000000000000003.snapshot"});
}

TEST_CASE("P7 snapshot: the worked example of producer.md, byte for byte") {
  TempDir d;
  ProducerStateTable t;
  BatchHeader h = Batch(7, 0, 100, 3, 42);
  h.max_timestamp = 1700000000000;
  t.Update(h);
  REQUIRE(t.WriteSnapshot(d.fd.get(), 45).ok());
  FILE* f = std::fopen(SnapshotPath(d, 45).c_str(), "rb");
  REQUIRE(f != nullptr);
  unsigned char buf[128];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  std::string hex;
  for (size_t i = 0; i < n; ++i) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", buf[i]);
    hex += two;
  }
  CHECK(hex ==
        "00014e8cf3cc00000001"
        "0000000000000007000000000066000000000000002c00000002"
        "0000018bcfe56800ffffffffffffffffffffffff");
}

TEST_CASE("P7 snapshot: an empty directory loads as an empty table") {
  TempDir d;
  ProducerStateTable t;
  auto loaded = t.LoadSnapshot(d.fd.get(), 100);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == 0);
  CHECK(t.entries().empty());
}

}  // namespace mq
