#include "options.h"

#include <unistd.h>

#include <fmt/format.h>

#include "cli.h"
#include "escapes.h"
#include "mq/units.h"
#include "size_option.h"

namespace mq::produce {
namespace {

Status Bad(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }

Result<std::pair<std::string, std::string>> SplitAssignment(const std::string& text,
                                                            std::string_view flag) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Bad(fmt::format("{}: '{}' is not NAME=VALUE", flag, text));
  }
  return std::pair{text.substr(0, eq), text.substr(eq + 1)};
}

// --fsync interval:DURATION, at most a day.
constexpr int64_t kMaxFsyncIntervalMs = 86400000;

Status ParseFsync(const std::string& text, Settings* s) {
  if (text == "none") {
    s->durability = Durability::kNone;
  } else if (text == "batch") {
    s->durability = Durability::kEveryBatch;
  } else if (text == "interval" || text.starts_with("interval:")) {
    s->durability = Durability::kInterval;
    if (text.size() > 9) {
      auto ms = ParseDurationMs(std::string_view(text).substr(9), "--fsync interval", 1,
                                kMaxFsyncIntervalMs);
      if (!ms) return Bad(ms.error().message());
      s->flush_interval_ms = *ms;
    }
  } else {
    return Bad(fmt::format("--fsync: '{}' is not none, batch or interval[:MS]", text));
  }
  return Status::Ok();
}

// How messages are batched, appended and acknowledged: compression,
// sizes, --fsync, --acks, --producer-id, --print-offsets, the largest
// message.
void AddAppendFlags(CLI::App& app, Flags* f) {
  app.add_option("-z,--compression", f->compression, "none, gzip, snappy, lz4 or zstd")
      ->capture_default_str();
  app.add_option("--zstd-level", f->zstd_level, "zstd level")
      ->check(CLI::Range(-7, 22))
      ->capture_default_str();
  app.add_option("--batch-bytes", f->batch_bytes, "finish a batch when it would pass this size")
      ->transform(mq::cli::SizeUnits())
      ->check(CLI::Range(uint64_t{64}, uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--append-bytes", f->append_bytes,
                 "append (and fsync) once this much is batched (default 4194304 into one "
                 "partition, 8388608 into several)")
      ->transform(mq::cli::SizeUnits())
      ->check(CLI::Range(uint64_t{64}, uint64_t{1} << 30));
  app.add_option("--linger-ms", f->linger_ms,
                 "when input pauses, wait this long for more before appending")
      ->transform(mq::cli::DurationUnits())
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  app.add_option("--fsync", f->fsync, "none, batch (before each acknowledgement) or interval[:MS]")
      ->capture_default_str();
  app.add_option("--acks", f->acks,
                 "0 (no wait), 1 (the leader appended) or all (every in-sync replica has it)")
      ->capture_default_str();
  app.add_option("--ack-timeout", f->ack_timeout_ms,
                 "with --acks all, give up after this many ms (outcome unknown, exit 81)")
      ->transform(mq::cli::DurationUnits())
      ->check(CLI::Range(int64_t{1}, int64_t{86400000}))
      ->capture_default_str();
  app.add_option(
      "--producer-id", f->producer_id,
      "idempotent producer NAME: a re-run of the same input appends only what is missing");
  app.add_flag("--print-offsets", f->print_offsets,
               "print 'partition offset' per message once it is appended and durable");
  app.add_option("--max-message-bytes", f->max_message_bytes,
                 "refuse messages larger than this (at most the topic's max.message.bytes)")
      ->transform(mq::cli::SizeUnits())
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
}

}  // namespace

