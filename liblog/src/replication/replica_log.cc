// One host: a replica's log of a partition is its partition directory
// (mq/replication.h OpenReplicaLog, DirectLeaderLink; format-spec/
// replication.md §17.2).
#include <time.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "format/coding.h"
#include "format/format.h"
#include "io/checkpoint_file.h"
#include "mq/crc32c.h"
#include "mq/lock.h"
#include "mq/replication.h"
#include "storage/state_file.h"
#include "storage/verify.h"

namespace mq {

namespace {

constexpr const char* kPositionsFile = format::kFetchPositionsName;
constexpr const char* kLeaderLockFile = format::kLeaderLockName;
constexpr size_t kPositionFields = format::kReplicaPositionFields;
constexpr const char* kClaimFile = format::kLeaderClaimName;

// The seam a free function's caller passed (nullptr: the real one).
FileSystem* FsOrDefault(FileSystem* fs) { return fs ? fs : FileSystem::Default(); }

// The fetch-positions file (R60) of the partition directory `dir` (open as
// `dir_fd`): none yet, or an empty one, is no follower. A read that finds
// it breaking R60 is made again, up to 20 times 0.1 ms apart, before the
// breach is reported: a reader without the leader lock may have read a
// copy while it was written, and the other while it was written next.
// With `held`, the file is the one it keeps open (NamedFile), opened only
// when the name names another.
Result<FetchPositions> ReadPositionsAt(FileSystem* fs, int dir_fd, const std::string& dir,
                                       NamedFile* held = nullptr) {
  const std::string path = dir + "/" + kPositionsFile;
  for (int attempt = 1;; ++attempt) {
    auto read = ReadInPlaceFile(fs, dir_fd, kPositionsFile, format::kFetchPositionsBytes, "R60",
                                path, held);
    if (!read) return read.error();
    if (!*read) return FetchPositions{};
    const std::vector<std::byte>& data = (*read)->data;
    auto decoded = DecodeFetchPositions(data, path);
    if (decoded || decoded.error().code() != Code::kCorruption || attempt >= 20) return decoded;
    const timespec pause{0, 100 * 1000};
    ::nanosleep(&pause, nullptr);
  }
}

Result<std::vector<FollowerPosition>> ReadPositionsFile(FileSystem* fs, int dir_fd,
                                                        const std::string& dir) {
  auto read = ReadPositionsAt(fs, dir_fd, dir);
  if (!read) return read.error();
  return std::move(read->positions);
}

// R60: `all` replaces the copy that is not current, in place, with the next
// sequence (the current copy stays whole whatever happens to this write);
// no file yet (or an empty one) is created whole, copy 0 holding `all`.
// The caller holds the leader lock: one writer at a time. Not fsynced
// (§17.2: volatile leader state).
// `read`: the file as the caller read it under the lock it still holds
// (null: read here).
// `held`: the file kept open (NamedFile) that `read` was read from, or
// that is read here.
Status WritePositionsFile(FileSystem* fs, int dir_fd, const std::string& dir,
                          const std::vector<FollowerPosition>& all,
                          const FetchPositions* read = nullptr, NamedFile* held = nullptr) {
  Result<FetchPositions> current =
      read ? Result<FetchPositions>(*read) : ReadPositionsAt(fs, dir_fd, dir, held);
  if (!current) return current.error();
  auto copy = EncodeFetchPositionsCopy(all, current->sequence + 1);
  if (!copy) return copy.error();
  if (current->copy < 0) {
    std::vector<std::byte> image(format::kFetchPositionsBytes);
    std::memcpy(image.data(), copy->data(), copy->size());
    return WriteFileAtomic(dir_fd, kPositionsFile, image, fs, {}, false);
  }
  uint64_t size = 0;
  auto file = held ? held->Get(fs, dir_fd, &size) : Result<File*>(Status(Code::kNotFound, ""));
  std::unique_ptr<File> opened;
  if (!held) {
    auto f = fs->Open(dir_fd, kPositionsFile, FileSystem::kReadWrite);
    if (!f) return f.error();
    opened = std::move(*f);
    file = opened.get();
  }
  if (!file) return file.error();
  return (*file)->WriteAt(current->copy == 0 ? format::kFetchPositionsCopyBytes : 0, *copy);
}

class FileReplicaLog : public ReplicaLog {
 public:
  FileReplicaLog(std::string dir, int32_t id, LogConfig config, UniqueFd dir_fd,
                 std::unique_ptr<PartitionWriter> writer, std::string topic, int32_t partition)
      : dir_(std::move(dir)),
        id_(id),
        config_(config),
        dir_fd_(std::move(dir_fd)),
        writer_(std::move(writer)),
        topic_(std::move(topic)),
        partition_(partition) {}

  int32_t replica_id() const override { return id_; }

  // The published bounds, read without the writer lock (from the mapped
  // state file, as any reader does).
  Result<int64_t> LogStartOffset() override {
    MQ_RETURN_IF_ERROR(OpenReader());
    return reader_->log_start_offset();
  }
  Result<int64_t> LogEndOffset() override {
    MQ_RETURN_IF_ERROR(OpenReader());
    return reader_->end_offset();
  }
  Result<int64_t> HighWatermark() override {
    auto hw = LoadHighWatermark(dir_fd_.get(), topic_, partition_, fs(), &hw_file_);
    if (!hw && hw.error().code() == Code::kNotFound) return int64_t{-1};
    return hw;
  }
  Status SetHighWatermark(int64_t offset) override { return writer_->SetHighWatermark(offset); }
  Result<int32_t> LatestEpoch() override { return writer_->LatestEpoch(); }
  Result<EpochEndOffset> EndOffsetFor(int32_t epoch) override {
    return writer_->EndOffsetFor(epoch);
  }

