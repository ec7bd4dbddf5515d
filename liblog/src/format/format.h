// On-disk constants of mq. See ../../format-spec/README.md; every constant
// names the section that defines it, and is spelled like that section's byte
// table. This header holds constants only: no code reads or writes bytes here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mq::format {

// §3 Record batch header (RecordBatch v2, big-endian).
constexpr size_t kBaseOffsetOffset = 0;
constexpr size_t kBatchLengthOffset = 8;
constexpr size_t kPartitionLeaderEpochOffset = 12;
constexpr size_t kMagicOffset = 16;
constexpr size_t kCrcOffset = 17;
constexpr size_t kAttributesOffset = 21;
constexpr size_t kLastOffsetDeltaOffset = 23;
constexpr size_t kBaseTimestampOffset = 27;
constexpr size_t kMaxTimestampOffset = 35;
constexpr size_t kProducerIdOffset = 43;
constexpr size_t kProducerEpochOffset = 51;
constexpr size_t kBaseSequenceOffset = 53;
constexpr size_t kRecordsCountOffset = 57;
constexpr size_t kRecordsOffset = 61;

// baseOffset + batchLength: bytes that precede what batchLength counts.
constexpr size_t kLogOverhead = 8 + 4;
constexpr size_t kBatchHeaderSize = 8 + 4 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4;
static_assert(kLogOverhead == 12);
static_assert(kBatchHeaderSize == 61);
static_assert(kRecordsOffset == kBatchHeaderSize);
// A reader needs the bytes through magic before it can interpret the rest.
constexpr size_t kMinHeaderPrefix = kMagicOffset + 1;
static_assert(kMinHeaderPrefix == 17);

constexpr int8_t kMagicV2 = 2;

// R19: every offset of a batch lies in 0..2^63-2, so the offset after it
// (the next batch's, the log end offset) is still an int64.
constexpr int64_t kMaxOffset = INT64_MAX - 1;
static_assert(kMaxOffset == 0x7FFFFFFFFFFFFFFE);

// §3.2 Attributes (low byte of the int16).
constexpr uint16_t kCodecMask = 0x07;
constexpr uint16_t kTimestampTypeBit = 0x08;
constexpr uint16_t kTransactionalBit = 0x10;
constexpr uint16_t kControlBit = 0x20;
constexpr uint16_t kDeleteHorizonBit = 0x40;
constexpr uint16_t kUnusedAttributeBits = 0xFF80;
// The codecs of bits 0-2: mq::Compression (mq/compression.h).

// §3.3 "no producer" values.
constexpr int64_t kNoProducerId = -1;
constexpr int16_t kNoProducerEpoch = -1;
constexpr int32_t kNoSequence = -1;

// §4 Record: varint limits.
constexpr size_t kMaxVarintBytes = 5;
constexpr size_t kMaxVarlongBytes = 10;
// Largest per-record overhead apart from key, value and headers:
// length(5) + attributes(1) + timestampDelta(10) + offsetDelta(5)
constexpr size_t kMaxRecordOverhead = 5 + 1 + 10 + 5 + 5 + 5 + 5;

// §5 Control records.
constexpr size_t kControlKeySize = 2 + 2;
constexpr size_t kEndTxnMarkerValueSize = 2 + 4;

// §6 Segment files.
constexpr int kSegmentNameDigits = 20;
constexpr const char* kLogSuffix = ".log";
constexpr const char* kIndexSuffix = ".index";
constexpr const char* kTimeIndexSuffix = ".timeindex";
constexpr uint64_t kMaxSegmentBytes = 0x7FFFFFFF;  // positions are int32
// §6.5 Truncation intent (`truncate-to`, R40): a few property lines.
constexpr uint64_t kMaxTruncateIntentBytes = 4096;
// R59: the truncation history (segment.md §6.6).
constexpr uint64_t kMaxTruncationsBytes = 8192;

// §7 Offset index entry: int32 relativeOffset, int32 position.
constexpr size_t kOffsetIndexEntrySize = 4 + 4;
static_assert(kOffsetIndexEntrySize == 8);
// §8 Time index entry: int64 timestamp, int32 relativeOffset.
constexpr size_t kTimeIndexEntrySize = 8 + 4;
static_assert(kTimeIndexEntrySize == 12);
constexpr uint32_t kDefaultIndexIntervalBytes = 4096;

