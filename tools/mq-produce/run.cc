#include "run.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "ack.h"
#include "cli.h"
#include "envelope.h"
#include "input.h"
#include "mq/compaction.h"
#include "mq/producer_id.h"
#include "mq/topic.h"
#include "mq/topic_admin.h"
#include "producer.h"

namespace mq::produce {
namespace {

int64_t NowMs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// How often the wall clock is read for CreateTime while input streams in:
// every this many messages, and for the first message after each append.
constexpr uint64_t kClockEvery = 1024;
// A partition's finished batches are appended once they reach this, unless
// appends are fsyncs (--fsync batch) or offsets are printed: 256 KiB stays
// in a core's L2 cache (1 MiB on the machines mq is measured on), where
// 4 MiB groups had to be read back from memory by the kernel's copy.
constexpr size_t kPartitionAppendBytes = 256 << 10;
// The default --append-bytes into one partition and into several.
constexpr uint64_t kOneAppendBytes = 4 << 20;
constexpr uint64_t kSeveralAppendBytes = 8 << 20;
// Writer threads at most (partition p is appended by thread p mod their count).
constexpr int kMaxWriterThreads = 4;
// CPUs this process may run on.
int UsableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// A JSON line may be longer than the message it holds (escapes, base64).
size_t JsonLineLimit(size_t max_message) { return max_message * 6 + (64 << 10); }

int Describe(const DataDir& dir, const std::string& topic) {
  auto config = dir.ReadTopic(topic);
  if (!config) return cli::Fail(config.error());
  cli::Output out;
  out.Print("topic={}\n", topic);
  out.Write(config->Serialize());
  return out.FinishExitCode();
}

// The configuration --create asks for: --partitions and each -X, which
// must not contradict each other (kInvalidArgument naming both).
Result<TopicConfig> WantedConfig(const DataDir& dir, const Flags& f, const Settings& s) {
  TopicConfig wanted;
  if (f.like) {
    auto like = dir.ReadTopic(*f.like);
    if (!like) return Status(like.error().code(), "--like: " + like.error().message());
    wanted = like->LocalCopy();
  }
  if (f.partitions) wanted.partitions = *f.partitions;
  for (const auto& [key, value] : s.config) {
    Status st = wanted.Set(key, value);
    if (!st.ok()) return Status(Code::kInvalidArgument, "-X/--config: " + st.message());
    if (key == "partitions" && f.partitions && wanted.partitions != *f.partitions) {
      return Status(Code::kInvalidArgument,
                    fmt::format("-X {}={} contradicts --partitions {}", key, value, *f.partitions));
    }
  }
  return wanted;
}

// The topic's configuration, creating the topic first with --create. On an
// existing topic, --create checks that what it asks for is what the topic
// has: mq-produce never changes a topic, and never ignores a setting.
Result<TopicConfig> OpenTopic(const DataDir& dir, const Flags& f, const Settings& s) {
  auto wanted = WantedConfig(dir, f, s);
  if (!wanted) return wanted.error();
  auto config = dir.ReadTopic(f.topic);
  if (config || config.error().code() != Code::kNotFound) {
    if (config && f.create && f.partitions && *f.partitions != config->partitions) {
      return Status(Code::kInvalidArgument,
                    fmt::format("--partitions: topic \"{}\" exists with {} partitions, not {}",
                                f.topic, config->partitions, *f.partitions));
    }
    if (config && f.create && f.like && !(*wanted == *config)) {
      return Status(Code::kInvalidArgument,
                    fmt::format("--like {}: topic \"{}\" exists with another configuration (see "
                                "--describe); mq-produce does not change an existing topic",
                                *f.like, f.topic));
    }
    if (config && f.create) {
      for (const auto& [key, value] : s.config) {
        TopicConfig changed = *config;
        (void)changed.Set(key, value);
        if (!(changed == *config)) {
          return Status(Code::kInvalidArgument,
                        fmt::format("-X {}={}: topic \"{}\" exists with another {} (see "
                                    "--describe); mq-produce does not change an existing topic",
                                    key, value, f.topic, key));
        }
      }
    }
    if (config) MQ_RETURN_IF_ERROR(CheckPartitionDirs(dir, f.topic, *config));  // R80
    return config;
  }
  if (!f.create) {
    return Status(Code::kNotFound, config.error().message() + " (use --create to create it)");
  }
  if (Status st = wanted->Validate(); !st.ok()) {
    return Status(Code::kInvalidArgument, "-X/--config: " + st.message());
  }
  MQ_RETURN_IF_ERROR(dir.CreateTopic(f.topic, *wanted));
  return dir.ReadTopic(f.topic);
}

// Progress on stderr, at most once a second.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled), start_(MonotonicMs()), last_(start_) {}
  void Tick(const ProducerStats& st) {
    if (!enabled_) return;
    int64_t now = MonotonicMs();
    if (now - last_ < 1000) return;
    last_ = now;
    cli::Eprint("{}: {} messages, {} bytes, {} batches\n", cli::ProgramName(), st.messages,
                st.bytes, st.batches);
  }
  void Summary(const ProducerStats& st) const {
    if (!enabled_) return;
    double secs = static_cast<double>(MonotonicMs() - start_) / 1000.0;
    size_t used = static_cast<size_t>(std::count_if(
        st.per_partition.begin(), st.per_partition.end(), [](uint64_t n) { return n > 0; }));
    cli::Eprint(
        "{}: {} messages, {} bytes, {} batches, {} partitions, {} appends in {:.3f} s "
        "({:.0f} msgs/s)",
        cli::ProgramName(), st.messages, st.bytes, st.batches, used, st.appends, secs,
        secs > 0 ? static_cast<double>(st.messages) / secs : 0.0);
    if (st.skipped > 0) cli::Eprint("; {} skipped (appended by an earlier run)", st.skipped);
    if (st.duplicates > 0) cli::Eprint("; {} duplicate batches dropped", st.duplicates);
    cli::Eprint("\n");
  }

