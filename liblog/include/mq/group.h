// Consumer-group state (format-spec/group.md §14): the committed offset of
// each topic-partition a group reads, kept in `<dir>/groups/<group>/offsets`
// and replaced atomically, plus the names of the group's lock files.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/file.h"
#include "mq/lock.h"
#include "mq/member_lease.h"
#include "mq/status.h"

namespace mq {

// The layout of the group files (§14.1, §14.2, §14.5) is liblog's
// (format.h); these are the values its callers use too.
constexpr int32_t kMaxGroupPartition = 9999;  // R30: layout.md §2 allows 10000
constexpr int32_t kNoLeaderEpoch = -1;
constexpr int64_t kNoTimestamp = -1;
// §14.1 The offsets file's name in `<dir>/groups/<group>/`.
constexpr const char* kGroupOffsetsFile = "offsets";

// One partition's committed position.
struct CommittedOffset {
  std::string topic;
  int32_t partition = 0;
  // The next offset the group reads (Kafka's committed offset): every
  // message below it was handed over.
  int64_t offset = 0;
  // partitionLeaderEpoch of the batch holding offset - 1 (Kafka's KIP-320),
  // kNoLeaderEpoch when none is known.
  int32_t leader_epoch = kNoLeaderEpoch;
  int64_t commit_timestamp = 0;  // ms since the epoch
  std::string member_id;         // who committed; empty for a reset
  int64_t dead_letters = 0;      // messages of this partition sent to a dead-letter topic
  bool operator==(const CommittedOffset&) const = default;
};

// The contents of an offsets file.
struct GroupOffsets {
  int64_t generation = 0;                   // writes of the file so far; 0: none yet
  int64_t update_timestamp = kNoTimestamp;  // ms of the last write
  int64_t rebalances = 0;
  int64_t last_rebalance_timestamp = kNoTimestamp;
  std::vector<CommittedOffset> offsets;  // sorted by (topic, partition), unique
  bool operator==(const GroupOffsets&) const = default;