  Status OpenReader() {
    if (reader_) return Status::Ok();
    ReadOptions options;
    options.limits = config_.limits;
    options.offsets = config_.offsets;
    options.fs = config_.fs;
    auto opened = PartitionReader::Open(dir_, options);
    if (!opened) return opened.error();
    reader_ = std::move(*opened);
    return Status::Ok();
  }

  Status Read(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
              uint32_t* crc) override {
    return ReadAs(offset, max_bytes, out, crc, nullptr);
  }
  Status ReadInPlace(int64_t offset, size_t max_bytes, std::vector<std::byte>* out, uint32_t* crc,
                     FileBytes* file) override {
    return ReadAs(offset, max_bytes, out, crc, file);
  }

  void ReadAhead(std::vector<std::byte>* into) override {
    prepared_.reset();
    if (!last_read_ || !last_read_->full || !reader_) return;
    const ReadSpan last = *last_read_;
    last_read_.reset();
    const auto before = reader_->rewrites();
    if (!before) return;
    FileBytes file;
    auto read =
        ReadBatches(last.next_offset, last.max_bytes, into, last.in_place ? &file : nullptr);
    // Only a read that stopped at max_bytes (or a segment's end) is kept:
    // it is the same bytes at any later time while the log is not
    // rewritten, where one that stopped at the log end may miss what was
    // appended since.
    if (!read || !read->full || reader_->rewrites() != before) return;
    prepared_ = Prepared{*read, *before, into, file};
  }

  Result<AppendResult> AppendReplicated(std::span<const std::byte> batches,
                                        CrcCheck crc_check) override {
    return writer_->AppendReplicated(batches, crc_check);
  }
  Status TruncateTo(int64_t offset, int32_t leader_epoch = -1) override {
    epoch_held_ = -1;
    return writer_->TruncateTo(offset, leader_epoch);
  }
  // R92: the leader's log start exactly, as the leader keeps it (a
  // delete-records offset inside a segment included), not the base of the
  // segment that holds it.
  Status DeleteBefore(int64_t offset) override {
    SegmentDeletion how;
    how.exact_start = true;
    how.start_over = true;
    return writer_->DeleteSegmentsBefore(offset, how);
  }
  Status BeginEpoch(int32_t epoch) override { return writer_->BeginLeaderEpoch(epoch); }
  Status FenceEpochsBelow(int32_t epoch) override { return writer_->FenceEpochsBelow(epoch); }
  // A leader's fetch (HandleFetch) ensures its epoch at every fetch: after
  // the first, nothing is read (no writer lock taken, no epochs loaded
  // again while its producer appends). Safe to skip: the log holds
  // `epoch_held_` or a later epoch from then on, as long as nothing cuts
  // it, and only a follower's truncation cuts epochs out of a log (one
  // decided in a later leader epoch, when the cluster state no longer
  // names this replica leader in this one: the fetch's CheckLeader refuses
  // it first), besides a recovery after a machine crash, which ended this
  // process. A truncation through this log forgets it.
  Status EnsureEpoch(int32_t epoch) override {
    if (epoch <= epoch_held_) return Status::Ok();
    MQ_RETURN_IF_ERROR(ReplicaLog::EnsureEpoch(epoch));
    epoch_held_ = epoch;
    return Status::Ok();
  }

  Status RecordFollower(const FollowerPosition& position) override {
    auto all = Followers();
    if (!all) return all.error();
    UpsertPosition(&*all, position);
    return RecordFollowers(*all);
  }
  Status RecordFollowers(const std::vector<FollowerPosition>& all) override {
    // Leader state a crash may lose (§17.2): in place, no fsync (R60), over
    // the copy that was not current when Followers() read the file under
    // the leader lock still held (read again otherwise).
    std::optional<FetchPositions> read = std::move(positions_read_);
    positions_read_.reset();
    return WritePositionsFile(fs(), dir_fd_.get(), dir_, all, read ? &*read : nullptr,
                              &positions_file_);
  }

  Result<std::vector<FollowerPosition>> Followers() override {
    positions_read_.reset();
    auto read = ReadPositionsAt(fs(), dir_fd_.get(), dir_, &positions_file_);
    if (!read) return read.error();
    if (in_leader_lock_) positions_read_ = FetchPositions{{}, read->sequence, read->copy};
    return std::move(read->positions);
  }

  // Read once per process, then what this process stored: every claim
  // another process stores meanwhile is of the same boot (a reboot ends
  // them all) and on an epoch no lower, so a claim found stale is decided
  // again on ReadLeaderClaim's, under the leader lock (ClaimLeadership).
  // No claim read on a boot is kept too, while that boot runs: any claim
  // stored since is of it (a follower's LeaveIsrAfterRestart has nothing to
  // give up for it), and one of an earlier boot was there before this
  // boot began.
  Result<LeaderClaim> LoadLeaderClaim() override {
    if (claim_) return *claim_;
    if (none_on_ && *none_on_ != BootId{} && *none_on_ == RunningBoot()) return LeaderClaim{};
    return ReadLeaderClaim();
  }
  Result<LeaderClaim> ReadLeaderClaim() override {
    claim_.reset();
    none_on_.reset();
    const std::string path = dir_ + "/" + kClaimFile;
    auto bytes = ReadCheckpointFile(fs(), dir_fd_.get(), kClaimFile, path);
    if (!bytes && bytes.error().code() == Code::kNotFound) {
      none_on_ = RunningBoot();
      return LeaderClaim{};
    }
    if (!bytes) return bytes.error();
    auto claim = DecodeLeaderClaim(*bytes, path);
    if (claim) claim_ = *claim;
    return claim;
  }
  // R53: replaced atomically and fsynced (R39) before the epoch enters the
  // log, so a claim survives whatever the log lost.
  Status StoreLeaderClaim(const LeaderClaim& claim) override {
    claim_.reset();
    none_on_.reset();
    const std::string text = EncodeLeaderClaim(claim);
    MQ_RETURN_IF_ERROR(WriteFileAtomic(dir_fd_.get(), kClaimFile, AsBytes(text), fs(), {}, true));
    claim_ = claim;
    return Status::Ok();
  }
  BootId RunningBoot() override { return CurrentBootId(); }

