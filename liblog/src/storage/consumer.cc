#include "mq/consumer.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "io/multi_waiter.h"

namespace mq {

struct Consumer::Cursor {
  int32_t partition = 0;
  std::string dir;
  StartPosition start;
  std::unique_ptr<PartitionReader> reader;  // null until the partition has a log, or closed
  std::list<Cursor*>::iterator in_open;     // its place in open_ while `reader` is open
  bool positioned = false;                  // next_offset is known: reopen seeks there
  int64_t next_offset = 0;                  // records below it are not handed out
  int32_t epoch = -1;  // partitionLeaderEpoch of the batch next_offset follows (-1: none)
  // What the reader knew of the log when it was closed (reopen goes on from it).
  std::optional<ReaderTrail> trail;
  std::optional<int64_t> last_handed_out;
  std::optional<int64_t> start_timestamp;  // kTimestamp: applies to the first batch read
  int64_t stop_offset = std::numeric_limits<int64_t>::max();  // stop_at_end
  int64_t stalled_end = -1;  // committed end seen when Next() last found nothing
  bool after_skip = false;   // a corrupt batch was skipped: count the offsets it hid
  bool done = false;         // finished (stop_at_end, stop_timestamp, stopped)
  bool stopped = false;      // stop_corrupt: a corrupt batch stopped it
};

// The batch whose records are being handed out.
struct Consumer::Batch {
  Cursor* cursor = nullptr;
  RecordReader records;
  bool log_append_time = false;
  int64_t last_offset = 0;
  std::optional<int64_t> start_timestamp;  // records before it are passed over
  int32_t leader_epoch = -1;
};

namespace {

// Positions `reader` per `start`; returns the first offset to hand out.
Result<int64_t> SeekStart(PartitionReader& reader, const StartPosition& start, int64_t end) {
  using K = StartPosition::Kind;
  int64_t begin = reader.log_start_offset();
  int64_t target = 0;
  switch (start.kind) {
    case K::kBeginning:
      target = begin;
      break;
    case K::kEnd:
      target = end;
      break;
    case K::kOffset:
      target = std::max(start.value, begin);
      break;  // retention.md §20.1
    case K::kFromEnd:
      target = std::max(begin, end - std::min(start.value, end));
      break;
    case K::kTimestamp:
      MQ_RETURN_IF_ERROR(reader.SeekTimestamp(start.value));
      return int64_t{0};
  }
  // Records below a start within the log count as handed out (position()):
  // a cut below it while the partition is read sends the reader back there
  // as one below a batch it returned would (SeekAfter, segment.md §9.4).
  MQ_RETURN_IF_ERROR(target <= end ? reader.SeekAfter(target, ReaderTrail{}) : reader.Seek(target));
  return target;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SleepMs(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

Consumer::Consumer(const DataDir& dir, std::string topic, ConsumerOptions options,
                   TopicConfig config)
    : dir_(dir), topic_(std::move(topic)), options_(std::move(options)), config_(config) {
  // Readers accept at least what the topic lets writers append.
  read_.limits = DataDir::DecodeLimitsFor(config_, options_.limits);
  read_.offsets = config_.cleanup_policy == CleanupPolicy::kDelete ? OffsetPolicy::kContiguous
                                                                   : OffsetPolicy::kGapsAllowed;
  // A replicated topic: only what every in-sync replica holds (a record
  // above the high watermark may still be cut by a failover).
  read_.bound_by_high_watermark = !config_.cluster.empty();
}

Consumer::~Consumer() = default;

Result<std::unique_ptr<Consumer>> Consumer::Open(const DataDir& dir, std::string topic,
                                                 ConsumerOptions options) {
  auto config = dir.ReadTopic(topic);
  if (!config) return config.error();
  return std::unique_ptr<Consumer>(
      new Consumer(dir, std::move(topic), std::move(options), std::move(*config)));
}

Consumer::Cursor* Consumer::Find(int32_t partition) const {
  for (const auto& c : cursors_)
    if (c->partition == partition) return c.get();
  return nullptr;
}

std::vector<int32_t> Consumer::assignment() const {
  std::vector<int32_t> out;
  for (const auto& c : cursors_) out.push_back(c->partition);
  return out;
}

std::optional<int64_t> Consumer::position(int32_t partition) const {
  Cursor* c = Find(partition);
  if (!c || !c->positioned || c->start_timestamp) return std::nullopt;
  // A batch being handed out may still pass over records before a
  // timestamp start.
  if (batch_ && batch_->cursor == c && batch_->start_timestamp) return std::nullopt;
  return c->next_offset;
}

bool Consumer::stopped(int32_t partition) const {
  Cursor* c = Find(partition);
  return c && c->stopped;
}

std::optional<int64_t> Consumer::last_handed_out(int32_t partition) const {
  Cursor* c = Find(partition);
  return c ? c->last_handed_out : std::nullopt;
}

bool Consumer::finished() const {
  return std::all_of(cursors_.begin(), cursors_.end(), [](const auto& c) { return c->done; });
}

namespace {

// A notice of `kind` about the partition of cursor `c`.
template <typename Cursor>
ConsumerNotice NoticeFor(ConsumerNotice::Kind kind, const Cursor& c) {
  ConsumerNotice n;
  n.kind = kind;
  n.partition = c.partition;
  n.dir = c.dir;
  return n;
}

}  // namespace

void Consumer::Notify(const ConsumerNotice& n) {
  if (options_.on_notice) options_.on_notice(n);
}

// Index entries the log contradicted: the reader scanned instead.
void Consumer::ReportWarnings(Cursor& c) {
  for (Problem& p : c.reader->TakeWarnings()) {
    ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kIndexWarning, c);
    n.problem = std::move(p);
    Notify(n);
  }
}

// Marks `c` (open) as the most recently read.
void Consumer::Touch(Cursor& c) { open_.splice(open_.begin(), open_, c.in_open); }

// Closes the reader of `c`, if open; its next_offset says where to go on.
// A batch of `c` being handed out is dropped: its records from next_offset
// on are read again when `c` is reopened.
void Consumer::Release(Cursor& c) {
  if (batch_ && batch_->cursor == &c) {
    if (batch_->start_timestamp) c.start_timestamp = batch_->start_timestamp;
    batch_.reset();
  }
  if (!c.reader) return;
  // The epochs it handed out below next_offset, the rewrites counter and
  // the truncation history it read them at: reopened, it finds a cut made
  // while it was closed (SeekAfter).
  c.trail.reset();
  if (c.positioned) {
    ReaderTrail t = c.reader->trail();
    std::erase_if(t.epochs, [&](const auto& e) { return e.second >= c.next_offset; });
    if (t.epochs.empty() && c.epoch >= 0) t.epochs.emplace_back(c.epoch, c.next_offset);
    c.trail = std::move(t);
  }
  open_.erase(c.in_open);
  c.reader.reset();
}

// Closes least recently read readers until one more may be opened. A
// cursor that just skipped a corrupt batch keeps its reader (reopening at
// next_offset would find that batch again) unless nothing else can go.
void Consumer::MakeRoom() { CloseReadersAbove(std::max<size_t>(options_.max_open, 1) - 1); }

void Consumer::CloseReadersAbove(size_t keep) {
  while (open_.size() > keep) {
    auto victim = std::prev(open_.end());
    while (victim != open_.begin() && (*victim)->after_skip) --victim;
    Release(**victim);
  }
}

void Consumer::set_max_open(size_t max_open) {
  options_.max_open = max_open;
  CloseReadersAbove(std::max<size_t>(max_open, 1));
  // Its threads hold a reader per partition: past half of the budget,
  // WaitForAppend polls instead (and starts them again if it is raised).
  waiter_.reset();
}

// Opens the reader of `c`, closing another first if max_open are open.
Status Consumer::OpenReader(Cursor& c) {
  MakeRoom();
  auto reader = PartitionReader::Open(c.dir, read_);
  if (!reader) return reader.error();
  c.reader = std::move(*reader);
  open_.push_front(&c);
  c.in_open = open_.begin();
  return Status::Ok();
}

// Opens the reader of `c` again (it was closed to bound the open files) and
// positions it where reading stopped, as the log has it now: a truncation
// while it was closed may have cut records handed out (the log ends below
// next_offset, the epochs it handed out end below it, or the truncation
// history recorded a cut below it since: ReaderTrail); the reader then goes
// back there and ReadBatch() reports the cut.
Status Consumer::Reopen(Cursor& c) {
  MQ_RETURN_IF_ERROR(OpenReader(c));
  // A timestamp start not applied yet (nothing read): seek by timestamp again.
  Status s = c.start_timestamp ? c.reader->SeekTimestamp(*c.start_timestamp)
             : c.trail         ? c.reader->SeekAfter(c.next_offset, *c.trail)
                               : c.reader->SeekAfter(c.next_offset, c.epoch);
  ReportWarnings(c);
  return s;
}

// Opens the reader of `c` and seeks to its start. A partition nobody has
// written to yet (no segments) is left unopened: it reads as empty and is
// opened again on each later round.
Status Consumer::OpenCursor(Cursor& c, bool at_start) {
  auto unborn = [&] {
    Release(c);
    if (at_start && options_.stop_at_end) c.done = true;  // empty when assigned
    return Status::Ok();
  };
  if (Status s = OpenReader(c); !s.ok()) return s.code() == Code::kNotFound ? unborn() : s;
  // One end for both the start (end, -N) and the stop_at_end stop, so they
  // agree. A partition born after it was assigned had an end of 0 then.
  int64_t end = at_start ? c.reader->end_offset() : 0;
  auto next = SeekStart(*c.reader, c.start, end);
  ReportWarnings(c);
  // While its first writer creates a partition, a file may be missing for
  // a moment: still unborn, look again next round.
  if (!next) return next.error().code() == Code::kNotFound ? unborn() : next.error();
  // -o N below the log start: retention deleted offsets N.. (R73), said
  // once, when the partition is first positioned.
  if (at_start && c.start.kind == StartPosition::Kind::kOffset && c.start.value >= 0 &&
      c.start.value < *next && *next == c.reader->log_start_offset()) {
    ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kOutOfRange, c);
    n.first_offset = c.start.value;
    n.last_offset = *next - 1;
    Notify(n);
  }
  c.next_offset = *next;
  c.positioned = true;
  if (c.start.kind == StartPosition::Kind::kTimestamp) c.start_timestamp = c.start.value;
  if (options_.stop_at_end) {
    c.stop_offset = end;
    c.done = c.next_offset >= end;
  }
  if (c.done) Release(c);
  return Status::Ok();
}

Status Consumer::Assign(int32_t partition, StartPosition start) {
  if (partition < 0 || partition >= config_.partitions)
    return Status(Code::kInvalidArgument,
                  fmt::format("topic {} has {} partition(s), 0 to {}: no partition {}", topic_,
                              config_.partitions, config_.partitions - 1, partition));
  if (Find(partition))
    return Status(Code::kInvalidArgument,
                  fmt::format("topic {} partition {} is assigned already", topic_, partition));
  auto c = std::make_unique<Cursor>();
  c->partition = partition;
  c->dir = dir_.PartitionDir(topic_, partition);
  c->start = start;
  Status s = OpenCursor(*c, true);
  if (!s.ok() && s.code() == Code::kCorruption && options_.stop_corrupt && !options_.skip_corrupt) {
    // Its start cannot be read: assigned, stopped where it was to start.
    Release(*c);
    if (start.kind == StartPosition::Kind::kOffset) {
      c->next_offset = start.value;
      c->positioned = true;
    }
    Stop(*c, Status(s.code(), fmt::format("{} (topic {} partition {}, start)", s.message(), topic_,
                                          partition)));
    s = Status::Ok();
  }
  if (!s.ok()) {
    Release(*c);
    return s;
  }
  cursors_.push_back(std::move(c));
  waiter_.reset();  // it watches the old assignment
  return Status::Ok();
}

bool Consumer::Unassign(int32_t partition) {
  auto it = std::find_if(cursors_.begin(), cursors_.end(),
                         [&](const auto& c) { return c->partition == partition; });
  if (it == cursors_.end()) return false;
  Release(**it);  // drops a batch of it being handed out
  size_t index = static_cast<size_t>(it - cursors_.begin());
  cursors_.erase(it);
  // The round goes on with the cursor that followed.
  if (index < turn_) --turn_;
  waiter_.reset();
  return true;
}

bool Consumer::ReadNext(int32_t partition) {
  auto it = std::find_if(cursors_.begin(), cursors_.end(),
                         [&](const auto& c) { return c->partition == partition; });
  if (it == cursors_.end()) return false;
  if (batch_ && batch_->cursor == it->get()) return true;  // it is being read
  std::unique_ptr<Cursor> next = std::move(*it);
  size_t index = static_cast<size_t>(it - cursors_.begin());
  cursors_.erase(it);
  if (index < turn_) --turn_;
  if (batch_) {
    // Its turn is the current one: it comes again right after.
    Cursor* aside = batch_->cursor;
    Release(*aside);
    auto at = std::find_if(cursors_.begin(), cursors_.end(),
                           [&](const auto& c) { return c.get() == aside; });
    turn_ = static_cast<size_t>(at - cursors_.begin());
  }
  turn_ = std::min(turn_, cursors_.size());
  cursors_.insert(cursors_.begin() + static_cast<std::ptrdiff_t>(turn_), std::move(next));
  return true;
}

// A batch failed a rule. Without skip_corrupt this is the error Next()
// returns; with it the skip is reported and reading goes on after the batch.
Status Consumer::OnBadBatch(Cursor& c, Status s, bool from_reader) {
  std::string where =
      fmt::format("topic {} partition {}, next offset {}", topic_, c.partition, c.next_offset);
  // The reader names the segment file alone: give its path.
  std::string what = s.message();
  if (!s.file().empty() && s.file().find('/') == std::string::npos && what.starts_with(s.file()))
    what = c.dir + "/" + what;
  Status full(s.code(), fmt::format("{} ({})", what, where));
  if (s.code() == Code::kCorruption && !options_.skip_corrupt && options_.stop_corrupt) {
    Stop(c, std::move(full));
    return Status::Ok();
  }
  if (s.code() != Code::kCorruption || !options_.skip_corrupt) return full;
  ++skipped_batches_;
  ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kSkippedBatch, c);
  n.error = std::move(full);
  Notify(n);
  c.after_skip = true;
  if (from_reader) return c.reader->SkipCorrupt();
  // The records were bad: Next() already moved past the batch, whose
  // offsets are not handed out.
  return Status::Ok();
}

// stop_corrupt: `c` stops at its next offset; `s` says why.
void Consumer::Stop(Cursor& c, Status s) {
  c.stopped = true;
  c.done = true;
  ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kStoppedPartition, c);
  n.error = std::move(s);
  n.first_offset = c.next_offset;
  Notify(n);
}