 private:
  bool enabled_;
  int64_t start_;
  int64_t last_;
};

// Reads one input and sends its messages.
class Feeder {
 public:
  // With `read_on_writer`, an input read ahead is read on the producer's
  // appending thread (ReadHost).
  Feeder(const Flags& f, const Settings& s, Producer* producer, Progress* progress,
         size_t max_message, const TopicConfig& topic, bool read_on_writer)
      : f_(f),
        s_(s),
        producer_(producer),
        progress_(progress),
        max_message_(max_message),
        topic_(topic),
        partitions_(topic.partitions),
        keyed_only_(KeyedMessagesOnly(topic)),
        read_on_writer_(read_on_writer) {
    for (const auto& [name, value] : s_.headers) {
      fixed_headers_.push_back(Header{name, AsBytes(value)});
    }
    if (f_.key) fixed_key_ = AsBytes(*f_.key);
  }

  // Opens an input as Feed reads it.
  static Result<std::unique_ptr<InputSource>> Open(const Flags& f, const Settings& s,
                                                   size_t max_message, const std::string& path,
                                                   bool read_ahead) {
    const std::string delimiter = f.json ? std::string("\n") : s.delimiter;
    const size_t limit = f.json ? JsonLineLimit(max_message) : max_message;
    return InputSource::Open(path, delimiter, limit, read_ahead);
  }

  Status Feed(std::unique_ptr<InputSource> source) {
    if (read_on_writer_) source->ReadOn(producer_);
    auto src = &source;
    InputMessage in;
    for (;;) {
      // A message already read in needs no wait and no checks.
      bool may_have_waited = false;
      if (!(*src)->TryNext(&in)) {
        std::optional<int64_t> wait_until;
        if (producer_->pending()) wait_until = linger_deadline_;
        auto state = (*src)->Next(&in, wait_until);
        if (!state) return state.error();
        if (*state == ReadState::kEnd) return Status::Ok();
        if (*state == ReadState::kWouldBlock) {
          MQ_RETURN_IF_ERROR(producer_->Flush());
          progress_->Tick(producer_->stats());
          now_ = NowMs();
          continue;
        }
        may_have_waited = true;
      }
      // A read that may have waited for input with nothing pending: the
      // clock is read again for the message's CreateTime.
      if ((may_have_waited && !producer_->pending()) || ++count_ % kClockEvery == 0) {
        now_ = NowMs();
        progress_->Tick(producer_->stats());
        // Input that never pauses still gets its messages appended about
        // every --linger-ms, not only once an append group is full.
        if (producer_->pending() && !(*src)->regular() && MonotonicMs() >= linger_deadline_) {
          MQ_RETURN_IF_ERROR(producer_->Flush());
        }
      }
      const bool was_pending = producer_->pending();
      MQ_RETURN_IF_ERROR(f_.json ? SendJson(**src, in) : SendPlain(**src, in));
      if (!was_pending && producer_->pending()) {
        linger_deadline_ = MonotonicMs() + f_.linger_ms;
      }
    }
  }