  // Every file an append, a fetch or an acknowledgement depends on, read
  // and checked before any of them: the high watermark (R35, R38, and
  // never above the log end), the followers' positions (R47) and the
  // leader claim (R53). A damaged one stops the opener before it writes
  // anything (exit 65 naming the file, position and rule).
  Status CheckFiles() {
    for (int round = 0;; ++round) {
      // The file before the log end: a writer raises the high watermark
      // only after it published the records it counts, and lowers it
      // before it publishes a cut (read again when a cut came between).
      auto hw = LoadHighWatermark(dir_fd_.get(), topic_, partition_, fs());
      if (!hw && hw.error().code() == Code::kNotFound) break;
      if (!hw) return hw.error();
      MQ_RETURN_IF_ERROR(OpenReader());
      auto end = reader_->end_offset();
      if (*hw <= end) break;
      if (round < 3) continue;
      return CheckHighWatermarkWithin(dir_fd_.get(), topic_, partition_, *hw, end);
    }
    MQ_RETURN_IF_ERROR(CheckEpochs());
    MQ_RETURN_IF_ERROR(Followers().status());
    return ReadLeaderClaim().status();
  }

  // R37: the leader-epoch checkpoint holds what the log implies. Each entry
  // starting inside the log names the epoch of the batch that starts
  // there, and the last batch's epoch is the latest entry's inside the log
  // (a follower's truncation point and a leader's fence are decided on
  // them). An index lookup and a header per entry, not a scan of the log.
  Status CheckEpochs() {
    auto cache = LeaderEpochCache::Load(dir_fd_.get(), fs());
    if (!cache && cache.error().code() == Code::kNotFound) return Status::Ok();
    if (!cache) return cache.error();
    MQ_RETURN_IF_ERROR(OpenReader());
    const int64_t start = reader_->log_start_offset();
    const int64_t end = reader_->end_offset();
    const std::string path = dir_ + "/" + kLeaderEpochCheckpointFile;
    // The batch holding `offset`: its first offset and epoch.
    auto batch_at = [&](int64_t offset) -> Result<std::optional<std::pair<int64_t, int32_t>>> {
      MQ_RETURN_IF_ERROR(reader_->Seek(offset));
      auto b = reader_->Next();
      if (!b) return b.error();
      if (!*b) return std::optional<std::pair<int64_t, int32_t>>();
      return std::optional<std::pair<int64_t, int32_t>>(
          std::make_pair((*b)->header().base_offset, (*b)->header().partition_leader_epoch));
    };
    const auto& entries = cache->entries();
    size_t inside = 0;  // entries starting below the log end
    for (size_t i = 0; i < entries.size() && entries[i].start_offset < end; ++i, ++inside) {
      if (entries[i].start_offset <= start) continue;  // the log start moved into it
      auto b = batch_at(entries[i].start_offset);
      if (!b) return b.error();
      if (!*b) continue;
      if ((*b)->first != entries[i].start_offset || (*b)->second != entries[i].epoch)
        return EpochEntryMismatch(
            *cache, i, path,
            fmt::format("epoch {} from offset {}, but the batch holding offset {} starts at {} in "
                        "epoch {}",
                        entries[i].epoch, entries[i].start_offset, entries[i].start_offset,
                        (*b)->first, (*b)->second));
    }
    if (end <= start) return Status::Ok();
    auto last = batch_at(end - 1);
    if (!last) return last.error();
    if (!*last || (*last)->second == format::kNoPartitionLeaderEpoch) return Status::Ok();
    const int32_t held = inside == 0 ? -1 : entries[inside - 1].epoch;
    if (held != (*last)->second)
      return EpochEntryMismatch(
          *cache, inside == 0 ? 0 : inside - 1, path,
          fmt::format("the log's last batch (offset {}) is of epoch {}, but the latest entry below "
                      "the log end {} is {}",
                      (*last)->first, (*last)->second, end,
                      held < 0 ? std::string("none") : fmt::format("epoch {}", held)));
    return Status::Ok();
  }

  Status WithLeaderLock(const std::function<Status()>& fn) override {
    return LeaderLocked(LockWait::kBlock, fn);
  }
  Status TryWithLeaderLock(const std::function<Status()>& fn) override {
    return LeaderLocked(LockWait::kTry, fn);
  }

 private:
  FileSystem* fs() const { return FsOrDefault(config_.fs); }

