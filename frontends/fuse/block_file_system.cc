#include "frontends/fuse/block_file_system.h"

#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "initiator/base/log.h"

namespace iser::fuse {

namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;

BlockFileSystem* Self(fuse_req_t req) {
  return static_cast<BlockFileSystem*>(fuse_req_userdata(req));
}

}  // namespace

BlockFileSystem::BlockFileSystem(std::vector<LunFile> files, const FileSystemConfig& config)
    : files_(std::move(files)), config_(config) {
  clock_gettime(CLOCK_REALTIME, &mounted_at_);
}

const LunFile* BlockFileSystem::FileFor(uint64_t ino) const {
  if (ino < kFirstFileIno || ino - kFirstFileIno >= files_.size()) return nullptr;
  return &files_[ino - kFirstFileIno];
}

void BlockFileSystem::FillAttr(uint64_t ino, struct stat* st) const {
  if (ino != kRootIno) return FillLunFileAttr(*FileFor(ino), config_, ino, mounted_at_, st);
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = config_.uid;
  st->st_gid = config_.gid;
  st->st_atim = st->st_mtim = st->st_ctim = mounted_at_;
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = 2;
  st->st_blksize = 4096;
}

// The operations, as static members of a friend so that they reach BlockFileSystem's internals.
struct OpsImpl {
  static void Init(void* userdata, fuse_conn_info* conn) {
    InitConnection(static_cast<BlockFileSystem*>(userdata)->config_, conn);
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    BlockFileSystem* fs = Self(req);
    if (parent != kRootIno) return (void)fuse_reply_err(req, ENOTDIR);
    for (size_t i = 0; i < fs->files_.size(); ++i) {
      if (fs->files_[i].name == name) {
        fuse_entry_param e{};
        e.ino = BlockFileSystem::kFirstFileIno + i;
        e.attr_timeout = e.entry_timeout = kAttrTimeout;
        fs->FillAttr(e.ino, &e.attr);
        return (void)fuse_reply_entry(req, &e);
      }
    }
    fuse_reply_err(req, ENOENT);
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    BlockFileSystem* fs = Self(req);
    if (ino != kRootIno && !fs->FileFor(ino)) return (void)fuse_reply_err(req, ENOENT);
    struct stat st;
    fs->FillAttr(ino, &st);
    fuse_reply_attr(req, &st, kAttrTimeout);
  }

  static void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                      fuse_file_info*) {
    BlockFileSystem* fs = Self(req);
    if (ino != kRootIno && !fs->FileFor(ino)) return (void)fuse_reply_err(req, ENOENT);
    struct stat st;
    fs->FillAttr(ino, &st);
    FixedSetAttr(req, st, attr, to_set);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    BlockFileSystem* fs = Self(req);
    const LunFile* f = fs->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ino == kRootIno ? EISDIR : ENOENT);
    LunFileOpen(req, *f, fs->config_, fi);
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    const LunFile* f = Self(req)->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    LunFileRead(req, *f, size, off);
  }

  static void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info* fi) {
    BlockFileSystem* fs = Self(req);
    const LunFile* f = fs->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    LunFileWrite(req, *f, fs->config_, buf, size, off, fi);
  }

  static void Fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    const LunFile* f = Self(req)->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    LunFileFsync(req, *f);
  }

  static void FsyncDir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    BlockFileSystem* fs = Self(req);
    if (ino != kRootIno) return (void)fuse_reply_err(req, ENOTDIR);
    std::vector<char> buf(size);
    size_t used = 0;
    const size_t count = fs->files_.size() + 2;
    for (size_t k = std::max<off_t>(off, 0); k < count; ++k) {
      struct stat st {};
      std::string name;
      if (k < 2) {
        name = k == 0 ? "." : "..";
        st.st_ino = kRootIno;
        st.st_mode = S_IFDIR;
      } else {
        name = fs->files_[k - 2].name;
        st.st_ino = k;
        st.st_mode = S_IFREG;
      }
      const size_t len = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                                           static_cast<off_t>(k + 1));
      if (len > size - used) break;
      used += len;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) {
    BlockFileSystem* fs = Self(req);
    struct statvfs sv {};
    sv.f_bsize = 4096;
    sv.f_frsize = 512;
    for (const LunFile& f : fs->files_) sv.f_blocks += f.device->size_bytes() / 512;
    sv.f_files = fs->files_.size() + 1;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
  }

  static void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                        fuse_file_info*) {
    BlockFileSystem* fs = Self(req);
    const LunFile* f = fs->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    LunFileFallocate(req, *f, fs->config_, mode, off, len);
  }

  static void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info*) {
    const LunFile* f = Self(req)->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    LunFileLseek(req, *f, off, whence);
  }
};

const fuse_lowlevel_ops& BlockFileSystem::Ops() {
  static const fuse_lowlevel_ops ops = MakeFuseOps<OpsImpl>();
  return ops;
}

}  // namespace iser::fuse
