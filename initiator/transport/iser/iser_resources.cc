#include "initiator/transport/iser/iser_resources.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "initiator/transport/io_loop.h"
#include "initiator/transport/iser/iser_memory.h"
#include "initiator/transport/portal.h"

namespace iser {

namespace {

constexpr int kCmTimeoutMs = 2000;

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

// Why no device reaches the portal, when the reason is that the RDMA devices present cannot run
// iSER at all: they offer no reliable connected (RC) queue pairs (AWS EFA: SRD and UD only).
// OK otherwise.
Status DevicesWithoutRc(const std::string& peer) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return Status::OK();
  std::string names;
  bool any_rc = false;
  for (int i = 0; i < n; ++i) {
    const ibv_transport_type t = list[i]->transport_type;
    if (t == IBV_TRANSPORT_IB || t == IBV_TRANSPORT_IWARP) {
      any_rc = true;
    } else {
      names += std::string(names.empty() ? "" : ", ") + ibv_get_device_name(list[i]);
    }
  }
  ibv_free_device_list(list);
  if (any_rc || names.empty()) return Status::OK();
  return Status::NotSupported(
      "cannot reach " + peer + " over iSER: the RDMA device" + std::string(n > 1 ? "s " : " ") +
      names +
      " offer no reliable connected (RC) queue pairs, which iSER needs (AWS EFA has SRD and UD "
      "only): use iSCSI over TCP (iscsi://) instead");
}

}  // namespace

IserResources::~IserResources() {
  DestroyQueuePair();
  Release();
}

