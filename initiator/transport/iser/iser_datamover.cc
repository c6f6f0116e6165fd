#include "initiator/transport/iser/iser_datamover.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "initiator/transport/portal.h"
#include "initiator/base/log.h"
#include "initiator/task/task.h"
#include "initiator/transport/iser/iser_header.h"

namespace iser {

namespace {

constexpr char kIoThreadName[] = "iser-io";  // in top -H and iser-connect bench

constexpr uint32_t kMaxRecvData = 8192;  // InitiatorRecvDataSegmentLength we declare
constexpr size_t kPduHeader = kIserHeaderLength + kBhsLength;
constexpr size_t kBufferBytes = 8448;  // iSER header + BHS + 8 KiB data, rounded up
// Receives: more than any target's CmdSN window we have met (tgt 128, LIO 64) plus NOP-In pings,
// Async Messages and answers to immediate PDUs.
constexpr uint32_t kRecvBuffers = 160;
constexpr uint32_t kSendSlots = 160;
// Data buffers in two sizes, each its own MR: small I/Os do not tie up a large buffer.
constexpr uint32_t kSmallSlotBytes = 64 * 1024;
constexpr uint32_t kSmallSlots = 64;
constexpr uint32_t kLargeSlots = 16;
constexpr uint32_t kIttSlots = 1024;  // the session's ITT table size
constexpr uint64_t kRecvTag = 1ull << 32;
constexpr uint64_t kSendTag = 2ull << 32;
constexpr uint64_t kInvalidateTag = 3ull << 32;
constexpr int kCmTimeoutMs = 2000;

int MillisUntil(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string RejectReason(int status) {
  switch (status) {
    case 8:
      return "no iSER listener on that port (IB CM reject 8, invalid service ID)";
    case 28:
      return "the target refused the connection (IB CM reject 28, consumer reject)";
    case -ECONNREFUSED:
      return "connection refused";
  }
  return "reject reason " + std::to_string(status);
}

// A verb that releases an object fails with EBUSY when something still uses the object: the
// object leaks, which a warning makes visible (softrdma enforces the order as hardware does).
void WarnIfReleaseFailed(const char* verb, int rc) {
  if (rc != 0)
    Log(LogLevel::kWarning, std::string("iSER teardown: ") + verb + ": " + std::strerror(rc));
}

uint8_t* AllocateRegion(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return nullptr;
  std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

}  // namespace

IserDatamover::IserDatamover() = default;

IserDatamover::~IserDatamover() {
  Shutdown();
  Teardown();
}

// CAP_IPC_LOCK lifts RLIMIT_MEMLOCK for registrations; read from the effective set of
// /proc/self/status (root usually has it, but not in every container).
static bool HasIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      return (std::stoull(line.substr(7), nullptr, 16) >> CAP_IPC_LOCK) & 1;
    }
  }
  return false;
}

