// Every failure beneath the log, one at a time (as LevelDB's fault-injection
// Env and SQLite's aSyscall[] tests): a FileSystem that counts every call
// through the seam fails the k-th one, for k = 1, 2, ... until a scripted
// workload completes without reaching k. For each k: nothing crashes; the
// failure surfaces as a non-OK Status from the operation that made the call
// (unless the call is one of the documented best-effort or derived-data
// paths listed in Absorbable); and a fresh open with a healthy file system
// recovers every acknowledged append, in order, byte for byte, plus at most
// a prefix of the one append the failure interrupted.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "mq/file.h"
#include "mq/group.h"
#include "mq/partition.h"
#include "mq/topic.h"
#include "test_support.h"

using namespace mq;
using namespace mq::test;

namespace {

using Bytes_ = std::vector<std::byte>;

// Counts every call through the seam and fails call number `fail_at`
// (1-based; 0: none) with `err` (writes, creations and truncations may get
// ENOSPC; fsync always EIO). fsync itself is not passed to the disk: the
// sweep checks what a process sees, not power loss, and thousands of runs
// must stay fast.
class CountingFs : public FileSystemWrapper {
 public:
  CountingFs(int64_t fail_at, int err) : fail_at_(fail_at), err_(err) {}
  // Fails the first call named exactly `op` instead (EIO).
  explicit CountingFs(std::string op) : fail_at_(0), err_(EIO), fail_op_(std::move(op)) {}

  int64_t calls() const { return calls_; }
  bool fired() const { return !fired_op_.empty(); }
  const std::string& fired_op() const { return fired_op_; }
  const std::string& fired_step() const { return fired_step_; }
  std::string step;  // what the workload is doing, for messages

  // Counts a call named `op`; the failure when it is the chosen one.
  Status Hit(const std::string& op, bool may_enospc) {
    ++calls_;
    const bool chosen = fail_op_.empty() ? calls_ == fail_at_ : !fired() && op == fail_op_;
    if (!chosen) return Status::Ok();
    fired_op_ = op;
    fired_step_ = step;
    const int e = may_enospc ? err_ : EIO;
    return ErrnoStatus("injected failure of " + op, e);
  }

  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override {
    MQ_RETURN_IF_ERROR(Hit("open " + name, mode == kCreate || mode == kCreateExclusive));
    auto f = target()->Open(dir_fd, name, mode);
    if (!f) return f.error();
    return std::unique_ptr<File>(new CountedFile(std::move(*f), name, this));
  }
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override {
    MQ_RETURN_IF_ERROR(Hit("rename " + from + " " + to, false));
    return target()->Rename(dir_fd, from, to);
  }
  Status Unlink(int dir_fd, const std::string& name) override {
    MQ_RETURN_IF_ERROR(Hit("unlink " + name, false));
    return target()->Unlink(dir_fd, name);
  }
  Status SyncDir(int) override { return Hit("fsync dir", false); }
  Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) override {
    MQ_RETURN_IF_ERROR(Hit("opendir " + path, create));
    return target()->OpenDir(at_fd, path, create);
  }
  Status RemoveDir(int dir_fd, const std::string& name) override {
    MQ_RETURN_IF_ERROR(Hit("rmdir " + name, false));
    return target()->RemoveDir(dir_fd, name);
  }
  Result<std::vector<std::string>> ListDir(int dir_fd) override {
    MQ_RETURN_IF_ERROR(Hit("listdir", false));
    return target()->ListDir(dir_fd);
  }
  Result<FileInfo> StatAt(int dir_fd, const std::string& name) override {
    MQ_RETURN_IF_ERROR(Hit("lstat " + name, false));
    return target()->StatAt(dir_fd, name);
  }
  Result<Mapping> Map(int fd, size_t size, bool writable) override {
    MQ_RETURN_IF_ERROR(Hit("mmap", false));
    return target()->Map(fd, size, writable);
  }
  Status Lock(int fd, LockMode mode, LockWait wait) override {
    MQ_RETURN_IF_ERROR(Hit("flock", false));
    return target()->Lock(fd, mode, wait);
  }
  Status Unlock(int fd) override {
    MQ_RETURN_IF_ERROR(Hit("unlock", false));
    return target()->Unlock(fd);
  }

