// BlockDevice: a LUN seen as bytes. The API the frontends (CLI, nbdkit plugin, FUSE) use.
//
// Asynchronous: Submit(IoRequest*) for block-aligned requests of at most
// info().max_transfer_bytes (the caller owns the IoRequest; its callback runs on the session's I/O
// thread, or at once on the submitting thread when the request is refused or the session cannot
// take it (see task.h), and must not block). Synchronous methods accept any offset and length
// within the LUN: they split large requests into concurrent commands, and do read-modify-write for
// unaligned heads and tails under a range lock, so overlapping unaligned writes from many threads
// never lose each other's bytes. Every method may be called from any thread except the session's
// I/O thread (for the synchronous ones).
//
// A READ or WRITE completes only when it moved every byte it addressed: GOOD with a residual is
// a kIoError naming the shortfall, never a short success.
//
// Errors carry the failing command and the decoded sense; their codes map to errno values
// (ErrnoFor): kIoError → EIO, kNoSpace → ENOSPC, kReadOnly → EPERM, kInvalidArgument → EINVAL,
// kNotSupported → EOPNOTSUPP.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "initiator/base/mutex.h"
#include "initiator/base/status.h"
#include "initiator/base/thread_annotations.h"
#include "initiator/block/lun_info.h"
#include "initiator/paths/path_set.h"
#include "initiator/session/session.h"
#include "initiator/task/task.h"

namespace iser {

struct Extent {
  uint64_t offset;
  uint64_t length;
  bool allocated;  // false: a hole (deallocated or anchored)
  bool zero;       // reads as zeroes (a hole on an LBPRZ LUN)
};

enum class IoOp : uint8_t { kRead, kWrite };

struct IoRequest {
  IoOp op = IoOp::kRead;
  uint64_t offset = 0;  // bytes, multiple of the logical block size
  uint32_t length = 0;  // bytes, multiple of the logical block size, <= max_transfer_bytes
  uint8_t* buffer = nullptr;
  bool fua = false;
  bool keeps_unplaced_bytes = false;  // Task::keeps_unplaced_bytes
  void (*on_complete)(IoRequest* req, const Status& status) = nullptr;
  void* context = nullptr;
  // BlockDevice internals.
  Task task;
  class BlockDevice* device = nullptr;
};

class BlockDevice {
 public:
  // The session is shared: several BlockDevices (LUNs) and threads may use one session.
  static Result<std::unique_ptr<BlockDevice>> Open(std::shared_ptr<Session> session, uint64_t lun);
  // The LUN through every path of the set that serves it (path_set.h); several BlockDevices may
  // share one set.
  static Result<std::unique_ptr<BlockDevice>> Open(std::shared_ptr<PathSet> paths, uint64_t lun);
  ~BlockDevice();

  // What the LUN was at open; size_bytes() is its size now.
  const LunInfo& info() const { return info_; }
  // The LUN's size in bytes. After the target reported that the capacity changed (UNIT
  // ATTENTION 2A/09, Session::capacity_changes()) or that its LUNs changed (3F/0E,
  // Session::luns_changes(): tgtd resizes a LUN by deleting and adding it again) the next call
  // reads it again; a failing READ CAPACITY keeps the last size, with a warning. Not from the
  // session's I/O thread.
  uint64_t size_bytes();
  // Reads the capacity now (READ CAPACITY) and returns the size; a change is logged. Fails when
  // the command does, and with kNotSupported when the logical block size differs from the one at
  // open (another LUN has that number now: open it again).
  Result<uint64_t> RefreshSize();
  PathSet& paths() { return *paths_; }
  // Unique in this process and never reused, unlike the object's address: a buffer tagged with
  // it holds this BlockDevice's bytes only.
  uint64_t id() const { return id_; }

  void Submit(IoRequest* req);

  // keeps_unplaced_bytes: buf holds nothing but earlier reads of this BlockDevice (see id()), so
  // a transport may leave in place what a target answering GOOD did not write
  // (Task::keeps_unplaced_bytes).
  Status Read(uint64_t offset, void* buf, size_t len, bool keeps_unplaced_bytes = false);
  Status Write(uint64_t offset, const void* buf, size_t len, bool fua = false);
  Status Flush();
  // fua: durable on return (a SYNCHRONIZE CACHE over the range: UNMAP has no FUA bit).
  Status Trim(uint64_t offset, uint64_t len, bool fua = false);
  // may_trim: deallocate where the LUN reads unmapped blocks as zero (WRITE SAME with UNMAP).
  // fua: durable on return, on every path (WRITE SAME has no FUA bit: see WriteZeroes).
  Status WriteZeroes(uint64_t offset, uint64_t len, bool may_trim, bool fua = false);
  Status Prefetch(uint64_t offset, uint64_t len);
  // Allocation status from offset on (at least one extent unless len is 0), via GET LBA
  // STATUS; a LUN without it reports one allocated extent covering the range.
  Status Extents(uint64_t offset, uint64_t len, std::vector<Extent>* out);

 private:
  BlockDevice(std::shared_ptr<PathSet> paths, LunInfo info);
  Status CheckRange(uint64_t offset, uint64_t len, const char* what) const;
  static uint64_t NextId();
  Status ReadAligned(uint64_t offset, uint8_t* buf, uint64_t len, bool keeps_unplaced_bytes);
  Status WriteAligned(uint64_t offset, const uint8_t* buf, uint64_t len, bool fua);
  Status RunChunked(IoOp op, uint64_t offset, uint8_t* buf, uint64_t len, bool fua,
                    bool keeps_unplaced_bytes);
  Status Execute(Task& t, const std::string& what);
  Status SyncRange(uint64_t lba, uint64_t blocks);
  bool Overlaps(uint64_t first_block, uint64_t last_block) const ISER_REQUIRES(range_mu_);
  void LockRange(uint64_t first_block, uint64_t last_block);
  void UnlockRange(uint64_t first_block, uint64_t last_block);

  const uint64_t id_ = NextId();
  std::shared_ptr<PathSet> paths_;
  LunInfo info_;
  std::atomic<uint64_t> size_bytes_;
  std::atomic<uint64_t> capacity_changes_seen_{0};
  std::atomic<uint64_t> luns_changes_seen_{0};
  std::vector<uint8_t> zero_block_;

  Mutex range_mu_;
  CondVar range_cv_;
  std::vector<std::pair<uint64_t, uint64_t>> locked_ranges_ ISER_GUARDED_BY(range_mu_);
};

int ErrnoFor(const Status& status);

}  // namespace iser
