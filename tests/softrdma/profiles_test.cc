// softrdma's device profiles (SOFTRDMA_PROFILE): each ctest entry softrdma.profile_NAME runs the
// Profile cases under one profile and checks what the device answers against what that family's
// provider answers (docs/softrdma.md has the table and its sources); softrdma.iwarp_NAME runs the
// Iwarp cases under an iWARP profile; softrdma.profile_unknown checks that a misspelt name fails.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "verbs_pair.h"

namespace {

enum class Inline { Refuse, RoundUp, Clamp };
// How ibv_create_cq rounds a CQ's depth: mlx5 and rxe to a power of two less one
// (roundup_pow_of_two(cqe + 1) - 1), siw to a power of two; the others are not modelled.
enum class CqDepth { Exact, PowerOfTwoLessOne, PowerOfTwo };

struct Expected {
  std::string name;
  ibv_transport_type transport;
  uint8_t link_layer;
  unsigned flags;
  int max_qp_wr, max_sge, max_sge_rd, max_cqe, max_qp_rd_atom, max_qp_init_rd_atom;
  int mw_type1_errno, mw_type2_errno;  // 0: ibv_alloc_mw succeeds
  Inline inline_rule;
  uint32_t max_inline;
  bool rc;
  int reg_mr_us;
  CqDepth cq_depth = CqDepth::Exact;
};

constexpr unsigned kMw = IBV_DEVICE_MEM_WINDOW, k2B = IBV_DEVICE_MEM_WINDOW_TYPE_2B,
                   kRnr = IBV_DEVICE_RC_RNR_NAK_GEN, kMgt = IBV_DEVICE_MEM_MGT_EXTENSIONS;

const Expected kExpected[] = {
    {"mlx5", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, kMw | k2B | kRnr | kMgt, 32768, 30, 30,
     4194303, 16, 16, 0, 0, Inline::RoundUp, 988, true, 25, CqDepth::PowerOfTwoLessOne},
    {"rxe", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, kMw | k2B | kRnr | kMgt, 16384, 32, 32,
     32767, 128, 128, 0, 0, Inline::Refuse, 400, true, 5, CqDepth::PowerOfTwoLessOne},
    {"bnxt_re", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, kMw | k2B | kRnr | kMgt, 65535, 6, 6,
     1048575, 126, 126, EOPNOTSUPP, EOPNOTSUPP, Inline::Refuse, 96, true, 25},
    {"siw", IBV_TRANSPORT_IWARP, IBV_LINK_LAYER_ETHERNET, kMgt, 32768, 6, 1, 3276800, 128, 128,
     EOPNOTSUPP, EOPNOTSUPP, Inline::Refuse, 80, true, 5, CqDepth::PowerOfTwo},
    {"irdma-roce", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, kMw | kRnr | kMgt, 4063, 13, 13,
     1048575, 127, 127, 0, 0, Inline::Refuse, 101, true, 25},
    {"irdma-iwarp", IBV_TRANSPORT_IWARP, IBV_LINK_LAYER_ETHERNET, kMw | kMgt, 4063, 13, 13, 1048575,
     127, 127, 0, 0, Inline::Refuse, 101, true, 25},
    {"cxgb4", IBV_TRANSPORT_IWARP, IBV_LINK_LAYER_ETHERNET, kMw | kMgt, 16383, 4, 1, 32767, 32, 32,
     0, EINVAL, Inline::Clamp, 280, true, 25},
    {"efa", IBV_TRANSPORT_UNSPECIFIED, IBV_LINK_LAYER_UNSPECIFIED, 0, 4096, 2, 1, 32768, 0, 0,
     EOPNOTSUPP, EOPNOTSUPP, Inline::Refuse, 32, false, 25},
};

// The entry of SOFTRDMA_PROFILE, or null (then the test fails: it runs under a profile only).
const Expected* expected() {
  const char* name = getenv("SOFTRDMA_PROFILE");
  for (const Expected& e : kExpected)
    if (name && e.name == name) return &e;
  return nullptr;
}

// A CQ and the caps for an RC QP on a LocalDevice (no connection needed).
struct QpMaker {
  LocalDevice d;
  ibv_cq* cq = nullptr;
  QpMaker() {
    if (d.ok()) cq = ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0);
  }
  ~QpMaker() {
    if (cq) ibv_destroy_cq(cq);
  }
  ibv_qp_init_attr attr(uint32_t max_inline) const {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = max_inline;
    return a;
  }
};

