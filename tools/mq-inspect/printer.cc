#include "printer.h"

#include <cstdio>

#include <fmt/format.h>

#include "json.h"
#include "text.h"

namespace mq::inspect {

namespace {

const char* KindName(mq::Problem::Kind kind) {
  switch (kind) {
    case mq::Problem::Kind::kNeedsRecovery:
      return "needs_recovery";
    case mq::Problem::Kind::kNote:
      return "note";
    case mq::Problem::Kind::kCorruption:
      break;
  }
  return "corruption";
}

}  // namespace

std::string FormatProblem(const mq::Problem& p) {
  const char* tag = p.kind == mq::Problem::Kind::kNeedsRecovery ? "needs recovery: "
                    : p.kind == mq::Problem::Kind::kNote        ? "note: "
                                                                : "";
  return fmt::format("{}: position {}: {}: {}{}", p.file, p.position, p.rule, tag, p.detail);
}

void TrimDetail(mq::Problem* p) {
  std::string prefix = fmt::format("{}: position {}: ", p->file, p->position);
  if (p->detail.starts_with(prefix)) p->detail.erase(0, prefix.size());
  if (p->detail.starts_with(p->rule + ": ")) p->detail.erase(0, p->rule.size() + 2);
}

mq::Problem ProblemFromStatus(const Status& status, const std::string& file, uint64_t position) {
  mq::Problem p;
  p.file = status.file().empty() ? file : status.file();
  p.position = status.file().empty() ? position : status.position();
  p.rule = status.rule();
  if (p.rule.empty())
    p.rule = status.code() == Code::kUnsupported ? "R5"
             : status.code() == Code::kTooLarge  ? "R2"
                                                 : "R8";
  p.detail = status.message();
  TrimDetail(&p);
  return p;
}

int32_t RecordSequence(const BatchHeader& h, const RecordView& r) {
  if (h.base_sequence < 0) return -1;
  int64_t next = static_cast<int64_t>(h.base_sequence) + (r.offset - h.base_offset);
  return static_cast<int32_t>(next % (static_cast<int64_t>(INT32_MAX) + 1));
}

int64_t RecordTimestamp(const BatchHeader& h, const RecordView& r) {
  return h.log_append_time() ? h.max_timestamp : r.timestamp;
}

const char* TimestampType(const BatchHeader& h) {
  return h.log_append_time() ? "LogAppendTime" : "CreateTime";
}

namespace {

std::string DeleteHorizon(const BatchHeader& h) {
  if (!h.has_delete_horizon()) return "OptionalLong.empty";
  return fmt::format("OptionalLong[{}]", h.base_timestamp);
}

// kafka-dump-log's line forms, field for field (DumpLogSegments.scala).
class TextPrinter : public Printer {
 public:
  explicit TextPrinter(const PrintOptions& o) : o_(o) {}

  void FileStart(const std::string& file, FileKind kind,
                 std::optional<int64_t> base_offset) override {
    out_.Print("Dumping {}\n", file);
    if (kind == FileKind::kLog && base_offset)
      out_.Print("Log starting offset: {}\n", *base_offset);
  }

  void Batch(const std::string&, uint64_t position, const BatchHeader& h, bool valid) override {
    out_.Print(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} "
        "producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} "
        "isControl: {} deleteHorizonMs: {} position: {} {}: {} size: {} magic: {} "
        "compresscodec: {} crc: {} isvalid: {}\n",
        h.base_offset, h.last_offset(), h.records_count, h.base_sequence, h.last_sequence(),
        h.producer_id, h.producer_epoch, h.partition_leader_epoch, h.is_transactional(),
        h.is_control(), DeleteHorizon(h), position, TimestampType(h), h.max_timestamp,
        h.size_bytes(), h.magic, CompressionName(h.compression()), h.crc, valid);
  }