  // Runs `fn` holding leader.lock. The lock file stays open from call to
  // call (mq never removes or replaces it, §17.2): each call takes and
  // drops the flock on it, and checks that the name still names it (one
  // fstatat), so that a lock file removed or replaced by hand is opened
  // again, as FileLock::Acquire does, rather than locked apart from the
  // one other processes lock. Inside the lock already (a nested call) the
  // file is locked through a descriptor of its own, as before: an unlock of
  // the kept one would drop the outer lock.
  Status LeaderLocked(LockWait wait, const std::function<Status()>& fn) {
    if (in_leader_lock_) {
      auto lock =
          FileLock::Acquire(dir_fd_.get(), kLeaderLockFile, LockMode::kExclusive, wait, fs());
      if (!lock) return lock.error();
      return Locked(fn);
    }
    for (int attempt = 0;; ++attempt) {
      if (!leader_lock_.is_open()) {
        auto opened = FileLock::Open(dir_fd_.get(), kLeaderLockFile, true,
                                     dir_ + "/" + kLeaderLockFile, fs());
        if (!opened) return opened.error();
        auto info = opened->Stat();
        if (!info) return info.error();
        leader_lock_ = std::move(*opened);
        leader_lock_info_ = *info;
      }
      MQ_RETURN_IF_ERROR(leader_lock_.Lock(LockMode::kExclusive, wait));
      auto named = fs()->StatAt(dir_fd_.get(), kLeaderLockFile);
      if (named && named->dev == leader_lock_info_.dev && named->ino == leader_lock_info_.ino)
        break;
      leader_lock_.Close();  // drops the flock
      if (!named && named.error().code() != Code::kNotFound) return named.error();
      if (attempt >= 10)
        return Status(Code::kBusy, fmt::format("{}/{}: replaced {} times while being locked", dir_,
                                               kLeaderLockFile, attempt + 1));
    }
    Status s = Locked(fn);
    // A failed unlock closes the file, which drops the flock all the same.
    if (!leader_lock_.Unlock().ok()) leader_lock_.Close();
    return s;
  }

  // Runs `fn` under the leader lock just taken: what Followers() reads
  // there tells RecordFollowers which copy to write (R60), and nothing read
  // outside the lock does.
  Status Locked(const std::function<Status()>& fn) {
    const bool outer = in_leader_lock_;
    in_leader_lock_ = true;
    positions_read_.reset();
    Status s = fn();
    positions_read_.reset();
    in_leader_lock_ = outer;
    return s;
  }

  // A Read: where it began and ended, and whether it stopped because the
  // next batch would pass max_bytes (not at the log end).
  struct ReadSpan {
    int64_t offset = 0;
    size_t max_bytes = 0;
    int64_t next_offset = 0;  // after its last batch (`offset` when it has none)
    bool full = false;
    uint32_t crc = 0;       // CRC-32C of the bytes read
    bool in_place = false;  // asked for by ReadInPlace
  };
  // What ReadAhead read, the state file's rewrites counter before it, and
  // the buffer that holds it (or the file, when its size is not 0).
  struct Prepared {
    ReadSpan span;
    uint32_t rewrites = 0;
    const std::vector<std::byte>* bytes = nullptr;
    FileBytes file;
  };

  // The batch a read stopped before: returned by the reader, not taken.
  struct HeldBatch {
    LogPosition at;
    size_t size = 0;
    int64_t next_offset = 0;  // after it
    uint32_t crc = 0;         // CRC-32C of its bytes
    bool kept = false;        // its bytes in `bytes` (a copying read)
    std::vector<std::byte> bytes;
  };
  // Where the reader stands after a read: the offset a read going on asks
  // for, the rewrites counter it was positioned at, and the batch held.
  struct Stop {
    int64_t next_offset = 0;
    uint32_t rewrites = 0;
    std::optional<HeldBatch> batch;
  };

  Status ReadAs(int64_t offset, size_t max_bytes, std::vector<std::byte>* out, uint32_t* crc,
                FileBytes* file) {
    MQ_RETURN_IF_ERROR(OpenReader());
    if (!TakePrepared(offset, max_bytes, out, file)) {
      last_read_.reset();
      auto read = ReadBatches(offset, max_bytes, out, file);
      if (!read) return read.error();
      last_read_ = *read;
    }
    if (crc) *crc = last_read_->crc;
    return Status::Ok();
  }

  // A read under way: its span, and in place the segment and the byte
  // range of the batches it took so far.
  struct Taking {
    ReadSpan span;
    size_t size = 0;  // bytes taken
    std::string segment;
    uint64_t begin = 0, end = 0;
  };

  // Takes batch `bytes` (header `h`, at `at` of its segment) into `t`, and
  // into `out` unless in place. The batch's CRC covers its bytes from
  // attributes on, and Next() checked it (R4): only the 21 bytes before are
  // hashed again. False (nothing taken) when it does not go with the
  // batches taken: past max_bytes, or in place in another segment.
  static bool Take(Taking& t, const BatchHeader& h, Bytes bytes, const LogPosition& at,
                   std::vector<std::byte>* out) {
    if (t.size > 0 && t.size + bytes.size() > t.span.max_bytes) return false;
    if (t.span.in_place) {
      // The next segment: this one is whole (rolled), its bytes the same
      // while the log is not rewritten.
      if (t.size > 0 && (at.file != t.segment || at.position != t.end)) return false;
      if (t.size == 0) {
        t.segment = at.file;
        t.begin = t.end = at.position;
      }
      t.end += bytes.size();
    } else {
      out->insert(out->end(), bytes.begin(), bytes.end());
    }
    t.size += bytes.size();
    t.span.crc = Crc32cExtendKnown(Crc32cExtend(t.span.crc, bytes.first(format::kAttributesOffset)),
                                   bytes.subspan(format::kAttributesOffset), h.crc);
    t.span.next_offset = h.last_offset() + 1;
    t.span.full = t.size >= t.span.max_bytes;
    return true;
  }

