// RDMA CM over local sockets. Rendezvous: a listener is an abstract Unix socket named by
// (SOFTRDMA_NAMESPACE, family, address, port); abstract names are private to the network namespace
// and take no TCP port, so iSCSI/TCP and iSER share IP:port as on real hardware. The handshake
// (REQ, REP, RTU / REJ) and disconnect (DREQ both ways) travel on the connection's own socket.
//
// Processes on other hosts (or in other network namespaces) cannot see an abstract name, so each
// listener also listens on TCP, on its address at port + SOFTRDMA_TCP_PORT_OFFSET (default 20000;
// 0 turns it off); a connect that finds no local listener tries there. Over TCP the peer's pid
// is unknown, so payloads travel in the stream. SOFTRDMA_VIA_TCP=1 skips the local rendezvous.
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api.h"
#include "cm.h"
#include "log.h"
#include "pcap.h"
#include "profile.h"

using namespace softrdma;

namespace {

EventChannel* chan(rdma_event_channel* c) {
  return reinterpret_cast<EventChannel*>(c);
}
CmIdImpl* idimpl(rdma_cm_id* id) {
  return reinterpret_cast<CmIdImpl*>(id);
}

uint16_t port_of(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(a).sin6_port
                                       : reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

void set_port(sockaddr_storage& a, uint16_t port) {
  if (a.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in&>(a).sin_port = htons(port);
}

bool is_wildcard(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
  return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr == INADDR_ANY;
}

socklen_t addr_len(int family) {
  return family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

void copy_addr(sockaddr_storage& to, const sockaddr* from) {
  memset(&to, 0, sizeof to);
  if (from) memcpy(&to, from, addr_len(from->sa_family));
}

socklen_t rendezvous(const sockaddr_storage& a, bool wildcard, int family, sockaddr_un* un) {
  char host[INET6_ADDRSTRLEN] = "*";
  if (!wildcard) {
    const void* p =
        a.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(a).sin_addr);
    inet_ntop(a.ss_family, p, host, sizeof host);
  }
  const char* ns = getenv("SOFTRDMA_NAMESPACE");
  memset(un, 0, sizeof *un);
  un->sun_family = AF_UNIX;
  int n = snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "softrdma/%s/%d/%s/%u", ns ? ns : "",
                   family == AF_INET6 ? 6 : 4, host, port_of(a));
  return offsetof(sockaddr_un, sun_path) + 1 + n;
}

// The TCP port of RDMA CM port `port`, or 0 when there is none.
uint16_t tcp_port(uint16_t port) {
  const char* v = getenv("SOFTRDMA_TCP_PORT_OFFSET");
  unsigned long offset = v ? strtoul(v, nullptr, 10) : 20000;
  if (offset == 0 || port + offset > 65535) return 0;
  return static_cast<uint16_t>(port + offset);
}

// A nonblocking TCP socket for RDMA CM address `rdma`, and *tcp that address with its TCP port;
// -1 when the port has none.
int tcp_socket(const sockaddr_storage& rdma, sockaddr_storage* tcp) {
  uint16_t port = tcp_port(port_of(rdma));
  if (port == 0) return -1;
  *tcp = rdma;
  set_port(*tcp, port);
  return socket(rdma.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

// A TCP listener on the listener's address (wildcard included) at its TCP port, or -1.
int tcp_listen(const sockaddr_storage& src, int backlog) {
  sockaddr_storage a;
  int fd = tcp_socket(src, &a);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), addr_len(a.ss_family)) != 0 ||
      listen(fd, backlog) != 0) {
    log_warn("no TCP listener on port %u for other hosts: %s", port_of(a), strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

// Connects to dst's TCP port within timeout_ms; -1 if refused or too slow.
int tcp_connect(const sockaddr_storage& dst, int timeout_ms) {
  sockaddr_storage a;
  int fd = tcp_socket(dst, &a);
  if (fd < 0) return -1;
  int err = connect(fd, reinterpret_cast<sockaddr*>(&a), addr_len(a.ss_family)) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    socklen_t el = sizeof err;
    err = poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0
              ? err
              : ETIMEDOUT;
  }
  if (err != 0) {
    log_debug("TCP connect to port %u: %s", port_of(a), strerror(err));
    close(fd);
    return -1;
  }
  // The listener greets at once; silence for a second means it is no softrdma listener.
  const std::string want = tcp_greeting();
  char got[kTcpGreetingLength];
  size_t have = 0;
  while (have < sizeof got) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) break;
    ssize_t n = recv(fd, got + have, sizeof got - have, 0);
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  if (have != sizeof got || want.compare(0, want.size(), got, sizeof got) != 0) {
    log_debug("TCP port %u: not a listener of this softrdma namespace", port_of(a));
    close(fd);
    return -1;
  }
  return fd;
}

void push_event(CmIdImpl* id, rdma_cm_event_type type, int status, CmIdImpl* listen = nullptr,
                const WireConnect* wc = nullptr) {
  auto* ev = new CmEvent{};
  ev->pub.id = &id->pub;
  ev->pub.listen_id = listen ? &listen->pub : nullptr;
  ev->pub.event = type;
  ev->pub.status = status;
  if (wc) {
    auto& p = ev->pub.param.conn;
    memcpy(ev->pdata, wc->pdata, wc->pdata_len);
    p.private_data = ev->pdata;
    p.private_data_len = wc->pdata_len;
    p.responder_resources = wc->responder_resources;
    p.initiator_depth = wc->initiator_depth;
    p.retry_count = wc->retry_count;
    p.rnr_retry_count = wc->rnr_retry_count;
    p.srq = wc->srq;
    p.qp_num = wc->qpn;
  }
  log_debug("cm event %s (status %d) for id %p", rdma_event_str(type), status,
            static_cast<void*>(id));
  EventChannel* ch =
      chan(type == RDMA_CM_EVENT_CONNECT_REQUEST ? listen->pub.channel : id->pub.channel);
  {
    std::lock_guard g(ch->mu);
    ch->events.push_back(&ev->pub);
  }
  uint64_t one = 1;
  if (write(ch->pub.fd, &one, sizeof one) < 0) log_warn("cm event lost");
}

// A byte the peer reads with process_vm_readv to learn whether it can reach this process's memory
// (same uid and dumpable, or CAP_SYS_PTRACE; Yama and seccomp may refuse it).
const uint8_t probe_byte = 1;

bool can_reach(pid_t pid, uint64_t addr) {
  if (env_on("SOFTRDMA_NO_CMA") || pid <= 0) return false;
  uint8_t b = 0;
  iovec local{&b, 1}, remote{reinterpret_cast<void*>(addr), 1};
  bool ok = process_vm_readv(pid, &local, 1, &remote, 1, 0) == 1 && b == 1;
  if (!ok) log_debug("cross-memory attach to pid %d refused: payloads go through the socket", pid);
  return ok;
}

void send_connect(const std::shared_ptr<Conn>& c, Msg type, CmIdImpl* id,
                  const rdma_conn_param* param) {
  WireConnect m{};
  m.hdr = {type, sizeof m};
  m.probe_addr = reinterpret_cast<uintptr_t>(&probe_byte);
  m.sender_reaches_you = id->reaches_peer;
  m.qpn = id->pub.qp ? id->pub.qp->qp_num : (param ? param->qp_num : 0);
  if (type == Msg::Req || type == Msg::Rep) id->local_qpn = m.qpn;
  if (param) {
    m.responder_resources = id->read_depths.responder_resources;
    m.initiator_depth = id->read_depths.initiator_depth;
    m.retry_count = param->retry_count;
    m.rnr_retry_count = param->rnr_retry_count;
    m.srq = param->srq;
    m.pdata_len = param->private_data_len;
    if (param->private_data && param->private_data_len)
      memcpy(m.pdata, param->private_data, param->private_data_len);
  }
  m.src = id->src;
  m.dst = id->dst;
  c->send(&m, sizeof m);
}

// Real RDMA CM reports TIMEWAIT_EXIT only when the IB CM's timewait ends, a good part of a second
// after DISCONNECTED on RoCE; programs that destroy the id at once never see it. rping 44 relies
// on that: its CM event thread would otherwise read the event channel its main thread has just
// closed, and fail.
constexpr std::chrono::milliseconds kTimewait{500};

// Ends a connection once: the QP flushes (`status` for the oldest outstanding send), and the id
// sees DISCONNECTED, then TIMEWAIT_EXIT after the timewait unless it is destroyed by then.
void finish(CmIdImpl* id, ibv_wc_status status) {
  {
    std::lock_guard g(id->mu);
    if (id->state != IdState::Connected) return;
    id->state = IdState::Disconnected;
  }
  if (id->pub.qp) qp_disconnected(id->pub.qp, status);
  push_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
  loop_after(kTimewait, [id] {
    {
      std::lock_guard g(id->mu);
      if (id->destroyed) return;
    }
    push_event(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
  });
}

void on_message(const std::shared_ptr<Conn>& c, const WireHdr* h) {
  CmIdImpl* id = c->id;
  if (!id) return;
  const auto* wc = reinterpret_cast<const WireConnect*>(h);
  // pdata_len is one byte, so it cannot exceed pdata (static_assert in wire.h).
  bool full = h->len >= sizeof(WireConnect);
  switch (h->type) {
    case Msg::Req: {
      if (!c->awaiting_req || !full) return;
      c->awaiting_req = false;
      if (pcap_enabled()) pcap_cm(CmMad::Req, wc->qpn, 0, wc, id->pub.ps);
      auto* child = new CmIdImpl();
      child->pub.verbs = shared_context();
      child->pub.channel = id->pub.channel;
      child->pub.context = id->pub.context;
      child->pub.ps = id->pub.ps;
      child->pub.qp_type = id->pub.qp_type;
      child->pub.port_num = 1;
      child->src = wc->dst;
      child->dst = wc->src;
      child->remote_qpn = wc->qpn;
      child->peer_rnr_retry = wc->rnr_retry_count;
      child->read_depths.peer_responder_resources = wc->responder_resources;
      child->reaches_peer = can_reach(c->peer_pid, wc->probe_addr);
      memcpy(&child->pub.route.addr.src_addr, &child->src, sizeof child->src);
      memcpy(&child->pub.route.addr.dst_addr, &child->dst, sizeof child->dst);
      child->pub.route.num_paths = 1;
      child->state = IdState::Requested;
      child->conn = c;
      c->id = child;
      push_event(child, RDMA_CM_EVENT_CONNECT_REQUEST, 0, id, wc);
      break;
    }
    case Msg::Rep: {
      if (!full || id->state != IdState::Connecting) return;
      if (pcap_enabled()) pcap_cm(CmMad::Rep, wc->qpn, id->local_qpn, wc);
      id->remote_qpn = wc->qpn;
      id->peer_rnr_retry = wc->rnr_retry_count;
      id->read_depths.peer_responder_resources = wc->responder_resources;
      if (id->pub.qp) qp_attach(id->pub.qp, c, wc->qpn, id->peer_rnr_retry, id->read_depths, false);
      id->state = IdState::Connected;
      c->push = !wc->sender_reaches_you;
      id->reaches_peer = can_reach(c->peer_pid, wc->probe_addr);
      send_connect(c, Msg::Rtu, id, nullptr);
      push_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, nullptr, wc);
      break;
    }
    case Msg::Rtu:
      if (!full || id->state != IdState::Accepting) return;
      if (pcap_enabled()) pcap_cm(CmMad::Rtu, id->remote_qpn, id->local_qpn);
      c->push = !wc->sender_reaches_you;
      id->state = IdState::Connected;
      push_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      break;
    case Msg::Rej:
      if (!full || id->state != IdState::Connecting) return;
      if (pcap_enabled()) pcap_cm(CmMad::Rej, wc->qpn, id->local_qpn, wc);
      id->state = IdState::Idle;
      push_event(id, RDMA_CM_EVENT_REJECTED, 28, nullptr, wc);
      break;
    case Msg::Dreq:
      if (!c->local_disconnect) {
        c->local_disconnect = true;
        // The side answering a DREQ writes both MADs, the DREQ and the DREP (the DREQ sent back
        // now): a DREQ arriving after our own is that answer or a DREQ that crossed ours, which
        // this side cannot tell apart.
        if (pcap_enabled()) {
          pcap_cm(CmMad::Dreq, id->remote_qpn, id->local_qpn);
          pcap_cm(CmMad::Drep, id->local_qpn, id->remote_qpn);
        }
        WireHdr d{Msg::Dreq, sizeof d};
        c->send(&d, sizeof d);
      }
      finish(id, IBV_WC_WR_FLUSH_ERR);
      break;
    default:
      break;
  }
}

void on_close(const std::shared_ptr<Conn>& c) {
  CmIdImpl* id = c->id;
  if (!id || c->awaiting_req) return;
  if (id->state == IdState::Connecting) {
    id->state = IdState::Idle;
    push_event(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET);
    return;
  }
  if (id->state == IdState::Accepting || id->state == IdState::Requested) {
    id->state = IdState::Disconnected;
    push_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
    return;
  }
  finish(id, IBV_WC_RETRY_EXC_ERR);
}

const CmHooks hooks{on_message, on_close};

// The kernel's RDMA CM takes only devices with an IB or iWARP connection manager: an EFA device is
// invisible to it, so no address resolves to it.
bool cm_serves_device() {
  return profile().transport != Transport::Other;
}

void install_hooks() {
  static bool done = [] {
    set_cm_hooks(&hooks);
    return true;
  }();
  (void)done;
}

}  // namespace

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  install_hooks();
  auto* ch = new EventChannel();
  ch->pub.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  return &ch->pub;
}