  void Record(const std::string&, uint64_t, const BatchHeader& h, const RecordView& r,
              const ControlRecord* control) override {
    line_.clear();
    std::string sep = "| ";
    if (!o_.skip_metadata) {
      fmt::format_to(std::back_inserter(line_),
                     "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [",
                     r.offset, TimestampType(h), RecordTimestamp(h, r),
                     r.key ? static_cast<int64_t>(r.key->size()) : -1,
                     r.value ? static_cast<int64_t>(r.value->size()) : -1, RecordSequence(h, r));
      auto headers = r.headers();
      for (size_t i = 0; i < headers.size(); ++i) {
        if (i > 0) line_.push_back(',');
        AppendEscaped(&line_, AsBytes(headers[i].key));
      }
      line_.push_back(']');
      if (control && control->is_end_txn_marker()) {
        fmt::format_to(std::back_inserter(line_), " endTxnMarker: {} coordinatorEpoch: {}",
                       ControlTypeName(control->type), control->coordinator_epoch);
      } else if (control) {
        fmt::format_to(std::back_inserter(line_), " controlType: {}({})",
                       ControlTypeName(control->type), control->type);
      }
      sep = " ";
    }
    if (o_.data && !control) AppendData(r, &sep);
    if (o_.headers) AppendHeaders(r, &sep);
    line_.push_back('\n');
    out_.Write(std::string_view(line_.data(), line_.size()));
  }

  void IndexEmpty(const std::string& file) override { out_.Print("{} is empty.\n", file); }
  void IndexEntry(const std::string&, const OffsetIndexEntry& e) override {
    out_.Print("offset: {} position: {}\n", e.offset, e.position);
  }
  void TimeIndexEntry(const std::string&, const mq::TimeIndexEntry& e) override {
    out_.Print("timestamp: {} offset: {}\n", e.timestamp, e.offset);
  }
  void GroupOffsetsHeader(const std::string&, const GroupOffsets& g) override {
    out_.Print(
        "generation: {} updateTimestamp: {} rebalances: {} lastRebalanceTimestamp: {} "
        "deadLetters: {} partitions: {}\n",
        g.generation, g.update_timestamp, g.rebalances, g.last_rebalance_timestamp,
        g.dead_letters(), g.offsets.size());
  }
  void GroupOffset(const std::string&, const CommittedOffset& e) override {
    // Member ids are names (R12) or empty: "(none)" cannot be one.
    out_.Print(
        "topic: {} partition: {} offset: {} leaderEpoch: {} commitTimestamp: {} "
        "memberId: {} deadLetters: {}\n",
        e.topic, e.partition, e.offset, e.leader_epoch, e.commit_timestamp,
        e.member_id.empty() ? "(none)" : e.member_id, e.dead_letters);
  }
  void CheckpointHeader(const std::string&, FileKind, size_t entries) override {
    out_.Print("version: 0 entries: {}\n", entries);
  }
  void LeaderEpochEntry(const std::string&, const EpochEntry& e) override {
    out_.Print("epoch: {} startOffset: {}\n", e.epoch, e.start_offset);
  }
  void ReplicationOffset(const std::string&, const HighWatermarkEntry& e) override {
    out_.Print("topic: {} partition: {} offset: {}\n", e.topic, e.partition, e.offset);
  }
  void MemberLease(const std::string&, const mq::MemberLease& l) override {
    out_.Print("version: {} sessionTimeoutMs: {} lastSeen: {} sessionEnd: {}\n",
               kMemberLeaseVersion, l.session_timeout_ms, l.last_seen, SessionEnd(l));
  }
  void MemberHeartbeat(const std::string&, const mq::MemberHeartbeat& h) override {
    out_.Print("version: {} pid: {} startTime: {} deadlineMs: {} lastPoll: {}\n",
               kMemberHeartbeatVersion, h.pid, h.start_time, h.deadline_ms, h.last_poll);
  }
  void TrailingBytes(const std::string& file, uint64_t, uint64_t bytes) override {
    out_.Flush();
    cli::Eprint("Found {} invalid bytes at the end of {}\n", bytes, file);
  }
  void Problem(const mq::Problem& p) override {
    out_.Flush();
    cli::Eprint("{}\n", FormatProblem(p));
  }
  // "ok" with its evidence; a path that holds nothing says "empty".
  void Clean(const std::string& path, const VerifySummary& v) override {
    const VerifyStats& s = v.stats;
    if (v.empty()) {
      if (v.topics == 0 && v.partitions <= 1)
        out_.Print("{}: empty (no segments)\n", path);
      else
        out_.Print("{}: empty ({} topic(s), {} partition(s), no segments)\n", path, v.topics,
                   v.partitions);
      return;
    }
    std::string scope;
    if (v.topics > 0) scope = fmt::format("{} topic(s), ", v.topics);
    if (v.groups > 0) scope += fmt::format("{} group(s), ", v.groups);
    if (v.partitions > 1 || v.topics > 0)
      scope += fmt::format("{} partition(s) ({} empty), ", v.partitions, v.empty_partitions);
    out_.Print("{}: ok ({}{} files, {} segments, {} batches, {} records, {} bytes)\n", path, scope,
               s.files, s.segments, s.batches, s.records, s.bytes);
  }

