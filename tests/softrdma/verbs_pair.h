// Test fixture: two RC QPs in this process connected through the RDMA CM of whatever
// libibverbs/librdmacm are loaded (softrdma's drop-ins under ctest), and checks shared by the
// tests. Contract: every wait is bounded (a missing event or completion fails the test instead of
// hanging).
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <string>
#include <vector>

// The first device, opened, and a PD in it: for tests of verbs that need no connection. A
// constructor cannot fail a test, so check ok() with ASSERT_TRUE.
struct LocalDevice {
  LocalDevice() {
    int n = 0;
    list = ibv_get_device_list(&n);
    if (list != nullptr && n > 0) ctx = ibv_open_device(list[0]);
    if (ctx != nullptr) pd = ibv_alloc_pd(ctx);
  }
  ~LocalDevice() {
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
    if (list != nullptr) ibv_free_device_list(list);
  }
  LocalDevice(const LocalDevice&) = delete;
  LocalDevice& operator=(const LocalDevice&) = delete;
  bool ok() const { return pd != nullptr; }

  ibv_device** list = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;  // a test that frees it sets this to nullptr
};

struct Side {
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<char> buf = std::vector<char>(1 << 20);
  ibv_mr* mr = nullptr;
  ibv_pd* shared_pd = nullptr;  // set before connect(): this side uses it and leaves it allocated
};

class VerbsPair {
 public:
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* listener = nullptr;
  Side a, b;  // a connects, b accepts
  std::string accept_pdata, connect_pdata;
  rdma_cm_event last{};
  std::string last_pdata;
  std::string established_pdata;  // what the accepting side sent, as the active side saw it
  // RDMA READ depths connect() offers: a's initiator_depth, b's responder_resources (the others
  // are 4).
  uint8_t a_initiator_depth = 4;
  uint8_t b_responder_resources = 4;
  // The rnr_retry_count b accepts with (-1: connect()'s), and each side's CQ depth.
  int b_rnr_retry = -1;
  int cqe = 256;

  // Waits up to 5 s for the next CM event; its fields are copied into `last`.
  bool next_event(rdma_cm_event_type want, int status = 0);
  // Listens, connects a to b with the given rnr_retry (b: b_rnr_retry if set), and accepts.
  bool connect(uint8_t rnr_retry = 7, int mr_access = IBV_ACCESS_LOCAL_WRITE |
                                                      IBV_ACCESS_REMOTE_WRITE |
                                                      IBV_ACCESS_REMOTE_READ);
  // Destroys a side's QP, MR, CQ, channel, PD (unless shared) and id.
  void release(Side& s);
  // Collects up to n completions from a side's CQ within the timeout.
  std::vector<ibv_wc> wait_wc(Side& s, int n, int timeout_ms = 5000);
  uint16_t port = 0;
  ~VerbsPair();

 private:
  bool setup_side(Side& s, rdma_cm_id* id, int access);
};

int post_send(Side& s, ibv_wr_opcode op, uint64_t wr_id, size_t off, size_t len, uint64_t raddr = 0,
              uint32_t rkey = 0, bool signaled = true);
int post_recv(Side& s, uint64_t wr_id, size_t off, size_t len);
uint64_t addr_of(Side& s, size_t off);
// The QP's state as ibv_query_qp reports it.
ibv_qp_state qp_state(ibv_qp* qp);
// Polls qp_state until it is `want` or timeout_ms have passed; returns the last state seen.
ibv_qp_state wait_qp_state(ibv_qp* qp, ibv_qp_state want, int timeout_ms = 5000);
// GoogleTest assertions: a's `op` of 4096 bytes at raddr with rkey in b is a remote access
// violation (a: REM_ACCESS_ERR then flushes; b: IBV_EVENT_QP_ACCESS_ERR and flushes).
void expect_remote_access_error(VerbsPair& p, ibv_wr_opcode op, uint64_t raddr, uint32_t rkey);

struct ExpectedWc {
  uint64_t wr_id;
  ibv_wc_status status;
};
// GoogleTest assertions: s's CQ yields exactly these completions, in this order.
void expect_completions(VerbsPair& p, Side& s, const std::vector<ExpectedWc>& want);