// Starts handing out the records of `batch`, read from `c` (batch_ is set
// unless the batch has nothing to hand out).
Status Consumer::BeginBatch(Cursor& c, const BatchView& batch) {
  const BatchHeader& h = batch.header();
  if (std::exchange(c.after_skip, false) && h.base_offset > c.next_offset) {
    skipped_offsets_ += static_cast<uint64_t>(h.base_offset - c.next_offset);
    ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kSkippedOffsets, c);
    n.first_offset = c.next_offset;
    n.last_offset = h.base_offset - 1;
    Notify(n);
  }
  // R91: records below the offset the reader went on at (the log start,
  // after retention deleted what this partition was to read next) are not
  // handed out, though the batch holding it is read whole. After the
  // offsets a skipped corrupt batch held are counted: the reader goes on
  // past them too.
  c.next_offset = std::max(c.next_offset, c.reader->first_offset());
  std::optional<int64_t> start_ts = std::exchange(c.start_timestamp, std::nullopt);
  if (h.is_control() || h.last_offset() < c.next_offset) {
    if (h.last_offset() >= c.next_offset) c.epoch = h.partition_leader_epoch;
    c.next_offset = std::max(c.next_offset, h.last_offset() + 1);
    return Status::Ok();
  }
  LogPosition pos = c.reader->position();
  auto records = RecordReader::Open(batch, &scratch_, read_.limits, pos.file, pos.position);
  if (!records) return OnBadBatch(c, records.error(), false);
  batch_.reset(new Batch{&c, std::move(*records), h.log_append_time(), h.last_offset(), start_ts,
                         h.partition_leader_epoch});
  return Status::Ok();
}