 private:
  class CountedFile : public File {
   public:
    CountedFile(std::unique_ptr<File> f, std::string name, CountingFs* fs)
        : f_(std::move(f)), name_(std::move(name)), fs_(fs) {}
    Status WriteAt(uint64_t o, std::span<const std::byte> d) override {
      MQ_RETURN_IF_ERROR(fs_->Hit("write " + name_, true));
      return f_->WriteAt(o, d);
    }
    Result<size_t> ReadAt(uint64_t o, std::span<std::byte> d) override {
      MQ_RETURN_IF_ERROR(fs_->Hit("read " + name_, false));
      return f_->ReadAt(o, d);
    }
    Result<uint64_t> Size() override {
      MQ_RETURN_IF_ERROR(fs_->Hit("size " + name_, false));
      return f_->Size();
    }
    Result<FileInfo> Stat() override {
      MQ_RETURN_IF_ERROR(fs_->Hit("fstat " + name_, false));
      return f_->Stat();
    }
    Status Truncate(uint64_t s) override {
      MQ_RETURN_IF_ERROR(fs_->Hit("truncate " + name_, true));
      return f_->Truncate(s);
    }
    Status Sync() override { return fs_->Hit("fsync " + name_, false); }
    int fd() const override { return f_->fd(); }

   private:
    std::unique_ptr<File> f_;
    std::string name_;
    CountingFs* fs_;
  };

  int64_t fail_at_;
  int err_;
  int64_t calls_ = 0;
  std::string fail_op_;
  std::string fired_op_, fired_step_;
};

// Calls whose failure the code absorbs by design, each documented where it
// is made: cleanup that is best effort (the next open redoes it), and
// derived data read as a hint (indexes: the log is scanned instead;
// snapshots: an older one is tried or the log replayed).
bool Absorbable(const std::string& op) {
  auto has = [&](const char* s) { return op.find(s) != std::string::npos; };
  if (op.starts_with("unlink ")) return true;           // stale temporaries, old snapshots
  if (op.starts_with("listdir")) return true;           // snapshot pruning after a write
  if (has(".index") || has(".timeindex")) return true;  // hints, rebuilt when wrong
  if (has(".snapshot")) return true;                    // derived (producer.md §10.2, P7)
  if (op == "mmap") return true;                        // of an index: a hint
  if (op == "unlock") return true;                      // LockGuard: the lock goes with the fd
  return false;
}

// Splits concatenated batches.
std::vector<Bytes_> Split(const Bytes_& bytes) {
  std::vector<Bytes_> out;
  for (size_t at = 0; at < bytes.size();) {
    auto view = BatchView::Parse(Bytes(bytes.data() + at, bytes.size() - at), {}, "split", at);
    REQUIRE(view);
    size_t n = static_cast<size_t>(view->header().size_bytes());
    out.emplace_back(bytes.begin() + static_cast<ptrdiff_t>(at),
                     bytes.begin() + static_cast<ptrdiff_t>(at + n));
    at += n;
  }
  return out;
}

int64_t LastOffset(const Bytes_& batch) {
  auto view = BatchView::Parse(Bytes(batch.data(), batch.size()), {}, "model", 0);
  REQUIRE(view);
  return view->header().last_offset();
}

// What the workload was told: the batches acknowledged, in order, and the
// states the log may be in if the operation that failed had effects.
struct Model {
  std::vector<Bytes_> acked;
  // Set while an operation runs: what the log may also be after it fails.
  std::vector<Bytes_> in_flight;         // an append: any prefix of these may be kept
  std::optional<int64_t> truncating_to;  // TruncateTo: the cut may have happened
  std::optional<int64_t> committed;      // the group's acknowledged commit
  std::optional<int64_t> committing;     // a commit in flight
};

// Every batch of the partition, read with `fs`.
Result<std::vector<Bytes_>> ReadPartition(const std::string& dir, FileSystem* fs) {
  ReadOptions options;
  options.fs = fs;
  options.offsets = OffsetPolicy::kGapsAllowed;
  auto r = PartitionReader::Open(dir, options);
  if (!r) return r.error();
  std::vector<Bytes_> out;
  for (;;) {
    auto b = (*r)->Next();
    if (!b) return b.error();
    if (!*b) break;
    Bytes bytes = (*b)->bytes();
    out.emplace_back(bytes.begin(), bytes.end());
  }
  return out;
}

struct Outcome {
  Status first_error;  // of the first step that failed (OK: none did)
  std::string failed_step;
};

