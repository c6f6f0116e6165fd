#include "frontends/fuse/lun_file_ops.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "frontends/fuse/open_flags.h"
#include "initiator/base/log.h"
#include "initiator/block/lun_info.h"

namespace iser::fuse {

namespace {

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
  const uint64_t size = dev.size_bytes();
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

void InitConnection(const FileSystemConfig& config, fuse_conn_info* conn) {
  conn->max_write = kMaxFuseIo;
  conn->max_read = kMaxFuseIo;  // must match the max_read mount option
  // libaio/io_uring direct I/O reaches us as background requests: let a deep queue through.
  conn->max_background = 256;
  conn->congestion_threshold = 192;
  if (config.page_cache) conn->max_readahead = kMaxFuseIo;
  // O_TRUNC then arrives with open, where it is ignored as on a block device, instead of as a
  // truncate to 0 that would have to be refused.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;  // the target is ours alone while mounted
}

void ReplyStatus(fuse_req_t req, const Status& st) {
  if (!st.ok()) Log(LogLevel::kError, st.ToString());
  fuse_reply_err(req, st.ok() ? 0 : ErrnoFor(st));
}

bool LunFileWritable(const LunFile& f, const FileSystemConfig& config) {
  return !config.read_only && !f.read_only && !f.device->info().read_only;
}

void FillLunFileAttr(const LunFile& f, const FileSystemConfig& config, uint64_t ino,
                     const timespec& created, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = config.uid;
  st->st_gid = config.gid;
  st->st_atim = st->st_mtim = st->st_ctim = created;
  const LunInfo& info = f.device->info();
  st->st_mode = S_IFREG | (LunFileWritable(f, config) ? 0644 : 0444);
  st->st_nlink = 1;
  // The size now: a LUN the target grew shows its new size at the next stat.
  const uint64_t size = f.device->size_bytes();
  st->st_size = static_cast<off_t>(size);
  st->st_blksize = std::max(info.physical_block_size, info.logical_block_size);
  st->st_blocks = static_cast<blkcnt_t>(size / 512);
}

// Times are accepted and forgotten (tools touch files); size, mode and owner are fixed.
void FixedSetAttr(fuse_req_t req, const struct stat& current, const struct stat* attr, int to_set) {
  if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size != current.st_size) {
    Log(LogLevel::kWarning, "refusing to resize a LUN file: its size is the LUN's (EPERM)");
    return (void)fuse_reply_err(req, EPERM);
  }
  if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    return (void)fuse_reply_err(req, EPERM);
  }
  fuse_reply_attr(req, &current, kAttrTimeout);
}

void LunFileOpen(fuse_req_t req, const LunFile& f, const FileSystemConfig& config,
                 fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY && !LunFileWritable(f, config)) {
    return (void)fuse_reply_err(req, EROFS);
  }
  // A target may resize a LUN without a unit attention (tgtd deletes and creates it again): the
  // one READ CAPACITY an open costs gives every program that opens the file the size now.
  const uint64_t size_before = f.device->size_bytes();
  Result<uint64_t> size = f.device->RefreshSize();
  if (size.status().code() == StatusCode::kNotSupported) return ReplyStatus(req, size.status());
  if (!size.ok()) Log(LogLevel::kWarning, "open of " + f.name + ": " + size.status().ToString());
  // Another size may be another LUN (the read buffer's waiver ends; KeepCachedPages counts its
  // own checks).
  if (!config.page_cache && size.ok() && *size != size_before) f.cached->changes.fetch_add(1);
  fi->direct_io = !config.page_cache;
  if (config.page_cache) {
    // The kernel drops the file's cached pages at this open unless told to keep them. A LUN
    // deleted and created again under its number says so with no unit attention on itself
    // (tgtd), so its identity is read at each open (two INQUIRY commands more): pages read from
    // the old LUN must not be served as the new one's.
    Result<LunIdentity> identity = ReadLunIdentity(f.device->paths(), f.device->info().lun);
    if (!identity.ok()) {
      Log(LogLevel::kWarning,
          "open of " + f.name + ": its cached pages are dropped: " + identity.status().ToString());
    }
    fi->keep_cache = size.ok() && identity.ok() && KeepCachedPages(f, *identity, *size);
  }
  fi->noflush = 1;  // close() needs no round trip: durability is fsync's job
  // Writes never extend a LUN file, so the kernel may run them side by side (open_flags.h): one
  // write waiting for a path's recovery then holds only its own writer.
  if (fi->direct_io) AllowParallelDirectWritesInNextReply();
  fuse_reply_open(req, fi);
}