  // R99: a read that goes on where the one before it stopped takes the
  // batch that one stopped before (returned by the reader, not taken) and
  // reads on, without seeking again (the offset index opened, mapped and
  // searched at every fetch): while the reader stands there and the log
  // was not rewritten since it positioned (the state file's rewrites
  // counter), the bytes it returned are the log's. False: seek.
  bool GoOn(int64_t offset, Taking& t, std::vector<std::byte>* out) {
    if (!stopped_) return false;
    const Stop s = std::move(*stopped_);
    stopped_.reset();  // the reader moves on from here, or seeks
    if (s.next_offset != offset) return false;
    if (reader_->rewrites() != s.rewrites || reader_->positioned_rewrites() != s.rewrites)
      return false;
    if (!s.batch) return true;  // at the log end: the reader reads on
    if (!t.span.in_place && !s.batch->kept) return false;
    const HeldBatch& b = *s.batch;
    if (t.span.in_place) {
      t.segment = b.at.file;
      t.begin = b.at.position;
      t.end = b.at.position + b.size;
    } else {
      out->insert(out->end(), b.bytes.begin(), b.bytes.end());
    }
    t.size = b.size;
    t.span.crc = b.crc;
    t.span.next_offset = b.next_offset;
    t.span.full = t.size >= t.span.max_bytes;
    return true;
  }

  // Whole batches from the one holding `offset`, up to `max_bytes` (at
  // least one), into `out`; with `file`, left in their segment file when
  // they lie in one (then `out` stays empty): the read stops at the
  // segment's end.
  Result<ReadSpan> ReadBatches(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
                               FileBytes* file) {
    if (file) *file = {};
    out->clear();
    Taking t;
    t.span = ReadSpan{offset, max_bytes, offset, false};
    t.span.in_place = file != nullptr;
    if (!file) {
      // One allocation (its pages are touched only as batches fill them),
      // not a copy at each doubling.
      out->reserve(std::min<size_t>(max_bytes, size_t{64} << 20));
    }
    if (!GoOn(offset, t, out)) MQ_RETURN_IF_ERROR(reader_->Seek(offset));
    Stop stop{offset, reader_->positioned_rewrites(), std::nullopt};
    while (!t.span.full) {
      auto next = reader_->Next();
      if (!next) return next.error();
      if (!*next) break;
      const BatchView& b = **next;
      if (b.header().last_offset() < offset) continue;
      const LogPosition at = reader_->position();
      if (!Take(t, b.header(), b.bytes(), at, out)) {
        t.span.full = true;
        stop.batch = Hold(b, at, !file);
        break;
      }
    }
    stop.next_offset = t.span.next_offset;
    stop.rewrites = reader_->positioned_rewrites();
    stopped_ = std::move(stop);
    if (file && t.size > 0) MQ_RETURN_IF_ERROR(LeaveInPlace(t.segment, t.begin, t.size, file));
    return t.span;
  }

  // The batch `b` at `at` a read stopped before, for the read that goes on
  // (GoOn); its bytes kept when `keep` (a copying read).
  static HeldBatch Hold(const BatchView& b, const LogPosition& at, bool keep) {
    const Bytes bytes = b.bytes();
    HeldBatch h;
    h.at = at;
    h.size = bytes.size();
    h.next_offset = b.header().last_offset() + 1;
    h.crc = Crc32cExtendKnown(Crc32cExtend(0, bytes.first(format::kAttributesOffset)),
                              bytes.subspan(format::kAttributesOffset), b.header().crc);
    h.kept = keep;
    if (keep) h.bytes.assign(bytes.begin(), bytes.end());
    return h;
  }

  // `*file`: `size` bytes at `position` of `segment` just read, from a
  // descriptor of the file the reader read them from (opened again after
  // a rewrite: a truncation may have replaced it by another of its name).
  Status LeaveInPlace(const std::string& segment, uint64_t position, size_t size, FileBytes* file) {
    const auto rewrites = reader_->rewrites();
    if (!send_file_ || send_name_ != segment || send_rewrites_ != rewrites) {
      send_file_.reset();
      auto opened = fs()->Open(dir_fd_.get(), segment, FileSystem::kRead);
      if (!opened) return opened.error();
      send_file_ = std::move(*opened);
      send_name_ = segment;
      send_rewrites_ = rewrites;
      // Rewritten between the read and the open: the file may not be the
      // one read. Never sent: read again.
      if (reader_->rewrites() != rewrites) {
        send_file_.reset();
        return Status(Code::kUnavailable,
                      fmt::format("{}: {} was rewritten while it was read", dir_, segment));
      }
    }
    *file = FileBytes{send_file_->fd(), position, size};
    return Status::Ok();
  }

  // Whether `out` (or `file`) holds the prepared read and it is what a
  // read of `offset` and `max_bytes` gives now: the same request, the log
  // not rewritten since (the rewrites counter of the state file: a
  // truncation bumps it before it cuts), and its bytes still below the
  // committed end.
  bool TakePrepared(int64_t offset, size_t max_bytes, const std::vector<std::byte>* out,
                    FileBytes* file) {
    if (!prepared_) return false;
    const Prepared p = *prepared_;
    prepared_.reset();
    if (p.bytes != out || p.span.offset != offset || p.span.max_bytes != max_bytes ||
        p.span.in_place != (file != nullptr))
      return false;
    if (reader_->rewrites() != p.rewrites || reader_->end_offset() < p.span.next_offset)
      return false;
    if (file) *file = p.file;
    last_read_ = p.span;
    return true;
  }