void rdma_destroy_event_channel(rdma_event_channel* ch) {
  close(ch->fd);
}

int rdma_create_id(rdma_event_channel* ch, rdma_cm_id** out, void* context, rdma_port_space ps) {
  install_hooks();
  if (!profile_usable("rdma_create_id")) {
    errno = ENODEV;
    return -1;
  }
  if (!ch) {
    errno = EOPNOTSUPP;  // synchronous ids are not provided
    return -1;
  }
  auto* id = new CmIdImpl();
  id->pub.channel = ch;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = IBV_QPT_RC;
  *out = &id->pub;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* pub) {
  CmIdImpl* id = idimpl(pub);
  {
    std::unique_lock g(id->mu);
    id->destroyed = true;
    id->acked.wait(g, [id] { return id->events_acked == id->events_reported; });
  }
  for (int* fd : {&id->listen_fd, &id->tcp_listen_fd}) {
    if (*fd < 0) continue;
    listener_remove(*fd);
    close(*fd);
    *fd = -1;
  }
  std::shared_ptr<Conn> c;
  {
    std::lock_guard g(id->mu);
    c = std::move(id->conn);
  }
  if (c) {
    std::lock_guard g(c->mu);
    c->id = nullptr;
  }
  if (c && !c->closed) {
    std::lock_guard g(c->out_mu);
    if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
  }
  return 0;
}

