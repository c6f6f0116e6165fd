// Memory windows through the standard verbs API: type 2 binds (IBV_WR_BIND_MW), local and remote
// invalidation, key tags, window bounds and rights, the QP a type 2 window serves, type 1 binds
// (ibv_bind_mw), bind errors, and ibv_dereg_mr refusing an MR with bound windows.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "verbs_pair.h"

namespace {

// The MRs grant no remote access of their own: whatever the peer may do, a window grants.
constexpr int kMwAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
constexpr unsigned kRw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr size_t kWinOff = 65536, kWinLen = 8192;

int post_bind(Side& s, ibv_mw* mw, uint32_t rkey, size_t off, size_t len, unsigned access,
              uint64_t wr_id, bool signaled = true) {
  ibv_send_wr wr{}, *bad;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info = {s.mr, addr_of(s, off), len, access};
  return ibv_post_send(s.id->qp, &wr, &bad);
}

// Binds a type 2 window over [kWinOff, kWinOff + kWinLen) of s to its next key, as an
// application does (the verbs leave storing the new key in mw->rkey to it), and waits for the
// bind to complete. Returns the key, or 0 on failure.
uint32_t bind_window(VerbsPair& p, Side& s, ibv_mw* mw, unsigned access) {
  uint32_t key = ibv_inc_rkey(mw->rkey);
  if (post_bind(s, mw, key, kWinOff, kWinLen, access, 90)) return 0;
  mw->rkey = key;
  auto wc = p.wait_wc(s, 1);
  bool ok = wc.size() == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_BIND_MW &&
            wc[0].wr_id == 90;
  return ok ? key : 0;
}

int post_local_inv(Side& s, uint32_t rkey, uint64_t wr_id) {
  ibv_send_wr wr{}, *bad;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  return ibv_post_send(s.id->qp, &wr, &bad);
}

int post_send_inv(Side& s, uint64_t wr_id, uint32_t rkey) {
  ibv_sge sge{addr_of(s, 0), 8, s.mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  return ibv_post_send(s.id->qp, &wr, &bad);
}

// a writes 4096 bytes of pattern `fill` at `off` in b through `rkey`, which must succeed.
void expect_write_lands(VerbsPair& p, size_t off, uint32_t rkey, char fill) {
  memset(p.a.buf.data(), fill, 4096);
  ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_WRITE, 30, 0, 4096, addr_of(p.b, off), rkey), 0);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(p.b.buf.data() + off, p.a.buf.data(), 4096), 0);
}

// The work request wr_id on s completes with `status` and the QP is then in error.
void expect_local_failure(VerbsPair& p, Side& s, uint64_t wr_id, ibv_wc_status status) {
  auto wc = p.wait_wc(s, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, wr_id);
  EXPECT_EQ(wc[0].status, status);
  ASSERT_EQ(post_send(s, IBV_WR_SEND, 99, 0, 8), 0);
  auto more = p.wait_wc(s, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].status, IBV_WC_WR_FLUSH_ERR);
}

// A connected pair with a type 2 window allocated in b's PD (not yet bound).
class Type2Window : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(p.connect(7, kMwAccess));
    mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
    ASSERT_NE(mw, nullptr);
  }

  VerbsPair p;
  ibv_mw* mw = nullptr;
};

TEST(MemoryWindows, DeviceAdvertisesThem) {
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  ibv_device_attr attr;
  ASSERT_EQ(ibv_query_device(d.ctx, &attr), 0);
  EXPECT_GE(attr.max_mw, 1024);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  ibv_device_attr_ex ex;
  ASSERT_EQ(ibv_query_device_ex(d.ctx, nullptr, &ex), 0);
  EXPECT_EQ(ex.orig_attr.max_mw, attr.max_mw);
  ibv_pd* pd = d.pd;
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(mw->type, IBV_MW_TYPE_2);
  EXPECT_EQ(mw->pd, pd);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(Type2Window, ServesWritesAndReadsInsideIt) {
  uint32_t key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(key, 0u);
  expect_write_lands(p, kWinOff + 1024, key, 0x3c);
  memset(p.b.buf.data() + kWinOff, 0x77, kWinLen);
  ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_READ, 3, 8192, kWinLen, addr_of(p.b, kWinOff), key), 0);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  ASSERT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(memcmp(p.a.buf.data() + 8192, p.b.buf.data() + kWinOff, kWinLen), 0);
}

