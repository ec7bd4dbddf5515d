// Replication of one partition (format-spec/replication.md §17): followers
// pull from the leader, as in Kafka.
//
// The logic is written against four seams, so that the simulator runs it on
// replicas held in memory, a transport that loses and reorders fetches and
// a clock it controls, and mq-replicate runs it on log roots:
//   ReplicaLog    one replica's log of the partition (its LEO, epochs, HW,
//                 appends, truncation) and, at a leader, the fetch
//                 positions its followers reported;
//   LeaderLink    how a follower reaches its leader (one host: a direct
//                 call into the leader's ReplicaLog);
//   ClusterStore  the authoritative cluster state (mq/cluster.h);
//   Clock         wall-clock milliseconds.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mq/boot_id.h"
#include "mq/cluster.h"
#include "mq/partition.h"
#include "mq/replica_checkpoint.h"
#include "mq/status.h"

namespace mq {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() = 0;
  static Clock* Real();  // CLOCK_REALTIME
};

// What a leader knows of one follower (Kafka's Replica state): kept in the
// leader's partition directory (§17.2), in memory in the simulator.
struct FollowerPosition {
  int32_t replica = -1;
  int32_t leader_epoch = -1;    // the leader's epoch when it was recorded
  int64_t log_end_offset = -1;  // the follower's LEO after its last fetch
  int64_t last_fetch_ms = 0;
  int64_t last_caught_up_ms = 0;       // last time its LEO reached the leader's
  int64_t last_fetch_leader_leo = -1;  // the leader's LEO at its last fetch
  bool operator==(const FollowerPosition&) const = default;
};

// Parses a leader's `replica-positions` file (§17.2, R47: the checkpoint
// layout of R35, six numbers per entry); `file` names it in errors.
Result<std::vector<FollowerPosition>> DecodeReplicaPositions(std::string_view bytes,
                                                             const std::string& file);
std::string EncodeReplicaPositions(const std::vector<FollowerPosition>& positions);
// The leader's `fetch-positions` file (§17.2, R60), where it keeps the
// positions (R47's entries) without a rename at each fetch: two copies of
// the table, each replaced in place, the other left whole; the copy with a
// matching checksum and the higher sequence is current.
struct FetchPositions {
  std::vector<FollowerPosition> positions;
  uint64_t sequence = 0;  // of the current copy; 0: an empty file
  int copy = -1;          // the current copy, 0 or 1; -1: none
};
// Decodes the whole file (`file` names it in errors): 0 bytes is no
// positions; anything that breaks R60 is corruption naming the byte
// position. A copy whose checksum does not match is one a writer did not
// finish (a crash, or a write under way during the read): the other is
// taken. Neither matching is a breach too, which a reader without the
// leader lock reads again before it reports (ReadReplicaPositions).
Result<FetchPositions> DecodeFetchPositions(std::span<const std::byte> bytes,
                                            const std::string& file);
// One copy of R60 holding `positions` with `sequence` (kInvalidArgument past
// format's 50 entries or outside their ranges).
Result<std::vector<std::byte>> EncodeFetchPositionsCopy(
    const std::vector<FollowerPosition>& positions, uint64_t sequence);
// Replaces the entry of `position.replica` (R47: one per replica), or adds it.
void UpsertPosition(std::vector<FollowerPosition>* positions, const FollowerPosition& position);

// The last time `replica` was caught up with `leader` in `epoch`, as the ISR
// rule counts it (§17.5): its entry of that epoch in `positions`, else (it
// did not fetch in that epoch) when the leader began leading in it (the
// leader's own entry); nullopt when `positions` holds neither.
std::optional<int64_t> LastCaughtUpMs(const std::vector<FollowerPosition>& positions,
                                      int32_t replica, int32_t leader, int32_t epoch);

