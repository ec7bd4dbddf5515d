#include "producer.h"

#include "ack.h"

#include <pthread.h>

#include <climits>
#include <csignal>
#include <system_error>

#include <fmt/format.h>

#include "cli.h"

namespace mq::produce {

struct Producer::PartitionState {
  std::unique_ptr<PartitionWriter> writer;
  std::list<int32_t>::iterator
      in_open;  // its place in its appender's open list while `writer` is open
  BatchBuilder builder;
  std::vector<std::byte> out;  // finished batches, back to back
  int32_t next_sequence = 0;   // of the next message routed here
  uint64_t skip = 0;           // messages still to skip (appended by an earlier run)
  uint64_t queued = 0;         // messages in `builder` and `out`
  size_t queued_bytes = 0;     // their estimated size (part of Producer::queued_bytes_)
  bool dirty = false;          // listed in dirty_
  int64_t cursor = 0;          // next offset to print
};

namespace {

// Bytes of finished batches queued for, or being appended by, the writer
// thread before the reader waits for it (one job is let through whatever
// its size).
constexpr size_t kMaxInFlight = 1 << 20;
// Emptied job buffers kept for reuse.
constexpr size_t kMaxSpare = 2;
// Jobs pass between the reading thread and a writer thread this many bytes
// at a time (at least one job): with many partitions the jobs are small,
// and taking the shared lock for each one made the threads wait on it.
constexpr size_t kHandOffBytes = 64 << 10;

// Upper bound of a record's encoded size beyond its key, value and headers
// (kafka-format.md §2: 21 bytes), plus each header's two length varints.
size_t EstimatedSize(const Message& m) {
  size_t n = 21 + (m.key ? m.key->size() : 0) + (m.value ? m.value->size() : 0);
  for (const Header& h : m.headers) n += 10 + h.key.size() + (h.value ? h.value->size() : 0);
  return n;
}

}  // namespace

Producer::Producer(const DataDir& dir, ProducerOptions options, cli::Output* out)
    : dir_(dir), options_(std::move(options)), out_(out) {
  compress_on_append_ = options_.writer_threads > 0 && options_.compression != Compression::kNone;
  records_limit_.store(options_.batch_bytes, std::memory_order_relaxed);
  // With writer threads the CRC is computed by the thread that appends (or
  // compresses) a batch, not by the reading thread, unless the writers
  // fall behind (AppendPartition).
  seal_on_append_ = options_.writer_threads > 0;
  parts_.resize(static_cast<size_t>(options_.partitions));
  // No more threads than partitions; each keeps its share of the open
  // partitions.
  const size_t n = static_cast<size_t>(
      std::clamp(options_.partition ? 1 : options_.writer_threads, 1, options_.partitions));
  for (size_t i = 0; i < n; ++i) {
    appenders_.push_back(std::make_unique<Appender>());
    appenders_.back()->max_open = std::max<size_t>(options_.max_open / n, 1);
  }
  stats_.per_partition.assign(parts_.size(), 0);
  BatchOptions b;
  b.compression = BuilderCompression();
  b.defer_crc = seal_on_append_;
  b.zstd_level = options_.zstd_level;
  if (options_.producer_id >= 0) {
    b.producer_id = options_.producer_id;
    b.producer_epoch = 0;
    b.base_sequence = 0;
  }
  for (PartitionState& ps : parts_) ps.builder.Reset(b);
  // One partition fills a whole append group: reserve it once rather than
  // growing (and copying) it in every run.
  if (parts_.size() == 1) parts_[0].out.reserve(GroupBytes());
}

Producer::~Producer() { StopWriter(); }

size_t Producer::MaxInFlight() const {
  // One partition's jobs are early appends of at most kMaxInFlight; a
  // group flushed over many partitions may be in flight whole while the
  // next one is read and encoded (the first group's jobs wait for the
  // partitions' opens).
  return parts_.size() == 1 ? kMaxInFlight : std::max(kMaxInFlight, options_.append_bytes);
}

size_t Producer::GroupBytes() const {
  return (options_.partition_append_bytes > 0 ? options_.partition_append_bytes
                                              : options_.append_bytes) +
         2 * options_.batch_bytes;
}

Compression Producer::BuilderCompression() const {
  // With the writer thread, batches are compressed there (BatchCompressor
  // gives the bytes the builder would have).
  return compress_on_append_ ? Compression::kNone : options_.compression;
}

void Producer::NoteCompressed(size_t in, size_t out) {
  // Into many partitions each one's builder keeps the room of its largest
  // batch: they stay at batch_bytes.
  if (parts_.size() > 1 && !options_.partition) return;
  if (in == 0 || out == 0) return;
  const size_t cap = std::max(options_.batch_bytes, options_.compressed_records_max);
  // batch_bytes x in / out, in 64 bits: in and out are at most a job's bytes.
  const uint64_t wanted = uint64_t{options_.batch_bytes} * in / out;
  records_limit_.store(std::clamp<size_t>(wanted, options_.batch_bytes, cap),
                       std::memory_order_relaxed);
}

Status Producer::AppendFinished(int32_t p, std::span<std::byte> bytes, uint64_t messages) {
  if (!compress_on_append_) {
    // Built with defer_crc: sealed by the thread that appends them.
    if (seal_on_append_) MQ_RETURN_IF_ERROR(SealBatches(bytes));
    return AppendNow(p, bytes, messages);
  }
  Appender& a = AppenderOf(p);
  if (!a.compressor) {
    a.compressor = std::make_unique<BatchCompressor>(options_.compression, options_.zstd_level);
  }
  a.compressed.clear();
  MQ_RETURN_IF_ERROR(a.compressor->Compress(bytes, &a.compressed));
  NoteCompressed(bytes.size(), a.compressed.size());
  return AppendNow(p, a.compressed, messages);
}

const ProducerStats& Producer::stats() const {
  stats_.messages = appended_.load(std::memory_order_relaxed);
  // The appenders' counts are final once their threads stopped (Close).
  if (threads_) return stats_;
  stats_.appends = stats_.duplicates = 0;
  for (const auto& a : appenders_) {
    stats_.appends += a->appends;
    stats_.duplicates += a->duplicates;
  }
  return stats_;
}

Result<std::unique_ptr<Producer>> Producer::Open(const DataDir& dir, ProducerOptions options,
                                                 cli::Output* out) {
  std::unique_ptr<Producer> p(new Producer(dir, std::move(options), out));
  if (p->options_.producer_id < 0) return p;
  // Resume: the first last+1 messages routed to a partition were appended by
  // an earlier run of the same input (format-spec/producer.md, P9).
  for (int32_t i = 0; i < p->options_.partitions; ++i) {
    if (p->options_.partition && *p->options_.partition != i) continue;
    // Opening the writer first recovers the partition (and gives a new one
    // its first segment), so the sequence is read from a consistent log.
    auto w = p->Writer(i);
    if (!w) return w.error();
    auto last =
        LastProducerSequence(dir.PartitionDir(p->options_.topic, i), p->options_.producer_id);
    if (!last) return last.error();
    if (last->has_value()) p->parts_[i].skip = static_cast<uint64_t>(**last) + 1;
  }
  return p;
}

int32_t Producer::Choose(const Message& m) {
  if (options_.partition) return *options_.partition;
  if (m.partition) return *m.partition;
  if (m.key) return PartitionForKey(*m.key, options_.partitions);
  // With a producer id the partition must not depend on batching, so that a
  // re-run routes every message as before: by message index.
  if (options_.producer_id >= 0) {
    return static_cast<int32_t>(index_ % static_cast<uint64_t>(options_.partitions));
  }
  return sticky_;
}

bool Producer::AppendEarly(const PartitionState& ps) const {
  return options_.partition_append_bytes > 0 && ps.out.size() >= options_.partition_append_bytes;
}

Status Producer::Send(const Message& m) {
  const int32_t p = Choose(m);
  ++index_;
  PartitionState& ps = parts_[static_cast<size_t>(p)];
  const int32_t sequence = ps.next_sequence;
  ps.next_sequence = sequence == INT32_MAX ? 0 : sequence + 1;
  if (ps.skip > 0) {
    --ps.skip;
    ++stats_.skipped;
    return Status::Ok();
  }
  const size_t size = EstimatedSize(m);
  const size_t limit = records_limit_.load(std::memory_order_relaxed);
  if (ps.builder.count() > 0 && ps.builder.size_bytes() + size > limit) {
    MQ_RETURN_IF_ERROR(FinishBatch(p));
    if (AppendEarly(ps)) MQ_RETURN_IF_ERROR(AppendPartition(p));
  }
  if (ps.builder.count() == 0 && options_.producer_id >= 0) {
    BatchOptions b;
    b.compression = BuilderCompression();
    b.defer_crc = seal_on_append_;
    b.zstd_level = options_.zstd_level;
    b.producer_id = options_.producer_id;
    b.producer_epoch = 0;
    b.base_sequence = sequence;
    ps.builder.Reset(b);
  }
  const size_t before = ps.builder.size_bytes();
  ps.builder.Add(m);
  // Messages in unfinished batches count too: with many partitions most
  // batches are still open when the group is full. They count as encoded
  // (the estimate is an upper bound, far above it for short messages).
  const size_t grown = ps.builder.size_bytes() - before;
  queued_bytes_ += grown;
  ps.queued_bytes += grown;
  if (!ps.dirty) ps.dirty = true;
  ++ps.queued;
  ++queued_messages_;
  stats_.bytes += (m.key ? m.key->size() : 0) + (m.value ? m.value->size() : 0);
  if (options_.print_offsets) order_.push_back(p);
  if (ps.builder.size_bytes() >= limit) {
    MQ_RETURN_IF_ERROR(FinishBatch(p));
    if (queued_bytes_ < options_.append_bytes && AppendEarly(ps)) return AppendPartition(p);
  }
  if (queued_bytes_ >= options_.append_bytes) return Flush();
  return Status::Ok();
}

Status Producer::FinishBatch(int32_t p) {
  PartitionState& ps = parts_[static_cast<size_t>(p)];
  const size_t before = ps.out.size(), records = ps.builder.size_bytes();
  MQ_RETURN_IF_ERROR(ps.builder.Finish(0, &ps.out));
  if (BuilderCompression() != Compression::kNone) NoteCompressed(records, ps.out.size() - before);
  ++stats_.batches;
  // Unkeyed messages stick to one partition per batch, then move on.
  if (p == sticky_ && !options_.partition && options_.producer_id < 0) {
    sticky_ = (sticky_ + 1) % options_.partitions;
  }
  return Status::Ok();
}

// Closes the least recently used writer. Everything appended through it was
// acknowledged already, made durable as configured (Close fsyncs unless
// durability is page-cache only); a later Writer() opens the partition again.
Status Producer::CloseLeastRecent(Appender* a, bool keep) {
  const int32_t p = a->open.back();
  a->open.pop_back();
  PartitionState& ps = parts_[static_cast<size_t>(p)];
  Status s = ps.writer->Close();
  if (keep) a->closed_writers.push_back(std::move(ps.writer));
  ps.writer.reset();
  if (!s.ok()) {
    return Status(s.code(), fmt::format("{}-{}: close: {}", options_.topic, p, s.message()));
  }
  return Status::Ok();
}

Result<PartitionWriter*> Producer::Writer(int32_t p) {
  PartitionState& ps = parts_[static_cast<size_t>(p)];
  Appender& a = AppenderOf(p);
  if (ps.writer) {
    a.open.splice(a.open.begin(), a.open, ps.in_open);
    return ps.writer.get();
  }
  while (!a.open.empty() && a.open.size() >= a.max_open) {
    MQ_RETURN_IF_ERROR(CloseLeastRecent(&a));
  }
  RecoveryReport report;
  auto w =
      PartitionWriter::Open(dir_.PartitionDir(options_.topic, p), options_.log, false, &report);
  if (!w) return w.error();
  if (!options_.quiet) {
    for (const Problem& problem : report.repaired) {
      cli::Warn(fmt::format("{}: position {}: {}: repaired: {}", problem.file, problem.position,
                            problem.rule, problem.detail));
    }
  }
  ps.writer = std::move(*w);
  a.open.push_front(p);
  ps.in_open = a.open.begin();
  // Without fsync at close (page-cache durability) a run leaves an unsynced
  // tail that every later open would validate again; validated once, it is
  // made durable here so the recovery point moves past it.
  if (!options_.log.sync_on_close && report.batches_checked > 0) {
    MQ_RETURN_IF_ERROR(ps.writer->Flush());
  }
  return ps.writer.get();
}

Status Producer::AppendNow(int32_t p, std::span<std::byte> bytes, uint64_t messages) {
  PartitionState& ps = parts_[static_cast<size_t>(p)];
  auto w = Writer(p);
  if (!w) return w.error();
  if (options_.gate) {
    // Only where this root leads, in the leader's epoch.
    auto epoch = options_.gate->BeforeAppend(p);
    if (!epoch) return epoch.error();
    MQ_RETURN_IF_ERROR((*w)->BeginLeaderEpoch(*epoch));
  }
  // Every batch in `bytes` was built by FinishBatch: its CRC is fresh.
  auto r = (*w)->Append(bytes, CrcCheck::kAlreadyComputed);
  if (!r) {
    return Status(r.error().code(),
                  fmt::format("{}-{}: append: {}", options_.topic, p, r.error().message()));
  }
  if (options_.gate) MQ_RETURN_IF_ERROR(options_.gate->AfterAppend(p, r->last_offset));
  Appender& a = AppenderOf(p);
  ++a.appends;
  if (r->duplicate) ++a.duplicates;
  stats_.per_partition[static_cast<size_t>(p)] += messages;
  appended_.fetch_add(messages, std::memory_order_relaxed);
  ps.cursor = r->base_offset;
  return Status::Ok();
}

Status Producer::MakeJob(std::vector<std::byte>& out, Job* job, bool* moved) {
  // The writers fall behind (half their queue full): this job is sealed
  // here, compressed first if need be, and appended as it is.
  job->sealed = in_flight_.load(std::memory_order_relaxed) >= MaxInFlight() / 2;
  *moved = !(job->sealed && compress_on_append_);
  if (!*moved) {
    // Compressed into a buffer of its own; the batches' stays the partition's.
    if (!reader_compressor_) {
      reader_compressor_ =
          std::make_unique<BatchCompressor>(options_.compression, options_.zstd_level);
    }
    MQ_RETURN_IF_ERROR(reader_compressor_->Compress(out, &job->bytes));
    NoteCompressed(out.size(), job->bytes.size());
    out.clear();
    return Status::Ok();
  }
  if (job->sealed) MQ_RETURN_IF_ERROR(SealBatches(out));
  job->bytes = std::move(out);
  out = std::vector<std::byte>();
  return Status::Ok();
}

Status Producer::AppendPartition(int32_t p, bool stage) {
  PartitionState& ps = parts_[static_cast<size_t>(p)];
  const uint64_t messages = ps.queued;
  queued_bytes_ -= std::min(queued_bytes_, ps.queued_bytes);
  queued_messages_ -= ps.queued;
  ps.queued = 0;
  ps.queued_bytes = 0;
  ps.dirty = false;
  if (!Threaded()) {
    Status s = AppendFinished(p, ps.out, messages);
    ps.out.clear();
    // Keep memory near partitions x batch size, not partitions x append size.
    if (options_.partitions > 1 &&
        ps.out.capacity() > 2 * options_.batch_bytes +
                                options_.append_bytes / static_cast<size_t>(options_.partitions)) {
      ps.out.shrink_to_fit();
    }
    return s;
  }
  Appender& a = AppenderOf(p);
  Job job{p, {}, messages};
  bool moved = false;
  MQ_RETURN_IF_ERROR(MakeJob(ps.out, &job, &moved));
  if (stage) {
    // Flush: handed over in groups of kHandOffBytes (PushStaged).
    a.staged_bytes += job.bytes.size();
    a.staged.push_back(std::move(job));
    if (a.staged_bytes >= kHandOffBytes) return PushStaged(&a);
    return Status::Ok();
  }
  bool idle = false;
  {
    std::unique_lock lock(mu_);
    MQ_RETURN_IF_ERROR(WaitForRoom(lock, job.bytes.size()));
    if (moved && !spare_.empty()) {
      ps.out = std::move(spare_.back());
      spare_.pop_back();
    }
    in_flight_ += job.bytes.size();
    a.jobs.push_back(std::move(job));
    idle = a.idle;
  }
  // A busy thread takes the job after its current one, unwoken.
  if (idle) a.jobs_cv.notify_one();
  if (parts_.size() == 1 && ps.out.capacity() < GroupBytes()) ps.out.reserve(GroupBytes());
  return Status::Ok();
}

bool Producer::Threaded() {
  if (threads_) return true;
  if (options_.writer_threads == 0) return false;
  if (StartWriters()) return true;
  // No thread to be had: append on this one from now on (batches built for
  // the threads are still compressed and sealed before they are appended).
  options_.writer_threads = 0;
  return false;
}

bool Producer::AttachReader(std::function<void()> read) {
  if (!Threaded()) return false;
  Appender& a = *appenders_.front();
  bool idle;
  {
    std::lock_guard lock(mu_);
    a.read = std::move(read);
    a.read_due = true;
    idle = a.idle;
  }
  if (idle) a.jobs_cv.notify_one();
  return true;
}

void Producer::ReaderDue() {
  Appender& a = *appenders_.front();
  bool idle;
  {
    std::lock_guard lock(mu_);
    if (a.read_due || !a.read) return;
    a.read_due = true;
    idle = a.idle;
  }
  if (idle) a.jobs_cv.notify_one();
}

void Producer::DetachReader() {
  Appender& a = *appenders_.front();
  std::unique_lock lock(mu_);
  detaching_ = true;
  done_cv_.wait(lock, [&] { return !a.reading; });
  detaching_ = false;
  a.read = nullptr;
  a.read_due = false;
}

Status Producer::WaitForRoom(std::unique_lock<std::mutex>& lock, size_t bytes) {
  if (failed_.ok() && in_flight_ > 0 && in_flight_ + bytes > MaxInFlight()) {
    // Full: wait until half of it is appended, not for every job (with
    // many partitions the jobs are small, and each wake-up costs more than
    // appending one).
    reader_waiting_ = true;
    done_cv_.wait(lock, [&] {
      return !failed_.ok() || in_flight_ == 0 || in_flight_ + bytes <= MaxInFlight() / 2;
    });
    reader_waiting_ = false;
  }
  return failed_;
}

Status Producer::PushStaged(Appender* a) {
  if (a->staged.empty()) return Status::Ok();
  const size_t bytes = a->staged_bytes;
  bool idle = false;
  {
    std::unique_lock lock(mu_);
    MQ_RETURN_IF_ERROR(WaitForRoom(lock, bytes));
    in_flight_ += bytes;
    for (Job& job : a->staged) a->jobs.push_back(std::move(job));
    idle = a->idle;
  }
  a->staged.clear();
  a->staged_bytes = 0;
  if (idle) a->jobs_cv.notify_one();
  return Status::Ok();
}

bool Producer::StartWriters() {
  // The threads take no signal: they stay the reading thread's (SIGPIPE of
  // an output).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  size_t started = 0;
  for (auto& a : appenders_) {
    try {
      Appender* ap = a.get();
      a->thread = std::thread([this, ap] { WriterLoop(ap); });
      ++started;
    } catch (const std::system_error&) {
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (started == appenders_.size()) {
    threads_ = true;
    return true;
  }
  // All or none: stop the ones that did start (they have no job yet).
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  for (auto& a : appenders_) {
    a->jobs_cv.notify_all();
    if (a->thread.joinable()) a->thread.join();
  }
  stop_ = false;
  return false;
}

std::vector<Producer::Job> Producer::TakeJobs(Appender* a, size_t* bytes) {
  std::vector<Job> batch;
  while (!a->jobs.empty() && (batch.empty() || *bytes < kHandOffBytes)) {
    *bytes += a->jobs.front().bytes.size();
    batch.push_back(std::move(a->jobs.front()));
    a->jobs.pop_front();
  }
  return batch;
}

Status Producer::AppendJobs(std::vector<Job>& batch) {
  for (Job& job : batch) {
    if (any_failed_.load(std::memory_order_acquire)) break;
    Status s = job.sealed ? AppendNow(job.partition, job.bytes, job.messages)
                          : AppendFinished(job.partition, job.bytes, job.messages);
    if (!s.ok()) {
      any_failed_.store(true, std::memory_order_release);
      return s;
    }
  }
  return Status::Ok();
}

void Producer::KeepSpares(std::vector<Job>& batch) {
  for (Job& job : batch) {
    if (spare_.size() >= kMaxSpare) break;
    if (job.bytes.capacity() == 0) continue;
    job.bytes.clear();
    spare_.push_back(std::move(job.bytes));
  }
}

void Producer::WriterLoop(Appender* a) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!stop_ && a->jobs.empty() && !a->read_due) {
      a->idle = true;
      a->jobs_cv.wait(lock, [&] { return stop_ || !a->jobs.empty() || a->read_due; });
      a->idle = false;
    }
    if (a->read_due) {
      // An input read ahead here: its reads first (the caller waits for
      // them; they are bounded by its chunks).
      a->read_due = false;
      a->reading = true;
      lock.unlock();
      a->read();
      lock.lock();
      a->reading = false;
      if (detaching_) done_cv_.notify_all();
      continue;
    }
    if (a->jobs.empty()) {
      // Stopped: close this thread's partitions (in parallel with the
      // other threads'); Close() reports the first failure.
      lock.unlock();
      while (!a->open.empty()) {
        Status s = CloseLeastRecent(a, /*keep=*/true);
        if (a->closed.ok() && !s.ok()) a->closed = s;
      }
      return;
    }
    // Up to kHandOffBytes of jobs (at least one) per turn of the lock.
    size_t bytes = 0;
    std::vector<Job> batch = TakeJobs(a, &bytes);
    // After a failed append no other starts (on any thread): what follows
    // it in a partition must not land without it.
    Status failed_here;
    if (failed_.ok()) {
      a->appending = true;
      lock.unlock();
      failed_here = AppendJobs(batch);
      lock.lock();
      a->appending = false;
    }
    const bool failed_now = !failed_here.ok() && failed_.ok();
    if (failed_now) failed_ = failed_here;
    in_flight_ -= bytes;
    KeepSpares(batch);
    // The reader waits for room (half the limit), for the queues to
    // drain, or for a failure; wake it only then.
    if (failed_now || a->jobs.empty() || (reader_waiting_ && in_flight_ <= MaxInFlight() / 2)) {
      done_cv_.notify_all();
    }
  }
}