Status IserDatamover::CheckMemlock(size_t bytes) const {
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

Status IserDatamover::SetUpResources(ibv_context* verbs) {
  const size_t data_bytes =
      size_t{kSmallSlots} * kSmallSlotBytes + size_t{kLargeSlots} * kDataSlotBytes;
  const size_t total = data_bytes + size_t{kRecvBuffers + kSendSlots} * kBufferBytes;
  ISER_RETURN_IF_ERROR(CheckMemlock(total));
  ibv_device_attr attr{};
  if (ibv_query_device(verbs, &attr) != 0) {
    return Status::ConnectionFailed("ibv_query_device failed: " + std::string(strerror(errno)));
  }
  // The target may have this many RDMA READs outstanding against us (it clamps to our offer).
  responder_resources_ = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 255));
  // ISER_CONNECT_STAGS turns choices off to measure them (bench/iser-stags): "no-windows"
  // (slots registered per command), "no-direct" (every command copied through a slot).
  const std::string stags =
      std::getenv("ISER_CONNECT_STAGS") ? std::getenv("ISER_CONNECT_STAGS") : "";
  memory_windows_ = attr.max_mw > 0 && (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) &&
                    stags.find("no-windows") == std::string::npos;
  direct_ = stags.find("no-direct") == std::string::npos;
  pd_ = ibv_alloc_pd(verbs);
  comp_channel_ = ibv_create_comp_channel(verbs);
  if (pd_ == nullptr || comp_channel_ == nullptr) {
    return Status::ConnectionFailed(
        "cannot allocate an RDMA protection domain or completion "
        "channel: " +
        std::string(strerror(errno)));
  }
  SetNonBlocking(comp_channel_->fd);
  cq_ =
      ibv_create_cq(verbs, static_cast<int>(kRecvBuffers + kSendSlots + 8), this, comp_channel_, 0);
  if (cq_ == nullptr) {
    return Status::ConnectionFailed("cannot create an RDMA completion queue: " +
                                    std::string(strerror(errno)));
  }
  ibv_qp_init_attr qp{};
  qp.send_cq = cq_;
  qp.recv_cq = cq_;
  qp.qp_type = IBV_QPT_RC;
  // Per command: a window bind, the SEND, and a local invalidate after the response.
  qp.cap.max_send_wr = 3 * kSendSlots + 4;
  qp.cap.max_recv_wr = kRecvBuffers + 1;
  qp.cap.max_send_sge = 2;
  qp.cap.max_recv_sge = 1;
  if (rdma_create_qp(id_, pd_, &qp) != 0) {
    return Status::ConnectionFailed("cannot create the RDMA queue pair: " +
                                    std::string(strerror(errno)));
  }
  qp_created_ = true;

  auto reg = [&](uint8_t* addr, size_t len, int access, ibv_mr** mr) -> Status {
    *mr = ibv_reg_mr(pd_, addr, len, access);
    if (*mr == nullptr) {
      const int err = errno;
      std::string msg = "cannot register " + std::to_string(len >> 10) +
                        " KiB of memory for RDMA: " + strerror(err);
      if (err == ENOMEM || err == EPERM || err == EAGAIN) {
        msg += " (RLIMIT_MEMLOCK too small? raise it with `ulimit -l unlimited`)";
      }
      return Status::ResourceExhausted(msg);
    }
    return Status::OK();
  };
  recv_base_ = AllocateRegion(size_t{kRecvBuffers} * kBufferBytes);
  uint8_t* send_base = AllocateRegion(size_t{kSendSlots} * kBufferBytes);
  if (recv_base_ == nullptr || send_base == nullptr) {
    return Status::ResourceExhausted("out of memory for iSER buffers");
  }
  regions_.push_back(recv_base_);
  regions_.push_back(send_base);
  ISER_RETURN_IF_ERROR(
      reg(recv_base_, size_t{kRecvBuffers} * kBufferBytes, IBV_ACCESS_LOCAL_WRITE, &recv_mr_));
  ISER_RETURN_IF_ERROR(reg(send_base, size_t{kSendSlots} * kBufferBytes, 0, &send_mr_));
  send_slots_.resize(kSendSlots);
  queued_wrs_.reserve(2 * kSendSlots);  // a SEND per slot, each after at most one bind
  queued_sges_.reserve(kSendSlots);
  for (uint32_t i = 0; i < kSendSlots; ++i) {
    send_slots_[i].addr = send_base + size_t{i} * kBufferBytes;
    free_send_slots_.push_back(static_cast<int>(kSendSlots - 1 - i));
  }
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
      ISER_RETURN_IF_ERROR(reg(p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &slot.base_mr));
      slot.mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
      if (slot.mw == nullptr) {
        return Status::ResourceExhausted("cannot allocate an RDMA memory window: " +
                                         std::string(strerror(errno)));
      }
      slot.stag = slot.mw->rkey;
    }
  }
  by_itt_.assign(kIttSlots, Exposure{});
  for (uint32_t i = 0; i < kRecvBuffers; ++i) ISER_RETURN_IF_ERROR(PostReceive(i));
  return Status::OK();
}

Status IserDatamover::PostReceive(uint32_t index) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recv_base_ + size_t{index} * kBufferBytes),
              static_cast<uint32_t>(kBufferBytes), recv_mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvTag | index;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(id_->qp, &wr, &bad) != 0) {
    return Status::ConnectionFailed("ibv_post_recv failed: " + std::string(strerror(errno)));
  }
  return Status::OK();
}

