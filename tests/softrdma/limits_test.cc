// Strict mode's hardware limits (SOFTRDMA_STRICT=1, as every softrdma test runs), whatever the
// profile: full work queues, CQ overrun, when unsignaled send work requests free their slots, and
// which side's rnr_retry_count a QP uses.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "verbs_pair.h"

namespace {

// Waits up to 5 s for the next async event of `ctx`.
bool next_async_event(ibv_context* ctx, ibv_async_event* ev) {
  pollfd p{ctx->async_fd, POLLIN, 0};
  return poll(&p, 1, 5000) == 1 && ibv_get_async_event(ctx, ev) == 0;
}

TEST(Limits, StrictModeIsOn) {
  ASSERT_NE(getenv("SOFTRDMA_STRICT"), nullptr) << "these tests need SOFTRDMA_STRICT=1";
}

TEST(Limits, ReceiveQueueFullIsEnomem) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  for (int i = 0; i < 64; i++) ASSERT_EQ(post_recv(p.b, i, 0, 64), 0) << i;
  ibv_sge sge{addr_of(p.b, 0), 64, p.b.mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = 64;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  EXPECT_EQ(ibv_post_recv(p.b.id->qp, &wr, &bad), ENOMEM);
  EXPECT_EQ(bad, &wr);
  // A receive's slot is freed when its completion is polled, not when it is consumed.
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 100, 0, 8), 0);
  ASSERT_EQ(p.wait_wc(p.a, 1).size(), 1u);
  EXPECT_EQ(ibv_post_recv(p.b.id->qp, &wr, &bad), ENOMEM);
  ASSERT_EQ(p.wait_wc(p.b, 1).size(), 1u);
  EXPECT_EQ(ibv_post_recv(p.b.id->qp, &wr, &bad), 0);
}

TEST(Limits, UnsignaledSendsFreeTheirSlotsOnlyWithASignaledCompletion) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  for (int i = 0; i < 64; i++) ASSERT_EQ(post_recv(p.b, i, 0, 64), 0);
  // 63 unsignaled SENDs and a signaled one: all 64 slots are taken until that one is polled.
  for (int i = 0; i < 63; i++) ASSERT_EQ(post_send(p.a, IBV_WR_SEND, i, 0, 8, 0, 0, false), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 63, 0, 8), 0);
  ASSERT_EQ(p.wait_wc(p.b, 64).size(), 64u);  // all of them done
  ibv_sge sge{addr_of(p.a, 0), 8, p.a.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 64;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  EXPECT_EQ(ibv_post_send(p.a.id->qp, &wr, &bad), ENOMEM);
  EXPECT_EQ(bad, &wr);
  auto wc = p.wait_wc(p.a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 63u);
  // Polling it freed every slot: a queue's worth posts again.
  for (int i = 0; i < 64; i++) ASSERT_EQ(post_recv(p.b, 100 + i, 0, 64), 0);
  for (int i = 0; i < 63; i++) ASSERT_EQ(post_send(p.a, IBV_WR_SEND, i, 0, 8, 0, 0, false), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 63, 0, 8), 0);
  ASSERT_EQ(p.wait_wc(p.a, 1).size(), 1u);
}

TEST(Limits, AQueueOfUnsignaledSendsFillsUp) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  for (int i = 0; i < 64; i++) ASSERT_EQ(post_recv(p.b, i, 0, 64), 0);
  for (int i = 0; i < 64; i++) ASSERT_EQ(post_send(p.a, IBV_WR_SEND, i, 0, 8, 0, 0, false), 0);
  ASSERT_EQ(p.wait_wc(p.b, 64).size(), 64u);
  EXPECT_EQ(post_send(p.a, IBV_WR_SEND, 64, 0, 8), ENOMEM);
  EXPECT_TRUE(p.wait_wc(p.a, 1, 100).empty());
}

