// RC semantics of softrdma through the standard verbs/RDMA CM API: data movement, remote access
// errors (rkey, bounds, access flags), RNR, flush on error and disconnect, private data, reject.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#ifdef __SANITIZE_ADDRESS__
// libasan's (GCC installs no header for it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_pair.h"

namespace {

TEST(Softrdma, SendConsumesPostedReceiveAndPrivateDataRoundTrips) {
  VerbsPair p;
  p.connect_pdata = "hello from the active side";
  p.accept_pdata = "and back";
  ASSERT_TRUE(p.connect());
  EXPECT_EQ(p.established_pdata.substr(0, p.accept_pdata.size()), p.accept_pdata);
  ASSERT_EQ(post_recv(p.b, 7, 0, 4096), 0);
  strcpy(p.a.buf.data(), "payload");
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(rc[0].wr_id, 7u);
  EXPECT_EQ(rc[0].byte_len, 8u);
  EXPECT_STREQ(p.b.buf.data(), "payload");
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].opcode, IBV_WC_SEND);
}

TEST(Softrdma, WriteThenSendCompleteInOrderWithDataPlaced) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(post_recv(p.b, 1, 0, 64), 0);
  memset(p.a.buf.data() + 4096, 0x5a, 65536);
  ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_WRITE, 10, 4096, 65536, addr_of(p.b, 8192), p.b.mr->rkey),
            0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 11, 0, 16), 0);
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  // The WRITE is placed before the SEND that follows it arrives.
  EXPECT_EQ(memcmp(p.b.buf.data() + 8192, p.a.buf.data() + 4096, 65536), 0);
  auto sc = p.wait_wc(p.a, 2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 10u);
  EXPECT_EQ(sc[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(sc[1].wr_id, 11u);
}

// tgtd enters the full feature phase when its final Login Response's send completes, and closes
// the connection if the initiator's next PDU arrives first. So a receiver that answers a SEND the
// moment its receive shows up (here by busy polling) must find that the answer reaches the sender
// after the sender's send completion, in the sender's one CQ, every time.
TEST(Softrdma, SendCompletesBeforeAnAnswerToItArrives) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  for (uint64_t round = 0; round < 300; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_EQ(post_recv(p.b, 1000 + round, 0, 64), 0);
    ASSERT_EQ(post_recv(p.a, 2000 + round, 0, 64), 0);
    ASSERT_EQ(post_send(p.a, IBV_WR_SEND, round, 64, 64), 0);
    ibv_wc wc{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ibv_poll_cq(p.b.cq, 1, &wc) == 0 && std::chrono::steady_clock::now() < deadline) {
    }
    ASSERT_EQ(wc.wr_id, 1000 + round);
    ASSERT_EQ(post_send(p.b, IBV_WR_SEND, 3000 + round, 64, 64), 0);
    auto at_a = p.wait_wc(p.a, 2);
    ASSERT_EQ(at_a.size(), 2u);
    ASSERT_EQ(at_a[0].wr_id, round) << "the answer arrived before the send it answers completed";
    ASSERT_EQ(at_a[1].wr_id, 2000 + round);
    auto at_b = p.wait_wc(p.b, 1);
    ASSERT_EQ(at_b.size(), 1u);
    ASSERT_EQ(at_b[0].wr_id, 3000 + round);
  }
}

TEST(Softrdma, ReadFetchesRemoteMemory) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  memset(p.b.buf.data(), 0xa5, 300000);
  ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_READ, 3, 0, 300000, addr_of(p.b, 0), p.b.mr->rkey), 0);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sc[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(memcmp(p.a.buf.data(), p.b.buf.data(), 300000), 0);
}

TEST(Softrdma, BadRkeyIsRemoteAccessError) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, 0), p.b.mr->rkey ^ 0x1234);
}

TEST(Softrdma, OutOfBoundsIsRemoteAccessError) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  expect_remote_access_error(p, IBV_WR_RDMA_WRITE, addr_of(p.b, p.b.buf.size() - 100),
                             p.b.mr->rkey);
}