// The next record of batch_ into out_ (true), or false when the batch is
// done with (batch_ is reset; batch_error_ says if it failed). Next()'s
// per-record path: inlined there.
[[gnu::always_inline]] inline bool Consumer::NextRecord() {
  Batch& b = *batch_;
  Cursor& c = *b.cursor;
  const std::optional<int64_t>& end_ts = options_.stop_timestamp;
  RecordView& r = out_.record;
  while (b.records.Read(&r)) {
    if (r.offset < c.next_offset) continue;
    if (r.offset >= c.stop_offset || (end_ts && r.timestamp >= *end_ts)) {
      c.done = true;
      batch_.reset();
      return false;
    }
    if (b.start_timestamp) {
      if (r.timestamp < *b.start_timestamp) continue;
      b.start_timestamp.reset();
    }
    c.next_offset = r.offset + 1;
    c.epoch = b.leader_epoch;
    c.last_handed_out = r.offset;
    out_.partition = c.partition;
    out_.log_append_time = b.log_append_time;
    out_.batch_last_offset = b.last_offset;
    out_.leader_epoch = b.leader_epoch;
    return true;
  }
  Status s = b.records.status();
  int64_t last = b.last_offset;
  int32_t epoch = b.leader_epoch;
  batch_.reset();
  if (!s.ok()) {
    batch_error_ = OnBadBatch(c, std::move(s), false);
    return false;
  }
  if (last >= c.next_offset) c.epoch = epoch;
  c.next_offset = std::max(c.next_offset, last + 1);
  if (c.next_offset >= c.stop_offset) c.done = true;
  return false;
}