// §16 Replica checkpoints (format-spec/replication.md): Kafka's text
// checkpoint layout, "0\n" then the entry count then one line per entry,
// fields separated by one space, every line ending in '\n'.
constexpr int kCheckpointVersion = 0;
constexpr uint64_t kMaxCheckpointBytes = 1 << 20;  // R35
constexpr char kCheckpointSeparator = ' ';
constexpr char kCheckpointLineEnd = '\n';
constexpr const char* kLeaderEpochCheckpointName = "leader-epoch-checkpoint";
constexpr const char* kReplicationOffsetCheckpointName = "replication-offset-checkpoint";
// Fields per entry: `epoch startOffset` (R36), `topic partition offset` (R38).
constexpr size_t kLeaderEpochEntryFields = 2;
constexpr size_t kReplicationOffsetEntryFields = 3;
// The smallest file: "0\n0\n"; the smallest entry line: "0 0\n".
constexpr size_t kMinCheckpointBytes = 2 + 2;
constexpr size_t kMinLeaderEpochLine = 1 + 1 + 1 + 1;
static_assert(kMinCheckpointBytes == 4 && kMinLeaderEpochLine == 4);
// Entries no checkpoint of at most kMaxCheckpointBytes can exceed.
constexpr uint64_t kMaxCheckpointEntries = kMaxCheckpointBytes / kMinLeaderEpochLine;
static_assert(kMaxCheckpointEntries == 262144);
// §17.2 A leader's partition directory: its followers' fetch positions
// (R47: the checkpoint layout, six numbers per entry) and the lock its
// high watermark and ISR expansions are decided under.
constexpr const char* kReplicaPositionsName = "replica-positions";
constexpr size_t kReplicaPositionFields = 6;
constexpr const char* kLeaderLockName = "leader.lock";
// §17.2 R60: the same positions as a leader keeps them, `fetch-positions`:
// 4096 bytes, two copies of 2048, each written in place (no rename). A copy
// is magic, version, sequence (u64), count (u32), reserved (u32), `count`
// entries of 40 bytes (replica i32, leaderEpoch i32, logEndOffset,
// lastFetchMs, lastCaughtUpMs, lastFetchLeaderLogEndOffset: i64 each), zero
// bytes, and the CRC-32C of its bytes before the last 4; big-endian.
constexpr const char* kFetchPositionsName = "fetch-positions";
constexpr uint64_t kFetchPositionsBytes = 4096;
constexpr size_t kFetchPositionsCopyBytes = 2048;
constexpr uint32_t kFetchPositionsMagic = 0x4D514650;  // "MQFP"
constexpr uint32_t kFetchPositionsVersion = 1;
constexpr size_t kFetchPositionsSequenceOffset = 8;
constexpr size_t kFetchPositionsCountOffset = 16;
constexpr size_t kFetchPositionsHeaderBytes = 24;
constexpr size_t kFetchPositionEntryBytes = 40;
constexpr size_t kFetchPositionsChecksumOffset = kFetchPositionsCopyBytes - 4;
constexpr uint32_t kMaxFetchPositions =
    (kFetchPositionsChecksumOffset - kFetchPositionsHeaderBytes) / kFetchPositionEntryBytes;
static_assert(kMaxFetchPositions == 50 && 2 * kFetchPositionsCopyBytes == kFetchPositionsBytes);
// §16.3 R61: the high watermark in place, `high-watermark`: 1024 bytes,
// two copies of 512, each written in place (no rename). A copy is magic,
// version, sequence (u64), high watermark (i64), partition (i32), topic
// length (u32), the topic's bytes, zero bytes, and the CRC-32C of its bytes
// before the last 4; big-endian.
constexpr const char* kHighWatermarkName = "high-watermark";
constexpr uint64_t kHighWatermarkBytes = 1024;
constexpr size_t kHighWatermarkCopyBytes = 512;
constexpr uint32_t kHighWatermarkMagic = 0x4D514857;  // "MQHW"
constexpr uint32_t kHighWatermarkVersion = 1;
constexpr size_t kHighWatermarkSequenceOffset = 8;
constexpr size_t kHighWatermarkOffsetOffset = 16;
constexpr size_t kHighWatermarkPartitionOffset = 24;
constexpr size_t kHighWatermarkTopicLengthOffset = 28;
constexpr size_t kHighWatermarkTopicOffset = 32;
constexpr size_t kHighWatermarkChecksumOffset = kHighWatermarkCopyBytes - 4;
constexpr size_t kMaxHighWatermarkTopicBytes = 249;  // R12
static_assert(kHighWatermarkTopicOffset + kMaxHighWatermarkTopicBytes <=
                  kHighWatermarkChecksumOffset &&
              2 * kHighWatermarkCopyBytes == kHighWatermarkBytes);
