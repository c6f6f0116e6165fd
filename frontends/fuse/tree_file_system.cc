#include "frontends/fuse/tree_file_system.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "frontends/fuse/serving.h"
#include "initiator/base/log.h"

namespace iser::fuse {

struct TreeFileSystem::Node {
  std::string name;
  uint64_t dir_ino = 0;
  std::shared_ptr<PathSet> paths;
  bool all_luns = true;
  bool read_only = false;
  // Each file with its inode, in LUN order. Guarded by the TreeFileSystem's mu_: LUNs come and
  // go while the target is in the tree. A request holds its file's shared_ptr (InodeRef), so a
  // LUN removed meanwhile lives until that request ends.
  std::vector<std::pair<uint64_t, std::shared_ptr<const LunFile>>> files;

  Mutex mu;
  CondVar idle;
  int in_flight ISER_GUARDED_BY(mu) = 0;
  bool closing ISER_GUARDED_BY(mu) = false;

  // A request may use the files: false once the logout has begun.
  bool Enter() {
    MutexLock lock(&mu);
    if (closing) return false;
    ++in_flight;
    return true;
  }
  void Leave() {
    MutexLock lock(&mu);
    if (--in_flight == 0) idle.SignalAll();
  }
  // New requests are refused from now on; returns once the running ones have finished.
  void Close() {
    MutexLock lock(&mu);
    closing = true;
    while (in_flight > 0) idle.Wait(&mu);
  }
};

namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;

TreeFileSystem* Self(fuse_req_t req) {
  return static_cast<TreeFileSystem*>(fuse_req_userdata(req));
}

// The kernel's cached entry for name in parent goes (notify_delete also drops the dentry of an
// open file, so that the path no longer resolves); an entry that was never looked up is ENOENT.
void ForgetEntry(fuse_session* se, uint64_t parent, uint64_t child, const std::string& name) {
  int rc = fuse_lowlevel_notify_delete(se, parent, child, name.c_str(), name.size());
  if (rc == 0 || rc == -ENOENT) return;
  rc = fuse_lowlevel_notify_inval_entry(se, parent, name.c_str(), name.size());
  if (rc != 0 && rc != -ENOENT) {
    Log(LogLevel::kWarning, "the kernel kept its cached entry " + name + ": " + std::strerror(-rc));
  }
}

}  // namespace

TreeFileSystem::TreeFileSystem(const FileSystemConfig& config) : config_(config) {
  clock_gettime(CLOCK_REALTIME, &mounted_at_);
}

void TreeFileSystem::SetNotifySession(fuse_session* se) {
  MutexLock lock(&mu_);
  notify_ = se;
}

Status TreeFileSystem::Add(TreeTarget target) {
  auto node = std::make_shared<Node>();
  node->name = target.name;
  node->paths = std::move(target.paths);
  node->all_luns = target.all_luns;
  node->read_only = target.read_only;
  MutexLock lock(&mu_);
  if (by_name_.count(node->name)) {
    return Status::InvalidArgument("target " + node->name + " is in the tree already");
  }
  node->dir_ino = next_ino_++;
  by_ino_[node->dir_ino] = InodeRef{node, nullptr};
  for (LunFile& f : target.files) {
    f.read_only = target.read_only;
    auto file = std::make_shared<const LunFile>(std::move(f));
    const uint64_t ino = next_ino_++;
    node->files.emplace_back(ino, file);
    by_ino_[ino] = InodeRef{node, file};
  }
  by_name_[node->name] = node;
  return Status::OK();
}

uint64_t TreeFileSystem::FileIno(const Node& node, const std::string& file) const {
  for (const auto& [ino, f] : node.files) {
    if (f->name == file) return ino;
  }
  return 0;
}

