#include "mq/verify_data_dir.h"

#include <fcntl.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <vector>

#include "format/format.h"
#include "mq/file.h"
#include "mq/group.h"
#include "mq/member_heartbeat.h"
#include "mq/member_lease.h"
#include "mq/segment.h"

namespace mq {
namespace {

// The names in directory `path`, in directory order; empty when it
// cannot be opened or listed.
std::vector<std::string> NamesIn(const std::string& path) {
  auto dir = OpenDirectory(path, false);
  if (!dir) return {};
  auto names = ListNames(dir->get(), path);
  if (!names) return {};
  return std::move(*names);
}

// Whether `path` names anything (lstat: a symlink is not followed).
bool Exists(const std::string& path) {
  return FileSystem::Default()->StatAt(AT_FDCWD, path).has_value();
}

// `<name>-<digits>`: the form of a partition directory.
bool PartitionLike(const std::string& name) {
  const size_t dash = name.find_last_of('-');
  return dash != std::string::npos && dash + 1 != name.size() &&
         name.find_first_not_of("0123456789", dash + 1) == std::string::npos;
}

// `<group>/members/`: static members' leases (R65), then running
// members' heartbeats (R69), each sorted by name.
Status Members(const std::string& group_dir, DataDirVisitor* v) {
  const std::string members = group_dir + "/" + format::kGroupMembersDir;
  std::vector<std::string> leases, heartbeats;
  for (const std::string& name : NamesIn(members)) {
    if (name.size() > kMemberLeaseSuffix.size() && name.ends_with(kMemberLeaseSuffix))
      leases.push_back(members + "/" + name);
    if (name.size() > kMemberHeartbeatSuffix.size() && name.ends_with(kMemberHeartbeatSuffix))
      heartbeats.push_back(members + "/" + name);
  }
  std::sort(leases.begin(), leases.end());
  std::sort(heartbeats.begin(), heartbeats.end());
  for (const std::string& path : leases) MQ_RETURN_IF_ERROR(v->MemberLease(path));
  for (const std::string& path : heartbeats) MQ_RETURN_IF_ERROR(v->MemberHeartbeat(path));
  return Status::Ok();
}

// `<data>/groups/`: every group's members and offsets file; entries that
// are not groups are noted.
Status Groups(const std::string& data, DataDirVisitor* v) {
  const std::string groups = data + "/" + format::kGroupsDir;
  auto names = ListGroups(data);
  if (!names) return names.error();
  for (const std::string& g : *names) {
    MQ_RETURN_IF_ERROR(Members(groups + "/" + g, v));
    const std::string file = groups + "/" + g + "/" + kGroupOffsetsFile;
    if (!Exists(file)) {
      v->GroupWithoutOffsets(groups + "/" + g);
      continue;
    }
    MQ_RETURN_IF_ERROR(v->GroupOffsets(file));
  }
  for (const std::string& name : NamesIn(groups)) {
    if (name.starts_with("~deleted-") || std::binary_search(names->begin(), names->end(), name))
      continue;
    v->Note({groups + "/" + name, 0, "R12", "not a group directory: not verified",
             Problem::Kind::kNote});
  }
  return Status::Ok();
}

}  // namespace

Status VerifyDataDir(const std::string& path, DataDirVisitor* v) {
  auto data = DataDir::Open(path, false);
  if (!data) {
    if (data.error().code() != Code::kCorruption) return data.error();
    v->Corrupt(data.error(), path + "/meta.properties");
    return Status::Ok();
  }
  v->MetaProperties();
  auto topics = data->ListTopics();
  if (!topics) return topics.error();
  std::set<std::string> owned;
  for (const std::string& topic : *topics) {
    auto config = data->ReadTopic(topic);
    if (!config) {
      v->Topic(topic, nullptr);
      if (config.error().code() != Code::kCorruption) return config.error();
      v->Corrupt(config.error(), path + "/topics/" + topic + ".conf");
      continue;
    }
    v->Topic(topic, &*config);
    for (int32_t p = 0; p < config->partitions; ++p) {
      std::string dir = data->PartitionDir(topic, p);
      owned.insert(dir.substr(dir.find_last_of('/') + 1));
      if (!Exists(dir)) {
        v->AbsentPartition(dir);  // never written: nothing to read
        continue;
      }
      MQ_RETURN_IF_ERROR(v->Partition(dir, *config));
    }
  }
  MQ_RETURN_IF_ERROR(Groups(path, v));
  // Partition-like directories that no topic owns are not read: say so.
  for (const std::string& name : NamesIn(path)) {
    if (!PartitionLike(name) || owned.count(name)) continue;
    v->Note({path + "/" + name, 0, "R12",
             "not a partition of any topic in this data directory: not verified",
             Problem::Kind::kNote});
  }
  return Status::Ok();
}

bool HasSegments(const std::string& dir) {
  for (const std::string& name : NamesIn(dir))
    if (name.ends_with(".log") && SegmentBaseOffset(name)) return true;
  return false;
}

}  // namespace mq