// How far one replica of a partition is behind its leader (Kafka's
// ReplicaLag; what `mq-isr describe` shows). -1: unknown.
struct ReplicaLag {
  int64_t offsets = -1;            // the leader's LEO minus the replica's, at least 0
  int64_t last_caught_up_ms = -1;  // LastCaughtUpMs (-1 for the leader itself)
  int64_t ms = -1;                 // now - last_caught_up_ms, at least 0; 0 for the leader
  int64_t last_fetch_ms = -1;      // its last fetch in `epoch` as the leader recorded it
  bool operator==(const ReplicaLag&) const = default;
};
// `replica`'s lag behind `leader` of `epoch` at `now_ms`, from the two log
// ends (-1: unknown) and the leader's `positions` (R47). The time lag is
// the one the ISR rule compares with replica.lag.time.max.ms: a follower
// leaves the ISR when it exceeds it.
ReplicaLag LagOf(int32_t replica, int32_t leader, int32_t epoch, int64_t leader_log_end,
                 int64_t replica_log_end, const std::vector<FollowerPosition>& positions,
                 int64_t now_ms);

// The positions the leader of the partition directory `dir` keeps (R47,
// in `fetch-positions`, R60), read without opening the log: empty when
// there is no file. These free functions take the FileSystem seam their
// I/O goes through (nullptr: the real file system), as LogConfig::fs.
Result<std::vector<FollowerPosition>> ReadReplicaPositions(const std::string& dir,
                                                           FileSystem* fs = nullptr);

// A follower that stopped on an error it does not wait out
// (FollowerRetries false), as its partition directory records it in
// `follower-stopped` (§17.7, R58) until a follower of that log runs a
// round again.
struct FollowerStop {
  int64_t stopped_ms = 0;   // when
  int32_t exit_status = 0;  // the exit status it stopped with (sysexits)
  bool operator==(const FollowerStop&) const = default;
};
Result<FollowerStop> DecodeFollowerStop(std::string_view bytes, const std::string& file);
std::string EncodeFollowerStop(const FollowerStop& stop);
// Stores `stop` in the partition directory `dir`, fsynced (R39).
Status RecordFollowerStop(const std::string& dir, const FollowerStop& stop,
                          FileSystem* fs = nullptr);
// What `dir` records; nullopt when no follower stopped there.
Result<std::optional<FollowerStop>> ReadFollowerStop(const std::string& dir,
                                                     FileSystem* fs = nullptr);
// Removes the record (a follower runs again); no file is no error.
Status ClearFollowerStop(const std::string& dir, FileSystem* fs = nullptr);

// BootId (segment.md §9.7): mq/boot_id.h.

// A replica's claim on a leader epoch (§17.9, R53): it began leading in
// `epoch` on the boot `boot`. Epoch -1: no claim (no file).
struct LeaderClaim {
  int32_t epoch = -1;
  BootId boot{};
  bool operator==(const LeaderClaim&) const = default;
};

// Parses a `leader-claim` file (R53: the checkpoint layout of R35, one
// entry `epoch bootId`); `file` names it in errors.
Result<LeaderClaim> DecodeLeaderClaim(std::string_view bytes, const std::string& file);
std::string EncodeLeaderClaim(const LeaderClaim& claim);

// Batches left where they are stored: `size` bytes at `position` of the
// open descriptor `fd` (a segment file). A server writes them to its peer
// from there (sendfile(2), no copy through its memory).
struct FileBytes {
  int fd = -1;
  uint64_t position = 0;
  size_t size = 0;
};

