// The walk of a data directory's verification (mq-inspect --verify DIR,
// layout.md): which parts are read, in which order, and which entries are
// only noted. The caller verifies each part it is handed and keeps the
// counts; the walk lists directories through the FileSystem seam
// (ListNames, mq/file.h).
#pragma once

#include <string>

#include "mq/partition.h"
#include "mq/status.h"
#include "mq/topic.h"

namespace mq {

// What VerifyDataDir hands its caller, in walk order. A Status other than
// OK returned by one of them stops the walk and is VerifyDataDir's.
class DataDirVisitor {
 public:
  virtual ~DataDirVisitor() = default;
  // `file` (meta.properties, a topic's configuration) breaks a rule:
  // `status` is its kCorruption. The walk goes on past a topic's.
  virtual void Corrupt(const Status& status, const std::string& file) = 0;
  // meta.properties was read.
  virtual void MetaProperties() = 0;
  // Topic `topic` (its configuration read, when `config` is set).
  virtual void Topic(const std::string& topic, const TopicConfig* config) = 0;
  // Partition directory `dir` of a topic whose configuration is `config`.
  virtual Status Partition(const std::string& dir, const TopicConfig& config) = 0;
  // A partition of a topic never written: its directory `dir` is absent.
  virtual void AbsentPartition(const std::string& dir) = 0;
  // A group's member files (group.md R65, R69): `path` ends in
  // kMemberLeaseSuffix or kMemberHeartbeatSuffix.
  virtual Status MemberLease(const std::string& path) = 0;
  virtual Status MemberHeartbeat(const std::string& path) = 0;
  // A group's offsets file (R29, R30), or none (a group that has committed
  // nothing).
  virtual Status GroupOffsets(const std::string& path) = 0;
  virtual void GroupWithoutOffsets(const std::string& group_dir) = 0;
  // Something not verified, said as a note (R12).
  virtual void Note(const Problem& note) = 0;
};

// Walks the data directory `path`: meta.properties (a corrupt one ends the
// walk), every topic's configuration and each of its partitions in order;
// then every group (ListGroups order), its members' leases, then its
// heartbeats (each sorted by name), then its offsets file; then a note for
// each entry of groups/ that is not a group (but a removed one,
// `~deleted-*`), and for each partition-like directory (`NAME-<digits>`)
// that no topic owns. Directories that cannot be listed are passed over.
Status VerifyDataDir(const std::string& path, DataDirVisitor* visitor);

// True if the directory `dir` holds a segment (a .log whose name is a base
// offset, R12); false if it holds none or cannot be listed.
bool HasSegments(const std::string& dir);

}  // namespace mq