Result<Consumer::Step> Consumer::ReadBatch(Cursor& c) {
  if (!c.reader && c.positioned) {
    MQ_RETURN_IF_ERROR(Reopen(c));
  } else if (!c.reader) {
    MQ_RETURN_IF_ERROR(OpenCursor(c, false));
    if (!c.reader) return Step::kIdle;
  } else {
    Touch(c);
  }
  auto next = c.reader->Next();
  ReportWarnings(c);
  // Records handed out were cut, and the reader went back to where the
  // log diverged: the records there now are not passed over as read.
  if (auto cut = c.reader->TakeCut(); cut && *cut < c.next_offset) {
    ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kTruncated, c);
    n.first_offset = *cut;
    n.last_offset = c.next_offset - 1;
    Notify(n);
    c.next_offset = *cut;
    c.stalled_end = -1;
  }
  // Retention deleted what this partition was to read next (R73): said,
  // never passed over silently.
  if (auto gone = c.reader->TakeOutOfRange(); gone && gone->offset < gone->log_start_offset) {
    ConsumerNotice n = NoticeFor(ConsumerNotice::Kind::kOutOfRange, c);
    n.first_offset = gone->offset;
    n.last_offset = gone->log_start_offset - 1;
    Notify(n);
  }
  if (!next) {
    MQ_RETURN_IF_ERROR(OnBadBatch(c, next.error(), true));
    return Step::kProgress;
  }
  if (!*next) {
    // At the committed end as Next() saw it. If the end has moved since,
    // look again once before waiting, so an append between the two reads
    // is not slept through.
    int64_t end = c.reader->end_offset();
    if (end > c.next_offset && end != c.stalled_end) {
      c.stalled_end = end;
      return Step::kProgress;
    }
    c.stalled_end = end;
    if (options_.stop_at_end) c.done = true;  // nothing more below the end captured
    return Step::kIdle;
  }
  MQ_RETURN_IF_ERROR(BeginBatch(c, **next));
  return Step::kProgress;
}

