// Protection domains, memory regions, completion queues and channels, and RC queue pairs with
// their post/poll data path (the context ops the inline verbs jump through).
#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "api.h"
#include "conn.h"
#include "faults.h"
#include "keys.h"
#include "log.h"
#include "objects.h"
#include "profile.h"
#include "strict.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace softrdma;

namespace softrdma {

uint32_t random_u32() {
  static std::mutex mu;
  static std::mt19937 rng{std::random_device{}()};
  std::lock_guard g(mu);
  return rng();
}

// Something changed on the CQ (a completion, its destruction): wakes the threads sleeping in
// poll_cq_adaptive on it.
static void cq_changed(Cq* cq) {
  cq->pushes.fetch_add(1);
  if (cq->sleepers.load() > 0)
    syscall(SYS_futex, &cq->pushes, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

// The completions held by this thread's open CompletionBatch (null while none is open).
static thread_local std::vector<std::pair<Cq*, Cqe>>* held_completions = nullptr;

// A CQ error (an overrun in strict mode, or injected), as hardware reports it: IBV_EVENT_CQ_ERR
// on the async fd, and every QP using the CQ goes to error. The QPs are failed from the loop
// thread: the completion that overran may be pushed with one QP's lock held, and taking the
// others' there could deadlock. The caller has set cq->overrun: the CQ takes no more completions.
static void cq_error(Cq* cq, std::vector<Qp*> users) {
  ibv_async_event ae{};
  ae.element.cq = &cq->pub;
  ae.event_type = IBV_EVENT_CQ_ERR;
  post_async_event(ae);
  loop_after(std::chrono::milliseconds(0), [users = std::move(users)] {
    for (Qp* qp : users) {
      std::lock_guard g(qp->mu);
      if (!qp->destroyed && qp->attr.qp_state != IBV_QPS_ERR) {
        qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
        qp->pub.state = IBV_QPS_ERR;
      }
    }
  });
}

// Adds n completions to cq and raises its completion event if armed; the caller wakes pollers
// (cq_changed). The event's eventfd write, which wakes the channel's reader, is the slow part, so
// it happens outside the CQ's lock: the application's ibv_poll_cq and ibv_req_notify_cq need that
// lock meanwhile. Channel::signalling keeps the channel's fd open until the write is done.
static void cq_add(Cq* cq, const Cqe* e, size_t n) {
  Channel* ch = nullptr;
  {
    std::unique_lock g(cq->mu);
    if (cq->destroyed || cq->overrun) return;
    if (strict_mode() && cq->entries.size() + n > static_cast<size_t>(cq->capacity)) {
      // What still fits goes in; the first completion beyond overruns the CQ.
      const size_t room = static_cast<size_t>(cq->capacity) - cq->entries.size();
      cq->entries.insert(cq->entries.end(), e, e + room);
      cq->overrun = true;
      std::vector<Qp*> users = cq->users;
      g.unlock();
      log_warn("CQ %p overrun: more than its %d entries unpolled (IBV_EVENT_CQ_ERR)",
               static_cast<void*>(cq), cq->capacity);
      cq_error(cq, std::move(users));
      return;
    }
    cq->entries.insert(cq->entries.end(), e, e + n);
    if (!cq->armed || !cq->pub.channel) return;
    cq->armed = false;
    ch = impl<Channel>(cq->pub.channel);
    std::lock_guard cg(ch->mu);
    ch->events.push_back(&cq->pub);
    ch->signalling++;
  }
  uint64_t one = 1;
  if (write(ch->pub.fd, &one, sizeof one) < 0) log_warn("completion event lost");
  ch->signalling--;
}

bool cq_raise_error(Cq* cq) {
  std::vector<Qp*> users;
  {
    std::lock_guard g(cq->mu);
    if (cq->destroyed || cq->overrun) return false;
    cq->overrun = true;
    users = cq->users;
  }
  cq_error(cq, std::move(users));
  return true;
}

void cq_push(Cq* cq, const ibv_wc& wc, Qp* qp, WorkQueue q) {
  Cqe e{wc, qp, 0, 0};
  if (q == WorkQueue::Recv) {
    e.recv_slots = 1;
  } else {
    e.send_slots = qp->sq_retired_silently + 1;
    qp->sq_retired_silently = 0;
  }
  if (held_completions) {
    held_completions->push_back({cq, e});
    return;
  }
  cq_add(cq, &e, 1);
  cq_changed(cq);
}

CompletionBatch::CompletionBatch() {
  static thread_local std::vector<std::pair<Cq*, Cqe>> held;
  if (held_completions) return;  // an outer batch on this thread holds them
  outer_ = true;
  held.clear();
  held_completions = &held;
}

CompletionBatch::~CompletionBatch() {
  if (!outer_) return;
  release_held_completions();
  held_completions = nullptr;
}

void release_held_completions() {
  if (!held_completions || held_completions->empty()) return;
  // One lock of the CQ per run of completions for it, and one wake-up per CQ for the whole
  // batch, after all of them: a thread sleeping in ibv_poll_cq needs only one.
  static thread_local std::vector<Cqe> run;
  static thread_local std::vector<Cq*> changed;
  changed.clear();
  const auto& held = *held_completions;
  for (size_t i = 0; i < held.size();) {
    Cq* cq = held[i].first;
    run.clear();
    for (; i < held.size() && held[i].first == cq; i++) run.push_back(held[i].second);
    cq_add(cq, run.data(), run.size());
    if (std::find(changed.begin(), changed.end(), cq) == changed.end()) changed.push_back(cq);
  }
  for (Cq* cq : changed) cq_changed(cq);
  held_completions->clear();
}

void qp_fail_locked(Qp* qp, ibv_wc_status status, bool newest_failed) {
  qp->attr.qp_state = IBV_QPS_ERR;
  qp->held_ops.clear();
  qp->reads_outstanding = 0;
  auto* scq = impl<Cq>(qp->pub.send_cq);
  auto* rcq = impl<Cq>(qp->pub.recv_cq);
  for (auto& w : qp->sq) {
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status =
        &w == (newest_failed ? &qp->sq.back() : &qp->sq.front()) ? status : IBV_WC_WR_FLUSH_ERR;
    wc.qp_num = qp->pub.qp_num;
    strict_poison_error(&wc);
    cq_push(scq, wc, qp, WorkQueue::Send);
  }
  qp->sq.clear();
  for (auto& r : qp->rq) {
    ibv_wc wc{};
    wc.wr_id = r.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->pub.qp_num;
    strict_poison_error(&wc);
    cq_push(rcq, wc, qp, WorkQueue::Recv);
  }
  qp->rq.clear();
}

void qp_attach(ibv_qp* q, const std::shared_ptr<Conn>& c, uint32_t remote_qpn, uint8_t rnr_retry,
               const ReadDepths& depths, bool passive) {
  Qp* qp = impl<Qp>(q);
  {
    std::lock_guard g(c->mu);
    c->qp = qp;
  }
  std::lock_guard g(qp->mu);
  qp->conn = c;
  qp->remote_qpn = remote_qpn;
  qp->attr.dest_qp_num = remote_qpn;
  qp->attr.rnr_retry = rnr_retry;
  qp->attr.max_rd_atomic = depths.initiator_depth;
  qp->attr.max_dest_rd_atomic = depths.responder_resources;
  qp->peer_max_dest_rd_atomic = depths.peer_responder_resources;
  qp->attr.qp_state = IBV_QPS_RTS;
  // MPA (RFC 5044, 7.1): the side that accepted may send only once the other side's first message
  // arrived. softrdma holds what it posts until then rather than failing the connection.
  qp->await_peer_first = passive && profile().transport == Transport::Iwarp;
}

void qp_disconnected(ibv_qp* q, ibv_wc_status status) {
  Qp* qp = impl<Qp>(q);
  {
    std::lock_guard g(qp->mu);
    if (qp->attr.qp_state != IBV_QPS_ERR) qp_fail_locked(qp, status);
  }
  // The flushes are in the CQ before the caller reports DISCONNECTED.
  release_held_completions();
}

}  // namespace softrdma

namespace {

int poll_cq_locked(ibv_cq* c, int n, ibv_wc* wc) {
  Cq* cq = impl<Cq>(c);
  std::lock_guard g(cq->mu);
  if (cq->destroyed) {
    if (!cq->warned) log_warn("ibv_poll_cq on a destroyed CQ (answered empty)");
    cq->warned = true;
    return 0;
  }
  int i = 0;
  for (; i < n && !cq->entries.empty(); i++) {
    const Cqe& e = cq->entries.front();
    wc[i] = e.wc;
    if (e.send_slots) e.qp->send_slots -= e.send_slots;
    if (e.recv_slots) e.qp->recv_slots -= e.recv_slots;
    cq->entries.pop_front();
  }
  return i;
}

// A busy-polling caller (perftest) would keep the loop threads that produce its completions off
// the CPU when cores are few. So from the third empty poll in a row on, an empty poll yields,
// and once a thread has found every CQ it polled empty kBusyPolls times in a row, the next empty
// poll sleeps until a completion is pushed to that CQ or kIdleSleepNs pass. Callers that poll
// after a completion event see at most two empty polls in a row (drained, then after re-arming)
// and so neither yield nor sleep: a completion event can find its completions already taken.
constexpr int kEventDrivenEmptyPolls = 2;
constexpr int kBusyPolls = 16;
constexpr long kIdleSleepNs = 200 * 1000;
thread_local int empty_polls = 0;

int poll_cq_adaptive(ibv_cq* c, int n, ibv_wc* wc) {
  Cq* cq = impl<Cq>(c);
  uint32_t seen = cq->pushes.load();
  int got = poll_cq_locked(c, n, wc);
  if (got == 0 && ++empty_polls < kBusyPolls) {
    if (empty_polls > kEventDrivenEmptyPolls) sched_yield();
    return 0;
  }
  if (got == 0) {
    cq->sleepers.fetch_add(1);
    timespec idle{0, kIdleSleepNs};
    syscall(SYS_futex, &cq->pushes, FUTEX_WAIT_PRIVATE, seen, &idle, nullptr, 0);
    cq->sleepers.fetch_sub(1);
    got = poll_cq_locked(c, n, wc);
  }
  if (got > 0) empty_polls = 0;
  return got;
}

int req_notify_cq(ibv_cq* c, int) {
  Cq* cq = impl<Cq>(c);
  std::lock_guard g(cq->mu);
  cq->armed = true;
  return 0;
}

ibv_wc_opcode wc_opcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

bool supported(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
         op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ ||
         op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

bool is_local(ibv_wr_opcode op) {
  return op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

// A bind or local invalidate changes only this process's key tables, which are what the
// responder checks, so doing it as it is posted keeps send-queue order: a SEND posted after a
// bind finds the window bound at the peer's first use of the key, and nothing posted after an
// invalidation can see the window. Its completion still waits for the work posted before it.
void post_local(Qp* qp, const ibv_send_wr& wr, SendWqe w) {
  ibv_wc_status st =
      wr.opcode == IBV_WR_BIND_MW ? mw_bind(qp, wr) : mw_local_invalidate(qp, wr.invalidate_rkey);
  qp->sq.push_back(std::move(w));
  if (st != IBV_WC_SUCCESS)
    qp_fail_locked(qp, st, true);
  else if (qp->sq.size() == 1)
    sq_complete_front(qp, IBV_WC_SUCCESS);
}

// Local keys must name a live MR covering the SGE with the access the operation needs. On iWARP
// an RDMA READ's data arrives as a tagged write into the requester's buffer, named by its key
// (RDMAP's sink STag), so that MR needs IBV_ACCESS_REMOTE_WRITE too.
bool sge_ok(Qp* qp, const ibv_sge& s, bool local_write, bool read_sink = false) {
  if (s.length == 0) return true;
  Mr* mr = mr_by_lkey(s.lkey);
  if (!mr || mr->destroyed || &mr->pd->pub != qp->pub.pd) return false;
  if (local_write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return false;
  if (read_sink && profile().transport == Transport::Iwarp &&
      !(mr->access & IBV_ACCESS_REMOTE_WRITE)) {
    log_debug("qp %u: an iWARP RDMA READ sink needs IBV_ACCESS_REMOTE_WRITE", qp->pub.qp_num);
    return false;
  }
  uint64_t start = reinterpret_cast<uintptr_t>(mr->pub.addr);
  return s.addr >= start && s.length <= mr->pub.length &&
         s.addr - start <= mr->pub.length - s.length;
}

// Strict mode's RDMA READ limits for the operation at msg[at..] just built: held back (with
// everything after it) while max_rd_atomic READs are outstanding, as hardware stalls the send
// queue; false if sending it would exceed what the peer accepted as responder (the peer would
// refuse it: IBV_WC_REM_INV_REQ_ERR), and then the operation is dropped from msg.
bool limit_reads(Qp* qp, bool read, std::vector<uint8_t>& msg, size_t at) {
  if (!read && qp->held_ops.empty()) return true;
  uint32_t limit = qp->attr.max_rd_atomic;
  if (!qp->held_ops.empty() || (read && limit && qp->reads_outstanding >= limit)) {
    qp->held_ops.emplace_back(msg.begin() + at, msg.end());
    msg.resize(at);
    return true;
  }
  if (qp->peer_max_dest_rd_atomic && qp->reads_outstanding >= qp->peer_max_dest_rd_atomic) {
    log_debug("qp %u: RDMA READ beyond the peer's %u outstanding (initiator_depth too large)",
              qp->pub.qp_num, qp->peer_max_dest_rd_atomic);
    msg.resize(at);
    return false;
  }
  qp->reads_outstanding++;
  return true;
}

// Builds in msg the messages of the work requests, in order; returns what ibv_post_send returns.
int post_send_locked(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad, std::vector<uint8_t>& msg) {
  for (; wr; wr = wr->next) {
    if (qp->destroyed || qp->attr.qp_state < IBV_QPS_RTS || !supported(wr->opcode) ||
        wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->init.cap.max_send_sge ||
        (wr->opcode == IBV_WR_BIND_MW && !wr->bind_mw.mw) ||
        (wr->opcode == IBV_WR_RDMA_READ && profile().check_caps &&
         wr->num_sge > profile().max_sge_rd)) {
      *bad = wr;
      return EINVAL;
    }
    if (strict_mode() && qp->send_slots >= static_cast<int>(qp->init.cap.max_send_wr)) {
      log_debug("qp %u: send queue full (%u work requests)", qp->pub.qp_num,
                qp->init.cap.max_send_wr);
      *bad = wr;
      return ENOMEM;
    }
    bool local = is_local(wr->opcode);
    bool is_inline = (wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ && !local;
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; i++) total += wr->sg_list[i].length;
    if (is_inline && total > qp->init.cap.max_inline_data) {
      *bad = wr;
      return EINVAL;
    }
    bool signaled = qp->init.sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    uint32_t psn = local ? qp->next_psn - 1 : qp->next_psn++;
    SendWqe w{wr->wr_id, psn, wc_opcode(wr->opcode), static_cast<uint32_t>(total), signaled, {}};
    qp->send_slots++;
    if (qp->attr.qp_state == IBV_QPS_ERR || !qp->conn) {
      qp->sq.push_back(std::move(w));
      qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
      continue;
    }
    if (local) {
      post_local(qp, *wr, std::move(w));
      continue;
    }
    if (fault_drop_now()) {
      log_debug("fault injection: dropping the connection of qp %u", qp->pub.qp_num);
      qp->conn->send(msg.data(), msg.size());
      msg.clear();
      qp->conn->cut();
      qp->sq.push_back(std::move(w));
      continue;
    }
    bool lk_ok = true;
    if (!is_inline)
      for (int i = 0; i < wr->num_sge; i++)
        lk_ok = lk_ok && sge_ok(qp, wr->sg_list[i], wr->opcode == IBV_WR_RDMA_READ,
                                wr->opcode == IBV_WR_RDMA_READ);
    if (!lk_ok) {
      qp->sq.push_back(std::move(w));
      qp_fail_locked(qp, IBV_WC_LOC_PROT_ERR, true);
      continue;
    }
    size_t nsge = is_inline ? 1 : wr->num_sge;
    const size_t at = msg.size();
    msg.resize(at + sizeof(WireOp) + nsge * sizeof(WireSge));
    auto* op = reinterpret_cast<WireOp*>(msg.data() + at);
    op->hdr = {Msg::Op, static_cast<uint32_t>(msg.size() - at)};
    op->psn = w.psn;
    op->opcode = wr->opcode;
    op->num_sge = nsge;
    op->rnr_retry = qp->attr.rnr_retry;
    op->solicited = (wr->send_flags & IBV_SEND_SOLICITED) != 0;
    op->imm = wr->opcode == IBV_WR_SEND_WITH_INV ? wr->invalidate_rkey : wr->imm_data;
    op->rkey = wr->wr.rdma.rkey;
    op->remote_addr = wr->wr.rdma.remote_addr;
    op->total_len = total;
    if (is_inline) {
      // Inline data belongs to softrdma once posted: keep a copy the responder reads from.
      for (int i = 0; i < wr->num_sge; i++) {
        const auto* p = reinterpret_cast<const uint8_t*>(wr->sg_list[i].addr);
        w.inline_data.insert(w.inline_data.end(), p, p + wr->sg_list[i].length);
      }
      op->sge[0] = {reinterpret_cast<uintptr_t>(w.inline_data.data()), total};
    } else {
      for (size_t i = 0; i < nsge; i++) op->sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length};
    }
    // Small SEND and WRITE payloads travel in the stream even where the responder could pull
    // them: copying a few hundred bytes twice through the socket is cheaper than the
    // responder's process_vm_readv system call, which also pins the page (iSER's commands and
    // responses are 76 bytes).
    constexpr uint64_t kPushBytes = 1024;
    if (qp->conn->push || (wr->opcode != IBV_WR_RDMA_READ && total <= kPushBytes)) {
      op->pushed = 1;
      if (wr->opcode == IBV_WR_RDMA_READ) {
        w.read_sge.assign(wr->sg_list, wr->sg_list + wr->num_sge);
      } else {
        // The payload follows the message (the responder cannot pull it, or it is small).
        for (size_t i = 0; i < nsge; i++) {
          const auto* p = reinterpret_cast<const uint8_t*>(op->sge[i].addr);
          const uint64_t len = op->sge[i].len;
          msg.insert(msg.end(), p, p + len);
          op = reinterpret_cast<WireOp*>(msg.data() + at);
        }
        op->hdr.len = static_cast<uint32_t>(msg.size() - at);
      }
    }
    if (strict_mode() && !limit_reads(qp, wr->opcode == IBV_WR_RDMA_READ, msg, at)) {
      qp->sq.push_back(std::move(w));
      qp_fail_locked(qp, IBV_WC_REM_INV_REQ_ERR, true);
      continue;
    }
    qp->sq.push_back(std::move(w));
  }
  return 0;
}

// The messages of one call go to the connection in one write (a chain such as RDMA WRITE + SEND
// wakes the peer once), after the QP's lock is released so that the loop thread, which needs it
// for acknowledgements and the peer's operations, does not wait out the system call. The
// connection's output lock is taken first, which keeps concurrent posters' messages in PSN order.
int post_send(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  Qp* qp = impl<Qp>(q);
  static thread_local std::vector<uint8_t> msg;
  msg.clear();
  std::unique_lock g(qp->mu);
  const int rc = post_send_locked(qp, wr, bad, msg);
  if (msg.empty() || !qp->conn) return rc;
  if (qp->await_peer_first.load()) {
    qp->await_held.insert(qp->await_held.end(), msg.begin(), msg.end());
    return rc;
  }
  std::shared_ptr<Conn> c = qp->conn;
  std::lock_guard out(c->out_mu);
  g.unlock();
  c->send_locked(msg.data(), msg.size());
  return rc;
}

int post_recv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Qp* qp = impl<Qp>(q);
  std::shared_ptr<Conn> c;
  {
    std::lock_guard g(qp->mu);
    for (; wr; wr = wr->next) {
      if (qp->destroyed || qp->attr.qp_state == IBV_QPS_RESET || wr->num_sge < 0 ||
          static_cast<uint32_t>(wr->num_sge) > qp->init.cap.max_recv_sge) {
        *bad = wr;
        return EINVAL;
      }
      if (strict_mode() && qp->recv_slots >= static_cast<int>(qp->init.cap.max_recv_wr)) {
        log_debug("qp %u: receive queue full (%u work requests)", qp->pub.qp_num,
                  qp->init.cap.max_recv_wr);
        *bad = wr;
        return ENOMEM;
      }
      qp->recv_slots++;
      RecvWqe r{wr->wr_id, {wr->sg_list, wr->sg_list + wr->num_sge}};
      bool ok = true;
      for (auto& s : r.sge) ok = ok && sge_ok(qp, s, true);
      qp->rq.push_back(std::move(r));
      if (qp->attr.qp_state == IBV_QPS_ERR || !ok) qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
    }
    if (qp->rnr_waiting) c = qp->conn;
  }
  if (c) conn_kick(c);
  return 0;
}

std::atomic<long> reg_mr_calls{0};

// What a registration costs on the profile's NIC (SOFTRDMA_REG_MR_US): pinning the pages and a
// firmware command, tens of microseconds on hardware. Spent busy, as the kernel spends most of
// it: a sleep this short would overshoot by the timer slack (50 us by default).
void registration_cost() {
  const unsigned us = reg_mr_cost_us();
  if (us == 0) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

}  // namespace

namespace softrdma {

void fill_context_ops(ibv_context_ops* ops) {
  ops->poll_cq = poll_cq_adaptive;
  ops->req_notify_cq = req_notify_cq;
  ops->post_send = post_send;
  ops->post_recv = post_recv;
}

}  // namespace softrdma

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* pd = new Pd();
  pd->pub.context = ctx;
  pd->pub.handle = random_u32();
  log_debug("ibv_alloc_pd -> %p", static_cast<void*>(pd));
  return &pd->pub;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* p = impl<Pd>(pd);
  if (const int users = p->users.load()) {
    log_debug("ibv_dealloc_pd %p: EBUSY, %d MRs, windows or QPs still in it", static_cast<void*>(p),
              users);
    return EBUSY;
  }
  p->destroyed = true;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  reg_mr_calls++;
  registration_cost();
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  if (fault_fail_reg_mr()) {
    log_debug("fault injection: ibv_reg_mr fails");
    errno = ENOMEM;
    return nullptr;
  }
  size_t locked = 0;
  if (int err = strict_check_registration(addr, length, &locked)) {
    errno = err;
    return nullptr;
  }
  auto* mr = new Mr();
  mr->locked = locked;
  mr->pd = impl<Pd>(pd);
  mr->access = access;
  mr->pub.context = pd->context;
  mr->pub.pd = pd;
  mr->pub.addr = addr;
  mr->pub.length = length;
  key_add_mr(mr);
  mr->pd->users++;
  log_debug("ibv_reg_mr %p+%zu access 0x%x -> key 0x%x", addr, length, access, mr->key);
  return &mr->pub;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t, unsigned access) {
  return ibv_reg_mr(pd, addr, length, static_cast<int>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

int ibv_dereg_mr(ibv_mr* m) {
  registration_cost();
  return mr_deregister(impl<Mr>(m));
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  auto* ch = new Channel();
  ch->pub.context = ctx;
  ch->pub.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  ch->pub.refcnt = 0;
  return &ch->pub;
}

int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  if (ch->refcnt) return EBUSY;
  // A completion event raised just before the last CQ went away may still be writing.
  while (impl<Channel>(ch)->signalling.load() > 0) sched_yield();
  close(ch->fd);
  return 0;
}

// The depth ibv_create_cq grants for `cqe` (1 to max_cqe) entries, as the profile's provider
// and kernel driver round it (docs/softrdma.md, "Device profiles").
static int granted_cqe(int cqe) {
  const auto pow2 = [](unsigned n) { return n <= 1 ? 1u : 1u << (32 - __builtin_clz(n - 1)); };
  switch (profile().cq_rule) {
    case CqRule::PowerOfTwoLessOne:
      return static_cast<int>(pow2(static_cast<unsigned>(cqe) + 1) - 1);
    case CqRule::PowerOfTwo:
      return static_cast<int>(pow2(static_cast<unsigned>(cqe)));
    case CqRule::Exact:
      break;
  }
  return cqe;
}

ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch, int) {
  if (profile().check_caps && (cqe < 1 || cqe > profile().max_cqe)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new Cq();
  cq->pub.context = ctx;
  cq->pub.channel = ch;
  cq->pub.cq_context = cq_context;
  cq->pub.cqe = granted_cqe(cqe);
  cq->capacity = cq->pub.cqe;
  pthread_mutex_init(&cq->pub.mutex, nullptr);
  pthread_cond_init(&cq->pub.cond, nullptr);
  if (ch) ch->refcnt++;
  return &cq->pub;
}

int ibv_destroy_cq(ibv_cq* c) {
  Cq* cq = impl<Cq>(c);
  std::lock_guard g(cq->mu);
  if (cq->destroyed) return 0;
  if (const int qps = cq->qps.load()) {
    log_debug("ibv_destroy_cq %p: EBUSY, %d QP uses", static_cast<void*>(cq), qps);
    return EBUSY;
  }
  cq->destroyed = true;
  cq->entries.clear();
  cq_changed(cq);
  if (c->channel) c->channel->refcnt--;
  return 0;
}

int ibv_resize_cq(ibv_cq* c, int cqe) {
  c->cqe = cqe;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  uint64_t v;
  if (read(ch->fd, &v, sizeof v) != sizeof v) return -1;
  auto* c = impl<Channel>(ch);
  std::lock_guard g(c->mu);
  if (c->events.empty()) return -1;
  *cq = c->events.front();
  c->events.pop_front();
  *cq_context = (*cq)->cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq*, unsigned) {}

// The max_inline_data the profile's provider grants for `cap`, or -1 if it refuses the QP.
static int granted_inline(const ibv_qp_cap& cap) {
  const Profile& p = profile();
  const uint32_t asked = cap.max_inline_data;
  switch (p.inline_rule) {
    case InlineRule::Historic:
      return static_cast<int>(std::clamp<uint32_t>(asked, 64, 1024));
    case InlineRule::Refuse:
      return asked > p.max_inline ? -1 : static_cast<int>(asked);
    case InlineRule::Clamp:
      return static_cast<int>(p.max_inline);
    case InlineRule::Mlx5: {
      // An RC send WQE holds a 32-byte control and address part, then either the gather list or
      // a 4-byte inline header and the data, in 64-byte units; whatever the unit leaves over is
      // granted as inline data too. Beyond the largest WQE (1024 bytes) the kernel refuses.
      if (asked > p.max_inline) return -1;
      const uint32_t gather = 32 + 16 * cap.max_send_sge;
      const uint32_t inl = asked ? 36 + asked : 0;
      return static_cast<int>((std::max(gather, inl) + 63) / 64 * 64 - 36);
    }
  }
  return -1;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (attr->qp_type != IBV_QPT_RC || !attr->send_cq || !attr->recv_cq || attr->srq ||
      !profile().rc) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const Profile& p = profile();
  const ibv_qp_cap& cap = attr->cap;
  const int max_wr = p.max_qp_wr, max_sge = p.max_sge;
  if (p.check_caps && (cap.max_send_wr > static_cast<uint32_t>(max_wr) ||
                       cap.max_recv_wr > static_cast<uint32_t>(max_wr) ||
                       cap.max_send_sge > static_cast<uint32_t>(max_sge) ||
                       cap.max_recv_sge > static_cast<uint32_t>(max_sge))) {
    log_debug("ibv_create_qp: caps beyond profile %s's limits", p.name);
    errno = EINVAL;
    return nullptr;
  }
  const int inline_data = granted_inline(cap);
  if (inline_data < 0) {
    log_debug("ibv_create_qp: max_inline_data %u beyond profile %s's %u", cap.max_inline_data,
              p.name, p.max_inline);
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new Qp();
  attr->cap.max_inline_data = static_cast<uint32_t>(inline_data);
  qp->init = *attr;
  qp->pub.context = pd->context;
  qp->pub.qp_context = attr->qp_context;
  qp->pub.pd = pd;
  qp->pub.send_cq = attr->send_cq;
  qp->pub.recv_cq = attr->recv_cq;
  qp->pub.qp_type = IBV_QPT_RC;
  qp->pub.state = IBV_QPS_RESET;
  qp->pub.qp_num = random_u32() & 0xffffff;
  qp->pub.handle = qp->pub.qp_num;
  pthread_mutex_init(&qp->pub.mutex, nullptr);
  pthread_cond_init(&qp->pub.cond, nullptr);
  qp->attr.qp_state = IBV_QPS_RESET;
  qp->attr.cap = attr->cap;
  qp->attr.path_mtu = IBV_MTU_4096;
  impl<Pd>(pd)->users++;
  for (ibv_cq* c : {attr->send_cq, attr->recv_cq}) {
    Cq* cq = impl<Cq>(c);
    cq->qps++;
    std::lock_guard g(cq->mu);
    if (std::find(cq->users.begin(), cq->users.end(), qp) == cq->users.end())
      cq->users.push_back(qp);
  }
  log_debug("ibv_create_qp -> qpn %u", qp->pub.qp_num);
  return &qp->pub;
}

int ibv_modify_qp(ibv_qp* q, ibv_qp_attr* attr, int mask) {
  Qp* qp = impl<Qp>(q);
  std::lock_guard g(qp->mu);
  if (mask & IBV_QP_RNR_RETRY) qp->attr.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_DEST_QPN) qp->attr.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->attr.max_rd_atomic = attr->max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_STATE) {
    if (attr->qp_state == IBV_QPS_ERR) {
      qp_fail_locked(qp, IBV_WC_WR_FLUSH_ERR);
    } else if (attr->qp_state == IBV_QPS_RESET) {
      qp->sq.clear();
      qp->rq.clear();
      qp->send_slots = 0;
      qp->recv_slots = 0;
      qp->sq_retired_silently = 0;
      qp->attr.qp_state = IBV_QPS_RESET;
    } else if (qp->attr.qp_state != IBV_QPS_ERR) {
      qp->attr.qp_state = attr->qp_state;
    }
    q->state = qp->attr.qp_state;
  }
  return 0;
}

int ibv_query_qp(ibv_qp* q, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  Qp* qp = impl<Qp>(q);
  std::lock_guard g(qp->mu);
  *attr = qp->attr;
  *init = qp->init;
  return 0;
}

int ibv_destroy_qp(ibv_qp* q) {
  Qp* qp = impl<Qp>(q);
  std::shared_ptr<Conn> c;
  {
    std::lock_guard g(qp->mu);
    if (qp->destroyed) return 0;
    qp->destroyed = true;
    impl<Pd>(q->pd)->users--;
    for (ibv_cq* used : {qp->init.send_cq, qp->init.recv_cq}) {
      Cq* cq = impl<Cq>(used);
      cq->qps--;
      std::lock_guard cg(cq->mu);
      std::erase(cq->users, qp);
    }
    qp->sq.clear();
    qp->rq.clear();
    c = std::move(qp->conn);
  }
  if (c) {
    std::lock_guard g(c->mu);
    c->qp = nullptr;
  }
  return 0;
}

long softrdma_reg_mr_calls() {
  return reg_mr_calls.load();
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const names[] = {"success",
                                      "local length error",
                                      "local QP operation error",
                                      "local EE context operation error",
                                      "local protection error",
                                      "Work Request Flushed Error",
                                      "memory management operation error",
                                      "bad response error",
                                      "local access error",
                                      "remote invalid request error",
                                      "remote access error",
                                      "remote operation error",
                                      "transport retry counter exceeded",
                                      "RNR retry counter exceeded",
                                      "local RDD violation error",
                                      "remote invalid RD request",
                                      "aborted error",
                                      "invalid EE context number",
                                      "invalid EE context state",
                                      "fatal error",
                                      "response timeout error",
                                      "general error",
                                      "TM error",
                                      "TM rendezvous error"};
  unsigned i = status;
  return i < sizeof names / sizeof *names ? names[i] : "unknown";
}

const char* ibv_event_type_str(ibv_event_type ev) {
  static const char* const names[] = {"CQ error",
                                      "local work queue catastrophic error",
                                      "invalid request local work queue error",
                                      "local access violation work queue error",
                                      "communication established",
                                      "send queue drained",
                                      "path migrated",
                                      "path migration request error",
                                      "local catastrophic error",
                                      "port active",
                                      "port error",
                                      "LID change",
                                      "P_Key change",
                                      "SM change",
                                      "SRQ catastrophic error",
                                      "SRQ limit reached",
                                      "last WQE reached",
                                      "client reregistration",
                                      "GID table change",
                                      "WQ fatal"};
  unsigned i = ev;
  return i < sizeof names / sizeof *names ? names[i] : "unknown";
}

const char* ibv_node_type_str(ibv_node_type t) {
  switch (t) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_RNIC:
      return "iWARP RNIC";
    default:
      return "unknown";
  }
}

const char* ibv_port_state_str(ibv_port_state s) {
  static const char* const names[] = {"PORT_NOP",   "PORT_DOWN",   "PORT_INIT",
                                      "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
  unsigned i = s;
  return i < 6 ? names[i] : "invalid state";
}

int ibv_rate_to_mult(ibv_rate rate) {
  return rate;
}
ibv_rate mult_to_ibv_rate(int mult) {
  return static_cast<ibv_rate>(mult);
}
int ibv_rate_to_mbps(ibv_rate) {
  return 100000;
}
ibv_rate mbps_to_ibv_rate(int) {
  return IBV_RATE_100_GBPS;
}

}  // extern "C"
