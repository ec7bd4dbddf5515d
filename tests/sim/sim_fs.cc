#include "sim_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace mq::sim {

namespace {

namespace stdfs = std::filesystem;

// A file of the simulated directory: reads go to the real file (the page
// cache); writes, truncations and syncs are recorded by the SimFs.
class SimFile : public File {
 public:
  SimFile(std::unique_ptr<File> real, SimFs* fs, SimFs::NodeId node)
      : real_(std::move(real)), fs_(fs), node_(node) {}
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    return fs_->WriteNode(real_.get(), node_, offset, data);
  }
  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> data) override {
    return real_->ReadAt(offset, data);
  }
  Result<uint64_t> Size() override { return real_->Size(); }
  Result<FileInfo> Stat() override { return real_->Stat(); }
  Result<FileInfo> StatAtOpen() override { return real_->StatAtOpen(); }
  Status Truncate(uint64_t size) override { return fs_->TruncateNode(real_.get(), node_, size); }
  Status Sync() override {
    MQ_RETURN_IF_ERROR(real_->Sync());
    return fs_->SyncNode(node_);
  }
  int fd() const override { return real_->fd(); }

 private:
  std::unique_ptr<File> real_;
  SimFs* fs_;
  SimFs::NodeId node_;
};

std::string TempBase() {
  struct stat st;
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  if (const char* t = std::getenv("TMPDIR"); t && *t) return t;
  return "/tmp";
}

std::vector<std::byte> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::byte> out;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it)
    out.push_back(static_cast<std::byte>(*it));  // no memcpy from null for an empty file
  return out;
}

size_t Draw(Rng& rng, size_t n) {  // uniform in [0, n]
  return std::uniform_int_distribution<size_t>(0, n)(rng);
}

}  // namespace

SimFs::SimFs(DiskOrder order) : order_(order) {
  std::string tmpl = TempBase() + "/mq-sim-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  std::error_code ec;
  root_ = stdfs::canonical(buf.data(), ec).string();
  if (ec) root_ = buf.data();
  disk_.dirs.insert("");
}

SimFs::~SimFs() {
  std::error_code ec;
  stdfs::remove_all(root_, ec);
}

std::string SimFs::Op::Dir() const {
  const std::string& p = kind == OpKind::kWrite || kind == OpKind::kTruncate ? std::string() : path;
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? std::string() : p.substr(0, slash);
}

std::string SimFs::Relative(int dir_fd, const std::string& name) const {
  std::string dir;
  if (!name.empty() && name[0] == '/') {
    dir = name;
  } else {
    if (dir_fd == AT_FDCWD) {
      std::error_code ec;
      dir = stdfs::current_path(ec).string();
    } else {
      char buf[4096];
      const std::string link = fmt::format("/proc/self/fd/{}", dir_fd);
      const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
      if (n <= 0) return {};
      dir.assign(buf, static_cast<size_t>(n));
    }
    dir += "/" + name;
  }
  if (dir == root_) return ".";
  if (dir.compare(0, root_.size() + 1, root_ + "/") != 0) return {};
  return dir.substr(root_.size() + 1);
}

SimFs::NodeId SimFs::NodeOfFd(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return 0;
  auto it = by_inode_.find(st.st_ino);
  return it == by_inode_.end() ? 0 : it->second;
}

Result<std::unique_ptr<File>> SimFs::Open(int dir_fd, const std::string& name, OpenMode mode) {
  const std::string rel = Relative(dir_fd, name);
  if (rel.empty()) return target()->Open(dir_fd, name, mode);
  bool existed = true;
  if (mode == kCreate || mode == kCreateExclusive)
    existed = target()->StatAt(dir_fd, name).has_value();
  auto f = target()->Open(dir_fd, name, mode);
  if (!f) return f.error();
  auto info = (*f)->StatAtOpen();
  if (!info) return info.error();
  NodeId node = 0;
  auto it = by_inode_.find(info->ino);
  if (!existed || it == by_inode_.end()) {
    node = next_node_++;
    by_inode_[info->ino] = node;
    if (existed) {
      // Made outside this layer (not through it): taken as on the disk.
      disk_.entries[rel] = node;
      disk_.contents[node] = ReadWhole(root_ + "/" + rel);
    } else {
      pending_.push_back(Op{OpKind::kLink, node, 0, {}, rel, {}});
    }
  } else {
    node = it->second;
  }
  return std::unique_ptr<File>(new SimFile(std::move(*f), this, node));
}