// Ends the turn of `c`, whose batch was read last.
void Consumer::EndTurn(Cursor& c) {
  if (c.done) Release(c);
  ++turn_;
}

// A round reads one batch of each unfinished cursor in turn. A round in
// which nothing moved ends with nullptr; the next call starts a new one.
Result<const ConsumedRecord*> Consumer::Next() {
  for (;;) {
    if (batch_) {
      Cursor& c = *batch_->cursor;
      if (NextRecord()) return &out_;
      EndTurn(c);
      if (!batch_error_.ok()) return std::exchange(batch_error_, Status::Ok());
      continue;
    }
    if (turn_ >= cursors_.size()) {
      turn_ = 0;
      if (!std::exchange(round_progress_, false)) return nullptr;
      continue;
    }
    Cursor& c = *cursors_[turn_];
    if (c.done) {
      ++turn_;
      continue;
    }
    auto step = ReadBatch(c);
    if (!step && step.error().code() == Code::kCorruption && options_.stop_corrupt &&
        !options_.skip_corrupt) {
      // Its reader could not be opened again where it stopped reading.
      Stop(c, Status(Code::kCorruption,
                     fmt::format("{} (topic {} partition {}, next offset {})",
                                 step.error().message(), topic_, c.partition, c.next_offset)));
      EndTurn(c);
      continue;
    }
    if (!step) {
      ++turn_;
      return step.error();
    }
    if (*step == Step::kProgress) round_progress_ = true;
    if (!batch_) EndTurn(c);
  }
}