int rdma_bind_addr(rdma_cm_id* pub, sockaddr* addr) {
  CmIdImpl* id = idimpl(pub);
  copy_addr(id->src, addr);
  if (!is_wildcard(id->src) && !cm_serves_device()) {
    errno = ENODEV;
    return -1;
  }
  memcpy(&pub->route.addr.src_addr, &id->src, sizeof id->src);
  if (!is_wildcard(id->src)) pub->verbs = shared_context();
  pub->port_num = 1;
  return 0;
}

int rdma_listen(rdma_cm_id* pub, int backlog) {
  CmIdImpl* id = idimpl(pub);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool pick = port_of(id->src) == 0;
  for (int tries = 0; tries < 100; tries++) {
    if (pick) set_port(id->src, 20000 + random_u32() % 40000);
    sockaddr_un un;
    socklen_t len = rendezvous(id->src, is_wildcard(id->src), id->src.ss_family, &un);
    if (bind(fd, reinterpret_cast<sockaddr*>(&un), len) == 0) {
      listen(fd, backlog > 0 ? backlog : 128);
      id->listen_fd = fd;
      id->state = IdState::Listening;
      memcpy(&pub->route.addr.src_addr, &id->src, sizeof id->src);
      listener_add(fd, id);
      id->tcp_listen_fd = tcp_listen(id->src, backlog > 0 ? backlog : 128);
      if (id->tcp_listen_fd >= 0) listener_add(id->tcp_listen_fd, id, tcp_greeting());
      log_debug("rdma_listen on %s", un.sun_path + 1);
      return 0;
    }
    if (!pick) break;
  }
  close(fd);
  errno = EADDRINUSE;
  return -1;
}

