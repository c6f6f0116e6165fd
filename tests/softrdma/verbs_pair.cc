#include "verbs_pair.h"

#include <chrono>

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
  s.pd = ibv_alloc_pd(id->verbs);
  s.ch = ibv_create_comp_channel(id->verbs);
  s.cq = ibv_create_cq(id->verbs, 256, nullptr, s.ch, 0);
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
  cp.responder_resources = cp.initiator_depth = 4;
  cp.rnr_retry_count = rnr_retry;
  if (rdma_connect(ida, &cp) || !next_event(RDMA_CM_EVENT_CONNECT_REQUEST)) return false;
  if (last_pdata.compare(0, connect_pdata.size(), connect_pdata) != 0) return false;
  if (!setup_side(b, b.id, mr_access)) return false;
  cp.private_data = accept_pdata.data();
  cp.private_data_len = accept_pdata.size();
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

VerbsPair::~VerbsPair() {
  for (Side* s : {&a, &b}) {
    if (!s->id) continue;
    rdma_destroy_qp(s->id);
    if (s->mr) ibv_dereg_mr(s->mr);
    if (s->cq) ibv_destroy_cq(s->cq);
    if (s->ch) ibv_destroy_comp_channel(s->ch);
    if (s->pd) ibv_dealloc_pd(s->pd);
    rdma_destroy_id(s->id);
  }
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

int post_recv(Side& s, uint64_t wr_id, size_t off, size_t len) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + off), static_cast<uint32_t>(len),
              s.mr->lkey};
  ibv_recv_wr wr{}, *bad;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(s.id->qp, &wr, &bad);
}
