// softrdma's internal objects: what each verbs handle handed to the application points at.
// Contract: every public handle (ibv_pd, ibv_mr, ibv_mw, ibv_cq, ibv_qp, ibv_comp_channel) is the
// first member of its object here, so a handle converts back with a static_cast of the pointer.
// Objects are never freed once handed out (destroyed ones are quarantined: libiscsi 1.19 polls a CQ
// it destroyed), so a stale handle stays harmless; MRs, which some programs register per I/O, are
// freed after the 4096 deregistered after them (keys.cc).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace softrdma {

struct Conn;

struct Channel {
  ibv_comp_channel pub;
  std::mutex mu;
  std::deque<ibv_cq*> events;
  std::atomic<int> signalling{0};  // completion events being written to pub.fd
};

struct Pd {
  ibv_pd pub;
  // Live MRs, memory windows and QPs in this PD: ibv_dealloc_pd fails with EBUSY while any
  // remain, as the kernel's use count makes it on hardware.
  std::atomic<int> users{0};
  bool destroyed = false;
};

struct Mr {
  ibv_mr pub;
  Pd* pd;
  int access;
  uint32_t key;       // lkey == rkey; kept apart from pub, which the application can overwrite
  int windows = 0;    // memory windows bound to it (ibv_dereg_mr fails with EBUSY); keys.cc's lock
  size_t locked = 0;  // what it counts against RLIMIT_MEMLOCK (strict mode)
  bool destroyed = false;
};

struct Qp;

// A memory window. Its binding is guarded by keys.cc's lock, so a responder's check never sees a
// half-done bind.
struct Mw {
  ibv_mw pub;
  Pd* pd;
  uint32_t key;       // the current rkey: the index stays, a bind sets the low 8 bits
  Mr* mr = nullptr;   // bound to this MR, or unbound (type 1) / free (type 2)
  uint64_t addr = 0;  // bound range and remote access rights
  uint64_t length = 0;
  int access = 0;
  Qp* qp = nullptr;  // type 2: the only QP whose peer may use (or remotely invalidate) it
  bool destroyed = false;
};

// A completion queue entry, and the work queue slots that polling it frees: hardware frees a send
// queue slot only when the application polls a completion at or after it (an unsignaled work
// request's slot waits for a later signaled one), and a receive slot when its completion is
// polled. Strict mode refuses posts to a queue whose slots are all taken (ENOMEM).
struct Cqe {
  ibv_wc wc;
  Qp* qp = nullptr;
  int send_slots = 0;
  int recv_slots = 0;
};

struct Cq {
  ibv_cq pub;
  std::mutex mu;
  std::deque<Cqe> entries;
  // A futex word bumped by every push, and the number of threads sleeping on it in ibv_poll_cq.
  std::atomic<uint32_t> pushes{0};
  std::atomic<int> sleepers{0};
  // Live QPs that use this CQ (once per role): ibv_destroy_cq fails with EBUSY while any remain.
  std::atomic<int> qps{0};
  // The QPs using this CQ, each once (strict mode moves them to error when the CQ overruns).
  std::vector<Qp*> users;
  int capacity;
  bool overrun = false;  // strict mode: more completions than capacity arrived; it takes no more
  bool armed = false;
  bool destroyed = false;
  bool warned = false;
};

struct SendWqe {
  uint64_t wr_id;
  // A local operation (bind, local invalidate) has no PSN of its own: it carries the PSN of the
  // operation posted before it, so it completes right after that one.
  uint32_t psn;
  ibv_wc_opcode opcode;
  uint32_t byte_len;
  bool signaled;
  std::vector<uint8_t> inline_data;
  std::vector<ibv_sge> read_sge;  // where ReadResp data goes (fallback path)
};

struct RecvWqe {
  uint64_t wr_id;
  std::vector<ibv_sge> sge;
};

struct Qp {
  ibv_qp pub;
  std::mutex mu;
  ibv_qp_init_attr init;
  ibv_qp_attr attr{};
  std::deque<SendWqe> sq;
  std::deque<RecvWqe> rq;
  uint32_t next_psn = 1;
  std::shared_ptr<Conn> conn;
  uint32_t remote_qpn = 0;
  bool destroyed = false;
  // Strict mode: RDMA READs sent and not yet acknowledged, at most attr.max_rd_atomic; messages
  // held back behind a READ over that limit, in order (hardware stalls the send queue there);
  // the peer's max_dest_rd_atomic, which a READ beyond makes the peer refuse.
  uint32_t reads_outstanding = 0;
  std::deque<std::vector<uint8_t>> held_ops;
  uint8_t peer_max_dest_rd_atomic = 0;
  // A SEND waits on the connection for a receive (set when one is parked, cleared by the
  // conn_kick that finds none): only then does post_recv need to retry them.
  bool rnr_waiting = false;
  // Work queue slots taken (posted, and not yet freed by a polled completion; see Cqe), and
  // unsignaled send work requests done since the last send completion, whose slots the next one
  // frees.
  std::atomic<int> send_slots{0};
  std::atomic<int> recv_slots{0};
  int sq_retired_silently = 0;
  // iWARP profiles, passive side: MPA lets the side that accepted send nothing before the first
  // message from the side that connected arrives; what is posted before is held here, in order.
  // Set and cleared under mu; read without it by the loop thread's check of every operation.
  std::atomic<bool> await_peer_first{false};
  std::vector<uint8_t> await_held;
};

// The object behind a public handle (see the contract above).
template <class T, class P>
T* impl(P* p) {
  return static_cast<T*>(static_cast<void*>(p));
}

enum class WorkQueue { Send, Recv };
// Completion queue entry helpers: push and wake the completion channel when armed. The completion
// belongs to `qp`'s send or receive queue, whose slots polling it frees (see Cqe). Caller holds
// qp->mu.
void cq_push(Cq* cq, const ibv_wc& wc, Qp* qp, WorkQueue q);
// While a CompletionBatch is open on a thread, the completions that thread's cq_push calls make
// are held, and appear in their CQs (with their completion events) in order when it closes. The
// loop thread holds those of a whole socket read until it has acknowledged the operations read:
// otherwise a program that polls its CQ could act on a receive before the sender has its send
// completion (tgtd enters the full feature phase when its final Login Response completes, and an
// initiator's first command overtaking that acknowledgement gets the connection closed). It also
// keeps the eventfd writes that wake the program out of the QPs' critical sections. Nested
// batches on one thread leave the holding to the outermost.
class CompletionBatch {
 public:
  CompletionBatch();
  ~CompletionBatch();
  CompletionBatch(const CompletionBatch&) = delete;
  CompletionBatch& operator=(const CompletionBatch&) = delete;

 private:
  bool outer_ = false;
};
// Makes the completions this thread's batch holds visible now; the batch stays open.
void release_held_completions();

// Moves a QP to the error state and flushes every outstanding work request, send queue first.
// `status` goes to the oldest unacknowledged send (the peer died), or with `newest_failed` to the
// newest (a work request refused as it was posted); the others flush. Caller holds qp->mu.
void qp_fail_locked(Qp* qp, ibv_wc_status status, bool newest_failed = false);
// Completes the oldest send work request with `st` (a success only if signaled). Caller holds
// qp->mu.
void sq_complete_front(Qp* qp, ibv_wc_status st);

// Async events on the device context's async fd.
void post_async_event(const ibv_async_event& ev);
// The CQ fails as an overrun fails it: IBV_EVENT_CQ_ERR, it takes no more completions, and every
// QP using it goes to error. False if it was destroyed or has failed already.
bool cq_raise_error(Cq* cq);

uint32_t random_u32();

}  // namespace softrdma
