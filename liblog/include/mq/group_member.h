// A consumer-group member without a coordinator (format-spec/group.md
// §14.6): membership and partition ownership are kernel locks on the
// group's files (§14.5, R33); the partitions a member should own are a
// function of the sorted ids of the live members (mq/assignment.h), so
// every member computes the same assignment on its own.
//
// A member's loop: Join, then every poll interval Poll(); for each
// partition in `release`, stop handing out its messages, commit its offset
// and Release it; for each in `acquire`, TryAcquire it (it may still be
// held by its previous owner, who lets go once it has seen the same
// change), read its committed offset, and start reading there. A member
// that dies loses every lock at once, so its partitions are taken over at
// the other members' next poll.
#pragma once

#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/assignment.h"
#include "mq/group.h"
#include "mq/lock.h"
#include "mq/member_heartbeat.h"
#include "mq/member_note.h"
#include "mq/status.h"

namespace mq {

// `<host>-<pid>-<8 hex digits>`, the host name cut to what R12 allows
// (other characters become '_'): unique among live members of a host.
std::string DefaultMemberId();

// At most once (format-spec/group.md §14.3, R31's hand-back exception): a
// member commits offsets before it hands out the messages below them (R67:
// past its output buffer before writing it, or past a batch before its
// handlers run; `committed`: the offset it committed), so a crash loses
// what it had not handed out yet. When it lets go of the partition without
// a crash (a rebalance, or a clean stop: -c, -e, end of output, SIGINT,
// SIGTERM), every message below `handed_out` was handed out (printed, or
// its handler started) and none at or above it: those are handed back to
// the partition's next owner by this commit, which lowers the committed
// offset to `handed_out` and is accepted only while the committed offset
// is still `committed` (its lower_from). `leader_epoch`: of the record at
// handed_out - 1 (-1: not known). nullopt when there is nothing to hand
// back (`committed` is -1, none, or not above `handed_out`).
std::optional<OffsetCommit> HandBackCommit(std::string_view topic, int32_t partition,
                                           int64_t committed, int64_t handed_out,
                                           int32_t leader_epoch);

// R72 (format-spec/group.md §14.3): how far a member may hand over (commit)
// partition messages given to one handler run, a unit (one message, or a
// --batch) whose offsets run from its first to `last_offset`, once the unit
// ended. `handled`: it was handled whole (its handler exited 0, or every
// message of it was dead-lettered): one past `last_offset`. Otherwise a
// batch whose handler failed is split and its messages handled alone, one
// after another in offset order; a stop or a revoke may cut the split
// short: `handled_alone_end` is one past the last message handled alone
// (-1: none), every message of the unit below it handled, none at or past
// it; that is the position. A unit cut short before any message of it was
// handled: nullopt (nothing of it may be committed; its next owner runs it
// again). Never past one past `last_offset`.
std::optional<int64_t> UnitHandledEnd(int64_t last_offset, bool handled, int64_t handled_alone_end);

// At most once, printing (format-spec/group.md R67): before a member writes
// its output buffer, partition `partition`'s entry in the one commit that
// covers the buffer: its offset moves to `position`, the member's reading
// position (every message below it is in the buffer or was written
// before), with `leader_epoch` (of the record at position - 1; -1: not
// known) and `lower_from` (R31's exception for a committed offset found
// past the log end; -1: none). nullopt when `position` is not past
// `committed` (-1: none): nothing of the partition is in the buffer that
// is not committed already.
std::optional<OffsetCommit> OutputAheadCommit(std::string_view topic, int32_t partition,
                                              int64_t committed, int64_t position,
                                              int32_t leader_epoch, int64_t lower_from = -1);

// What a member knows of an owned partition's offsets: the group's
// committed offset (-1: none), the position up to which messages were
// handed over (printed, acknowledged or handled; -1: none) with the leader
// epoch of the record before it, at most once the offset committed ahead
// of the output with its epoch (-1: none), and the committed offset a
// commit may still lower (R31's exception; -1: none).
struct PartitionOffsets {
  int64_t committed = -1;
  int64_t handed = -1;
  int32_t epoch = -1;
  int64_t ahead = -1;
  int32_t ahead_epoch = -1;
  int64_t lower_from = -1;
};

// The partition's reader found records it had handed out cut from the log
// at `cut` (ConsumerNotice::kTruncated, a live truncation; format-spec/
// group.md §14.3): what is at `cut` and after it now are other records,
// none of them handed over yet. The handed-over and committed-ahead
// positions go down to `cut` (their epochs unknown: -1), and a committed
// offset above it is marked to be lowered there by the next commit
// (`lower_from` keeps the offset stored, as a member that finds the
// committed offset past the log end at take-over does), so that neither
// a commit due at the cut nor at most once's next commit ahead stores the
// old offset over records it never handed out. Nothing changes for a cut
// at or above them.
void LowerToCut(int64_t cut, PartitionOffsets* offsets);

struct MembershipView {
  // Live member ids, sorted; this member included. A live member whose note
  // is not complete yet (it is joining) is left out until a later Poll
  // reads it.
  std::vector<std::string> members;
  // Of `members`, the static members that are not running (stopped, dead,
  // or restarting) and whose session has not ended (their lease, R65): their
  // partitions stay assigned to them, and nobody else takes them.
  std::vector<std::string> absent;
  // Per topic this member reads, in the order of topics(): the members
  // that read it (their notes say so, or name no topics; this member
  // included), among which its partitions are assigned, and what this
  // member should own of it, release and acquire.
  struct Topic {
    std::string topic;
    std::vector<std::string> subscribers;
    std::vector<int32_t> target;   // partitions this member should own, ascending
    std::vector<int32_t> release;  // owned, no longer in target
    std::vector<int32_t> acquire;  // in target, not owned yet
  };
  std::vector<Topic> topics;
  // The first topic's (topics[0]), for a member of one topic.
  std::vector<std::string> subscribers;
  std::vector<int32_t> target;
  std::vector<int32_t> release;
  std::vector<int32_t> acquire;
  // The members or their subscriptions differ from the previous Poll.
  bool changed = false;
  int64_t removed_dead = 0;  // dead members' lock files removed by this Poll
  // Stuck members this Poll fenced (R69: killed, or found stuck and not
  // allowed to kill, kDenied); each is still among `members` until a later
  // Poll finds its lock free.
  struct Fenced {
    std::string id;
    MemberHeartbeat heartbeat;
    int64_t overdue_ms = 0;  // since lastPoll + deadline
    Fence outcome = Fence::kKilled;
  };
  std::vector<Fenced> fenced;
};

class GroupMember {
 public:
  GroupMember(GroupMember&& other) noexcept { *this = std::move(other); }
  GroupMember& operator=(GroupMember&& other) noexcept;
  ~GroupMember();