TEST(Profile, QueryDeviceAnswersAsTheProvider) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr) << "run with SOFTRDMA_PROFILE set (ctest softrdma.profile_*)";
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(d.ctx, &a), 0);
  EXPECT_EQ(d.ctx->device->transport_type, e->transport);
  EXPECT_EQ(d.ctx->device->node_type, e->transport == IBV_TRANSPORT_IWARP ? IBV_NODE_RNIC
                                      : e->transport == IBV_TRANSPORT_IB  ? IBV_NODE_CA
                                                                          : IBV_NODE_UNSPECIFIED);
  constexpr unsigned kChecked = kMw | k2B | IBV_DEVICE_MEM_WINDOW_TYPE_2A | kRnr | kMgt;
  EXPECT_EQ(a.device_cap_flags & kChecked, e->flags);
  EXPECT_EQ(a.max_qp_wr, e->max_qp_wr);
  EXPECT_EQ(a.max_sge, e->max_sge);
  EXPECT_EQ(a.max_sge_rd, e->max_sge_rd);
  EXPECT_EQ(a.max_cqe, e->max_cqe);
  EXPECT_EQ(a.max_qp_rd_atom, e->max_qp_rd_atom);
  EXPECT_EQ(a.max_qp_init_rd_atom, e->max_qp_init_rd_atom);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(d.ctx, 1, &port), 0);
  EXPECT_EQ(port.link_layer, e->link_layer);
}

TEST(Profile, AllocMwAnswersAsTheProvider) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  for (auto [type, want] :
       {std::pair{IBV_MW_TYPE_1, e->mw_type1_errno}, std::pair{IBV_MW_TYPE_2, e->mw_type2_errno}}) {
    SCOPED_TRACE(type);
    errno = 0;
    ibv_mw* mw = ibv_alloc_mw(d.pd, type);
    if (want == 0) {
      ASSERT_NE(mw, nullptr);
      ibv_dealloc_mw(mw);
    } else {
      EXPECT_EQ(mw, nullptr);
      EXPECT_EQ(errno, want);
    }
  }
}

TEST(Profile, InlineDataAsTheProviderGrantsIt) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->rc) << "no RC QPs under " << e->name << " (Profile.RcQps covers it)";
  QpMaker m;
  ASSERT_NE(m.cq, nullptr);
  ibv_qp_init_attr a = m.attr(e->max_inline + 1);
  errno = 0;
  ibv_qp* qp = ibv_create_qp(m.d.pd, &a);
  if (e->inline_rule == Inline::Clamp) {
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(a.cap.max_inline_data, e->max_inline);
    ibv_destroy_qp(qp);
  } else {
    EXPECT_EQ(qp, nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  a = m.attr(1);
  qp = ibv_create_qp(m.d.pd, &a);
  ASSERT_NE(qp, nullptr);
  // mlx5 grants what the send WQE has room for; the others grant what was asked (cxgb4: its max).
  if (e->inline_rule == Inline::RoundUp)
    EXPECT_EQ(a.cap.max_inline_data, 28u);
  else if (e->inline_rule == Inline::Clamp)
    EXPECT_EQ(a.cap.max_inline_data, e->max_inline);
  else
    EXPECT_EQ(a.cap.max_inline_data, 1u);
  ibv_destroy_qp(qp);
}

TEST(Profile, CapsBeyondTheLimitsAreRefused) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->rc) << "no RC QPs under " << e->name;
  QpMaker m;
  ASSERT_NE(m.cq, nullptr);
  ibv_qp_init_attr a = m.attr(0);
  a.cap.max_send_sge = static_cast<uint32_t>(e->max_sge) + 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(m.d.pd, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = m.attr(0);
  a.cap.max_send_wr = static_cast<uint32_t>(e->max_qp_wr) + 1;
  EXPECT_EQ(ibv_create_qp(m.d.pd, &a), nullptr);
  EXPECT_EQ(ibv_create_cq(m.d.ctx, e->max_cqe + 1, nullptr, nullptr, 0), nullptr);
}