// The leader's claim on its epoch (replication.md §17.9, R53): one entry,
// `epoch bootId`, the boot id as 32 lowercase hexadecimal digits.
constexpr const char* kLeaderClaimName = "leader-claim";
constexpr size_t kLeaderClaimFields = 2;
constexpr size_t kBootIdHexDigits = 2 * 16;
// The epoch fence of a replica's log (replication.md §17.3, R56): one
// entry, `epoch`, the leader epoch below which no writer appends there.
constexpr const char* kLeaderEpochFenceName = "leader-epoch-fence";
constexpr size_t kLeaderEpochFenceFields = 1;
// A follower that stopped on an error it does not wait out (replication.md
// §17.7, R58): one entry, `stoppedMs exitStatus`.
constexpr const char* kFollowerStoppedName = "follower-stopped";
constexpr size_t kFollowerStoppedFields = 2;
// Kafka's "no epoch" and "no offset" (EpochEndOffset.UNDEFINED_EPOCH{,_OFFSET}),
// and the partitionLeaderEpoch of a batch stamped by no leader (§3).
constexpr int32_t kUndefinedEpoch = -1;
constexpr int64_t kUndefinedEpochOffset = -1;
constexpr int32_t kNoPartitionLeaderEpoch = -1;

// §18 Cluster state (format-spec/cluster.md): a directory of three files.
constexpr const char* kClusterStateName = "cluster-state";
constexpr const char* kClusterStateTmpName = "cluster-state.tmp";
constexpr const char* kClusterLockName = "cluster.lock";
constexpr const char* kIsrChangesName = "isr-changes";
// R41: the first line, "mq-cluster-state 1", and the last, "crc32c <hex8>".
constexpr const char* kClusterStateMagic = "mq-cluster-state";
constexpr int kClusterStateVersion = 2;       // the newest this mq reads and writes
constexpr int kClusterStateLocalVersion = 1;  // written while no replica has a host (R41)
constexpr size_t kMaxHostBytes = 255;         // R43: a replica's or a cluster's host
constexpr const char* kClusterCrcKeyword = "crc32c";
constexpr size_t kClusterCrcHexDigits = 8;
constexpr size_t kClusterCrcLineBytes = 6 + 1 + 8 + 1;  // "crc32c" SP hex8 LF
static_assert(kClusterCrcLineBytes == 16);
constexpr uint64_t kMaxClusterStateBytes = 1 << 20;  // R41: refused before reading
static_assert(kMaxClusterStateBytes == 1048576);
constexpr char kClusterFieldSeparator = ' ';
constexpr char kClusterListSeparator = ',';
constexpr const char* kClusterEmptyList = "-";
// R42 field counts, the keyword included.
constexpr size_t kReplicaLineFields = 1 + 2;    // replica id dir
constexpr size_t kTopicLineFields = 1 + 5;      // topic name partitions rf min.isr lag.ms
constexpr size_t kPartitionLineFields = 1 + 7;  // partition topic p replicas leader le pe isr
static_assert(kReplicaLineFields == 3 && kTopicLineFields == 6 && kPartitionLineFields == 8);
// R42 ranges (layout.md §2 for partitions and replication.factor).
constexpr int32_t kNoLeader = -1;
constexpr int64_t kMaxTopicPartitions = 10000;
constexpr int64_t kMaxReplicationFactor = 32767;
constexpr size_t kMaxClusterDirBytes = 4095;            // PATH_MAX - 1
constexpr int64_t kDefaultReplicaLagTimeMaxMs = 30000;  // Kafka's default