  // Joins `group` (which must outlive the member) as `member_id` (R12) to
  // read `partitions` partitions of `topic`: takes group.lock shared (a
  // reset or delete in progress is waited out for up to `wait_ms`, then
  // kBusy), then members/<id>.lock exclusively (kBusy "member id in use"
  // when a live member has the id, after `wait_ms` of retries, so that a
  // probe holding it for an instant is not mistaken for a member).
  static Result<GroupMember> Join(Group* group, std::string member_id, std::string topic,
                                  int32_t partitions, int wait_ms = 2000);
  // Likewise for a member reading several topics (or none yet: a pattern
  // that matches none, R64). Topic names must be R12 and distinct.
  static Result<GroupMember> Join(Group* group, std::string member_id,
                                  std::vector<TopicPartitions> topics, int wait_ms = 2000);

  // Adds `topics` (those not read yet) to the subscription (R64: a pattern
  // matched a topic created since): rewrites the note, so that the other
  // members' next Poll assigns them among their readers, and opens their
  // ownership files. Topics already read are left as they are.
  Status Subscribe(std::span<const TopicPartitions> topics);
  // Takes `topic` out of the subscription (R64: it was removed from the
  // data directory): lets go of its owned partitions (the caller committed
  // their offsets first), closes its ownership file and rewrites the note,
  // so that the other members' next Poll no longer counts this member among
  // its readers. A topic not read is left alone.
  Status Unsubscribe(std::string_view topic);