int rdma_resolve_addr(rdma_cm_id* pub, sockaddr* src, sockaddr* dst, int) {
  CmIdImpl* id = idimpl(pub);
  copy_addr(id->dst, dst);
  if (src) {
    copy_addr(id->src, src);
  } else {
    id->src = id->dst;
  }
  if (port_of(id->src) == 0 || !src) set_port(id->src, 32768 + random_u32() % 28000);
  memcpy(&pub->route.addr.src_addr, &id->src, sizeof id->src);
  memcpy(&pub->route.addr.dst_addr, &id->dst, sizeof id->dst);
  if (!cm_serves_device()) {
    push_event(id, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV);
    return 0;
  }
  pub->verbs = shared_context();
  pub->port_num = 1;
  id->state = IdState::AddrResolved;
  push_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  return 0;
}

int rdma_resolve_route(rdma_cm_id* pub, int) {
  CmIdImpl* id = idimpl(pub);
  pub->route.num_paths = 1;
  id->state = IdState::RouteResolved;
  push_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

int rdma_create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (!pd) pd = pub->pd ? pub->pd : ibv_alloc_pd(shared_context());
  ibv_qp* qp = ibv_create_qp(pd, attr);
  if (!qp) return -1;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  ibv_modify_qp(qp, &a, IBV_QP_STATE);
  pub->qp = qp;
  pub->pd = pd;
  pub->send_cq = attr->send_cq;
  pub->recv_cq = attr->recv_cq;
  pub->send_cq_channel = attr->send_cq->channel;
  pub->recv_cq_channel = attr->recv_cq->channel;
  return 0;
}