// The scripted workload. Stops at the first step that fails.
Outcome RunWorkload(const std::string& root, CountingFs* fs, Model* model) {
  const std::string dir = root + "/t-0";
  LogConfig config;
  config.fs = fs;
  config.segment_bytes = 700;  // several rolls
  config.index_interval_bytes = 100;
  config.durability = Durability::kEveryBatch;
  Outcome out;
  auto fail = [&](const char* step, Status s) {
    out.first_error = std::move(s);
    out.failed_step = step;
    return out;
  };
  int32_t seq = 0;
  int64_t ts = 1000;
  // One Append call of `batches` batches (producer id 7 on the odd calls).
  auto append = [&](PartitionWriter& w, int call, int batches) -> Status {
    Bytes_ bytes;
    for (int i = 0; i < batches; ++i) {
      BatchOptions o;
      if (call % 2 == 1) {
        o.producer_id = 7;
        o.producer_epoch = 0;
        o.base_sequence = seq;
        seq += 2;
      }
      Bytes_ b = MakeBatch(2, ts, 40, o);
      ts += 2;
      bytes.insert(bytes.end(), b.begin(), b.end());
    }
    model->in_flight = Split(bytes);  // offsets not assigned yet: checked by content below
    auto r = w.Append(bytes);
    model->in_flight = Split(bytes);  // as written (baseOffset assigned in place)
    if (!r) return r.error();
    for (auto& b : model->in_flight) model->acked.push_back(std::move(b));
    model->in_flight.clear();
    return Status::Ok();
  };

  {
    fs->step = "open (create)";
    auto w = PartitionWriter::Open(dir, config, true, nullptr);
    if (!w) return fail("open (create)", w.error());
    fs->step = "append";
    for (int call = 0; call < 8; ++call) {
      Status s = append(**w, call, 1 + call % 3);
      if (!s.ok()) return fail("append", s);
    }
    fs->step = "close";
    Status s = (*w)->Close();
    if (!s.ok()) return fail("close", s);
  }
  {
    fs->step = "reopen";
    auto w = PartitionWriter::Open(dir, config, false, nullptr);
    if (!w) return fail("reopen", w.error());
    fs->step = "append after reopen";
    for (int call = 9; call < 12; ++call) {
      Status s = append(**w, call, 2);
      if (!s.ok()) return fail("append after reopen", s);
    }
    fs->step = "close after reopen";
    Status s = (*w)->Close();
    if (!s.ok()) return fail("close after reopen", s);
  }
  {
    fs->step = "read";
    auto all = ReadPartition(dir, fs);
    if (!all) return fail("read", all.error());
    // A reader that reads everything reads exactly what was acknowledged.
    CHECK(*all == model->acked);
  }
  {
    fs->step = "open for truncate";
    auto w = PartitionWriter::Open(dir, config, false, nullptr);
    if (!w) return fail("open for truncate", w.error());
    fs->step = "truncate";
    const int64_t cut = LastOffset(model->acked[model->acked.size() / 2]) + 1;
    model->truncating_to = cut;
    Status s = (*w)->TruncateTo(cut);
    if (!s.ok()) return fail("truncate", s);
    while (!model->acked.empty() && LastOffset(model->acked.back()) >= cut) model->acked.pop_back();
    model->truncating_to.reset();
    fs->step = "append after truncate";
    s = append(**w, 12, 2);  // without a producer id: its sequences were cut
    if (!s.ok()) return fail("append after truncate", s);
    fs->step = "close after truncate";
    s = (*w)->Close();
    if (!s.ok()) return fail("close after truncate", s);
  }
  {
    fs->step = "group commit";
    auto g = Group::Open(root, "g", true, fs);
    if (!g) return fail("group open", g.error());
    const int64_t offset = LastOffset(model->acked.back()) + 1;
    OffsetCommit c;
    c.topic = "t";
    c.partition = 0;
    c.offset = offset;
    model->committing = offset;
    Status s = g->Commit(std::span(&c, 1), "m");
    if (!s.ok()) return fail("group commit", s);
    model->committed = offset;
    model->committing.reset();
  }
  return out;
}

// A fresh open with the real file system holds the acknowledged batches,
// byte for byte, then at most a prefix of the interrupted append (or, for an
// interrupted TruncateTo, the log before or after the cut).
void CheckRecovered(const std::string& root, const Model& model) {
  const std::string dir = root + "/t-0";
  if (!Exists(dir)) {  // never created
    REQUIRE(model.acked.empty());
    return;
  }
  LogConfig config;
  config.segment_bytes = 700;
  RecoveryReport report;
  auto w = PartitionWriter::Open(dir, config, false, &report);
  REQUIRE(w);
  REQUIRE((*w)->Close().ok());
  auto all = ReadPartition(dir, nullptr);
  REQUIRE(all);
  std::vector<Bytes_> want = model.acked;
  if (model.truncating_to && all->size() < want.size()) {
    while (!want.empty() && LastOffset(want.back()) >= *model.truncating_to) want.pop_back();
  }
  REQUIRE(all->size() >= want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("batch " << i);
    REQUIRE((*all)[i] == want[i]);
  }
  const size_t extra = all->size() - want.size();
  REQUIRE(extra <= model.in_flight.size());
  for (size_t i = 0; i < extra; ++i) CHECK((*all)[want.size() + i] == model.in_flight[i]);
  if (model.committed || model.committing) {
    auto g = Group::Open(root, "g", false);
    REQUIRE(g);
    auto offsets = g->Read();
    REQUIRE(offsets);
    const CommittedOffset* c = offsets->Find("t", 0);
    if (model.committed) {
      REQUIRE(c);
      CHECK(c->offset == *model.committed);
    } else if (c) {
      CHECK(c->offset == *model.committing);
    }
  }
}