 private:
  void AppendData(const RecordView& r, std::string* sep) {
    if (r.key) {
      Append(*sep);
      Append("key: ");
      AppendEscaped(&line_, *r.key);
      *sep = " ";
    }
    if (r.value) {
      // kafka-dump-log drops the "| " here when the key is null and metadata
      // is skipped; a record line always starts with it in mq-inspect.
      Append(*sep);
      Append("payload: ");
      AppendEscaped(&line_, *r.value);
      *sep = " ";
    }
  }
  void AppendHeaders(const RecordView& r, std::string* sep) {
    Append(*sep);
    Append("headers: [");
    *sep = " ";
    auto headers = r.headers();
    for (size_t i = 0; i < headers.size(); ++i) {
      if (i > 0) line_.push_back(',');
      AppendEscaped(&line_, AsBytes(headers[i].key));
      if (headers[i].value) {
        line_.push_back('=');
        AppendEscaped(&line_, *headers[i].value);
      }
    }
    line_.push_back(']');
  }

  void Append(std::string_view s) { line_.append(s); }

  PrintOptions o_;
  fmt::memory_buffer line_;
};

class JsonPrinter : public Printer {
 public:
  explicit JsonPrinter(const PrintOptions& o) : o_(o) {}

  void FileStart(const std::string& file, FileKind kind,
                 std::optional<int64_t> base_offset) override {
    static constexpr const char* kKinds[] = {"log",
                                             "index",
                                             "timeindex",
                                             "group_offsets",
                                             "leader_epoch_checkpoint",
                                             "replication_offset_checkpoint",
                                             "member_lease",
                                             "member_heartbeat"};
    json::Line j;
    j.Str("type", "file").Str("file", file).Str("kind", kKinds[static_cast<int>(kind)]);
    if (base_offset)
      j.Int("base_offset", *base_offset);
    else
      j.Null("base_offset");
    out_.Write(j.Finish());
  }