 private:
  // R126: a compacted topic's messages have keys. The message's place is
  // written out only for a message that is refused, not for every keyless
  // message of a topic of another policy.
  Status CheckKey(const Message& m, const InputSource& src, const InputMessage& in) const {
    if (m.key || !keyed_only_) return Status::Ok();
    return CheckMessageKey(topic_, f_.topic, false,
                           fmt::format("{}: line {}", src.name(), in.number), in.position);
  }

  Status SendPlain(const InputSource& src, const InputMessage& in) {
    Message m;
    m.timestamp = now_;
    m.headers = fixed_headers_;
    std::string_view value = in.bytes;
    m.key = fixed_key_;
    if (s_.key_delimiter) {
      size_t at = value.find(*s_.key_delimiter);
      if (at != std::string_view::npos) {
        m.key = AsBytes(value.substr(0, at));
        value.remove_prefix(at + s_.key_delimiter->size());
      }
    }
    m.value = AsBytes(value);
    if (f_.empty_is_null && value.empty()) m.value.reset();
    MQ_RETURN_IF_ERROR(CheckKey(m, src, in));
    return producer_->Send(m);
  }

  Status SendJson(const InputSource& src, const InputMessage& in) {
    auto parsed = parser_.Parse(in.bytes, src.name(), in.number);
    if (!parsed) return parsed.error();
    const envelope::ParsedEnvelope& e = **parsed;
    Message m;
    m.timestamp = e.timestamp.value_or(now_);
    m.key = e.key;
    m.value = e.value;
    if (f_.empty_is_null && m.value && m.value->empty()) m.value.reset();
    std::span<const Header> headers = e.headers;
    if (!fixed_headers_.empty()) {
      scratch_headers_.assign(e.headers.begin(), e.headers.end());
      scratch_headers_.insert(scratch_headers_.end(), fixed_headers_.begin(), fixed_headers_.end());
      headers = scratch_headers_;
    }
    m.headers = headers;
    if (f_.keep_partition) {
      if (!e.partition) {
        return Status(Code::kInvalidArgument,
                      fmt::format("{}: line {}: --keep-partition: the envelope has no partition",
                                  src.name(), in.number));
      }
      if (*e.partition >= partitions_) {
        return Status(Code::kInvalidArgument,
                      fmt::format("{}: line {}: --keep-partition: partition {}, but the topic has "
                                  "{} partition(s)",
                                  src.name(), in.number, *e.partition, partitions_));
      }
      m.partition = e.partition;
    }
    size_t size = (m.key ? m.key->size() : 0) + (m.value ? m.value->size() : 0);
    for (const Header& h : headers) size += h.key.size() + (h.value ? h.value->size() : 0);
    if (size > max_message_) {
      return Status(Code::kTooLarge,
                    fmt::format("{}: line {} at byte offset {}: a message of {} bytes is larger "
                                "than the maximum message size ({} bytes)",
                                src.name(), in.number, in.position, size, max_message_));
    }
    MQ_RETURN_IF_ERROR(CheckKey(m, src, in));
    return producer_->Send(m);
  }

