// softrdma's fault injection. Each Faults.* test runs only under the ctest entry that sets its
// environment variable (settings are read once per process) and fails elsewhere; the
// InjectedAsyncEvent.* tests call softrdma_raise_async_event and run with the semantics.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "verbs_pair.h"

namespace {

TEST(Faults, DropAfterCutsTheConnectionLikeAPeerDeath) {
  ASSERT_NE(getenv("SOFTRDMA_DROP_AFTER"), nullptr)
      << "run with SOFTRDMA_DROP_AFTER=2 (ctest softrdma.fault_*)";
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  for (int i = 0; i < 3; i++) ASSERT_EQ(post_recv(p.b, 100 + i, 0, 64), 0);
  ASSERT_EQ(post_recv(p.a, 77, 0, 64), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 2, 0, 8), 0);
  ASSERT_EQ(p.wait_wc(p.b, 2).size(), 2u);
  ASSERT_EQ(p.wait_wc(p.a, 2).size(), 2u);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 3, 0, 8), 0);
  auto sc = p.wait_wc(p.a, 2);
  ASSERT_EQ(sc.size(), 2u);
  for (auto& wc : sc) {
    if (wc.wr_id == 3)
      EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    else
      EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  }
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 102u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
  int disconnected = 0, timewait = 0;
  for (int i = 0; i < 4; i++) {
    ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_DISCONNECTED) ||
                p.last.event == RDMA_CM_EVENT_TIMEWAIT_EXIT);
    disconnected += p.last.event == RDMA_CM_EVENT_DISCONNECTED;
    timewait += p.last.event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
  }
  EXPECT_EQ(disconnected, 2);
  EXPECT_EQ(timewait, 2);

  // One cut only: a new connection (a peer reconnecting after the loss) carries sends again.
  VerbsPair q;
  ASSERT_TRUE(q.connect());
  ASSERT_EQ(post_recv(q.b, 200, 0, 64), 0);
  ASSERT_EQ(post_send(q.a, IBV_WR_SEND, 4, 0, 8), 0);
  auto after = q.wait_wc(q.a, 1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].status, IBV_WC_SUCCESS);
}

TEST(Faults, FailRegMrFailsTheNthRegistration) {
  ASSERT_NE(getenv("SOFTRDMA_FAIL_REG_MR"), nullptr)
      << "run with SOFTRDMA_FAIL_REG_MR=2 (ctest softrdma.fault_*)";
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  ibv_pd* pd = d.pd;
  static char buf[4096];
  ibv_mr* first = ibv_reg_mr(pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  EXPECT_NE(first, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_mr* third = ibv_reg_mr(pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  EXPECT_NE(third, nullptr);
  ibv_dereg_mr(first);
  ibv_dereg_mr(third);
}

TEST(Faults, DelayPostponesCompletions) {
  ASSERT_NE(getenv("SOFTRDMA_DELAY_US"), nullptr)
      << "run with SOFTRDMA_DELAY_US=200000 (ctest softrdma.fault_*)";
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(post_recv(p.b, 1, 0, 64), 0);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 2, 0, 8), 0);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

using Raise = int (*)(int);

Raise raise_hook() {
  return reinterpret_cast<Raise>(dlsym(RTLD_DEFAULT, "softrdma_raise_async_event"));
}

// The async events of `ctx` that arrive within 5 s, up to n.
std::vector<ibv_async_event> async_events(ibv_context* ctx, int n) {
  std::vector<ibv_async_event> out;
  pollfd p{ctx->async_fd, POLLIN, 0};
  while (static_cast<int>(out.size()) < n && poll(&p, 1, 5000) == 1) {
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev) != 0) break;
    out.push_back(ev);
    ibv_ack_async_event(&ev);
  }
  return out;
}

TEST(InjectedAsyncEvent, QpFatalFailsEveryConnectedQpAndFlushesItsWork) {
  const Raise raise = raise_hook();
  ASSERT_NE(raise, nullptr) << "softrdma_raise_async_event not found: run under softrdma-run";
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(post_recv(p.b, 7, 0, 64), 0);
  ASSERT_EQ(raise(IBV_EVENT_QP_FATAL), 2);  // both ends of the pair are in this process
  const std::vector<ibv_async_event> events = async_events(p.a.id->verbs, 2);
  ASSERT_EQ(events.size(), 2u);
  for (const ibv_async_event& ev : events) {
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
    EXPECT_TRUE(ev.element.qp == p.a.id->qp || ev.element.qp == p.b.id->qp);
  }
  EXPECT_NE(events[0].element.qp, events[1].element.qp);
  EXPECT_EQ(qp_state(p.a.id->qp), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(p.b.id->qp), IBV_QPS_ERR);
  const std::vector<ibv_wc> flushed = p.wait_wc(p.b, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].wr_id, 7u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(raise(IBV_EVENT_QP_FATAL), 0) << "a QP in error is not connected any more";
}

TEST(InjectedAsyncEvent, CqErrorFailsTheCqsOfConnectedQps) {
  const Raise raise = raise_hook();
  ASSERT_NE(raise, nullptr) << "softrdma_raise_async_event not found: run under softrdma-run";
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(post_recv(p.b, 7, 0, 64), 0);
  ASSERT_EQ(raise(IBV_EVENT_CQ_ERR), 2);  // a's CQ and b's
  const std::vector<ibv_async_event> events = async_events(p.a.id->verbs, 2);
  ASSERT_EQ(events.size(), 2u);
  for (const ibv_async_event& ev : events) {
    EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    EXPECT_TRUE(ev.element.cq == p.a.cq || ev.element.cq == p.b.cq);
  }
  EXPECT_NE(events[0].element.cq, events[1].element.cq);
  EXPECT_EQ(wait_qp_state(p.b.id->qp, IBV_QPS_ERR), IBV_QPS_ERR);
  // The CQ takes no more completions: the receive's flush never shows.
  EXPECT_TRUE(p.wait_wc(p.b, 1, 300).empty());
}

TEST(InjectedAsyncEvent, OtherEventsAreRefused) {
  const Raise raise = raise_hook();
  ASSERT_NE(raise, nullptr) << "softrdma_raise_async_event not found: run under softrdma-run";
  errno = 0;
  EXPECT_EQ(raise(IBV_EVENT_PORT_ERR), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