  void Batch(const std::string& file, uint64_t position, const BatchHeader& h,
             bool valid) override {
    json::Line j(&line_);
    j.Str("type", "batch")
        .Str("file", file)
        .Uint("position", position)
        .Int("base_offset", h.base_offset)
        .Int("last_offset", h.last_offset())
        .Int("count", h.records_count)
        .Int("base_sequence", h.base_sequence)
        .Int("last_sequence", h.last_sequence())
        .Int("producer_id", h.producer_id)
        .Int("producer_epoch", h.producer_epoch)
        .Int("partition_leader_epoch", h.partition_leader_epoch)
        .Bool("is_transactional", h.is_transactional())
        .Bool("is_control", h.is_control());
    if (h.has_delete_horizon())
      j.Int("delete_horizon_ms", h.base_timestamp);
    else
      j.Null("delete_horizon_ms");
    j.Str("timestamp_type", TimestampType(h))
        .Int("base_timestamp", h.base_timestamp)
        .Int("max_timestamp", h.max_timestamp)
        .Uint("size", h.size_bytes())
        .Int("magic", h.magic)
        .Str("compression", CompressionName(h.compression()))
        .Uint("crc", h.crc)
        .Bool("is_valid", valid);
    out_.Write(j.Finish());
  }

  void Record(const std::string& file, uint64_t batch_position, const BatchHeader& h,
              const RecordView& r, const ControlRecord* control) override {
    json::Line j(&line_);
    j.Str("type", "record")
        .Str("file", file)
        .Uint("batch_position", batch_position)
        .Int("offset", r.offset)
        .Str("timestamp_type", TimestampType(h))
        .Int("timestamp", RecordTimestamp(h, r))
        .Int("key_size", r.key ? static_cast<int64_t>(r.key->size()) : -1)
        .Int("value_size", r.value ? static_cast<int64_t>(r.value->size()) : -1)
        .Int("sequence", RecordSequence(h, r));
    Headers(j.Key("headers"), r);
    if (control) {
      j.Key("control").BeginObject();
      j.Str("type", ControlTypeName(control->type)).Int("type_id", control->type);
      if (control->is_end_txn_marker()) j.Int("coordinator_epoch", control->coordinator_epoch);
      j.EndObject();
    }
    if (o_.data) j.Blob("key", r.key).Blob("payload", r.value);
    out_.Write(j.Finish());
  }