  // The entry of `topic`/`partition`, or nullptr.
  const CommittedOffset* Find(std::string_view topic, int32_t partition) const;
  // Sum of dead_letters over every partition.
  int64_t dead_letters() const;
};

// The bytes of an offsets file for `state` (which must obey R30: the
// caller's entries sorted and valid).
std::vector<std::byte> EncodeGroupOffsets(const GroupOffsets& state);
// R29, R30: the state, or kCorruption naming `file`, the byte position and
// the rule (kUnsupported for a newer version).
Result<GroupOffsets> DecodeGroupOffsets(std::span<const std::byte> bytes, const std::string& file);
// R86: the offsets file written in place, two copies of a version-2 image
// (EncodeGroupOffsetsCopy) in the two halves of the file
// (EncodeGroupOffsetsInPlace: copy 0 `copy`, copy 1 zeros), each half
// `slot` bytes (GroupOffsetsSlotBytes of the image's size: room to grow).
std::vector<std::byte> EncodeGroupOffsetsCopy(const GroupOffsets& state);
uint64_t GroupOffsetsSlotBytes(uint64_t image_bytes);
std::vector<std::byte> EncodeGroupOffsetsInPlace(std::span<const std::byte> copy, uint64_t slot);
// A decoded offsets file: its state and, for an R86 file, which copy is
// current and the size of a slot (current -1: version 1's single image).
struct GroupOffsetsFile {
  GroupOffsets state;
  int current = -1;
  uint64_t slot_bytes = 0;
};
// Version 1 (R29, R30) or an R86 file of two copies.
Result<GroupOffsetsFile> DecodeGroupOffsetsFile(std::span<const std::byte> bytes,
                                                const std::string& file);
// Reads and decodes an offsets file by path (mq-inspect). kTooLarge is
// reported as R29 corruption, never allocated.
Result<GroupOffsets> ReadGroupOffsetsFile(const std::string& path);

// One partition's new position in a commit.
struct OffsetCommit {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  int32_t leader_epoch = kNoLeaderEpoch;
  int64_t dead_letters_added = 0;  // added to the partition's count
  // R31's exceptions: >= 0, the committed offset this commit may lower
  // (an owner found it past the log end, after a truncation; or, at most
  // once, it hands back messages it committed and did not hand out,
  // HandBackCommit). Accepted below the committed offset only while that
  // is still exactly this.
  int64_t lower_from = -1;
  // kCarry: the leader's count, which the partition's is raised to (-1:
  // none carried).
  int64_t dead_letters = -1;
};

enum class CommitKind : uint8_t {
  kForward,  // R31: an offset below the committed one is refused
  kReset,    // R33: only with no live member; may move offsets backwards
  // A follower carrying its leader's commits (group.md §14.3): an entry
  // whose committed offset is at or above the carried one is left as it
  // is, neither refused nor moved back (a member may have committed since
  // the carrier last read); dead_letters raises the count instead of
  // dead_letters_added.
  kCarry,
};

// How far a commit's write is synced (R32, format-spec/group.md §14.3).
enum class CommitSync : uint8_t {
  // The new file and then the group directory are fsynced: once Commit
  // returns, the commit survives a machine crash.
  kDurable,
  // The new file is fsynced before its rename, the directory is not: other
  // processes see the commit at once and a crash of any kind leaves a
  // complete file (this one or an earlier one), but a machine crash may
  // return the group to an earlier commit until the file system writes the
  // rename (the next durable write of the group, or its own journal
  // commit). For what a crash may lose without losing a message: an
  // at-least-once position (its messages are delivered again) or the
  // rebalance count.
  kAtomic,
};

// What a writer of the offsets file does while another process holds
// commit.lock (R32): called about every kCommitWaitCallMs between tries of
// the lock; an error it returns ends the wait and is the write's (nothing
// is written). A member looks there for a stuck holder to fence and keeps
// its own heartbeat (R69, GroupMember::WhileLockedOut), so that a member
// stopped while it holds the lock cannot stop every other member's commits.
using CommitWait = std::function<Status()>;
constexpr int64_t kCommitWaitCallMs = 100;

// A static member that is not running and whose session holds
// (format-spec/group.md §14.6, R65): a member of its group still.
struct AbsentMember {
  std::string id;
  MemberLease lease;
  // Its subscription: the topics its note (members/<id>.lock, §14.5)
  // names; nullopt when the note names none or cannot be read (an earlier
  // mq's member, or one that died writing it): taken to read every topic.
  std::optional<std::vector<std::string>> topics;
  // Whether it reads `topic` (or may: its subscription is not known).
  bool Reads(std::string_view topic) const;
  // When its session ends: from then on it is no member.
  int64_t session_end() const { return SessionEnd(lease); }
};

// `<dir>/groups/<group>/`, opened by descriptor.
class Group {
 public:
  // Opens the group `name` (R12) of the data directory `data_dir`. With
  // `create`, creates groups/ and the group's directory when missing;
  // without, a missing group is kNotFound. A data directory on NFS is
  // refused (kPermission): group locks need a local file system. `fs`
  // (default: the real one) carries every write of the offsets file.
  static Result<Group> Open(const std::string& data_dir, std::string_view name, bool create,
                            FileSystem* fs = nullptr);

  const std::string& name() const { return name_; }
  // `<dir>/groups/<group>`, for messages.
  const std::string& path() const { return path_; }
  int dir_fd() const { return dir_.get(); }
  // The file system every file call of the group goes through.
  FileSystem* fs() const { return fs_; }

  // The committed state, without a lock (the file is replaced whole). A
  // missing offsets file is a group with no commits (generation 0); a
  // corrupt or truncated one is kCorruption naming file, position and rule.
  Result<GroupOffsets> Read() const;