Status IserResources::WaitCmEvent(rdma_cm_event_type want, Deadline deadline, const char* what) {
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
          ISER_RETURN_IF_ERROR(DevicesWithoutRc(peer_));
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

Status IserResources::Connect(const Portal& portal, Deadline deadline, IserMemory* memory) {
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
    const int err = errno;
    ISER_RETURN_IF_ERROR(DevicesWithoutRc(peer_));
    return Status::ConnectionFailed("rdma_resolve_addr " + peer_ + ": " + strerror(err));
  }
  ISER_RETURN_IF_ERROR(WaitCmEvent(RDMA_CM_EVENT_ADDR_RESOLVED, deadline, "resolving"));
  if (rdma_resolve_route(id_, kCmTimeoutMs) != 0) {
    return Status::ConnectionFailed("rdma_resolve_route " + peer_ + ": " + strerror(errno));
  }
  ISER_RETURN_IF_ERROR(WaitCmEvent(RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, "routing to"));
  ISER_RETURN_IF_ERROR(SetUp(memory));
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

Status IserResources::SetUp(IserMemory* memory) {
  ibv_context* verbs = id_->verbs;
  ibv_device_attr attr{};
  if (ibv_query_device(verbs, &attr) != 0) {
    return Status::ConnectionFailed("ibv_query_device failed: " + std::string(strerror(errno)));
  }
  // The target may have this many RDMA READs outstanding against us (it clamps to our offer).
  responder_resources_ = static_cast<uint8_t>(std::clamp(attr.max_qp_rd_atom, 1, 255));
  pd_ = ibv_alloc_pd(verbs);
  comp_channel_ = ibv_create_comp_channel(verbs);
  if (pd_ == nullptr || comp_channel_ == nullptr) {
    return Status::ConnectionFailed(
        "cannot allocate an RDMA protection domain or completion "
        "channel: " +
        std::string(strerror(errno)));
  }
  SetNonBlocking(comp_channel_->fd);
  // Per command: a window bind, the SEND, and a local invalidate after the response; only the
  // SEND is signalled. The device's limits bound all three.
  const uint32_t max_wr = static_cast<uint32_t>(std::max(attr.max_qp_wr, 0));
  const uint32_t max_cqe = static_cast<uint32_t>(std::max(attr.max_cqe, 0));
  // Under a limited RLIMIT_MEMLOCK the buffers take at most a quarter of what the process has
  // left (iser_memory.h), so that more sessions fit; fewer receives only mean fewer commands
  // in flight.
  size_t left = LockedLeft();
  const uint32_t fit =
      static_cast<uint32_t>(std::min<size_t>(kRecvBuffers, left / 4 / (2 * kBufferBytes)));
  const uint32_t buffers = std::max(fit, kMinBuffers);
  recv_count_ = std::min({buffers, max_wr, max_cqe / 4});
  send_count_ = std::min({buffers, max_wr / 3, (max_cqe - recv_count_) / 3});
  if (recv_count_ <= kUnexpectedReceives + 1 || send_count_ < 4) {
    return Status::NotSupported("RDMA device " + std::string(device_name()) + " offers queues of " +
                                std::to_string(attr.max_qp_wr) + " work requests and CQs of " +
                                std::to_string(attr.max_cqe) + " entries: too small for iSER");
  }
  // Room for every work request, signalled or not: a flush completes them all.
  const uint32_t cqe = recv_count_ + 3 * send_count_;
  cq_ = ibv_create_cq(verbs, static_cast<int>(cqe), this, comp_channel_, 0);
  if (cq_ == nullptr) {
    return Status::ConnectionFailed("cannot create an RDMA completion queue of " +
                                    std::to_string(cqe) +
                                    " entries: " + std::string(strerror(errno)));
  }
  ibv_qp_init_attr qp{};
  qp.send_cq = cq_;
  qp.recv_cq = cq_;
  qp.qp_type = IBV_QPT_RC;
  qp.cap.max_send_wr = 3 * send_count_;
  qp.cap.max_recv_wr = recv_count_;
  qp.cap.max_send_sge = 1;
  qp.cap.max_recv_sge = 1;
  qp.cap.max_inline_data = kInlineBytes;
  int rc = rdma_create_qp(id_, pd_, &qp);
  if (rc != 0 && errno == EINVAL) {
    // Some providers (siw) refuse an inline size above their maximum instead of lowering it,
    // and the device attributes do not say what it is: without inline data, then.
    qp.cap.max_inline_data = 0;
    rc = rdma_create_qp(id_, pd_, &qp);
  }
  if (rc != 0) {
    return Status::ConnectionFailed(
        "cannot create the RDMA queue pair (" + std::to_string(3 * send_count_) + " sends, " +
        std::to_string(recv_count_) + " receives): " + std::string(strerror(errno)));
  }
  qp_created_ = true;
  // What the QP got; the CQ was sized for what we post, which never exceeds what we asked for.
  recv_count_ = std::min(recv_count_, qp.cap.max_recv_wr);
  send_count_ = std::min(send_count_, qp.cap.max_send_wr / 3);
  max_inline_ = qp.cap.max_inline_data;
  const size_t bytes = size_t{recv_count_ + send_count_} * kBufferBytes;
  if (!ReserveLocked(bytes, &left)) return MemlockError(bytes + IserMemory::kMinSlotBytes, left);
  locked_ = bytes;

  recv_base_ = AllocateRegion(size_t{recv_count_} * kBufferBytes);
  uint8_t* send_base = AllocateRegion(size_t{send_count_} * kBufferBytes);
  if (recv_base_ == nullptr || send_base == nullptr) {
    free(recv_base_);
    free(send_base);
    recv_base_ = nullptr;
    return Status::ResourceExhausted("out of memory for iSER buffers");
  }
  regions_.push_back(recv_base_);
  regions_.push_back(send_base);
  ISER_RETURN_IF_ERROR(RegisterMemory(pd_, recv_base_, size_t{recv_count_} * kBufferBytes,
                                      IBV_ACCESS_LOCAL_WRITE, &recv_mr_));
  ISER_RETURN_IF_ERROR(
      RegisterMemory(pd_, send_base, size_t{send_count_} * kBufferBytes, 0, &send_mr_));
  send_slots_.resize(send_count_);
  queued_wrs_.reserve(2 * send_count_);  // a SEND per slot, each after at most one bind
  queued_sges_.reserve(send_count_);
  for (uint32_t i = 0; i < send_count_; ++i) {
    send_slots_[i] = send_base + size_t{i} * kBufferBytes;
    free_send_slots_.push_back(static_cast<int>(send_count_ - 1 - i));
  }
  ISER_RETURN_IF_ERROR(memory->SetUp(pd_, attr));
  for (uint32_t i = 0; i < recv_count_; ++i) ISER_RETURN_IF_ERROR(PostReceive(i));
  return Status::OK();
}

const char* IserResources::device_name() const {
  return ibv_get_device_name(id_->verbs->device);
}

void IserResources::Disconnect() {
  if (connected_) rdma_disconnect(id_);
}

Status IserResources::PostReceive(uint32_t index) {
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

void IserResources::ReleaseSendSlot(uint32_t index) {
  if (index < send_slots_.size()) free_send_slots_.push_back(static_cast<int>(index));
}

void IserResources::QueueSend(int slot, size_t length, const ibv_send_wr* bind) {
  // The caller got `slot` from FreeSendSlot: the top of the free stack.
  free_send_slots_.pop_back();
  if (bind != nullptr) queued_wrs_.push_back(*bind);
  queued_sges_.push_back({reinterpret_cast<uintptr_t>(send_slots_[slot]),
                          static_cast<uint32_t>(length), send_mr_->lkey});
  ibv_send_wr wr{};
  wr.wr_id = kSendTag | static_cast<uint32_t>(slot);
  wr.sg_list = &queued_sges_.back();
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | (length <= max_inline_ ? IBV_SEND_INLINE : 0);
  queued_wrs_.push_back(wr);
}

Status IserResources::FlushSends() {
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

void IserResources::DestroyQueuePair() {
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
  qp_created_ = false;
}

void IserResources::Release() {
  if (recv_mr_) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(recv_mr_));
  if (send_mr_) WarnIfReleaseFailed("ibv_dereg_mr", ibv_dereg_mr(send_mr_));
  if (cq_) WarnIfReleaseFailed("ibv_destroy_cq", ibv_destroy_cq(cq_));
  if (comp_channel_) {
    WarnIfReleaseFailed("ibv_destroy_comp_channel", ibv_destroy_comp_channel(comp_channel_));
  }
  if (pd_) WarnIfReleaseFailed("ibv_dealloc_pd", ibv_dealloc_pd(pd_));
  if (id_) rdma_destroy_id(id_);
  if (cm_channel_) rdma_destroy_event_channel(cm_channel_);
  for (uint8_t* r : regions_) free(r);
  regions_.clear();
  ReleaseLocked(locked_);
  locked_ = 0;
  send_slots_.clear();
  free_send_slots_.clear();
  recv_mr_ = send_mr_ = nullptr;
  recv_base_ = nullptr;
  cq_ = nullptr;
  comp_channel_ = nullptr;
  pd_ = nullptr;
  id_ = nullptr;
  cm_channel_ = nullptr;
}

}  // namespace iser