// --- wire (tools-shape)
// §19 Wire protocol (format-spec/protocol.md). §19.1 a frame: length (u32,
// the payload's), type (u8), correlation (u32), the payload, crc (u32).
constexpr size_t kWireHeaderSize = 4 + 1 + 4;    // length, type, correlation
constexpr size_t kWireTrailerSize = 4;           // crc
constexpr uint32_t kWireMaxPayload = 64u << 20;  // R48
static_assert(kWireHeaderSize == 9 && kWireMaxPayload == 67108864);
// §19.2: a response's type is its request's with this bit set.
constexpr uint8_t kWireReplyBit = 0x80;
// R49: the versions this mq speaks (kWireVersion the highest). Version 2
// adds FetchAhead (R62), ReadLog and ReplicaCheck (R63).
constexpr uint16_t kWireMinVersion = 1;
constexpr uint16_t kWireVersion = 2;
constexpr uint16_t kWireFetchAheadVersion = 2;
constexpr uint16_t kWireReadReplicaVersion = 2;  // ReadLog, ReplicaCheck
constexpr uint32_t kWireMaxWaitMs = 1000;        // Fetch's maxWaitMs at most (§19.3)

// --- segment (segment-unit)
// §7, §8 The largest index file read or mapped: a segment holds at most
// 2^31-1 bytes (§6) of batches of at least 61 bytes, and each batch has at
// most one entry in each index, of at most 12 bytes. No index of a valid
// segment is larger; one that is, is not read (recovery rebuilds it, R23).
constexpr uint64_t kMaxIndexFileBytes =
    (kMaxSegmentBytes / kBatchHeaderSize + 1) * kTimeIndexEntrySize;
static_assert(kMaxIndexFileBytes == 422455800);  // about 403 MiB
// §6.5 R40: the truncation intent, `truncate-to`.
constexpr const char* kTruncateIntentName = "truncate-to";
// §6.6 R59: the truncation history, `truncations`, and the entries it keeps
// (the oldest go first).
constexpr const char* kTruncationsName = "truncations";
constexpr size_t kMaxTruncations = 64;

// --- partition writer (pw-split)
// §9 The state file `state` (segment.md §9): 80 bytes in native order.
constexpr uint32_t kStateMagic = 0x4D515354;  // "MQST" when read big-endian
// Version 1 (64 bytes, no boot id) files are rebuilt like any invalid one.
constexpr uint32_t kStateVersion = 2;
constexpr const char* kStateFileName = "state";
// §9 The partition writer lock: an exclusive flock on this file.
constexpr const char* kWriterLockName = "writer.lock";
// §10 Producer snapshot `<offset>.snapshot` (producer.md §10.2; Kafka's
// ProducerStateManager, version 1).
// Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN.
constexpr size_t kBatchesToRetain = 5;
constexpr int16_t kSnapshotVersion = 1;
constexpr size_t kSnapshotVersionOffset = 0;
constexpr size_t kSnapshotCrcOffset = 2;
constexpr size_t kSnapshotCountOffset = 6;
constexpr size_t kSnapshotHeaderSize = 2 + 4 + 4;
constexpr size_t kSnapshotEntrySize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
static_assert(kSnapshotHeaderSize == 10);
static_assert(kSnapshotEntrySize == 46);
// A snapshot larger than this is not read (it cannot be one mq wrote: one
// entry per cached batch of at most ~1.4 M producers).
constexpr uint64_t kMaxSnapshotBytes = 64ull << 20;
constexpr const char* kSnapshotSuffix = ".snapshot";
constexpr int kSnapshotDigits = 20;
// Snapshots kept after a write: the newest two, so a torn newest one (which
// rename makes impossible, but a bad disk does not) still leaves one.
constexpr size_t kSnapshotsKept = 2;
// P7: a close writes no snapshot when the batches after the newest one take
// less than this much of the active segment (the next open replays them).
constexpr uint64_t kSnapshotReplayBytes = 256 << 10;

