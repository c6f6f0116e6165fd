#include "tests/integration/fake_iser_target.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "initiator/transport/iser/iser_header.h"

namespace iser::test {

namespace {

// More than the initiator's receives, so that a test can hold every command it sends unanswered.
constexpr size_t kReceives = 512;
constexpr size_t kReceiveBytes = 16 * 1024;
constexpr size_t kSendBytes = 64 * 1024;
constexpr size_t kDataBytes = 1 << 20;
constexpr size_t kSendOffset = kReceives * kReceiveBytes;
constexpr size_t kDataOffset = kSendOffset + kSendBytes;
constexpr uint64_t kReceiveTag = 1ull << 63;
constexpr auto kPatience = std::chrono::seconds(10);

}  // namespace

FakeLoginBehavior FakeIserTarget::IserLogin() {
  FakeLoginBehavior login;
  // The TCP defaults, with iSER's two segment lengths in place of MaxRecvDataSegmentLength.
  std::erase(login.operational_keys, "MaxRecvDataSegmentLength=8192");
  login.operational_keys.insert(login.operational_keys.end(),
                                {"RDMAExtensions=Yes", "InitiatorRecvDataSegmentLength=8192",
                                 "TargetRecvDataSegmentLength=8192"});
  return login;
}

SessionOptions FakeIserSessionOptions(uint16_t port) {
  SessionOptions o = LoopbackOptions(port, "iqn.2026-11.io.iser-connect.test:fake-iser");
  o.transport = TransportKind::kIser;
  o.logout_timeout = std::chrono::milliseconds(200);
  return o;
}

FakeIserTarget::FakeIserTarget(uint16_t port, FakeLoginBehavior login, Script script,
                               uint8_t rnr_retry)
    : memory_(kDataOffset + kDataBytes), rnr_retry_(rnr_retry) {
  if (!Listen(port)) return;
  thread_ = std::thread(
      [this, login = std::move(login), script = std::move(script)] { Run(login, script); });
}

FakeIserTarget::~FakeIserTarget() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (id_ != nullptr) {
    rdma_disconnect(id_);
    if (id_->qp != nullptr) rdma_destroy_qp(id_);
  }
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  rdma_cm_event* ev = nullptr;
  while (channel_ != nullptr && rdma_get_cm_event(channel_, &ev) == 0) rdma_ack_cm_event(ev);
  if (id_ != nullptr) rdma_destroy_id(id_);
  if (listen_id_ != nullptr) rdma_destroy_id(listen_id_);
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
}

void FakeIserTarget::Join() {
  if (thread_.joinable()) thread_.join();
}

bool FakeIserTarget::Listen(uint16_t port) {
  channel_ = rdma_create_event_channel();
  if (channel_ == nullptr) {
    error_ = "no RDMA CM (run under tests/harness/iser-netns)";
    return false;
  }
  fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (rdma_create_id(channel_, &listen_id_, nullptr, RDMA_PS_TCP) != 0 ||
      rdma_bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&a)) != 0 ||
      rdma_listen(listen_id_, 1) != 0) {
    error_ = std::string("cannot listen for RDMA CM: ") + strerror(errno);
    return false;
  }
  return true;
}

