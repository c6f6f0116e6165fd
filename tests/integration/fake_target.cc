#include "tests/integration/fake_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "initiator/pdu/digest.h"

namespace iser::test {

Bhs ResponseHeader(Opcode op, uint32_t itt, uint32_t statsn, uint32_t exp_cmdsn,
                   uint32_t max_cmdsn) {
  Bhs b;
  b.set_opcode(op, false);
  b.set_flags(kFinalBit);
  b.set_itt(itt);
  b.set_u32(bhs::kStatSN, statsn);
  b.set_u32(bhs::kExpCmdSN, exp_cmdsn);
  b.set_u32(bhs::kMaxCmdSN, max_cmdsn);
  return b;
}

bool ReadUntil(FakeTargetBase& t, Opcode op, FakePdu* pdu) {
  while (t.Read(pdu)) {
    if (pdu->bhs.opcode() == op) return true;
  }
  return false;
}

void AnswerTaskManagement(FakeTargetBase& t, const FakePdu& tmf, uint8_t response) {
  // The request is immediate: its CmdSN is the next one expected.
  Bhs answer = ResponseHeader(Opcode::kTaskMgmtResponse, tmf.bhs.itt(), t.next_statsn(),
                              tmf.bhs.u32(bhs::kCmdSN), tmf.bhs.u32(bhs::kCmdSN) + 63);
  answer.b[2] = response;
  t.Send(answer);
}

namespace {

// A listening socket on 127.0.0.1 with a port of the kernel's choosing.
int ListenOnLoopback(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(fd, 8);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

}  // namespace

FakeConnection::~FakeConnection() {
  if (fd_ >= 0) close(fd_);
}

void FakeConnection::Adopt(int fd) {
  fd_ = fd;
  // Each PDU is one write: without this, Nagle holds an answer back until the initiator's
  // delayed ACK of the previous one, 40 ms later.
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool FakeConnection::Readable(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

bool FakeConnection::ReadExact(void* p, size_t n) {
  auto* c = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = read(fd_, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool FakeConnection::Read(FakePdu* pdu) {
  if (!ReadExact(pdu->bhs.data(), kBhsLength)) return false;
  uint8_t digest[4];
  if (digest_ && !ReadExact(digest, 4)) return false;
  const uint32_t dsl = pdu->bhs.data_segment_length();
  pdu->data.resize(dsl + PadLength(dsl));
  if (!ReadExact(pdu->data.data(), pdu->data.size())) return false;
  pdu->data.resize(dsl);
  if (in_login_ && login_requests_++ == 0) first_login_request_ = pdu->bhs;
  return true;
}

void FakeConnection::SendRaw(const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = write(fd_, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void FakeConnection::Send(const Bhs& bhs, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(bhs.b.begin(), bhs.b.end());
  if (digest_) {
    uint8_t d[4];
    StoreDigest(d, Crc32c(bhs.data(), kBhsLength));
    out.insert(out.end(), d, d + 4);
  }
  out.insert(out.end(), data.begin(), data.end());
  out.resize(out.size() + PadLength(static_cast<uint32_t>(data.size())), 0);
  SendRaw(out.data(), out.size());
}

void FakeConnection::Close() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

bool FakeConnection::Login(const FakeLoginBehavior& login) {
  in_login_ = true;
  const bool ok = AnswerLogin(login);
  in_login_ = false;
  if (ok) digest_ = login.header_digest;
  return ok;
}

FakeTarget::FakeTarget(LoginBehavior login, Script script) {
  listen_fd_ = ListenOnLoopback(&port_);
  thread_ = std::thread(
      [this, login = std::move(login), script = std::move(script)] { Run(login, script); });
}

FakeTarget::~FakeTarget() {
  shutdown(listen_fd_, SHUT_RDWR);
  Close();
  thread_.join();
  close(listen_fd_);
}

void FakeTarget::Run(LoginBehavior login, Script script) {
  const int fd = accept(listen_fd_, nullptr, nullptr);
  if (fd < 0) return;
  Adopt(fd);
  if (!Login(login)) return;
  script(*this);
}

FakePortal::FakePortal(Handler handler) : handler_(std::move(handler)) {
  listen_fd_ = ListenOnLoopback(&port_);
  thread_ = std::thread([this] { Run(); });
}

FakePortal::~FakePortal() {
  stop_ = true;
  // Wakes accept; a handler blocked in a read is woken by the initiator's close or its own end.
  shutdown(listen_fd_, SHUT_RDWR);
  thread_.join();
  close(listen_fd_);
}

void FakePortal::set_handler(Handler handler) {
  MutexLock lock(&mu_);
  handler_ = std::move(handler);
}

void FakePortal::Run() {
  while (!stop_) {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    ++accepted_;
    Handler handler;
    {
      MutexLock lock(&mu_);
      handler = handler_;
    }
    FakeConnection c(fd);
    handler(c);
  }
}

FakeLoginBehavior RefusingLogin(uint8_t status_class, uint8_t status_detail,
                                std::vector<std::string> status_keys) {
  FakeLoginBehavior login;
  login.status_class = status_class;
  login.status_detail = status_detail;
  login.status_keys = std::move(status_keys);
  return login;
}

bool FakeTargetBase::AnswerLogin(const FakeLoginBehavior& login) {
  FakePdu req;
  for (;;) {
    if (!Read(&req)) return false;
    const uint8_t csg = (req.bhs.flags() >> 2) & 3;
    Bhs rsp = ResponseHeader(Opcode::kLoginResponse, req.bhs.itt(), next_statsn(),
                             req.bhs.u32(bhs::kCmdSN), req.bhs.u32(bhs::kCmdSN) + 63);
    std::memcpy(&rsp.b[8], &req.bhs.b[8], 6);  // ISID
    rsp.set_u16(14, 0x1234);
    rsp.b[36] = login.status_class;
    rsp.b[37] = login.status_detail;
    std::string text;
    if (csg == 0) {
      text = std::string("AuthMethod=None") + '\0' + "TargetPortalGroupTag=1" + '\0';
      rsp.set_flags(kTransitBit | 0 << 2 | 1);
    } else {
      for (const std::string& k : login.operational_keys) text += k + '\0';
      rsp.set_flags(kTransitBit | 1 << 2 | 3);
    }
    if (login.status_class != 0) {
      text.clear();
      for (const std::string& k : login.status_keys) text += k + '\0';
    }
    rsp.set_data_segment_length(static_cast<uint32_t>(text.size()));
    Send(rsp, std::vector<uint8_t>(text.begin(), text.end()));
    if (login.status_class != 0) return false;
    if (csg == 1) return true;
  }
}

SessionOptions LoopbackOptions(uint16_t port, const std::string& target_name) {
  SessionOptions o;
  o.portal = {"127.0.0.1", port};
  o.target_name = target_name;
  o.initiator_name = "iqn.2026-11.io.iser-connect.test:initiator";
  o.login_timeout = std::chrono::seconds(5);
  return o;
}

}  // namespace iser::test
