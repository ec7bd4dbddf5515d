#include "group_carry.h"

#include <algorithm>

#include "mq/group.h"

namespace mq {

Result<std::vector<wire::CarriedOffset>> ReadGroupOffsets(const std::string& root,
                                                          const std::string& topic,
                                                          int32_t partition) {
  std::vector<wire::CarriedOffset> out;
  auto groups = ListGroups(root);
  if (!groups) {
    if (groups.error().code() == Code::kNotFound) return out;
    return groups.error();
  }
  for (const std::string& name : *groups) {
    auto group = Group::Open(root, name, false);
    if (!group) continue;  // removed meanwhile
    auto offsets = group->Read();
    if (!offsets) return offsets.error();
    const CommittedOffset* c = offsets->Find(topic, partition);
    if (c) out.push_back({name, *c});
  }
  return out;
}

Status ApplyGroupOffsets(const std::string& root, std::span<const wire::CarriedOffset> offsets,
                         FileSystem* fs) {
  for (const wire::CarriedOffset& o : offsets) {
    const CommittedOffset& c = o.committed;
    auto to = Group::Open(root, o.group, true, fs);
    if (!to) return to.error();
    // Read without the lock: most rounds carry nothing new, and write
    // nothing. What is carried is decided again under commit.lock (kCarry).
    auto mine = to->Read();
    if (!mine) return mine.error();
    const CommittedOffset* have = mine->Find(c.topic, c.partition);
    // At the same offset, a later leader epoch: the leader's members read
    // those offsets again after a failover cut the records the follower's
    // entry follows (that entry would be diverged there, KIP-320).
    if (have && (have->offset > c.offset ||
                 (have->offset == c.offset && have->leader_epoch >= c.leader_epoch)))
      continue;
    OffsetCommit commit;
    commit.topic = c.topic;
    commit.partition = c.partition;
    commit.offset = c.offset;
    commit.leader_epoch = c.leader_epoch;
    commit.dead_letters = c.dead_letters;
    MQ_RETURN_IF_ERROR(to->Commit(std::span<const OffsetCommit>(&commit, 1), c.member_id,
                                  CommitKind::kCarry, c.commit_timestamp));
  }
  return Status::Ok();
}

}  // namespace mq
