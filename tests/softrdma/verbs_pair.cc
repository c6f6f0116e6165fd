#include "verbs_pair.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

bool VerbsPair::next_event(rdma_cm_event_type want, int status) {
  pollfd p{ec->fd, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1) return false;
  rdma_cm_event* ev;
  if (rdma_get_cm_event(ec, &ev)) return false;
  last = *ev;
  last_pdata.assign(
      static_cast<const char*>(ev->param.conn.private_data ? ev->param.conn.private_data : ""),
      ev->param.conn.private_data ? ev->param.conn.private_data_len : 0);
  bool ok = ev->event == want && ev->status == status;
  if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) b.id = ev->id;
  if (ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == a.id) established_pdata = last_pdata;
  rdma_ack_cm_event(ev);
  return ok;
}

bool VerbsPair::setup_side(Side& s, rdma_cm_id* id, int access) {
  s.id = id;
  s.pd = s.shared_pd ? s.shared_pd : ibv_alloc_pd(id->verbs);
  s.ch = ibv_create_comp_channel(id->verbs);
  s.cq = ibv_create_cq(id->verbs, cqe, nullptr, s.ch, 0);
  s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(), access);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = s.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 64;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 2;
  return s.pd && s.cq && s.mr && rdma_create_qp(id, s.pd, &qa) == 0;
}

bool VerbsPair::connect(uint8_t rnr_retry, int mr_access) {
  ec = rdma_create_event_channel();
  if (rdma_create_id(ec, &listener, nullptr, RDMA_PS_TCP)) return false;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&sin)) || rdma_listen(listener, 8))
    return false;
  port = ntohs(rdma_get_src_port(listener));
  sin.sin_port = htons(port);
  rdma_cm_id* ida;
  if (rdma_create_id(ec, &ida, nullptr, RDMA_PS_TCP)) return false;
  if (rdma_resolve_addr(ida, nullptr, reinterpret_cast<sockaddr*>(&sin), 1000) ||
      !next_event(RDMA_CM_EVENT_ADDR_RESOLVED))
    return false;
  if (rdma_resolve_route(ida, 1000) || !next_event(RDMA_CM_EVENT_ROUTE_RESOLVED)) return false;
  if (!setup_side(a, ida, mr_access)) return false;
  rdma_conn_param cp{};
  cp.private_data = connect_pdata.data();
  cp.private_data_len = connect_pdata.size();
  cp.responder_resources = 4;
  cp.initiator_depth = a_initiator_depth;
  cp.rnr_retry_count = rnr_retry;
  if (rdma_connect(ida, &cp) || !next_event(RDMA_CM_EVENT_CONNECT_REQUEST)) return false;
  if (last_pdata.compare(0, connect_pdata.size(), connect_pdata) != 0) return false;
  if (!setup_side(b, b.id, mr_access)) return false;
  cp.private_data = accept_pdata.data();
  cp.private_data_len = accept_pdata.size();
  cp.responder_resources = b_responder_resources;
  cp.initiator_depth = 4;
  if (b_rnr_retry >= 0) cp.rnr_retry_count = static_cast<uint8_t>(b_rnr_retry);
  if (rdma_accept(b.id, &cp)) return false;
  // Either side's ESTABLISHED may come first.
  return next_event(RDMA_CM_EVENT_ESTABLISHED) && next_event(RDMA_CM_EVENT_ESTABLISHED);
}

