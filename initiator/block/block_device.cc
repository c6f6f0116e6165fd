#include "initiator/block/block_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "initiator/base/log.h"
#include "initiator/base/notification.h"
#include "initiator/scsi/commands.h"

namespace iser {

namespace {

constexpr int kMaxChunksInFlight = 8;
constexpr uint32_t kMaxUnmapDescriptorsPerCommand = 64;
// WRITE SAME without a reported limit: bound one command so a target's command timeout holds.
constexpr uint64_t kDefaultWriteSameBlocks = 1u << 16;

std::string Where(const LunInfo& info, uint64_t lba, uint64_t blocks) {
  return " on LUN " + std::to_string(info.lun) + " at LBA " + std::to_string(lba) + " (" +
         std::to_string(blocks) + " blocks)";
}

// A READ or WRITE that ends GOOD must have moved every byte it addressed. A residual says it did
// not: reported as a full transfer, a READ would hand back whatever the buffer held before, and a
// WRITE would claim data stored that never was.
Status TransferStatus(const Task& t, const std::string& what) {
  Status st = scsi::TaskStatus(t, what);
  if (!st.ok() || t.residual == 0 || !(t.residual_underflow || t.residual_overflow)) return st;
  if (t.residual_underflow) {
    return Status::IoError(what + ": the target reported GOOD status but moved " +
                           std::to_string(TransferredBytes(t)) + " of " +
                           std::to_string(t.transfer_length) + " bytes (underflow residual " +
                           std::to_string(t.residual) + ")");
  }
  return Status::IoError(what + ": the target reported GOOD status for a transfer " +
                         std::to_string(t.residual) + " bytes longer than the " +
                         std::to_string(t.transfer_length) +
                         " the command addressed (overflow residual): is the block size still " +
                         "the one the LUN had when opened?");
}

// How a READ or WRITE of this device at `lba` ended. The common ending (GOOD, every byte moved)
// costs no string.
Status IoStatus(const Task& t, const LunInfo& info, uint64_t lba) {
  if (t.status.ok() && t.scsi_status == 0 && t.residual == 0) return Status::OK();
  return TransferStatus(t, std::string(scsi::CommandName(t)) +
                               Where(info, lba, t.transfer_length / info.logical_block_size));
}

}  // namespace

int ErrnoFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNoSpace:
      return ENOSPC;
    case StatusCode::kReadOnly:
      return EPERM;
    case StatusCode::kInvalidArgument:
      return EINVAL;
    case StatusCode::kNotSupported:
      return EOPNOTSUPP;
    case StatusCode::kTimeout:
      return ETIMEDOUT;
    case StatusCode::kAborted:
      return ESHUTDOWN;
    case StatusCode::kResourceExhausted:
      return ENOMEM;
    default:
      return EIO;
  }
}

Result<std::unique_ptr<BlockDevice>> BlockDevice::Open(std::shared_ptr<Session> session,
                                                       uint64_t lun) {
  return Open(PathSet::Of(std::move(session)), lun);
}

Result<std::unique_ptr<BlockDevice>> BlockDevice::Open(std::shared_ptr<PathSet> paths,
                                                       uint64_t lun) {
  // Through the set: a path that is down, standby or unavailable (ALUA) leaves it to another.
  Result<LunInfo> info = ProbeLun(*paths, lun);
  if (!info.ok()) return info.status();
  if (!info->is_disk) {
    return Status::NotSupported("LUN " + std::to_string(lun) + " of " + paths->target_name() +
                                " is a " + info->device_type_name +
                                " device, not a disk (direct access)");
  }
  ISER_RETURN_IF_ERROR(paths->AddLun(lun));
  info->max_transfer_bytes = std::min(info->max_transfer_bytes, paths->max_transfer_bytes());
  return std::unique_ptr<BlockDevice>(new BlockDevice(std::move(paths), std::move(*info)));
}

BlockDevice::BlockDevice(std::shared_ptr<PathSet> paths, LunInfo info)
    : paths_(std::move(paths)),
      info_(std::move(info)),
      size_bytes_(info_.size_bytes),
      capacity_changes_seen_(paths_->capacity_changes()),
      luns_changes_seen_(paths_->luns_changes()),
      zero_block_(info_.logical_block_size) {}

uint64_t BlockDevice::NextId() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

BlockDevice::~BlockDevice() = default;