void LunFileRead(fuse_req_t req, const LunFile& f, size_t size, off_t off) {
  const uint64_t end = f.device->size_bytes();
  if (off < 0 || static_cast<uint64_t>(off) >= end) return (void)fuse_reply_buf(req, nullptr, 0);
  const size_t n = std::min<uint64_t>(size, end - off);
  // One buffer per worker thread, reused: requests are up to 1 MiB. It serves every file, so a
  // read may leave in it what a target did not place only where it holds nothing but this LUN's
  // bytes (or zeroes): another LUN's must never reach this file's reader, nor the bytes of a LUN
  // the target deleted and created again under the number since, as far as anything says so: a
  // unit attention, another size at an open, or (with --page-cache, which reads it at each open)
  // another identity. A LUN created again with the same size, without a unit attention, cannot be
  // told from the old one.
  thread_local std::vector<uint8_t> buf;
  // Its first buf_lun_bytes hold only what reads of the BlockDevice buf_lun placed there while
  // its changes count was buf_changes.
  thread_local uint64_t buf_lun = 0;
  thread_local uint64_t buf_changes = 0;
  thread_local size_t buf_lun_bytes = 0;
  if (buf.size() < n) buf.resize(n);
  auto changes = [&f] { return f.device->paths().lun_changes() + f.cached->changes.load(); };
  const uint64_t changes_before = changes();
  const bool same_lun =
      buf_lun == f.device->id() && buf_changes == changes_before && n <= buf_lun_bytes;
  // A read that fails may have placed some bytes and not others.
  buf_lun = 0;
  Status st = f.device->Read(off, buf.data(), n, same_lun);
  // The LUN changed under the read (a unit attention it got and retried): what it left in place
  // may be the old LUN's.
  if (st.ok() && same_lun && changes() != changes_before) st = f.device->Read(off, buf.data(), n);
  if (st.ok()) {
    buf_lun = f.device->id();
    buf_changes = changes_before;
    buf_lun_bytes = same_lun ? buf_lun_bytes : n;
  }
  if (!st.ok()) return ReplyStatus(req, st);
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), n);
}

void LunFileWrite(fuse_req_t req, const LunFile& f, const FileSystemConfig& config, const char* buf,
                  size_t size, off_t off, fuse_file_info* fi) {
  if (!LunFileWritable(f, config)) return (void)fuse_reply_err(req, EROFS);
  const LunInfo& info = f.device->info();
  const uint64_t end = f.device->size_bytes();
  if (off < 0 || static_cast<uint64_t>(off) >= end) return (void)fuse_reply_err(req, ENOSPC);
  const size_t n = std::min<uint64_t>(size, end - off);
  // The kernel passes the descriptor's O_SYNC/O_DSYNC (and RWF_DSYNC) with every write.
  const bool sync = (fi->flags & O_DSYNC) != 0;
  Status st = f.device->Write(off, buf, n, sync && info.fua);
  if (st.ok() && sync && !info.fua && info.write_cache) st = f.device->Flush();
  if (!st.ok()) return ReplyStatus(req, st);
  fuse_reply_write(req, n);
}

void LunFileFsync(fuse_req_t req, const LunFile& f) {
  ReplyStatus(req, f.device->Flush());
}

void LunFileFallocate(fuse_req_t req, const LunFile& f, const FileSystemConfig& config, int mode,
                      off_t off, off_t len) {
  if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
    return (void)fuse_reply_err(req, EOPNOTSUPP);
  }
  if (!LunFileWritable(f, config)) return (void)fuse_reply_err(req, EROFS);
  if (off < 0 || len <= 0) return (void)fuse_reply_err(req, EINVAL);
  const uint64_t size = f.device->size_bytes();
  uint64_t end = static_cast<uint64_t>(off) + static_cast<uint64_t>(len);
  if (end > size) {
    // Past the end only what keeps the size can be done, on the part inside the file.
    if (!(mode & FALLOC_FL_KEEP_SIZE)) return (void)fuse_reply_err(req, EPERM);
    end = size;
  }
  if (static_cast<uint64_t>(off) >= end) return (void)fuse_reply_err(req, 0);
  if (mode & FALLOC_FL_PUNCH_HOLE) return ReplyStatus(req, PunchHole(*f.device, off, end - off));
  if (mode & FALLOC_FL_ZERO_RANGE) {
    return ReplyStatus(req, f.device->WriteZeroes(off, end - off, /*may_trim=*/false));
  }
  fuse_reply_err(req, 0);  // allocating blocks that already exist
}

void LunFileLseek(fuse_req_t req, const LunFile& f, off_t off, int whence) {
  if (whence != SEEK_DATA && whence != SEEK_HOLE) return (void)fuse_reply_err(req, EINVAL);
  if (off < 0) return (void)fuse_reply_err(req, ENXIO);
  uint64_t result = 0;
  const Status st = SeekDataOrHole(*f.device, off, whence == SEEK_DATA, &result);
  if (st.code() == StatusCode::kNotFound) return (void)fuse_reply_err(req, ENXIO);
  if (!st.ok()) return ReplyStatus(req, st);
  fuse_reply_lseek(req, static_cast<off_t>(result));
}

}  // namespace iser::fuse
