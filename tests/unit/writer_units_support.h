// Helpers for the tests of the partition writer's units (epoch state,
// producer-state manager, truncation, log loader): a log written through
// PartitionWriter, and a PartitionDir or PartitionView opened on it.
#pragma once

#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "mq/partition.h"
#include "storage/log_loader.h"
#include "storage/partition_dir.h"
#include "storage/partition_view.h"
#include "storage/writer_lock.h"
#include "test_support.h"

namespace mq::test {

inline void FillDir(PartitionDir* d, const std::string& path, LogConfig config = {}) {
  d->dir = path;
  d->config = config;
  d->fs = FileSystem::Default();
  auto fd = OpenDirectory(path, true);
  REQUIRE(fd);
  d->dir_fd = std::move(*fd);
}

// Appends `batches` batches of `records` records each (with `options`).
inline void WriteLog(const std::string& path, int batches, int records = 2,
                     BatchOptions options = {}, LogConfig config = {}) {
  auto w = PartitionWriter::Open(path, config, true, nullptr);
  REQUIRE(w);
  for (int i = 0; i < batches; ++i) {
    auto b = MakeBatch(records, 1000 + i, 8, options);
    REQUIRE((*w)->Append(b));
    if (options.base_sequence >= 0) options.base_sequence += records;
  }
  REQUIRE((*w)->Close().ok());
}

// A view of `path` opened as a writer's open does (OpenLog), its lock held
// for the view's lifetime.
struct OpenedView {
  PartitionView view;
  WriterLock lock;
  RecoveryReport report;
  explicit OpenedView(const std::string& path, LogConfig config = {}) {
    FillDir(&view, path, config);
    auto l = WriterLock::Open(view.fd(), path);
    REQUIRE(l);
    lock = std::move(*l);
    REQUIRE(lock.Lock().ok());
    REQUIRE(OpenLog(&view, &report).ok());
  }
  ~OpenedView() { (void)lock.Unlock(); }
  bool Repaired(const std::string& rule) const {
    for (const Problem& p : report.repaired)
      if (p.rule == rule) return true;
    return false;
  }
};

}  // namespace mq::test