  // Commits every entry of `commits` or none (R31, R32), by `member_id`
  // (empty or R12) at `now_ms` (kNoTimestamp: the clock's time). kForward
  // refuses (kInvalidArgument, nothing written) an offset below the
  // committed one, unless the entry's lower_from is that offset; kReset may move offsets backwards
  // and writes an empty member id, under group.lock held exclusively: `reset_lock` when given (from
  // LockForReset, taken before the caller read what it plans from), otherwise taken here without
  // blocking (kBusy, exit 75, while a member is alive). Partitions not named keep their entries. A
  // corrupt offsets file is never replaced: its corruption is returned. `sync`: kAtomic only for
  // commits whose loss to a machine crash delivers messages again (never for kReset or kCarry,
  // which are always kDurable). `wait`: what the writer does while another process holds
  // commit.lock (CommitWait); none: it blocks until the lock is free.
  Status Commit(std::span<const OffsetCommit> commits, std::string_view member_id,
                CommitKind kind = CommitKind::kForward, int64_t now_ms = kNoTimestamp,
                const FileLock* reset_lock = nullptr, CommitSync sync = CommitSync::kDurable,
                const CommitWait& wait = {});
  // group.lock exclusively, without blocking (R33): kBusy (exit 75) naming
  // the lock while any member is alive, or naming the member while an
  // absent static member's session holds (CheckNoAbsentMembers, checked
  // once the lock is held). Held, no member can join: what a reset reads
  // (committed offsets, log bounds) stays what it writes over. With
  // `topic` (an offset delete of that topic), only the absent members
  // that read it refuse (CheckNoAbsentMembers).
  Result<FileLock> LockForReset(std::optional<std::string_view> topic = std::nullopt) const;
  // Removes the committed entries of `topic` (those of `partitions` only,
  // when not empty) in one write (R32), as kafka-consumer-groups
  // --delete-offsets does: the group then reads them as never committed.
  // Under group.lock held exclusively, like a reset (R33): `reset_lock`
  // when given, otherwise taken here without blocking (kBusy, exit 75,
  // while a member is alive, or while an absent static member that reads
  // `topic` is in its session: LockForReset(topic)). Returns the partitions
  // whose entries were removed, ascending; nothing is written when there
  // are none.
  Result<std::vector<int32_t>> DeleteOffsets(std::string_view topic,
                                             std::span<const int32_t> partitions,
                                             const FileLock* reset_lock = nullptr);
  // Counts a rebalance at `now_ms` (R32's procedure; offsets unchanged),
  // CommitSync::kAtomic: the count is a health signal, and a write that
  // changes no offset needs no directory fsync (§14.6 Counting).
  Status RecordRebalance(int64_t now_ms = kNoTimestamp, const CommitWait& wait = {});

  // §14.5 lock files. A member holds group.lock shared for its life.
  Result<FileLock> LockGroup(LockMode mode, LockWait wait) const;
  // members/<member>.lock (member: R12), created on first use; the member
  // holds it exclusively for its life. IsMemberAlive probes it.
  Result<FileLock> LockMember(std::string_view member_id, LockWait wait) const;
  Result<bool> IsMemberAlive(std::string_view member_id) const;
  // Ids of every members/<member>.lock file (live or not), sorted; entries
  // that are not `<R12 name>.lock` files are ignored.
  Result<std::vector<std::string>> ListMemberFiles() const;
  // Removes members/<member>.lock if its member is dead: takes it
  // exclusively without blocking and unlinks it while holding it, so a
  // member starting under that id re-creates its file (FileLock::Acquire).
  // True if removed; false if it is held (alive, or being probed) or gone.
  Result<bool> RemoveDeadMember(std::string_view member_id) const;
  // The static members that are not running but are members still at
  // `now_ms` (kNoTimestamp: the clock's; §14.6): the ids of members/ whose
  // lock file is free (probed shared without blocking, R33) and whose lease
  // holds (LeaseHolds; one that breaks R65 is none, as for a member).
  // Sorted by id. A member holding its lock file (running, or restarting)
  // is not one of them.
  Result<std::vector<AbsentMember>> AbsentMembers(int64_t now_ms = kNoTimestamp) const;
  // Ok unless an absent static member's session holds (AbsentMembers):
  // then kBusy (exit 75, "live members") naming each such member, its lease
  // and when its session ends. A reset or delete of the group, which takes
  // group.lock from the running members, also waits for these (§14.4).
  // With `topic`, only the absent members that read it (AbsentMember::
  // Reads: an unknown subscription reads every topic) count, as Kafka
  // refuses an offset delete only for a topic the group is subscribed to;
  // none reads a topic removed from the data directory (no
  // topics/<topic>.conf): a restarted member cannot read it.
  Status CheckNoAbsentMembers(int64_t now_ms = kNoTimestamp,
                              std::optional<std::string_view> topic = std::nullopt) const;
  // Removes a member that is not running from the group (§14.6, as Kafka's
  // RemoveMembersFromGroup removes a static member): its lease, then its
  // lock file, taken exclusively as RemoveDeadMember does, whether its
  // session holds or not. The running members' next polls reassign its
  // partitions. kBusy (exit 75) while its lock is held (it is running);
  // kNotFound when there is no members/<member>.lock.
  Status RemoveMember(std::string_view member_id) const;
  // partitions/<topic> (§14.5): opened read-write and created (mode 0640)
  // when missing with `create` (a partitions/<topic>/ directory of lock
  // files left by an earlier mq is removed first, or kBusy, exit 75, while
  // one of its locks is held); read-only without (kNotFound when missing).
  Result<FileLock> OpenOwnership(std::string_view topic, bool create) const;

