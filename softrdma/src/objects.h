// softrdma's internal objects: what each verbs handle handed to the application points at.
// Contract: every public handle (ibv_pd, ibv_mr, ibv_cq, ibv_qp, ibv_comp_channel) is the first
// member of its object here, so a handle converts back with a static_cast of the pointer. Objects
// are never freed once handed out (destroyed ones are quarantined: libiscsi 1.19 polls a CQ it
// destroyed), so a stale handle stays harmless.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
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
};

struct Pd {
  ibv_pd pub;
  bool destroyed = false;
};

struct Mr {
  ibv_mr pub;
  Pd* pd;
  int access;
  bool destroyed = false;
};

struct Cq {
  ibv_cq pub;
  std::mutex mu;
  std::deque<ibv_wc> entries;
  int capacity;
  bool armed = false;
  bool destroyed = false;
  bool warned = false;
};

struct SendWqe {
  uint64_t wr_id;
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
};

// Completion queue entry helpers: push and wake the completion channel when armed.
void cq_push(Cq* cq, const ibv_wc& wc);

// Moves a QP to the error state and flushes every outstanding work request, send queue first
// with `first_status` for the oldest unacknowledged send (flush for the rest). Caller holds qp->mu.
void qp_fail_locked(Qp* qp, ibv_wc_status first_status);

// Async events on the device context's async fd.
void post_async_event(const ibv_async_event& ev);

Mr* mr_by_rkey(uint32_t rkey);
Mr* mr_by_lkey(uint32_t lkey);

uint32_t random_u32();

}  // namespace softrdma