std::vector<ibv_wc> VerbsPair::wait_wc(Side& s, int n, int timeout_ms) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (static_cast<int>(out.size()) < n && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc;
    if (ibv_poll_cq(s.cq, 1, &wc) == 1) {
      out.push_back(wc);
      continue;
    }
    ibv_req_notify_cq(s.cq, 0);
    if (ibv_poll_cq(s.cq, 1, &wc) == 1) {
      out.push_back(wc);
      continue;
    }
    pollfd p{s.ch->fd, POLLIN, 0};
    if (poll(&p, 1, 100) == 1) {
      ibv_cq* cq;
      void* ctx;
      if (ibv_get_cq_event(s.ch, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
    }
  }
  return out;
}

void VerbsPair::release(Side& s) {
  if (!s.id) return;
  rdma_destroy_qp(s.id);
  if (s.mr) ibv_dereg_mr(s.mr);
  if (s.cq) ibv_destroy_cq(s.cq);
  if (s.ch) ibv_destroy_comp_channel(s.ch);
  if (s.pd && s.pd != s.shared_pd) ibv_dealloc_pd(s.pd);
  rdma_destroy_id(s.id);
  s.id = nullptr;
}

VerbsPair::~VerbsPair() {
  release(a);
  release(b);
  if (listener) rdma_destroy_id(listener);
  if (ec) rdma_destroy_event_channel(ec);
}

int post_send(Side& s, ibv_wr_opcode op, uint64_t wr_id, size_t off, size_t len, uint64_t raddr,
              uint32_t rkey, bool signaled) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + off), static_cast<uint32_t>(len),
              s.mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(s.id->qp, &wr, &bad);
}

ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
  return attr.qp_state;
}

ibv_qp_state wait_qp_state(ibv_qp* qp, ibv_qp_state want, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  ibv_qp_state state = qp_state(qp);
  while (state != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    state = qp_state(qp);
  }
  return state;
}

int post_recv(Side& s, uint64_t wr_id, size_t off, size_t len) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + off), static_cast<uint32_t>(len),
              s.mr->lkey};
  ibv_recv_wr wr{}, *bad;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(s.id->qp, &wr, &bad);
}

uint64_t addr_of(Side& s, size_t off) {
  return reinterpret_cast<uintptr_t>(s.buf.data() + off);
}

void expect_completions(VerbsPair& p, Side& s, const std::vector<ExpectedWc>& want) {
  auto wc = p.wait_wc(s, static_cast<int>(want.size()));
  ASSERT_EQ(wc.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) {
    SCOPED_TRACE("completion " + std::to_string(i));
    EXPECT_EQ(wc[i].wr_id, want[i].wr_id);
    EXPECT_EQ(wc[i].status, want[i].status);
  }
}

void expect_remote_access_error(VerbsPair& p, ibv_wr_opcode op, uint64_t raddr, uint32_t rkey) {
  ASSERT_EQ(post_recv(p.a, 50, 0, 64), 0);
  ASSERT_EQ(post_send(p.a, op, 20, 0, 4096, raddr, rkey), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 21, 0, 8, 0, 0, false), 0);
  auto sc = p.wait_wc(p.a, 3);
  ASSERT_EQ(sc.size(), 3u);
  EXPECT_EQ(sc[0].wr_id, 20u);
  EXPECT_EQ(sc[0].status, IBV_WC_REM_ACCESS_ERR);
  // Everything behind it flushes, unsignaled or not, and so does the receive queue. The two
  // queues are independent: the unsignaled SEND may have been posted before or after the error.
  std::vector<ibv_wc> send_q, recv_q;
  for (size_t i = 1; i < sc.size(); i++) (sc[i].wr_id == 50 ? recv_q : send_q).push_back(sc[i]);
  ASSERT_EQ(send_q.size(), 1u);
  ASSERT_EQ(recv_q.size(), 1u);
  EXPECT_EQ(send_q[0].wr_id, 21u);
  EXPECT_EQ(send_q[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(recv_q[0].status, IBV_WC_WR_FLUSH_ERR);
  if (getenv("SOFTRDMA_STRICT")) {
    // Strict mode poisons what an error completion leaves undefined.
    EXPECT_EQ(send_q[0].byte_len, 0xa5a5a5a5u);
    EXPECT_EQ(recv_q[0].src_qp, 0xa5a5a5a5u);
  }
  // Posting in the error state completes with a flush at once.
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 22, 0, 8), 0);
  auto more = p.wait_wc(p.a, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].status, IBV_WC_WR_FLUSH_ERR);
  // The responder's QP went to error too: its receives flush.
  ASSERT_EQ(post_recv(p.b, 60, 0, 64), 0);
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
  pollfd async{p.b.id->verbs->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&async, 1, 5000), 1);
  ibv_async_event ae;
  ASSERT_EQ(ibv_get_async_event(p.b.id->verbs, &ae), 0);
  EXPECT_EQ(ae.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ae.element.qp, p.b.id->qp);
  ibv_ack_async_event(&ae);
}