// One replica's log of the partition.
class ReplicaLog {
 public:
  virtual ~ReplicaLog() = default;
  virtual int32_t replica_id() const = 0;
  virtual Result<int64_t> LogStartOffset() = 0;
  virtual Result<int64_t> LogEndOffset() = 0;
  // -1 when none is stored.
  virtual Result<int64_t> HighWatermark() = 0;
  // Only moves forward, never past the LEO.
  virtual Status SetHighWatermark(int64_t offset) = 0;
  // The latest leader epoch the log holds (-1: none).
  virtual Result<int32_t> LatestEpoch() = 0;
  // OffsetForLeaderEpoch against this log (LeaderEpochCache::EndOffsetFor).
  virtual Result<EpochEndOffset> EndOffsetFor(int32_t epoch) = 0;
  // Whole batches starting with the one holding `offset`, up to `max_bytes`
  // (at least one batch, whatever its size), none past the log end, into
  // `out` (cleared first; its capacity is reused from read to read). With
  // `crc`, also the CRC-32C of `out`, made from each batch's own CRC as the
  // read checked it (R4) and its first 21 bytes, not from another pass.
  virtual Status Read(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
                      uint32_t* crc = nullptr) = 0;
  // Reads ahead what a Read asking for what follows the last one (from the
  // offset after its last batch, the same max_bytes) returns, into `into`
  // (a buffer whose bytes the caller is done with: the last reply was
  // sent), while the caller waits for that request (a leader's server
  // while its follower appends). A Read given the same `into`, unchanged
  // since, keeps the prepared bytes only when they are what it would read
  // then: the same request, and the log not rewritten (truncated,
  // recovered) since; otherwise it reads. A failure only loses the
  // preparation.
  virtual void ReadAhead(std::vector<std::byte>* into) { (void)into; }
  // Read, with the batches left in their segment file when they lie in
  // one (checked as Read checks them, R4): then `*file` names them there
  // (its descriptor open until the next call) and `out` is left empty. A
  // read stops at a segment's end. Otherwise, as Read into `out`, `*file`
  // empty. ReadAhead after it prepares the next read the same way.
  virtual Status ReadInPlace(int64_t offset, size_t max_bytes, std::vector<std::byte>* out,
                             uint32_t* crc, FileBytes* file) {
    *file = {};
    return Read(offset, max_bytes, out, crc);
  }
  // A follower's append of its leader's batches (R1-R7 checked first).
  // `crc_check` kAlreadyComputed: each batch's CRC (R4) was computed over
  // these very bytes and matched already (FetchResponse::batches_checked).
  virtual Result<AppendResult> AppendReplicated(std::span<const std::byte> batches,
                                                CrcCheck crc_check = CrcCheck::kVerify) = 0;
  // `leader_epoch` ≥ 0: a follower's truncation, decided against the
  // leader of that epoch; kFenced, nothing cut, when the log has moved to
  // a newer epoch since (PartitionWriter::TruncateTo).
  virtual Status TruncateTo(int64_t offset, int32_t leader_epoch = -1) = 0;
  // Retention at the leader moved its log start: delete below it. The log
  // start becomes `offset` itself (R92). Past the log end (a follower
  // behind its leader's log start), the log is emptied and starts over at
  // `offset`: its start and end.
  virtual Status DeleteBefore(int64_t offset) = 0;
  // Becomes leader in `epoch`: the epoch starts at the log end.
  virtual Status BeginEpoch(int32_t epoch) = 0;
  // Starts `epoch` at the log end unless the log holds it (or a later
  // one) already: what a leader does the first time a replication call
  // meets its epoch (§17.7). A log may skip the look once it saw it held:
  // only a cut of the log (a follower's truncation, in a later epoch) takes
  // an epoch out of it again.
  virtual Status EnsureEpoch(int32_t epoch) {
    auto latest = LatestEpoch();
    if (!latest) return latest.error();
    if (*latest >= epoch) return Status::Ok();
    return BeginEpoch(epoch);
  }
  // Follows the leader of `epoch` (R56): no writer of an older epoch
  // appends to this log after this returns (durable, under the log's
  // writer lock; PartitionWriter::FenceEpochsBelow).
  virtual Status FenceEpochsBelow(int32_t epoch) = 0;
  // At a leader: its followers' positions (the leader's own entry records
  // when it began its epoch).
  virtual Status RecordFollower(const FollowerPosition& position) = 0;
  virtual Result<std::vector<FollowerPosition>> Followers() = 0;
  // Stores `all`: what Followers() returned under the leader lock, still
  // held, with entries changed or added (UpsertPosition). The same as a
  // RecordFollower of each, which is what this does unless a log stores
  // them at once.
  virtual Status RecordFollowers(const std::vector<FollowerPosition>& all) {
    for (const FollowerPosition& f : all) MQ_RETURN_IF_ERROR(RecordFollower(f));
    return Status::Ok();
  }
  // The replica's claim on a leader epoch (R53); epoch -1 when it has none.
  // May be what this process read or stored before (claims only move
  // forward: it is never newer than the file).
  virtual Result<LeaderClaim> LoadLeaderClaim() = 0;
  // The claim as the file holds it now (read again). Called under the
  // leader lock, where claims are decided and stored (R54).
  virtual Result<LeaderClaim> ReadLeaderClaim() = 0;
  // Replaces the claim; durable (fsynced) before it returns.
  virtual Status StoreLeaderClaim(const LeaderClaim& claim) = 0;
  // The boot the replica's process runs on (all zeros: unknown).
  virtual BootId RunningBoot() = 0;
  // Runs `fn` holding the leader's replication lock: the HW is computed and
  // the ISR expanded under it, so that no HW passes a follower between the
  // check that lets it join the ISR and its joining (§17.4).
  virtual Status WithLeaderLock(const std::function<Status()>& fn) = 0;
  // The same without waiting: kBusy while another holds it (a stalled
  // process must not stall a producer past its ack timeout).
  virtual Status TryWithLeaderLock(const std::function<Status()>& fn) { return WithLeaderLock(fn); }
};