Status SimFs::Rename(int dir_fd, const std::string& from, const std::string& to) {
  MQ_RETURN_IF_ERROR(target()->Rename(dir_fd, from, to));
  const std::string a = Relative(dir_fd, from), b = Relative(dir_fd, to);
  if (a.empty() || b.empty()) return Status::Ok();
  struct stat st;
  NodeId node = 0;
  if (::fstatat(dir_fd, to.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    auto it = by_inode_.find(st.st_ino);
    if (it != by_inode_.end()) node = it->second;
  }
  pending_.push_back(Op{OpKind::kRename, node, 0, {}, a, b});
  return Status::Ok();
}

Status SimFs::Unlink(int dir_fd, const std::string& name) {
  MQ_RETURN_IF_ERROR(target()->Unlink(dir_fd, name));
  const std::string rel = Relative(dir_fd, name);
  if (!rel.empty()) pending_.push_back(Op{OpKind::kUnlink, 0, 0, {}, rel, {}});
  return Status::Ok();
}

std::vector<bool> SimFs::DataWithRename() const {
  // kMetadataOrdered: a file's data written before it is renamed (a file
  // written whole and renamed over another, WriteFileAtomic) reaches the
  // disk with the rename, as ext4 (auto_da_alloc) and XFS flush it.
  std::vector<bool> with(pending_.size(), false);
  std::set<NodeId> renamed_later;
  for (size_t i = pending_.size(); i-- > 0;) {
    const Op& op = pending_[i];
    if (op.kind == OpKind::kRename && op.node != 0) renamed_later.insert(op.node);
    if (op.data_op() && renamed_later.count(op.node)) with[i] = true;
  }
  return with;
}

Status SimFs::SyncDir(int dir_fd) {
  MQ_RETURN_IF_ERROR(target()->SyncDir(dir_fd));
  std::string rel = Relative(dir_fd, ".");
  if (rel.empty()) return Status::Ok();
  if (rel == ".") rel.clear();
  if (rel.size() > 2 && rel.compare(rel.size() - 2, 2, "/.") == 0) rel.resize(rel.size() - 2);
  std::vector<size_t> commit;
  const std::vector<bool> with_rename = DataWithRename();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Op& op = pending_[i];
    switch (order_) {
      case DiskOrder::kOrdered:
        commit.push_back(i);
        break;
      case DiskOrder::kMetadataOrdered:
        if (!op.data_op() || with_rename[i]) commit.push_back(i);
        break;
      case DiskOrder::kIndependent:
        if (!op.file_op() && op.Dir() == rel) commit.push_back(i);
        break;
    }
  }
  Commit(commit);
  return Status::Ok();
}

Result<UniqueFd> SimFs::OpenDir(int at_fd, const std::string& path, bool create) {
  std::string rel = Relative(at_fd, path);
  if (rel == ".") rel.clear();
  bool existed = true;
  if (create && (!rel.empty())) {
    struct stat st;
    existed = ::fstatat(at_fd, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  }
  auto d = target()->OpenDir(at_fd, path, create);
  if (!d) return d.error();
  if (!existed && !rel.empty()) pending_.push_back(Op{OpKind::kMkdir, 0, 0, {}, rel, {}});
  return d;
}

Status SimFs::RemoveDir(int dir_fd, const std::string& name) {
  MQ_RETURN_IF_ERROR(target()->RemoveDir(dir_fd, name));
  const std::string rel = Relative(dir_fd, name);
  if (!rel.empty()) pending_.push_back(Op{OpKind::kRmdir, 0, 0, {}, rel, {}});
  return Status::Ok();
}

Result<Mapping> SimFs::Map(int fd, size_t size, bool writable) {
  if (writable) {
    const NodeId node = NodeOfFd(fd);
    if (node != 0) mapped_.insert(node);
  }
  return target()->Map(fd, size, writable);
}

Status SimFs::WriteNode(File* real, NodeId node, uint64_t offset, std::span<const std::byte> data) {
  if (fail_next_write_) {
    fail_next_write_ = false;
    write_failed_ = true;
    const size_t keep = std::min(fail_keep_bytes_, data.size() == 0 ? 0 : data.size() - 1);
    if (keep > 0) MQ_RETURN_IF_ERROR(WriteNode(real, node, offset, data.first(keep)));
    return ErrnoStatus("simulated write", EIO);
  }
  MQ_RETURN_IF_ERROR(real->WriteAt(offset, data));
  pending_.push_back(Op{OpKind::kWrite, node, offset, {data.begin(), data.end()}, {}, {}});
  return Status::Ok();
}

Status SimFs::TruncateNode(File* real, NodeId node, uint64_t size) {
  MQ_RETURN_IF_ERROR(real->Truncate(size));
  pending_.push_back(Op{OpKind::kTruncate, node, size, {}, {}, {}});
  return Status::Ok();
}

Status SimFs::SyncNode(NodeId node) {
  std::vector<size_t> commit;
  const std::vector<bool> with_rename = DataWithRename();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Op& op = pending_[i];
    const bool mine = op.file_op() && op.node == node;
    switch (order_) {
      case DiskOrder::kOrdered:
        commit.push_back(i);
        break;
      case DiskOrder::kMetadataOrdered:
        if (mine || !op.data_op() || with_rename[i]) commit.push_back(i);
        break;
      case DiskOrder::kIndependent:
        if (mine) commit.push_back(i);
        break;
    }
  }
  Commit(commit);
  return Status::Ok();
}