TEST(Softrdma, WrongAccessFlagsIsRemoteAccessError) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  expect_remote_access_error(p, IBV_WR_RDMA_READ, addr_of(p.b, 0), p.b.mr->rkey);
}

// a's SEND (wr_id 1) finds no receive at b and waits for `wait_ms`; once b posts one it is
// delivered, and a's `posted` work requests (wr_id 1, 2, ...) complete successfully in order.
void expect_parked_send_delivered(VerbsPair& p, int wait_ms, size_t posted) {
  EXPECT_TRUE(p.wait_wc(p.b, 1, wait_ms).empty());
  ASSERT_EQ(post_recv(p.b, 9, 0, 64), 0);
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
  auto sc = p.wait_wc(p.a, static_cast<int>(posted));
  ASSERT_EQ(sc.size(), posted);
  for (size_t i = 0; i < posted; i++) {
    EXPECT_EQ(sc[i].wr_id, i + 1);
    EXPECT_EQ(sc[i].status, IBV_WC_SUCCESS);
  }
}

TEST(Softrdma, RnrWaitsForAReceiveWithInfiniteRetry) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(7));
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  // A READ behind the parked SEND is still served.
  ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_READ, 2, 4096, 64, addr_of(p.b, 0), p.b.mr->rkey), 0);
  expect_parked_send_delivered(p, 200, 2);
}

TEST(Softrdma, RnrWithoutRetryIsAnError) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(0));
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
}

// rnr_retry 1-6: the responder's RNR timer (min_rnr_timer, IBA table 45) paces the retries.
void set_min_rnr_timer(Side& s, uint8_t code) {
  ibv_qp_attr attr{};
  attr.min_rnr_timer = code;
  ASSERT_EQ(ibv_modify_qp(s.id->qp, &attr, IBV_QP_MIN_RNR_TIMER), 0);
}

TEST(Softrdma, RnrRetriesRunOutIntoAnError) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(3));
  set_min_rnr_timer(p.b, 14);  // 1.28 ms: three retries are spent long before the receive
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 2, 0, 8), 0);
  expect_completions(p, p.a, {{1, IBV_WC_RNR_RETRY_EXC_ERR}, {2, IBV_WC_WR_FLUSH_ERR}});
  // Nothing that was parked reaches a receive posted afterwards.
  ASSERT_EQ(post_recv(p.b, 9, 0, 64), 0);
  EXPECT_TRUE(p.wait_wc(p.b, 1, 200).empty());
}

TEST(Softrdma, RnrRetryWithinTheBudgetSucceeds) {
  VerbsPair p;
  ASSERT_TRUE(p.connect(6));
  set_min_rnr_timer(p.b, 29);  // 245.76 ms x 6: the receive comes in time
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 1, 0, 8), 0);
  expect_parked_send_delivered(p, 100, 1);
}

// Strict mode keeps hardware's RDMA READ limits (the tests run with SOFTRDMA_STRICT=1).
TEST(Softrdma, ReadsBeyondInitiatorDepthWaitTheirTurn) {
  ASSERT_TRUE(getenv("SOFTRDMA_STRICT")) << "needs SOFTRDMA_STRICT=1";
  VerbsPair p;
  p.a_initiator_depth = 1;
  ASSERT_TRUE(p.connect());
  for (int i = 0; i < 3; i++) memset(p.b.buf.data() + i * 4096, 'x' + i, 4096);
  for (uint64_t i = 0; i < 3; i++)
    ASSERT_EQ(post_send(p.a, IBV_WR_RDMA_READ, i + 1, 8192 + i * 4096, 4096, addr_of(p.b, i * 4096),
                        p.b.mr->rkey),
              0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 4, 0, 8), 0);
  ASSERT_EQ(post_recv(p.b, 9, 65536, 64), 0);
  auto sc = p.wait_wc(p.a, 4);
  ASSERT_EQ(sc.size(), 4u);
  for (size_t i = 0; i < 4; i++) {
    EXPECT_EQ(sc[i].wr_id, i + 1);
    EXPECT_EQ(sc[i].status, IBV_WC_SUCCESS);
  }
  for (int i = 0; i < 3; i++)
    EXPECT_EQ(memcmp(p.a.buf.data() + 8192 + i * 4096, p.b.buf.data() + i * 4096, 4096), 0);
  EXPECT_EQ(p.wait_wc(p.b, 1).size(), 1u);
}