  std::string dir_;
  int32_t id_;
  LogConfig config_;
  UniqueFd dir_fd_;
  std::unique_ptr<PartitionWriter> writer_;
  std::unique_ptr<PartitionReader> reader_;
  int32_t epoch_held_ = -1;  // an epoch the log was seen to hold (EnsureEpoch)
  // `high-watermark` and `fetch-positions`, kept open from call to call.
  NamedFile hw_file_{kHighWatermarkFile};
  NamedFile positions_file_{kPositionsFile};
  FileLock leader_lock_;              // leader.lock, kept open (LeaderLocked)
  FileInfo leader_lock_info_;         // its device and inode
  std::optional<LeaderClaim> claim_;  // as last read or stored (R53)
  std::optional<BootId> none_on_;     // the boot on which no claim was read last
  bool in_leader_lock_ = false;
  std::optional<FetchPositions> positions_read_;  // sequence and copy, under the lock
  std::optional<ReadSpan> last_read_;             // what ReadAhead continues
  std::optional<Prepared> prepared_;
  std::optional<Stop> stopped_;  // where reader_ stands (GoOn)
  // The segment file ReadInPlace leaves batches in, its name and the
  // rewrites counter when it was opened.
  std::unique_ptr<File> send_file_;
  std::string send_name_;
  std::optional<uint32_t> send_rewrites_;
  std::string topic_;
  int32_t partition_;
};

class DirectLink : public LeaderLink {
 public:
  DirectLink(const ReplicationContext& ctx, ReplicaLog* leader) : ctx_(ctx), leader_(leader) {}
  Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                              int32_t requested_epoch) override {
    return HandleOffsetForLeaderEpoch(ctx_, *leader_, leader_epoch, requested_epoch);
  }
  // The batches stay in buffer_ until the next call: the follower appends
  // them before it calls again (FollowerStep).
  Result<FetchResponse> Fetch(const FetchRequest& request) override {
    return HandleFetch(ctx_, *leader_, request, &buffer_);
  }
  // R98: none when the leader's log already ends past the follower's (an
  // append since the fetch, read from its mapped state file): the fetch
  // the follower then makes at once tells it and brings what follows.
  // HandleReport reads the state again under the leader lock.
  Result<std::optional<FetchResponse>> Report(const FetchRequest& request) override {
    auto leo = leader_->LogEndOffset();
    if (!leo) return leo.error();
    if (*leo > request.fetch_offset) return std::optional<FetchResponse>();
    auto answer = HandleReport(ctx_, *leader_, request);
    if (!answer) return answer.error();
    return std::optional<FetchResponse>(std::move(*answer));
  }

 private:
  ReplicationContext ctx_;
  ReplicaLog* leader_;
  std::vector<std::byte> buffer_;
};

}  // namespace

Result<std::vector<FollowerPosition>> DecodeReplicaPositions(std::string_view bytes,
                                                             const std::string& file) {
  static const char* const kWhat[kPositionFields] = {"replica",        "leader epoch",
                                                     "log end offset", "last fetch",
                                                     "last caught up", "leader log end"};
  std::vector<FollowerPosition> out;
  Status s = ParseCheckpoint(
      bytes, file, kPositionFields, [&](std::span<const CheckpointField> f) -> Status {
        int64_t v[kPositionFields];
        for (size_t i = 0; i < kPositionFields; ++i) {
          const int64_t max = i < 2 ? INT32_MAX : INT64_MAX;
          auto n = CheckpointNumber(f[i], max, file, "R47", kWhat[i]);
          if (!n) return n.error();
          v[i] = *n;
        }
        for (const FollowerPosition& seen : out)
          if (seen.replica == v[0])
            return Status::Corruption(file, f[0].position, "R47",
                                      fmt::format("replica {} appears twice", v[0]));
        out.push_back(
            {static_cast<int32_t>(v[0]), static_cast<int32_t>(v[1]), v[2], v[3], v[4], v[5]});
        return Status::Ok();
      });
  if (!s.ok()) return s;
  return out;
}