  void IndexEmpty(const std::string&) override {}
  void IndexEntry(const std::string& file, const OffsetIndexEntry& e) override {
    json::Line j;
    j.Str("type", "index_entry")
        .Str("file", file)
        .Int("offset", e.offset)
        .Uint("position", e.position);
    out_.Write(j.Finish());
  }
  void TimeIndexEntry(const std::string& file, const mq::TimeIndexEntry& e) override {
    json::Line j;
    j.Str("type", "time_index_entry")
        .Str("file", file)
        .Int("timestamp", e.timestamp)
        .Int("offset", e.offset);
    out_.Write(j.Finish());
  }
  void GroupOffsetsHeader(const std::string& file, const GroupOffsets& g) override {
    json::Line j;
    j.Str("type", "group_offsets")
        .Str("file", file)
        .Int("generation", g.generation)
        .Int("update_timestamp", g.update_timestamp)
        .Int("rebalances", g.rebalances)
        .Int("last_rebalance_timestamp", g.last_rebalance_timestamp)
        .Int("dead_letters", g.dead_letters())
        .Int("partitions", static_cast<int64_t>(g.offsets.size()));
    out_.Write(j.Finish());
  }
  void GroupOffset(const std::string& file, const CommittedOffset& e) override {
    json::Line j;
    j.Str("type", "group_offset")
        .Str("file", file)
        .Str("topic", e.topic)
        .Int("partition", e.partition)
        .Int("offset", e.offset)
        .Int("leader_epoch", e.leader_epoch)
        .Int("commit_timestamp", e.commit_timestamp)
        .Str("member_id", e.member_id)
        .Int("dead_letters", e.dead_letters);
    out_.Write(j.Finish());
  }
  void CheckpointHeader(const std::string& file, FileKind kind, size_t entries) override {
    json::Line j;
    j.Str("type", kind == FileKind::kLeaderEpochCheckpoint ? "leader_epoch_checkpoint"
                                                           : "replication_offset_checkpoint")
        .Str("file", file)
        .Int("version", 0)
        .Int("entries", static_cast<int64_t>(entries));
    out_.Write(j.Finish());
  }
  void LeaderEpochEntry(const std::string& file, const EpochEntry& e) override {
    json::Line j;
    j.Str("type", "leader_epoch_entry")
        .Str("file", file)
        .Int("epoch", e.epoch)
        .Int("start_offset", e.start_offset);
    out_.Write(j.Finish());
  }
  void ReplicationOffset(const std::string& file, const HighWatermarkEntry& e) override {
    json::Line j;
    j.Str("type", "replication_offset")
        .Str("file", file)
        .Str("topic", e.topic)
        .Int("partition", e.partition)
        .Int("offset", e.offset);
    out_.Write(j.Finish());
  }
  void MemberLease(const std::string& file, const mq::MemberLease& l) override {
    json::Line j;
    j.Str("type", "member_lease")
        .Str("file", file)
        .Int("version", kMemberLeaseVersion)
        .Int("session_timeout_ms", l.session_timeout_ms)
        .Int("last_seen", l.last_seen)
        .Int("session_end", SessionEnd(l));
    out_.Write(j.Finish());
  }
  void MemberHeartbeat(const std::string& file, const mq::MemberHeartbeat& h) override {
    json::Line j;
    j.Str("type", "member_heartbeat")
        .Str("file", file)
        .Int("version", kMemberHeartbeatVersion)
        .Int("pid", h.pid)
        .Int("start_time", h.start_time)
        .Int("deadline_ms", h.deadline_ms)
        .Int("last_poll", h.last_poll);
    out_.Write(j.Finish());
  }
  void TrailingBytes(const std::string& file, uint64_t position, uint64_t bytes) override {
    json::Line j;
    j.Str("type", "trailing_bytes")
        .Str("file", file)
        .Uint("position", position)
        .Uint("bytes", bytes);
    out_.Write(j.Finish());
  }
  void Problem(const mq::Problem& p) override {
    json::Line j;
    j.Str("type", "problem")
        .Str("file", p.file)
        .Uint("position", p.position)
        .Str("rule", p.rule)
        .Str("detail", p.detail)
        .Str("kind", KindName(p.kind));
    out_.Write(j.Finish());
  }
  void Clean(const std::string& path, const VerifySummary& v) override {
    json::Line j;
    j.Str("type", v.empty() ? "empty" : "clean").Str("path", path);
    j.Int("topics", static_cast<int64_t>(v.topics))
        .Int("partitions", static_cast<int64_t>(v.partitions))
        .Int("empty_partitions", static_cast<int64_t>(v.empty_partitions))
        .Int("files", static_cast<int64_t>(v.stats.files))
        .Int("segments", static_cast<int64_t>(v.stats.segments))
        .Int("batches", static_cast<int64_t>(v.stats.batches))
        .Int("records", static_cast<int64_t>(v.stats.records))
        .Int("bytes", static_cast<int64_t>(v.stats.bytes))
        .Int("groups", static_cast<int64_t>(v.groups));
    out_.Write(j.Finish());
  }

 private:
  // [{"key":"k","value":"v"},...]; values only with --print-data-log or
  // --headers, following the key/value rule (value_b64 for bytes that are
  // not UTF-8, null for a null value).
  void Headers(json::Writer& j, const RecordView& r) {
    j.BeginArray();
    for (const auto& h : r.headers()) {
      j.BeginObject().Blob("key", AsBytes(h.key));
      if (o_.data || o_.headers) j.Blob("value", h.value);
      j.EndObject();
    }
    j.EndArray();
  }

  PrintOptions o_;
  fmt::memory_buffer line_;
};

}  // namespace

std::unique_ptr<Printer> MakeTextPrinter(const PrintOptions& options) {
  return std::make_unique<TextPrinter>(options);
}
std::unique_ptr<Printer> MakeJsonPrinter(const PrintOptions& options) {
  return std::make_unique<JsonPrinter>(options);
}

}  // namespace mq::inspect