Status Producer::Drain() {
  if (!threads_) return Status::Ok();
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] {
    for (const auto& a : appenders_) {
      if (!a->jobs.empty() || a->appending) return false;
    }
    return true;
  });
  return failed_;
}

void Producer::StopWriter() {
  if (!threads_) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  for (auto& a : appenders_) {
    a->jobs_cv.notify_all();
    a->thread.join();
  }
  threads_ = false;
}

Status Producer::Flush() {
  if (queued_messages_ == 0) return Status::Ok();
  for (int32_t p = 0; p < options_.partitions; ++p) {
    PartitionState& ps = parts_[static_cast<size_t>(p)];
    if (!ps.dirty) continue;
    if (ps.builder.count() > 0) MQ_RETURN_IF_ERROR(FinishBatch(p));
    MQ_RETURN_IF_ERROR(AppendPartition(p, /*stage=*/true));
  }
  for (auto& a : appenders_) MQ_RETURN_IF_ERROR(PushStaged(a.get()));
  // Every queued message is now handed to the appender (AppendPartition
  // emptied the queue counts); offsets are printed once it appended them.
  if (options_.print_offsets) MQ_RETURN_IF_ERROR(Drain());
  for (int32_t p : order_) {
    out_->Print("{} {}\n", p, parts_[static_cast<size_t>(p)].cursor++);
  }
  if (options_.print_offsets) out_->Flush();
  order_.clear();
  return Status::Ok();
}

Status Producer::Close() {
  Status first = Flush();
  Status drained = Drain();
  if (first.ok()) first = drained;
  StopWriter();
  for (auto& a : appenders_) {
    if (first.ok() && !a->closed.ok()) first = a->closed;
    while (!a->open.empty()) {
      Status s = CloseLeastRecent(a.get(), /*keep=*/true);
      if (first.ok() && !s.ok()) first = s;
    }
  }
  return first;
}

}  // namespace mq::produce