Status IserDatamover::WaitCmEvent(rdma_cm_event_type want, Deadline deadline, const char* what) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(cm_channel_, &ev) == 0) {
      const rdma_cm_event_type type = ev->event;
      const int status = ev->status;
      rdma_ack_cm_event(ev);
      if (type == want) return Status::OK();
      const std::string where = std::string(what) + " " + peer_;
      switch (type) {
        case RDMA_CM_EVENT_ADDR_ERROR:
          return Status::ConnectionFailed("no RDMA device reaches " + peer_ +
                                          " (address resolution failed, status " +
                                          std::to_string(status) + ")");
        case RDMA_CM_EVENT_ROUTE_ERROR:
          return Status::ConnectionFailed("no RDMA route to " + peer_);
        case RDMA_CM_EVENT_REJECTED:
          return Status::ConnectionFailed(where + ": " + RejectReason(status));
        case RDMA_CM_EVENT_UNREACHABLE:
          return Status::Timeout(where + ": the target did not answer the RDMA connect request");
        case RDMA_CM_EVENT_CONNECT_ERROR:
          return Status::ConnectionFailed(where + ": RDMA connection error " +
                                          std::to_string(status));
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
          return Status::ConnectionFailed(where + ": " + rdma_event_str(type));
        default:
          continue;
      }
    }
    if (errno != EAGAIN && errno != EINTR) {
      return Status::ConnectionFailed("rdma_get_cm_event: " + std::string(strerror(errno)));
    }
    pollfd p{cm_channel_->fd, POLLIN, 0};
    const int n = poll(&p, 1, MillisUntil(deadline));
    if (n == 0) return Status::Timeout(std::string("timed out ") + what + " " + peer_);
  }
}

