// The datamover contract suite (tests/harness/datamover_contract.h) on the iSCSI/TCP datamovers,
// epoll and io_uring, against a peer that is a plain connected socket in the test, and on the fake
// datamover the session tests use, against its FakeConnection.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "initiator/transport/portal.h"
#include "initiator/transport/tcp/tcp_datamover_choice.h"
#include "tests/harness/datamover_contract.h"
#include "tests/harness/fake_datamover.h"

namespace iser::test {
namespace {

constexpr int kPatienceMs = 20000;

// The target's side of an iSCSI/TCP connection: the accepted socket, read and written by the
// test. Its receive buffer is small, so that what the datamover sends while the peer does not
// read waits in the datamover rather than in the kernel.
class TcpPeer : public DatamoverPeer {
 public:
  explicit TcpPeer(TcpDatamoverKind kind) : kind_(kind) {}
  ~TcpPeer() override {
    if (peer_ >= 0) close(peer_);
    if (listener_ >= 0) close(listener_);
  }

  std::unique_ptr<Datamover> Open() override {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(listener_, 0);
    // Set before listen, so that the accepted socket has it from the handshake on.
    const int small = 4096;
    setsockopt(listener_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback: " << strerror(errno);
      return nullptr;
    }
    std::unique_ptr<Datamover> dm = NewTcpDatamover(kind_);
    const Status connected = dm->Connect(Portal{"127.0.0.1", ntohs(addr.sin_port)},
                                         Clock::now() + std::chrono::seconds(10));
    if (!connected.ok()) {
      ADD_FAILURE() << connected.ToString();
      return nullptr;
    }
    peer_ = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(peer_, 0);
    ConnectionParams params;
    params.initiator_max_recv_data_segment_length = 16777215;
    params.target_max_recv_data_segment_length = 8192;
    const Status entered = dm->EnterFullFeature(params);
    if (!entered.ok()) {
      ADD_FAILURE() << entered.ToString();
      return nullptr;
    }
    return dm;
  }

  bool Receive(PeerPdu* pdu) override {
    if (!ReadExact(pdu->bhs.data(), kBhsLength)) return false;
    const Opcode op = pdu->bhs.opcode();
    const uint32_t dsl = pdu->bhs.data_segment_length();
    if (op != Opcode::kNopOut && op != Opcode::kScsiCommand && op != Opcode::kTaskMgmtRequest &&
        op != Opcode::kTextRequest && op != Opcode::kDataOut && op != Opcode::kLogoutRequest) {
      ADD_FAILURE() << "PDU " << received_ << " is not well framed: opcode 0x" << std::hex
                    << int{pdu->bhs.b[0]};
      return false;
    }
    std::vector<uint8_t> ahs(pdu->bhs.total_ahs_bytes());
    if (!ReadExact(ahs.data(), ahs.size())) return false;
    pdu->data.resize(dsl + PadLength(dsl));
    if (!ReadExact(pdu->data.data(), pdu->data.size())) return false;
    pdu->data.resize(dsl);
    ++received_;
    return true;
  }

  std::vector<PeerPdu> ReceiveRest() override {
    std::vector<PeerPdu> rest;
    PeerPdu p;
    while (Receive(&p)) rest.push_back(std::move(p));
    return rest;
  }

  // Three NOP-Outs of 4 MiB: more than the datamover's socket send buffer and the peer's small
  // receive buffer hold together.
  void Clog(Datamover* dm) override {
    const std::vector<uint8_t> data(4 << 20, 0x5a);
    Bhs nop;
    nop.set_opcode(Opcode::kNopOut, true);
    nop.set_flags(kFinalBit);
    nop.set_itt(kReservedTag);
    nop.set_data_segment_length(static_cast<uint32_t>(data.size()));
    for (int i = 0; i < 3; ++i) dm->SendControl(nop, data);
  }

  void BeginDataIn(const PeerPdu& command, std::span<const uint8_t> bytes) override {
    Bhs in;
    in.set_opcode(Opcode::kDataIn, false);
    in.set_itt(command.bhs.itt());
    in.set_data_segment_length(command.bhs.u32(bhs::kExpectedDataTransferLength));
    in.set_u32(bhs::kBufferOffset, 0);
    in.set_u32(bhs::kTtt, kReservedTag);
    SendAll(in.data(), kBhsLength);
    SendAll(bytes.data(), bytes.size());
  }