  // Makes this member static with a session (format-spec/group.md §14.6):
  // writes its lease (R65), refreshed by every Poll once LeaseRefreshMs has
  // passed. When it stops (Leave, a crash, a kill) its partitions stay
  // assigned to it, unowned, until `session_timeout_ms` after the lease's
  // last refresh, so that a restart under its id within that time takes
  // back exactly its partitions and nothing moves. `now_ms`: kNoTimestamp,
  // the clock's time.
  Status KeepSession(int64_t session_timeout_ms, int64_t now_ms = kNoTimestamp);

  // Makes this member keep a heartbeat (format-spec/group.md R69): written
  // now, then by every Poll (and Beat) once HeartbeatRefreshMs has passed,
  // saying that it polls again within `deadline_ms` (or gives up by
  // itself). A member that does not is never fenced. `now_ms`:
  // kNoTimestamp, CLOCK_MONOTONIC's time.
  Status KeepHeartbeat(int64_t deadline_ms, int64_t now_ms = kNoTimestamp);
  // Rewrites the heartbeat when HeartbeatRefreshMs has passed since the
  // last write (a member about to start a bounded wait of its deadline
  // between two polls, such as a handler run). Nothing without
  // KeepHeartbeat.
  Status Beat(int64_t now_ms = kNoTimestamp);

  // Probes the members (removing dead members' files, unless their session
  // holds), reads the live ones' subscriptions (and absent static members'
  // in their session), recomputes the assignment of each topic among its
  // subscribers (AssignSubscription) and says what to release and acquire.
  // When the members or their subscriptions changed and this member has the
  // smallest id of the running members, the rebalance is counted in the
  // offsets file (Group::RecordRebalance) — one member counts each change;
  // a member's first Poll counts as a change. `now_ms` (kNoTimestamp: the
  // clock's) decides which sessions have ended.
  // With KeepHeartbeat, first rewrites this member's heartbeat when due;
  // then a live member of this host whose heartbeat (R69) the Polls find
  // stuck (WatchHeartbeat) is fenced (FenceStuckMember: killed), listed in
  // `fenced`. `mono_ms`
  // (kNoTimestamp: CLOCK_MONOTONIC's) is the time heartbeats are read at.
  Result<MembershipView> Poll(int64_t now_ms = kNoTimestamp, int64_t mono_ms = kNoTimestamp);

  // Takes partition `p` of `topic` (one this member reads): its ownership
  // lock without blocking: true when owned (now or already), false while
  // another member holds it or a handler of an earlier owner still runs
  // (Ownership::TryOwn).
  Result<bool> TryAcquire(std::string_view topic, int32_t p);
  // Lets go of partition `p` of `topic` (the caller committed its offset
  // first). An error leaves it owned: the caller stops, which lets go of
  // everything.
  Status Release(std::string_view topic, int32_t p);
  // Owned partitions of `topic`, ascending.
  std::vector<int32_t> owned(std::string_view topic) const;
  bool owns(std::string_view topic, int32_t p) const;
  // A lock for one handler run of owned partition `p` of `topic`, whose
  // descriptor the handler process inherits (Ownership::LockForHandler).
  // Any thread, while Subscribe does not run.
  Result<FileLock> LockForHandler(std::string_view topic, int32_t p) const;
  // The same of the first topic, for a member of one topic.
  Result<bool> TryAcquire(int32_t p) { return TryAcquire(topic(), p); }
  Status Release(int32_t p) { return Release(topic(), p); }
  std::vector<int32_t> owned() const { return owned(topic()); }
  bool owns(int32_t p) const { return owns(topic(), p); }
  Result<FileLock> LockForHandler(int32_t p) const { return LockForHandler(topic(), p); }