Status IserDatamover::Connect(const Portal& portal, Deadline deadline) {
  peer_ = portal.ToString();
  cm_channel_ = rdma_create_event_channel();
  if (cm_channel_ == nullptr) {
    return Status::ConnectionFailed(
        "cannot open the RDMA connection manager (" + std::string(strerror(errno)) +
        "): this machine has no usable RDMA device; without hardware, run under softrdma-run");
  }
  SetNonBlocking(cm_channel_->fd);
  if (rdma_create_id(cm_channel_, &id_, this, RDMA_PS_TCP) != 0) {
    return Status::ConnectionFailed("rdma_create_id: " + std::string(strerror(errno)));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int rc =
      getaddrinfo(portal.host.c_str(), std::to_string(portal.port).c_str(), &hints, &list);
  if (rc != 0) {
    return Status::ConnectionFailed("cannot resolve portal " + peer_ + ": " + gai_strerror(rc));
  }
  const int resolve = rdma_resolve_addr(id_, nullptr, list->ai_addr, kCmTimeoutMs);
  freeaddrinfo(list);
  if (resolve != 0) {
    return Status::ConnectionFailed("rdma_resolve_addr " + peer_ + ": " + strerror(errno));
  }
  ISER_RETURN_IF_ERROR(WaitCmEvent(RDMA_CM_EVENT_ADDR_RESOLVED, deadline, "resolving"));
  if (rdma_resolve_route(id_, kCmTimeoutMs) != 0) {
    return Status::ConnectionFailed("rdma_resolve_route " + peer_ + ": " + strerror(errno));
  }
  ISER_RETURN_IF_ERROR(WaitCmEvent(RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, "routing to"));
  ISER_RETURN_IF_ERROR(SetUpResources(id_->verbs));
  Log(LogLevel::kDebug, "iSER " + peer_ + ": device " + ibv_get_device_name(id_->verbs->device) +
                            ", STags by " + StagMethod() + ", responder resources " +
                            std::to_string(responder_resources_));
  const uint8_t private_data[4] = {kIserCmZbvaNotSupported | kIserCmSendWithInvalidateNotSupported,
                                   0, 0, 0};
  rdma_conn_param param{};
  param.private_data = private_data;
  param.private_data_len = sizeof private_data;
  param.responder_resources = responder_resources_;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;  // the target stalls, rather than fails, if our receives run short
  if (rdma_connect(id_, &param) != 0) {
    return Status::ConnectionFailed("rdma_connect " + peer_ + ": " + strerror(errno));
  }
  ISER_RETURN_IF_ERROR(WaitCmEvent(RDMA_CM_EVENT_ESTABLISHED, deadline, "connecting to"));
  connected_ = true;
  return Status::OK();
}

int IserDatamover::FreeSendSlot() {
  return free_send_slots_.empty() ? -1 : free_send_slots_.back();
}

void IserDatamover::ReleaseSendSlot(uint32_t index) {
  if (index < send_slots_.size()) free_send_slots_.push_back(static_cast<int>(index));
}

const char* IserDatamover::StagMethod() const {
  if (!direct_)
    return memory_windows_ ? "copies through slots with memory windows"
                           : "copies through slots registered per command";
  return memory_windows_ ? "caller buffers registered per command (>= 128 KiB), else copies "
                           "through slots with memory windows"
                         : "caller buffers registered per command (>= 128 KiB), else copies "
                           "through slots registered per command";
}

bool IserDatamover::Expose(Task* task, uint32_t sent, uint32_t* stag, uint64_t* va,
                           ibv_send_wr* bind, Status* error) {
  Exposure& e = by_itt_[task->itt & (kIttSlots - 1)];
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
  if (!target_writes) std::memcpy(slot->addr, task->buffer, task->transfer_length);
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

void IserDatamover::Revoke(Exposure* e, uint32_t data_in) {
  if (e->slot != nullptr && data_in > 0) std::memcpy(e->task->buffer, e->slot->addr, data_in);
  if (e->io_mr != nullptr) ibv_dereg_mr(e->io_mr);
  if (e->slot != nullptr && memory_windows_ && !failed_) {
    ibv_send_wr wr{};
    wr.wr_id = kInvalidateTag;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.invalidate_rkey = e->slot->stag;
    // Unsignaled: the next command's signaled SEND retires it. At most one per command in
    // flight waits for that, well within the send queue.
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(id_->qp, &wr, &bad) != 0) {
      Fail(Status::ConnectionFailed("cannot invalidate an STag: " + std::string(strerror(errno))));
    }
  }
  if (e->slot != nullptr) {
    const bool small = e->slot < data_slots_.data() + kSmallSlots;
    (small ? free_small_slots_ : free_large_slots_).push_back(e->slot);
  }
  *e = {};
}

Status IserDatamover::PostSend(int slot, size_t length) {
  QueueSend(slot, length, nullptr);
  return FlushSends();
}

void IserDatamover::QueueSend(int slot, size_t length, const ibv_send_wr* bind) {
  // The caller got `slot` from FreeSendSlot: the top of the free stack.
  free_send_slots_.pop_back();
  if (bind != nullptr) queued_wrs_.push_back(*bind);
  queued_sges_.push_back({reinterpret_cast<uintptr_t>(send_slots_[slot].addr),
                          static_cast<uint32_t>(length), send_mr_->lkey});
  ibv_send_wr wr{};
  wr.wr_id = kSendTag | static_cast<uint32_t>(slot);
  wr.sg_list = &queued_sges_.back();
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  queued_wrs_.push_back(wr);
}

Status IserDatamover::FlushSends() {
  if (queued_wrs_.empty()) return Status::OK();
  for (size_t i = 0; i + 1 < queued_wrs_.size(); ++i) queued_wrs_[i].next = &queued_wrs_[i + 1];
  queued_wrs_.back().next = nullptr;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(id_->qp, queued_wrs_.data(), &bad);
  Status status;
  if (rc != 0) {
    // The slots of the SENDs not posted are free again.
    for (ibv_send_wr* wr = bad; wr != nullptr; wr = wr->next) {
      if (wr->opcode == IBV_WR_SEND)
        free_send_slots_.push_back(static_cast<int>(wr->wr_id & 0xffffffffu));
    }
    status = Status::ConnectionFailed("ibv_post_send failed: " + std::string(strerror(rc)));
  } else {
    // The verbs leave a type 2 window's new key for the application to store (rxe checks it).
    for (const ibv_send_wr& wr : queued_wrs_) {
      if (wr.opcode == IBV_WR_BIND_MW) wr.bind_mw.mw->rkey = wr.bind_mw.rkey;
    }
  }
  queued_wrs_.clear();
  queued_sges_.clear();
  return status;
}

Status IserDatamover::SendPdu(const Bhs& bhs, std::span<const uint8_t> data, Deadline deadline) {
  if (data.size() > kBufferBytes - kPduHeader) {
    return Status::InvalidArgument("login PDU data larger than 8 KiB");
  }
  int slot = FreeSendSlot();
  while (slot < 0) {  // every slot busy: reap send completions
    uint32_t index, length;
    ISER_RETURN_IF_ERROR(PollForReceive(&index, &length, deadline));
    ready_receives_.push_back(index | length << 16);
    slot = FreeSendSlot();
  }
  uint8_t* p = send_slots_[slot].addr;
  BuildIserHeader(p, kIserControl, 0, 0, 0, 0);
  std::memcpy(p + kIserHeaderLength, bhs.data(), kBhsLength);
  if (!data.empty()) std::memcpy(p + kPduHeader, data.data(), data.size());
  return PostSend(slot, kPduHeader + data.size());
}

Status IserDatamover::PollForReceive(uint32_t* index, uint32_t* length, Deadline deadline) {
  bool armed = false;
  for (;;) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq_, 16, wc);
    if (n < 0) return Status::ConnectionFailed("ibv_poll_cq failed");
    bool got = false;
    for (int i = 0; i < n; ++i) {
      Completion c;
      ISER_RETURN_IF_ERROR(Classify(wc[i], &c));
      if (c.kind == Completion::kSendDone) {
        ReleaseSendSlot(c.index);
      } else if (c.kind == Completion::kReceive && got) {
        ready_receives_.push_back(c.index | c.length << 16);
      } else if (c.kind == Completion::kReceive) {
        *index = c.index;
        *length = c.length;
        got = true;
      }
    }
    if (got) return Status::OK();
    if (n > 0) continue;
    if (!armed) {
      // A completion that arrived before the CQ was armed raises no event: poll once more.
      ibv_req_notify_cq(cq_, 0);
      armed = true;
      continue;
    }
    pollfd p[2] = {{comp_channel_->fd, POLLIN, 0}, {cm_channel_->fd, POLLIN, 0}};
    const int r = poll(p, 2, MillisUntil(deadline));
    if (r == 0) return Status::Timeout("timed out waiting for a PDU from " + peer_);
    if (p[0].revents & POLLIN) {
      ibv_cq* cq;
      void* ctx;
      while (ibv_get_cq_event(comp_channel_, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        armed = false;
      }
    }
    if (p[1].revents & POLLIN) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(cm_channel_, &ev) == 0) {
        const rdma_cm_event_type type = ev->event;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
          return Status::ConnectionFailed(peer_ + " closed the iSER connection during login");
        }
      }
    }
  }
}