Result<FetchPositions> DecodeFetchPositions(std::span<const std::byte> bytes,
                                            const std::string& file) {
  using namespace format;
  if (bytes.empty()) return FetchPositions{};
  FetchPositions copies[2];
  const InPlaceLayout layout{"R60",
                             kFetchPositionsBytes,
                             kFetchPositionsCopyBytes,
                             kFetchPositionsChecksumOffset,
                             kFetchPositionsMagic,
                             kFetchPositionsVersion,
                             kFetchPositionsSequenceOffset};
  auto current = DecodeInPlaceCopies(
      bytes, file, layout,
      [&](int c, const std::byte* p, uint64_t sequence, const CopyBreach& bad) -> Status {
        const uint32_t count = coding::GetFixed32(p + kFetchPositionsCountOffset);
        if (count > kMaxFetchPositions)
          return bad(kFetchPositionsCountOffset, fmt::format("{} entries, more than 50", count));
        if (coding::GetFixed32(p + kFetchPositionsCountOffset + 4) != 0)
          return bad(kFetchPositionsCountOffset + 4, "reserved bytes are not zero");
        FetchPositions& out = copies[c];
        out.sequence = sequence;
        out.copy = c;
        for (uint32_t i = 0; i < count; ++i) {
          const size_t at = kFetchPositionsHeaderBytes + i * kFetchPositionEntryBytes;
          const int32_t replica = static_cast<int32_t>(coding::GetFixed32(p + at));
          const int32_t epoch = static_cast<int32_t>(coding::GetFixed32(p + at + 4));
          int64_t v[4];
          for (size_t k = 0; k < 4; ++k)
            v[k] = static_cast<int64_t>(coding::GetFixed64(p + at + 8 + 8 * k));
          if (replica < 0) return bad(at, fmt::format("replica {}", replica));
          if (epoch < 0)
            return bad(at + 4, fmt::format("replica {}: leader epoch {}", replica, epoch));
          for (size_t k = 0; k < 4; ++k)
            if (v[k] < 0)
              return bad(at + 8 + 8 * k,
                         fmt::format("replica {}: negative field {}", replica, v[k]));
          for (const FollowerPosition& seen : out.positions)
            if (seen.replica == replica)
              return bad(at, fmt::format("replica {} appears twice", replica));
          out.positions.push_back({replica, epoch, v[0], v[1], v[2], v[3]});
        }
        for (size_t at = kFetchPositionsHeaderBytes + count * kFetchPositionEntryBytes;
             at < kFetchPositionsChecksumOffset; ++at)
          if (p[at] != std::byte{0}) return bad(at, "bytes after the entries are not zero");
        return Status::Ok();
      });
  if (!current) return current.error();
  return std::move(copies[*current]);
}

Result<std::vector<std::byte>> EncodeFetchPositionsCopy(
    const std::vector<FollowerPosition>& positions, uint64_t sequence) {
  using namespace format;
  if (positions.size() > kMaxFetchPositions)
    return Status(Code::kInvalidArgument,
                  fmt::format("{} replica positions: a leader keeps at most {} (R60)",
                              positions.size(), kMaxFetchPositions));
  std::vector<std::byte> out(kFetchPositionsCopyBytes);
  std::byte* p = out.data();
  coding::PutFixed32(p, kFetchPositionsMagic);
  coding::PutFixed32(p + 4, kFetchPositionsVersion);
  coding::PutFixed64(p + kFetchPositionsSequenceOffset, sequence);
  coding::PutFixed32(p + kFetchPositionsCountOffset, static_cast<uint32_t>(positions.size()));
  for (size_t i = 0; i < positions.size(); ++i) {
    const FollowerPosition& f = positions[i];
    const int64_t v[4] = {f.log_end_offset, f.last_fetch_ms, f.last_caught_up_ms,
                          f.last_fetch_leader_leo};
    if (f.replica < 0 || f.leader_epoch < 0 || *std::min_element(v, v + 4) < 0)
      return Status(Code::kInvalidArgument,
                    fmt::format("replica {}: a position outside R60's ranges", f.replica));
    std::byte* e = p + kFetchPositionsHeaderBytes + i * kFetchPositionEntryBytes;
    coding::PutFixed32(e, static_cast<uint32_t>(f.replica));
    coding::PutFixed32(e + 4, static_cast<uint32_t>(f.leader_epoch));
    for (size_t k = 0; k < 4; ++k) coding::PutFixed64(e + 8 + 8 * k, static_cast<uint64_t>(v[k]));
  }
  coding::PutFixed32(p + kFetchPositionsChecksumOffset,
                     Crc32c(std::span<const std::byte>(out).first(kFetchPositionsChecksumOffset)));
  return out;
}

Result<bool> RestartedSinceClaim(const std::string& partition_dir, FileSystem* fs) {
  auto dir_fd = OpenDirectory(partition_dir, false, fs);
  if (!dir_fd) return dir_fd.error();
  const std::string path = partition_dir + "/" + kClaimFile;
  auto bytes = ReadCheckpointFile(FsOrDefault(fs), dir_fd->get(), kClaimFile, path);
  if (!bytes && bytes.error().code() == Code::kNotFound) return false;
  if (!bytes) return bytes.error();
  auto claim = DecodeLeaderClaim(*bytes, path);
  if (!claim) return claim.error();
  return claim->boot != CurrentBootId();
}

Result<LeaderClaim> DecodeLeaderClaim(std::string_view bytes, const std::string& file) {
  std::optional<LeaderClaim> out;
  Status s = ParseCheckpoint(
      bytes, file, format::kLeaderClaimFields, [&](std::span<const CheckpointField> f) -> Status {
        if (out) return Status::Corruption(file, f[0].position, "R53", "more than one claim entry");
        auto epoch = CheckpointNumber(f[0], INT32_MAX, file, "R53", "epoch");
        if (!epoch) return epoch.error();
        const std::string_view hex = f[1].text;
        bool ok = hex.size() == format::kBootIdHexDigits;
        for (char c : hex) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
        auto boot = ok ? ParseBootId(std::string(hex)) : std::nullopt;
        if (!boot || *boot == BootId{})
          return Status::Corruption(file, f[1].position, "R53",
                                    "boot id is not 32 lowercase hexadecimal digits, not all zero");
        out = LeaderClaim{static_cast<int32_t>(*epoch), *boot};
        return Status::Ok();
      });
  if (!s.ok()) return s;
  if (!out) return Status::Corruption(file, bytes.size(), "R53", "no claim entry");
  return *out;
}

std::string EncodeLeaderClaim(const LeaderClaim& claim) {
  std::string hex;
  for (uint8_t b : claim.boot) hex += fmt::format("{:02x}", b);
  return FormatCheckpoint({fmt::format("{} {}", claim.epoch, hex)});
}