bool Consumer::WaitForAppend(int timeout_ms) {
  if (batch_) return true;  // records left to hand out
  std::vector<int64_t> known;
  // What each open reader is positioned at: a rewrite (a truncation) since
  // wakes the wait as an append does, and Next() finds where the log was cut.
  std::vector<std::optional<uint32_t>> rewrites;
  Cursor* only = nullptr;
  size_t active = 0;
  for (auto& c : cursors_) {
    known.push_back(c->done ? -1 : std::max(c->stalled_end, c->next_offset));
    rewrites.push_back(c->done || !c->reader ? std::nullopt
                                             : std::optional(c->reader->positioned_rewrites()));
    if (!c->done) {
      only = c.get();
      ++active;
    }
  }
  if (active == 0) {
    SleepMs(timeout_ms);
    return false;
  }
  if (active == 1 && only->reader)
    return only->reader->WaitForAppend(std::max(only->stalled_end, only->next_offset), timeout_ms);
  if (active == 1) {  // an unborn partition: nothing to wait on until a writer creates it
    SleepMs(std::min(kUnbornPollMs, timeout_ms));
    return true;
  }
  // A thread per partition would hold a reader each on top of the
  // consumer's: too many partitions for that are polled (their readers are
  // opened again in turn by the next round).
  if (cursors_.size() > kMaxWaiterThreads || 2 * cursors_.size() > options_.max_open) {
    int64_t now = NowMs();
    if (next_poll_ms_ == 0) next_poll_ms_ = now + kPollMs;
    SleepMs(std::min<int64_t>(timeout_ms, next_poll_ms_ - now));
    if (NowMs() < next_poll_ms_) return false;
    next_poll_ms_ = 0;
    return true;
  }
  if (!waiter_) {
    std::vector<std::string> dirs;
    for (auto& c : cursors_) dirs.push_back(c->dir);
    auto w = MultiWaiter::Start(dirs, read_);
    if (!w) {
      // No waiter: fall back to a look after the timeout.
      SleepMs(timeout_ms);
      return true;
    }
    waiter_ = std::move(*w);
  }
  return waiter_->Wait(known, rewrites, timeout_ms);
}

}  // namespace mq