Status IserDatamover::ReceivePdu(Bhs* bhs, std::vector<uint8_t>* data, Deadline deadline) {
  uint32_t index, length;
  if (!ready_receives_.empty()) {
    index = ready_receives_.front() & 0xffff;
    length = ready_receives_.front() >> 16;
    ready_receives_.pop_front();
  } else {
    ISER_RETURN_IF_ERROR(PollForReceive(&index, &length, deadline));
  }
  std::span<const uint8_t> payload;
  Status st = DecodeReceive(index, length, bhs, &payload);
  if (st.ok()) data->assign(payload.begin(), payload.end());
  ISER_RETURN_IF_ERROR(PostReceive(index));
  return st;
}

Status IserDatamover::EnterFullFeature(const ConnectionParams& params) {
  if (params.rdma_extensions) target_recv_dsl_ = params.target_recv_data_segment_length;
  return Status::OK();
}

Status IserDatamover::Start(DatamoverEvents* events) {
  events_ = events;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0 || timer_fd_ < 0) {
    return Status::ResourceExhausted("cannot create the I/O thread's descriptors");
  }
  itimerspec period{{1, 0}, {1, 0}};
  timerfd_settime(timer_fd_, 0, &period, nullptr);
  for (int fd : {comp_channel_->fd, cm_channel_->fd, wake_fd_, timer_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  ibv_req_notify_cq(cq_, 0);
  io_thread_ = std::thread([this] { Run(); });
  pthread_setname_np(io_thread_.native_handle(), kIoThreadName);
  return Status::OK();
}

void IserDatamover::Wake() {
  const uint64_t one = 1;
  ssize_t rc;
  do {
    rc = write(wake_fd_, &one, sizeof one);
  } while (rc < 0 && errno == EINTR);
}

void IserDatamover::Run() {
  io_thread_id_ = std::this_thread::get_id();
  // Login-phase receives that arrived early are delivered first.
  while (!ready_receives_.empty()) {
    const uint32_t v = ready_receives_.front();
    ready_receives_.pop_front();
    HandleReceive(v & 0xffff, v >> 16);
  }
  // Completions that arrived after the last login poll raise no CQ event.
  DrainCompletions();
  SendQueued();
  epoll_event events[8];
  while (!stopping_) {
    const int n = epoll_wait(epoll_fd_, events, 8, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(Status::ConnectionFailed(std::string("epoll_wait: ") + strerror(errno)));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      uint64_t count;
      if (fd == wake_fd_) {
        while (read(wake_fd_, &count, sizeof count) > 0) {
        }
        if (stopping_) break;
        events_->OnWake();
      } else if (fd == timer_fd_) {
        while (read(timer_fd_, &count, sizeof count) > 0) {
        }
        events_->OnTimer();
      } else if (fd == comp_channel_->fd) {
        ibv_cq* cq;
        void* ctx;
        while (ibv_get_cq_event(comp_channel_, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
        ibv_req_notify_cq(cq_, 0);
        DrainCompletions();
      } else if (fd == cm_channel_->fd) {
        HandleCmEvent();
      }
    }
    if (!failed_) SendQueued();
  }
  io_thread_id_ = {};
}

void IserDatamover::DrainCompletions() {
  // The CQ is armed before this runs, so a batch smaller than asked for means it was empty: no
  // extra empty poll (which costs a yield on some providers).
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  for (int n = kBatch; n == kBatch;) {
    n = ibv_poll_cq(cq_, kBatch, wc);
    for (int i = 0; i < n; ++i) {
      Completion c;
      Status st = Classify(wc[i], &c);
      if (!st.ok()) {
        Fail(std::move(st));
      } else if (c.kind == Completion::kReceive && !failed_) {
        HandleReceive(c.index, c.length);
      } else if (c.kind == Completion::kSendDone) {
        ReleaseSendSlot(c.index);
      }
    }
  }
}

Status IserDatamover::Classify(const ibv_wc& wc, Completion* out) const {
  const uint64_t tag = wc.wr_id & ~0xffffffffull;
  const bool recv = tag == kRecvTag;
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status == IBV_WC_WR_FLUSH_ERR && (failed_ || stopping_)) return Status::OK();
    const char* what = recv ? "receive" : tag == kSendTag ? "send" : "STag bind/invalidate";
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      // The first sign of a queue pair moved to the error state by the other side.
      return Status::ConnectionFailed(
          "the RDMA queue pair went to the error state (our " + std::string(what) +
          " was flushed): the target broke the connection or accessed memory through an STag it "
          "was not given");
    }
    char vendor[32];
    snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
    return Status::ConnectionFailed(std::string("RDMA ") + what + " completed with " +
                                    ibv_wc_status_str(wc.status) + " (vendor error " + vendor +
                                    ")");
  }
  if (recv && (wc.wc_flags & IBV_WC_WITH_INV)) {
    // Our connect request said we accept no Send-with-Invalidate (docs/iser-wire.md,
    // "Send-with-Invalidate").
    char rkey[16];
    snprintf(rkey, sizeof rkey, "0x%x", wc.invalidated_rkey);
    return Status::ProtocolError("the target sent a Send-with-Invalidate (STag " +
                                 std::string(rkey) + ") although we declined them");
  }
  out->index = static_cast<uint32_t>(wc.wr_id);
  out->length = wc.byte_len;
  out->kind = recv              ? Completion::kReceive
              : tag == kSendTag ? Completion::kSendDone
                                : Completion::kNothing;
  return Status::OK();
}

