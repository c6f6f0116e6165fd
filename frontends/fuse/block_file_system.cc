#include "frontends/fuse/block_file_system.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "initiator/base/log.h"

namespace iser::fuse {

namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
// Sizes and names never change while mounted, so the kernel may cache them for long.
constexpr double kAttrTimeout = 86400;

BlockFileSystem* Self(fuse_req_t req) {
  return static_cast<BlockFileSystem*>(fuse_req_userdata(req));
}

void ReplyStatus(fuse_req_t req, const Status& st) {
  if (!st.ok()) Log(LogLevel::kError, st.ToString());
  fuse_reply_err(req, st.ok() ? 0 : ErrnoFor(st));
}

// A hole must read as zeroes, so deallocation is used only on LUNs that promise that (LBPRZ).
Status PunchHole(BlockDevice& dev, uint64_t off, uint64_t len) {
  const LunInfo& info = dev.info();
  if (!info.unmapped_reads_zero || !(info.unmap || info.write_same_unmap)) {
    return Status::NotSupported("LUN " + std::to_string(info.lun) +
                                " cannot deallocate blocks that then read as zeroes");
  }
  if (info.write_same_unmap) return dev.WriteZeroes(off, len, /*may_trim=*/true);
  // UNMAP only: whole blocks are unmapped, the partial ones at the edges get zeroes written.
  const uint64_t bs = info.logical_block_size;
  const uint64_t end = off + len;
  const uint64_t first_whole = std::min(end, (off + bs - 1) / bs * bs);
  const uint64_t last_whole = std::max(first_whole, end / bs * bs);
  if (first_whole > off) ISER_RETURN_IF_ERROR(dev.WriteZeroes(off, first_whole - off, false));
  if (last_whole > first_whole)
    ISER_RETURN_IF_ERROR(dev.Trim(first_whole, last_whole - first_whole));
  if (end > last_whole) ISER_RETURN_IF_ERROR(dev.WriteZeroes(last_whole, end - last_whole, false));
  return Status::OK();
}

// SEEK_DATA (data = true) or SEEK_HOLE from off; ENXIO past the end or when no data follows.
Status SeekDataOrHole(BlockDevice& dev, uint64_t off, bool data, uint64_t* result) {
  const uint64_t size = dev.info().size_bytes;
  if (off >= size) return Status(StatusCode::kNotFound, "seek past the end");
  std::vector<Extent> extents;
  uint64_t pos = off;
  while (pos < size) {
    ISER_RETURN_IF_ERROR(dev.Extents(pos, size - pos, &extents));
    const uint64_t before = pos;
    for (const Extent& e : extents) {
      const bool hole = !e.allocated && e.zero;
      if (hole != data && e.offset + e.length > pos) {
        *result = std::max(e.offset, pos);
        return Status::OK();
      }
      pos = std::max(pos, e.offset + e.length);
    }
    if (pos <= before) break;  // no progress: treat the rest as data
  }
  if (data && pos < size) {
    *result = pos;
    return Status::OK();
  }
  if (data) return Status(StatusCode::kNotFound, "no data after the offset");
  *result = size;  // the virtual hole at the end of every file
  return Status::OK();
}

}  // namespace

BlockFileSystem::BlockFileSystem(std::vector<LunFile> files, const FileSystemConfig& config)
    : files_(std::move(files)), config_(config) {
  clock_gettime(CLOCK_REALTIME, &mounted_at_);
}

const LunFile* BlockFileSystem::FileFor(uint64_t ino) const {
  if (ino < 2 || ino - 2 >= files_.size()) return nullptr;
  return &files_[ino - 2];
}

bool BlockFileSystem::Writable(const LunFile& f) const {
  return !config_.read_only && !f.device->info().read_only;
}

