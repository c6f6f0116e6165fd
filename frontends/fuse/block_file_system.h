// BlockFileSystem: the FUSE low-level operations of a mount, a flat root directory holding one
// regular file per LUN. The files behave like the block devices they are:
// - the LUN's size, which only the target changes (stat and I/O follow it: SizeWatch):
//   truncating to another size, fallocate beyond the end and creating, removing or renaming
//   entries fail with EPERM; O_TRUNC is ignored, as on a block device; writes at or past the end
//   fail with ENOSPC, reads there return 0 bytes;
// - st_blksize is the LUN's physical (preferred) block size; write-protected LUNs (or a read-only
//   mount) are mode 0444 and refuse opening for writing with EROFS;
// - fsync/fdatasync send SYNCHRONIZE CACHE; writes on O_SYNC/O_DSYNC descriptors (or RWF_DSYNC)
//   use FUA, or a SYNCHRONIZE CACHE after the write when the LUN lacks FUA;
// - fallocate(PUNCH_HOLE|KEEP_SIZE) deallocates (UNMAP or WRITE SAME with UNMAP) only on LUNs
//   whose unmapped blocks read as zeroes (LBPRZ), zeroing partial blocks at the edges, and fails
//   with EOPNOTSUPP elsewhere, because a hole must read as zeroes; fallocate(ZERO_RANGE) writes
//   zeroes (WRITE SAME); plain fallocate inside the file succeeds (the blocks exist);
// - lseek SEEK_DATA/SEEK_HOLE come from GET LBA STATUS; only blocks that read as zeroes are holes;
// - any offset and length work (BlockDevice does the read-modify-write).
// Requests run concurrently on libfuse's worker threads; each blocks in BlockDevice while its
// commands are in flight on the shared session.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <vector>

#include "frontends/fuse/lun_file_ops.h"
#include "frontends/fuse/lun_files.h"

namespace iser::fuse {

class BlockFileSystem {
 public:
  BlockFileSystem(std::vector<LunFile> files, const FileSystemConfig& config);

  // Operations whose userdata (fuse_session_new's last argument) is a BlockFileSystem*.
  static const fuse_lowlevel_ops& Ops();

  std::vector<LunFile>& files() { return files_; }
  // Inode numbers: 1 is the root, file i is kFirstFileIno + i.
  static constexpr uint64_t kFirstFileIno = 2;

 private:
  friend struct OpsImpl;
  const LunFile* FileFor(uint64_t ino) const;
  void FillAttr(uint64_t ino, struct stat* st) const;

  std::vector<LunFile> files_;
  FileSystemConfig config_;
  timespec mounted_at_{};
};

}  // namespace iser::fuse