uint64_t BlockDevice::size_bytes() {
  const uint64_t capacity = paths_->capacity_changes();
  const uint64_t luns = paths_->luns_changes();
  const bool capacity_moved = capacity_changes_seen_.exchange(capacity) != capacity;
  const bool luns_moved = luns_changes_seen_.exchange(luns) != luns;
  if (capacity_moved || luns_moved) {
    // A failed READ CAPACITY keeps the last size; the next change tries again.
    Result<uint64_t> size = RefreshSize();
    if (!size.ok()) {
      Log(LogLevel::kWarning, "LUN " + std::to_string(info_.lun) + " of " + paths_->target_name() +
                                  ": the target reported a change, but its new capacity could "
                                  "not be read (" +
                                  size.status().ToString() + "); keeping " +
                                  std::to_string(size_bytes_.load()) + " bytes");
    }
  }
  return size_bytes_.load();
}

Result<uint64_t> BlockDevice::RefreshSize() {
  Result<scsi::Capacity> cap = ReadLunCapacity(*paths_, info_.lun);
  if (!cap.ok()) return cap.status();
  if (cap->block_size != info_.logical_block_size) {
    return Status::NotSupported("LUN " + std::to_string(info_.lun) + " of " +
                                paths_->target_name() + " now has " +
                                std::to_string(cap->block_size) + "-byte blocks instead of " +
                                std::to_string(info_.logical_block_size));
  }
  const uint64_t size = cap->blocks * cap->block_size;
  const uint64_t before = size_bytes_.exchange(size);
  if (before != size) {
    Log(LogLevel::kInfo, "LUN " + std::to_string(info_.lun) + " of " + paths_->target_name() +
                             ": capacity changed from " + std::to_string(before) + " to " +
                             std::to_string(size) + " bytes");
  }
  return size;
}

Status BlockDevice::CheckRange(uint64_t offset, uint64_t len, const char* what) const {
  const uint64_t size = size_bytes_.load();
  if (offset > size || len > size - offset) {
    return Status::InvalidArgument(std::string(what) + " of " + std::to_string(len) +
                                   " bytes at offset " + std::to_string(offset) +
                                   " is beyond the end of LUN " + std::to_string(info_.lun) + " (" +
                                   std::to_string(size) + " bytes)");
  }
  return Status::OK();
}

Status BlockDevice::Execute(Task& t, const std::string& what) {
  t.lun = info_.lun;
  paths_->Execute(&t);
  return scsi::TaskStatus(t, what);
}

void BlockDevice::Submit(IoRequest* req) {
  const uint32_t bs = info_.logical_block_size;
  Status st;
  if (req->offset % bs != 0 || req->length % bs != 0 || req->length == 0 ||
      req->length > info_.max_transfer_bytes) {
    st = Status::InvalidArgument("asynchronous requests must be whole blocks of " +
                                 std::to_string(bs) + " bytes, at most " +
                                 std::to_string(info_.max_transfer_bytes) + " bytes");
  } else {
    st = CheckRange(req->offset, req->length, req->op == IoOp::kRead ? "read" : "write");
  }
  if (!st.ok()) {
    req->on_complete(req, st);
    return;
  }
  req->device = this;
  Task& t = req->task;
  const uint64_t lba = req->offset / bs;
  const uint32_t blocks = req->length / bs;
  if (req->op == IoOp::kRead) {
    scsi::Read(t, lba, blocks, req->buffer, req->length);
  } else {
    scsi::Write(t, lba, blocks, req->buffer, req->length, req->fua);
  }
  t.keeps_unplaced_bytes = req->keeps_unplaced_bytes;
  t.lun = info_.lun;
  t.context = req;
  t.on_complete = [](Task* task) {
    auto* r = static_cast<IoRequest*>(task->context);
    const LunInfo& info = r->device->info_;
    r->on_complete(r, IoStatus(*task, info, r->offset / info.logical_block_size));
  };
  paths_->Submit(&t);
}