// --- groups (lib-leftovers)
// §14.2 The offsets file's byte table (big-endian), R29.
constexpr uint32_t kGroupOffsetsMagic = 0x4D51474F;  // "MQGO"
constexpr int16_t kGroupOffsetsVersion = 1;
constexpr size_t kGroupOffsetsHeaderSize = 48;
constexpr size_t kGroupOffsetEntryFixedSize = 36;        // an entry without its two names
constexpr uint64_t kMaxGroupOffsetsBytes = 64ull << 20;  // R29
// §14.2 R86: the offsets file written in place, two copies of a version-2
// image (the header's 48 bytes, then imageBytes and a reserved int32), each
// in a slot of half the file; R87 writes one copy and fdatasyncs.
constexpr int16_t kGroupOffsetsInPlaceVersion = 2;
constexpr size_t kGroupOffsetsInPlaceHeaderSize = 56;
constexpr size_t kGroupOffsetsImageBytesAt = 48;
constexpr size_t kGroupOffsetsImageReservedAt = 52;
constexpr uint64_t kGroupOffsetsSlotAlign = 4096;                  // R86: slots of 4 KiB pages
constexpr uint64_t kMaxGroupOffsetsFileBytes = 2 * kMaxGroupOffsetsBytes;  // R86: two slots
// §14.1 Names inside the data directory (the offsets file's own name,
// `offsets`, is mq::kGroupOffsetsFile in mq/group.h: tools read it too).
constexpr const char* kGroupsDir = "groups";
constexpr const char* kGroupOffsetsStaging = "offsets.tmp";
constexpr const char* kGroupCommitLock = "commit.lock";
constexpr const char* kGroupLock = "group.lock";
constexpr const char* kGroupMembersDir = "members";
constexpr const char* kGroupPartitionsDir = "partitions";
// §14.5 partitions/<topic>: a slot of kOwnershipSlotSize bytes per
// partition, slot p at byte p * kOwnershipSlotSize. Its byte
// kOwnershipLockOffset is the owner's lock, its byte kHandlerLockOffset its
// handlers' lock, and its owner writes the member id and '\n' at its start.
constexpr uint64_t kOwnershipSlotSize = 256;
constexpr uint64_t kOwnershipLockOffset = 0;
constexpr uint64_t kHandlerLockOffset = 1;
static_assert(249 + 1 <= kOwnershipSlotSize, "a member id (R12) and its newline fit a slot");
static_assert(kOwnershipLockOffset != kHandlerLockOffset &&
                  kOwnershipLockOffset < kOwnershipSlotSize &&
                  kHandlerLockOffset < kOwnershipSlotSize,
              "a slot holds its two lock bytes");
// §10.3 P8: a producer-id registry, `producers/` in a data directory (and
// in a cluster directory, cluster.md §18.6, P10): `<name>.id` files and the
// counter, each one decimal number and a newline, at most 32 bytes. The
// counter's name has no ".id"/".lock" suffix, so no producer name collides
// with it. Every registry file is written through one staging name, under
// the registry's lock: `<name>.id.tmp` would be 256 bytes for a 249-byte
// name, one over NAME_MAX; it ends in neither ".id" nor ".lock".
constexpr const char* kProducerRegistryDir = "producers";
constexpr const char* kNextProducerIdName = "next-producer-id";
constexpr const char* kProducerIdSuffix = ".id";
constexpr const char* kProducerIdStaging = "id.tmp";
constexpr size_t kMaxProducerIdFileBytes = 32;
// --- retention (retention)
// retention.md §3 (R77): a deleted segment's files are renamed with this
// suffix once the new log start is durable, and unlinked by a later run.
constexpr const char* kDeletedSuffix = ".deleted";
// R77: how long a `.deleted` file stays (Kafka's file.delete.delay.ms).
constexpr int64_t kFileDeleteDelayMs = 60000;
// retention.md §5 (R79): the flock mq-compact holds on the data directory.
constexpr const char* kCompactLockName = ".mq-compact.lock";
// R110: the append rate behind mq-compact's headroom by size is measured
// over at most this many of a partition's newest segments.
constexpr int kHeadroomRateSegments = 8;

// --- tiered segments (retention.md §21, R93-R97)
// R93: the tier pointer in a partition directory: a property file naming,
// as `dir=<absolute path>`, the directory that holds the partition's tiered
// segments; at most this many bytes.
constexpr const char* kTierPointerName = "tier";
constexpr const char* kTierPointerKey = "dir";
constexpr size_t kMaxTierPointerBytes = 4096;
// R94: a tier copy is written under `<name>` + this suffix, then renamed.
constexpr const char* kTierCopySuffix = ".tmp";

}  // namespace mq::format
