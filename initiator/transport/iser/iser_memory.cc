#include "initiator/transport/iser/iser_memory.h"

#include <linux/capability.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include "initiator/base/log.h"
#include "initiator/base/mutex.h"
#include "initiator/task/task.h"

namespace iser {

bool InInitialUserNamespace() {
  std::ifstream map("/proc/self/uid_map");
  if (!map) return true;  // a kernel without user namespaces
  uint64_t inside = 0, outside = 0, count = 0, more = 0;
  if (!(map >> inside >> outside >> count)) return false;
  return !(map >> more) && inside == 0 && outside == 0 && count == 4294967295u;
}

namespace {

// CAP_IPC_LOCK lifts RLIMIT_MEMLOCK for registrations; read from the effective set of
// /proc/self/status (root usually has it, but not in every container). The kernel asks about
// the initial user namespace (capable()), so the capability a namespace of one's own grants
// (`unshare -r`, rootless containers) lifts nothing, and the limit stays.
bool HasIpcLock() {
  if (!InInitialUserNamespace()) return false;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      return (std::stoull(line.substr(7), nullptr, 16) >> CAP_IPC_LOCK) & 1;
    }
  }
  return false;
}

struct LockedBudget {
  Mutex mu;
  bool read ISER_GUARDED_BY(mu) = false;
  size_t limit ISER_GUARDED_BY(mu) = 0;  // SIZE_MAX: unlimited
  size_t used ISER_GUARDED_BY(mu) = 0;
  std::set<std::string> devices_without_windows ISER_GUARDED_BY(mu);
};

std::atomic<uint64_t> registration_waits{0};

LockedBudget& budget() {
  static LockedBudget* b = new LockedBudget;  // never destroyed: I/O threads may outlive statics
  return *b;
}

size_t LimitLocked(LockedBudget& b) ISER_REQUIRES(b.mu) {
  if (!b.read) {
    rlimit lim{};
    b.limit = HasIpcLock() || getrlimit(RLIMIT_MEMLOCK, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY
                  ? SIZE_MAX
                  : lim.rlim_cur;
    b.read = true;
  }
  return b.limit;
}

size_t LeftLocked(LockedBudget& b) ISER_REQUIRES(b.mu) {
  const size_t limit = LimitLocked(b);
  return limit == SIZE_MAX ? SIZE_MAX : limit - std::min(limit, b.used);
}

// A register and deregister pair below this is cheap enough to do per command: no NIC is
// (they pin pages and call their firmware: tens of microseconds).
constexpr double kCheapRegistrationMicros = 5;

double Micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// The least time of three runs of `step`, in microseconds, or a negative value when a run
// fails (returns false).
template <typename Step>
double LeastMicros(Step step) {
  double best = -1;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!step()) return -1;
    const double us = Micros(std::chrono::steady_clock::now() - start);
    best = best < 0 ? us : std::min(best, us);
  }
  return best;
}

// A register + deregister pair of `len` bytes at `p`, or a negative value when registering fails.
double RegistrationMicros(ibv_pd* pd, uint8_t* p, size_t len) {
  return LeastMicros([&] {
    ibv_mr* mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == nullptr) return false;
    ibv_dereg_mr(mr);
    return true;
  });
}

// A copy of `len` bytes (two halves of the region at `p`).
double CopyMicros(uint8_t* p, size_t len) {
  return LeastMicros([&] {
    std::memcpy(p, p + len / 2, len / 2);
    std::memcpy(p + len / 2, p, len / 2);
    return true;
  });
}

}  // namespace

size_t LockedLeft() {
  LockedBudget& b = budget();
  MutexLock lock(&b.mu);
  return LeftLocked(b);
}

bool ReserveLocked(size_t bytes, size_t* left) {
  LockedBudget& b = budget();
  MutexLock lock(&b.mu);
  *left = LeftLocked(b);
  if (bytes > *left) return false;
  b.used += bytes;
  return true;
}

void ReleaseLocked(size_t bytes) {
  LockedBudget& b = budget();
  MutexLock lock(&b.mu);
  b.used -= std::min(b.used, bytes);
}

Status MemlockError(size_t needed, size_t left) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  return Status::ResourceExhausted(
      "an iSER connection needs at least " + std::to_string(needed >> 10) +
      " KiB of locked memory for its buffers, but only " + std::to_string(left >> 10) +
      " KiB of RLIMIT_MEMLOCK (" + std::to_string(lim.rlim_cur >> 10) +
      " KiB) is left in this process: raise it with `ulimit -l` (e.g. `ulimit -l unlimited`, "
      "or a memlock line in /etc/security/limits.conf), or run fewer iSER sessions in one "
      "process");
}

uint64_t RegistrationWaitsForLockedMemory() {
  return registration_waits.load(std::memory_order_relaxed);
}

void MarkWindowsUnusable(const std::string& device) {
  LockedBudget& b = budget();
  MutexLock lock(&b.mu);
  if (b.devices_without_windows.insert(device).second) {
    Log(LogLevel::kWarning, "RDMA device " + device +
                                ": a memory window bind failed; its connections use registered "
                                "slots from now on");
  }
}