// Runs one large aligned read or write as up to kMaxChunksInFlight concurrent commands of at
// most max_transfer_bytes each; the completion of one chunk submits the next.
Status BlockDevice::RunChunked(IoOp op, uint64_t offset, uint8_t* buf, uint64_t len, bool fua,
                               bool keeps_unplaced_bytes) {
  struct Run {
    BlockDevice* dev;
    IoOp op;
    uint64_t offset;
    uint8_t* buf;
    uint64_t len;
    bool fua;
    bool keeps_unplaced_bytes;
    Mutex mu;
    uint64_t next ISER_GUARDED_BY(mu) = 0;
    int outstanding ISER_GUARDED_BY(mu) = 0;
    Status error ISER_GUARDED_BY(mu);
    Notification done;
    Task tasks[kMaxChunksInFlight];

    // Prepares t for the next chunk; false when nothing is left.
    bool Next(Task& t) ISER_REQUIRES(mu) {
      if (next >= len || !error.ok()) return false;
      const uint32_t bs = dev->info_.logical_block_size;
      const uint32_t n =
          static_cast<uint32_t>(std::min<uint64_t>(len - next, dev->info_.max_transfer_bytes));
      const uint64_t lba = (offset + next) / bs;
      if (op == IoOp::kRead) {
        scsi::Read(t, lba, n / bs, buf + next, n);
      } else {
        scsi::Write(t, lba, n / bs, buf + next, n, fua);
      }
      t.lun = dev->info_.lun;
      t.keeps_unplaced_bytes = keeps_unplaced_bytes;
      t.context = this;
      t.on_complete = &Run::Done;
      next += n;
      ++outstanding;
      return true;
    }
    static void Done(Task* t) {
      Run* r = static_cast<Run*>(t->context);
      bool resubmit;
      bool finished;
      {
        MutexLock lock(&r->mu);
        --r->outstanding;
        if (r->error.ok()) r->error = IoStatus(*t, r->dev->info_, LoadBe64Lba(*t));
        resubmit = r->Next(*t);
        finished = r->outstanding == 0;
      }
      if (resubmit) {
        r->dev->paths_->Submit(t);
      } else if (finished) {
        r->done.Notify();
      }
    }
    static uint64_t LoadBe64Lba(const Task& t) {
      return t.cdb_length == 16 ? LoadBe64(&t.cdb[2]) : LoadBe32(&t.cdb[2]);
    }
  };
  Run run{this, op, offset, buf, len, fua, keeps_unplaced_bytes};
  int started = 0;
  {
    MutexLock lock(&run.mu);
    while (started < kMaxChunksInFlight && run.Next(run.tasks[started])) ++started;
  }
  if (started == 0) return Status::OK();
  for (int i = 0; i < started; ++i) paths_->Submit(&run.tasks[i]);
  run.done.Wait();
  MutexLock lock(&run.mu);
  return run.error;
}

Status BlockDevice::ReadAligned(uint64_t offset, uint8_t* buf, uint64_t len,
                                bool keeps_unplaced_bytes) {
  return RunChunked(IoOp::kRead, offset, buf, len, false, keeps_unplaced_bytes);
}

Status BlockDevice::WriteAligned(uint64_t offset, const uint8_t* buf, uint64_t len, bool fua) {
  return RunChunked(IoOp::kWrite, offset, const_cast<uint8_t*>(buf), len, fua, false);
}

Status BlockDevice::Read(uint64_t offset, void* out, size_t len, bool keeps_unplaced_bytes) {
  ISER_RETURN_IF_ERROR(CheckRange(offset, len, "read"));
  if (len == 0) return Status::OK();
  auto* buf = static_cast<uint8_t*>(out);
  const uint32_t bs = info_.logical_block_size;
  const uint64_t head = offset % bs;
  if (head == 0 && len % bs == 0) return ReadAligned(offset, buf, len, keeps_unplaced_bytes);
  std::vector<uint8_t> block(bs);
  if (head != 0) {
    ISER_RETURN_IF_ERROR(ReadAligned(offset - head, block.data(), bs, false));
    const size_t n = std::min<uint64_t>(bs - head, len);
    std::memcpy(buf, block.data() + head, n);
    buf += n;
    offset += n;
    len -= n;
  }
  const uint64_t middle = len - len % bs;
  if (middle > 0) ISER_RETURN_IF_ERROR(ReadAligned(offset, buf, middle, keeps_unplaced_bytes));
  if (len > middle) {
    ISER_RETURN_IF_ERROR(ReadAligned(offset + middle, block.data(), bs, false));
    std::memcpy(buf + middle, block.data(), len - middle);
  }
  return Status::OK();
}

bool BlockDevice::Overlaps(uint64_t first, uint64_t last) const {
  for (const auto& [a, b] : locked_ranges_) {
    if (a <= last && first <= b) return true;
  }
  return false;
}

void BlockDevice::LockRange(uint64_t first, uint64_t last) {
  MutexLock lock(&range_mu_);
  while (Overlaps(first, last)) range_cv_.Wait(&range_mu_);
  locked_ranges_.emplace_back(first, last);
}

void BlockDevice::UnlockRange(uint64_t first, uint64_t last) {
  {
    MutexLock lock(&range_mu_);
    auto it = std::find(locked_ranges_.begin(), locked_ranges_.end(), std::make_pair(first, last));
    locked_ranges_.erase(it);
  }
  range_cv_.SignalAll();
}

