#include "mq/pipeline.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "mq/batch.h"
#include "mq/committed_end.h"
#include "mq/consumer.h"

namespace mq {
namespace {

std::optional<std::string> Copy(const std::optional<Bytes>& b) {
  if (!b) return std::nullopt;
  return std::string(AsText(*b));
}

// "IN/<p>/<offset>", the mq.src of a source message (E2).
std::string SourceId(const PipelineSource& s, int64_t offset) {
  return fmt::format("{}/{}/{}", s.topic, s.partition, offset);
}

// The records of producer `pid`'s batch `bytes` in `pdir`: the outputs of
// one source message (E2), each naming it (mq.src: `prefix` and its
// offset) and its index among them (mq.src.index). Calls each(index,
// record) for each; returns the source offset (-1 for no record).
template <typename F>
Result<int64_t> ReadOutputs(Bytes bytes, const DecodeLimits& limits, const std::string& pdir,
                            std::string_view prefix, int64_t pid, F each) {
  auto view = BatchView::Parse(bytes, limits, pdir, 0);
  if (!view) return view.error();
  std::vector<std::byte> scratch;
  auto records = RecordReader::Open(*view, &scratch, limits, pdir, 0);
  if (!records) return records.error();
  RecordView r;
  int64_t src_offset = -1;
  while (records->Read(&r)) {
    std::optional<std::string> where, index;
    for (const Header& h : r.headers()) {
      if (h.key == kPipelineSourceHeader && h.value) where = std::string(AsText(*h.value));
      if (h.key == kPipelineSourceIndexHeader && h.value) index = std::string(AsText(*h.value));
    }
    int64_t o = -1, i = -1;
    const bool ok =
        where && index && where->starts_with(prefix) &&
        std::from_chars(where->data() + prefix.size(), where->data() + where->size(), o).ec ==
            std::errc() &&
        std::from_chars(index->data(), index->data() + index->size(), i).ec == std::errc() &&
        (src_offset < 0 || o == src_offset);
    if (!ok)
      return Status::Corruption(
          pdir, 0, "E2",
          fmt::format("offset {}: an output of producer {} without the "
                      "{} header {}N of one source message, or {}",
                      r.offset, pid, kPipelineSourceHeader, prefix, kPipelineSourceIndexHeader));
    src_offset = o;
    each(i, r);
  }
  if (!records->status().ok()) return records->status();
  return src_offset;
}

}  // namespace

std::string PipelineProducerName(std::string_view group, std::string_view in, std::string_view out,
                                 int32_t partition) {
  return fmt::format("pipeline.{}.{}.{}.{}.{}.{}.{}", group.size(), group, in.size(), in,
                     out.size(), out, partition);
}

std::vector<PipelineOutput> SplitPipelineOutput(std::string_view output,
                                                const std::optional<std::string>& key_delimiter) {
  std::vector<PipelineOutput> outs;
  while (!output.empty()) {
    size_t nl = output.find('\n');
    std::string_view line = output.substr(0, nl);
    output.remove_prefix(nl == std::string_view::npos ? output.size() : nl + 1);
    PipelineOutput o;
    if (key_delimiter) {
      size_t at = line.find(*key_delimiter);
      if (at != std::string_view::npos) {
        o.key = std::string(line.substr(0, at));
        line.remove_prefix(at + key_delimiter->size());
      }
    }
    o.value = std::string(line);
    outs.push_back(std::move(o));
  }
  return outs;
}

int32_t PipelineRoute(int32_t source_partition, const PipelineOutput& output,
                      int32_t out_partitions) {
  if (output.key) return PartitionForKey(AsBytes(*output.key), out_partitions);
  return source_partition % out_partitions;
}

size_t PipelineWriterBudget(size_t shares, int32_t source_partitions, size_t reader_descriptors,
                            size_t writer_descriptors, size_t max_writers) {
  const size_t readers =
      std::min<size_t>(shares, static_cast<size_t>(std::max(source_partitions, 1)));
  const size_t writers = shares + (shares - readers) * reader_descriptors / writer_descriptors;
  return std::clamp<size_t>(writers, 1, max_writers);
}

PipelineWriter::PipelineWriter(PipelineConfig config, const DataDir& dir)
    : config_(std::move(config)), dir_(dir) {}

PipelineWriter::~PipelineWriter() { (void)Close(); }

Status PipelineWriter::Open(const TopicConfig& out) {
  out_config_ = out;
  log_ = DataDir::LogConfigFor(out_config_);
  log_.durability = config_.durability;
  log_.sync_on_close = config_.durability != Durability::kNone;
  config_.max_open = std::max<size_t>(config_.max_open, 1);
  writers_.resize(static_cast<size_t>(out_config_.partitions));
  writer_mu_ = std::make_unique<std::mutex[]>(static_cast<size_t>(out_config_.partitions));
  in_lru_.resize(static_cast<size_t>(out_config_.partitions));
  return Status::Ok();
}

Status PipelineWriter::Close() {
  Status first;
  for (size_t q = 0; q < writers_.size(); ++q) {
    std::lock_guard<std::mutex> lk(writer_mu_[q]);
    auto& w = writers_[q];
    if (!w) continue;
    Status s = w->Close();
    if (first.ok() && !s.ok()) first = s;
    w.reset();
  }
  {
    std::lock_guard<std::mutex> lk(open_mu_);
    lru_.clear();
    open_count_ = 0;
  }
  std::lock_guard<std::mutex> lk(sources_mu_);
  sources_.clear();
  return first;
}

void PipelineWriter::set_max_open(size_t n) {
  std::lock_guard<std::mutex> lk(open_mu_);
  config_.max_open = std::max<size_t>(n, 1);
}

size_t PipelineWriter::open_writers() const {
  std::lock_guard<std::mutex> lk(open_mu_);
  return lru_.size();
}

PipelineWriter::Source* PipelineWriter::Find(int32_t key) {
  std::lock_guard<std::mutex> lk(sources_mu_);
  auto it = sources_.find(key);
  return it == sources_.end() ? nullptr : &it->second;
}

const PipelineWriter::Source* PipelineWriter::Find(int32_t key) const {
  std::lock_guard<std::mutex> lk(sources_mu_);
  auto it = sources_.find(key);
  return it == sources_.end() ? nullptr : &it->second;
}

Status PipelineWriter::MakeRoom() {
  std::unique_lock<std::mutex> lk(open_mu_);
  auto it = lru_.end();
  while (open_count_ >= config_.max_open && it != lru_.begin()) {
    const int32_t v = *--it;
    std::unique_lock<std::mutex> held(writer_mu_[static_cast<size_t>(v)], std::try_to_lock);
    if (!held.owns_lock()) continue;  // a transform appends through it: the next one
    lru_.erase(it);
    // Closed without open_mu_ (with --fsync batch, Close fsyncs): v's own
    // lock keeps any thread from using or opening v meanwhile. Each batch
    // appended through it is in the log whole, as durable as --fsync asks;
    // v is opened again at its next use.
    lk.unlock();
    std::unique_ptr<PartitionWriter> w = std::move(writers_[static_cast<size_t>(v)]);
    Status s = w->Close();
    w.reset();
    lk.lock();
    --open_count_;
    held.unlock();
    if (!s.ok())
      return Status(s.code(), fmt::format("--to-topic {} partition {}: close: {}", config_.out, v,
                                          s.message()));
    it = lru_.end();  // other threads may have used the list meanwhile
  }
  ++open_count_;
  return Status::Ok();
}

Result<PartitionWriter*> PipelineWriter::Writer(int32_t q) {
  auto& w = writers_[static_cast<size_t>(q)];
  if (w) {
    std::lock_guard<std::mutex> lk(open_mu_);
    lru_.splice(lru_.begin(), lru_, in_lru_[static_cast<size_t>(q)]);
    return w.get();
  }
  MQ_RETURN_IF_ERROR(MakeRoom());
  RecoveryReport report;
  auto opened = PartitionWriter::Open(dir_.PartitionDir(config_.out, q), log_, true, &report);
  std::lock_guard<std::mutex> lk(open_mu_);
  if (!opened) {
    --open_count_;
    return opened.error();
  }
  w = std::move(*opened);
  lru_.push_front(q);
  in_lru_[static_cast<size_t>(q)] = lru_.begin();
  return w.get();
}

Result<int64_t> PipelineWriter::Acquire(int32_t key, const PipelineSource& source, int64_t start) {
  Source src;
  src.name = source;
  auto id = ProducerIdentity::Acquire(
      dir_.path(),
      PipelineProducerName(config_.group, source.topic, config_.out, source.partition));
  if (!id) return id.error();
  src.identity.emplace(std::move(*id));
  src.next_sequence.assign(static_cast<size_t>(out_config_.partitions), 0);
  MQ_RETURN_IF_ERROR(FindTail(src, start));
  const int64_t resume = src.resume;
  std::lock_guard<std::mutex> lk(sources_mu_);
  sources_[key] = std::move(src);
  return resume;
}

Status PipelineWriter::FindTail(Source& src, int64_t start) {
  const int64_t pid = src.identity->id();
  ReadOptions read;
  read.limits = DataDir::DecodeLimitsFor(out_config_);
  read.offsets = out_config_.cleanup_policy == CleanupPolicy::kDelete ? OffsetPolicy::kContiguous
                                                                      : OffsetPolicy::kGapsAllowed;
  const std::string prefix = SourceId(src.name, 0).substr(0, SourceId(src.name, 0).size() - 1);
  // Per output partition: the source offset of the producer's last batch
  // there, and its records.
  std::map<int32_t, std::pair<int64_t, std::vector<Found>>> tails;
  int64_t highest = -1;
  for (int32_t q = 0; q < out_config_.partitions; ++q) {
    // The producer's state is read from the log as a writer's recovery
    // leaves it: when recovery could keep batches past the published end
    // (a crash between an append and its publication, then a reboot),
    // opening the writer first recovers the partition; otherwise the
    // published end is where recovery cuts (MayKeepPastCommittedEnd).
    // Only this source partition's transforms append this producer's
    // batches, and none runs now; others' may append to q meanwhile, as
    // other members' may.
    const std::string pdir = dir_.PartitionDir(config_.out, q);
    auto recover = MayKeepPastCommittedEnd(pdir, read.fs);
    if (!recover) return recover.error();
    if (*recover) {
      std::lock_guard<std::mutex> lk(writer_mu_[static_cast<size_t>(q)]);
      auto w = Writer(q);
      if (!w) return w.error();
    }
    auto last = LastProducerBatch(pdir, pid, read);
    if (!last) return last.error();
    if (!*last) continue;
    src.next_sequence[static_cast<size_t>(q)] =
        (*last)->last_sequence == INT32_MAX ? 0 : (*last)->last_sequence + 1;
    if ((*last)->bytes.empty())
      return Status(
          Code::kNotFound,
          fmt::format("--to-topic {}: partition {}: the last batch of this pipeline's "
                      "producer (offset {}) was removed by retention: where source "
                      "partition {} of {} stopped cannot be known",
                      config_.out, q, (*last)->base_offset, src.name.partition, src.name.topic));
    std::vector<Found> found;
    auto src_offset = ReadOutputs((*last)->bytes, read.limits, pdir, prefix, pid,
                                  [&](int64_t index, const RecordView& r) {
                                    found.push_back({index, Copy(r.key), Copy(r.value)});
                                  });
    if (!src_offset) return src_offset.error();
    highest = std::max(highest, *src_offset);
    tails[q] = {*src_offset, std::move(found)};
  }
  if (highest >= start) {
    src.resume = highest;
    for (auto& [q, t] : tails)
      if (t.first == highest) src.present[q] = std::move(t.second);
  }
  return Status::Ok();
}

void PipelineWriter::Release(int32_t key) {
  std::lock_guard<std::mutex> lk(sources_mu_);
  sources_.erase(key);
}

Result<bool> PipelineWriter::Complete(int32_t key, int64_t offset) const {
  const Source* src = Find(key);
  if (src == nullptr)
    return Status(Code::kInternal, fmt::format("partition {}: not acquired", key));
  return offset < src->resume;
}

bool PipelineWriter::Started(int32_t key, int64_t offset) const {
  const Source* src = Find(key);
  return src != nullptr && offset == src->resume && !src->present.empty();
}

Status PipelineWriter::AppendBatch(
    Source& src, int64_t offset, int64_t timestamp, int32_t q,
    const std::vector<std::pair<size_t, const PipelineOutput*>>& outs) {
  int32_t& seq = src.next_sequence[static_cast<size_t>(q)];
  BatchOptions b;
  b.producer_id = src.identity->id();
  b.producer_epoch = 0;
  b.base_sequence = seq;
  BatchBuilder builder(b);
  const std::string where = SourceId(src.name, offset);
  for (const auto& [index, o] : outs) {
    const std::string idx = std::to_string(index);
    const Header headers[] = {{kPipelineSourceHeader, AsBytes(where)},
                              {kPipelineSourceIndexHeader, AsBytes(idx)}};
    RecordInput r;
    r.timestamp = timestamp;
    if (o->key) r.key = AsBytes(*o->key);
    r.value = AsBytes(o->value);
    r.headers = headers;
    builder.Add(r);
  }
  std::vector<std::byte> bytes;
  MQ_RETURN_IF_ERROR(builder.Finish(0, &bytes));
  std::lock_guard<std::mutex> lk(writer_mu_[static_cast<size_t>(q)]);
  auto w = Writer(q);
  if (!w) return w.error();
  auto appended = (*w)->Append(bytes, CrcCheck::kAlreadyComputed);
  if (!appended)
    return Status(appended.error().code(),
                  fmt::format("topic {} partition {} offset {}: --to-topic {} partition {}: "
                              "append: {}",
                              src.name.topic, src.name.partition, offset, config_.out, q,
                              appended.error().message()));
  const int64_t n = static_cast<int64_t>(outs.size());
  seq = static_cast<int32_t>((static_cast<int64_t>(seq) + n) % (int64_t{1} << 31));
  appended_ += outs.size();
  return Status::Ok();
}

Status PipelineWriter::CheckPresent(
    const Source& src, int64_t offset,
    const std::map<int32_t, std::vector<std::pair<size_t, const PipelineOutput*>>>& outs) const {
  const std::string where =
      fmt::format("topic {} partition {} offset {}", src.name.topic, src.name.partition, offset);
  for (const auto& [q, found] : src.present) {
    auto mine = outs.find(q);
    bool same = mine != outs.end() && mine->second.size() == found.size();
    for (size_t k = 0; same && k < found.size(); ++k) {
      const auto& [index, o] = mine->second[k];
      same = found[k].index == static_cast<int64_t>(index) && found[k].key == o->key &&
             found[k].value == std::optional<std::string>(o->value);
    }
    if (!same)
      return Status(Code::kCorruption,
                    fmt::format("{}: the transform's outputs differ from those an earlier run "
                                "appended to {} partition {}: the transform is not "
                                "deterministic (same input, same output lines), so this "
                                "pipeline cannot be effectively-once; stopping",
                                where, config_.out, q));
  }
  return Status::Ok();
}

Result<PipelineDelivery> PipelineWriter::Deliver(int32_t key, int64_t offset, int64_t timestamp,
                                                 std::string_view output) {
  Source* acquired = Find(key);
  if (acquired == nullptr)
    return Status(Code::kInternal, fmt::format("partition {}: not acquired", key));
  Source& src = *acquired;
  const std::vector<PipelineOutput> outs = SplitPipelineOutput(output, config_.key_delimiter);
  // E4: one batch per output partition, outputs in index order.
  std::map<int32_t, std::vector<std::pair<size_t, const PipelineOutput*>>> by_partition;
  for (size_t i = 0; i < outs.size(); ++i)
    by_partition[PipelineRoute(src.name.partition, outs[i], out_config_.partitions)].push_back(
        {i, &outs[i]});
  PipelineDelivery done;
  done.completed = offset == src.resume;
  // E7: the outputs an earlier run appended must be what this run gives.
  if (done.completed) MQ_RETURN_IF_ERROR(CheckPresent(src, offset, by_partition));
  for (const auto& [q, list] : by_partition) {
    if (done.completed && src.present.contains(q)) continue;  // appended by an earlier run
    if (done.batches > 0 && config_.between_batches) config_.between_batches();
    MQ_RETURN_IF_ERROR(AppendBatch(src, offset, timestamp, q, list));
    ++done.batches;
  }
  if (done.completed) {
    src.resume = -1;
    src.present.clear();
  }
  return done;
}

}  // namespace mq