namespace {

bool WindowsUsable(const std::string& device) {
  LockedBudget& b = budget();
  MutexLock lock(&b.mu);
  return b.devices_without_windows.count(device) == 0;
}

}  // namespace

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
  direct_ = stags.find("no-direct") == std::string::npos;
  // As many slots as the process's memlock budget leaves room for, down to the minimum.
  uint32_t small = kSmallSlots, large = kLargeSlots;
  const auto bytes = [&] {
    return size_t{small} * kSmallSlotBytes + size_t{large} * kDataSlotBytes;
  };
  const auto shrink = [&] {
    if (large > kMinLargeSlots) {
      large = std::max(kMinLargeSlots, large / 2);
    } else if (small > kMinSmallSlots) {
      small = std::max(kMinSmallSlots, small / 2);
    } else {
      return false;
    }
    return true;
  };
  // A limited budget: at most a quarter of what is left, so that the sessions a daemon adds
  // later still find room (eight fit in 64 MiB).
  size_t left = LockedLeft();
  if (left != SIZE_MAX) {
    while (bytes() > left / 4 && shrink()) {
    }
  }
  while (!ReserveLocked(bytes(), &left)) {
    if (!shrink()) return MemlockError(bytes(), left);
  }
  locked_ = bytes();
  if (small < kSmallSlots || large < kLargeSlots) {
    Log(LogLevel::kInfo, "RLIMIT_MEMLOCK leaves room for " + std::to_string(small) + " + " +
                             std::to_string(large) + " data slots on this iSER connection (of " +
                             std::to_string(kSmallSlots) + " + " + std::to_string(kLargeSlots) +
                             "): commands wait for a slot more often");
  }
  small_slots_ = small;
  data_slots_.resize(small + large);
  for (uint32_t i = 0; i < data_slots_.size(); ++i) {
    uint8_t* p = AllocateRegion(SlotBytes(i));
    if (p == nullptr) return Status::ResourceExhausted("out of memory for iSER data buffers");
    regions_.push_back(p);
    data_slots_[i].addr = p;
  }
  // Stacks: the most recently used first, slot 0 of each kind on top.
  for (uint32_t i = small; i-- > 0;) free_small_slots_.push_back(&data_slots_[i]);
  for (uint32_t i = small + large; i-- > small;) free_large_slots_.push_back(&data_slots_[i]);
  by_itt_.assign(kIttSlots, Exposure{});

  const bool advertised =
      attr.max_mw > 0 &&
      (attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  const bool forced = stags.find("no-windows") != std::string::npos ||
                      stags.find("pool") != std::string::npos ||
                      stags.find("per-command") != std::string::npos;
  if (advertised && !forced && WindowsUsable(ibv_get_device_name(pd->context->device)) &&
      TrySetUpWindows()) {
    strategy_ = StagStrategy::kWindows;
  } else {
    ISER_RETURN_IF_ERROR(SetUpRegistered(stags));
  }
  if (direct_ && stags.find("direct") == std::string::npos) {
    // Zero copy where registering a large buffer costs less than copying it.
    uint8_t* large_slot = free_large_slots_.back()->addr;
    const double reg = RegistrationMicros(pd_, large_slot, kDataSlotBytes);
    direct_ = reg >= 0 && reg < CopyMicros(large_slot, kDataSlotBytes);
  }
  return Status::OK();
}

bool IserMemory::TrySetUpWindows() {
  for (size_t i = 0; i < data_slots_.size(); ++i) {
    DataSlot& slot = data_slots_[i];
    Status st = RegisterMemory(pd_, slot.addr, SlotBytes(i),
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &slot.mr);
    if (st.ok()) {
      slot.mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
      if (slot.mw == nullptr) {
        st = Status::NotSupported(std::string("ibv_alloc_mw: ") + strerror(errno));
      }
    }
    if (!st.ok()) {
      // bnxt_re advertises type 2B windows, and its user-space library cannot allocate one.
      Log(LogLevel::kInfo, std::string("RDMA device ") + ibv_get_device_name(pd_->context->device) +
                               " advertises memory windows, but " + st.message() +
                               ": registering slots instead");
      for (DataSlot& d : data_slots_) {
        if (d.mw) WarnIfReleaseFailed("ibv_dealloc_mw", ibv_dealloc_mw(d.mw));
        if (d.mr) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(d.mr));
        d.mw = nullptr;
        d.mr = nullptr;
      }
      return false;
    }
    slot.stag = slot.mw->rkey;
  }
  return true;
}