TEST_F(Type2Window, AccessPastTheWindowIsRemoteAccessError) {
  uint32_t key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(key, 0u);
  // Inside the MR, but 100 bytes of the 4096 lie past the window.
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, kWinOff + kWinLen - 100), key);
}

TEST_F(Type2Window, WindowRightsAreEnforced) {
  uint32_t key = bind_window(p, p.b, mw, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(key, 0u);
  expect_write_lands(p, kWinOff, key, 0x11);
  expect_remote_access_error(p, IBV_WR_RDMA_READ, addr_of(p.b, kWinOff), key);
}

TEST_F(Type2Window, LocalInvalidateRetiresTheKey) {
  uint32_t key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(key, 0u);
  expect_write_lands(p, kWinOff, key, 0x22);
  ASSERT_EQ(post_local_inv(p.b, key, 40), 0);
  auto wc = p.wait_wc(p.b, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 40u);
  ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_LOCAL_INV);
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, kWinOff), key);
}

TEST_F(Type2Window, RebindWithTheNextKeyRetiresTheOldOne) {
  uint32_t old_key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(old_key, 0u);
  ASSERT_EQ(post_local_inv(p.b, old_key, 41), 0);
  ASSERT_EQ(p.wait_wc(p.b, 1).size(), 1u);
  uint32_t new_key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(new_key, 0u);
  EXPECT_NE(new_key, old_key);
  EXPECT_EQ(new_key & ~0xffu, old_key & ~0xffu);
  expect_write_lands(p, kWinOff, new_key, 0x33);
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, kWinOff), old_key);
}

TEST_F(Type2Window, BindPostedBeforeASendIsInEffectWhenItArrives) {
  uint32_t key = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(post_recv(p.a, 1, 0, 64), 0);
  ASSERT_EQ(post_bind(p.b, mw, key, kWinOff, kWinLen, kRw, 2, false), 0);
  memcpy(p.b.buf.data(), &key, sizeof key);
  ASSERT_EQ(post_send(p.b, IBV_WR_SEND, 3, 0, sizeof key), 0);
  auto rc = p.wait_wc(p.a, 1);
  ASSERT_EQ(rc.size(), 1u);
  uint32_t got;
  memcpy(&got, p.a.buf.data(), sizeof got);
  expect_write_lands(p, kWinOff, got, 0x44);
}

TEST_F(Type2Window, BindCompletesAfterTheWorkPostedBeforeIt) {
  // No receive at a yet: the SEND waits (RNR), and the bind's completion must wait behind it.
  ASSERT_EQ(post_send(p.b, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_bind(p.b, mw, ibv_inc_rkey(mw->rkey), kWinOff, kWinLen, kRw, 2), 0);
  EXPECT_TRUE(p.wait_wc(p.b, 1, 200).empty());
  ASSERT_EQ(post_recv(p.a, 5, 0, 64), 0);
  auto sc = p.wait_wc(p.b, 2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  ASSERT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sc[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sc[1].wr_id, 2u);
  ASSERT_EQ(sc[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sc[1].opcode, IBV_WC_BIND_MW);
}

TEST(MemoryWindows, BindNeedsAnMrWithMwBindAccess) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());  // MRs without IBV_ACCESS_MW_BIND
  ibv_mw* mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  ASSERT_EQ(post_bind(p.b, mw, ibv_inc_rkey(mw->rkey), kWinOff, kWinLen, kRw, 7), 0);
  expect_local_failure(p, p.b, 7, IBV_WC_MW_BIND_ERR);
}

TEST_F(Type2Window, BindPastTheMrIsRefused) {
  ASSERT_EQ(post_bind(p.b, mw, ibv_inc_rkey(mw->rkey), p.b.buf.size() - 4096, 8192, kRw, 7), 0);
  expect_local_failure(p, p.b, 7, IBV_WC_MW_BIND_ERR);
}

TEST(MemoryWindows, WritableWindowNeedsLocalWriteOnTheMr) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7, IBV_ACCESS_MW_BIND));
  ibv_mw* mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  ASSERT_EQ(post_bind(p.b, mw, ibv_inc_rkey(mw->rkey), kWinOff, kWinLen, kRw, 7), 0);
  expect_local_failure(p, p.b, 7, IBV_WC_MW_BIND_ERR);
}