void BlockFileSystem::FillAttr(uint64_t ino, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = config_.uid;
  st->st_gid = config_.gid;
  st->st_atim = st->st_mtim = st->st_ctim = mounted_at_;
  if (ino == kRootIno) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
    st->st_blksize = 4096;
    return;
  }
  const LunFile* f = FileFor(ino);
  const LunInfo& info = f->device->info();
  st->st_mode = S_IFREG | (Writable(*f) ? 0644 : 0444);
  st->st_nlink = 1;
  // The size now: a LUN the target grew shows its new size at the next stat.
  const uint64_t size = f->device->size_bytes();
  st->st_size = static_cast<off_t>(size);
  st->st_blksize = std::max(info.physical_block_size, info.logical_block_size);
  st->st_blocks = static_cast<blkcnt_t>(size / 512);
}

// The operations, as static members of a friend so that they reach BlockFileSystem's internals.
struct OpsImpl {
  static void Init(void* userdata, fuse_conn_info* conn) {
    auto* fs = static_cast<BlockFileSystem*>(userdata);
    conn->max_write = kMaxFuseIo;
    conn->max_read = kMaxFuseIo;  // must match the max_read mount option
    // libaio/io_uring direct I/O reaches us as background requests: let a deep queue through.
    conn->max_background = 256;
    conn->congestion_threshold = 192;
    if (fs->config_.page_cache) conn->max_readahead = kMaxFuseIo;
    // O_TRUNC then arrives with open, where it is ignored as on a block device, instead of as a
    // truncate to 0 that would have to be refused.
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;  // the target is ours alone while mounted
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    BlockFileSystem* fs = Self(req);
    if (parent != kRootIno) return (void)fuse_reply_err(req, ENOTDIR);
    for (size_t i = 0; i < fs->files_.size(); ++i) {
      if (fs->files_[i].name == name) {
        fuse_entry_param e{};
        e.ino = i + 2;
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

  // Times are accepted and forgotten (tools touch files); size, mode and owner are fixed.
  static void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                      fuse_file_info*) {
    BlockFileSystem* fs = Self(req);
    if (ino != kRootIno && !fs->FileFor(ino)) return (void)fuse_reply_err(req, ENOENT);
    struct stat st;
    fs->FillAttr(ino, &st);
    if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size != st.st_size) {
      Log(LogLevel::kWarning, "refusing to resize a LUN file: its size is the LUN's (EPERM)");
      return (void)fuse_reply_err(req, EPERM);
    }
    if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
      return (void)fuse_reply_err(req, EPERM);
    }
    fuse_reply_attr(req, &st, kAttrTimeout);
  }