Status TreeFileSystem::AddLun(const std::string& target, LunFile file) {
  MutexLock lock(&mu_);
  auto it = by_name_.find(target);
  if (it == by_name_.end() || it->second->paths.get() != &file.device->paths()) {
    return Status::NotFound("no session with target " + target + " that " + file.name +
                            " was opened on");
  }
  Node& node = *it->second;
  if (FileIno(node, file.name) != 0) {
    return Status::InvalidArgument(target + "/" + file.name + " is in the tree already");
  }
  const uint64_t lun = file.device->info().lun;
  file.read_only = node.read_only;
  auto added = std::make_shared<const LunFile>(std::move(file));
  const uint64_t ino = next_ino_++;
  auto pos = std::find_if(node.files.begin(), node.files.end(),
                          [lun](const auto& f) { return f.second->device->info().lun > lun; });
  node.files.emplace(pos, ino, added);
  by_ino_[ino] = InodeRef{it->second, added};
  return Status::OK();
}

Status TreeFileSystem::RemoveLun(const std::string& target, const PathSet& paths,
                                 const std::string& file) {
  fuse_session* se = nullptr;
  uint64_t dir_ino = 0;
  uint64_t ino = 0;
  {
    MutexLock lock(&mu_);
    auto it = by_name_.find(target);
    if (it != by_name_.end() && it->second->paths.get() == &paths) {
      ino = FileIno(*it->second, file);
    }
    if (ino == 0) return Status::NotFound("no file " + target + "/" + file);
    std::erase_if(it->second->files, [ino](const auto& f) { return f.first == ino; });
    by_ino_.erase(ino);
    dir_ino = it->second->dir_ino;
    se = notify_;
  }
  if (se) {
    // With --page-cache a descriptor still open on the file would go on reading the pages cached
    // from the LUN gone (a LUN created again under its number gets a new file): dropped, its
    // reads reach us and fail with ENODEV.
    const int rc = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
    if (rc != 0 && rc != -ENOENT) {
      Log(LogLevel::kWarning,
          "the kernel kept the cached pages of " + target + "/" + file + ": " + std::strerror(-rc));
    }
    ForgetEntry(se, dir_ino, ino, file);
  }
  return Status::OK();
}

void TreeFileSystem::SizeChanged(const std::string& target, const std::string& file) {
  fuse_session* se = nullptr;
  uint64_t ino = 0;
  {
    MutexLock lock(&mu_);
    auto it = by_name_.find(target);
    if (it != by_name_.end()) ino = FileIno(*it->second, file);
    se = notify_;
  }
  if (!se || ino == 0) return;
  // Offset 0, length 0: the attributes and every cached page.
  const int rc = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
  if (rc != 0 && rc != -ENOENT) {
    Log(LogLevel::kWarning, "the kernel kept the cached size or pages of " + target + "/" + file +
                                ": " + std::strerror(-rc));
  }
}

bool TreeFileSystem::Contains(const std::string& name) const {
  MutexLock lock(&mu_);
  return by_name_.count(name) != 0;
}

std::vector<std::string> TreeFileSystem::Names() const {
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, node] : by_name_) names.push_back(name);
  return names;
}

std::vector<TreeTargetView> TreeFileSystem::Targets() const {
  MutexLock lock(&mu_);
  std::vector<TreeTargetView> out;
  for (const auto& [name, node] : by_name_) {
    TreeTargetView v{name, node->paths, {}, {}, node->all_luns, node->read_only};
    for (const auto& [ino, f] : node->files) {
      v.files.push_back(name + "/" + f->name);
      v.luns.push_back(f);
    }
    out.push_back(std::move(v));
  }
  return out;
}

Status TreeFileSystem::Remove(const std::string& name) {
  std::shared_ptr<Node> node;
  {
    MutexLock lock(&mu_);
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return Status::NotFound("no session with target " + name);
    node = it->second;
  }
  node->Close();
  fuse_session* se = nullptr;
  std::vector<std::pair<uint64_t, std::shared_ptr<const LunFile>>> files;
  {
    MutexLock lock(&mu_);
    by_name_.erase(name);
    by_ino_.erase(node->dir_ino);
    files = node->files;
    for (const auto& [ino, f] : files) by_ino_.erase(ino);
    se = notify_;
  }
  std::vector<const LunFile*> flush;
  for (const auto& [ino, f] : files) flush.push_back(f.get());
  const Status st = FlushAndLogOut(*node->paths, flush, config_.read_only);
  if (se) {
    for (const auto& [ino, f] : files) ForgetEntry(se, node->dir_ino, ino, f->name);
    ForgetEntry(se, kRootIno, node->dir_ino, node->name);
  }
  Log(LogLevel::kInfo, "logged out of " + name);
  return st;
}