void SimFs::Apply(Image& image, const Op& op, size_t keep_bytes) {
  switch (op.kind) {
    case OpKind::kWrite: {
      std::vector<std::byte>& c = image.contents[op.node];
      const size_t n = std::min(keep_bytes, op.data.size());
      if (n == 0) return;
      if (c.size() < op.offset + n) c.resize(op.offset + n);
      std::copy_n(op.data.begin(), n, c.begin() + static_cast<ptrdiff_t>(op.offset));
      return;
    }
    case OpKind::kTruncate:
      image.contents[op.node].resize(op.offset);
      return;
    case OpKind::kLink:
      image.entries[op.path] = op.node;
      image.contents[op.node];
      return;
    case OpKind::kUnlink:
      image.entries.erase(op.path);
      return;
    case OpKind::kRename: {
      auto it = image.entries.find(op.path);
      if (it == image.entries.end()) return;  // its creation was not kept
      const NodeId node = it->second;
      image.entries.erase(it);
      image.entries[op.to] = node;
      return;
    }
    case OpKind::kMkdir:
      image.dirs.insert(op.path);
      return;
    case OpKind::kRmdir:
      image.dirs.erase(op.path);
      return;
  }
}

void SimFs::Commit(const std::vector<size_t>& indexes) {
  if (indexes.empty()) return;
  std::vector<Op> rest;
  size_t k = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (k < indexes.size() && indexes[k] == i) {
      const Op& op = pending_[i];
      Apply(disk_, op, op.data.size());
      ++k;
      // A truncation that reaches the disk ahead of its file's earlier
      // writes: the kernel dropped the pages past the new size when it
      // truncated, dirty or not, so what those writes put there never
      // reaches the disk after it.
      if (op.kind == OpKind::kTruncate) {
        std::erase_if(rest, [&](Op& w) {
          if (w.kind != OpKind::kWrite || w.node != op.node) return false;
          if (w.offset >= op.offset) return true;
          if (w.offset + w.data.size() > op.offset) w.data.resize(op.offset - w.offset);
          return false;
        });
      }
    } else {
      rest.push_back(std::move(pending_[i]));
    }
  }
  pending_ = std::move(rest);
}

void SimFs::CommitAll() {
  for (const Op& op : pending_) Apply(disk_, op, op.data.size());
  pending_.clear();
}

void SimFs::SyncAll() {
  CommitAll();
  // What was written through mappings reached the disk too.
  std::error_code ec;
  for (auto it = stdfs::recursive_directory_iterator(root_, ec);
       !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0) continue;
    auto n = by_inode_.find(st.st_ino);
    if (n != by_inode_.end() && mapped_.count(n->second))
      disk_.contents[n->second] = ReadWhole(it->path());
  }
}