Status IserMemory::SetUpRegistered(const std::string& stags) {
  uint8_t* probe = free_small_slots_.back()->addr;
  const double reg = RegistrationMicros(pd_, probe, kSmallSlotBytes);
  if (reg < 0) {
    return Status::ResourceExhausted(
        "cannot register memory for RDMA: " + std::string(strerror(errno)) +
        " (RLIMIT_MEMLOCK too small? raise it with `ulimit -l`)");
  }
  const bool pool =
      stags.find("pool") != std::string::npos ||
      (stags.find("per-command") == std::string::npos && reg >= kCheapRegistrationMicros);
  if (!pool) {
    strategy_ = StagStrategy::kPerCommand;
    return Status::OK();
  }
  strategy_ = StagStrategy::kPool;
  for (size_t i = 0; i < data_slots_.size(); ++i) {
    DataSlot& slot = data_slots_[i];
    ISER_RETURN_IF_ERROR(RegisterMemory(
        pd_, slot.addr, SlotBytes(i),
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &slot.mr));
    slot.stag = slot.mr->rkey;
  }
  return Status::OK();
}

std::string IserMemory::StagMethod() const {
  std::string slots = strategy_ == StagStrategy::kWindows      ? "slots with memory windows"
                      : strategy_ == StagStrategy::kPerCommand ? "slots registered per command"
                                                               : "a pool of registered slots";
  if (!direct_) return "copies through " + slots;
  return "caller buffers registered per command (>= 128 KiB), else copies through " + slots;
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
    // The caller's buffer may hold anything (FUSE reuses one per thread for every file of every
    // target), and a target may answer GOOD without writing all it claims: zeroed first, what
    // it did not place reads as zeroes, never another command's bytes. The pass costs 512 KiB
    // reads about a quarter of their throughput on the transport alone, so a caller whose
    // buffer holds only its own bytes of this LUN may waive it (Task::keeps_unplaced_bytes: the
    // bench, and the FUSE file's per-thread buffer after successful reads of the same LUN). Zeroed
    // once registered (the STag is not advertised before the command leaves), so that a command
    // waiting for locked memory is not zeroed again at each attempt.
    e.io_mr = ibv_reg_mr(pd_, task->buffer + sent, length, static_cast<int>(access));
    if (e.io_mr != nullptr) {
      if (target_writes && !task->keeps_unplaced_bytes) {
        std::memset(task->buffer + sent, 0, length);
      }
      waiting_for_locked_ = false;
      e.task = task;
      ++exposed_;
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
  if (strategy_ == StagStrategy::kWindows) {
    // A type 2 window gets a new key on every bind: an STag from an earlier command never
    // matches again.
    slot->stag = ibv_inc_rkey(slot->stag);
    *bind = {};
    bind->wr_id = kInvalidateTag;
    bind->opcode = IBV_WR_BIND_MW;
    bind->bind_mw.mw = slot->mw;
    bind->bind_mw.rkey = slot->stag;
    bind->bind_mw.bind_info.mr = slot->mr;
    bind->bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(bytes);
    bind->bind_mw.bind_info.length = length;
    bind->bind_mw.bind_info.mw_access_flags = access & ~IBV_ACCESS_LOCAL_WRITE;
    *stag = slot->stag;
  } else if (strategy_ == StagStrategy::kPool) {
    *stag = slot->stag;
  } else {
    e.io_mr = ibv_reg_mr(pd_, bytes, length, static_cast<int>(access));
    if (e.io_mr == nullptr) {
      const int err = errno;
      // Out of locked memory: the commands in flight give theirs back as they end.
      if ((err == ENOMEM || err == EAGAIN) && exposed_ > 0) {
        if (!waiting_for_locked_) registration_waits.fetch_add(1, std::memory_order_relaxed);
        waiting_for_locked_ = true;
        if (!told_locked_wait_) {
          Log(LogLevel::kInfo,
              "RLIMIT_MEMLOCK: no locked memory left to register a command's "
              "bytes; commands wait for those in flight to end");
          told_locked_wait_ = true;
        }
        return false;
      }
      *error = Status::ResourceExhausted("cannot register " + std::to_string(length) +
                                         " bytes for RDMA: " + strerror(err) +
                                         " (RLIMIT_MEMLOCK too small? raise it with `ulimit -l`)");
      return true;
    }
    *stag = e.io_mr->rkey;
  }
  pool->pop_back();
  e.slot = slot;
  e.task = task;
  ++exposed_;
  waiting_for_locked_ = false;
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
    // What the target says it did not write is zeroed again: it may have written there anyway,
    // and the caller is promised no byte past the residual.
    std::memset(e->task->buffer + data_in, 0, e->task->transfer_length - data_in);
  }
  if (e->io_mr != nullptr) ibv_dereg_mr(e->io_mr);
  if (e->slot != nullptr && strategy_ == StagStrategy::kWindows && qp != nullptr) {
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
    const bool small = e->slot < data_slots_.data() + small_slots_;
    (small ? free_small_slots_ : free_large_slots_).push_back(e->slot);
  }
  if (e->task != nullptr) --exposed_;
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
    if (d.mr) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(d.mr));
  }
  data_slots_.clear();
  free_small_slots_.clear();
  free_large_slots_.clear();
  for (uint8_t* r : regions_) free(r);
  regions_.clear();
  ReleaseLocked(locked_);
  locked_ = 0;
}

}  // namespace iser