TEST(MemoryWindows, BindThroughAQpOfAnotherPdIsRefused) {
  VerbsPair p, q;
  ASSERT_TRUE(p.connect(7, kMwAccess));
  ASSERT_TRUE(q.connect(7, kMwAccess));
  ibv_mw* mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  ibv_send_wr wr{}, *bad;
  wr.wr_id = 7;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = {p.b.mr, addr_of(p.b, kWinOff), kWinLen, kRw};
  ASSERT_EQ(ibv_post_send(q.b.id->qp, &wr, &bad), 0);
  expect_local_failure(q, q.b, 7, IBV_WC_MW_BIND_ERR);
}

TEST_F(Type2Window, BoundType2WindowMustBeInvalidatedBeforeRebinding) {
  ASSERT_NE(bind_window(p, p.b, mw, kRw), 0u);
  ASSERT_EQ(post_bind(p.b, mw, ibv_inc_rkey(mw->rkey), kWinOff, kWinLen, kRw, 8), 0);
  expect_local_failure(p, p.b, 8, IBV_WC_MW_BIND_ERR);
}

TEST_F(Type2Window, BindNamesTheWindowByItsCurrentKey) {
  uint32_t first = mw->rkey;
  uint32_t key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(key, 0u);
  ASSERT_EQ(post_local_inv(p.b, key, 44), 0);
  ASSERT_EQ(p.wait_wc(p.b, 1).size(), 1u);
  // As if the application had not stored the bound key in mw->rkey: rxe refuses this too.
  mw->rkey = first;
  ASSERT_EQ(post_bind(p.b, mw, ibv_inc_rkey(key), kWinOff, kWinLen, kRw, 9), 0);
  expect_local_failure(p, p.b, 9, IBV_WC_MW_BIND_ERR);
}

TEST(MemoryWindows, DeregOfAnMrWithBoundWindowsIsBusy) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7, kMwAccess));
  ibv_mw* type2 = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  ibv_mw* type1 = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  uint32_t key = bind_window(p, p.b, type2, kRw);
  ASSERT_NE(key, 0u);
  ibv_mw_bind bind{};
  bind.bind_info = {p.b.mr, addr_of(p.b, 0), 4096, IBV_ACCESS_REMOTE_READ};
  ASSERT_EQ(ibv_bind_mw(p.b.id->qp, type1, &bind), 0);
  EXPECT_EQ(ibv_dereg_mr(p.b.mr), EBUSY);
  // Still registered: the window still works.
  expect_write_lands(p, kWinOff, key, 0x55);
  ASSERT_EQ(post_local_inv(p.b, key, 42), 0);
  ASSERT_EQ(p.wait_wc(p.b, 1).size(), 1u);
  EXPECT_EQ(ibv_dereg_mr(p.b.mr), EBUSY);  // the type 1 window is still bound
  EXPECT_EQ(ibv_dealloc_mw(type1), 0);
  EXPECT_EQ(ibv_dereg_mr(p.b.mr), 0);
  p.b.mr = nullptr;
}

TEST_F(Type2Window, SendWithInvalidateRevokesTheWindowAndReportsIt) {
  uint32_t key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(key, 0u);
  ASSERT_EQ(post_recv(p.b, 6, 0, 64), 0);
  ASSERT_EQ(post_send_inv(p.a, 7, key), 0);
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  ASSERT_EQ(rc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV);
  EXPECT_TRUE(rc[0].wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(rc[0].invalidated_rkey, key);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  ASSERT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sc[0].opcode, IBV_WC_SEND);
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, kWinOff), key);
  // Unbound, not merely rekeyed: the MR is free to go.
  EXPECT_EQ(ibv_dereg_mr(p.b.mr), 0);
  p.b.mr = nullptr;
}