  // What this member does while another process holds the group's
  // commit.lock (R32, CommitWait), as one of its polls: rewrites its own
  // heartbeat when due (it waits, it is not stuck), then looks at the
  // heartbeat of every other live member as Poll does and fences one of
  // its host that is stuck (R69), so that a member stopped or hung while
  // it holds the lock is killed and the lock is free again. The members
  // fenced here are listed in the next Poll's `fenced`. kBusy
  // ("interrupted") once the flag given to InterruptWaitsOn is non-zero.
  // `mono_ms`: kNoTimestamp, CLOCK_MONOTONIC's time.
  Status WhileLockedOut(int64_t mono_ms = kNoTimestamp);
  // WhileLockedOut as the CommitWait of this member's commits (Group::
  // Commit) and rebalance counts (Poll). Valid while the member is not
  // moved.
  CommitWait LockedOutWait() {
    return [this] { return WhileLockedOut(); };
  }
  // WhileLockedOut ends the wait once `*flag` is non-zero (a signal
  // handler's flag: SIGTERM must end a member that waits for a lock).
  void InterruptWaitsOn(const volatile std::sig_atomic_t* flag) { interrupt_ = flag; }

  // Releases every partition, removes this member's lock file and leaves
  // the group. The destructor does the same. A static member with a session
  // (KeepSession) refreshes its lease instead and leaves its lock file (its
  // subscription) in place: its partitions wait for it until the session
  // ends.
  void Leave();

  const std::string& id() const { return id_; }
  // The first topic read (empty when none).
  const std::string& topic() const;
  // The topics read, sorted by name.
  const std::vector<TopicPartitions>& topics() const { return topics_; }

 private:
  GroupMember() = default;
  void WriteOwnNote() const;
  Status WriteHeartbeat(int64_t mono);
  // What a poll and WhileLockedOut begin with: Beat, the member files'
  // ids in `files`, and the members directory, opened.
  Result<UniqueFd> BeatAndList(int64_t mono, std::vector<std::string>* files);
  // R69 for live member `note.id`: a heartbeat that WatchHeartbeat finds
  // stuck fences it (listed in `fenced`); `watches` collects what this
  // Poll read of each live member's heartbeat.
  Status CheckStuck(int members_dir, const MemberNote& note, int64_t mono,
                    std::map<std::string, HeartbeatWatch, std::less<>>* watches,
                    std::vector<MembershipView::Fenced>* fenced);
  // Poll's walk over the other members' files in `members_dir` at `now`:
  // the live ones and the absent static ones in their session join `view`
  // (members, absent) and `subscriptions`; dead ones' lock files are
  // removed; stuck ones are fenced (CheckStuck).
  Status ScanMembers(int members_dir, const std::vector<std::string>& files, int64_t now,
                     int64_t mono, MembershipView* view, std::vector<Subscription>* subscriptions);

  Group* group_ = nullptr;
  std::string id_;
  std::vector<TopicPartitions> topics_;
  FileLock group_lock_;
  FileLock member_lock_;
  // Per topic, every owned partition's lock, behind one descriptor (§14.5).
  std::map<std::string, Ownership, std::less<>> ownership_;
  // What the previous Poll saw: the live members and their subscriptions.
  std::optional<std::vector<std::string>> last_members_;
  std::optional<std::vector<Subscription>> last_subscriptions_;
  // KeepSession: the session timeout (0: none) and the last lease written.
  int64_t session_timeout_ms_ = 0;
  int64_t lease_written_ms_ = 0;
  // The subscriptions read at earlier polls, for a member in its session
  // whose note cannot be read now (it is rewriting it as it restarts).
  std::map<std::string, std::optional<std::vector<std::string>>> known_topics_;
  // KeepHeartbeat: the deadline (0: none) and when the heartbeat was last
  // written (CLOCK_MONOTONIC ms).
  int64_t heartbeat_deadline_ms_ = 0;
  int64_t heartbeat_written_ms_ = 0;
  // What the Polls read of each live member's heartbeat (R69).
  std::map<std::string, HeartbeatWatch, std::less<>> watches_;
  // Members fenced with kDenied (said once).
  std::map<std::string, int64_t, std::less<>> denied_;
  // Fenced by WhileLockedOut, for the next Poll's view.
  std::vector<MembershipView::Fenced> fenced_waiting_;
  const volatile std::sig_atomic_t* interrupt_ = nullptr;
};

}  // namespace mq
