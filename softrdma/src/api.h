// Entry points shared between softrdma's translation units and its librdmacm half.
// Contract: shared_context() is the single ibv_context of softrdma0, created on first use;
// qp_attach/qp_detach bind a QP to a connection (by the CM) and move it to RTS / error.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

namespace softrdma {

struct Conn;

ibv_context* shared_context();
void fill_context_ops(ibv_context_ops* ops);
void fill_mw_ops(ibv_context_ops* ops);
// The RDMA READ depths the CM negotiated (0: not known, no limit): ours as requester
// (max_rd_atomic), ours as responder (max_dest_rd_atomic), and the peer's as responder.
struct ReadDepths {
  uint8_t initiator_depth = 0;
  uint8_t responder_resources = 0;
  uint8_t peer_responder_resources = 0;
};
// `rnr_retry` is the peer's rnr_retry_count (each side's CM message tells the other how often to
// retry its sends); `passive` is the side that accepted.
void qp_attach(ibv_qp* qp, const std::shared_ptr<Conn>& c, uint32_t remote_qpn, uint8_t rnr_retry,
               const ReadDepths& depths, bool passive);
// Peer gone (graceful or not): outstanding sends complete with `status`, the rest flush.
void qp_disconnected(ibv_qp* qp, ibv_wc_status status);

}  // namespace softrdma