// The fetch a follower sends (Kafka's FetchRequest, one partition).
struct FetchRequest {
  int32_t replica = -1;
  int32_t leader_epoch = -1;  // the epoch the follower believes current
  int64_t fetch_offset = 0;   // the follower's LEO
  size_t max_bytes = 1 << 20;
  // A fetch ahead (protocol.md R62): the follower's LEO, below
  // fetch_offset, where it has not yet appended the batches before
  // fetch_offset it holds in a response. The leader counts this as its
  // position (-1: fetch_offset is).
  int64_t held_offset = -1;
  int64_t held() const { return held_offset >= 0 ? held_offset : fetch_offset; }
};
struct FetchResponse {
  std::vector<std::byte> batches;
  // When not empty, the batches instead: bytes the responder keeps (a wire
  // link's receive buffer, a server's read buffer), valid until its next
  // call. `batches` is then empty.
  std::span<const std::byte> borrowed;
  std::span<const std::byte> data() const {
    return borrowed.empty() ? std::span<const std::byte>(batches) : borrowed;
  }
  // When its size is not 0, the batches instead, in the responder's
  // segment file (HandleFetch with `in_place`): valid until its next call;
  // `batches` and `borrowed` are then empty.
  FileBytes file;
  // The CRC-32C of data() when the responder has it without a pass over
  // the bytes (ReplicaLog::Read's `crc`): a server's frame CRC (R48) then
  // continues from it.
  std::optional<uint32_t> crc;
  // Each batch's CRC (R4) was computed over the very bytes of data() and
  // matched, in the pass that checked the frame that brought them (a wire
  // link, R48): the follower's append does not compute it again.
  bool batches_checked = false;
  int64_t high_watermark = -1;
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int32_t leader_epoch = -1;  // the leader's current epoch
};