TreeFileSystem::InodeRef TreeFileSystem::Resolve(uint64_t ino) const {
  MutexLock lock(&mu_);
  auto it = by_ino_.find(ino);
  if (it == by_ino_.end()) return {};
  return it->second;
}

void TreeFileSystem::FillDirAttr(uint64_t ino, nlink_t links, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = config_.uid;
  st->st_gid = config_.gid;
  st->st_atim = st->st_mtim = st->st_ctim = mounted_at_;
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = links;
  st->st_blksize = 4096;
}

// The operations, as static members of a friend so that they reach TreeFileSystem's internals.
struct TreeOpsImpl {
  // A request's use of one LUN file, holding off the target's logout until it ends.
  class FileUse {
   public:
    FileUse(TreeFileSystem* fs, fuse_ino_t ino) {
      if (ino == kRootIno) {
        error_ = EISDIR;
        return;
      }
      ref_ = fs->Resolve(ino);
      // Inode numbers are not reused: an unknown one belonged to a target logged out since.
      if (!ref_.node) {
        error_ = ENODEV;
      } else if (!ref_.file) {
        error_ = EISDIR;
      } else if (!ref_.node->Enter()) {
        error_ = ENODEV;
      } else {
        entered_ = true;
      }
    }
    ~FileUse() {
      if (entered_) ref_.node->Leave();
    }
    FileUse(const FileUse&) = delete;
    FileUse& operator=(const FileUse&) = delete;
    int error() const { return error_; }
    const LunFile& file() const { return *ref_.file; }

   private:
    TreeFileSystem::InodeRef ref_;
    int error_ = 0;
    bool entered_ = false;
  };

  static void Init(void* userdata, fuse_conn_info* conn) {
    InitConnection(static_cast<TreeFileSystem*>(userdata)->config_, conn);
  }

  static void ReplyEntry(fuse_req_t req, const struct stat& st) {
    fuse_entry_param e{};
    e.ino = st.st_ino;
    e.attr = st;
    e.attr_timeout = e.entry_timeout = kAttrTimeout;
    fuse_reply_entry(req, &e);
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    TreeFileSystem* fs = Self(req);
    struct stat st;
    if (parent == kRootIno) {
      std::shared_ptr<TreeFileSystem::Node> node;
      {
        MutexLock lock(&fs->mu_);
        auto it = fs->by_name_.find(name);
        if (it != fs->by_name_.end()) node = it->second;
      }
      if (!node) return (void)fuse_reply_err(req, ENOENT);
      fs->FillDirAttr(node->dir_ino, 2, &st);
      return ReplyEntry(req, st);
    }
    TreeFileSystem::InodeRef dir = fs->Resolve(parent);
    if (!dir.node) return (void)fuse_reply_err(req, ENOENT);
    if (dir.file) return (void)fuse_reply_err(req, ENOTDIR);
    uint64_t ino = 0;
    {
      MutexLock lock(&fs->mu_);
      ino = fs->FileIno(*dir.node, name);
    }
    if (ino == 0) return (void)fuse_reply_err(req, ENOENT);
    FileUse use(fs, ino);
    if (use.error()) return (void)fuse_reply_err(req, ENOENT);
    FillLunFileAttr(use.file(), fs->config_, ino, fs->mounted_at_, &st);
    ReplyEntry(req, st);
  }