void UpsertPosition(std::vector<FollowerPosition>* positions, const FollowerPosition& position) {
  for (FollowerPosition& f : *positions) {
    if (f.replica == position.replica) {
      f = position;
      return;
    }
  }
  positions->push_back(position);
}

std::string EncodeReplicaPositions(const std::vector<FollowerPosition>& positions) {
  std::vector<std::string> lines;
  for (const FollowerPosition& f : positions)
    lines.push_back(fmt::format("{} {} {} {} {} {}", f.replica, f.leader_epoch, f.log_end_offset,
                                f.last_fetch_ms, f.last_caught_up_ms, f.last_fetch_leader_leo));
  return FormatCheckpoint(lines);
}

Result<std::unique_ptr<ReplicaLog>> OpenReplicaLog(const std::string& dir, int32_t replica_id,
                                                   const LogConfig& config) {
  auto partition = PartitionOfDirectory(dir);
  if (!partition)
    return Status(Code::kInvalidArgument,
                  dir + ": a replica's log needs a partition directory named <topic>-<n>");
  RecoveryReport report;
  auto writer = PartitionWriter::Open(dir, config, false, &report);
  if (!writer) return writer.error();
  auto dir_fd = OpenDirectory(dir, false, config.fs);
  if (!dir_fd) return dir_fd.error();
  auto log =
      std::make_unique<FileReplicaLog>(dir, replica_id, config, std::move(*dir_fd),
                                       std::move(*writer), partition->first, partition->second);
  MQ_RETURN_IF_ERROR(log->CheckFiles());
  return std::unique_ptr<ReplicaLog>(std::move(log));
}

Result<std::optional<LogDamage>> RepairFollowerLog(const std::string& dir,
                                                   const LogConfig& config) {
  auto damage = FindLogDamage(dir, config.limits, config.fs);
  if (!damage || !*damage) return damage;
  auto writer = PartitionWriter::Open(dir, config, false, nullptr);
  if (!writer) return writer.error();
  MQ_RETURN_IF_ERROR((*writer)->TruncateTo((*damage)->valid_end));
  MQ_RETURN_IF_ERROR((*writer)->Close());
  return damage;
}

Result<std::vector<FollowerPosition>> ReadReplicaPositions(const std::string& dir, FileSystem* fs) {
  auto dir_fd = OpenDirectory(dir, false, fs);
  if (!dir_fd) return dir_fd.error();
  return ReadPositionsFile(FsOrDefault(fs), dir_fd->get(), dir);
}

Result<FollowerStop> DecodeFollowerStop(std::string_view bytes, const std::string& file) {
  std::optional<FollowerStop> out;
  Status s = ParseCheckpoint(
      bytes, file, format::kFollowerStoppedFields,
      [&](std::span<const CheckpointField> f) -> Status {
        if (out) return Status::Corruption(file, f[0].position, "R58", "more than one entry");
        auto when = CheckpointNumber(f[0], INT64_MAX, file, "R58", "stopped at");
        if (!when) return when.error();
        auto exit_status = CheckpointNumber(f[1], 255, file, "R58", "exit status");
        if (!exit_status) return exit_status.error();
        out = FollowerStop{*when, static_cast<int32_t>(*exit_status)};
        return Status::Ok();
      });
  if (!s.ok()) return s;
  if (!out) return Status::Corruption(file, bytes.size(), "R58", "no entry");
  return *out;
}

std::string EncodeFollowerStop(const FollowerStop& stop) {
  return FormatCheckpoint({fmt::format("{} {}", std::max<int64_t>(0, stop.stopped_ms),
                                       std::clamp(stop.exit_status, 0, 255))});
}

Status RecordFollowerStop(const std::string& dir, const FollowerStop& stop, FileSystem* fs) {
  auto dir_fd = OpenDirectory(dir, false, fs);
  if (!dir_fd) return dir_fd.error();
  const std::string text = EncodeFollowerStop(stop);
  return WriteFileAtomic(dir_fd->get(), format::kFollowerStoppedName, AsBytes(text),
                         FsOrDefault(fs), {}, true);
}

Result<std::optional<FollowerStop>> ReadFollowerStop(const std::string& dir, FileSystem* fs) {
  auto dir_fd = OpenDirectory(dir, false, fs);
  if (!dir_fd) return dir_fd.error();
  const std::string path = dir + "/" + format::kFollowerStoppedName;
  auto bytes =
      ReadCheckpointFile(FsOrDefault(fs), dir_fd->get(), format::kFollowerStoppedName, path);
  if (!bytes && bytes.error().code() == Code::kNotFound) return std::optional<FollowerStop>{};
  if (!bytes) return bytes.error();
  auto stop = DecodeFollowerStop(*bytes, path);
  if (!stop) return stop.error();
  return std::optional<FollowerStop>(*stop);
}

Status ClearFollowerStop(const std::string& dir, FileSystem* fs) {
  auto dir_fd = OpenDirectory(dir, false, fs);
  if (!dir_fd) return dir_fd.error();
  fs = FsOrDefault(fs);
  Status s = fs->Unlink(dir_fd->get(), format::kFollowerStoppedName);
  if (s.code() == Code::kNotFound) return Status::Ok();
  MQ_RETURN_IF_ERROR(s);
  return fs->SyncDir(dir_fd->get());
}

std::unique_ptr<LeaderLink> DirectLeaderLink(const ReplicationContext& ctx, ReplicaLog* leader) {
  return std::make_unique<DirectLink>(ctx, leader);
}

}  // namespace mq
