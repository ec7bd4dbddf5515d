#include "consumer.h"

#include <poll.h>

#include <algorithm>
#include <iterator>
#include <chrono>
#include <limits>
#include <thread>

namespace mq::consume {

// Longest a follower blocks before it checks its output again.
constexpr int kWaitSliceMs = 250;

struct Consumer::Cursor {
  int32_t partition = 0;
  std::string dir;
  StartPosition start;
  std::unique_ptr<PartitionReader> reader;  // null until the partition has a log, or closed
  std::list<Cursor*>::iterator in_open;      // its place in open_ while `reader` is open
  bool positioned = false;                 // next_offset is known: reopen seeks there
  int64_t next_offset = 0;                 // records below it are not delivered
  std::optional<int64_t> start_timestamp;  // s@: applies to the first batch read
  int64_t stop_offset = std::numeric_limits<int64_t>::max();  // -e
  int64_t stalled_end = -1;  // committed end seen when Next() last found nothing
  bool after_skip = false;   // a corrupt batch was skipped: count the offsets it hid
  bool done = false;
};

Consumer::Consumer(ConsumeOptions options, Printer* printer, cli::Output* out)
    : options_(std::move(options)), printer_(printer), out_(out) {}
Consumer::~Consumer() = default;

namespace {

// Positions `reader` per `start`; returns the first offset to deliver.
Result<int64_t> SeekStart(PartitionReader& reader, const StartPosition& start, int64_t end) {
  using K = StartPosition::Kind;
  int64_t begin = reader.log_start_offset();
  int64_t target = 0;
  switch (start.kind) {
    case K::kBeginning: target = begin; break;
    case K::kEnd: target = end; break;
    case K::kOffset: target = start.value; break;
    case K::kFromEnd: target = std::max(begin, end - std::min(start.value, end)); break;
    case K::kTimestamp:
      MQ_RETURN_IF_ERROR(reader.SeekTimestamp(start.value));
      return int64_t{0};
  }
  MQ_RETURN_IF_ERROR(reader.Seek(target));
  return target;
}

}  // namespace

// Marks `c` (open) as the most recently read.
void Consumer::Touch(Cursor& c) { open_.splice(open_.begin(), open_, c.in_open); }

// Closes the reader of `c`, if open; its next_offset says where to go on.
void Consumer::Release(Cursor& c) {
  if (!c.reader) return;
  open_.erase(c.in_open);
  c.reader.reset();
}

// Closes least recently read readers until one more may be opened. A
// cursor that just skipped a corrupt batch keeps its reader (reopening at
// next_offset would find that batch again) unless nothing else can go.
void Consumer::MakeRoom() {
  const size_t limit = std::max<size_t>(options_.max_open, 1);
  while (open_.size() >= limit) {
    auto victim = std::prev(open_.end());
    while (victim != open_.begin() && (*victim)->after_skip) --victim;
    Release(**victim);
  }
}

// Opens the reader of `c` again (it was closed to bound the open files) and
// positions it where reading stopped.
Status Consumer::Reopen(Cursor& c) {
  MakeRoom();
  ReadOptions read;
  read.limits = options_.limits;
  read.offsets = options_.offsets;
  auto reader = PartitionReader::Open(c.dir, read);
  if (!reader) return reader.error();
  c.reader = std::move(*reader);
  open_.push_front(&c);
  c.in_open = open_.begin();
  // s@ not applied yet (nothing read): seek by timestamp again.
  Status s = c.start_timestamp ? c.reader->SeekTimestamp(*c.start_timestamp)
                               : c.reader->Seek(c.next_offset);
  ReportWarnings(c);
  return s;
}

// Opens the reader of `c` and seeks to its start. A partition nobody has
// written to yet (no segments) is left unopened: it reads as empty and is
// opened again on each later round.
Status Consumer::OpenCursor(Cursor& c, bool at_start) {
  auto unborn = [&] {
    Release(c);
    if (at_start && options_.exit_at_end) c.done = true;  // empty at start
    return Status::Ok();
  };
  MakeRoom();
  ReadOptions read;
  read.limits = options_.limits;
  read.offsets = options_.offsets;
  auto reader = PartitionReader::Open(c.dir, read);
  if (!reader) return reader.error().code() == Code::kNotFound ? unborn() : reader.error();
  c.reader = std::move(*reader);
  open_.push_front(&c);
  c.in_open = open_.begin();
  // One end for both the start (end, -N) and the -e stop, so they agree. A
  // partition born after start-up had an end of 0 then.
  int64_t end = at_start ? c.reader->end_offset() : 0;
  auto next = SeekStart(*c.reader, c.start, end);
  ReportWarnings(c);
  // While its first writer creates a partition, a file may be missing for
  // a moment: still unborn, look again next round.
  if (!next) return next.error().code() == Code::kNotFound ? unborn() : next.error();
  c.next_offset = *next;
  c.positioned = true;
  if (c.start.kind == StartPosition::Kind::kTimestamp) c.start_timestamp = c.start.value;
  if (options_.exit_at_end) {
    c.stop_offset = end;
    c.done = c.next_offset >= end;
  }
  if (c.done) Release(c);
  return Status::Ok();
}

Status Consumer::Open(const DataDir& dir) {
  for (int32_t p : options_.partitions) {
    auto c = std::make_unique<Cursor>();
    c->partition = p;
    c->dir = dir.PartitionDir(options_.topic, p);
    c->start = options_.positions.StartFor(p, {StartPosition::Kind::kBeginning, 0});
    MQ_RETURN_IF_ERROR(OpenCursor(*c, true));
    dirs_.push_back(c->dir);
    cursors_.push_back(std::move(c));
  }
  return Status::Ok();
}

// A batch failed a rule. Without --skip-corrupt this ends the run (exit 65);
// with it the skip is reported and reading goes on after the batch.
Status Consumer::OnBadBatch(Cursor& c, Status s, bool from_reader) {
  std::string where = fmt::format("topic {} partition {}, next offset {}", options_.topic,
                                  c.partition, c.next_offset);
  // liblog names the segment file alone: give its path.
  std::string what = s.message();
  if (!s.file().empty() && s.file().find('/') == std::string::npos && what.starts_with(s.file()))
    what = c.dir + "/" + what;
  if (s.code() != Code::kCorruption || !options_.skip_corrupt)
    return Status(s.code(), fmt::format("{} ({})", what, where));
  ++skipped_batches_;
  if (!options_.quiet) cli::Warn(fmt::format("skipping corrupt batch: {} ({})", what, where));
  c.after_skip = true;
  if (from_reader) return c.reader->SkipCorrupt();
  // The records were bad: Next() already moved past the batch, whose
  // offsets are not delivered.
  return Status::Ok();
}

// Index entries the log contradicted: the reader scanned instead; say so.
void Consumer::ReportWarnings(Cursor& c) {
  for (const Problem& p : c.reader->TakeWarnings()) {
    if (!options_.quiet)
      cli::Warn(fmt::format("{}/{}: position {}: {}: {}", c.dir, p.file, p.position, p.rule,
                            p.detail));
  }
}

Status Consumer::Deliver(Cursor& c, const BatchView& batch) {
  const BatchHeader& h = batch.header();
  if (std::exchange(c.after_skip, false) && h.base_offset > c.next_offset) {
    uint64_t hidden = static_cast<uint64_t>(h.base_offset - c.next_offset);
    skipped_offsets_ += hidden;
    if (!options_.quiet)
      cli::Warn(fmt::format("skipped offsets {}..{} of topic {} partition {}", c.next_offset,
                            h.base_offset - 1, options_.topic, c.partition));
  }
  std::optional<int64_t> start_ts = std::exchange(c.start_timestamp, std::nullopt);
  if (h.is_control() || h.last_offset() < c.next_offset) {
    c.next_offset = std::max(c.next_offset, h.last_offset() + 1);
    return Status::Ok();
  }
  LogPosition pos = c.reader->position();
  auto reader = RecordReader::Open(batch, &scratch_, options_.limits, pos.file, pos.position);
  if (!reader) return OnBadBatch(c, reader.error(), false);
  const std::optional<int64_t>& end_ts = options_.positions.end_timestamp;
  const bool need_headers =
      printer_->needs_headers() || dispatcher_ || !options_.header_filters.empty();
  RecordView r;
  while (reader->Read(&r)) {
    if (r.offset < c.next_offset) continue;
    if (r.offset >= c.stop_offset || (end_ts && r.timestamp >= *end_ts)) {
      c.done = true;
      return Status::Ok();
    }
    if (start_ts) {
      if (r.timestamp < *start_ts) continue;
      start_ts.reset();
    }
    c.next_offset = r.offset + 1;
    if (need_headers) headers_ = r.headers();
    if (!options_.header_filters.empty() && !MatchesAll(headers_, options_.header_filters)) continue;
    if (dispatcher_)
      MQ_RETURN_IF_ERROR(dispatcher_->Add(c.partition, h.log_append_time(), r, headers_));
    else
      printer_->Print(c.partition, h.log_append_time(), r, headers_);
    if (++delivered_ == options_.count) {
      stop_ = true;
      return Status::Ok();
    }
  }
  if (!reader->status().ok()) return OnBadBatch(c, reader->status(), false);
  c.next_offset = std::max(c.next_offset, h.last_offset() + 1);
  if (c.next_offset >= c.stop_offset) c.done = true;
  return Status::Ok();
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
    if (options_.exit_at_end) c.done = true;  // nothing more below the captured end
    return Step::kIdle;
  }
  MQ_RETURN_IF_ERROR(Deliver(c, **next));
  return Step::kProgress;
}

