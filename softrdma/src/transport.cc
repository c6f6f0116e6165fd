// RC transport over a Conn: the requester completes its send queue from cumulative ACKs and NAKs;
// the responder checks each operation against its own keys (keys.h) and receive queue, moves the
// payload with cross-memory attach, and acknowledges. Ordering: operations are handled in PSN order
// per connection, except that SENDs without a posted receive are parked (RNR) while RDMA READ/WRITE
// behind them proceed, so a target waiting for READ data before reposting receives cannot stall.
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "conn.h"
#include "faults.h"
#include "keys.h"
#include "log.h"
#include "pcap.h"
#include "profile.h"
#include "strict.h"

namespace softrdma {
namespace {

ibv_wc base_wc(Qp* qp, uint64_t wr_id, ibv_wc_status st) {
  ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wr_id;
  wc.status = st;
  wc.qp_num = qp->pub.qp_num;
  wc.src_qp = qp->remote_qpn;
  return wc;
}

void send_nak(const std::shared_ptr<Conn>& c, uint32_t psn, ibv_wc_status st) {
  WireAck m{{Msg::Nak, sizeof(WireAck)}, psn, static_cast<uint32_t>(st)};
  c->send(&m, sizeof m);
}

bool is_recv_consumer(uint8_t op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// Copies the payload that follows a pushed operation into local iovs.
void place_pushed(const iovec* local, size_t nlocal, const WireOp* op) {
  const auto* p = reinterpret_cast<const uint8_t*>(&op->sge[op->num_sge]);
  uint64_t left = op->total_len;
  for (size_t i = 0; i < nlocal && left; i++) {
    size_t n = std::min<uint64_t>(left, local[i].iov_len);
    memcpy(local[i].iov_base, p, n);
    p += n;
    left -= n;
  }
}

// Moves `total` bytes between local iovs and the requester's SGEs, by cross-memory attach or,
// on a connection where that was refused, through the socket. false on any failure.
bool move(const std::shared_ptr<Conn>& c, iovec* local, size_t nlocal, const WireOp* op,
          bool push) {
  if (op->pushed) {
    if (!push) {
      place_pushed(local, nlocal, op);
      return true;
    }
    std::vector<uint8_t> m(sizeof(WireReadResp) + op->total_len);
    auto* r = reinterpret_cast<WireReadResp*>(m.data());
    r->hdr = {Msg::ReadResp, static_cast<uint32_t>(m.size())};
    r->psn = op->psn;
    memcpy(r->data, local[0].iov_base, op->total_len);
    c->send(m.data(), m.size());
    return true;
  }
  pid_t pid = c->peer_pid;
  iovec remote[256];
  size_t n = op->num_sge;
  for (size_t i = 0; i < n; i++) {
    remote[i].iov_base = reinterpret_cast<void*>(op->sge[i].addr);
    remote[i].iov_len = op->sge[i].len;
  }
  if (op->total_len == 0) return true;
  ssize_t r = push ? process_vm_writev(pid, local, nlocal, remote, n, 0)
                   : process_vm_readv(pid, local, nlocal, remote, n, 0);
  if (r != static_cast<ssize_t>(op->total_len)) {
    log_warn("cross-memory %s of %llu bytes with pid %d failed: %s", push ? "write" : "read",
             static_cast<unsigned long long>(op->total_len), pid,
             r < 0 ? strerror(errno) : "short");
    return false;
  }
  return true;
}

void responder_error(Qp* qp, ibv_event_type ev) {
  qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
  ibv_async_event ae{};
  ae.element.qp = &qp->pub;
  ae.event_type = ev;
  post_async_event(ae);
}

enum class Outcome { Done, Parked };

// Handles one operation as responder. Caller holds c->mu.
Outcome respond(const std::shared_ptr<Conn>& c, const WireOp* op) {
  Qp* qp = c->qp;
  if (!qp) return Outcome::Done;
  std::unique_lock g(qp->mu);
  if (qp->destroyed || qp->attr.qp_state == IBV_QPS_ERR || qp->attr.qp_state < IBV_QPS_RTR) {
    send_nak(c, op->psn, IBV_WC_RETRY_EXC_ERR);
    return Outcome::Done;
  }
  iovec local[64];
  size_t nlocal = 0;
  if (op->opcode == IBV_WR_RDMA_WRITE || op->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
      op->opcode == IBV_WR_RDMA_READ) {
    bool read = op->opcode == IBV_WR_RDMA_READ;
    int need = read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
    if (op->total_len && !remote_access_ok(qp, op->rkey, op->remote_addr, op->total_len, need)) {
      log_debug("qp %u: remote access error (rkey 0x%x addr 0x%llx len %llu)", qp->pub.qp_num,
                op->rkey, static_cast<unsigned long long>(op->remote_addr),
                static_cast<unsigned long long>(op->total_len));
      send_nak(c, op->psn, IBV_WC_REM_ACCESS_ERR);
      responder_error(qp, IBV_EVENT_QP_ACCESS_ERR);
      return Outcome::Done;
    }
    local[0].iov_base = reinterpret_cast<void*>(op->remote_addr);
    local[0].iov_len = op->total_len;
    if (!move(c, local, 1, op, read)) {
      send_nak(c, op->psn, IBV_WC_REM_OP_ERR);
      responder_error(qp, IBV_EVENT_QP_FATAL);
      return Outcome::Done;
    }
    if (pcap_enabled()) {
      pcap_request(op, qp->remote_qpn, qp->pub.qp_num, local, read ? 0 : 1);
      if (op->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
        pcap_response(op, qp->pub.qp_num, qp->remote_qpn, local, 1, 0);
    }
    if (op->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return Outcome::Done;
  }
  if (!is_recv_consumer(op->opcode)) {
    send_nak(c, op->psn, IBV_WC_REM_INV_REQ_ERR);
    responder_error(qp, IBV_EVENT_QP_REQ_ERR);
    return Outcome::Done;
  }
  if (qp->rq.empty() && profile().transport == Transport::Iwarp) {
    // iWARP has no RNR: an untagged message with no buffer posted is a DDP error (no buffer for
    // that MSN); the responder terminates the stream. The requester's SEND has already completed
    // (iWARP completes a send once the transport took it), so the Terminate acknowledges it.
    log_debug("qp %u: SEND with no receive posted: iWARP terminates the connection",
              qp->pub.qp_num);
    WireAck t{{Msg::Terminate, sizeof(WireAck)}, op->psn, IBV_WC_WR_FLUSH_ERR};
    c->send(&t, sizeof t);
    responder_error(qp, IBV_EVENT_QP_FATAL);
    c->cut();
    return Outcome::Done;
  }
  if (qp->rq.empty()) {
    if (op->rnr_retry == 0) {
      send_nak(c, op->psn, IBV_WC_RNR_RETRY_EXC_ERR);
      return Outcome::Done;
    }
    qp->rnr_waiting = true;
    return Outcome::Parked;
  }
  RecvWqe r = std::move(qp->rq.front());
  qp->rq.pop_front();
  Cq* cq = static_cast<Cq*>(static_cast<void*>(qp->pub.recv_cq));
  ibv_wc wc = base_wc(qp, r.wr_id, IBV_WC_SUCCESS);
  if (op->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = op->total_len;
  } else {
    uint64_t cap = 0;
    for (auto& s : r.sge) {
      local[nlocal].iov_base = reinterpret_cast<void*>(s.addr);
      local[nlocal].iov_len = s.length;
      cap += s.length;
      nlocal++;
    }
    if (op->total_len > cap) {
      wc.status = IBV_WC_LOC_LEN_ERR;
      strict_poison_error(&wc);
      cq_push(cq, wc, qp, WorkQueue::Recv);
      send_nak(c, op->psn, IBV_WC_REM_INV_REQ_ERR);
      qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
      return Outcome::Done;
    }
    if (!move(c, local, nlocal, op, false)) {
      wc.status = IBV_WC_LOC_PROT_ERR;
      strict_poison_error(&wc);
      cq_push(cq, wc, qp, WorkQueue::Recv);
      send_nak(c, op->psn, IBV_WC_REM_OP_ERR);
      qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
      return Outcome::Done;
    }
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = op->total_len;
  }
  if (op->opcode == IBV_WR_SEND_WITH_IMM || op->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = op->imm;
  } else if (op->opcode == IBV_WR_SEND_WITH_INV) {
    if (!mw_remote_invalidate(qp, op->imm)) {
      // What rxe does (IB class J): the data is placed and acknowledged, the receive completes
      // in error and the responder's QP goes to error.
      log_debug("qp %u: SEND_WITH_INV names 0x%x, no window bound through this QP", qp->pub.qp_num,
                op->imm);
      wc.status = IBV_WC_REM_INV_REQ_ERR;
      strict_poison_error(&wc);
      cq_push(cq, wc, qp, WorkQueue::Recv);
      qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
      return Outcome::Done;
    }
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = op->imm;
  }
  if (pcap_enabled()) {
    if (op->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
      pcap_request(op, qp->remote_qpn, qp->pub.qp_num, local, nlocal);
    pcap_response(op, qp->pub.qp_num, qp->remote_qpn, nullptr, 0, 0);
  }
  cq_push(cq, wc, qp, WorkQueue::Recv);
  return Outcome::Done;
}

uint32_t first_parked_psn(const Conn& c) {
  return reinterpret_cast<const WireOp*>(c.rnr_parked.front().data())->psn;
}

// The RNR NAK timer of IBA table 45 (min_rnr_timer 0-31), in microseconds.
uint32_t rnr_timer_us(uint8_t code) {
  static constexpr uint32_t kTable[32] = {
      655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
      480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kTable[code & 31];
}

void set_rnr_timer(const Conn& c, uint32_t period_us) {
  itimerspec t{};
  t.it_value.tv_sec = period_us / 1000000;
  t.it_value.tv_nsec = (period_us % 1000000) * 1000L;
  t.it_interval = t.it_value;
  timerfd_settime(c.rnr_timer_fd, 0, &t, nullptr);
}

// Starts the retry budget of a SEND that has just become the first parked one (or stops the
// timer when none is parked). Caller holds c->mu.
void rnr_head_changed(const std::shared_ptr<Conn>& c) {
  uint8_t retry = c->rnr_parked.empty()
                      ? 7
                      : reinterpret_cast<const WireOp*>(c->rnr_parked.front().data())->rnr_retry;
  if (retry == 7 || !c->qp) {
    if (c->rnr_timer_fd >= 0) set_rnr_timer(*c, 0);
    return;
  }
  if (c->rnr_timer_fd < 0) {
    c->rnr_timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (c->rnr_timer_fd < 0) {
      log_warn("timerfd_create: %s; RNR retries will wait forever", strerror(errno));
      return;
    }
    conn_watch_rnr_timer(c);
  }
  c->rnr_retries_left = retry;
  set_rnr_timer(*c, rnr_timer_us(c->qp->attr.min_rnr_timer));
}

// iWARP, passive side: the active side has spoken, so what the application posted before goes out.
void release_awaiting(const std::shared_ptr<Conn>& c) {
  Qp* qp = c->qp;
  if (!qp || !qp->await_peer_first.load()) return;
  std::lock_guard g(qp->mu);
  if (!qp->await_peer_first.load()) return;
  qp->await_peer_first = false;
  if (!qp->await_held.empty()) c->send(qp->await_held.data(), qp->await_held.size());
  qp->await_held.clear();
}

void handle_op(const std::shared_ptr<Conn>& c, const WireOp* op) {
  size_t need = sizeof(WireOp) + op->num_sge * sizeof(WireSge);
  if (op->pushed && op->opcode != IBV_WR_RDMA_READ) need += op->total_len;
  if (op->hdr.len < need) {
    log_warn("malformed operation on a connection; ignored");
    return;
  }
  if (op->psn > c->seen_psn) c->seen_psn = op->psn;
  release_awaiting(c);
  if ((!c->rnr_parked.empty() && is_recv_consumer(op->opcode)) ||
      respond(c, op) == Outcome::Parked) {
    const auto* b = reinterpret_cast<const uint8_t*>(op);
    c->rnr_parked.emplace_back(b, b + op->hdr.len);
    if (c->rnr_parked.size() == 1) rnr_head_changed(c);
  }
  c->done_psn = c->rnr_parked.empty() ? c->seen_psn : first_parked_psn(*c) - 1;
}

// The responder terminated the connection at `psn` (iWARP): everything up to it is done, the rest
// flushes; the socket closing next reports the disconnect.
void handle_terminate(const std::shared_ptr<Conn>& c, const WireAck* t) {
  Qp* qp = c->qp;
  if (!qp) return;
  std::lock_guard g(qp->mu);
  if (qp->attr.qp_state == IBV_QPS_ERR) return;
  while (!qp->sq.empty() && qp->sq.front().psn <= t->psn) sq_complete_front(qp, IBV_WC_SUCCESS);
  qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
}

void handle_ack(const std::shared_ptr<Conn>& c, const WireAck* a, bool nak) {
  fault_delay_completion();
  Qp* qp = c->qp;
  if (!qp) return;
  std::lock_guard g(qp->mu);
  if (qp->attr.qp_state == IBV_QPS_ERR) return;
  while (!qp->sq.empty() && qp->sq.front().psn < a->psn + (nak ? 0 : 1)) {
    if (qp->sq.front().opcode == IBV_WC_RDMA_READ && qp->reads_outstanding) qp->reads_outstanding--;
    sq_complete_front(qp, IBV_WC_SUCCESS);
  }
  if (nak && !qp->sq.empty() && qp->sq.front().psn == a->psn) {
    sq_complete_front(qp, static_cast<ibv_wc_status>(a->status));
    qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
    return;
  }
  // READs held back by strict mode's max_rd_atomic go out as earlier ones complete.
  while (!qp->held_ops.empty()) {
    const auto* op = reinterpret_cast<const WireOp*>(qp->held_ops.front().data());
    if (op->opcode == IBV_WR_RDMA_READ) {
      if (qp->reads_outstanding >= qp->attr.max_rd_atomic) break;
      qp->reads_outstanding++;
    }
    c->send(qp->held_ops.front().data(), qp->held_ops.front().size());
    qp->held_ops.pop_front();
  }
}

}  // namespace

void sq_complete_front(Qp* qp, ibv_wc_status st) {
  SendWqe w = qp->sq.front();
  qp->sq.pop_front();
  if (!w.signaled && st == IBV_WC_SUCCESS) {
    qp->sq_retired_silently++;  // its slot is freed by the next completion polled
    return;
  }
  ibv_wc wc = base_wc(qp, w.wr_id, st);
  if (st == IBV_WC_SUCCESS) {
    wc.opcode = w.opcode;
    wc.byte_len = w.opcode == IBV_WC_RDMA_READ ? w.byte_len : 0;
  } else
    strict_poison_error(&wc);
  cq_push(static_cast<Cq*>(static_cast<void*>(qp->pub.send_cq)), wc, qp, WorkQueue::Send);
}

// Scatters fallback READ data into the requester's SGEs of that work request.
void handle_read_resp(const std::shared_ptr<Conn>& c, const WireReadResp* r) {
  Qp* qp = c->qp;
  if (!qp) return;
  std::lock_guard g(qp->mu);
  uint64_t left = r->hdr.len - sizeof(WireReadResp);
  const uint8_t* p = r->data;
  for (auto& w : qp->sq) {
    if (w.psn != r->psn) continue;
    for (auto& s : w.read_sge) {
      size_t n = std::min<uint64_t>(left, s.length);
      memcpy(reinterpret_cast<void*>(s.addr), p, n);
      p += n;
      left -= n;
    }
    return;
  }
}

void transport_message(const std::shared_ptr<Conn>& c, const WireHdr* msg) {
  std::lock_guard g(c->mu);
  switch (msg->type) {
    case Msg::ReadResp:
      if (msg->len >= sizeof(WireReadResp))
        handle_read_resp(c, reinterpret_cast<const WireReadResp*>(msg));
      break;
    case Msg::Op:
      handle_op(c, reinterpret_cast<const WireOp*>(msg));
      break;
    case Msg::Terminate:
      if (msg->len >= sizeof(WireAck)) handle_terminate(c, reinterpret_cast<const WireAck*>(msg));
      break;
    case Msg::Ack:
    case Msg::Nak:
      handle_ack(c, reinterpret_cast<const WireAck*>(msg), msg->type == Msg::Nak);
      break;
    default:
      break;
  }
}

void transport_send_ack(const std::shared_ptr<Conn>& c) {
  std::lock_guard g(c->mu);
  if (c->done_psn == c->acked_psn) return;
  c->acked_psn = c->done_psn;
  WireAck m{{Msg::Ack, sizeof(WireAck)}, c->done_psn, 0};
  c->send(&m, sizeof m);
}

void conn_kick(const std::shared_ptr<Conn>& c) {
  CompletionBatch completions;  // visible once the acknowledgement below is sent
  {
    std::lock_guard g(c->mu);
    bool moved = false;
    while (!c->rnr_parked.empty()) {
      const auto* op = reinterpret_cast<const WireOp*>(c->rnr_parked.front().data());
      if (respond(c, op) == Outcome::Parked) break;
      c->rnr_parked.pop_front();
      moved = true;
    }
    if (moved) rnr_head_changed(c);
    c->done_psn = c->rnr_parked.empty() ? c->seen_psn : first_parked_psn(*c) - 1;
    if (c->rnr_parked.empty() && c->qp) {
      std::lock_guard qg(c->qp->mu);
      c->qp->rnr_waiting = false;
    }
  }
  transport_send_ack(c);
}

// One RNR timer period passed with the first parked SEND still lacking a receive: one retry is
// spent. When none are left the requester gets IBV_WC_RNR_RETRY_EXC_ERR (its QP goes to error
// and flushes the rest), and what was parked behind that SEND is dropped, never to be retried.
void transport_rnr_timer(const std::shared_ptr<Conn>& c) {
  uint64_t expirations;
  if (read(c->rnr_timer_fd, &expirations, sizeof expirations) != sizeof expirations) return;
  std::lock_guard g(c->mu);
  if (c->rnr_parked.empty()) return;
  if (c->rnr_retries_left > expirations) {
    c->rnr_retries_left -= expirations;
    return;
  }
  send_nak(c, first_parked_psn(*c), IBV_WC_RNR_RETRY_EXC_ERR);
  c->rnr_parked.clear();
  rnr_head_changed(c);
  c->done_psn = c->acked_psn = c->seen_psn;
}

}  // namespace softrdma