  const Flags& f_;
  const Settings& s_;
  Producer* producer_;
  Progress* progress_;
  size_t max_message_;
  const TopicConfig& topic_;
  int32_t partitions_;
  bool keyed_only_;  // R126
  bool read_on_writer_;
  std::vector<Header> fixed_headers_;
  std::vector<Header> scratch_headers_;
  std::optional<Bytes> fixed_key_;
  envelope::EnvelopeParser parser_;
  int64_t now_ = NowMs();
  int64_t linger_deadline_ = 0;
  uint64_t count_ = 0;
};

// Where the input is read: ahead (a regular file) when the appending
// threads leave a CPU for it, and then on the (first) appending thread or
// on a thread of its own.
struct ReadPlan {
  int cpus = 0;
  int appending_threads = 0;
  bool read_ahead = false;
};

// With --print-offsets every append is waited for before the next message
// is read (its offsets are printed after it): into one partition an
// appending thread overlaps nothing and adds two thread wake-ups to each
// acknowledgement (bench/durable_ack.cc, without the flush: p50 39-40 us
// with the thread, 19 us without, against 12 us for a round trip through
// cat). Into several partitions the threads still append to (and fsync)
// different partitions at once.
bool WaitedOnOneThread(const Flags& f, const TopicConfig& topic) {
  return f.print_offsets && (f.partition || topic.partitions == 1);
}

// The producer's options for `topic` from the flags, but for the gate and
// the producer id; `plan` gets where the input is read ahead.
ProducerOptions OptionsFor(const Flags& f, const Settings& s, const TopicConfig& topic,
                           ReadPlan* plan) {
  ProducerOptions po;
  po.topic = f.topic;
  po.partitions = topic.partitions;
  po.partition = f.partition;
  po.batch_bytes = std::min<size_t>(f.batch_bytes, topic.max_message_bytes);
  // Into several partitions each group gives every partition one append
  // (a lock, a write and index entries): a larger group, fewer appends.
  const bool several = topic.partitions > 1 && !f.partition;
  po.append_bytes = std::max<size_t>(
      f.append_bytes.value_or(several ? kSeveralAppendBytes : kOneAppendBytes), po.batch_bytes);
  // Even records that do not compress at all fit the topic's batches.
  po.compressed_records_max = std::min<size_t>(po.compressed_records_max, topic.max_message_bytes);
  po.compression = s.compression;
  po.zstd_level = f.zstd_level;
  po.log = DataDir::LogConfigFor(topic);
  po.log.durability = s.durability;
  po.log.flush_interval_ms = s.flush_interval_ms;
  // Page-cache durability means no fsync at all, not one at exit.
  po.log.sync_on_close = s.durability != Durability::kNone;
  po.print_offsets = f.print_offsets;
  // Appending overlaps reading and encoding when there is a CPU for each;
  // many partitions are opened and appended to on as many threads as there
  // are CPUs (up to kMaxWriterThreads).
  plan->cpus = UsableCpus();
  if (plan->cpus >= 2 && !WaitedOnOneThread(f, topic))
    po.writer_threads = std::min(plan->cpus, kMaxWriterThreads);
  // A regular input file is read ahead when the appending threads leave a
  // CPU for it (into one partition, with two CPUs): with as many appending
  // threads as CPUs it only took turns with them (into 1,000 partitions,
  // 15% slower). Where it is read: ReadOnWriter.
  plan->appending_threads =
      po.writer_threads == 0 ? 0
                             : std::clamp(f.partition ? 1 : po.writer_threads, 1, topic.partitions);
  plan->read_ahead = po.writer_threads > 0 && plan->appending_threads < plan->cpus;
  // An append that is not an fsync costs the same whatever its size: write
  // each partition's batches while they are still in the CPU's cache.
  if (s.durability != Durability::kEveryBatch && !f.print_offsets) {
    po.partition_append_bytes = std::min<size_t>(kPartitionAppendBytes, po.append_bytes);
  }
  po.quiet = f.quiet;
  return po;
}

// A file read ahead is read on a thread of its own when there is a CPU
// for that one too, or when appends wait (an fsync each, or the ISR's
// acknowledgement): it reads while they wait. Otherwise it is read on the
// (first) appending thread between its appends: on two CPUs, two threads
// kept both busy, where three took turns and left a CPU idle a third of
// the time (bench/produce.sh page-cache: 0.60-0.62 x dd before, 0.62-0.68
// after; the reading thread seals batches while the appending one is
// behind).
bool ReadOnWriter(const Settings& s, const ProducerOptions& po, const ReadPlan& plan) {
  const bool appends_wait =
      s.durability == Durability::kEveryBatch || (po.gate != nullptr && s.acks_all);
  return plan.read_ahead && plan.appending_threads + 2 > plan.cpus && !appends_wait;
}

// Every input is opened before anything is appended: a missing second
// file must not leave the first one appended.
Result<std::vector<std::unique_ptr<InputSource>>> OpenInputs(const Flags& f, const Settings& s,
                                                             size_t max_message, bool read_ahead) {
  std::vector<std::string> files = f.files.empty() ? std::vector<std::string>{"-"} : f.files;
  std::vector<std::unique_ptr<InputSource>> sources;
  for (const std::string& path : files) {
    auto src = Feeder::Open(f, s, max_message, path, read_ahead);
    if (!src) return src.error();
    sources.push_back(std::move(*src));
  }
  return sources;
}

// With every input open: the partitions share what the open-file limit
// leaves (po.max_open), and the descriptors and memory the run takes are
// set aside.
void Reserve(const TopicConfig& topic, ProducerOptions* po) {
  po->max_open = cli::OpenPartitionBudget(kDescriptorsPerPartition);
  // The descriptors the writer threads will open, reserved while there is
  // one thread (each growth of a threaded process's table waits for an RCU
  // grace period: some 60 ms over 1,000 partitions).
  if (po->writer_threads > 0) {
    cli::ReserveDescriptors(std::min<size_t>(static_cast<size_t>(topic.partitions), po->max_open) *
                                kDescriptorsPerPartition +
                            cli::kSpareDescriptors + 64);
  }
  // What the buffers take (MEMORY in the manual): a group queued and one in
  // flight, a batch being built per open partition, the input's buffers.
  cli::PrepareHeap(2 * po->append_bytes +
                   std::min<size_t>(static_cast<size_t>(topic.partitions), po->max_open) *
                       po->batch_bytes +
                   (4 << 20));
}

// The exit status of a run whose input ended with `input` and whose
// producer closed with `closed`, each error said once.
int RunExit(const Status& input, const Status& closed, cli::Output& out) {
  int rc = 0;
  if (!input.ok()) rc = cli::Fail(input);
  // An append that failed stops the input with its status, and Close
  // returns the same one: it is reported once.
  const bool same =
      !input.ok() && closed.code() == input.code() && closed.message() == input.message();
  if (!closed.ok() && !same) {
    int crc = cli::Fail(closed);
    if (rc == 0) rc = crc;
  }
  int out_rc = out.FinishExitCode();
  return rc != 0 ? rc : out_rc;
}

// -p N past the topic's partitions: a usage error naming the range.
int PartitionOutOfRange(const Flags& f, const TopicConfig& topic) {
  cli::Warn(
      fmt::format("-p/--partition: {} is out of range: topic \"{}\" has {} partitions "
                  "(0 to {})",
                  *f.partition, f.topic, topic.partitions, topic.partitions - 1));
  return cli::kExitUsage;
}

}  // namespace