  // Sent without waiting (it may run on the I/O thread, which is the reader): what fits stays
  // queued on the datamover's socket.
  void QueueMoreDataIn(std::span<const uint8_t> bytes) override {
    const ssize_t n = send(peer_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    EXPECT_GT(n, 0) << "no room for more Data-In bytes: " << strerror(errno);
  }

  // The datamover's socket is shut down or about to close: sends may fail, which is fine.
  void WriteAfterHandBack(const PeerPdu&, std::span<const uint8_t> bytes) override {
    (void)send(peer_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }

 private:
  bool ReadExact(uint8_t* p, size_t n) {
    while (n > 0) {
      pollfd pfd{peer_, POLLIN, 0};
      if (poll(&pfd, 1, kPatienceMs) != 1) return false;
      const ssize_t got = recv(peer_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  void SendAll(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t sent = send(peer_, p, n, MSG_NOSIGNAL);
      ASSERT_GT(sent, 0) << strerror(errno);
      p += sent;
      n -= static_cast<size_t>(sent);
    }
  }

  const TcpDatamoverKind kind_;
  int listener_ = -1;
  int peer_ = -1;
  int received_ = 0;
};

// The fake datamover's FakeConnection: what it recorded is what "went out". It hands every PDU
// over when it is queued and copies the bytes then, so there is nothing to clog; it does not
// record unsolicited Data-Out bytes, only their count with the command.
class FakePeer : public DatamoverPeer {
 public:
  std::unique_ptr<Datamover> Open() override {
    Result<std::unique_ptr<Datamover>> dm = conn_.Factory()(TransportKind::kTcp);
    if (!dm.ok()) {
      ADD_FAILURE() << dm.status().ToString();
      return nullptr;
    }
    EXPECT_TRUE((*dm)->Connect(Portal{"192.0.2.1", 3260}, Clock::now()).ok());
    ConnectionParams params;
    params.target_max_recv_data_segment_length = 8192;
    EXPECT_TRUE((*dm)->EnterFullFeature(params).ok());
    return std::move(*dm);
  }

  bool Receive(PeerPdu* pdu) override {
    if (next_ == conn_.sent().size()) return false;
    const SentPdu& s = conn_.sent()[next_++];
    pdu->bhs = s.bhs;
    pdu->data = s.data;
    if (s.kind == SentPdu::Kind::kDataOut) {
      pdu->bhs = Bhs();
      pdu->bhs.set_opcode(Opcode::kDataOut, false);
      pdu->bhs.set_itt(s.bhs.itt());
      pdu->bhs.set_u32(bhs::kTtt, s.ttt);
      pdu->bhs.set_u32(bhs::kBufferOffset, s.offset);
      pdu->bhs.set_data_segment_length(s.length);
    }
    return true;
  }

  std::vector<PeerPdu> ReceiveRest() override {
    std::vector<PeerPdu> rest;
    PeerPdu p;
    while (Receive(&p)) rest.push_back(std::move(p));
    return rest;
  }

  bool sends_when_queued() const override { return true; }
  void Clog(Datamover*) override {}

  // The fake delivers whole PDUs: the first bytes are a Data-In of their own.
  void BeginDataIn(const PeerPdu& command, std::span<const uint8_t> bytes) override {
    Bhs in = conn_.Header(Opcode::kDataIn, command.bhs.itt());
    in.set_flags(0);
    conn_.Deliver(in, bytes);
  }
  // Nothing waits below the fake's events: a PDU is delivered whole or not at all.
  void QueueMoreDataIn(std::span<const uint8_t>) override {}
  // Delivered as a Data-In at the offset that follows; the fake drops it once failed. Once shut
  // down it would still deliver (the test plays the wire there), so the peer sends nothing: a
  // closed connection carries nothing.
  void WriteAfterHandBack(const PeerPdu& command, std::span<const uint8_t> bytes) override {
    if (conn_.shut_down()) return;
    Bhs in = conn_.Header(Opcode::kDataIn, command.bhs.itt());
    in.set_flags(0);
    in.set_u32(bhs::kDataSN, 1);
    in.set_u32(bhs::kBufferOffset, 2 * 64 * 1024);
    conn_.Deliver(in, bytes);
  }

 private:
  FakeConnection conn_;
  size_t next_ = 0;
};

INSTANTIATE_TEST_SUITE_P(
    Tcp, DatamoverContract,
    ::testing::Values(
        ContractPeer{"Epoll", [] { return std::make_unique<TcpPeer>(TcpDatamoverKind::kEpoll); }},
        ContractPeer{"IoUring",
                     [] { return std::make_unique<TcpPeer>(TcpDatamoverKind::kIoUring); }},
        ContractPeer{"Fake", [] { return std::make_unique<FakePeer>(); }}),
    ContractPeerName);

}  // namespace
}  // namespace iser::test