  static void Refuse(fuse_req_t req) { fuse_reply_err(req, EPERM); }
  static void Mknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { Refuse(req); }
  static void Mkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { Refuse(req); }
  static void Unlink(fuse_req_t req, fuse_ino_t, const char*) { Refuse(req); }
  static void Symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { Refuse(req); }
  static void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*,
                     unsigned int) {
    Refuse(req);
  }
  static void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { Refuse(req); }
  static void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) {
    Refuse(req);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    BlockFileSystem* fs = Self(req);
    const LunFile* f = fs->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ino == kRootIno ? EISDIR : ENOENT);
    if ((fi->flags & O_ACCMODE) != O_RDONLY && !fs->Writable(*f)) {
      return (void)fuse_reply_err(req, EROFS);
    }
    fi->direct_io = !fs->config_.page_cache;
    fi->keep_cache = fs->config_.page_cache;
    fi->noflush = 1;  // close() needs no round trip: durability is fsync's job
    fuse_reply_open(req, fi);
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
    const LunFile* f = Self(req)->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    const uint64_t end = f->device->info().size_bytes;
    if (off < 0 || static_cast<uint64_t>(off) >= end) return (void)fuse_reply_buf(req, nullptr, 0);
    const size_t n = std::min<uint64_t>(size, end - off);
    // One buffer per worker thread, reused: requests are up to 1 MiB.
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < n) buf.resize(n);
    const Status st = f->device->Read(off, buf.data(), n);
    if (!st.ok()) return ReplyStatus(req, st);
    fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), n);
  }

  static void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info* fi) {
    BlockFileSystem* fs = Self(req);
    const LunFile* f = fs->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    if (!fs->Writable(*f)) return (void)fuse_reply_err(req, EROFS);
    const LunInfo& info = f->device->info();
    if (off < 0 || static_cast<uint64_t>(off) >= info.size_bytes) {
      return (void)fuse_reply_err(req, ENOSPC);
    }
    const size_t n = std::min<uint64_t>(size, info.size_bytes - off);
    // The kernel passes the descriptor's O_SYNC/O_DSYNC (and RWF_DSYNC) with every write.
    const bool sync = (fi->flags & O_DSYNC) != 0;
    Status st = f->device->Write(off, buf, n, sync && info.fua);
    if (st.ok() && sync && !info.fua && info.write_cache) st = f->device->Flush();
    if (!st.ok()) return ReplyStatus(req, st);
    fuse_reply_write(req, n);
  }

  static void Fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
    const LunFile* f = Self(req)->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    ReplyStatus(req, f->device->Flush());
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
    for (const LunFile& f : fs->files_) sv.f_blocks += f.device->info().size_bytes / 512;
    sv.f_files = fs->files_.size() + 1;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
  }

  static void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                        fuse_file_info*) {
    BlockFileSystem* fs = Self(req);
    const LunFile* f = fs->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
      return (void)fuse_reply_err(req, EOPNOTSUPP);
    }
    if (!fs->Writable(*f)) return (void)fuse_reply_err(req, EROFS);
    if (off < 0 || len <= 0) return (void)fuse_reply_err(req, EINVAL);
    const uint64_t size = f->device->info().size_bytes;
    uint64_t end = static_cast<uint64_t>(off) + static_cast<uint64_t>(len);
    if (end > size) {
      // Past the end only what keeps the size can be done, on the part inside the file.
      if (!(mode & FALLOC_FL_KEEP_SIZE)) return (void)fuse_reply_err(req, EPERM);
      end = size;
    }
    if (static_cast<uint64_t>(off) >= end) return (void)fuse_reply_err(req, 0);
    if (mode & FALLOC_FL_PUNCH_HOLE) return ReplyStatus(req, PunchHole(*f->device, off, end - off));
    if (mode & FALLOC_FL_ZERO_RANGE) {
      return ReplyStatus(req, f->device->WriteZeroes(off, end - off, /*may_trim=*/false));
    }
    fuse_reply_err(req, 0);  // allocating blocks that already exist
  }

  static void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info*) {
    const LunFile* f = Self(req)->FileFor(ino);
    if (!f) return (void)fuse_reply_err(req, ENOENT);
    if (whence != SEEK_DATA && whence != SEEK_HOLE) return (void)fuse_reply_err(req, EINVAL);
    if (off < 0) return (void)fuse_reply_err(req, ENXIO);
    uint64_t result = 0;
    const Status st = SeekDataOrHole(*f->device, off, whence == SEEK_DATA, &result);
    if (st.code() == StatusCode::kNotFound) return (void)fuse_reply_err(req, ENXIO);
    if (!st.ok()) return ReplyStatus(req, st);
    fuse_reply_lseek(req, static_cast<off_t>(result));
  }

  static fuse_lowlevel_ops Make() {
    fuse_lowlevel_ops ops{};
    ops.init = Init;
    ops.lookup = Lookup;
    ops.getattr = GetAttr;
    ops.setattr = SetAttr;
    ops.mknod = Mknod;
    ops.mkdir = Mkdir;
    ops.unlink = Unlink;
    ops.rmdir = Unlink;
    ops.symlink = Symlink;
    ops.rename = Rename;
    ops.link = Link;
    ops.create = Create;
    ops.open = Open;
    ops.read = Read;
    ops.write = Write;
    ops.fsync = Fsync;
    ops.fsyncdir = FsyncDir;
    ops.readdir = ReadDir;
    ops.statfs = StatFs;
    ops.fallocate = Fallocate;
    ops.lseek = Lseek;
    return ops;
  }
};

const fuse_lowlevel_ops& BlockFileSystem::Ops() {
  static const fuse_lowlevel_ops ops = OpsImpl::Make();
  return ops;
}

}  // namespace iser::fuse