int Run(const Flags& f, const Settings& s) {
  auto dir = DataDir::Open(f.dir, f.create);
  if (!dir) return cli::Fail(dir.error());
  if (f.describe) return Describe(*dir, f.topic);
  auto topic = OpenTopic(*dir, f, s);
  if (!topic) return cli::Fail(topic.error());
  if (f.partition && *f.partition >= topic->partitions) return PartitionOutOfRange(f, *topic);
  size_t max_message = topic->max_message_bytes;
  if (f.max_message_bytes) max_message = std::min<size_t>(max_message, *f.max_message_bytes);
  ReadPlan plan;
  ProducerOptions po = OptionsFor(f, s, *topic, &plan);
  // A replicated topic: appends only where this root leads; --acks all
  // waits for the ISR.
  auto gate = AckGate::Open(f.dir, f.topic, *topic, po.log,
                            s.acks0      ? Acks::kNone
                            : s.acks_all ? Acks::kAll
                                         : Acks::kLeader,
                            f.ack_timeout_ms);
  if (!gate) return cli::Fail(gate.error());
  po.gate = gate->get();
  // A replicated topic's producer ids come from its cluster (P10).
  std::optional<ProducerIdentity> identity;
  if (f.producer_id) {
    auto id =
        ProducerIdentity::Acquire(f.dir, *f.producer_id, po.gate ? po.gate->cluster() : nullptr);
    if (!id) return cli::Fail(id.error());
    identity.emplace(std::move(*id));
  }
  po.producer_id = identity ? identity->id() : -1;
  const bool read_on_writer = ReadOnWriter(s, po, plan);
  auto sources = OpenInputs(f, s, max_message, plan.read_ahead);
  if (!sources) return cli::Fail(sources.error());
  Reserve(*topic, &po);
  cli::Output out;
  auto producer = Producer::Open(*dir, po, &out);
  if (!producer) return cli::Fail(producer.error());

  Progress progress(s.progress);
  Feeder feeder(f, s, producer->get(), &progress, max_message, *topic, read_on_writer);
  Status input;
  for (auto& src : *sources) {
    input = feeder.Feed(std::move(src));
    if (!input.ok()) break;
  }
  // Messages read before an input error are still appended: with a
  // producer id, a re-run after fixing the input resumes after them.
  Status closed = (*producer)->Close();
  progress.Summary((*producer)->stats());
  const int rc = RunExit(input, closed, out);
  // The process exits next: the closed partitions' mappings and descriptors
  // go with it, all at once (Producer::Close). Still reachable from here,
  // so not a leak.
  static Producer* const kept = producer->release();
  (void)kept;
  return rc;
}

}  // namespace mq::produce