Status IserDatamover::DecodeReceive(uint32_t index, uint32_t length, Bhs* bhs,
                                    std::span<const uint8_t>* data) const {
  const uint8_t* p = recv_base_ + size_t{index} * kBufferBytes;
  if (length < kPduHeader || (p[0] & 0xf0) != kIserControl) {
    return Status::ProtocolError("malformed iSER message (" + std::to_string(length) +
                                 " bytes, flags " + std::to_string(p[0]) + ")");
  }
  std::memcpy(bhs->data(), p + kIserHeaderLength, kBhsLength);
  ISER_RETURN_IF_ERROR(ValidateTargetBhs(*bhs, kMaxRecvData, 0));
  // Targets may pad (LIO pads sense data): the data segment length, not byte_len, counts.
  const uint32_t dsl = bhs->data_segment_length();
  if (length < kPduHeader + dsl) {
    return Status::ProtocolError(std::string(OpcodeName(bhs->opcode())) + " of " +
                                 std::to_string(length) +
                                 " bytes is shorter than its data segment");
  }
  *data = {p + kPduHeader, dsl};
  return Status::OK();
}

void IserDatamover::HandleReceive(uint32_t index, uint32_t length) {
  Bhs bhs;
  std::span<const uint8_t> data;
  Status st = DecodeReceive(index, length, &bhs, &data);
  if (st.ok() && (bhs.opcode() == Opcode::kDataIn || bhs.opcode() == Opcode::kR2T)) {
    st = Status::ProtocolError(std::string("the target sent a ") + OpcodeName(bhs.opcode()) +
                               " on an iSER connection, where data moves by RDMA");
  }
  if (!st.ok()) {
    Fail(st);
    return;
  }
  if (bhs.opcode() == Opcode::kScsiResponse) {
    Exposure& e = by_itt_[bhs.itt() & (kIttSlots - 1)];
    if (e.task != nullptr && e.task->itt == bhs.itt()) {
      Task* t = e.task;
      uint32_t n = 0;
      if (t->direction == DataDirection::kRead && bhs.b[2] == 0) {
        // RC ordering: the target's RDMA WRITE landed before this SEND completed.
        n = t->transfer_length;
        if (bhs.flags() & kResidualUnderflow) n -= std::min(n, bhs.u32(bhs::kResidualCount));
        t->data_in_bytes = n;
      }
      Revoke(&e, n);
    }
  }
  events_->OnPdu(bhs, data);
  if (!failed_) {
    Status posted = PostReceive(index);
    if (!posted.ok()) Fail(posted);
  }
}