bool FakeIserTarget::Accept() {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  auto next_event = [&](rdma_cm_event_type want, rdma_cm_event** out) {
    while (!stop_ && std::chrono::steady_clock::now() < deadline) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(channel_, &ev) == 0) {
        if (ev->event == want) {
          *out = ev;
          return true;
        }
        rdma_ack_cm_event(ev);
        continue;
      }
      pollfd p{channel_->fd, POLLIN, 0};
      poll(&p, 1, 20);
    }
    return false;
  };
  rdma_cm_event* req = nullptr;
  if (!next_event(RDMA_CM_EVENT_CONNECT_REQUEST, &req)) return false;
  id_ = req->id;
  rdma_ack_cm_event(req);
  pd_ = ibv_alloc_pd(id_->verbs);
  cq_ = ibv_create_cq(id_->verbs, static_cast<int>(kReceives + 64), nullptr, nullptr, 0);
  ibv_qp_init_attr qp{};
  qp.send_cq = cq_;
  qp.recv_cq = cq_;
  qp.qp_type = IBV_QPT_RC;
  qp.cap.max_send_wr = 64;
  qp.cap.max_recv_wr = kReceives;
  qp.cap.max_send_sge = 1;
  qp.cap.max_recv_sge = 1;
  if (pd_ == nullptr || cq_ == nullptr || rdma_create_qp(id_, pd_, &qp) != 0) return false;
  // REMOTE_WRITE: on iWARP the sink of an RDMA READ needs it.
  mr_ = ibv_reg_mr(pd_, memory_.data(), memory_.size(),
                   static_cast<int>(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  if (mr_ == nullptr) return false;
  for (size_t i = 0; i < kReceives; ++i) PostReceive();
  rdma_conn_param param{};
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 5;
  param.rnr_retry_count = rnr_retry_;
  if (rdma_accept(id_, &param) != 0) return false;
  rdma_cm_event* established = nullptr;
  if (!next_event(RDMA_CM_EVENT_ESTABLISHED, &established)) return false;
  rdma_ack_cm_event(established);
  return true;
}

void FakeIserTarget::PostReceive() {
  // Receives complete in posting order, so buffers are reused round-robin; the index travels in
  // the wr_id.
  const size_t slot = next_receive_++ % kReceives;
  ibv_sge sge{reinterpret_cast<uintptr_t>(memory_.data() + slot * kReceiveBytes),
              static_cast<uint32_t>(kReceiveBytes), mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kReceiveTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ibv_post_recv(id_->qp, &wr, &bad);
}

void FakeIserTarget::Run(FakeLoginBehavior login, Script script) {
  if (!Accept()) return;
  if (!AnswerLogin(login)) return;
  script(*this);
}

ibv_wc_status FakeIserTarget::WaitSend(uint64_t wr_id) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!stop_ && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc;
    if (ibv_poll_cq(cq_, 1, &wc) == 1) {
      if (wc.wr_id & kReceiveTag) {
        received_.push_back(wc);
      } else if (wc.wr_id == wr_id) {
        return wc.status;
      }
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return IBV_WC_GENERAL_ERR;
}

ibv_wc_status FakeIserTarget::Post(ibv_wr_opcode opcode, size_t offset, size_t length,
                                   uint32_t stag, uint64_t va) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(memory_.data() + offset), static_cast<uint32_t>(length),
              mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = next_wr_id_++;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = va;
  wr.wr.rdma.rkey = stag;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(id_->qp, &wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
  return WaitSend(wr.wr_id);
}

bool FakeIserTarget::Read(FakePdu* pdu) {
  return ReadWithin(pdu, kPatience);
}

bool FakeIserTarget::ReadWithin(FakePdu* pdu, std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (received_.empty()) {
    if (stop_ || std::chrono::steady_clock::now() > deadline) return false;
    ibv_wc wc;
    if (ibv_poll_cq(cq_, 1, &wc) == 1) {
      if (wc.wr_id & kReceiveTag) received_.push_back(wc);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const ibv_wc wc = received_.front();
  received_.erase(received_.begin());
  if (wc.status != IBV_WC_SUCCESS || wc.byte_len < kIserHeaderLength + kBhsLength) return false;
  const uint8_t* p = memory_.data() + (wc.wr_id & 0xffff) * kReceiveBytes;
  stags_.flags = p[0];
  stags_.write_stag = LoadBe32(p + 4);
  stags_.write_va = LoadBe64(p + 8);
  stags_.read_stag = LoadBe32(p + 16);
  stags_.read_va = LoadBe64(p + 20);
  std::memcpy(pdu->bhs.data(), p + kIserHeaderLength, kBhsLength);
  const uint8_t* data = p + kIserHeaderLength + kBhsLength;
  pdu->data.assign(data, data + pdu->bhs.data_segment_length());
  PostReceive();
  return true;
}

void FakeIserTarget::Send(const Bhs& bhs, const std::vector<uint8_t>& data) {
  // Sized once and filled in place: gcc 12 -fPIC misreads growing inserts here as out of bounds.
  std::vector<uint8_t> bytes(kIserHeaderLength + kBhsLength + data.size());
  BuildIserHeader(bytes.data(), kIserControl, 0, 0, 0, 0);
  std::memcpy(bytes.data() + kIserHeaderLength, bhs.b.data(), kBhsLength);
  std::copy(data.begin(), data.end(), bytes.begin() + kIserHeaderLength + kBhsLength);
  SendRaw(bytes);
}

ibv_wc_status FakeIserTarget::SendRaw(const std::vector<uint8_t>& bytes) {
  std::memcpy(memory_.data() + kSendOffset, bytes.data(), bytes.size());
  return Post(IBV_WR_SEND, kSendOffset, bytes.size(), 0, 0);
}

ibv_wc_status FakeIserTarget::RdmaWrite(uint32_t stag, uint64_t va,
                                        const std::vector<uint8_t>& data) {
  std::memcpy(memory_.data() + kDataOffset, data.data(), data.size());
  return Post(IBV_WR_RDMA_WRITE, kDataOffset, data.size(), stag, va);
}

ibv_wc_status FakeIserTarget::RdmaRead(uint32_t stag, uint64_t va, std::vector<uint8_t>* data) {
  const ibv_wc_status st = Post(IBV_WR_RDMA_READ, kDataOffset, data->size(), stag, va);
  if (st == IBV_WC_SUCCESS) {
    std::memcpy(data->data(), memory_.data() + kDataOffset, data->size());
  }
  return st;
}

}  // namespace iser::test