// The depth a CQ gets is what the provider and driver round the request to, never less than asked
// (mlx5: mlx5_create_cq and mlx5_ib_create_cq; rxe: rxe_queue_init; siw: siw_create_cq).
TEST(Profile, CqDepthsAreRoundedAsTheProviderRoundsThem) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  const auto want = [e](int asked) {
    int pow2 = 1;
    switch (e->cq_depth) {
      case CqDepth::PowerOfTwoLessOne:
        while (pow2 < asked + 1) pow2 *= 2;
        return pow2 - 1;
      case CqDepth::PowerOfTwo:
        while (pow2 < asked) pow2 *= 2;
        return pow2;
      case CqDepth::Exact:
        break;
    }
    return asked;
  };
  for (int asked : {1, 4, 7, 8, 200, e->max_cqe}) {
    ibv_cq* cq = ibv_create_cq(d.ctx, asked, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr) << asked;
    EXPECT_EQ(cq->cqe, want(asked)) << "asked " << asked;
    EXPECT_GE(cq->cqe, asked);
    ibv_destroy_cq(cq);
  }
}

// librdmacm checks the READ depths of rdma_connect and rdma_accept against the device's.
TEST(Profile, ReadDepthsBeyondTheDevicesAreRefused) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->rc) << "no RDMA CM under " << e->name;
  VerbsPair beyond;
  beyond.a_initiator_depth = static_cast<uint8_t>(e->max_qp_init_rd_atom + 1);
  EXPECT_FALSE(beyond.connect());
  VerbsPair within;
  within.a_initiator_depth = static_cast<uint8_t>(e->max_qp_init_rd_atom);
  EXPECT_TRUE(within.connect());
}

TEST(Profile, RcQps) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  QpMaker m;
  ASSERT_NE(m.cq, nullptr);
  ibv_qp_init_attr a = m.attr(0);
  errno = 0;
  ibv_qp* qp = ibv_create_qp(m.d.pd, &a);
  if (e->rc) {
    ASSERT_NE(qp, nullptr);
    ibv_destroy_qp(qp);
    return;
  }
  EXPECT_EQ(qp, nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // The RDMA CM serves no EFA device: no address resolves to it.
  rdma_event_channel* ec = rdma_create_event_channel();
  rdma_cm_id* id;
  ASSERT_EQ(rdma_create_id(ec, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(3260);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&sin), 1000), 0);
  pollfd p{ec->fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  rdma_cm_event* ev;
  ASSERT_EQ(rdma_get_cm_event(ec, &ev), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_ERROR);
  EXPECT_EQ(ev->status, -ENODEV);
  rdma_ack_cm_event(ev);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ec);
}

TEST(Profile, RegistrationTakesWhatItTakesOnTheNic) {
  const Expected* e = expected();
  ASSERT_NE(e, nullptr);
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  static char buf[4096];
  constexpr int kRounds = 50;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; i++) {
    ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0,
            std::chrono::microseconds(2 * kRounds * e->reg_mr_us));
}

// SOFTRDMA_REG_MR_US overrides the profile's cost (softrdma.reg_mr_us sets 2000 without a profile).
TEST(RegMrUs, EveryRegistrationAndDeregistrationTakesThatLong) {
  const char* us = getenv("SOFTRDMA_REG_MR_US");
  ASSERT_NE(us, nullptr) << "run as ctest softrdma.reg_mr_us";
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  static char buf[4096];
  constexpr int kRounds = 5;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; i++) {
    ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0,
            std::chrono::microseconds(2 * kRounds * atol(us)));
}

TEST(Unknown, AMisspeltProfileFailsAtDeviceOpen) {
  ASSERT_STREQ(getenv("SOFTRDMA_PROFILE"), "mlx4") << "run as ctest softrdma.profile_unknown";
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_EQ(n, 1);
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(ibv_open_device(list[0]), nullptr);
  EXPECT_EQ(errno, EINVAL);
  rdma_event_channel* ec = rdma_create_event_channel();
  rdma_cm_id* id;
  EXPECT_EQ(rdma_create_id(ec, &id, nullptr, RDMA_PS_TCP), -1);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("SOFTRDMA_PROFILE=mlx4 is not a known profile"), std::string::npos) << err;
  EXPECT_NE(err.find("mlx5 rxe bnxt_re siw irdma-roce irdma-iwarp cxgb4 efa"), std::string::npos)
      << err;
  rdma_destroy_event_channel(ec);
  ibv_free_device_list(list);
}