Status BlockDevice::Write(uint64_t offset, const void* in, size_t len, bool fua) {
  ISER_RETURN_IF_ERROR(CheckRange(offset, len, "write"));
  if (len == 0) return Status::OK();
  if (info_.read_only) {
    return Status::ReadOnly("LUN " + std::to_string(info_.lun) + " is write-protected");
  }
  const auto* buf = static_cast<const uint8_t*>(in);
  const uint32_t bs = info_.logical_block_size;
  const uint64_t first = offset / bs;
  const uint64_t last = (offset + len - 1) / bs;
  // Writes that share a block must not interleave with a read-modify-write of that block.
  LockRange(first, last);
  Status st;
  const uint64_t head = offset % bs;
  if (head == 0 && len % bs == 0) {
    st = WriteAligned(offset, buf, len, fua);
  } else {
    std::vector<uint8_t> block(bs);
    if (head != 0) {
      const size_t n = std::min<uint64_t>(bs - head, len);
      st = ReadAligned(offset - head, block.data(), bs, false);
      if (st.ok()) {
        std::memcpy(block.data() + head, buf, n);
        st = WriteAligned(offset - head, block.data(), bs, fua);
      }
      buf += n;
      offset += n;
      len -= n;
    }
    const uint64_t middle = len - len % bs;
    if (st.ok() && middle > 0) st = WriteAligned(offset, buf, middle, fua);
    if (st.ok() && len > middle) {
      st = ReadAligned(offset + middle, block.data(), bs, false);
      if (st.ok()) {
        std::memcpy(block.data(), buf + middle, len - middle);
        st = WriteAligned(offset + middle, block.data(), bs, fua);
      }
    }
  }
  UnlockRange(first, last);
  return st;
}

Status BlockDevice::Flush() {
  Task t;
  scsi::SynchronizeCache(t, 0, 0);
  return Execute(t, "SYNCHRONIZE CACHE on LUN " + std::to_string(info_.lun));
}

// SYNCHRONIZE CACHE over a range: how FUA is honoured where no FUA bit can carry it (WRITE SAME,
// UNMAP, and writes to a LUN without DPOFUA, which may ignore the bit).
Status BlockDevice::SyncRange(uint64_t lba, uint64_t blocks) {
  while (blocks > 0) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(blocks, 0xffffffffu));
    Task t;
    scsi::SynchronizeCache(t, lba, n);
    ISER_RETURN_IF_ERROR(Execute(t, std::string(scsi::CommandName(t)) + Where(info_, lba, n)));
    lba += n;
    blocks -= n;
  }
  return Status::OK();
}

Status BlockDevice::Trim(uint64_t offset, uint64_t len, bool fua) {
  ISER_RETURN_IF_ERROR(CheckRange(offset, len, "trim"));
  if (!info_.unmap) {
    return Status::NotSupported("LUN " + std::to_string(info_.lun) + " does not support UNMAP");
  }
  const uint32_t bs = info_.logical_block_size;
  // Trimming is advisory: partial blocks at either end are left alone.
  const uint64_t first = (offset + bs - 1) / bs;
  uint64_t lba = first;
  const uint64_t end = (offset + len) / bs;
  const uint64_t per_range = info_.max_unmap_blocks ? info_.max_unmap_blocks : 0xffffffffu;
  const uint32_t max_desc =
      std::max<uint32_t>(1, std::min(info_.max_unmap_descriptors ? info_.max_unmap_descriptors : 1u,
                                     kMaxUnmapDescriptorsPerCommand));
  std::vector<scsi::UnmapRange> ranges;
  std::vector<uint8_t> params(8 + 16 * kMaxUnmapDescriptorsPerCommand);
  while (lba < end) {
    ranges.clear();
    uint64_t blocks_in_command = 0;
    while (lba < end && ranges.size() < max_desc &&
           (info_.max_unmap_blocks == 0 || blocks_in_command < info_.max_unmap_blocks)) {
      uint64_t n = std::min<uint64_t>(end - lba, per_range);
      if (info_.max_unmap_blocks)
        n = std::min<uint64_t>(n, info_.max_unmap_blocks - blocks_in_command);
      ranges.push_back({lba, static_cast<uint32_t>(n)});
      lba += n;
      blocks_in_command += n;
    }
    const uint32_t plen = scsi::BuildUnmapParameters(ranges, params.data());
    Task t;
    scsi::Unmap(t, params.data(), plen);
    ISER_RETURN_IF_ERROR(Execute(t, "UNMAP" + Where(info_, ranges.front().lba, blocks_in_command)));
  }
  if (fua && first < end) return SyncRange(first, end - first);
  return Status::OK();
}