// How a follower reaches its leader.
class LeaderLink {
 public:
  virtual ~LeaderLink() = default;
  // kFenced when `leader_epoch` is not the leader's current epoch.
  virtual Result<EpochEndOffset> OffsetForLeaderEpoch(int32_t leader_epoch,
                                                      int32_t requested_epoch) = 0;
  // kFenced as above; kOutOfOrder when fetch_offset is past the leader's
  // LEO (truncate); below its log start: the log from its start (R92).
  // The response may borrow its batches from the link (valid until its
  // next call).
  virtual Result<FetchResponse> Fetch(const FetchRequest& request) = 0;
  // R98: tells the leader the follower's log end (request.fetch_offset,
  // just appended) without fetching: the leader records it and moves its
  // HW as a fetch at that offset would (HandleReport), and answers with
  // its HW, log start and LEO, no batches. nullopt when the link has no
  // such call, or sees without asking that the leader's log already ends
  // past that offset (DirectLeaderLink: the leader's state file): the
  // follower then fetches again at once, which tells it.
  virtual Result<std::optional<FetchResponse>> Report(const FetchRequest& request) {
    (void)request;
    return std::optional<FetchResponse>();
  }
};

struct ReplicationContext {
  ClusterStore* cluster = nullptr;
  Clock* clock = nullptr;
  std::string topic;
  int32_t partition = 0;
  // When set: the cluster state a caller loaded once for many partitions
  // (mq-isr --check), which the calls decide from instead of loading it
  // again. Every change is still a compare-and-swap on the partition epoch:
  // a decision on a state that moved meanwhile fails kFenced.
  const ClusterState* loaded = nullptr;
};

// R54, R55 (§17.9): before replica `leader` acts as the leader that `p`
// names (it appends, begins its epoch, answers a fetch or changes the ISR),
// it holds a claim on p.leader_epoch taken on the running boot. A claim on
// an older epoch is replaced by one on p's (stored durably first). A claim
// on p's epoch from another boot (the host restarted: its log may have
// lost what followers hold) gives the epoch up through AlterPartition: as
// the ISR's only member it leads on in the next epoch (returned, claimed);
// otherwise it leaves the ISR with no leader in the next epoch, and the
// call fails kUnavailable (run `mq-isr elect`). kFenced when a later epoch
// is claimed, or when the CAS lost; kUnavailable when the boot is unknown.
Result<PartitionState> ClaimLeadership(const ReplicationContext& ctx, ReplicaLog& leader,
                                       const PartitionState& p);

// R55 at an election (mq-isr elect, for a replica of this host): true when
// the claim in `partition_dir` is of another boot than the running one:
// the replica restarted since it last claimed an epoch and has not given
// it up yet, so it may hold less than the ISR acknowledged. False without
// a claim.
Result<bool> RestartedSinceClaim(const std::string& partition_dir, FileSystem* fs = nullptr);

// The leader's side of a fetch (Kafka's ReplicaManager.fetchMessages for a
// follower): checks the epoch, reads, records the follower's position,
// advances the HW and expands the ISR when the follower caught up. With
// `buffer`, the batches are read into it (its capacity reused from fetch to
// fetch) and the response borrows them; with `in_place` as well, batches
// that lie in one segment file are left there (FetchResponse::file,
// ReplicaLog::ReadInPlace): for a server that writes them to its peer.
Result<FetchResponse> HandleFetch(const ReplicationContext& ctx, ReplicaLog& leader,
                                  const FetchRequest& request,
                                  std::vector<std::byte>* buffer = nullptr, bool in_place = false);
// R98: the leader's side of LeaderLink::Report: HandleFetch without the
// batches. The partition's state is read under the leader lock, as
// UpdateHighWatermark reads it, so the HW is computed on the ISR as it is
// when it moves.
Result<FetchResponse> HandleReport(const ReplicationContext& ctx, ReplicaLog& leader,
                                   const FetchRequest& request);
Result<EpochEndOffset> HandleOffsetForLeaderEpoch(const ReplicationContext& ctx, ReplicaLog& leader,
                                                  int32_t leader_epoch, int32_t requested_epoch);

// HW = min LEO over the ISR (the leader's own included, followers' as
// recorded in this epoch), computed and stored under the leader's lock
// (ReplicaLog::WithLeaderLock), after a read of the cluster state that
// still names this replica leader in the epoch it believes (else
// kFenced; a cluster state that cannot be read fails the call, kUnavailable
// across hosts). Returns the HW now stored.
// With `wait` false, kBusy instead of waiting for the leader lock.
// `seen`, when given, receives the partition's state the HW was computed
// under (an acks=all wait checks min.insync.replicas against it).
Result<int64_t> UpdateHighWatermark(const ReplicationContext& ctx, ReplicaLog& leader,
                                    int32_t leader_epoch, bool wait = true,
                                    PartitionState* seen = nullptr);