TEST(Softrdma, ReadsBeyondThePeersResponderResourcesAreRefused) {
  ASSERT_TRUE(getenv("SOFTRDMA_STRICT")) << "needs SOFTRDMA_STRICT=1";
  VerbsPair p;
  p.a_initiator_depth = 4;
  p.b_responder_resources = 1;
  ASSERT_TRUE(p.connect());
  // Both in one ibv_post_send: the second goes out while the first is surely outstanding.
  ibv_sge sge[2] = {{addr_of(p.a, 8192), 4096, p.a.mr->lkey},
                    {addr_of(p.a, 12288), 4096, p.a.mr->lkey}};
  ibv_send_wr wr[2] = {}, *bad = nullptr;
  for (int i = 0; i < 2; i++) {
    wr[i].wr_id = i + 1;
    wr[i].opcode = IBV_WR_RDMA_READ;
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].send_flags = IBV_SEND_SIGNALED;
    wr[i].wr.rdma.remote_addr = addr_of(p.b, 0);
    wr[i].wr.rdma.rkey = p.b.mr->rkey;
    wr[i].next = i == 0 ? &wr[1] : nullptr;
  }
  ASSERT_EQ(ibv_post_send(p.a.id->qp, wr, &bad), 0);
  auto sc = p.wait_wc(p.a, 2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  EXPECT_EQ(sc[1].wr_id, 2u);
  EXPECT_EQ(sc[1].status, IBV_WC_REM_INV_REQ_ERR);
}

TEST(Softrdma, ReceiveTooSmallIsLengthError) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(post_recv(p.b, 1, 0, 16), 0);
  ASSERT_EQ(post_send(p.a, IBV_WR_SEND, 2, 0, 64), 0);
  auto rc = p.wait_wc(p.b, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_LOC_LEN_ERR);
  auto sc = p.wait_wc(p.a, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_REM_INV_REQ_ERR);
}

TEST(Softrdma, DisconnectFlushesAndEndsWithTimewaitExit) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  for (int i = 0; i < 4; i++) ASSERT_EQ(post_recv(p.b, 100 + i, 0, 64), 0);
  ASSERT_EQ(rdma_disconnect(p.a.id), 0);
  int disconnected = 0, timewait = 0;
  for (int i = 0; i < 4; i++) {
    // Both sides' events share one channel: accept either kind, then count.
    ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_DISCONNECTED) ||
                p.last.event == RDMA_CM_EVENT_TIMEWAIT_EXIT);
    disconnected += p.last.event == RDMA_CM_EVENT_DISCONNECTED;
    timewait += p.last.event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
  }
  EXPECT_EQ(disconnected, 2);
  EXPECT_EQ(timewait, 2);
  auto rc = p.wait_wc(p.b, 4);
  ASSERT_EQ(rc.size(), 4u);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(rc[i].wr_id, 100u + i);
    EXPECT_EQ(rc[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  // A second disconnect after the peer's succeeds (tgtd does this).
  EXPECT_EQ(rdma_disconnect(p.b.id), 0);
}

// RoCE reports TIMEWAIT_EXIT only after the CM's timewait, and not for an id destroyed by then:
// rping 44's CM thread would otherwise read the event channel its main thread has just closed.
TEST(Softrdma, TimewaitExitIsNotReportedForAnIdDestroyedBefore) {
  VerbsPair p;
  ASSERT_TRUE(p.connect());
  ASSERT_EQ(rdma_disconnect(p.a.id), 0);
  for (int i = 0; i < 2; i++) ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_DISCONNECTED));
  rdma_cm_id* b_id = p.b.id;
  p.release(p.a);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_TIMEWAIT_EXIT)) << rdma_event_str(p.last.event);
  EXPECT_EQ(p.last.id, b_id);
  pollfd more{p.ec->fd, POLLIN, 0};
  EXPECT_EQ(poll(&more, 1, 1500), 0) << "an event for the destroyed id";
}

