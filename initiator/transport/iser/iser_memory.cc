#include "initiator/transport/iser/iser_memory.h"

#include <linux/capability.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "initiator/base/log.h"
#include "initiator/task/task.h"

namespace iser {

namespace {

// CAP_IPC_LOCK lifts RLIMIT_MEMLOCK for registrations; read from the effective set of
// /proc/self/status (root usually has it, but not in every container).
bool HasIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      return (std::stoull(line.substr(7), nullptr, 16) >> CAP_IPC_LOCK) & 1;
    }
  }
  return false;
}

}  // namespace

Status CheckMemlock(size_t bytes) {
  if (HasIpcLock()) return Status::OK();
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return Status::OK();
  if (lim.rlim_cur >= bytes) return Status::OK();
  return Status::ResourceExhausted(
      "iSER needs " + std::to_string(bytes >> 20) +
      " MiB of registered (locked) memory but "
      "RLIMIT_MEMLOCK allows " +
      std::to_string(lim.rlim_cur >> 10) +
      " KiB: raise it with `ulimit -l unlimited` (or a memlock line in "
      "/etc/security/limits.conf)");
}

uint8_t* AllocateRegion(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return nullptr;
  std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

Status RegisterMemory(ibv_pd* pd, uint8_t* addr, size_t length, int access, ibv_mr** mr) {
  *mr = ibv_reg_mr(pd, addr, length, access);
  if (*mr != nullptr) return Status::OK();
  const int err = errno;
  std::string msg = "cannot register " + std::to_string(length >> 10) +
                    " KiB of memory for RDMA: " + strerror(err);
  if (err == ENOMEM || err == EPERM || err == EAGAIN) {
    msg += " (RLIMIT_MEMLOCK too small? raise it with `ulimit -l unlimited`)";
  }
  return Status::ResourceExhausted(msg);
}

void WarnIfReleaseFailed(const char* verb, int rc) {
  if (rc != 0)
    Log(LogLevel::kWarning, std::string("iSER teardown: ") + verb + ": " + std::strerror(rc));
}

IserMemory::~IserMemory() {
  Release();
}

Status IserMemory::SetUp(ibv_pd* pd, const ibv_device_attr& attr) {
  pd_ = pd;
  const char* env = std::getenv("ISER_CONNECT_STAGS");
  const std::string stags = env != nullptr ? env : "";
  memory_windows_ = attr.max_mw > 0 && (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) &&
                    stags.find("no-windows") == std::string::npos;
  direct_ = stags.find("no-direct") == std::string::npos;
  data_slots_.resize(kSmallSlots + kLargeSlots);
  for (uint32_t i = 0; i < data_slots_.size(); ++i) {
    const size_t len = i < kSmallSlots ? kSmallSlotBytes : kDataSlotBytes;
    uint8_t* p = AllocateRegion(len);
    if (p == nullptr) return Status::ResourceExhausted("out of memory for iSER data buffers");
    regions_.push_back(p);
    DataSlot& slot = data_slots_[i];
    slot.addr = p;
    (i < kSmallSlots ? free_small_slots_ : free_large_slots_).push_back(&slot);
    if (memory_windows_) {
      ISER_RETURN_IF_ERROR(
          RegisterMemory(pd_, p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &slot.base_mr));
      slot.mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
      if (slot.mw == nullptr) {
        return Status::ResourceExhausted("cannot allocate an RDMA memory window: " +
                                         std::string(strerror(errno)));
      }
      slot.stag = slot.mw->rkey;
    }
  }
  by_itt_.assign(kIttSlots, Exposure{});
  return Status::OK();
}

const char* IserMemory::StagMethod() const {
  if (!direct_)
    return memory_windows_ ? "copies through slots with memory windows"
                           : "copies through slots registered per command";
  return memory_windows_ ? "caller buffers registered per command (>= 128 KiB), else copies "
                           "through slots with memory windows"
                         : "caller buffers registered per command (>= 128 KiB), else copies "
                           "through slots registered per command";
}

bool IserMemory::Expose(Task* task, uint32_t sent, uint32_t* stag, uint64_t* va, ibv_send_wr* bind,
                        Status* error) {
  Exposure& e = by_itt_[task->itt & (kIttSlots - 1)];
  if (e.task != nullptr) {
    // Overwriting it would leave the earlier command's STag valid and its slot lost.
    *error = Status::ProtocolError("ITT " + std::to_string(task->itt) +
                                   " reuses a slot whose earlier command was never revoked");
    return true;
  }
  const bool target_writes = task->direction == DataDirection::kRead;
  const uint32_t length = task->transfer_length - sent;
  const unsigned access = target_writes ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE
                                        : IBV_ACCESS_REMOTE_READ;  // REMOTE_WRITE needs LOCAL
  if (direct_ && task->transfer_length >= kDirectBytes) {
    e.io_mr = ibv_reg_mr(pd_, task->buffer + sent, length, static_cast<int>(access));
    if (e.io_mr != nullptr) {
      e.task = task;
      *stag = e.io_mr->rkey;
      *va = reinterpret_cast<uintptr_t>(task->buffer + sent);
      return true;
    }
  }
  std::vector<DataSlot*>* pool = &free_large_slots_;
  if (task->transfer_length <= kSmallSlotBytes && !free_small_slots_.empty()) {
    pool = &free_small_slots_;
  }
  if (pool->empty()) return false;
  DataSlot* slot = pool->back();
  if (target_writes) {
    std::memset(slot->addr, 0, task->transfer_length);  // never an earlier command's bytes
  } else {
    std::memcpy(slot->addr, task->buffer, task->transfer_length);
  }
  uint8_t* bytes = slot->addr + sent;
  if (memory_windows_) {
    // A type 2 window gets a new key on every bind: an STag from an earlier command never
    // matches again.
    slot->stag = ibv_inc_rkey(slot->stag);
    *bind = {};
    bind->wr_id = kInvalidateTag;
    bind->opcode = IBV_WR_BIND_MW;
    bind->bind_mw.mw = slot->mw;
    bind->bind_mw.rkey = slot->stag;
    bind->bind_mw.bind_info.mr = slot->base_mr;
    bind->bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(bytes);
    bind->bind_mw.bind_info.length = length;
    bind->bind_mw.bind_info.mw_access_flags = access & ~IBV_ACCESS_LOCAL_WRITE;
    *stag = slot->stag;
  } else {
    e.io_mr = ibv_reg_mr(pd_, bytes, length, static_cast<int>(access));
    if (e.io_mr == nullptr) {
      *error = Status::ResourceExhausted("cannot register " + std::to_string(length) +
                                         " bytes for RDMA: " + strerror(errno));
      return true;
    }
    *stag = e.io_mr->rkey;
  }
  pool->pop_back();
  e.slot = slot;
  e.task = task;
  *va = reinterpret_cast<uintptr_t>(bytes);
  return true;
}

Task* IserMemory::Exposed(uint32_t itt) const {
  if (by_itt_.empty()) return nullptr;
  Task* t = by_itt_[itt & (kIttSlots - 1)].task;
  return t != nullptr && t->itt == itt ? t : nullptr;
}

Status IserMemory::Revoke(uint32_t itt, uint32_t data_in, ibv_qp* qp) {
  return Revoke(&by_itt_[itt & (kIttSlots - 1)], data_in, qp);
}

void IserMemory::RevokeAll() {
  for (Exposure& e : by_itt_) {
    // Without a QP nothing is posted, so nothing can fail.
    if (e.task != nullptr) Revoke(&e, 0, nullptr).IgnoreError();
  }
}

Status IserMemory::Revoke(Exposure* e, uint32_t data_in, ibv_qp* qp) {
  Status status;
  if (e->slot != nullptr && data_in > 0) std::memcpy(e->task->buffer, e->slot->addr, data_in);
  if (e->slot == nullptr && e->io_mr != nullptr && e->task->direction == DataDirection::kRead &&
      data_in < e->task->transfer_length) {
    // A caller's buffer registered for a READ is not zeroed before (a memset of every large read
    // cost 16% of 512 KiB read throughput): what the target says it did not write is zeroed
    // after, so it never reads as what the buffer held.
    std::memset(e->task->buffer + data_in, 0, e->task->transfer_length - data_in);
  }
  if (e->io_mr != nullptr) ibv_dereg_mr(e->io_mr);
  if (e->slot != nullptr && memory_windows_ && qp != nullptr) {
    ibv_send_wr wr{};
    wr.wr_id = kInvalidateTag;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.invalidate_rkey = e->slot->stag;
    // Unsignaled: the next command's signaled SEND retires it. At most one per command in
    // flight waits for that, well within the send queue.
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) {
      status =
          Status::ConnectionFailed("cannot invalidate an STag: " + std::string(strerror(errno)));
    }
  }
  if (e->slot != nullptr) {
    const bool small = e->slot < data_slots_.data() + kSmallSlots;
    (small ? free_small_slots_ : free_large_slots_).push_back(e->slot);
  }
  *e = {};
  return status;
}

void IserMemory::Release() {
  for (Exposure& e : by_itt_) {
    if (e.io_mr) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(e.io_mr));
  }
  by_itt_.clear();
  for (DataSlot& d : data_slots_) {
    if (d.mw) WarnIfReleaseFailed("ibv_dealloc_mw", ibv_dealloc_mw(d.mw));
    if (d.base_mr) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(d.base_mr));
  }
  data_slots_.clear();
  free_small_slots_.clear();
  free_large_slots_.clear();
  for (uint8_t* r : regions_) free(r);
  regions_.clear();
}

}  // namespace iser