int rdma_create_qp_ex(rdma_cm_id* pub, ibv_qp_init_attr_ex* attr) {
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  int r = rdma_create_qp(pub, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
  attr->cap = a.cap;
  return r;
}

void rdma_destroy_qp(rdma_cm_id* pub) {
  if (pub->qp) ibv_destroy_qp(pub->qp);
  pub->qp = nullptr;
}

// What rdma_connect and rdma_accept keep of their own connection parameters for the QP. As
// librdmacm does, RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH (0xff) mean the device's maximum, and
// under a profile a depth beyond it is EINVAL (false).
static bool take_conn_param(CmIdImpl* id, const rdma_conn_param* param) {
  id->rnr_retry = param ? param->rnr_retry_count : 7;
  if (!param) return true;
  const Profile& p = profile();
  uint8_t resources = param->responder_resources, depth = param->initiator_depth;
  if (p.check_caps) {
    if ((resources != RDMA_MAX_RESP_RES && resources > p.max_qp_rd_atom) ||
        (depth != RDMA_MAX_INIT_DEPTH && depth > p.max_qp_init_rd_atom)) {
      log_debug("rdma_connect/accept: READ depths %u/%u beyond profile %s's %d/%d", resources,
                depth, p.name, p.max_qp_rd_atom, p.max_qp_init_rd_atom);
      return false;
    }
    if (resources == RDMA_MAX_RESP_RES) resources = static_cast<uint8_t>(p.max_qp_rd_atom);
    if (depth == RDMA_MAX_INIT_DEPTH) depth = static_cast<uint8_t>(p.max_qp_init_rd_atom);
  }
  id->read_depths.initiator_depth = depth;
  id->read_depths.responder_resources = resources;
  return true;
}

static int try_connect(const sockaddr_storage& dst, int tcp_timeout_ms) {
  int fam = dst.ss_family;
  struct {
    bool wild;
    int family;
  } order[] = {{false, fam}, {true, fam}, {true, AF_INET6}};
  for (auto& o : order) {
    if (env_on("SOFTRDMA_VIA_TCP")) break;
    if (o.family == AF_INET6 && fam == AF_INET && !o.wild) continue;
    sockaddr_un un;
    socklen_t len = rendezvous(dst, o.wild, o.family, &un);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&un), len) == 0) return fd;
    log_debug("connect to %s: %s", un.sun_path + 1, strerror(errno));
    close(fd);
  }
  return tcp_connect(dst, tcp_timeout_ms);
}

