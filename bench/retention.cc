// Retention of a partition of many segments (format-spec/retention.md).
//
//   bench-retention [--segments=10000]
//
// Builds a partition of --segments segments (one small batch each), then
// times one retention run as mq-compact makes it: ListRetentionSegments,
// PlanRetention (retention.bytes 0: every segment but the active one),
// PartitionWriter::Open and DeleteSegmentsBefore (the log start published
// and fsynced, every file renamed .deleted, the directory fsynced). It
// counts the segment logs opened meanwhile: retention reads no segment's
// contents (the writer opens the active one). Baseline, same run:
// `ls -l`'s work, a listing and a stat of every file. Target: under 1 s.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <string>

#include "bench.h"
#include "mq/file.h"
#include "mq/partition.h"
#include "mq/retention.h"

namespace {

// Counts the opens of segment logs (`*.log`).
class CountingFs : public mq::FileSystemWrapper {
 public:
  mq::Result<std::unique_ptr<mq::File>> Open(int dir_fd, const std::string& name,
                                             OpenMode mode) override {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0) ++log_opens;
    return FileSystemWrapper::Open(dir_fd, name, mode);
  }
  int log_opens = 0;
};

void Build(const std::string& dir, int segments) {
  mq::LogConfig config;
  config.segment_bytes = 200;  // the next batch rolls
  auto writer = bench::Take(mq::PartitionWriter::Open(dir, config, true, nullptr), "open");
  int per_batch = 0;
  auto batch = bench::MakeBatch(150, 20, 1700000000000, &per_batch);
  for (int i = 0; i < segments; ++i) bench::Take(writer->Append(batch), "append");
  bench::Check(writer->Close(), "close");
}

double ListAndStat(const std::string& dir) {
  const double t0 = bench::Now();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) bench::Die("opendir");
  struct stat st {};
  while (dirent* e = ::readdir(d)) ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW);
  ::closedir(d);
  return bench::Now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  const int segments = std::stoi(bench::Flag(argc, argv, "segments", "10000"));
  bench::ScratchDir tmp;
  const std::string dir = tmp / "p-0";
  Build(dir, segments);
  const double ls = ListAndStat(dir);

  CountingFs fs;
  const double t0 = bench::Now();
  auto log = bench::Take(mq::ListRetentionSegments(dir, &fs), "list");
  mq::RetentionPolicy policy;
  policy.retention_bytes = 0;
  const mq::RetentionPlan plan = mq::PlanRetention(log, policy);
  const double planned = bench::Now() - t0;
  mq::LogConfig config;
  config.segment_bytes = 200;
  config.fs = &fs;
  auto writer = bench::Take(mq::PartitionWriter::Open(dir, config, false, nullptr), "open writer");
  bench::Check(writer->DeleteSegmentsBefore(plan.new_log_start), "delete");
  bench::Check(writer->Close(), "close");
  const double run = bench::Now() - t0;
  if (static_cast<int>(plan.deletions.size()) != static_cast<int>(log.segments.size()) - 1)
    bench::Die("the plan does not delete every segment but the active one");
  if (writer->log_start_offset() != log.segments.back().base) bench::Die("log start not moved");

  bench::Row("retention of " + std::to_string(plan.deletions.size()) + " of " +
                 std::to_string(log.segments.size()) + " segments",
             bench::Fixed(run, "s"), "ls -l " + bench::Fixed(ls, "s"), run / ls, "< 1 s");
  bench::Row("  of which the plan (list, stat, time indexes)", bench::Fixed(planned, "s"), "", 0,
             "(reported)");
  bench::Row("  segment logs opened by that run", std::to_string(fs.log_opens), "", 0,
             "active only (1)");
  return 0;
}