void AddFlags(CLI::App& app, Flags* f) {
  mq::cli::AddDirOption(app, &f->dir);
  app.add_option("-t,--topic", f->topic, "topic to append to")->required();
  app.add_option("-p,--partition", f->partition, "append every message to partition N");
  auto* key = app.add_option("-k,--key", f->key, "the same key for every message");
  auto* kd = app.add_option("-K,--key-delimiter", f->key_delimiter,
                            "split each message into key and value at the first DELIM")
                 ->excludes(key);
  auto* d = app.add_option("-D,--delimiter", f->delimiter,
                           "messages end with DELIM (escapes \\n \\t \\r \\0 \\\\ \\xNN)");
  auto* nul = app.add_flag("-0,--null", f->nul, "messages end with NUL")->excludes(d);
  auto* json = app.add_flag("-J,--json", f->json,
                            "input is the JSON Lines envelope of mq-consume -J (or kcat -J)")
                   ->excludes(d)
                   ->excludes(nul)
                   ->excludes(key)
                   ->excludes(kd);
  // Repeatable options take one value each time, so `-H a=b FILE` leaves
  // FILE an input file.
  app.add_option("-H,--header", f->headers, "add header NAME=VALUE to every message (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("-Z,--empty-is-null", f->empty_is_null, "an empty value is a null (tombstone)");
  AddAppendFlags(app, f);
  auto* create = app.add_flag("--create", f->create, "create the topic if it does not exist");
  app.add_option("--partitions", f->partitions, "partitions of a created topic")
      ->check(CLI::Range(1, 10000))
      ->needs(create);
  app.add_option("--like", f->like, "create the topic with the configuration of topic SRC")
      ->needs(create);
  app.add_flag("--keep-partition", f->keep_partition,
               "-J: append each message to the partition its envelope names")
      ->needs(json);
  app.add_option("-X,--config", f->config, "topic configuration KEY=VALUE when creating")
      ->needs(create)
      ->allow_extra_args(false);
  app.add_flag("--describe", f->describe, "print the topic's configuration and exit");
  auto* q = app.add_flag("-q,--quiet", f->quiet, "no progress, summary or notes on stderr");
  app.add_flag("-v,--verbose", f->verbose, "progress and a summary on stderr")->excludes(q);
  app.add_option("FILE", f->files, "input files ('-' is standard input; default: standard input)");
}

Result<Settings> Resolve(const Flags& f) {
  Settings s;
  if (f.nul) s.delimiter = std::string(1, '\0');
  if (f.delimiter) {
    auto d = cli::ParseEscapes(*f.delimiter, "-D/--delimiter");
    if (!d) return d.error();
    s.delimiter = *d;
  }
  if (f.key_delimiter) {
    auto d = cli::ParseEscapes(*f.key_delimiter, "-K/--key-delimiter");
    if (!d) return d.error();
    s.key_delimiter = *d;
  }
  for (const std::string& h : f.headers) {
    auto kv = SplitAssignment(h, "-H/--header");
    if (!kv) return kv.error();
    s.headers.push_back(*kv);
  }
  for (const std::string& c : f.config) {
    auto kv = SplitAssignment(c, "-X/--config");
    if (!kv) return kv.error();
    s.config.push_back(*kv);
  }
  bool known = false;
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kSnappy,
                        Compression::kLz4, Compression::kZstd}) {
    if (f.compression == CompressionName(c)) {
      s.compression = c;
      known = true;
    }
  }
  if (!known) {
    return Bad(fmt::format("-z/--compression: '{}' is not none, gzip, snappy, lz4 or zstd",
                           f.compression));
  }
  MQ_RETURN_IF_ERROR(ParseFsync(f.fsync, &s));
  if (f.acks != "0" && f.acks != "1" && f.acks != "all" && f.acks != "-1")
    return Bad(fmt::format("--acks: '{}' is not 0, 1 or all", f.acks));
  s.acks0 = f.acks == "0";
  s.acks_all = f.acks == "all" || f.acks == "-1";
  if (s.acks0 && f.print_offsets) {
    return Bad("--print-offsets: with --acks 0 no offsets are acknowledged");
  }
  if (f.partition && *f.partition < 0) {
    return Bad(fmt::format("-p/--partition: {} is negative", *f.partition));
  }
  if (f.describe && (f.create || !f.files.empty() || f.producer_id)) {
    return Bad("--describe: takes no FILE, --create or --producer-id");
  }
  if (s.key_delimiter && s.key_delimiter == s.delimiter) {
    return Bad("-K/--key-delimiter: must differ from the message delimiter");
  }
  s.progress = !f.quiet && (f.verbose || ::isatty(STDERR_FILENO));
  return s;
}

}  // namespace mq::produce