void SimFs::PowerCut(Rng& rng) {
  // The page cache of the mapped files, before it goes.
  std::map<NodeId, std::vector<std::byte>> mapped_now;
  std::error_code ec;
  for (auto it = stdfs::recursive_directory_iterator(root_, ec);
       !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0) continue;
    auto n = by_inode_.find(st.st_ino);
    if (n != by_inode_.end() && mapped_.count(n->second))
      mapped_now[n->second] = ReadWhole(it->path());
  }

  const size_t n = pending_.size();
  // keep[i]: how many of op i's data bytes reach the disk (SIZE_MAX: all
  // of it, or the whole metadata operation); 0 for a dropped operation.
  std::vector<size_t> keep(n, 0);
  auto torn = [&](size_t i) { return Draw(rng, pending_[i].data.size()); };
  switch (order_) {
    case DiskOrder::kOrdered: {
      const size_t k = Draw(rng, n);
      for (size_t i = 0; i < k; ++i) keep[i] = SIZE_MAX;
      if (k < n && pending_[k].data_op()) keep[k] = torn(k);
      break;
    }
    case DiskOrder::kMetadataOrdered: {
      const std::vector<bool> with_rename = DataWithRename();
      const size_t point = Draw(rng, n);
      size_t data_before = 0;
      for (size_t i = 0; i < point; ++i) data_before += pending_[i].data_op() && !with_rename[i];
      const size_t d = Draw(rng, data_before);
      size_t rank = 0;
      for (size_t i = 0; i < point; ++i) {
        if (!pending_[i].data_op() || with_rename[i]) {
          keep[i] = SIZE_MAX;
        } else {
          if (rank < d)
            keep[i] = SIZE_MAX;
          else if (rank == d)
            keep[i] = torn(i);
          ++rank;
        }
      }
      break;
    }
    case DiskOrder::kIndependent: {
      // Each file's operations and each directory's entry changes apart.
      std::map<std::string, std::vector<size_t>> streams;
      for (size_t i = 0; i < n; ++i) {
        const Op& op = pending_[i];
        streams[op.file_op() ? fmt::format("#{}", op.node) : "/" + op.Dir()].push_back(i);
      }
      for (auto& [key, ops] : streams) {
        const size_t k = Draw(rng, ops.size());
        for (size_t j = 0; j < k; ++j) keep[ops[j]] = SIZE_MAX;
        if (k < ops.size() && pending_[ops[k]].data_op()) keep[ops[k]] = torn(ops[k]);
      }
      break;
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (keep[i] > 0) Apply(disk_, pending_[i], keep[i]);
  pending_.clear();
  // A mapped file: its page cache written back whole, or not at all.
  for (auto& [node, bytes] : mapped_now)
    if (disk_.contents.count(node) && (mapped_kept_ || std::bernoulli_distribution(0.5)(rng)))
      disk_.contents[node] = std::move(bytes);
  mapped_.clear();
  Restore();
}

void SimFs::Restore() {
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(root_, ec)) stdfs::remove_all(e.path(), ec);
  // Directories whose parent the disk lost go with it.
  std::set<std::string> dirs;
  for (const std::string& d : disk_.dirs) {
    if (d.empty()) continue;
    const size_t slash = d.rfind('/');
    if (slash != std::string::npos && !dirs.count(d.substr(0, slash))) continue;
    dirs.insert(d);
    ::mkdir((root_ + "/" + d).c_str(), 0750);
  }
  dirs.insert("");
  disk_.dirs = dirs;
  by_inode_.clear();
  std::map<NodeId, std::string> first_path;
  std::map<std::string, NodeId> entries;
  for (const auto& [path, node] : disk_.entries) {
    const size_t slash = path.rfind('/');
    if (!dirs.count(slash == std::string::npos ? std::string() : path.substr(0, slash))) continue;
    const std::string full = root_ + "/" + path;
    entries[path] = node;
    if (auto f = first_path.find(node); f != first_path.end()) {
      (void)::link((root_ + "/" + f->second).c_str(), full.c_str());
      continue;
    }
    first_path[node] = path;
    const int fd = ::open(full.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0640);
    if (fd < 0) continue;
    const std::vector<std::byte>& c = disk_.contents[node];
    size_t done = 0;
    while (done < c.size()) {
      const ssize_t w = ::write(fd, c.data() + done, c.size() - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    struct stat st;
    if (::fstat(fd, &st) == 0) by_inode_[st.st_ino] = node;
    ::close(fd);
  }
  disk_.entries = std::move(entries);
  // Files no name reaches are gone.
  for (auto it = disk_.contents.begin(); it != disk_.contents.end();)
    it = first_path.count(it->first) ? std::next(it) : disk_.contents.erase(it);
}

}  // namespace mq::sim