TEST_F(Type2Window, SendWithInvalidateOfAnUnknownKeyFailsTheReceive) {
  uint32_t key = bind_window(p, p.b, mw, kRw);
  ASSERT_NE(key, 0u);
  ASSERT_EQ(post_recv(p.b, 6, 0, 64), 0);
  ASSERT_EQ(post_recv(p.b, 8, 0, 64), 0);
  ASSERT_EQ(post_send_inv(p.a, 7, ibv_inc_rkey(key)), 0);
  expect_completions(p, p.b, {{6, IBV_WC_REM_INV_REQ_ERR}, {8, IBV_WC_WR_FLUSH_ERR}});
}

TEST(MemoryWindows, Type1WindowBindsAndUnbindsThroughIbvBindMw) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7, kMwAccess));
  ibv_mw* mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  uint32_t old_key = mw->rkey;
  ibv_mw_bind bind{};
  bind.wr_id = 11;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = {p.b.mr, addr_of(p.b, kWinOff), kWinLen, IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(ibv_bind_mw(p.b.id->qp, mw, &bind), 0);
  uint32_t key = mw->rkey;
  EXPECT_EQ(key, ibv_inc_rkey(old_key));
  auto wc = p.wait_wc(p.b, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 11u);
  ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_BIND_MW);
  expect_write_lands(p, kWinOff + 4096, key, 0x66);
  // A zero-length bind unbinds a type 1 window.
  bind.wr_id = 12;
  bind.bind_info = {nullptr, 0, 0, 0};
  ASSERT_EQ(ibv_bind_mw(p.b.id->qp, mw, &bind), 0);
  ASSERT_EQ(p.wait_wc(p.b, 1).size(), 1u);
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, kWinOff), key);
  // Unbound, not merely rekeyed: the MR is free to go.
  EXPECT_EQ(ibv_dereg_mr(p.b.mr), 0);
  p.b.mr = nullptr;
}

TEST(MemoryWindows, Type1WindowCannotBeInvalidated) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7, kMwAccess));
  ibv_mw* mw = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  ibv_mw_bind bind{};
  bind.bind_info = {p.b.mr, addr_of(p.b, kWinOff), kWinLen, IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(ibv_bind_mw(p.b.id->qp, mw, &bind), 0);
  ASSERT_EQ(post_local_inv(p.b, mw->rkey, 43), 0);
  expect_local_failure(p, p.b, 43, IBV_WC_LOC_QP_OP_ERR);
}

TEST(MemoryWindows, Type2WindowServesOnlyTheQpItWasBoundThrough) {
  VerbsPair p, q;
  ASSERT_TRUE(p.connect(7, kMwAccess));
  q.b.shared_pd = p.b.pd;  // q's responder QP is in the window's PD too
  ASSERT_TRUE(q.connect(7, kMwAccess));
  ibv_mw* type2 = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  uint32_t key = bind_window(p, p.b, type2, kRw);
  ASSERT_NE(key, 0u);
  expect_write_lands(p, kWinOff, key, 0x77);
  // A type 1 window serves every QP of its PD, q's included.
  ibv_mw* type1 = ibv_alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  ibv_mw_bind bind{};
  bind.bind_info = {p.b.mr, addr_of(p.b, 0), 8192, IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(ibv_bind_mw(p.b.id->qp, type1, &bind), 0);
  memset(q.a.buf.data(), 0x12, 4096);
  ASSERT_EQ(post_send(q.a, IBV_WR_RDMA_WRITE, 1, 0, 4096, addr_of(p.b, 0), type1->rkey), 0);
  auto sc = q.wait_wc(q.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(p.b.buf.data(), q.a.buf.data(), 4096), 0);
  // The type 2 window refuses q's peer.
  expect_remote_access_error(q, IBV_WR_RDMA_WRITE, addr_of(p.b, kWinOff), key);
}

}  // namespace