Status BlockDevice::WriteZeroes(uint64_t offset, uint64_t len, bool may_trim, bool fua) {
  ISER_RETURN_IF_ERROR(CheckRange(offset, len, "write zeroes"));
  if (len == 0) return Status::OK();
  const uint32_t bs = info_.logical_block_size;
  const uint64_t first_block = offset / bs;
  const uint64_t end_block = (offset + len + bs - 1) / bs;
  // FUA: partial blocks are written with the FUA bit where the LUN takes it (DPOFUA); the rest
  // (WRITE SAME has no FUA bit, with or without UNMAP) is made durable by one SYNCHRONIZE
  // CACHE over the whole range at the end.
  const bool partial_fua = fua && info_.fua;
  const uint64_t head = offset % bs;
  if (head != 0) {
    const uint64_t n = std::min<uint64_t>(bs - head, len);
    ISER_RETURN_IF_ERROR(Write(offset, zero_block_.data(), n, partial_fua));
    offset += n;
    len -= n;
  }
  const uint64_t tail = len % bs;
  const uint64_t middle = len - tail;
  const bool unmap = may_trim && info_.write_same_unmap && info_.unmapped_reads_zero;
  const uint64_t per_command =
      info_.max_write_same_blocks ? info_.max_write_same_blocks : kDefaultWriteSameBlocks;
  uint64_t lba = offset / bs;
  const uint64_t end = (offset + middle) / bs;
  if (lba < end) LockRange(lba, end - 1);
  Status st;
  while (lba < end) {
    const uint32_t n =
        static_cast<uint32_t>(std::min<uint64_t>({end - lba, per_command, 0xffffffffu}));
    Task t;
    scsi::WriteSame16(t, lba, n, zero_block_.data(), bs, unmap);
    st = Execute(t, std::string(unmap ? "WRITE SAME(16) with UNMAP" : "WRITE SAME(16)") +
                        Where(info_, lba, n));
    if (!st.ok()) break;
    lba += n;
  }
  if (offset / bs < end) UnlockRange(offset / bs, end - 1);
  ISER_RETURN_IF_ERROR(st);
  if (tail != 0) {
    ISER_RETURN_IF_ERROR(Write(offset + middle, zero_block_.data(), tail, partial_fua));
  }
  if (fua && (middle > 0 || !partial_fua)) return SyncRange(first_block, end_block - first_block);
  return Status::OK();
}

Status BlockDevice::Prefetch(uint64_t offset, uint64_t len) {
  ISER_RETURN_IF_ERROR(CheckRange(offset, len, "prefetch"));
  const uint32_t bs = info_.logical_block_size;
  const uint64_t lba = offset / bs;
  const uint64_t blocks = (offset + len + bs - 1) / bs - lba;
  Task t;
  scsi::PreFetch16(t, lba, static_cast<uint32_t>(std::min<uint64_t>(blocks, 0xffffffffu)));
  return Execute(t, "PRE-FETCH(16)" + Where(info_, lba, blocks));
}

Status BlockDevice::Extents(uint64_t offset, uint64_t len, std::vector<Extent>* out) {
  out->clear();
  ISER_RETURN_IF_ERROR(CheckRange(offset, len, "extents"));
  if (len == 0) return Status::OK();
  if (!info_.thin) {
    out->push_back({offset, len, true, false});
    return Status::OK();
  }
  const uint32_t bs = info_.logical_block_size;
  std::vector<uint8_t> buf(8 + 16 * 128);
  Task t;
  scsi::GetLbaStatus(t, offset / bs, buf.data(), static_cast<uint32_t>(buf.size()));
  ISER_RETURN_IF_ERROR(Execute(t, "GET LBA STATUS" + Where(info_, offset / bs, 0)));
  Result<std::vector<scsi::LbaStatus>> descs = scsi::ParseGetLbaStatus(buf);
  if (!descs.ok()) return descs.status();
  const uint64_t end = offset + len;
  for (const scsi::LbaStatus& d : *descs) {
    uint64_t a = d.lba * bs;
    uint64_t b = a + uint64_t{d.blocks} * bs;
    a = std::max(a, offset);
    b = std::min(b, end);
    if (a >= b) continue;
    const bool allocated = d.status == 0;
    const bool zero = !allocated && info_.unmapped_reads_zero;
    if (!out->empty() && out->back().offset + out->back().length == a &&
        out->back().allocated == allocated && out->back().zero == zero) {
      out->back().length += b - a;
    } else {
      out->push_back({a, b - a, allocated, zero});
    }
  }
  if (out->empty() || out->front().offset != offset) {
    return Status::ProtocolError("GET LBA STATUS" + Where(info_, offset / bs, 0) +
                                 " did not describe the requested LBA");
  }
  return Status::OK();
}

}  // namespace iser