struct SweepResult {
  int64_t points = 0;                       // values of k that failed a call
  int64_t absorbed = 0;                     // failures the workload absorbed (Absorbable)
  std::map<std::string, int> absorbed_ops;  // op (segment names as N) -> count
};

std::string Generic(std::string op) {
  for (size_t at; (at = op.find_first_of("0123456789")) != std::string::npos;) {
    size_t end = op.find_first_not_of("0123456789", at);
    op.replace(at, (end == std::string::npos ? op.size() : end) - at, "N");
  }
  return op;
}

SweepResult Sweep(int err) {
  SweepResult result;
  for (int64_t k = 1;; ++k) {
    TempDir tmp;
    REQUIRE(DataDir::Open(tmp.path(), true));
    CountingFs fs(k, err);
    Model model;
    Outcome out = RunWorkload(tmp.path(), &fs, &model);
    if (!fs.fired()) {
      INFO("k=" << k << " step " << out.failed_step << ": " << out.first_error.message());
      REQUIRE(out.first_error.ok());
      return result;
    }
    ++result.points;
    INFO("k=" << k << " errno=" << err << " failed call: " << fs.fired_op() << " in step "
              << fs.fired_step() << "; failed step " << out.failed_step << ": "
              << out.first_error.message());
    if (out.first_error.ok()) {
      // The failure did not surface: only where the code documents it.
      CHECK(Absorbable(fs.fired_op()));
      ++result.absorbed;
      ++result.absorbed_ops[Generic(fs.fired_op()) + " (" + fs.fired_step() + ")"];
    }
    CheckRecovered(tmp.path(), model);
  }
}

}  // namespace

TEST_CASE("fault sweep: every call through the FileSystem seam fails once, in turn") {
  for (int err : {EIO, ENOSPC}) {
    SweepResult r = Sweep(err);
    std::cout << "fault sweep (" << (err == EIO ? "EIO" : "ENOSPC on writes, EIO otherwise")
              << "): " << r.points << " injection points, " << r.absorbed
              << " absorbed by documented best-effort or derived-data paths:\n";
    for (const auto& [op, n] : r.absorbed_ops) std::cout << "  " << n << " x " << op << "\n";
    CHECK(r.points > 100);
  }
}

// Regressions the sweep found: I/O errors that were taken for the end of
// the data or for damaged derived data.
namespace {

// Six batches of 155 bytes, two per segment (segments 0, 4 and 8), each
// segment's second batch indexed, written with the real file system.
std::string SixBatches(const TempDir& tmp) {
  const std::string dir = tmp / "t-0";
  LogConfig config;
  config.segment_bytes = 400;
  config.index_interval_bytes = 1;
  auto w = PartitionWriter::Open(dir, config, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < 6; ++i) {
    auto b = MakeBatch(2, 1000 + i, 40);
    REQUIRE((*w)->Append(b));
  }
  REQUIRE((*w)->Close().ok());
  return dir;
}

// PartitionReader::Open of `dir` with the first call named `op` failing
// (EIO): that call must be made, and its failure returned.
void CheckReaderOpenFails(const std::string& dir, const std::string& op) {
  CountingFs fs(op);
  ReadOptions options;
  options.fs = &fs;
  auto r = PartitionReader::Open(dir, options);
  REQUIRE(fs.fired());
  REQUIRE(!r);
  CHECK(r.error().code() == Code::kIoError);
}

}  // namespace

TEST_CASE("fault: an EIO reading the last segment without a state file is an error, not its end") {
  TempDir tmp;
  const std::string dir = SixBatches(tmp);
  REQUIRE(std::filesystem::remove(dir + "/state"));
  CheckReaderOpenFails(dir, "read 00000000000000000008.log");
}

TEST_CASE("fault: an EIO opening the state file fails PartitionReader::Open") {
  TempDir tmp;
  CheckReaderOpenFails(SixBatches(tmp), "open state");
}

TEST_CASE("fault: an EIO reading a rolled segment while checking its index fails the open") {
  TempDir tmp;
  const std::string dir = SixBatches(tmp);
  CountingFs fs("read 00000000000000000000.log");
  LogConfig config;
  config.fs = &fs;
  config.segment_bytes = 400;
  auto w = PartitionWriter::Open(dir, config, false, nullptr);
  REQUIRE(fs.fired());
  REQUIRE(!w);
  CHECK(w.error().code() == Code::kIoError);
}