// iWARP (siw, irdma-iwarp, cxgb4): the rules of RDMAP, DDP and MPA where they differ from IB.
class Iwarp : public testing::Test {
 protected:
  void SetUp() override {
    LocalDevice d;
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d.ctx->device->transport_type, IBV_TRANSPORT_IWARP)
        << "run under an iWARP profile (ctest softrdma.iwarp_*)";
  }
};

TEST_F(Iwarp, SendWithoutAReceiveTerminatesTheConnection) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7));  // rnr_retry means nothing on iWARP
  ASSERT_EQ(post_recv(p.a, 9, 0, 64), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 2, 0, 8), 0);
  // The SEND left; the responder found no buffer and terminated: what follows flushes (the
  // second SEND may be posted before or after the Terminate arrives, so in either order with the
  // receive's flush).
  auto wc = p.wait_wc(p.a, 3);
  ASSERT_EQ(wc.size(), 3u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[1].wr_id + wc[2].wr_id, 2u + 9u);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[2].status, IBV_WC_WR_FLUSH_ERR);
  ibv_async_event ev;
  pollfd af{p.b.id->verbs->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&af, 1, 5000), 1);
  ASSERT_EQ(ibv_get_async_event(p.b.id->verbs, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, p.b.id->qp);
  ibv_ack_async_event(&ev);
  int disconnected = 0;
  for (int i = 0; i < 4 && disconnected < 2; i++) {
    ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_DISCONNECTED) ||
                p.last.event == RDMA_CM_EVENT_TIMEWAIT_EXIT);
    disconnected += p.last.event == RDMA_CM_EVENT_DISCONNECTED;
  }
  EXPECT_EQ(disconnected, 2);
  ASSERT_EQ(post_recv(p.b, 10, 0, 64), 0);
  expect_completions(p, p.b, {{10, IBV_WC_WR_FLUSH_ERR}});
}

TEST_F(Iwarp, ThePassiveSideSendsOnlyAfterTheActiveSide) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(post_recv(p.a, 1, 0, 64), 0);
  ASSERT_EQ(post_recv(p.b, 2, 0, 64), 0);
  ASSERT_EQ(post_send(p.b, IBV_WR_SEND, 3, 0, 8), 0);
  EXPECT_TRUE(p.wait_wc(p.a, 1, 300).empty()) << "b's SEND left before a spoke";
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 4, 0, 8), 0);
  auto wc = p.wait_wc(p.a, 2);
  ASSERT_EQ(wc.size(), 2u);
  for (auto& c : wc) EXPECT_EQ(c.status, IBV_WC_SUCCESS);
  expect_completions(p, p.b, {{2, IBV_WC_SUCCESS}, {3, IBV_WC_SUCCESS}});
}

TEST_F(Iwarp, AReadSinkNeedsRemoteWrite) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
  ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_READ, 1, 0, 64, addr_of(p.b, 0), p.b.mr->rkey), 0);
  expect_completions(p, p.a, {{1, IBV_WC_LOC_PROT_ERR}});
  VerbsPair q;
  ASSERT_TRUE(q.connect());
  ASSERT_EQ(post_send(q.a, IBV_WR_RDMA_READ, 2, 0, 64, addr_of(q.b, 0), q.b.mr->rkey), 0);
  expect_completions(q, q.a, {{2, IBV_WC_SUCCESS}});
}

// siw and cxgb4 scatter an RDMA READ's data into one SGE only (max_sge_rd 1).
TEST_F(Iwarp, AReadTakesOneSge) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ibv_sge sge[2] = {{addr_of(p.a, 0), 64, p.a.mr->lkey}, {addr_of(p.a, 64), 64, p.a.mr->lkey}};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = sge;
  wr.num_sge = 2;
  wr.wr.rdma.remote_addr = addr_of(p.b, 0);
  wr.wr.rdma.rkey = p.b.mr->rkey;
  EXPECT_EQ(ibv_post_send(p.a.id->qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

}  // namespace