TEST(Softrdma, RejectCarriesPrivateDataAndStatus28) {
  VerbsPair p;
  p.ec = rdma_create_event_channel();
  ASSERT_EQ(rdma_create_id(p.ec, &p.listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_bind_addr(p.listener, reinterpret_cast<sockaddr*>(&sin)), 0);
  ASSERT_EQ(rdma_listen(p.listener, 4), 0);
  sin.sin_port = rdma_get_src_port(p.listener);
  ASSERT_EQ(rdma_create_id(p.ec, &p.a.id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_resolve_addr(p.a.id, nullptr, reinterpret_cast<sockaddr*>(&sin), 1000), 0);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(rdma_resolve_route(p.a.id, 1000), 0);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_ROUTE_RESOLVED));
  rdma_conn_param cp{};
  ASSERT_EQ(rdma_connect(p.a.id, &cp), 0);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_CONNECT_REQUEST));
  ASSERT_EQ(rdma_reject(p.b.id, "go away", 7), 0);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_REJECTED, 28));
  EXPECT_EQ(p.last_pdata.substr(0, 7), "go away");
}

TEST(Softrdma, NoListenerIsRejectedWithStatus8) {
  VerbsPair p;
  p.ec = rdma_create_event_channel();
  ASSERT_EQ(rdma_create_id(p.ec, &p.a.id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(9);
  ASSERT_EQ(rdma_resolve_addr(p.a.id, nullptr, reinterpret_cast<sockaddr*>(&sin), 1000), 0);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(rdma_resolve_route(p.a.id, 1000), 0);
  ASSERT_TRUE(p.next_event(RDMA_CM_EVENT_ROUTE_RESOLVED));
  rdma_conn_param cp{};
  ASSERT_EQ(rdma_connect(p.a.id, &cp), 0);
  EXPECT_TRUE(p.next_event(RDMA_CM_EVENT_REJECTED, 8));
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

bool ResolveTo(VerbsPair& p, rdma_cm_id* id, uint16_t port) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(port);
  return rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&sin), 1000) == 0 &&
         p.next_event(RDMA_CM_EVENT_ADDR_RESOLVED) && rdma_resolve_route(id, 1000) == 0 &&
         p.next_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
}