 private:
  Status Update(const std::function<Status(GroupOffsets*)>& change,
                CommitSync sync = CommitSync::kDurable, const CommitWait& wait = {});
  // commit.lock, exclusively (R32): blocking without `wait`; with it,
  // tried without blocking every few ms, and `wait` called between tries
  // about every kCommitWaitCallMs.
  Result<FileLock> LockCommit(const CommitWait& wait) const;

  std::string name_;
  std::string data_dir_;
  std::string path_;
  UniqueFd dir_;
  FileSystem* fs_ = nullptr;
};

// One member's ownership of partitions of one topic (§14.5, R33): byte-range
// locks on partitions/<topic>, every partition behind one descriptor.
class Ownership {
 public:
  // Opens (creating it) `topic`'s ownership file of `group`
  // (Group::OpenOwnership).
  static Result<Ownership> Open(const Group& group, std::string_view topic);

  // Takes partition `p`'s ownership byte exclusively without blocking and
  // writes `member_id` into its slot: true when owned (now or already);
  // false while another member owns it or a handler of an earlier owner
  // still runs (its handler byte is held; the ownership byte is let go).
  Result<bool> TryOwn(int32_t p, std::string_view member_id);
  // Lets go of `p` (its owner committed its offset first). An error leaves
  // it owned: the caller exits, which lets go of everything.
  Status Disown(int32_t p);
  bool owns(int32_t p) const;
  // Owned partitions, ascending.
  std::vector<int32_t> owned() const;

  // For one handler run of owned partition `p`: a new open file description
  // of the file with `p`'s handler byte held shared (runs never refuse each
  // other). The handler inherits its descriptor, so an owner that dies
  // leaves the partition to the next one only once the handler (and every
  // process it passed the descriptor to) is gone too; the lock is shared
  // with children (FileLock::ShareWithChildren), so closing the caller's
  // copy does not release it. Safe to call from any thread, while TryOwn
  // and Disown run on another.
  Result<FileLock> LockForHandler(int32_t p) const;

  const std::string& path() const { return file_.path(); }

 private:
  Ownership() = default;

  std::string topic_;
  FileSystem* fs_ = nullptr;
  UniqueFd partitions_;  // partitions/, where LockForHandler opens the file
  FileLock file_;
  uint64_t dev_ = 0, ino_ = 0;  // the file's, for LockForHandler's check
  std::set<int32_t> owned_;
};

// Group names with a directory under `<dir>/groups/`, sorted; entries that
// are not valid names (R12) or not directories are ignored.
Result<std::vector<std::string>> ListGroups(const std::string& data_dir);
// Removes a group with no live member: takes group.lock exclusively without
// blocking (kBusy otherwise; also while an absent static member's session
// holds, CheckNoAbsentMembers), renames the directory out of the namespace,
// then removes it (§14.4). kNotFound if there is no such group.
Status DeleteGroup(const std::string& data_dir, std::string_view name);

}  // namespace mq