int rdma_connect(rdma_cm_id* pub, rdma_conn_param* param) {
  CmIdImpl* id = idimpl(pub);
  if ((param && param->private_data_len > 56) || !take_conn_param(id, param)) {
    errno = EINVAL;
    return -1;
  }
  // Real address and route resolution take milliseconds, time in which a server that closes
  // and reopens its listener between connections (perftest -R does) is back; softrdma's are
  // instant, so a connect finding no listener keeps trying for half a second before REJECTED.
  int fd = try_connect(id->dst, 500);
  for (int i = 0; fd < 0 && i < 50; i++) {
    usleep(10000);
    fd = try_connect(id->dst, 10);
  }
  if (fd < 0) {
    push_event(id, RDMA_CM_EVENT_REJECTED, 8);
    return 0;
  }
  id->state = IdState::Connecting;
  id->conn = conn_add(fd, id, false);
  send_connect(id->conn, Msg::Req, id, param);
  return 0;
}

int rdma_accept(rdma_cm_id* pub, rdma_conn_param* param) {
  CmIdImpl* id = idimpl(pub);
  if (!id->conn || id->state != IdState::Requested) {
    errno = EINVAL;
    return -1;
  }
  if ((param && param->private_data_len > 196) || !take_conn_param(id, param)) {
    errno = EINVAL;
    return -1;
  }
  if (pub->qp)
    qp_attach(pub->qp, id->conn, id->remote_qpn, id->peer_rnr_retry, id->read_depths, true);
  id->state = IdState::Accepting;
  send_connect(id->conn, Msg::Rep, id, param);
  return 0;
}

int rdma_reject(rdma_cm_id* pub, const void* pdata, uint8_t len) {
  CmIdImpl* id = idimpl(pub);
  if (!id->conn) {
    errno = EINVAL;
    return -1;
  }
  rdma_conn_param p{};
  p.private_data = pdata;
  p.private_data_len = len;
  send_connect(id->conn, Msg::Rej, id, &p);
  id->state = IdState::Disconnected;
  return 0;
}

int rdma_disconnect(rdma_cm_id* pub) {
  CmIdImpl* id = idimpl(pub);
  std::shared_ptr<Conn> c = id->conn;
  if (!c) {
    errno = EINVAL;
    return -1;
  }
  {
    std::lock_guard g(c->mu);
    if (c->local_disconnect) return 0;
    c->local_disconnect = true;
  }
  if (pub->qp) qp_disconnected(pub->qp, IBV_WC_WR_FLUSH_ERR);
  WireHdr d{Msg::Dreq, sizeof d};
  c->send(&d, sizeof d);
  return 0;
}