// TCP ports are shared by every softrdma namespace of a host, so a connect that finds no
// listener of its own namespace must not land on another namespace's TCP listener: side-by-side
// perftest runs met that way while one of them reopened its listener.
TEST(Softrdma, TcpListenerOfAnotherNamespaceIsNotReached) {
  const std::string ns = "tcp-ns-" + std::to_string(getpid());
  // Its TCP side (port + 20000) stays below the kernel's ephemeral ports (32768 and up): a port
  // there can be held by another program's connection, or its TIME_WAIT, and then the listener
  // has no TCP side for reasons this test is not about.
  const uint16_t port = static_cast<uint16_t>(10000 + getpid() % 2700);
  VerbsPair p;
  p.ec = rdma_create_event_channel();
  {
    ScopedEnv x("SOFTRDMA_NAMESPACE", ns + "-x");
    ASSERT_EQ(rdma_create_id(p.ec, &p.listener, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(port);
    ASSERT_EQ(rdma_bind_addr(p.listener, reinterpret_cast<sockaddr*>(&sin)), 0);
    ASSERT_EQ(rdma_listen(p.listener, 8), 0);
  }
  // Its TCP side (port + 20000) greets with its namespace.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in tcp{};
  tcp.sin_family = AF_INET;
  tcp.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  tcp.sin_port = htons(port + 20000);
  timeval five{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five, sizeof five);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&tcp), sizeof tcp), 0) << strerror(errno);
  char greeting[64] = {};
  EXPECT_EQ(recv(fd, greeting, sizeof greeting, MSG_WAITALL), 64);
  EXPECT_EQ(std::string(greeting), "softrdma namespace " + ns + "-x");
  close(fd);

  {
    ScopedEnv y("SOFTRDMA_NAMESPACE", ns + "-y");
    ASSERT_EQ(rdma_create_id(p.ec, &p.a.id, nullptr, RDMA_PS_TCP), 0);
    ASSERT_TRUE(ResolveTo(p, p.a.id, port));
    rdma_conn_param cp{};
    ASSERT_EQ(rdma_connect(p.a.id, &cp), 0);
    EXPECT_TRUE(p.next_event(RDMA_CM_EVENT_REJECTED, 8));
  }
  // The same connect from the listener's namespace, over TCP, gets through.
  ScopedEnv x("SOFTRDMA_NAMESPACE", ns + "-x");
  ScopedEnv tcp_only("SOFTRDMA_VIA_TCP", "1");
  rdma_cm_id* id;
  ASSERT_EQ(rdma_create_id(p.ec, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_TRUE(ResolveTo(p, id, port));
  rdma_conn_param cp{};
  ASSERT_EQ(rdma_connect(id, &cp), 0);
  EXPECT_TRUE(p.next_event(RDMA_CM_EVENT_CONNECT_REQUEST));
  rdma_destroy_id(id);
}

TEST(Softrdma, StrictModeRefusesToRegisterUnmappedMemory) {
  ASSERT_NE(getenv("SOFTRDMA_STRICT"), nullptr) << "run with SOFTRDMA_STRICT=1 (as ctest does)";
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  ibv_pd* pd = d.pd;
  long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  munmap(static_cast<char*>(p) + page, page);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, p, 2 * page, static_cast<int>(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* mr = ibv_reg_mr(pd, p, page, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  EXPECT_NE(mr, nullptr);
  ibv_dereg_mr(mr);
  munmap(p, page);
}

// The kernel counts what uses a PD and a CQ: destroying one still in use fails with EBUSY (a
// program that tears down out of order fails on hardware, so it must fail here too) and succeeds
// once its users are gone.
TEST(Softrdma, DestroyingAPdOrCqStillInUseIsBusy) {
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  ibv_pd* pd = d.pd;
  ibv_cq* cq = ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  std::vector<char> buf(4096);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(mr, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &attr);
  ASSERT_NE(qp, nullptr);

  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "an MR and a window are still in the PD";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "a window is still in the PD";
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  d.pd = nullptr;
}

// Bytes the program has allocated and not freed (ASan keeps freed blocks for a while, so the
// resident size would not tell).
size_t heap_in_use() {
#ifdef __SANITIZE_ADDRESS__
  return __sanitizer_get_current_allocated_bytes();
#else
  return mallinfo2().uordblks;
#endif
}

// An initiator that registers each command's buffer deregisters as many MRs as it serves I/Os:
// softrdma must not keep every one of them.
TEST(Softrdma, DeregisteredMrsDoNotAccumulate) {
  LocalDevice d;
  ASSERT_TRUE(d.ok());
  ibv_pd* pd = d.pd;
  std::vector<char> buf(4096);
  auto cycle = [&](int times) {
    for (int i = 0; i < times; i++) {
      ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
      ASSERT_NE(mr, nullptr);
      ASSERT_EQ(ibv_dereg_mr(mr), 0);
    }
  };
  cycle(10000);  // past the quarantine of recent MRs
  const size_t before = heap_in_use();
  cycle(200000);  // kept objects would be about 20 MiB
  EXPECT_LT(heap_in_use() - before, size_t{4} << 20);
}

}  // namespace
