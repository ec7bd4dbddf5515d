// The partition state file `state` (format-spec/segment.md §9): 80 bytes in
// native byte order, mapped shared by the writer (read/write) and readers
// (read-only). It is transient and rebuildable from the log, like SQLite's
// wal-index, which is why native order is allowed here and nowhere else.
//
// Publication is a seqlock: the writer makes `generation` odd, stores the
// fields and their checksum, makes it even again, then FUTEX_WAKEs every
// process waiting on the generation word. Readers read the generation, the
// fields, the generation again, and retry if it moved or was odd.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "format/format.h"
#include "mq/boot_id.h"
#include "mq/file.h"
#include "mq/status.h"

namespace mq {

// BootId (R27): mq/boot_id.h.

// The running kernel's boot id, or all zeros when it cannot be read. Test
// seam: when the environment variable MQ_TEST_BOOT_ID is set, its value (a
// UUID in text, hyphens optional; anything else counts as unknown) is used
// instead, so a test can simulate a reboot by changing it.
BootId CurrentBootId();
// Parses a UUID in text (32 hex digits, hyphens ignored); nullopt otherwise.
std::optional<BootId> ParseBootId(const std::string& text);

struct StateFields {
  uint32_t rewrites = 0;         // bumped by TruncateTo: tail caches are stale
  int64_t log_end_offset = 0;    // committed end: one past the last offset
  int64_t end_segment_base = 0;  // segment holding the committed end
  uint64_t end_position = 0;     // committed bytes of that segment
  int64_t log_start_offset = 0;
  int64_t recovery_point = 0;  // offsets below were fsynced and validated
  BootId boot_id{};            // boot of the writer that published (R27)
  bool operator==(const StateFields&) const = default;

  // R27: true when these fields were published on the running boot (a
  // known boot id equal to CurrentBootId()). Then the committed end is
  // authoritative: every byte below it was written and its page cache is
  // intact, bytes past it were never published. After a reboot it is not
  // trusted above the recovery point (the file is not fsynced): a segment
  // shorter than it needs recovery (R28), it is not corrupt.
  bool same_boot() const;
};

// §9 byte table (native order).
struct StateLayout {
  uint32_t magic;
  uint32_t version;
  uint32_t generation;  // seqlock and futex word
  uint32_t rewrites;
  int64_t log_end_offset;
  int64_t end_segment_base;
  uint64_t end_position;
  int64_t log_start_offset;
  int64_t recovery_point;
  uint64_t boot_id[2];  // BootId bytes in order (byte-order independent)
  uint32_t checksum;    // CRC-32C of bytes [12, 72)
  uint32_t appending;   // 1 while a writer writes past the committed end; not checksummed
};
static_assert(sizeof(StateLayout) == 80);

// §9.4 R100: a publication that changes no field of the state file (the
// generation alone moves: a high watermark raised, an epoch fence stored, an
// epoch begun) wakes with FUTEX_WAKE_BITSET bit kStateWakeGenerationOnly;
// every other wakes all bits. A reader whose wait depends on the fields
// alone (not bounded by the high watermark) waits with FUTEX_WAIT_BITSET mask
// kStateWakeFieldChange; any other waiter on all bits.
constexpr uint32_t kStateWakeFieldChange = 1u;
constexpr uint32_t kStateWakeGenerationOnly = 2u;
constexpr uint32_t kStateWakeAll = 0xFFFFFFFFu;  // FUTEX_BITSET_MATCH_ANY

// format.h §9.
using format::kStateFileName;
using format::kStateMagic;
using format::kStateVersion;

// Encodes a complete state file image (generation 0) for `fields`.
StateLayout EncodeState(const StateFields& fields);
// R15: magic, version, checksum. Returns the fields or kCorruption naming
// `file` and the bad field's position.
Result<StateFields> DecodeState(const StateLayout& image, const std::string& file);

class StateFile {
 public:
  StateFile();
  StateFile(StateFile&&) noexcept;
  StateFile& operator=(StateFile&&) noexcept;
  ~StateFile();

  // The writer's mapping. Creates the file (atomically, holding `initial`)
  // when it is missing or the wrong size. *recreated tells which. With
  // `sync` false that creation is not fsynced (R34).
  static Result<StateFile> OpenForWrite(int dir_fd, FileSystem* fs, const StateFields& initial,
                                        bool* recreated, bool sync = true);
  // A reader's read-only mapping; kNotFound when there is no state file.
  static Result<StateFile> OpenForRead(int dir_fd, FileSystem* fs = nullptr);

  // A consistent snapshot of the fields (seqlock), or R15 corruption.
  Result<StateFields> Read(uint32_t* generation = nullptr) const;
  uint32_t generation() const;
  // Writer only: publishes `fields` and wakes waiters. Returns the new
  // (even) generation. R100: when `fields` are the ones published already
  // (the generation alone moves), the waiters for a field change
  // (WaitFor::kFieldChange) are not woken. `woken`: how many waiters were.
  uint32_t Publish(const StateFields& fields, int* woken = nullptr);
  // Writer only: marks (or clears) an append in progress. A writer that
  // finds the mark set knows a writer died mid-append and cuts what lies
  // past the committed end; without it, no fstat is needed per append.
  void SetAppending(bool on);
  bool appending() const;
  // What a waiter waits for (R100): any publication (a reader bounded by
  // the high watermark, which a publication of the same fields announces),
  // or one that changes a field (the log's end, start, segments, rewrites).
  enum class WaitFor : uint8_t { kAnyPublication, kFieldChange };
  // Blocks while the generation equals `generation`, up to `timeout_ms`,
  // until a publication of the kind `what` wakes it.
  void Wait(uint32_t generation, int timeout_ms, WaitFor what = WaitFor::kAnyPublication) const;
  // True if `state` in `dir_fd` is no longer the file this maps (or cannot
  // be looked at).
  bool Replaced(int dir_fd) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mq