// Kafka's maybeShrinkIsr: removes from the ISR every follower not caught
// up for replica.lag.time.max.ms, and at once each of `stopped` (followers
// known to have stopped following, R58), through AlterPartition. Returns
// the state after (unchanged when nobody lagged, or when another process
// holds the leader lock: the rule is applied again at the next call).
Result<PartitionState> MaybeShrinkIsr(const ReplicationContext& ctx, ReplicaLog& leader,
                                      int32_t leader_epoch,
                                      const std::vector<int32_t>& stopped = {});

// R58: a follower that stops where it cannot leave `follower-stopped`
// (its partition directory cannot be opened or locked, or the record
// cannot be written) leaves the ISR itself at once, through
// AlterPartition (a compare-and-swap on the partition epoch, decided again
// when it moved), the reason naming `why`; --check then reports the
// partition at once (under-replicated). The leader, and a replica already
// out of the ISR, change nothing. Returns the state after.
Result<PartitionState> LeaveIsrStopped(ClusterStore& store, const std::string& topic,
                                       int32_t partition, int32_t replica, const Status& why);

// One follower's state across steps (Kafka's PartitionFetchState).
struct FollowerState {
  int32_t leader_epoch = -1;  // the epoch its log was reconciled with
  bool truncated = false;     // epoch truncation done for leader_epoch
  // The high watermark FollowerStep last stored in the follower's log
  // since its last truncation (-1: none): a fetch that brings no higher one
  // stores nothing.
  int64_t high_watermark = -1;
};

struct FollowerStepResult {
  int64_t appended_bytes = 0;
  int64_t appended_records = 0;
  int64_t truncated_to = -1;  // >= 0: the log was cut there
  // R92: >= 0: the follower's log ended below the leader's log start
  // (retention deleted what it lacked): it was emptied and starts over at
  // this offset (the leader's first batch), from `behind_at` (its old end).
  int64_t started_over_at = -1;
  int64_t behind_at = -1;
  bool caught_up = false;  // LEO reached the leader's LEO
  // The leader learnt the LEO this step appended up to (R98: a report
  // after the append), so no fetch is needed to tell it.
  bool reported = false;
};

// One fetch round of a follower: reads the cluster state; at a new leader
// epoch, fences the older epochs' writers out of its log (R56), then asks
// the leader where its own latest epoch ends and truncates there (KIP-101,
// KIP-279); fetches from its LEO; appends the leader's
// batches verbatim; follows the leader's log start; sets its HW to
// min(leader HW, own LEO). After a fetch whose batches caught it up, the
// new LEO is told to the leader first (§17.3, R98): through the link's
// Report when it has one (then `reported`), the HW set from its answer;
// otherwise the next step's fetch, made at once, tells it, and the HW is
// left to that step. kFenced when the cluster state moved meanwhile (the
// caller simply steps again). `current`: the partition's state when the
// caller has just read it (this round), so that it is not read twice.
Result<FollowerStepResult> FollowerStep(const ReplicationContext& ctx, ReplicaLog& follower,
                                        LeaderLink& leader, FollowerState& state,
                                        size_t max_bytes = 1 << 20,
                                        const PartitionState* current = nullptr);

// Whether a follower waits out `s`, met in a round of a partition (its
// fetch, what follows the leader besides the log, the ISR rule), and tries
// the partition again (`mq-replicate --follow`: every 200 ms, the cluster
// state read again) rather than stops: the leadership moved (kFenced); no
// leader, or the leader or the cluster state cannot be reached or used
// (kUnavailable); a root or partition that is not there (kNotFound: a
// leader's root moved away or not attached yet); a fetch position outside
// the leader's log (kOutOfOrder: the next round reconciles). One rule
// whether the leader is on this host (its root read directly) or on
// another (its server's Error reply carries the same status,
// format-spec/protocol.md §19.3).
bool FollowerRetries(const Status& s);

