// A simulated host's file system for mq-sim (README.md, "The simulated file
// system"): a FileSystemWrapper over the real file system, confined to one
// directory of its own (on tmpfs when /dev/shm is there), that plays the
// page cache over a disk. What the process sees is the real directory (the
// page cache, which a process kill leaves as it is); what the disk holds is
// an image kept here: the state at the last sync plus every write,
// truncation, creation, rename, unlink, mkdir and rmdir made since, in
// order. PowerCut rewrites the directory to what a disk may keep of them,
// in one of the orders replication.md §17.9 discusses (DiskOrder, the same
// as the model log's):
//
//   kOrdered          a prefix of all the unsynced operations, in order
//                     (one journal orders data and metadata: ext4
//                     data=ordered); an fsync of any file or directory
//                     commits every operation before it;
//   kMetadataOrdered  the metadata operations (truncate, create, rename,
//                     unlink, mkdir, rmdir) up to a point, in order, and of
//                     the data writes before that point a prefix (a journal
//                     for metadata, delayed allocation for data); the data
//                     of a file renamed afterwards (written whole and
//                     renamed over another) goes with the metadata, as
//                     ext4 (auto_da_alloc) and XFS flush it before the
//                     rename; an fsync commits all metadata and the synced
//                     file's data, and a truncation it commits drops what
//                     the file's earlier unsynced writes put past the new
//                     size (the kernel dropped those pages when it
//                     truncated: they never reach the disk after it);
//   kIndependent      each file keeps its own prefix of its writes and
//                     truncations, each directory its own prefix of its
//                     entry changes; an fsync commits only its file's (or
//                     directory's) operations.
//
// The write cut at the chosen point may keep a prefix of its bytes (a torn
// write). A file mapped writable (the partition's `state`, segment.md §9:
// derived data, rebuilt by recovery) is written through memory, which this
// layer does not see: a power cut keeps its page-cache contents or its last
// recorded ones, wholesale, drawn at random.
//
// Every File and Mapping of the directory must be gone (the process objects
// closed) before PowerCut. Single-threaded, deterministic given the Rng.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model.h"
#include "mq/file.h"

namespace mq::sim {

class SimFs : public FileSystemWrapper {
 public:
  // Makes a fresh directory under /dev/shm (else $TMPDIR, else /tmp),
  // removed with its contents when this goes.
  explicit SimFs(DiskOrder order = DiskOrder::kOrdered);
  ~SimFs() override;
  SimFs(const SimFs&) = delete;
  SimFs& operator=(const SimFs&) = delete;

  // The directory this host's files live in (absolute).
  const std::string& root() const { return root_; }
  DiskOrder order() const { return order_; }

  // The machine loses power: the directory becomes what the disk kept.
  void PowerCut(Rng& rng);
  // Everything unsynced reaches the disk (the kernel's writeback caught up).
  void SyncAll();
  // The next write fails kIoError after writing the first `keep_bytes` of
  // its data (0: nothing; clamped to fewer than all).
  void FailNextWrite(size_t keep_bytes = 0) {
    fail_next_write_ = true;
    fail_keep_bytes_ = keep_bytes;
  }
  void CancelWriteFault() { fail_next_write_ = false; }
  // A power cut keeps what was written through mappings, always (the
  // kernel wrote the pages back just before): off, it is kept or lost
  // whole, drawn at random.
  void set_mapped_kept(bool on) { mapped_kept_ = on; }
  bool write_failed() const { return write_failed_; }
  void clear_write_failed() { write_failed_ = false; }
  // Operations not yet on the disk.
  size_t unsynced() const { return pending_.size(); }

  Result<std::unique_ptr<File>> Open(int dir_fd, const std::string& name, OpenMode mode) override;
  Status Rename(int dir_fd, const std::string& from, const std::string& to) override;
  Status Unlink(int dir_fd, const std::string& name) override;
  Status SyncDir(int dir_fd) override;
  Result<UniqueFd> OpenDir(int at_fd, const std::string& path, bool create) override;
  Status RemoveDir(int dir_fd, const std::string& name) override;
  Result<Mapping> Map(int fd, size_t size, bool writable) override;
  // Refused (kUnsupported): a copy goes through the files' writes, which
  // this records (the kernel's copy would bypass them).
  Result<size_t> CopyRange(int, uint64_t*, int, uint64_t*, size_t) override {
    return Status(Code::kUnsupported, "copy_file_range: not simulated");
  }

  // Called by the files this opened.
  using NodeId = uint64_t;
  Status WriteNode(File* real, NodeId node, uint64_t offset, std::span<const std::byte> data);
  Status TruncateNode(File* real, NodeId node, uint64_t size);
  Status SyncNode(NodeId node);

 private:
  enum class OpKind : uint8_t { kWrite, kTruncate, kLink, kUnlink, kRename, kMkdir, kRmdir };
  struct Op {
    OpKind kind;
    NodeId node = 0;              // kWrite, kTruncate, kLink, kRename (0: unknown)
    uint64_t offset = 0;          // kWrite; kTruncate: the size
    std::vector<std::byte> data;  // kWrite
    std::string path;             // kLink, kUnlink, kRename (from), kMkdir, kRmdir
    std::string to;               // kRename
    bool data_op() const { return kind == OpKind::kWrite; }
    bool file_op() const { return kind == OpKind::kWrite || kind == OpKind::kTruncate; }
    std::string Dir() const;  // the directory an entry operation changes
  };
  struct Image {
    std::map<std::string, NodeId> entries;  // path (relative to root) -> file
    std::set<std::string> dirs;             // relative paths ("" is the root)
    std::map<NodeId, std::vector<std::byte>> contents;
  };

  // The path of `name` in the directory `dir_fd`, relative to the root;
  // empty when the directory is not under it (not simulated).
  std::string Relative(int dir_fd, const std::string& name) const;
  NodeId NodeOfFd(int fd);
  static void Apply(Image& image, const Op& op, size_t keep_bytes);
  // Applies the operations at `indexes` (ascending) of pending_ to disk_
  // and drops them from pending_.
  void Commit(const std::vector<size_t>& indexes);
  void CommitAll();
  // Per pending operation: a data write ordered with the metadata (its
  // file is renamed after it; kMetadataOrdered).
  std::vector<bool> DataWithRename() const;
  // Rewrites the directory from disk_.
  void Restore();

  DiskOrder order_;
  std::string root_;
  Image disk_;
  std::vector<Op> pending_;
  std::map<uint64_t, NodeId> by_inode_;  // live files
  std::set<NodeId> mapped_;              // mapped writable since the last cut
  NodeId next_node_ = 1;
  bool mapped_kept_ = false;
  bool fail_next_write_ = false;
  size_t fail_keep_bytes_ = 0;
  bool write_failed_ = false;
};

}  // namespace mq::sim