namespace {
// True when stdout is a pipe whose reader has gone (`| head` finished):
// a follower blocked waiting for appends would otherwise notice only at its
// next write, which may never come.
bool OutputClosed() {
  pollfd p{1, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}
}  // namespace

Status Consumer::WaitForData() {
  std::vector<int64_t> known;
  Cursor* only = nullptr;
  size_t active = 0;
  for (auto& c : cursors_) {
    known.push_back(c->done ? -1 : std::max(c->stalled_end, c->next_offset));
    if (!c->done) {
      only = c.get();
      ++active;
    }
  }
  if (active == 1 && only->reader) {
    only->reader->WaitForAppend(std::max(only->stalled_end, only->next_offset), kWaitSliceMs);
    return Status::Ok();
  }
  if (active == 1) {  // an unborn partition: nothing to wait on until a writer creates it
    std::this_thread::sleep_for(std::chrono::milliseconds(kUnbornPollMs));
    return Status::Ok();
  }
  // A thread per partition would hold a reader each on top of the
  // consumer's: too many partitions for that are polled (their readers are
  // opened again in turn by the next round).
  if (cursors_.size() > kMaxWaiterThreads || 2 * cursors_.size() > options_.max_open) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    return Status::Ok();
  }
  if (!waiter_) {
    auto w = MultiWaiter::Start(dirs_, options_.limits);
    if (!w) return w.error();
    waiter_ = std::move(*w);
  }
  waiter_->Wait(known, kWaitSliceMs);
  return Status::Ok();
}

Status Consumer::Run(const volatile std::sig_atomic_t* interrupted) {
  if (options_.count && *options_.count == 0) return Status::Ok();
  while (!*interrupted) {
    bool progress = false, active = false;
    for (auto& c : cursors_) {
      if (c->done) continue;
      active = true;
      auto step = ReadBatch(*c);
      if (!step) return step.error();
      if (c->done) Release(*c);
      progress |= *step == Step::kProgress;
      if (stop_ || out_->broken()) return Status::Ok();
    }
    if (!active) return Status::Ok();
    if (progress) continue;
    // Every partition is at its committed end: show what we have, then wait.
    if (dispatcher_) MQ_RETURN_IF_ERROR(dispatcher_->Flush());
    if (!out_->Flush() && out_->broken()) return Status::Ok();
    if (OutputClosed()) return Status::Ok();
    MQ_RETURN_IF_ERROR(WaitForData());
  }
  return Status::Ok();
}

}  // namespace mq::consume