TEST(Limits, AFlushCompletesEveryOutstandingWorkRequest) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7));
  // No receive at b: the SENDs wait there (rnr_retry 7), unsignaled.
  for (int i = 0; i < 3; i++) ASSERT_EQ(post_send(p.a, IBV_WR_SEND, i, 0, 8, 0, 0, false), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p.a.id->qp, &attr, IBV_QP_STATE), 0);
  expect_completions(
      p, p.a, {{0, IBV_WC_WR_FLUSH_ERR}, {1, IBV_WC_WR_FLUSH_ERR}, {2, IBV_WC_WR_FLUSH_ERR}});
}

TEST(Limits, CqOverrunRaisesCqErrAndFailsItsQps) {
  VerbsPair p;
  p.cqe = 4;
  ASSERT_TRUE(p.connect());
  // What the CQ holds is what ibv_create_cq granted (a profile rounds 4 up: 7 under mlx5).
  const int held = p.b.cq->cqe;
  ASSERT_GE(held, 4);
  for (int i = 0; i <= held; i++) ASSERT_EQ(post_recv(p.b, i, 0, 64), 0);
  // b never polls: its receive completion after `held` overruns its CQ.
  for (int i = 0; i <= held; i++) {
    ASSERT_EQ(post_send(p.a, IBV_WR_SEND, i, 0, 8), 0);
    ASSERT_EQ(p.wait_wc(p.a, 1).size(), 1u) << i;
  }
  ibv_async_event ev;
  ASSERT_TRUE(next_async_event(p.b.id->verbs, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, p.b.cq);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(wait_qp_state(p.b.id->qp, IBV_QPS_ERR), IBV_QPS_ERR);
  // What the CQ held stays pollable; the completion that overran it is lost.
  EXPECT_EQ(p.wait_wc(p.b, held + 1, 300).size(), static_cast<size_t>(held));
}

// Each QP retries its SENDs as often as the peer asked in its REQ or REP (rdma_connect.3): a
// connects asking for 0, b accepts asking for 7.
TEST(Limits, EachQpUsesThePeersRnrRetryCount) {
  VerbsPair p;
  p.b_rnr_retry = 7;
  ASSERT_TRUE(p.connect(0));
  // a's QP uses b's 7: its SEND waits for b's receive.
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  EXPECT_TRUE(p.wait_wc(p.a, 1, 200).empty());
  ASSERT_EQ(post_recv(p.b, 2, 0, 64), 0);
  expect_completions(p, p.a, {{1, IBV_WC_SUCCESS}});
  // b's QP uses a's 0: its SEND fails at once without a receive at a.
  ASSERT_EQ(post_send(p.b, IBV_WR_SEND, 3, 0, 8), 0);
  auto wc = p.wait_wc(p.b, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[1].wr_id, 3u);
  EXPECT_EQ(wc[1].status, IBV_WC_RNR_RETRY_EXC_ERR);
}

// The counters tests find with dlsym (a real libibverbs has none).
TEST(Limits, CountersCountMrsWindowsAndRegistrations) {
  auto live_mrs = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "softrdma_live_mrs"));
  auto live_mws = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "softrdma_live_mws"));
  auto reg_calls = reinterpret_cast<long (*)()>(dlsym(RTLD_DEFAULT, "softrdma_reg_mr_calls"));
  ASSERT_NE(live_mrs, nullptr);
  ASSERT_NE(live_mws, nullptr);
  ASSERT_NE(reg_calls, nullptr);
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  static char buf[8192];
  const int mrs = live_mrs(), mws = live_mws();
  const long calls = reg_calls();
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_reg_mr(d.pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_REMOTE_WRITE)),
            nullptr);  // EINVAL
  EXPECT_EQ(live_mrs(), mrs + 1);
  EXPECT_EQ(reg_calls(), calls + 2);
  ibv_mw* mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(live_mws(), mws + 1);
  ibv_dealloc_mw(mw);
  ibv_dereg_mr(mr);
  EXPECT_EQ(live_mws(), mws);
  EXPECT_EQ(live_mrs(), mrs);
}

}  // namespace
