// A partition directory as its writer's units see it: the path (for
// messages), the configuration, the file system seam and the open
// directory. The writer owns one; the units it is cut into (log loader,
// truncation, producer-state manager, epoch state) take it by reference.
#pragma once

#include <string>

#include "mq/file.h"
#include "mq/partition.h"

namespace mq {

struct PartitionDir {
  std::string dir;
  LogConfig config;
  FileSystem* fs = nullptr;
  UniqueFd dir_fd;

  int fd() const { return dir_fd.get(); }
  // Whether changes are made durable (anything but page-cache durability).
  bool sync() const { return !config.page_cache_only(); }
};

}  // namespace mq