int rdma_establish(rdma_cm_id*) {
  return 0;
}

int rdma_notify(rdma_cm_id*, ibv_event_type) {
  return 0;
}

int rdma_set_option(rdma_cm_id*, int, int, void*, size_t) {
  return 0;
}

int rdma_get_cm_event(rdma_event_channel* ch, rdma_cm_event** event) {
  uint64_t v;
  if (read(ch->fd, &v, sizeof v) != sizeof v) return -1;
  EventChannel* c = chan(ch);
  std::lock_guard g(c->mu);
  if (c->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = c->events.front();
  c->events.pop_front();
  (*event)->id->event = *event;
  CmIdImpl* id = idimpl((*event)->id);
  std::lock_guard ig(id->mu);
  id->events_reported++;
  return 0;
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  CmIdImpl* id = idimpl(event->id);
  {
    std::lock_guard g(id->mu);
    id->events_acked++;
  }
  id->acked.notify_all();
  delete reinterpret_cast<CmEvent*>(event);
  return 0;
}

int rdma_init_qp_attr(rdma_cm_id* pub, ibv_qp_attr* attr, int* mask) {
  CmIdImpl* id = idimpl(pub);
  memset(attr, 0, sizeof *attr);
  attr->qp_state = attr->cur_qp_state;
  attr->qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  attr->dest_qp_num = id->remote_qpn;
  attr->path_mtu = IBV_MTU_4096;
  attr->rnr_retry = id->peer_rnr_retry;
  *mask = IBV_QP_ACCESS_FLAGS | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU | IBV_QP_RNR_RETRY;
  return 0;
}

uint16_t rdma_get_src_port(rdma_cm_id* pub) {
  return htons(port_of(idimpl(pub)->src));
}

uint16_t rdma_get_dst_port(rdma_cm_id* pub) {
  return htons(port_of(idimpl(pub)->dst));
}

ibv_context** rdma_get_devices(int* num) {
  if (!profile_usable("rdma_get_devices")) {
    errno = ENODEV;
    return nullptr;
  }
  auto** l = static_cast<ibv_context**>(calloc(2, sizeof(ibv_context*)));
  if (cm_serves_device()) l[0] = shared_context();
  if (num) *num = cm_serves_device() ? 1 : 0;
  return l;
}

void rdma_free_devices(ibv_context** list) {
  free(list);
}

const char* rdma_event_str(rdma_cm_event_type e) {
  static const char* const names[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  unsigned i = e;
  return i < sizeof names / sizeof *names ? names[i] : "UNKNOWN EVENT";
}

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                     rdma_addrinfo** res) {
  addrinfo h{};
  h.ai_socktype = SOCK_STREAM;
  h.ai_family = hints ? hints->ai_family : 0;
  bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
  if (passive) h.ai_flags = AI_PASSIVE;
  if (hints && (hints->ai_flags & RAI_NUMERICHOST)) h.ai_flags |= AI_NUMERICHOST;
  addrinfo* ai = nullptr;
  int r = getaddrinfo(node, service, &h, &ai);
  if (r) {
    errno = ENOENT;
    return r;
  }
  auto* out = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  out->ai_flags = hints ? hints->ai_flags : 0;
  out->ai_family = ai->ai_family;
  out->ai_qp_type = IBV_QPT_RC;
  out->ai_port_space = RDMA_PS_TCP;
  auto* addr = static_cast<sockaddr*>(calloc(1, sizeof(sockaddr_storage)));
  memcpy(addr, ai->ai_addr, ai->ai_addrlen);
  if (passive) {
    out->ai_src_addr = addr;
    out->ai_src_len = ai->ai_addrlen;
  } else {
    out->ai_dst_addr = addr;
    out->ai_dst_len = ai->ai_addrlen;
  }
  freeaddrinfo(ai);
  *res = out;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res);
    res = next;
  }
}

}  // extern "C"