void IserDatamover::HandleCmEvent() {
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(cm_channel_, &ev) == 0) {
    const rdma_cm_event_type type = ev->event;
    rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
        type == RDMA_CM_EVENT_ADDR_CHANGE) {
      connected_ = false;
      Fail(Status::ConnectionFailed(std::string("the iSER connection ended: ") +
                                    rdma_event_str(type)));
    }
  }
}

bool IserDatamover::TrySend(Task* task, const Bhs& bhs, std::span<const uint8_t> data) {
  const int slot = FreeSendSlot();
  if (slot < 0) return false;
  uint8_t* p = send_slots_[slot].addr;
  uint8_t flags = kIserControl;
  uint32_t write_stag = 0, read_stag = 0;
  uint64_t write_va = 0, read_va = 0;
  ibv_send_wr bind{};
  ibv_send_wr* before = nullptr;
  if (task != nullptr && task->direction != DataDirection::kNone && task->transfer_length > 0) {
    const bool reading = task->direction == DataDirection::kRead;
    const uint32_t sent = reading ? 0 : task->immediate_bytes + task->unsolicited_bytes;
    if (sent < task->transfer_length) {
      uint32_t stag = 0;
      uint64_t va = 0;
      Status error;
      if (!Expose(task, sent, &stag, &va, &bind, &error)) return false;
      if (!error.ok()) {
        Fail(error);
        return true;
      }
      if (bind.opcode == IBV_WR_BIND_MW) before = &bind;
      if (reading) {
        flags |= kIserRsv;
        read_stag = stag;
        read_va = va;
      } else {
        // The target reads what was not sent as immediate or unsolicited data.
        flags |= kIserWsv;
        write_stag = stag;
        write_va = va;
      }
    }
  }
  BuildIserHeader(p, flags, write_stag, write_va, read_stag, read_va);
  std::memcpy(p + kIserHeaderLength, bhs.data(), kBhsLength);
  if (!data.empty()) std::memcpy(p + kPduHeader, data.data(), data.size());
  QueueSend(slot, kPduHeader + data.size(), before);
  return true;
}

void IserDatamover::SendQueued() {
  while (!pending_.empty() && !failed_) {
    Pending& next = pending_.front();
    std::span<const uint8_t> data = next.data;
    if (next.task != nullptr && next.task->immediate_bytes > 0) {
      data = {next.task->buffer, next.task->immediate_bytes};
    }
    if (!TrySend(next.task, next.bhs, data)) break;
    pending_.pop_front();
  }
  if (Status st = FlushSends(); !st.ok()) Fail(st);
}