  // The attributes of any inode; false (and the reply sent) when there is none.
  static bool Attr(fuse_req_t req, TreeFileSystem* fs, fuse_ino_t ino, struct stat* st) {
    if (ino == kRootIno) {
      const size_t targets = fs->Names().size();
      fs->FillDirAttr(ino, static_cast<nlink_t>(2 + targets), st);
      return true;
    }
    TreeFileSystem::InodeRef ref = fs->Resolve(ino);
    if (ref.node && !ref.file) {
      fs->FillDirAttr(ino, 2, st);
      return true;
    }
    FileUse use(fs, ino);
    if (use.error()) {
      fuse_reply_err(req, use.error());
      return false;
    }
    FillLunFileAttr(use.file(), fs->config_, ino, fs->mounted_at_, st);
    return true;
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    struct stat st;
    if (Attr(req, Self(req), ino, &st)) fuse_reply_attr(req, &st, kAttrTimeout);
  }

  static void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                      fuse_file_info*) {
    struct stat st;
    if (Attr(req, Self(req), ino, &st)) FixedSetAttr(req, st, attr, to_set);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    TreeFileSystem* fs = Self(req);
    FileUse use(fs, ino);
    if (use.error()) return (void)fuse_reply_err(req, use.error());
    LunFileOpen(req, use.file(), fs->config_, fi);
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    FileUse use(Self(req), ino);
    if (use.error()) return (void)fuse_reply_err(req, use.error());
    LunFileRead(req, use.file(), size, off);
  }

  static void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info* fi) {
    TreeFileSystem* fs = Self(req);
    FileUse use(fs, ino);
    if (use.error()) return (void)fuse_reply_err(req, use.error());
    LunFileWrite(req, use.file(), fs->config_, buf, size, off, fi);
  }

  static void Fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    FileUse use(Self(req), ino);
    if (use.error()) return (void)fuse_reply_err(req, use.error());
    LunFileFsync(req, use.file());
  }

  static void FsyncDir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

  struct DirEntry {
    std::string name;
    uint64_t ino;
    mode_t type;
  };

  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    TreeFileSystem* fs = Self(req);
    std::vector<DirEntry> entries = {{".", ino, S_IFDIR}, {"..", kRootIno, S_IFDIR}};
    if (ino == kRootIno) {
      MutexLock lock(&fs->mu_);
      for (const auto& [name, node] : fs->by_name_)
        entries.push_back({name, node->dir_ino, S_IFDIR});
    } else {
      TreeFileSystem::InodeRef dir = fs->Resolve(ino);
      if (!dir.node) return (void)fuse_reply_err(req, ENOENT);
      if (dir.file) return (void)fuse_reply_err(req, ENOTDIR);
      MutexLock lock(&fs->mu_);
      for (const auto& [file_ino, f] : dir.node->files) {
        entries.push_back({f->name, file_ino, S_IFREG});
      }
    }
    std::vector<char> buf(size);
    size_t used = 0;
    for (size_t k = std::max<off_t>(off, 0); k < entries.size(); ++k) {
      struct stat st {};
      st.st_ino = entries[k].ino;
      st.st_mode = entries[k].type;
      const size_t len = fuse_add_direntry(req, buf.data() + used, size - used,
                                           entries[k].name.c_str(), &st, static_cast<off_t>(k + 1));
      if (len > size - used) break;
      used += len;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) {
    TreeFileSystem* fs = Self(req);
    struct statvfs sv {};
    sv.f_bsize = 4096;
    sv.f_frsize = 512;
    sv.f_files = 1;
    for (const TreeTargetView& t : fs->Targets()) {
      sv.f_files += 1 + t.luns.size();
      for (const auto& f : t.luns) sv.f_blocks += f->device->size_bytes() / 512;
    }
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
  }

  static void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                        fuse_file_info*) {
    TreeFileSystem* fs = Self(req);
    FileUse use(fs, ino);
    if (use.error()) return (void)fuse_reply_err(req, use.error());
    LunFileFallocate(req, use.file(), fs->config_, mode, off, len);
  }

  static void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info*) {
    FileUse use(Self(req), ino);
    if (use.error()) return (void)fuse_reply_err(req, use.error());
    LunFileLseek(req, use.file(), off, whence);
  }
};

const fuse_lowlevel_ops& TreeFileSystem::Ops() {
  static const fuse_lowlevel_ops ops = MakeFuseOps<TreeOpsImpl>();
  return ops;
}

}  // namespace iser::fuse