// A follower that keeps following (`mq-replicate --follow`) and met an
// error FollowerRetries does not wait out starts the partition again after
// this many milliseconds, `failures` being how many of its starts in a row
// failed so (from 1): 200 ms, doubling, at most 30 s; an error that clears
// costs the partition at most that long once it is gone.
int64_t FollowerRestartDelayMs(int failures);

// How long a follower waits before it looks again at a partition after an
// error it waits out (FollowerRetries), or for a cluster state it cannot
// reach yet (kUnavailable) before its first round.
inline constexpr int64_t kFollowerRetryMs = 200;

// A catch-up (fetches until one brings nothing new) fetches again after
// `s` when the leadership moved under the fetch (kFenced), up to 100
// fetches so fenced in a row; `fenced` counts them, this one included.
bool FollowerFetchesAgain(const Status& s, int fenced);

// Whether a follower's next step fetches on the cluster state its last step
// loaded, without loading it again (a round trip to the controller when
// that is on another host): only from a leader on another host, which
// decides each fetch on a state it loads itself (HandleFetch: it leads in
// the epoch the fetch carries, the follower is a replica), so a step on a
// state since changed is refused (kFenced) and the next loads again; only
// while the follower catches up (`last`, its last step, appended batches
// and did not reach the leader's log end); and only for
// kFollowerStateReuseMs after the state was loaded (`loaded_ms`), so the
// follower sees a change the leader does not check for within that time.
// A leader on this host answers on the follower's state (DirectLeaderLink
// with ReplicationContext::loaded): it loads at every step.
bool FollowerReusesState(bool remote_leader, const FollowerStepResult& last, int64_t loaded_ms,
                         int64_t now_ms);
inline constexpr int64_t kFollowerStateReuseMs = 1000;

// A follower records that it stopped (follower-stopped, R58) or leaves the
// ISR for `s`, the error its round ended with, unless that is OK or an
// error it waits out (FollowerRetries); `lock_busy`: another follower of
// the partition holds replicate.lock (that one records, not this).
bool FollowerRecordsStop(const Status& s, bool lock_busy);

// When a partition a follower keeps following is started again after an
// error FollowerRetries does not wait out: counts its failed starts in a
// row, a start that ran at least the longest delay counting as the first
// failure again.
class FollowerRestarts {
 public:
  // A start failed after it ran `ran_ms` (0: not measured). Returns the
  // delay before the next start (FollowerRestartDelayMs).
  int64_t Failed(int64_t ran_ms = 0);
  // A start ended without error (or was stopped).
  void Succeeded() { failures_ = 0; }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

}  // namespace mq

namespace mq {

// mq-replicate --repair of a follower's log at `dir`: the damage
// FindLogDamage finds, cut away with a truncation to where the valid
// batches before it end (crash-safe, R40), so that the follower fetches the
// rest from its leader again. Only for a replica that does not lead: the
// caller checks that another replica leads. nullopt: nothing damaged.
Result<std::optional<LogDamage>> RepairFollowerLog(const std::string& dir, const LogConfig& config);

// One host (§17.2): replica `replica_id`'s log of the partition is the
// partition directory `dir` of its log root; the followers' positions are
// files there. `config` as for PartitionWriter::Open.
Result<std::unique_ptr<ReplicaLog>> OpenReplicaLog(const std::string& dir, int32_t replica_id,
                                                   const LogConfig& config);
// One host: a follower reaches its leader by reading the leader's log root
// itself; the leader's side of each call runs in the follower's process.
std::unique_ptr<LeaderLink> DirectLeaderLink(const ReplicationContext& ctx, ReplicaLog* leader);

}  // namespace mq
