// The FUSE operations on one LUN file, shared by the flat mount (BlockFileSystem) and the tree
// (TreeFileSystem): each function serves one request on a LunFile and replies to it. The file
// semantics are those block_file_system.h describes; the caller finds the file for the inode and
// replies itself when there is none.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <ctime>

#include "frontends/fuse/lun_files.h"
#include "initiator/base/status.h"

namespace iser::fuse {

struct FileSystemConfig {
  bool page_cache = false;
  bool read_only = false;
  uid_t uid = 0;  // owner of the directories and the files
  gid_t gid = 0;
};

// The most bytes one FUSE read or write carries: libfuse 3.14 and Linux cap a request at 256
// pages.
inline constexpr uint32_t kMaxFuseIo = 1u << 20;

// Names and sizes change only when the target changes its LUNs, and then the kernel is told to
// drop what it cached (SizeWatch, the tree's LUN rescan), so it may cache them for long.
inline constexpr double kAttrTimeout = 86400;

// The init operation: request sizes, queue depth and capabilities for LUN files.
void InitConnection(const FileSystemConfig& config, fuse_conn_info* conn);

// Replies with the Status' errno (0 when ok), logging a failure.
void ReplyStatus(fuse_req_t req, const Status& st);

bool LunFileWritable(const LunFile& f, const FileSystemConfig& config);
// Attributes of the file; created: the time shown as its atime, mtime and ctime.
void FillLunFileAttr(const LunFile& f, const FileSystemConfig& config, uint64_t ino,
                     const timespec& created, struct stat* st);

// setattr on a file or directory whose attributes are fixed (current): times are accepted.
void FixedSetAttr(fuse_req_t req, const struct stat& current, const struct stat* attr, int to_set);
// Reads the LUN's capacity again (a LUN with other blocks now fails with EOPNOTSUPP; a failing
// READ CAPACITY keeps the last size), so that I/O through the new descriptor uses the size now.
void LunFileOpen(fuse_req_t req, const LunFile& f, const FileSystemConfig& config,
                 fuse_file_info* fi);
void LunFileRead(fuse_req_t req, const LunFile& f, size_t size, off_t off);
void LunFileWrite(fuse_req_t req, const LunFile& f, const FileSystemConfig& config, const char* buf,
                  size_t size, off_t off, fuse_file_info* fi);
void LunFileFsync(fuse_req_t req, const LunFile& f);
void LunFileFallocate(fuse_req_t req, const LunFile& f, const FileSystemConfig& config, int mode,
                      off_t off, off_t len);
void LunFileLseek(fuse_req_t req, const LunFile& f, off_t off, int whence);

// What both file systems refuse: their entries are the LUNs the target has, so creating,
// removing, linking or renaming one fails with EPERM.
struct RefusedOps {
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
};

// The operations table of a file system whose operations are static members of Impl (the flat
// mount's and the tree's): one list, so that both serve and refuse the same operations.
template <typename Impl>
fuse_lowlevel_ops MakeFuseOps() {
  fuse_lowlevel_ops ops{};
  ops.init = Impl::Init;
  ops.lookup = Impl::Lookup;
  ops.getattr = Impl::GetAttr;
  ops.setattr = Impl::SetAttr;
  ops.mknod = RefusedOps::Mknod;
  ops.mkdir = RefusedOps::Mkdir;
  ops.unlink = RefusedOps::Unlink;
  ops.rmdir = RefusedOps::Unlink;
  ops.symlink = RefusedOps::Symlink;
  ops.rename = RefusedOps::Rename;
  ops.link = RefusedOps::Link;
  ops.create = RefusedOps::Create;
  ops.open = Impl::Open;
  ops.read = Impl::Read;
  ops.write = Impl::Write;
  ops.fsync = Impl::Fsync;
  ops.fsyncdir = Impl::FsyncDir;
  ops.readdir = Impl::ReadDir;
  ops.statfs = Impl::StatFs;
  ops.fallocate = Impl::Fallocate;
  ops.lseek = Impl::Lseek;
  return ops;
}

}  // namespace iser::fuse
