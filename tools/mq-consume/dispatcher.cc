#include "dispatcher.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "cli.h"
#include "envelope.h"

namespace mq::consume {

struct Dispatcher::Message {
  int64_t offset = 0;
  int64_t timestamp = 0;
  bool log_append_time = false;
  std::optional<Bytes> key;
  std::optional<Bytes> value;
  std::span<const Header> headers;
};

struct Dispatcher::Stored {
  int64_t offset = 0;
  int64_t timestamp = 0;
  bool log_append_time = false;
  std::optional<std::string> key, value;
  std::vector<std::string> header_keys;
  std::vector<std::optional<std::string>> header_values;
  std::vector<Header> headers;  // views into the two above, built by View()

  size_t bytes() const {
    size_t n = 64 + (key ? key->size() : 0) + (value ? value->size() : 0);
    for (size_t i = 0; i < header_keys.size(); ++i)
      n += 32 + header_keys[i].size() + (header_values[i] ? header_values[i]->size() : 0);
    return n;
  }
  Message View() {
    headers.clear();
    for (size_t i = 0; i < header_keys.size(); ++i) {
      std::optional<Bytes> v;
      if (header_values[i]) v = AsBytes(*header_values[i]);
      headers.push_back({header_keys[i], v});
    }
    Message m{offset, timestamp, log_append_time, std::nullopt, std::nullopt, headers};
    if (key) m.key = AsBytes(*key);
    if (value) m.value = AsBytes(*value);
    return m;
  }
};

namespace {

std::optional<std::string> Copy(const std::optional<Bytes>& b) {
  if (!b) return std::nullopt;
  return std::string(AsText(*b));
}

// The value of the last header named `name`.
std::optional<std::string_view> LastHeader(std::span<const Header> headers, std::string_view name) {
  std::optional<std::string_view> found;
  for (const Header& h : headers)
    if (h.key == name && h.value) found = AsText(*h.value);
  return found;
}

template <typename T>
bool ParseInt(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Dispatcher::Dispatcher(HandlerOptions options, std::string topic,
                       const volatile std::sig_atomic_t* interrupted)
    : options_(std::move(options)),
      topic_(std::move(topic)),
      interrupted_(interrupted),
      base_env_(handler::BaseEnvironment()) {}

Dispatcher::~Dispatcher() { (void)Close(); }

Status Dispatcher::Open(const DataDir& dir, const TopicConfig& source) {
  if (!options_.dlq) return Status::Ok();
  dir_ = dir;
  auto config = dir.ReadTopic(*options_.dlq);
  if (!config && config.error().code() == Code::kNotFound) {
    MQ_RETURN_IF_ERROR(dir.CreateTopic(*options_.dlq, source));
    if (!options_.quiet)
      cli::Warn(fmt::format("created dead-letter topic {} like {} ({} partition{})", *options_.dlq,
                            topic_, source.partitions, source.partitions == 1 ? "" : "s"));
    config = dir.ReadTopic(*options_.dlq);
  }
  if (!config) return config.error();
  dlq_config_ = *config;
  dlq_writers_.resize(static_cast<size_t>(config->partitions));
  dlq_scanned_.assign(static_cast<size_t>(config->partitions), false);
  return Status::Ok();
}

Status Dispatcher::Close() {
  Status first;
  for (auto& w : dlq_writers_) {
    if (!w) continue;
    Status s = w->Close();
    if (first.ok() && !s.ok()) first = s;
    w.reset();
  }
  return first;
}

Status Dispatcher::Add(int32_t partition, bool log_append_time, const RecordView& r,
                       std::span<const Header> headers) {
  if (interrupted() || exit_code_ != 0) return Status::Ok();
  if (!options_.batch) {
    Message m{r.offset, r.timestamp, log_append_time, r.key, r.value, headers};
    return HandleUnit(partition, std::span<const Message>(&m, 1));
  }
  Stored s;
  s.offset = r.offset;
  s.timestamp = r.timestamp;
  s.log_append_time = log_append_time;
  s.key = Copy(r.key);
  s.value = Copy(r.value);
  for (const Header& h : headers) {
    s.header_keys.emplace_back(h.key);
    s.header_values.push_back(Copy(h.value));
  }
  pending_bytes_ += s.bytes();
  auto& batch = pending_[partition];
  batch.push_back(std::move(s));
  if (batch.size() >= *options_.batch) return FlushPartition(partition);
  if (pending_bytes_ >= options_.max_pending_bytes) return Flush();
  return Status::Ok();
}

Status Dispatcher::FlushPartition(int32_t partition) {
  auto it = pending_.find(partition);
  if (it == pending_.end() || it->second.empty()) return Status::Ok();
  std::vector<Stored> batch = std::move(it->second);
  it->second.clear();
  for (const Stored& s : batch) pending_bytes_ -= s.bytes();
  if (interrupted() || exit_code_ != 0) return Status::Ok();
  std::vector<Message> views;
  views.reserve(batch.size());
  for (Stored& s : batch) views.push_back(s.View());
  return HandleUnit(partition, views);
}

bool Dispatcher::has_pending(int32_t partition) const {
  auto it = pending_.find(partition);
  return it != pending_.end() && !it->second.empty();
}

void Dispatcher::Drop(int32_t partition) {
  auto it = pending_.find(partition);
  if (it == pending_.end()) return;
  for (const Stored& s : it->second) pending_bytes_ -= s.bytes();
  pending_.erase(it);
}

void Dispatcher::Forget(int32_t partition) {
  dead_.erase(partition);
  // Dead letters not taken with the partition's position are counted by
  // its next owner, which finds them in the dead-letter topic: counted
  // here too, they would be counted twice should the partition come back.
  dead_counts_.erase(partition);
  if (dlq_config_ && dlq_config_->partitions > 0) {
    const int32_t dp = partition % dlq_config_->partitions;
    dlq_scanned_[static_cast<size_t>(dp)] = false;
  }
}

int64_t Dispatcher::TakeDeadLetters(int32_t partition) {
  auto it = dead_counts_.find(partition);
  if (it == dead_counts_.end()) return 0;
  int64_t n = it->second;
  dead_counts_.erase(it);
  return n;
}

Status Dispatcher::Flush() {
  std::vector<int32_t> parts;
  for (const auto& [p, batch] : pending_)
    if (!batch.empty()) parts.push_back(p);
  std::sort(parts.begin(), parts.end());
  for (int32_t p : parts) MQ_RETURN_IF_ERROR(FlushPartition(p));
  return Status::Ok();
}

// A batch that fails every attempt is split: each of its messages is then
// handled alone (as a batch of one), so only the message that fails goes to
// the dead-letter topic; the others are handled again.
Status Dispatcher::HandleUnit(int32_t partition, std::span<const Message> messages) {
  auto a = Attempt(partition, messages);
  if (!a) return a.error();
  if (a->outcome.kind == handler::Outcome::Kind::kInterrupted) return Status::Ok();
  if (a->outcome.ok()) {
    handled_ += messages.size();
    return Status::Ok();
  }
  if (messages.size() > 1) {
    if (!options_.quiet)
      cli::Warn(fmt::format("topic {} partition {} offsets {}..{}: batch failed {} attempt{} "
                            "({}); handling its {} messages one by one",
                            topic_, partition, messages.front().offset, messages.back().offset,
                            a->attempts, a->attempts == 1 ? "" : "s", a->outcome.Describe(),
                            messages.size()));
    for (const Message& m : messages) {
      MQ_RETURN_IF_ERROR(HandleUnit(partition, std::span<const Message>(&m, 1)));
      if (interrupted()) return Status::Ok();
    }
    return Status::Ok();
  }
  return DeadLetter(partition, messages.front(), *a);
}

Result<Dispatcher::Attempted> Dispatcher::Attempt(int32_t partition,
                                                   std::span<const Message> messages) {
  handler::Spec spec;
  spec.argv = options_.command;
  spec.env = base_env_;
  if (options_.inherit_fd) spec.inherit_fd = options_.inherit_fd(partition);
  fmt::memory_buffer input;
  std::string_view stdin_bytes;
  const Message& first = messages.front();
  if (options_.batch) {
    handler::AppendBatchEnv(&spec.env, topic_, partition, first.offset, messages.back().offset,
                            messages.size());
    for (const Message& m : messages) {
      envelope::EnvelopeFields f{topic_, partition, m.offset, m.log_append_time,
                                 m.timestamp, m.key, m.value, m.headers};
      envelope::AppendEnvelopeJson(input, f);
    }
    stdin_bytes = std::string_view(input.data(), input.size());
  } else {
    handler::MessageInfo info{topic_, partition, first.offset, first.timestamp,
                              first.key, !first.value.has_value(), first.headers};
    handler::AppendMessageEnv(&spec.env, info);
    if (first.value) stdin_bytes = AsText(*first.value);
  }
  std::string where =
      messages.size() == 1
          ? fmt::format("topic {} partition {} offset {}", topic_, partition, first.offset)
          : fmt::format("topic {} partition {} offsets {}..{}", topic_, partition, first.offset,
                        messages.back().offset);
  Attempted a;
  uint64_t backoff = options_.retry_backoff_ms;
  while (true) {
    ++a.attempts;
    auto outcome = handler::Run(spec, stdin_bytes, interrupted_, options_.kill_grace_ms,
                                options_.max_run_ms);
    if (!outcome) return outcome.error();
    a.outcome = std::move(*outcome);
    if (a.outcome.ok() || a.outcome.kind == handler::Outcome::Kind::kInterrupted) return a;
    // Stuck: not the message's failure (no retry, no dead letter); the
    // member gives its partitions up, and the message is handed over again
    // by their next owner.
    if (a.outcome.kind == handler::Outcome::Kind::kTimedOut) {
      exit_code_ = kExitHandlerStuck;
      return Status(Code::kBusy,
                    fmt::format("{}: handler made no progress for {} ms (--max-poll-interval "
                                "{}): killed its process group; giving up this member's "
                                "partitions without committing {}",
                                where, options_.max_run_ms, options_.max_run_ms,
                                messages.size() == 1 ? "the message" : "the batch"));
    }
    // A command that cannot be run fails for every message: stop, naming
    // it. Only a message too large for the environment (E2BIG) is the
    // message's failure.
    if (a.outcome.kind == handler::Outcome::Kind::kExecFailed && a.outcome.code != E2BIG) {
      exit_code_ = a.outcome.code == ENOENT ? kExitNotFound : kExitCannotRun;
      return Status(Code::kInvalidArgument,
                    fmt::format("--exec {}: {}", options_.command.front(), a.outcome.Describe()));
    }
    if (a.attempts >= options_.max_attempts) return a;
    ++retries_;
    if (!options_.quiet)
      cli::Warn(fmt::format("{}: handler {} (attempt {} of {}); retrying in {} ms", where,
                            a.outcome.Describe(), a.attempts, options_.max_attempts, backoff));
    if (!SleepMs(static_cast<uint32_t>(backoff))) {
      a.outcome.kind = handler::Outcome::Kind::kInterrupted;
      return a;
    }
    backoff = std::min<uint64_t>(backoff * 2, options_.max_backoff_ms);
  }
}

bool Dispatcher::SleepMs(uint32_t ms) {
  // In slices, so that SIGINT/SIGTERM end the wait at once (the handler
  // makes nanosleep return early; the flag says why).
  timespec left{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  while (!interrupted()) {
    if (::nanosleep(&left, &left) == 0) return true;
    if (errno != EINTR) return true;
  }
  return false;
}

// Reads dead-letter partition `dlq_partition` once, remembering which
// offsets of this topic it already holds: a rerun after a crash between
// the append and the source offset's completion appends nothing twice.
Status Dispatcher::ScanDeadLetters(int32_t dlq_partition) {
  if (dlq_scanned_[static_cast<size_t>(dlq_partition)]) return Status::Ok();
  const std::string pdir = dir_->PartitionDir(*options_.dlq, dlq_partition);
  ReadOptions read;
  read.limits = DataDir::DecodeLimitsFor(*dlq_config_);
  read.offsets = dlq_config_->cleanup_policy == CleanupPolicy::kDelete
                     ? OffsetPolicy::kContiguous
                     : OffsetPolicy::kGapsAllowed;
  auto reader = PartitionReader::Open(pdir, read);
  if (!reader) {
    if (reader.error().code() != Code::kNotFound) return reader.error();
  } else {
    std::vector<std::byte> scratch;
    while (true) {
      auto batch = (*reader)->Next();
      if (!batch) return batch.error();
      if (!*batch) break;
      if ((*batch)->header().is_control()) continue;
      LogPosition pos = (*reader)->position();
      auto records = RecordReader::Open(**batch, &scratch, read.limits, pos.file, pos.position);
      if (!records) return records.error();
      RecordView r;
      while (records->Read(&r)) {
        std::vector<Header> hs = r.headers();
        auto t = LastHeader(hs, kDlqTopicHeader);
        auto p = LastHeader(hs, kDlqPartitionHeader);
        auto o = LastHeader(hs, kDlqOffsetHeader);
        int32_t part = 0;
        int64_t off = 0;
        if (t && *t == topic_ && p && o && ParseInt(*p, &part) && ParseInt(*o, &off))
          dead_[part].insert(off);
      }
      if (!records->status().ok()) return records->status();
    }
  }
  dlq_scanned_[static_cast<size_t>(dlq_partition)] = true;
  return Status::Ok();
}

Status Dispatcher::DeadLetter(int32_t partition, const Message& m, const Attempted& a) {
  std::string what =
      fmt::format("topic {} partition {} offset {}: handler failed {} attempt{} ({})", topic_,
                  partition, m.offset, a.attempts, a.attempts == 1 ? "" : "s",
                  a.outcome.Describe());
  if (!options_.dlq) {
    exit_code_ = kExitHandlerFailed;
    return Status(Code::kInternal,
                  what + "; stopping: without --dlq a message that fails stops its partition");
  }
  // The source partition picks the dead-letter partition: a source
  // partition's dead letters stay in order, in one place.
  const int32_t dp = partition % dlq_config_->partitions;
  MQ_RETURN_IF_ERROR(ScanDeadLetters(dp));
  auto& seen = dead_[partition];
  if (seen.contains(m.offset)) {
    ++handled_;
    ++dead_counts_[partition];
    if (!options_.quiet)
      cli::Warn(fmt::format("{}; already in dead-letter topic {} partition {}, not appended again",
                            what, *options_.dlq, dp));
    return Status::Ok();
  }
  std::vector<Header> headers(m.headers.begin(), m.headers.end());
  const std::string part = std::to_string(partition), off = std::to_string(m.offset);
  const std::string attempts = std::to_string(a.attempts), status = a.outcome.StatusText();
  headers.push_back({kDlqTopicHeader, AsBytes(topic_)});
  headers.push_back({kDlqPartitionHeader, AsBytes(part)});
  headers.push_back({kDlqOffsetHeader, AsBytes(off)});
  headers.push_back({kDlqAttemptsHeader, AsBytes(attempts)});
  headers.push_back({kDlqExitHeader, AsBytes(status)});
  headers.push_back({kDlqStderrHeader, AsBytes(a.outcome.stderr_tail)});
  BatchBuilder builder;
  RecordInput r;
  r.timestamp = m.timestamp;
  r.key = m.key;
  r.value = m.value;
  r.headers = headers;
  builder.Add(r);
  std::vector<std::byte> bytes;
  MQ_RETURN_IF_ERROR(builder.Finish(0, &bytes));
  auto& writer = dlq_writers_[static_cast<size_t>(dp)];
  if (!writer) {
    LogConfig log = DataDir::LogConfigFor(*dlq_config_);
    log.durability = Durability::kEveryBatch;  // appended means on disk
    RecoveryReport report;
    auto w = PartitionWriter::Open(dir_->PartitionDir(*options_.dlq, dp), log, false, &report);
    if (!w) return w.error();
    writer = std::move(*w);
  }
  auto appended = writer->Append(bytes);
  if (!appended)
    return Status(appended.error().code(),
                  fmt::format("{}: dead-letter topic {} partition {}: append: {}", what,
                              *options_.dlq, dp, appended.error().message()));
  // Test seam (mq(7), MQ_TEST_CRASH): die as a SIGKILL would, between the
  // append and the commit that counts it and moves past its message.
  if (const char* crash = std::getenv("MQ_TEST_CRASH");
      crash != nullptr && std::string_view(crash) == "dlq-appended")
    ::raise(SIGKILL);
  seen.insert(m.offset);
  ++dead_counts_[partition];
  ++dead_lettered_;
  ++handled_;
  if (!options_.quiet)
    cli::Warn(fmt::format("{}; appended to dead-letter topic {} partition {} offset {}", what,
                          *options_.dlq, dp, appended->base_offset));
  return Status::Ok();
}

}  // namespace mq::consume
