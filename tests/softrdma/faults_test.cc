// softrdma's fault injection settings. Each test runs only under the ctest entry that sets its
// environment variable (settings are read once per process) and is skipped elsewhere.
#include <gtest/gtest.h>

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

}  // namespace