void IserDatamover::SendCommand(Task* task) {
  if (task->transfer_length > kDataSlotBytes) {
    Fail(Status::InvalidArgument("a command of " + std::to_string(task->transfer_length) +
                                 " bytes exceeds the iSER buffer size"));
    return;
  }
  pending_.push_back({task, task->bhs, {}});
  // Unsolicited Data-Out (InitialR2T=No) travels in SENDs of at most TargetRecvDataSegmentLength.
  uint32_t offset = task->immediate_bytes;
  const uint32_t end = task->immediate_bytes + task->unsolicited_bytes;
  for (uint32_t data_sn = 0; offset < end; ++data_sn) {
    const uint32_t len = std::min(end - offset, target_recv_dsl_);
    Bhs out;
    out.set_opcode(Opcode::kDataOut, false);
    out.set_flags(offset + len == end ? kFinalBit : 0);
    out.set_data_segment_length(len);
    out.set_lun(task->bhs.lun());
    out.set_itt(task->itt);
    out.set_u32(bhs::kTtt, kReservedTag);
    out.set_u32(bhs::kDataSN, data_sn);
    out.set_u32(bhs::kBufferOffset, offset);
    pending_.push_back({nullptr, out, {task->buffer + offset, task->buffer + offset + len}});
    offset += len;
  }
}

void IserDatamover::SendDataOut(Task*, uint32_t, uint32_t, uint32_t) {
  Fail(Status::ProtocolError("the target sent an R2T on an iSER connection"));
}

void IserDatamover::SendControl(const Bhs& bhs, std::span<const uint8_t> data) {
  pending_.push_back({nullptr, bhs, {data.begin(), data.end()}});
}

void IserDatamover::Fail(Status status) {
  if (failed_) return;
  failed_ = true;
  pending_.clear();
  if (connected_) rdma_disconnect(id_);
  // The queue pair is in the error state now: nothing reaches the callers' buffers any more, and
  // they get them back when their tasks fail.
  for (Exposure& e : by_itt_) {
    if (e.task != nullptr) Revoke(&e, 0);
  }
  if (events_ != nullptr)
    events_->OnConnectionError(status.WithContext("connection " + Describe()));
}

void IserDatamover::Shutdown() {
  if (!io_thread_.joinable()) return;
  stopping_ = true;
  Wake();
  io_thread_.join();
}

void IserDatamover::Teardown() {
  if (connected_ && id_ != nullptr) {
    rdma_disconnect(id_);
    // Wait briefly for the flushes and DISCONNECTED so the target sees an orderly close.
    const Deadline deadline = Clock::now() + std::chrono::milliseconds(500);
    while (Clock::now() < deadline) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(cm_channel_, &ev) == 0) {
        const bool done = ev->event == RDMA_CM_EVENT_DISCONNECTED;
        rdma_ack_cm_event(ev);
        if (done) break;
      }
      pollfd p{cm_channel_->fd, POLLIN, 0};
      poll(&p, 1, MillisUntil(deadline));
    }
    connected_ = false;
  }
  if (cq_ != nullptr) {
    ibv_wc wc[32];
    while (ibv_poll_cq(cq_, 32, wc) > 0) {
    }
  }
  if (qp_created_) rdma_destroy_qp(id_);
  for (Exposure& e : by_itt_) {
    if (e.io_mr) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(e.io_mr));
  }
  by_itt_.clear();
  for (DataSlot& d : data_slots_) {
    if (d.mw) WarnIfReleaseFailed("ibv_dealloc_mw", ibv_dealloc_mw(d.mw));
    if (d.base_mr) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(d.base_mr));
  }
  data_slots_.clear();
  if (recv_mr_) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(recv_mr_));
  if (send_mr_) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(send_mr_));
  if (cq_) WarnIfReleaseFailed("ibv_destroy_cq", ibv_destroy_cq(cq_));
  if (comp_channel_) {
    WarnIfReleaseFailed("ibv_destroy_comp_channel", ibv_destroy_comp_channel(comp_channel_));
  }
  if (pd_) WarnIfReleaseFailed("ibv_dealloc_pd", ibv_dealloc_pd(pd_));
  if (id_) rdma_destroy_id(id_);
  if (cm_channel_) rdma_destroy_event_channel(cm_channel_);
  for (int fd : {epoll_fd_, wake_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
  for (uint8_t* r : regions_) free(r);
  regions_.clear();
  recv_mr_ = send_mr_ = nullptr;
  cq_ = nullptr;
  comp_channel_ = nullptr;
  pd_ = nullptr;
  id_ = nullptr;
  cm_channel_ = nullptr;
  qp_created_ = false;
  epoll_fd_ = wake_fd_ = timer_fd_ = -1;
}

}  // namespace iser
